//! The ServiceEntry registry passes the shared registry conformance test, from files and from
//! CRDs.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use super::crd::Cluster;
use super::*;
use crate::serviceentry::fixtures::service_entry;
use crate::test_util::{ConformanceDriver, DriverError, check_registry_conformance};

const NS: &str = "conformance";

/// The manifest of service `name` with these endpoint IPs.
fn manifest(name: &str, ips: &[String]) -> String {
    let endpoints: Vec<String> = ips.iter().map(|ip| format!("{{address: {ip}}}")).collect();
    service_entry(
        name,
        NS,
        &format!(
            "hosts: [{name}.{NS}.example]\nports: [{{number: 80, name: http, protocol: HTTP}}]\nlocation: MESH_INTERNAL\nresolution: STATIC\nendpoints: [{}]",
            endpoints.join(", ")
        ),
    )
}

fn host(name: &str) -> Result<Hostname, DriverError> {
    Ok(Hostname::new(&format!("{name}.{NS}.example"))?)
}

fn origin() -> Origin {
    Origin {
        registry: RegistryId::new("se-conf"),
        cluster: ClusterId::new("c1"),
    }
}

/// Service name → endpoint IPs, and fresh IPs.
#[derive(Default)]
struct Services {
    ips: BTreeMap<String, Vec<String>>,
    next: u32,
}

impl Services {
    fn add(&mut self, name: &str, n: usize) {
        let ips = (0..n).map(|_| self.ip()).collect();
        self.ips.insert(name.into(), ips);
    }

    fn change(&mut self, name: &str) -> Result<(), DriverError> {
        let ip = self.ip();
        self.ips.get_mut(name).ok_or("unknown service")?[0] = ip;
        Ok(())
    }

    fn ip(&mut self) -> String {
        self.next += 1;
        format!("10.9.{}.{}", self.next / 250, self.next % 250)
    }
}

/// Files: one manifest per service; failure is the directory moving away.
struct FileDriver {
    tmp: tempfile::TempDir,
    services: Services,
    failing: bool,
}

impl FileDriver {
    fn dir(&self) -> PathBuf {
        self.tmp.path().join("manifests")
    }

    fn away(&self) -> PathBuf {
        self.tmp.path().join("away")
    }

    /// Where the files are now (the platform's state, reachable or not).
    fn current(&self) -> PathBuf {
        match self.failing {
            true => self.away(),
            false => self.dir(),
        }
    }

    fn write(&self, name: &str) -> Result<(), DriverError> {
        let ips = self.services.ips.get(name).ok_or("unknown service")?;
        std::fs::write(
            self.current().join(format!("{name}.yaml")),
            manifest(name, ips),
        )?;
        Ok(())
    }
}

impl ConformanceDriver for FileDriver {
    fn origin(&self) -> Origin {
        origin()
    }

    fn registry(&mut self) -> Box<dyn Registry> {
        Box::new(ServiceEntryRegistry::new(ServiceEntryConfig {
            name: "se-conf".into(),
            cluster_id: "c1".into(),
            directory: Some(self.dir()),
            rescan_interval: Duration::from_millis(100),
            ..ServiceEntryConfig::default()
        }))
    }

    async fn add_service(&mut self, name: &str, endpoints: usize) -> Result<Hostname, DriverError> {
        self.services.add(name, endpoints);
        self.write(name)?;
        host(name)
    }

    async fn change_endpoint(&mut self, name: &str) -> Result<(), DriverError> {
        self.services.change(name)?;
        self.write(name)
    }

    async fn remove_service(&mut self, name: &str) -> Result<(), DriverError> {
        self.services.ips.remove(name).ok_or("unknown service")?;
        std::fs::remove_file(self.current().join(format!("{name}.yaml")))?;
        Ok(())
    }

    async fn resync(&mut self) -> Result<(), DriverError> {
        // Every file written again with the same content.
        let names: Vec<String> = self.services.ips.keys().cloned().collect();
        for name in names {
            self.write(&name)?;
        }
        Ok(())
    }

    async fn fail(&mut self) -> Result<(), DriverError> {
        std::fs::rename(self.dir(), self.away())?;
        self.failing = true;
        Ok(())
    }

    async fn heal(&mut self) -> Result<(), DriverError> {
        std::fs::rename(self.away(), self.dir())?;
        self.failing = false;
        Ok(())
    }
}

#[tokio::test]
async fn the_file_source_passes_the_conformance_test() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::create_dir(tmp.path().join("manifests")).unwrap();
    check_registry_conformance(FileDriver {
        tmp,
        services: Services::default(),
        failing: false,
    })
    .await;
}

