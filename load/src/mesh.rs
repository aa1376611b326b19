//! The generated mesh: S services × P ports × E endpoints, written into tributary's mock registry
//! through its control API, and the changes whose convergence is measured.

use std::fmt;

use anyhow::Context as _;
use futures::{StreamExt, TryStreamExt};
use tonic::transport::Channel;
use tributary_registries::mock::proto::mock_registry_client::MockRegistryClient;
use tributary_registries::mock::proto::{
    DeleteServiceRequest, Endpoint, Port, Protocol, Service, SetEndpointsRequest,
    UpsertServiceRequest,
};

/// Control-API calls in flight while generating: enough to keep the registry busy without
/// queueing thousands of requests at once.
const UPSERTS_IN_FLIGHT: usize = 32;

/// First listener port of the generated services; ports are shared by every service, as HTTP
/// services on a few well-known ports are in real meshes.
const FIRST_PORT: u16 = 20000;

/// The mesh size.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub(crate) struct MeshSpec {
    pub services: usize,
    pub ports: usize,
    pub endpoints: usize,
}

impl MeshSpec {
    /// `tiny` = 10×1×2 (smoke runs), `small` = 100×1×5, `medium` = 1,000×2×10,
    /// `large` = 10,000×2×10.
    pub(crate) fn preset(name: &str) -> anyhow::Result<Self> {
        let (services, ports, endpoints) = match name {
            "tiny" => (10, 1, 2),
            "small" => (100, 1, 5),
            "medium" => (1_000, 2, 10),
            "large" => (10_000, 2, 10),
            other => anyhow::bail!("unknown preset {other:?}: tiny, small, medium or large"),
        };
        Ok(Self {
            services,
            ports,
            endpoints,
        })
    }

    /// Hostname of service `i`.
    pub(crate) fn hostname(i: usize) -> String {
        format!("svc-{i:05}.load.svc.cluster.local")
    }

    /// The cluster name Envoy sees for service `i` on its first port.
    pub(crate) fn cluster(i: usize) -> String {
        format!("outbound|{FIRST_PORT}||{}", Self::hostname(i))
    }

    fn service(&self, i: usize, generation: u32) -> Service {
        let ports: Vec<Port> = (0..self.ports)
            .map(|p| Port {
                name: format!("http-{p}"),
                port: u32::from(FIRST_PORT) + p as u32,
                protocol: Protocol::Http as i32,
            })
            .collect();
        Service {
            hostname: Self::hostname(i),
            ports,
            endpoints: self.endpoints_of(i, generation),
            ..Default::default()
        }
    }

    /// Endpoints of service `i`; `generation` shifts their ports, which is how a change is made.
    fn endpoints_of(&self, i: usize, generation: u32) -> Vec<Endpoint> {
        (0..self.endpoints)
            .map(|e| {
                let n = i * self.endpoints + e;
                Endpoint {
                    // 10.x.y.z from the running index: unique for up to 16M endpoints
                    address: format!("10.{}.{}.{}", (n >> 16) & 255, (n >> 8) & 255, n & 255),
                    ports: (0..self.ports)
                        .map(|p| (format!("http-{p}"), 8000 + p as u32 + generation))
                        .collect(),
                    ..Default::default()
                }
            })
            .collect()
    }
}

impl fmt::Display for MeshSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}×{}×{}", self.services, self.ports, self.endpoints)
    }
}

/// The mock registry's control API.
#[derive(Clone)]
pub(crate) struct Control {
    client: MockRegistryClient<Channel>,
}

impl Control {
    pub(crate) async fn connect(addr: std::net::SocketAddr) -> anyhow::Result<Self> {
        let client = MockRegistryClient::connect(format!("http://{addr}"))
            .await
            .with_context(|| format!("is tributary's control API listening on {addr}?"))?;
        Ok(Self { client })
    }

    /// Writes the whole mesh.
    pub(crate) async fn generate(&self, spec: &MeshSpec) -> anyhow::Result<()> {
        futures::stream::iter(0..spec.services)
            .map(|i| {
                let mut client = self.client.clone();
                let service = spec.service(i, 0);
                async move {
                    client
                        .upsert_service(UpsertServiceRequest {
                            service: Some(service),
                        })
                        .await
                }
            })
            .buffer_unordered(UPSERTS_IN_FLIGHT)
            .try_collect::<Vec<_>>()
            .await
            .context("generating the mesh")?;
        Ok(())
    }

    /// Changes one endpoint port of service `i` (an EDS-only change).
    pub(crate) async fn change_endpoints(
        &self,
        spec: &MeshSpec,
        i: usize,
        generation: u32,
    ) -> anyhow::Result<()> {
        self.client
            .clone()
            .set_endpoints(SetEndpointsRequest {
                hostname: MeshSpec::hostname(i),
                endpoints: spec.endpoints_of(i, generation),
            })
            .await?;
        Ok(())
    }

    /// Adds service `i` (new cluster, listener/route change).
    pub(crate) async fn add_service(&self, spec: &MeshSpec, i: usize) -> anyhow::Result<()> {
        self.client
            .clone()
            .upsert_service(UpsertServiceRequest {
                service: Some(spec.service(i, 0)),
            })
            .await?;
        Ok(())
    }

    /// Deletes service `i`.
    pub(crate) async fn delete_service(&self, i: usize) -> anyhow::Result<()> {
        self.client
            .clone()
            .delete_service(DeleteServiceRequest {
                hostname: MeshSpec::hostname(i),
            })
            .await?;
        Ok(())
    }
}
