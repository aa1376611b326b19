//! What tributary served, kept to be served again by the peers: one simulated proxy (the first)
//! hands every response it receives to a [`Recorder`], which keeps the current resources per type
//! as their encoded bytes. A [`Recorded`] copy is taken once the storm has synced and after each
//! change, so a peer is given exactly the resources tributary served, state after state.
//!
//! While a change is measured it also keeps a [`Trace`] of that proxy's stream: every response
//! (type and size), every request it sent in reply, and which response carried the change. The
//! floor replays it (`replay.rs`), so the floor sends and receives the same bytes per client.

use std::collections::BTreeMap;
use std::sync::Mutex;

use bytes::Bytes;

use crate::replay::{Event, Trace};
use crate::wire::{CDS, EDS, LDS, RDS, Response};

/// Type URLs in the order the recorder keeps them.
pub(crate) const TYPES: [&str; 4] = [CDS, EDS, LDS, RDS];

/// One mesh state: per type (CDS, EDS, LDS, RDS), resource name → encoded resource message.
pub(crate) type Recorded = [BTreeMap<String, Bytes>; 4];

/// The resources one proxy currently holds.
#[derive(Default)]
pub(crate) struct Recorder {
    state: Mutex<Recorded>,
    /// The stream's events since [`start_trace`](Self::start_trace), if tracing.
    trace: Mutex<Option<Trace>>,
}

/// Route configuration name of listener `0.0.0.0_<port>` (tributary's naming, see `proxy.rs`).
fn route_of(listener: &str) -> Option<&str> {
    listener.rsplit_once('_').map(|(_, p)| p)
}

impl Recorder {
    /// Takes in a response the proxy received (SotW or delta).
    pub(crate) fn record(&self, r: &Response, delta: bool) {
        let Some(i) = TYPES.iter().position(|t| *t == r.type_url) else {
            return;
        };
        self.traced(Event::Response {
            type_index: i,
            bytes: r.len,
        });
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let set = &mut state[i];
        // SotW CDS and LDS responses carry the whole set; EDS and RDS, and every delta response,
        // only what they name.
        if !delta && (i == 0 || i == 2) {
            set.clear();
        }
        for k in 0..r.resources.len() {
            if let Some((name, value)) = r.resource(k, delta) {
                set.insert(name, value);
            }
        }
        for name in &r.removed {
            set.remove(name);
        }
        // A cluster or listener gone takes its endpoints or routes with it.
        if i == 0 {
            let clusters = std::mem::take(&mut state[0]);
            state[1].retain(|name, _| clusters.contains_key(name));
            state[0] = clusters;
        } else if i == 2 {
            let routes: Vec<String> = state[2]
                .keys()
                .filter_map(|l| route_of(l).map(str::to_owned))
                .collect();
            state[3].retain(|name, _| routes.contains(name));
        }
    }

    /// The proxy sent `request` (kept as is: the floor's clients send the same bytes).
    pub(crate) fn request(&self, request: &Bytes) {
        self.traced(Event::Request(request.clone()));
    }

    /// The proxy acknowledged the response carrying the measured change (the last one traced).
    pub(crate) fn hit(&self) {
        self.traced(Event::Hit);
    }

    /// Starts a new trace (a change is about to be made).
    pub(crate) fn start_trace(&self) {
        *self.trace.lock().unwrap_or_else(|e| e.into_inner()) = Some(Trace::default());
    }

    /// Ends the trace and returns it (empty if none was started).
    pub(crate) fn take_trace(&self) -> Trace {
        self.trace
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
            .unwrap_or_default()
    }

    fn traced(&self, event: Event) {
        if let Some(t) = self
            .trace
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_mut()
        {
            t.push(event);
        }
    }