/// CRDs in the fake API server; failure is the server going down.
struct CrdDriver {
    cluster: Cluster,
    services: Services,
}

impl CrdDriver {
    fn write(&self, name: &str) -> Result<(), DriverError> {
        let ips = self.services.ips.get(name).ok_or("unknown service")?;
        self.cluster.apply(&manifest(name, ips));
        Ok(())
    }
}

impl ConformanceDriver for CrdDriver {
    fn origin(&self) -> Origin {
        origin()
    }

    fn registry(&mut self) -> Box<dyn Registry> {
        let mut config = self.cluster.config();
        config.name = "se-conf".into();
        Box::new(ServiceEntryRegistry::new(config))
    }

    fn quiet_period(&self) -> Duration {
        // Longer than a relist after 410 (retry_initial 20 ms) plus its round trips.
        Duration::from_millis(1500)
    }

    async fn add_service(&mut self, name: &str, endpoints: usize) -> Result<Hostname, DriverError> {
        self.services.add(name, endpoints);
        self.write(name)?;
        host(name)
    }

    async fn change_endpoint(&mut self, name: &str) -> Result<(), DriverError> {
        self.services.change(name)?;
        self.write(name)
    }

    async fn remove_service(&mut self, name: &str) -> Result<(), DriverError> {
        self.services.ips.remove(name).ok_or("unknown service")?;
        let rt = self.cluster.rt("ServiceEntry");
        self.cluster.server.delete_json(&rt, NS, name);
        Ok(())
    }

    async fn resync(&mut self) -> Result<(), DriverError> {
        // REG-1 / REG-14: both kinds relist after a 410.
        self.cluster.watching().await;
        for kind in ["ServiceEntry", "WorkloadEntry"] {
            let rt = self.cluster.rt(kind);
            self.cluster.server.expire_type(&rt);
        }
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

#[tokio::test]
async fn the_crd_source_passes_the_conformance_test() {
    check_registry_conformance(CrdDriver {
        cluster: Cluster::start("v1").await,
        services: Services::default(),
    })
    .await;
}

/// Objects served by the test MCP server (`xds://`); failure is the server going away.
struct XdsDriver {
    server: crate::test_util::mcp_server::McpServer,
    services: Services,
}

impl XdsDriver {
    fn publish(&self) -> Result<(), DriverError> {
        let docs: Vec<String> = self
            .services
            .ips
            .iter()
            .map(|(name, ips)| manifest(name, ips))
            .collect();
        let docs: Vec<&str> = docs.iter().map(String::as_str).collect();
        Ok(self.server.set_objects(&docs)?)
    }

    fn cluster_config(&self) -> ServiceEntryConfig {
        let mut config = ServiceEntryConfig::default();
        (config.name, config.cluster_id) = ("se-conf".into(), "c1".into());
        config
    }
}

impl ConformanceDriver for XdsDriver {
    fn origin(&self) -> Origin {
        origin()
    }

    fn registry(&mut self) -> Box<dyn Registry> {
        let xds = crate::serviceentry::XdsSourceConfig {
            address: self.server.addr().to_string(),
            retry_initial: Duration::from_millis(20),
            retry_max: Duration::from_millis(200),
            ..Default::default()
        };
        let mut config = self.cluster_config();
        config.xds = Some(xds);
        Box::new(ServiceEntryRegistry::new(config))
    }

    async fn add_service(&mut self, name: &str, endpoints: usize) -> Result<Hostname, DriverError> {
        self.services.add(name, endpoints);
        self.publish()?;
        host(name)
    }

    async fn change_endpoint(&mut self, name: &str) -> Result<(), DriverError> {
        self.services.change(name)?;
        self.publish()
    }

    async fn remove_service(&mut self, name: &str) -> Result<(), DriverError> {
        self.services.ips.remove(name).ok_or("unknown service")?;
        self.publish()
    }

    async fn resync(&mut self) -> Result<(), DriverError> {
        // REG-1: a new stream sends every collection whole again.
        self.server.stop().await;
        Ok(self.server.restart().await?)
    }

    async fn fail(&mut self) -> Result<(), DriverError> {
        self.server.stop().await;
        Ok(())
    }

    async fn heal(&mut self) -> Result<(), DriverError> {
        Ok(self.server.restart().await?)
    }
}

#[tokio::test]
async fn the_xds_source_passes_the_conformance_test() {
    let server = crate::test_util::mcp_server::McpServer::start(true)
        .await
        .expect("test MCP server");
    check_registry_conformance(XdsDriver {
        server,
        services: Services::default(),
    })
    .await;
}
