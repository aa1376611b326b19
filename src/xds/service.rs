//! The gRPC services, as raw tower services that mount next to generated ones, in tonic's `Routes`
//! (tributary's connection loop) or on a `tonic::transport::Server`.
//!
//! Not tonic's generated server: it keeps a per-stream encode buffer as large as the largest
//! message ever sent (`docs/floor.md`). Requests are read by `request.rs`, which keeps no buffer
//! at the size of the largest request; responses are [`ResponseBody`]s of shared pre-encoded
//! bytes. Each service answers both its SotW and its delta method.

use std::convert::Infallible;
use std::future::{Ready, ready};
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio_util::sync::CancellationToken;
use tonic::Status;
use tonic::server::NamedService;
use tonic::transport::server::TcpConnectInfo;

use super::body::{self, BodyWriter, ResponseBody};
use super::cache::FullSetCache;
use super::connections::Connections;
use super::delta::Delta;
use super::diffs::DiffCache;
use super::names::SharedNames;
use super::request::{Auth, Requests};
use super::sotw::Sotw;
use super::stream::{self, Params, Protocol};
use crate::envoy::ResourceType;
use crate::snapshot::SnapshotStore;
use crate::tls::{IdentityMapping, XdsConnectInfo};

/// What every service of one server shares.
pub(crate) struct Shared {
    pub store: SnapshotStore,
    pub connections: Connections,
    pub drain: CancellationToken,
    pub max_decoding_message_size: usize,
    pub identity: IdentityMapping,
    pub trust_domain: Option<Arc<str>>,
    pub serve_mcp: bool,
    pub full_sets: Arc<FullSetCache>,
    pub diffs: Arc<DiffCache>,
    pub names: Arc<SharedNames>,
    pub eds_warm_wait: std::time::Duration,
}

type Request = http::Request<tonic::body::Body>;
type Response = http::Response<tonic::body::Body>;

impl Shared {
    /// Serves one call: `sotw_method` opens a SotW stream, `delta_method` a delta stream, of type
    /// `fixed` (`None` = ADS).
    fn call(
        &self,
        req: Request,
        sotw_method: &str,
        delta_method: &str,
        fixed: Option<ResourceType>,
    ) -> Response {
        let method = req.uri().path().rsplit('/').next().unwrap_or_default();
        let delta = method == delta_method;
        if !delta && method != sotw_method {
            return Status::unimplemented(format!("method {method} is not implemented"))
                .into_http();
        }
        if self.drain.is_cancelled() {
            return Status::unavailable("server is shutting down").into_http();
        }
        if !self.store.is_ready() {
            // TRANS-11, BUG-9: never serve before registries have synced.
            return Status::unavailable("server is not ready to serve discovery information")
                .into_http();
        }
        let tls = req.extensions().get::<XdsConnectInfo>();
        let peer = tls
            .map(|t| &t.tcp)
            .or_else(|| req.extensions().get::<TcpConnectInfo>())
            .and_then(TcpConnectInfo::remote_addr);
        let auth = tls.map(|t| Auth {
            identity: Arc::clone(&t.identity),
            mapping: self.identity,
            trust_domain: self.trust_domain.clone(),
        });
        let (writer, mut body) = body::pair();
        let params = Params {
            store: self.store.clone(),
            connections: self.connections.clone(),
            drain: self.drain.clone(),
            fixed,
            peer,
            auth,
            serve_mcp: self.serve_mcp,
            full_sets: Arc::clone(&self.full_sets),
            diffs: Arc::clone(&self.diffs),
            names: Arc::clone(&self.names),
            eds_warm_wait: self.eds_warm_wait,
        };
        let limit = self.max_decoding_message_size;
        let prune = PruneOnDrop(Arc::clone(&self.full_sets));
        let body_in = req.into_body();
        let task = if delta {
            let requests = Requests::new(body_in, limit);
            let task = stream_task::<Delta>(params, requests, writer, prune);
            tokio::spawn(task)
        } else {
            let requests = Requests::new(body_in, limit);
            let task = stream_task::<Sotw>(params, requests, writer, prune);
            tokio::spawn(task)
        };
        body.own_task(task);
        grpc_response(body)
    }
}

/// One stream's task: the stream, then the cache pruned (`prune` is dropped after the stream's
/// future, also when the task is aborted, so the snapshots the stream held are released before the
/// cache looks).
///
/// Takes the stream's inputs rather than its future: an `async` block that captured a
/// `stream::run(..)` future and awaited it would lay the future out twice in the task, once as the
/// capture and once as the pinned future being awaited (~6 KB per stream, MEM-3).
async fn stream_task<P: Protocol>(
    params: Params,
    requests: Requests<P::Request>,
    writer: BodyWriter,
    prune: PruneOnDrop,
) {
    let _prune = prune;
    stream::run::<P>(params, requests, writer).await;
}

/// Prunes the whole-type cache when a stream ends, however it ends: the last stream holding an
/// old snapshot takes that snapshot's sets with it (MEM-1).
struct PruneOnDrop(Arc<FullSetCache>);

