//! The one task that owns a mock registry's state: it applies handle requests and file reloads,
//! and sends what [`Delivery`] says to the sink.

use std::path::PathBuf;
use std::time::Duration;

use tokio::sync::{OwnedMutexGuard, mpsc};
use tokio::time::Instant;

use super::delivery::Delivery;
use super::file_format::{
    FieldPath, FileError, InvalidField, Seg, Services, endpoints_to_model, read_file,
};
use super::handle::{Command, MockError, MockState};
use super::layers::Layers;
use super::watch::FileWatch;
use crate::model::{Hostname, Origin};
use crate::registry::{RegistryError, RegistrySink};
use crate::support::pending::{recv, sleep};

/// Quiet time after a file event before re-reading. An editor's save is several events
/// (truncate + write, or write temp + rename); 50 ms lets it finish while staying well under the
/// aggregate's own 100 ms debounce.
pub const FILE_DEBOUNCE: Duration = Duration::from_millis(50);

/// Longest a burst of file events can postpone a reload, so a file rewritten continuously is
/// still picked up.
pub const FILE_DEBOUNCE_MAX: Duration = Duration::from_millis(500);

/// Where a worker's file reloads come from.
pub(crate) struct FileSource {
    /// The file.
    pub(crate) path: PathBuf,
    /// "It may have changed" signals.
    pub(crate) events: mpsc::Receiver<()>,
    /// The notify watch producing them (none when a test injects the signals).
    pub(crate) _watch: Option<FileWatch>,
}

/// The state-owning task of one mock registry.
pub(crate) struct Worker {
    origin: Origin,
    layers: Layers,
    delivery: Delivery,
    /// Why the last file read was rejected, while it stays rejected.
    file_problem: Option<String>,
    sink: RegistrySink,
    commands: Option<OwnedMutexGuard<mpsc::Receiver<Command>>>,
    file: Option<FileSource>,
    /// When the pending reload runs.
    reload_at: Option<Instant>,
    /// When the current burst of file events started.
    burst_started: Option<Instant>,
}

impl Worker {
    pub(crate) fn new(
        origin: Origin,
        initial: Services,
        hold_sync: bool,
        sink: RegistrySink,
        commands: OwnedMutexGuard<mpsc::Receiver<Command>>,
        file: Option<FileSource>,
    ) -> Self {
        let layers = Layers::new(initial);
        Self {
            origin,
            delivery: Delivery::new(layers.desired(), hold_sync),
            layers,
            file_problem: None,
            sink,
            commands: Some(commands),
            file,
            reload_at: None,
            burst_started: None,
        }
    }

    /// Runs until the sink closes.
    pub(crate) async fn run(mut self) -> Result<(), RegistryError> {
        self.flush().await?;
        loop {
            let reload_at = self.reload_at;
            let due = self.delivery.next_due();
            tokio::select! {
                cmd = recv(self.commands.as_deref_mut()) => match cmd {
                    Some(cmd) => self.command(cmd).await?,
                    // Every handle is gone; the file (if any) still drives the registry.
                    None => self.commands = None,
                },
                event = recv(self.file.as_mut().map(|f| &mut f.events)) => match event {
                    Some(()) => self.file_touched(),
                    None => self.file = None,
                },
                () = sleep(reload_at) => self.reload().await,
                () = sleep(due) => self.delivery.advance(Instant::now()),
            }
            self.flush().await?;
        }
    }

    /// Sends whatever the delivery state says is due.
    async fn flush(&mut self) -> Result<(), RegistryError> {
        for event in self.delivery.outgoing(self.file_problem.as_deref()) {
            tracing::debug!(?event, "mock registry event");
            self.sink.send(event).await?;
        }
        Ok(())
    }

    fn served_changed(&mut self) {
        self.delivery
            .set_desired(self.layers.desired(), Instant::now());
    }

