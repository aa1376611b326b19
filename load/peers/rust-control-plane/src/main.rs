//! A peer server for `tributary-load`: rust-control-plane's snapshot cache and ADS service, fed the
//! load tool's mesh through the library's own `Cache::set_snapshot`.
//!
//! `peer-rust-control-plane --xds ADDR --control ADDR` prints one line,
//! `protocols=sotw`, then serves ADS on `--xds` and the load tool's control protocol
//! (`load/peers/control.rs`) on `--control`. The library keeps one snapshot per node id and its
//! resources as decoded messages, so each update is decoded into typed resources and set for
//! every node the load tool named; its delta methods are `unimplemented!()`, hence SotW only.

#[path = "../../control.rs"]
mod control;

use std::net::{SocketAddr, TcpListener};
use std::sync::Arc;

use data_plane_api::envoy::config::cluster::v3::Cluster;
use data_plane_api::envoy::config::endpoint::v3::ClusterLoadAssignment;
use data_plane_api::envoy::config::listener::v3::Listener;
use data_plane_api::envoy::config::route::v3::RouteConfiguration;
use data_plane_api::envoy::service::discovery::v3::aggregated_discovery_service_server::AggregatedDiscoveryServiceServer;
use prost::Message;
use rust_control_plane::cache::Cache;
use rust_control_plane::service::common::Service;
use rust_control_plane::snapshot::type_url;
use rust_control_plane::snapshot::{Resource, Resources, Snapshot};

type Error = Box<dyn std::error::Error + Send + Sync>;

/// A resource of `type_url` decoded into the library's typed form.
fn resource(type_url: &str, value: &[u8]) -> Result<Resource, Error> {
    Ok(match type_url {
        type_url::CLUSTER => Resource::Cluster(Cluster::decode(value)?),
        type_url::ENDPOINT => Resource::Endpoint(ClusterLoadAssignment::decode(value)?),
        type_url::LISTENER => Resource::Listener(Listener::decode(value)?),
        type_url::ROUTE => Resource::Route(RouteConfiguration::decode(value)?),
        other => return Err(format!("type {other} is not served by this peer").into()),
    })
}

/// What the control connection has set so far.
#[derive(Default)]
struct State {
    nodes: Vec<String>,
    snapshot: Snapshot,
}

impl State {
    fn apply(&mut self, update: control::Update) -> Result<(), Error> {
        if !update.nodes.is_empty() {
            self.nodes = update.nodes;
        }
        for set in update.types {
            let mut resources = Resources::new(set.version);
            for r in set.resources {
                let typed = resource(&set.type_url, &r.value)?;
                resources.items.insert(r.name, typed);
            }
            self.snapshot.insert(set.type_url, resources);
        }
        Ok(())
    }
}

/// Serves the control protocol, one connection at a time, until the process is killed.
fn control_loop(listener: TcpListener, cache: Arc<Cache>, rt: tokio::runtime::Handle) {
    let mut state = State::default();
    for conn in listener.incoming() {
        let Ok(mut conn) = conn else { continue };
        while let Ok(Some(frame)) = control::read_frame(&mut conn) {
            let result = control::Update::decode(frame.as_slice())
                .map_err(Error::from)
                .and_then(|u| state.apply(u));
            if result.is_ok() {
                // The library's API: one snapshot per node id.
                for node in &state.nodes {
                    rt.block_on(cache.set_snapshot(node, state.snapshot.clone()));
                }
            }
            let reply = result.err().map(|e| e.to_string()).unwrap_or_default();
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
    // `ads = false`: in 0.1.2 the ADS consistency check holds back every request that names all
    // the snapshot's resources or none (wildcard CDS/LDS), so with `true` no proxy ever syncs.
    let cache = Arc::new(Cache::new(false));
    let control_listener = TcpListener::bind(control_addr)?;
    let xds_listener = rt.block_on(tokio::net::TcpListener::bind(xds))?;
    {
        let cache = Arc::clone(&cache);
        let handle = rt.handle().clone();
        std::thread::spawn(move || control_loop(control_listener, cache, handle));
    }
    println!("protocols=sotw");
    let incoming = tokio_stream::wrappers::TcpListenerStream::new(xds_listener);
    rt.block_on(
        tonic::transport::Server::builder()
            .add_service(AggregatedDiscoveryServiceServer::new(Service::new(cache)))
            .serve_with_incoming(incoming),
    )?;
    Ok(())
}
