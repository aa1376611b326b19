//! Client status (CSDS): `envoy.service.status.v3.ClientStatusDiscoveryService`, so that the tools
//! that ask a control plane what its clients hold (`istioctl x internal-debug`-style, grpcio-csds
//! dumps, `grpcdebug`) work against tributary.
//!
//! The view is built on demand from what the streams already publish for `/debug/syncz`
//! ([`Connections`]) and the newest snapshot; nothing extra is kept per stream except, for SotW
//! EDS/RDS, the names of the last response (so that a NACK marks exactly those). Per connection, in
//! the `generic_xds_configs` form (CS-1..CS-4 in `docs/client-status.md`):
//!
//! - every subscribed resource (for a wildcard, every resource of the client's view), with
//!   `client_status` ACKED (the last response was acknowledged), REQUESTED (subscribed, no response
//!   sent yet or not yet acknowledged), DOES_NOT_EXIST (a response went out and the resource is not
//!   in the snapshot), or NACKED (the client's last request for the type rejected the response
//!   that carried it; `error_state` holds its message and the rejected version);
//! - the resource itself (`xds_config`, unless `exclude_resource_contents`) as the newest snapshot
//!   holds it: the server does not copy what it sent, so a resource changed since the last response
//!   shows its current content with the acknowledged version.
//!
//! Requests select clients with `node_matchers` on the node id (exact, prefix, suffix, contains);
//! regular expressions and metadata matchers are refused with `INVALID_ARGUMENT` rather than
//! silently ignored. `StreamClientStatus` answers each request on the stream the same way.

use std::pin::Pin;
use std::sync::Arc;

use envoy_types::pb::envoy::admin::v3::{ClientResourceStatus, UpdateFailureState};
use envoy_types::pb::envoy::config::core::v3::Node;
use envoy_types::pb::envoy::service::status::v3::client_config::GenericXdsConfig;
use envoy_types::pb::envoy::service::status::v3::client_status_discovery_service_server::{
    ClientStatusDiscoveryService, ClientStatusDiscoveryServiceServer,
};
use envoy_types::pb::envoy::service::status::v3::{
    ClientConfig, ClientStatusRequest, ClientStatusResponse, ConfigStatus,
};
use envoy_types::pb::envoy::r#type::matcher::v3::{NodeMatcher, StringMatcher, string_matcher};
use envoy_types::pb::google::protobuf::Timestamp;
use futures::Stream;
use tokio_stream::StreamExt;
use tonic::{Request, Response, Status, Streaming};

use super::connections::{ConnectionInfo, Connections, SyncStatus, TypeStatus};
use crate::envoy::ResourceType;
use crate::snapshot::{Snapshot, SnapshotStore};

/// The CSDS service over the live connections and the snapshot store.
#[derive(Clone)]
pub struct CsdsService {
    pub(super) connections: Connections,
    pub(super) store: SnapshotStore,
}

impl CsdsService {
    /// The tonic service to mount (CSDS is not on the push path; tonic's generated server is fine).
    pub fn into_server(self) -> ClientStatusDiscoveryServiceServer<CsdsService> {
        ClientStatusDiscoveryServiceServer::new(self)
    }

    /// The answer to one request.
    pub fn status(&self, req: &ClientStatusRequest) -> Result<ClientStatusResponse, Status> {
        for m in &req.node_matchers {
            check_matcher(m)?;
        }
        let snapshot = self.store.load();
        let config = self
            .connections
            .list()
            .iter()
            .filter(|c| {
                req.node_matchers.is_empty() || req.node_matchers.iter().any(|m| matches(m, c))
            })
            .map(|c| client_config(c, snapshot.as_deref(), !req.exclude_resource_contents))
            .collect();
        Ok(ClientStatusResponse { config })
    }
}

type StatusStream = Pin<Box<dyn Stream<Item = Result<ClientStatusResponse, Status>> + Send>>;

#[tonic::async_trait]
impl ClientStatusDiscoveryService for CsdsService {
    type StreamClientStatusStream = StatusStream;

    async fn stream_client_status(
        &self,
        request: Request<Streaming<ClientStatusRequest>>,
    ) -> Result<Response<StatusStream>, Status> {
        let this = self.clone();
        let out = request
            .into_inner()
            .map(move |req| req.and_then(|r| this.status(&r)));
        Ok(Response::new(Box::pin(out)))
    }

    async fn fetch_client_status(
        &self,
        request: Request<ClientStatusRequest>,
    ) -> Result<Response<ClientStatusResponse>, Status> {
        self.status(request.get_ref()).map(Response::new)
    }
}

/// Refuses matchers this server cannot evaluate (CS-4): better an error than a wrong list.
fn check_matcher(m: &NodeMatcher) -> Result<(), Status> {
    if !m.node_metadatas.is_empty() {
        return Err(Status::invalid_argument(
            "node_matchers[].node_metadatas is not supported; match on node_id",
        ));
    }
    match m.node_id.as_ref().and_then(|s| s.match_pattern.as_ref()) {
        Some(
            string_matcher::MatchPattern::SafeRegex(_) | string_matcher::MatchPattern::Custom(_),
        ) => Err(Status::invalid_argument(
            "node_matchers[].node_id: only exact, prefix, suffix and contains are supported",
        )),
        _ => Ok(()),
    }
}

fn matches(m: &NodeMatcher, c: &ConnectionInfo) -> bool {
    m.node_id
        .as_ref()
        .is_none_or(|s| string_matches(s, &c.node_id))
}

