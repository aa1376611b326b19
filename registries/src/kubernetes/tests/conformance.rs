//! The Kubernetes registry passes the shared registry conformance test over the fake API server.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;

use super::*;
use crate::model::{ClusterId, Origin, RegistryId};
use crate::test_util::{ConformanceDriver, DriverError, check_registry_conformance};

const NS: &str = "conformance";

struct KubeDriver {
    cluster: FakeCluster,
    /// Service name → its endpoint IPs.
    services: BTreeMap<String, Vec<String>>,
    next_ip: u32,
}

impl KubeDriver {
    async fn new() -> Self {
        Self {
            cluster: FakeCluster::start().await,
            services: BTreeMap::new(),
            next_ip: 1,
        }
    }

    fn ip(&mut self) -> String {
        self.next_ip += 1;
        format!("10.8.{}.{}", self.next_ip / 250, self.next_ip % 250)
    }

    fn write_slice(&self, name: &str) -> Result<(), DriverError> {
        let eps: Vec<SliceEndpoint> = self.services[name]
            .iter()
            .enumerate()
            .map(|(i, ip)| {
                SliceEndpoint::ready(ip)
                    .pod(&format!("{name}-{i}"))
                    .node("node-a")
            })
            .collect();
        let slice =
            objects::endpoint_slice(NS, &format!("{name}-x1"), name, &[("http", 8080)], &eps);
        Ok(self.cluster.server.apply(&slice)?)
    }
}

impl ConformanceDriver for KubeDriver {
    fn origin(&self) -> Origin {
        Origin {
            registry: RegistryId::new("kube-conf"),
            cluster: ClusterId::new("cluster-1"),
        }
    }

    fn registry(&mut self) -> Box<dyn Registry> {
        let config = config("kube-conf", "cluster-1", &self.cluster.kubeconfig);
        Box::new(KubernetesRegistry::new(config))
    }

    fn quiet_period(&self) -> Duration {
        // Longer than a relist after 410 (retry_initial 20 ms) plus its list round trips.
        Duration::from_millis(1500)
    }

    async fn add_service(&mut self, name: &str, endpoints: usize) -> Result<Hostname, DriverError> {
        let ips: Vec<String> = (0..endpoints).map(|_| self.ip()).collect();
        let s = &self.cluster.server;
        s.apply(&objects::node("node-a", "us-east", "us-east-1a"))?;
        let vip = format!("10.96.0.{}", self.services.len() + 10);
        s.apply(&objects::service(NS, name, &vip, &[("http", 80)]))?;
        for i in 0..endpoints {
            let pod = objects::pod(NS, &format!("{name}-{i}"), &[("app", name)], name, "node-a");
            s.apply(&pod)?;
        }
        self.services.insert(name.to_string(), ips);
        self.write_slice(name)?;
        Ok(Hostname::new(&format!("{name}.{NS}.svc.cluster.local"))?)
    }

    async fn change_endpoint(&mut self, name: &str) -> Result<(), DriverError> {
        let ip = self.ip();
        let ips = self.services.get_mut(name).ok_or("unknown service")?;
        ips[0] = ip;
        self.write_slice(name)
    }

    async fn remove_service(&mut self, name: &str) -> Result<(), DriverError> {
        self.services.remove(name).ok_or("unknown service")?;
        let s = &self.cluster.server;
        s.delete::<Service>(NS, name);
        s.delete::<EndpointSlice>(NS, &format!("{name}-x1"));
        Ok(())
    }

    async fn resync(&mut self) -> Result<(), DriverError> {
        // REG-1 / REG-14: every kind relists after a 410.
        let s = &self.cluster.server;
        s.expire::<Service>();
        s.expire::<EndpointSlice>();
        s.expire::<Pod>();
        s.expire::<Node>();
        Ok(())
    }

    async fn fail(&mut self) -> Result<(), DriverError> {
        self.cluster.server.stop().await;
        Ok(())
    }

    async fn heal(&mut self) -> Result<(), DriverError> {
        Ok(self.cluster.server.restart().await?)
    }
}

/// Steps 6 and 7 of the harness are REG-2 over real HTTP: the API server stops listening after
/// sync (watches cut, connections refused), the registry reports Degraded and deletes nothing,
/// retries with backoff, and after the restart reports Healthy and only the change made meanwhile.
#[tokio::test]
async fn kubernetes_registry_passes_the_conformance_test() {
    let driver = KubeDriver::new().await;
    check_registry_conformance(driver).await;
}
