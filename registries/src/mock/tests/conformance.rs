//! The mock registry passes the shared registry conformance test.

use std::time::Duration;

use super::*;
use crate::mock::Fault;
use crate::model::{ClusterId, Origin, RegistryId};
use crate::test_util::{ConformanceDriver, DriverError, check_registry_conformance};

/// Drives the mock through its handle; services added before the registry exists become its
/// inline config.
struct MockDriver {
    config: MockConfig,
    handle: Option<MockHandle>,
    specs: std::collections::BTreeMap<String, ServiceSpec>,
}

impl MockDriver {
    fn new() -> Self {
        Self {
            config: MockConfig {
                name: "mock-conf".into(),
                cluster: "cluster-1".into(),
                ..MockConfig::default()
            },
            handle: None,
            specs: Default::default(),
        }
    }

    fn handle(&self) -> Result<&MockHandle, DriverError> {
        self.handle
            .as_ref()
            .ok_or_else(|| "registry not created yet".into())
    }
}

impl ConformanceDriver for MockDriver {
    fn origin(&self) -> Origin {
        Origin {
            registry: RegistryId::new("mock-conf"),
            cluster: ClusterId::new("cluster-1"),
        }
    }

    fn registry(&mut self) -> Box<dyn Registry> {
        let (registry, handle) = MockRegistry::new(self.config.clone());
        self.handle = Some(handle);
        Box::new(registry)
    }

    fn quiet_period(&self) -> Duration {
        Duration::from_secs(1)
    }

    async fn add_service(&mut self, name: &str, endpoints: usize) -> Result<Hostname, DriverError> {
        let addrs: Vec<String> = (1..=endpoints).map(|i| format!("10.1.0.{i}")).collect();
        let addrs: Vec<&str> = addrs.iter().map(String::as_str).collect();
        let s = spec(&format!("{name}.conformance.svc.cluster.local"), &addrs);
        self.specs.insert(name.to_string(), s.clone());
        match &self.handle {
            None => self.config.services.push(s.clone()),
            Some(h) => h.upsert_service(s.clone()).await?,
        }
        Ok(Hostname::new(&s.hostname)?)
    }

    async fn change_endpoint(&mut self, name: &str) -> Result<(), DriverError> {
        let s = self.specs.get_mut(name).ok_or("unknown service")?;
        s.endpoints[0].labels.insert("version".into(), "v2".into());
        let s = s.clone();
        self.handle()?
            .set_endpoints(&s.hostname, s.endpoints)
            .await?;
        Ok(())
    }

    async fn remove_service(&mut self, name: &str) -> Result<(), DriverError> {
        let s = self.specs.remove(name).ok_or("unknown service")?;
        self.handle()?.delete_service(&s.hostname).await?;
        Ok(())
    }

    async fn resync(&mut self) -> Result<(), DriverError> {
        for s in self.specs.values() {
            self.handle()?.upsert_service(s.clone()).await?;
        }
        Ok(())
    }

    async fn fail(&mut self) -> Result<(), DriverError> {
        let fault = Fault::Error {
            message: "conformance outage".into(),
        };
        Ok(self.handle()?.inject_fault(fault).await?)
    }

    async fn heal(&mut self) -> Result<(), DriverError> {
        Ok(self.handle()?.clear_faults().await?)
    }
}

#[tokio::test(start_paused = true)]
async fn mock_registry_passes_the_conformance_test() {
    check_registry_conformance(MockDriver::new()).await;
}

/// The harness must be able to fail: a driver whose "resync" really changes something.
#[tokio::test(start_paused = true)]
#[should_panic(expected = "a no-op resync must emit no changes")]
async fn the_conformance_test_catches_a_spurious_resync_change() {
    struct Noisy(MockDriver);
    impl ConformanceDriver for Noisy {
        fn origin(&self) -> Origin {
            self.0.origin()
        }
        fn registry(&mut self) -> Box<dyn Registry> {
            self.0.registry()
        }
        async fn add_service(&mut self, n: &str, e: usize) -> Result<Hostname, DriverError> {
            self.0.add_service(n, e).await
        }
        async fn change_endpoint(&mut self, n: &str) -> Result<(), DriverError> {
            self.0.change_endpoint(n).await
        }
        async fn remove_service(&mut self, n: &str) -> Result<(), DriverError> {
            self.0.remove_service(n).await
        }
        async fn resync(&mut self) -> Result<(), DriverError> {
            self.0.change_endpoint("beta").await
        }
        async fn fail(&mut self) -> Result<(), DriverError> {
            self.0.fail().await
        }
        async fn heal(&mut self) -> Result<(), DriverError> {
            self.0.heal().await
        }
    }
    check_registry_conformance(Noisy(MockDriver::new())).await;
}