fn string_matches(m: &StringMatcher, value: &str) -> bool {
    let (value, fold) = match m.ignore_case {
        true => (value.to_lowercase(), true),
        false => (value.to_owned(), false),
    };
    let norm = |p: &str| match fold {
        true => p.to_lowercase(),
        false => p.to_owned(),
    };
    match &m.match_pattern {
        None => true,
        Some(string_matcher::MatchPattern::Exact(p)) => value == norm(p),
        Some(string_matcher::MatchPattern::Prefix(p)) => value.starts_with(&norm(p)),
        Some(string_matcher::MatchPattern::Suffix(p)) => value.ends_with(&norm(p)),
        Some(string_matcher::MatchPattern::Contains(p)) => value.contains(&norm(p)),
        // Refused up front by `check_matcher`.
        Some(
            string_matcher::MatchPattern::SafeRegex(_) | string_matcher::MatchPattern::Custom(_),
        ) => false,
    }
}

fn timestamp(t: std::time::SystemTime) -> Option<Timestamp> {
    let d = t.duration_since(std::time::UNIX_EPOCH).ok()?;
    Some(Timestamp {
        seconds: i64::try_from(d.as_secs()).ok()?,
        nanos: i32::try_from(d.subsec_nanos()).ok()?,
    })
}

/// One connection's status.
fn client_config(c: &ConnectionInfo, snapshot: Option<&Snapshot>, contents: bool) -> ClientConfig {
    let node = Node {
        id: c.node_id.to_string(),
        cluster: c.cluster.to_string(),
        metadata: c.metadata.as_deref().cloned(),
        ..Default::default()
    };
    let mut generic_xds_configs = Vec::new();
    for (ty, st) in &c.types {
        if st.requested {
            resources_of(*ty, st, c, snapshot, contents, &mut generic_xds_configs);
        }
    }
    ClientConfig {
        node: Some(node),
        generic_xds_configs,
        client_scope: String::new(),
        ..Default::default()
    }
}

/// The per-resource entries of type `ty` on one connection (CS-2, CS-3).
fn resources_of(
    ty: ResourceType,
    st: &TypeStatus,
    c: &ConnectionInfo,
    snapshot: Option<&Snapshot>,
    contents: bool,
    out: &mut Vec<GenericXdsConfig>,
) {
    let res = snapshot.map(|s| s.resources_for(ty, c.view));
    let mut names: Vec<Arc<str>> = st.names.iter().cloned().collect();
    if st.wildcard
        && let Some(res) = &res
    {
        names.extend(
            res.entries
                .keys()
                .filter(|n| !st.names.contains(*n))
                .cloned(),
        );
        names.sort();
    }
    let config_status = match st.status() {
        SyncStatus::Synced => ConfigStatus::Synced,
        SyncStatus::Stale => ConfigStatus::Stale,
        SyncStatus::NotSent => ConfigStatus::NotSent,
        SyncStatus::Error => ConfigStatus::Error,
    };
    let nacked = |name: &str| {
        st.last_error.is_some()
            && st
                .last_names
                .as_ref()
                .is_none_or(|sent| sent.iter().any(|n| &**n == name))
    };
    let acked = st.sent_nonce.is_some() && st.acked_nonce == st.sent_nonce;
    for name in names {
        let entry = res.as_ref().and_then(|r| r.get(&name).cloned());
        let client_status = match (&entry, st.sent_nonce.is_some()) {
            (_, false) => ClientResourceStatus::Requested,
            (None, true) => ClientResourceStatus::DoesNotExist,
            (Some(_), true) if nacked(&name) => ClientResourceStatus::Nacked,
            (Some(_), true) if acked => ClientResourceStatus::Acked,
            (Some(_), true) => ClientResourceStatus::Requested,
        };
        let error_state =
            (client_status == ClientResourceStatus::Nacked).then(|| UpdateFailureState {
                details: st.last_error.clone().unwrap_or_default(),
                version_info: st.sent_version.as_deref().unwrap_or_default().to_owned(),
                last_update_attempt: st.sent_at.and_then(timestamp),
                ..Default::default()
            });
        let version_info = match client_status {
            ClientResourceStatus::Acked => {
                st.acked_version.as_deref().unwrap_or_default().to_owned()
            }
            _ => String::new(),
        };
        out.push(GenericXdsConfig {
            type_url: ty.type_url().to_string(),
            name: name.to_string(),
            version_info,
            xds_config: entry
                .filter(|_| contents && client_status != ClientResourceStatus::DoesNotExist)
                .map(|e| e.resource.to_any()),
            last_updated: st.sent_at.and_then(timestamp),
            config_status: config_status as i32,
            client_status: client_status as i32,
            error_state,
            ..Default::default()
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exact(s: &str) -> StringMatcher {
        StringMatcher {
            match_pattern: Some(string_matcher::MatchPattern::Exact(s.into())),
            ..Default::default()
        }
    }

    #[test]
    fn node_id_matchers() {
        // CS-4: exact / prefix / suffix / contains, case folding on request.
        assert!(string_matches(&exact("a"), "a"));
        assert!(!string_matches(&exact("a"), "ab"));
        let prefix = StringMatcher {
            match_pattern: Some(string_matcher::MatchPattern::Prefix("Sidecar~".into())),
            ignore_case: true,
        };
        assert!(string_matches(&prefix, "sidecar~10.0.0.1~x"));
        let regex = NodeMatcher {
            node_id: Some(StringMatcher {
                match_pattern: Some(string_matcher::MatchPattern::SafeRegex(Default::default())),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(
            check_matcher(&regex).unwrap_err().code(),
            tonic::Code::InvalidArgument
        );
    }
}
