//! Tests of the running mock registry: events, faults, file reload and the control API.

mod conformance;
mod control;
mod faults;
mod hostile;
mod reload;

use std::time::Duration;

use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::{EndpointSpec, MockConfig, MockHandle, MockRegistry, PortSpec, ServiceSpec};
use crate::model::{Hostname, Protocol};
use crate::registry::{
    Change, Registry, RegistryError, RegistryEvent, RegistryMessage, RegistrySink,
};

/// The validated services of a mock file, for the pure diff and layering tests.
pub(crate) fn services(yaml: &str) -> super::file_format::Services {
    let file: super::file_format::MockFile = serde_yaml::from_str(yaml).unwrap();
    let origin = crate::model::Origin {
        registry: crate::model::RegistryId::new("r"),
        cluster: crate::model::ClusterId::new("c"),
    };
    super::file_format::validate_services(&file.services, &origin).unwrap()
}

/// Room for every event a test produces.
const TEST_EVENTS: usize = 256;

/// An HTTP service on port 80 with one endpoint per address.
pub(super) fn spec(host: &str, addrs: &[&str]) -> ServiceSpec {
    ServiceSpec {
        hostname: host.to_string(),
        ports: vec![PortSpec {
            name: "http".into(),
            port: 80,
            protocol: Protocol::Http,
        }],
        resolution: Default::default(),
        location: Default::default(),
        vips: vec![],
        labels: Default::default(),
        service_accounts: vec![],
        endpoints: addrs.iter().map(|a| endpoint(a)).collect(),
    }
}

pub(super) fn endpoint(addr: &str) -> EndpointSpec {
    EndpointSpec {
        address: addr.to_string(),
        ports: Default::default(),
        labels: Default::default(),
        locality: String::new(),
        health: Default::default(),
        weight: 1,
        network: String::new(),
        service_account: String::new(),
    }
}

pub(super) struct Running {
    pub(super) handle: MockHandle,
    pub(super) rx: mpsc::Receiver<RegistryMessage>,
    pub(super) task: JoinHandle<Result<(), RegistryError>>,
}

impl Running {
    /// Everything the registry has sent so far (call after a handle request, which returns once
    /// its events are in the channel).
    pub(super) fn drain(&mut self) -> Vec<RegistryEvent> {
        let mut out = Vec::new();
        while let Ok(msg) = self.rx.try_recv() {
            out.push(msg.event);
        }
        out
    }

    /// Waits until the registry task has processed everything before this call, then drains.
    pub(super) async fn settle(&mut self) -> Vec<RegistryEvent> {
        self.handle.state().await.expect("registry running");
        self.drain()
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Starts a registry; `file_events` replaces the real file watch.
pub(super) fn start_with(config: MockConfig, file_events: Option<mpsc::Receiver<()>>) -> Running {
    let (registry, handle) = MockRegistry::new(config);
    let (tx, rx) = mpsc::channel(TEST_EVENTS);
    let sink = RegistrySink::new(registry.id(), tx);
    let task = tokio::spawn(async move {
        match file_events {
            Some(events) => registry.run_with(sink, Some(events)).await,
            None => Box::new(registry).run(sink).await,
        }
    });
    Running { handle, rx, task }
}

pub(super) fn start(config: MockConfig) -> Running {
    start_with(config, None)
}

/// `+host/n` for an upsert with n endpoints, `-host` for a delete, `synced`, `healthy`,
/// `degraded`: a compact picture of an event stream.
pub(super) fn summary(events: &[RegistryEvent]) -> Vec<String> {
    events
        .iter()
        .map(|e| match e {
            RegistryEvent::Synced => "synced".to_string(),
            RegistryEvent::Status(crate::RegistryStatus::Healthy) => "healthy".to_string(),
            RegistryEvent::Status(crate::RegistryStatus::Degraded { .. }) => "degraded".to_string(),
            RegistryEvent::Rejected(r) => format!("rejected/{}", r.len()),
            RegistryEvent::Changes(changes) => changes
                .iter()
                .map(|c| match c {
                    Change::Upsert(s) => format!("+{}/{}", s.service.hostname, s.endpoints.len()),
                    Change::Delete(h) => format!("-{h}"),
                })
                .collect::<Vec<_>>()
                .join(" "),
        })
        .collect()
}

pub(super) fn host(name: &str) -> Hostname {
    Hostname::new(name).expect("test hostname")
}

/// How long real-time (file watch) tests wait for an event before failing.
pub(super) const REAL_TIMEOUT: Duration = Duration::from_secs(5);