    async fn command(&mut self, cmd: Command) -> Result<(), RegistryError> {
        match cmd {
            Command::Upsert(spec, reply) => {
                let result = spec.to_state(&self.origin).map_err(MockError::from);
                if let Ok(state) = &result {
                    self.layers.upsert(state.clone());
                    self.served_changed();
                }
                self.flush().await?;
                let _ = reply.send(result.map(drop));
            }
            Command::Delete(hostname, reply) => {
                let result = self.delete(&hostname);
                self.flush().await?;
                let _ = reply.send(result);
            }
            Command::SetEndpoints(hostname, endpoints, reply) => {
                let result = self.set_endpoints(&hostname, &endpoints);
                self.flush().await?;
                let _ = reply.send(result);
            }
            Command::State(reply) => {
                let _ = reply.send(self.state());
            }
            Command::Inject(fault, reply) => {
                tracing::info!(?fault, "mock registry fault injected");
                self.delivery.inject(fault);
                self.flush().await?;
                let _ = reply.send(());
            }
            Command::ClearFaults(reply) => {
                tracing::info!("mock registry faults cleared");
                self.delivery.clear_faults();
                self.flush().await?;
                let _ = reply.send(());
            }
            Command::ReleaseSync(reply) => {
                self.delivery.release();
                self.flush().await?;
                let _ = reply.send(());
            }
            Command::SetPaused(paused, reply) => {
                self.delivery.set_paused(paused);
                self.flush().await?;
                let _ = reply.send(());
            }
        }
        Ok(())
    }

    fn hostname(name: &str) -> Result<Hostname, MockError> {
        Hostname::new(name).map_err(|e| {
            MockError::Invalid(InvalidField {
                hostname: name.to_string(),
                field: FieldPath(vec![Seg::Key("hostname".into())]),
                message: e.to_string(),
            })
        })
    }

    fn delete(&mut self, name: &str) -> Result<(), MockError> {
        let host = Self::hostname(name)?;
        if !self.layers.delete(&host) {
            return Err(MockError::UnknownService(host.to_string()));
        }
        self.served_changed();
        Ok(())
    }

    fn set_endpoints(
        &mut self,
        name: &str,
        endpoints: &[super::file_format::EndpointSpec],
    ) -> Result<(), MockError> {
        let host = Self::hostname(name)?;
        let mut state = self
            .layers
            .get(&host)
            .cloned()
            .ok_or_else(|| MockError::UnknownService(host.to_string()))?;
        state.endpoints = endpoints_to_model(&state.service.ports, endpoints, &self.origin)
            .map_err(|(field, message)| InvalidField {
                hostname: name.to_string(),
                field: field.under(&[Seg::Key("endpoints".into())]),
                message,
            })?;
        self.layers.upsert(state);
        self.served_changed();
        Ok(())
    }

    fn state(&self) -> MockState {
        MockState {
            services: self
                .layers
                .desired()
                .values()
                .map(|s| (**s).clone())
                .collect(),
            synced: self.delivery.synced(),
            sync_held: self.delivery.sync_held(),
            paused: self.delivery.paused(),
            faults: self.delivery.faults(),
            status: self.delivery.status(self.file_problem.as_deref()),
        }
    }

    fn file_touched(&mut self) {
        let now = Instant::now();
        let started = *self.burst_started.get_or_insert(now);
        self.reload_at = Some((now + FILE_DEBOUNCE).min(started + FILE_DEBOUNCE_MAX));
    }

    async fn reload(&mut self) {
        self.reload_at = None;
        self.burst_started = None;
        let Some(file) = &self.file else { return };
        match read_off_runtime(file.path.clone(), self.origin.clone()).await {
            Ok(services) => {
                if self.file_problem.take().is_some() {
                    tracing::info!(file = %file.path.display(), "mock registry file is valid again");
                }
                self.layers.replace_file(services);
                self.served_changed();
            }
            Err(e) => {
                tracing::error!(
                    file = %file.path.display(),
                    error = %e,
                    "mock registry file rejected; serving the last good state"
                );
                self.file_problem = Some(e.to_string());
            }
        }
    }
}

/// Reads and parses the file on a blocking thread: a large or hostile file must not stall the
/// runtime's workers (and with them every xDS stream and `/ready`).
pub(crate) async fn read_off_runtime(path: PathBuf, origin: Origin) -> Result<Services, FileError> {
    let shown = path.clone();
    tokio::task::spawn_blocking(move || read_file(&path, &origin))
        .await
        .unwrap_or_else(|e| {
            Err(FileError::Read {
                path: shown,
                source: std::io::Error::other(format!("the file reader stopped: {e}")),
            })
        })
}