    /// The current state.
    pub(crate) fn snapshot(&self) -> Recorded {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use envoy_types::pb::envoy::config::cluster::v3::Cluster;
    use envoy_types::pb::envoy::config::endpoint::v3::ClusterLoadAssignment;
    use envoy_types::pb::envoy::service::discovery::v3::{
        DeltaDiscoveryResponse, DiscoveryResponse, Resource as DeltaResource,
    };
    use envoy_types::pb::google::protobuf::Any;
    use prost::Message;

    use super::*;

    fn cluster(name: &str) -> Any {
        Any {
            type_url: CDS.into(),
            value: Cluster {
                name: name.into(),
                ..Default::default()
            }
            .encode_to_vec(),
        }
    }

    fn cla(name: &str) -> Any {
        Any {
            type_url: EDS.into(),
            value: ClusterLoadAssignment {
                cluster_name: name.into(),
                ..Default::default()
            }
            .encode_to_vec(),
        }
    }

    fn sotw(type_url: &str, resources: Vec<Any>) -> Response {
        let msg = DiscoveryResponse {
            type_url: type_url.into(),
            resources,
            ..Default::default()
        };
        Response::parse(Bytes::from(msg.encode_to_vec()), false).unwrap()
    }

    #[test]
    fn sotw_sets_replace_and_take_their_endpoints_along() {
        let rec = Recorder::default();
        rec.record(&sotw(CDS, vec![cluster("a"), cluster("b")]), false);
        rec.record(&sotw(EDS, vec![cla("a"), cla("b")]), false);
        rec.record(&sotw(EDS, vec![cla("b")]), false);
        let s = rec.snapshot();
        assert_eq!(s[0].keys().collect::<Vec<_>>(), ["a", "b"]);
        assert_eq!(s[1].keys().collect::<Vec<_>>(), ["a", "b"]);
        assert_eq!(
            Cluster::decode(s[0]["b"].clone()).unwrap().name,
            "b",
            "the value is the resource message itself"
        );
        rec.record(&sotw(CDS, vec![cluster("b")]), false);
        let s = rec.snapshot();
        assert_eq!(s[0].keys().collect::<Vec<_>>(), ["b"]);
        assert_eq!(s[1].keys().collect::<Vec<_>>(), ["b"]);
    }

    #[test]
    fn a_trace_keeps_the_stream_only_while_a_change_is_measured() {
        let rec = Recorder::default();
        rec.record(&sotw(CDS, vec![cluster("a")]), false);
        rec.start_trace();
        let cds = sotw(CDS, vec![cluster("a"), cluster("b")]);
        rec.record(&cds, false);
        rec.request(&Bytes::from_static(b"ack"));
        rec.hit();
        let trace = rec.take_trace();
        assert_eq!(
            trace,
            [
                Event::Response {
                    type_index: 0,
                    bytes: cds.len
                },
                Event::Request(Bytes::from_static(b"ack")),
                Event::Hit,
            ]
        );
        rec.request(&Bytes::from_static(b"later"));
        assert!(
            rec.take_trace().is_empty(),
            "nothing is kept between changes"
        );
    }

    #[test]
    fn delta_responses_add_and_remove_by_name() {
        let rec = Recorder::default();
        let delta = |resources: Vec<&str>, removed: Vec<&str>| {
            let msg = DeltaDiscoveryResponse {
                type_url: CDS.into(),
                resources: resources
                    .into_iter()
                    .map(|n| DeltaResource {
                        name: n.into(),
                        resource: Some(cluster(n)),
                        ..Default::default()
                    })
                    .collect(),
                removed_resources: removed.into_iter().map(String::from).collect(),
                ..Default::default()
            };
            Response::parse(Bytes::from(msg.encode_to_vec()), true).unwrap()
        };
        rec.record(&delta(vec!["a", "b"], vec![]), true);
        rec.record(&delta(vec!["c"], vec!["a"]), true);
        assert_eq!(rec.snapshot()[0].keys().collect::<Vec<_>>(), ["b", "c"]);
    }
}
