//! The Consul registry passes the shared registry conformance test, driven through the fake
//! Consul.

use std::collections::BTreeMap;
use std::time::Duration;

use super::*;
use crate::consul::fake::Fault;
use crate::model::{ClusterId, Origin, RegistryId};
use crate::test_util::{ConformanceDriver, DriverError, check_registry_conformance};

/// Drives the fake Consul: services are registered instances, failures are injected faults.
struct ConsulDriver {
    fake: FakeConsul,
    config: ConsulConfig,
    fault: Fault,
    /// Service → (instance count, address block).
    services: BTreeMap<String, (usize, u8)>,
}

impl ConsulDriver {
    async fn new(fault: Fault) -> Self {
        let fake = FakeConsul::start().await;
        let config = config(&fake);
        Self {
            fake,
            config,
            fault,
            services: BTreeMap::new(),
        }
    }
}

impl ConformanceDriver for ConsulDriver {
    fn origin(&self) -> Origin {
        Origin {
            registry: RegistryId::new("consul-test"),
            cluster: ClusterId::new("consul-test"),
        }
    }

    fn registry(&mut self) -> Box<dyn Registry> {
        Box::new(ConsulRegistry::new(self.config.clone()))
    }

    fn quiet_period(&self) -> Duration {
        Duration::from_millis(1500)
    }

    async fn add_service(&mut self, name: &str, endpoints: usize) -> Result<Hostname, DriverError> {
        let block = u8::try_from(self.services.len() + 1)?;
        register(&self.fake, name, endpoints, block);
        self.services.insert(name.to_string(), (endpoints, block));
        Ok(host(name))
    }

    async fn change_endpoint(&mut self, name: &str) -> Result<(), DriverError> {
        let (_, block) = self.services.get(name).ok_or("unknown service")?;
        let id = format!("{name}-1");
        let addr = format!("10.0.{block}.1");
        self.fake
            .register(Instance::new(name, &id, &addr, 8080).tag("version=v2"));
        Ok(())
    }

    async fn remove_service(&mut self, name: &str) -> Result<(), DriverError> {
        let (n, _) = self.services.remove(name).ok_or("unknown service")?;
        for i in 1..=n {
            self.fake.deregister(&format!("{name}-{i}"));
        }
        Ok(())
    }

    async fn resync(&mut self) -> Result<(), DriverError> {
        // Idempotent writes: every index moves, no content does (REG-6, REG-14).
        for (name, (n, block)) in &self.services {
            self.fake.touch(name);
            register(&self.fake, name, *n, *block);
        }
        Ok(())
    }

    async fn fail(&mut self) -> Result<(), DriverError> {
        self.fake.fail(self.fault.clone());
        Ok(())
    }

    async fn heal(&mut self) -> Result<(), DriverError> {
        self.fake.heal();
        Ok(())
    }
}

#[tokio::test]
async fn consul_registry_passes_the_conformance_test_with_5xx() {
    check_registry_conformance(ConsulDriver::new(Fault::Status(500)).await).await;
}

#[tokio::test]
async fn consul_registry_passes_the_conformance_test_with_refused_connections() {
    check_registry_conformance(ConsulDriver::new(Fault::Refuse).await).await;
}