impl Drop for PruneOnDrop {
    fn drop(&mut self) {
        self.0.prune();
    }
}

fn grpc_response(body: ResponseBody) -> Response {
    let mut resp = http::Response::new(tonic::body::Body::new(body));
    resp.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/grpc"),
    );
    resp
}

macro_rules! xds_service {
    ($(#[$doc:meta])* $name:ident, $service:literal, $method:literal, $delta:literal, $fixed:expr) => {
        $(#[$doc])*
        #[derive(Clone)]
        pub struct $name {
            pub(crate) shared: Arc<Shared>,
        }

        impl NamedService for $name {
            const NAME: &'static str = $service;
        }

        impl tower::Service<Request> for $name {
            type Response = Response;
            type Error = Infallible;
            type Future = Ready<Result<Response, Infallible>>;

            fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
                Poll::Ready(Ok(()))
            }

            fn call(&mut self, req: Request) -> Self::Future {
                ready(Ok(self.shared.call(req, $method, $delta, $fixed)))
            }
        }
    };
}

xds_service!(
    /// `AggregatedDiscoveryService`: ADS, SotW or delta, over one stream for every type.
    AdsService,
    "envoy.service.discovery.v3.AggregatedDiscoveryService",
    "StreamAggregatedResources",
    "DeltaAggregatedResources",
    None
);
xds_service!(
    /// `ClusterDiscoveryService`: `StreamClusters` and `DeltaClusters` (CDS only).
    CdsService,
    "envoy.service.cluster.v3.ClusterDiscoveryService",
    "StreamClusters",
    "DeltaClusters",
    Some(ResourceType::Cluster)
);
xds_service!(
    /// `EndpointDiscoveryService`: `StreamEndpoints` and `DeltaEndpoints` (EDS only).
    EdsService,
    "envoy.service.endpoint.v3.EndpointDiscoveryService",
    "StreamEndpoints",
    "DeltaEndpoints",
    Some(ResourceType::Endpoint)
);
xds_service!(
    /// `ListenerDiscoveryService`: `StreamListeners` and `DeltaListeners` (LDS only).
    LdsService,
    "envoy.service.listener.v3.ListenerDiscoveryService",
    "StreamListeners",
    "DeltaListeners",
    Some(ResourceType::Listener)
);
xds_service!(
    /// `RouteDiscoveryService`: `StreamRoutes` and `DeltaRoutes` (RDS only).
    RdsService,
    "envoy.service.route.v3.RouteDiscoveryService",
    "StreamRoutes",
    "DeltaRoutes",
    Some(ResourceType::Route)
);

#[cfg(test)]
mod tests {
    use super::*;

    fn params(store: &SnapshotStore) -> Params {
        Params {
            store: store.clone(),
            connections: Connections::default(),
            drain: CancellationToken::new(),
            fixed: None,
            peer: None,
            auth: None,
            serve_mcp: false,
            full_sets: Arc::new(FullSetCache::default()),
            diffs: Arc::new(DiffCache::default()),
            names: Arc::new(SharedNames::default()),
            eds_warm_wait: std::time::Duration::from_secs(1),
        }
    }

    /// Sizes in bytes, for protocol `P`: the task's future, the stream's future, and the shape
    /// this replaced (an async block awaiting a captured stream future).
    fn task_sizes<P: Protocol>() -> (usize, usize, usize) {
        let store = SnapshotStore::new();
        let limit = 1 << 20;
        let (writer, _body) = body::pair();
        let requests = Requests::<P::Request>::new(tonic::body::Body::empty(), limit);
        let run = stream::run::<P>(params(&store), requests, writer);
        let (writer, _body) = body::pair();
        let requests = Requests::<P::Request>::new(tonic::body::Body::empty(), limit);
        let prune = PruneOnDrop(Arc::new(FullSetCache::default()));
        let task = stream_task::<P>(params(&store), requests, writer, prune);
        let run_size = std::mem::size_of_val(&run);
        let prune = PruneOnDrop(Arc::new(FullSetCache::default()));
        let captured = async move {
            let _prune = prune;
            run.await;
        };
        let sizes = (std::mem::size_of_val(&task), run_size);
        (sizes.0, sizes.1, std::mem::size_of_val(&captured))
    }

    #[test]
    fn a_stream_task_holds_its_future_once() {
        // MEM-3: the task adds its inputs and the prune guard to the stream's future, not a
        // second copy of that future (an async block awaiting a captured future holds two).
        for (name, (task, run, captured)) in [
            ("sotw", task_sizes::<Sotw>()),
            ("delta", task_sizes::<Delta>()),
        ] {
            let bound = run + run / 4;
            assert!(
                task < bound,
                "{name}: the task's future is {task} bytes for a stream future of {run}"
            );
            // The measure tells the shapes apart: the old one is over the bound.
            assert!(captured >= bound, "{name}: {captured} bytes captured");
        }
    }
}
