//! REST-JSON xDS: `POST /v3/discovery:clusters`, `:endpoints`, `:listeners`, `:routes` on the xDS
//! port, beside gRPC (HTTP/1.1 or HTTP/2), answered from the same snapshot (REST-1..REST-4 in
//! `docs/rest-xds.md`).
//!
//! A request is a `DiscoveryRequest` in the proto3 JSON mapping; the answer is a
//! `DiscoveryResponse` in the same mapping, each resource an `Any` with its `@type`. Its
//! `version_info` is the snapshot's type version, the same string a gRPC client gets; a request
//! carrying that version is answered `304 Not Modified` with no body, which Envoy's REST
//! subscription takes as "nothing new" (REST-2). Names work as in SotW: LDS and CDS without names
//! are everything, EDS and RDS carry the names asked for that exist. Clusters and listeners point
//! their EDS and RDS at the REST source instead of ADS ([`crate::envoy::for_rest`], REST-3).
//!
//! REST is stateless: a poll holds no server state, appears in no connection registry (CSDS,
//! `/debug/syncz`), and every answer is rebuilt from the snapshot (clusters and listeners are
//! re-encoded with their REST sources). That costs the answer's size per poll, which is what
//! polling costs anyway.

use axum::body::{Body, Bytes};
use axum::routing::post;
use envoy_types::pb::envoy::service::discovery::v3::{DiscoveryRequest, DiscoveryResponse};
use http::{Response, StatusCode, header};
use tonic::service::Routes;

use super::node::NodeInfo;
use crate::envoy::json;
use crate::envoy::{ResourceType, for_rest};
use crate::snapshot::SnapshotStore;

/// The REST path of each type, as Envoy's REST subscription posts to.
const PATHS: [(ResourceType, &str); 4] = [
    (ResourceType::Cluster, "/v3/discovery:clusters"),
    (ResourceType::Endpoint, "/v3/discovery:endpoints"),
    (ResourceType::Listener, "/v3/discovery:listeners"),
    (ResourceType::Route, "/v3/discovery:routes"),
];

/// The REST-JSON discovery endpoints over a snapshot store.
#[derive(Clone)]
pub struct RestService {
    pub(super) store: SnapshotStore,
}

impl RestService {
    /// `routes` with the four REST paths added (anything else still goes to gRPC).
    pub fn mount(self, mut routes: Routes) -> Routes {
        for (ty, path) in PATHS {
            let this = self.clone();
            let router = std::mem::take(routes.axum_router_mut());
            *routes.axum_router_mut() = router.route(
                path,
                post(move |body: Bytes| {
                    let this = this.clone();
                    async move { this.respond(ty, &body) }
                }),
            );
        }
        routes
    }

    /// The HTTP answer to one REST request for `ty` with JSON `body`.
    pub fn respond(&self, ty: ResourceType, body: &[u8]) -> Response<Body> {
        match self.discover(ty, body) {
            Ok(Some(json)) => reply(StatusCode::OK, json),
            Ok(None) => reply(StatusCode::NOT_MODIFIED, String::new()),
            Err((status, message)) => reply(
                status,
                serde_json::json!({ "code": status.as_u16(), "message": message }).to_string(),
            ),
        }
    }

    /// The response JSON, `None` for "not modified", or the HTTP error.
    fn discover(
        &self,
        ty: ResourceType,
        body: &[u8],
    ) -> Result<Option<String>, (StatusCode, String)> {
        let bad = |m: String| (StatusCode::BAD_REQUEST, m);
        let req: DiscoveryRequest = json::from_json(body).map_err(|e| bad(e.to_string()))?;
        if !req.type_url.is_empty() && req.type_url != ty.type_url() {
            return Err(bad(format!(
                "this path serves {}, the request says type_url {:.256}",
                ty.type_url(),
                req.type_url
            )));
        }
        let node = NodeInfo::from_first(req.node.as_ref()).map_err(|e| bad(e.to_string()))?;
        let Some(snapshot) = self.store.load() else {
            // TRANS-11: nothing is served before the registries have synced.
            return Err((
                StatusCode::SERVICE_UNAVAILABLE,
                "no snapshot yet: registries have not synced".into(),
            ));
        };
        let res = snapshot.resources_for(ty, node.view());
        let version = res.version.to_string();
        if req.version_info == version {
            return Ok(None);
        }
        let entries: Vec<_> = if req.resource_names.is_empty() && ty.legacy_wildcard() {
            res.entries.values().collect()
        } else {
            req.resource_names
                .iter()
                .filter_map(|n| res.get(n))
                .collect()
        };
        let mut resources = Vec::with_capacity(entries.len());
        for e in entries {
            let any = for_rest(&e.resource)
                .map_err(|e| (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?;
            resources.push(any);
        }
        let response = DiscoveryResponse {
            version_info: version,
            resources,
            type_url: ty.type_url().to_string(),
            ..Default::default()
        };
        json::to_json(&response)
            .map(|v| Some(v.to_string()))
            .map_err(|e| (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))
    }
}

fn reply(status: StatusCode, body: String) -> Response<Body> {
    let mut r = Response::new(Body::from(body));
    *r.status_mut() = status;
    if status != StatusCode::NOT_MODIFIED {
        r.headers_mut().insert(
            header::CONTENT_TYPE,
            header::HeaderValue::from_static("application/json"),
        );
    }
    r
}
