//! A peer server for `tributary-load`: nebucloud-xds's `ShardedCache` and `XdsServer` (SotW and
//! delta ADS; crates xds-cache, xds-core and xds-server, which its facade re-exports), fed the load tool's mesh through the library's own `Cache::set_snapshot`.
//!
//! `peer-nebucloud-xds --xds ADDR --control ADDR` prints one line, `protocols=sotw,delta`, then
//! serves ADS on `--xds` and the load tool's control protocol (`load/peers/control.rs`) on
//! `--control`. Resources are kept as the encoded bytes the load tool sends (the library's
//! `Resource` trait, implemented here by [`Raw`]); a snapshot is set for every node id the load
//! tool named, as the cache is keyed by node.

#[path = "../../control.rs"]
mod control;

use std::net::{SocketAddr, TcpListener};
use std::sync::Arc;

use prost::Message;
use xds_cache::{Cache, ShardedCache, Snapshot};
use xds_core::{BoxResource, NodeHash, Resource, TypeUrl};
use xds_server::XdsServer;

type Error = Box<dyn std::error::Error + Send + Sync>;

/// Concurrent requests per connection the server allows: above the load tool's streams per
/// connection (100 by default), so none of them waits for another to end.
const STREAMS_PER_CONNECTION: u32 = 10_000;

/// A resource kept as its encoded message.
#[derive(Debug)]
struct Raw {
    name: String,
    any: prost_types::Any,
}

impl Resource for Raw {
    fn type_url(&self) -> &str {
        &self.any.type_url
    }

    fn name(&self) -> &str {
        &self.name
    }

    fn encode(&self) -> Result<prost_types::Any, Box<dyn std::error::Error + Send + Sync>> {
        Ok(self.any.clone())
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

/// One type's resources and version, as last set.
struct TypeState {
    type_url: String,
    version: String,
    resources: Vec<BoxResource>,
}

/// What the control connection has set so far.
#[derive(Default)]
struct State {
    nodes: Vec<NodeHash>,
    types: Vec<TypeState>,
}

impl State {
    fn apply(&mut self, update: control::Update) {
        if !update.nodes.is_empty() {
            self.nodes = update.nodes.iter().map(|n| NodeHash::from_id(n)).collect();
        }
        for set in update.types {
            let resources: Vec<BoxResource> = set
                .resources
                .into_iter()
                .map(|r| {
                    Arc::new(Raw {
                        name: r.name,
                        any: prost_types::Any {
                            type_url: set.type_url.clone(),
                            value: r.value,
                        },
                    }) as BoxResource
                })
                .collect();
            let state = TypeState {
                type_url: set.type_url,
                version: set.version,
                resources,
            };
            match self.types.iter_mut().find(|t| t.type_url == state.type_url) {
                Some(t) => *t = state,
                None => self.types.push(state),
            }
        }
    }

    fn snapshot(&self) -> Snapshot {
        let mut builder = Snapshot::builder();
        for t in &self.types {
            builder = builder.resources_with_version(
                TypeUrl::new(t.type_url.clone()),
                t.version.clone(),
                t.resources.iter().cloned(),
            );
        }
        builder.build()
    }
}

/// Serves the control protocol, one connection at a time, until the process is killed.
fn control_loop(listener: TcpListener, cache: Arc<ShardedCache>) {
    let mut state = State::default();
    for conn in listener.incoming() {
        let Ok(mut conn) = conn else { continue };
        while let Ok(Some(frame)) = control::read_frame(&mut conn) {
            let reply = match control::Update::decode(frame.as_slice()) {
                Ok(update) => {
                    state.apply(update);
                    // The library's API: one snapshot per node (its resources shared by `Arc`).
                    for node in &state.nodes {
                        cache.set_snapshot(*node, state.snapshot());
                    }
                    String::new()
                }
                Err(e) => e.to_string(),
            };
            if control::write_frame(&mut conn, reply.as_bytes()).is_err() {
                break;
            }
        }
    }
}

fn addr_arg(args: &[String], flag: &str) -> Result<SocketAddr, Error> {
    let i = args
        .iter()
        .position(|a| a == flag)
        .ok_or_else(|| format!("{flag} ADDR is required"))?;
    let value = args
        .get(i + 1)
        .ok_or_else(|| format!("{flag} needs a value"))?;
    Ok(value.parse()?)
}

fn main() -> Result<(), Error> {
    let args: Vec<String> = std::env::args().collect();
    let xds = addr_arg(&args, "--xds")?;
    let control_addr = addr_arg(&args, "--control")?;
    let rt = tokio::runtime::Runtime::new()?;
    let cache = Arc::new(ShardedCache::new());
    let control_listener = TcpListener::bind(control_addr)?;
    {
        let cache = Arc::clone(&cache);
        std::thread::spawn(move || control_loop(control_listener, cache));
    }
    let server = XdsServer::builder()
        .cache(cache)
        .enable_sotw()
        .enable_delta()
        .max_concurrent_streams(STREAMS_PER_CONNECTION)
        .build()?;
    println!("protocols=sotw,delta");
    rt.block_on(server.serve(xds))?;
    Ok(())
}
