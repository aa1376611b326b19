//! A simulated proxy: one ADS stream behaving like Envoy. Wildcard CDS and LDS, then EDS for every
//! cluster received and RDS for every listener received, every response acknowledged. SotW proxies
//! repeat their EDS/RDS names in every request, as Envoy does; delta proxies subscribe what a CDS/LDS
//! response adds and unsubscribe what it removes.
//!
//! Simplifications, so that 5,000 of them fit beside the server on one machine: every generated
//! service is STATIC, so every cluster is an EDS cluster and every listener `0.0.0.0_<port>` uses
//! route configuration `<port>` (tributary's naming); name lists derived from the same response
//! version are computed once and shared by all proxies ([`NameCache`]).

use std::collections::{HashSet, VecDeque};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http::uri::PathAndQuery;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::Channel;

mod marker;
mod vhds;

use crate::probe::Probe;
use crate::recorder::Recorder;
use crate::wire::{self, CDS, EDS, LDS, RDS, RawCodec, Response};

const SOTW_PATH: &str =
    "/envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources";
const DELTA_PATH: &str =
    "/envoy.service.discovery.v3.AggregatedDiscoveryService/DeltaAggregatedResources";

/// Requests a proxy may have queued; it sends at most a few per response.
const REQUEST_QUEUE: usize = 8;
/// Name lists kept per kind: a run only ever needs the newest few.
const CACHE_LEN: usize = 16;

/// A list of resource names with its encodings, shared by every proxy that derives it.
#[derive(Debug, Default)]
pub(crate) struct NameList {
    pub names: HashSet<String>,
    /// As SotW `resource_names` (3) or delta `resource_names_subscribe` (3).
    pub encoded: Bytes,
    /// As delta `resource_names_unsubscribe` (4).
    pub encoded_unsub: Bytes,
}

impl NameList {
    fn new(names: Vec<String>) -> Self {
        Self {
            encoded: wire::encode_names(3, &names),
            encoded_unsub: wire::encode_names(4, &names),
            names: names.into_iter().collect(),
        }
    }
}

/// (kind, key) of a cached name list.
type CacheKey = (&'static str, String);

/// Name lists by (kind, key): computed by the first proxy that needs one.
#[derive(Default)]
pub(crate) struct NameCache {
    recent: Mutex<VecDeque<(CacheKey, Arc<NameList>)>>,
}

impl NameCache {
    fn get(
        &self,
        kind: &'static str,
        key: String,
        make: impl FnOnce() -> Vec<String>,
    ) -> Arc<NameList> {
        let k = (kind, key);
        if let Some((_, l)) = self.lock().iter().find(|(x, _)| *x == k) {
            return Arc::clone(l);
        }
        let list = Arc::new(NameList::new(make()));
        let mut recent = self.lock();
        recent.push_back((k, Arc::clone(&list)));
        while recent.len() > CACHE_LEN {
            recent.pop_front();
        }
        list
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<(CacheKey, Arc<NameList>)>> {
        self.recent.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Route configuration names of `0.0.0.0_<port>` listeners.
fn routes_of(listeners: impl IntoIterator<Item = String>) -> Vec<String> {
    listeners
        .into_iter()
        .filter_map(|l| l.rsplit_once('_').map(|(_, p)| p.to_owned()))
        .collect()
}

/// What one proxy tracks.
struct State {
    id: usize,
    delta: bool,
    tx: mpsc::Sender<Bytes>,
    probe: Arc<Probe>,
    cache: Arc<NameCache>,
    /// SotW: the names subscribed per EDS/RDS; delta: unused.
    eds: Arc<NameList>,
    rds: Arc<NameList>,
    /// Last (version, nonce) received per type, in CDS/EDS/LDS/RDS order.
    last: [(String, String); 4],
    /// Bytes of the last response of each type (the config held, roughly).
    held_bytes: [usize; 4],
    got: [bool; 4],
    synced: bool,
    epoch_seen: u64,
    /// Keeps what this proxy receives, for the peers (one proxy per run has one).
    recorder: Option<Arc<Recorder>>,
    /// Delta only: virtual hosts over VHDS (`vhds.rs`).
    vhds: Option<vhds::Vhds>,
}

fn index(type_url: &str) -> Option<usize> {
    [CDS, EDS, LDS, RDS].iter().position(|t| *t == type_url)
}

impl State {
    async fn send(&self, req: Bytes) -> Result<(), String> {
        if let Some(rec) = &self.recorder {
            rec.request(&req);
        }
        self.tx
            .send(req)
            .await
            .map_err(|_| "request stream closed".to_owned())
    }

    async fn sotw_request(
        &self,
        i: usize,
        names: &Bytes,
        node: Option<&Bytes>,
    ) -> Result<(), String> {
        let type_url = [CDS, EDS, LDS, RDS][i];
        let (version, nonce) = &self.last[i];
        self.send(wire::sotw_request(type_url, version, nonce, names, node))
            .await
    }

    async fn on_sotw(&mut self, r: Response) -> Result<(), String> {
        let Some(i) = index(&r.type_url) else {
            return Ok(());
        };
        if let Some(rec) = &self.recorder {
            rec.record(&r, false);
        }
        self.last[i] = (r.version.clone(), r.nonce.clone());
        self.held_bytes[i] = r.len;
        self.got[i] = true;
        let empty = Bytes::new();
        let mut full_set = None;
        match i {
            0 => {
                let list = self.cache.get("cds", r.version.clone(), || r.names(false));
                self.sotw_request(0, &empty, None).await?;
                // the same version's list is the same shared value for every proxy: compare pointers first
                if !Arc::ptr_eq(&list, &self.eds) && list.names != self.eds.names {
                    self.eds = Arc::clone(&list);
                    self.got[1] = false;
                    let names = self.eds.encoded.clone();
                    self.sotw_request(1, &names, None).await?;
                }
                full_set = Some(list);
            }
            2 => {
                let list = self.cache.get("rds-of-lds", r.version.clone(), || {
                    routes_of(r.names(false))
                });
                self.sotw_request(2, &empty, None).await?;
                if !Arc::ptr_eq(&list, &self.rds) && list.names != self.rds.names {
                    self.rds = list;
                    self.got[3] = false;
                    let names = self.rds.encoded.clone();
                    self.sotw_request(3, &names, None).await?;
                }
            }
            _ => {
                let names = if i == 1 { &self.eds } else { &self.rds }.encoded.clone();
                self.sotw_request(i, &names, None).await?;
            }
        }
        self.check(&r, full_set.as_deref());
        Ok(())
    }

    async fn on_delta(&mut self, r: Response) -> Result<(), String> {
        if r.type_url == vhds::VHDS {
            self.on_virtual_hosts(&r).await?;
            self.check(&r, None);
            return Ok(());
        }
        let Some(i) = index(&r.type_url) else {
            return Ok(());
        };
        if let Some(rec) = &self.recorder {
            rec.record(&r, true);
        }
        self.last[i] = (r.version.clone(), r.nonce.clone());
        self.held_bytes[i] = self.held_bytes[i].max(r.len);
        self.got[i] = true;
        let empty = Bytes::new();
        self.send(wire::delta_request(
            &r.type_url,
            &r.nonce,
            &empty,
            &empty,
            None,
        ))
        .await?;
        if i == 0 || i == 2 {
            let key = format!(
                "{}/{}/{}/{}",
                r.version,
                r.resources.len(),
                r.name(0, true).unwrap_or_default(),
                r.removed.join(",")
            );
            let kind = if i == 0 { "eds-sub" } else { "rds-sub" };
            let added = self.cache.get(kind, key.clone(), || {
                let names = r.names(true);
                if i == 0 { names } else { routes_of(names) }
            });
            let removed =
                self.cache
                    .get(if i == 0 { "eds-unsub" } else { "rds-unsub" }, key, || {
                        if i == 0 {
                            r.removed.clone()
                        } else {
                            routes_of(r.removed.clone())
                        }
                    });
            if !added.names.is_empty() || !removed.names.is_empty() {
                let target = [CDS, EDS, LDS, RDS][i + 1];
                self.got[i + 1] = false;
                self.send(wire::delta_request(
                    target,
                    "",
                    &added.encoded,
                    &removed.encoded_unsub,
                    None,
                ))
                .await?;
            }
        }
        if i == 3 {
            self.after_routes().await?;
        }
        self.check(&r, None);
        Ok(())
    }

    /// After acknowledging `r`: is it the armed change, and is this proxy synced now?
    fn check(&mut self, r: &Response, full_set: Option<&NameList>) {
        if let Some(i) = index(&r.type_url) {
            self.probe.response(i);
        }
        let (virtual_hosts, vhds_bytes) = self.virtual_hosts_held();
        if !self.synced && self.got.iter().all(|g| *g) && virtual_hosts {
            self.synced = true;
            self.probe
                .synced(self.held_bytes.iter().sum::<usize>() + vhds_bytes);
        }
        let Some((epoch, marker)) = self.probe.marker() else {
            return;
        };
        if epoch <= self.epoch_seen {
            return;
        }
        let proxy = marker::Proxy {
            delta: self.delta,
            vhds: self.vhds.is_some(),
            full_set,
        };
        let hit = marker::hits(&marker, r, &proxy);
        if hit {
            if let Some(rec) = &self.recorder {
                rec.hit();
            }
            self.epoch_seen = epoch;
            self.probe.saw(r.len);
        }
    }
}

/// Runs one simulated proxy until its stream ends; failures are reported to `probe`. With a
/// `recorder`, every response it receives is also recorded there.
/// A delta proxy with `vhds` takes its virtual hosts over VHDS.
pub(crate) async fn run(
    channel: Channel,
    id: usize,
    (delta, vhds): (bool, bool),
    probe: Arc<Probe>,
    cache: Arc<NameCache>,
    recorder: Option<Arc<Recorder>>,
) {
    let kind = (delta, delta && vhds);
    if let Err(e) = run_inner(channel, id, kind, Arc::clone(&probe), cache, recorder).await {
        probe.fail(format!("proxy {id}: {e}"));
    }
}

async fn run_inner(
    channel: Channel,
    id: usize,
    (delta, vhds): (bool, bool),
    probe: Arc<Probe>,
    cache: Arc<NameCache>,
    recorder: Option<Arc<Recorder>>,
) -> Result<(), String> {
    let mut grpc = tonic::client::Grpc::new(channel).max_decoding_message_size(usize::MAX);
    grpc.ready().await.map_err(|e| e.to_string())?;
    let (tx, rx) = mpsc::channel(REQUEST_QUEUE);
    let mut state = State {
        id,
        delta,
        tx,
        probe,
        cache,
        eds: Arc::default(),
        rds: Arc::default(),
        last: Default::default(),
        held_bytes: [0; 4],
        got: [false; 4],
        synced: false,
        epoch_seen: 0,
        recorder,
        vhds: vhds.then(vhds::Vhds::default),
    };
    let node_id = format!("load-{}", state.id);
    let node = if vhds {
        vhds::node(&node_id)
    } else {
        wire::node(&node_id)
    };
    let empty = Bytes::new();
    if delta {
        state
            .send(wire::delta_request(CDS, "", &empty, &empty, Some(&node)))
            .await?;
        state
            .send(wire::delta_request(LDS, "", &empty, &empty, None))
            .await?;
    } else {
        state.sotw_request(0, &empty, Some(&node)).await?;
        state.sotw_request(2, &empty, None).await?;
    }
    let path = PathAndQuery::from_static(if delta { DELTA_PATH } else { SOTW_PATH });
    let mut stream = grpc
        .streaming(
            tonic::Request::new(ReceiverStream::new(rx)),
            path,
            RawCodec { delta },
        )
        .await
        .map_err(|e| e.to_string())?
        .into_inner();
    while let Some(r) = stream.message().await.map_err(|e| e.to_string())? {
        if delta {
            state.on_delta(r).await?;
        } else {
            state.on_sotw(r).await?;
        }
    }
    Ok(())
}
