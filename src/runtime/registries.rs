//! The registry supervisor: runs one task per configured registry and, when the config file
//! changes (SIGHUP, or its contents seen changed on a poll), adds, removes and restarts registries
//! without restarting tributary.
//!
//! A removed registry's services are deleted; a registry whose settings changed keeps serving its
//! last state until its new instance has synced (see [`AggregateCommand::Restart`]). Merge order is
//! fixed at start: a reload that reorders registries is applied without the reorder, loudly. Other
//! settings (addresses, TLS files, debounce) need a restart; a reload that changes them says so.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, error, info, info_span, warn};
use tributary_registries::config_store::ConfigStore;
use tributary_registries::mock::MockHandle;
use tributary_registries::serviceentry::ServiceEntryRegistry;
use tributary_registries::{BuiltRegistry, RegistryId, RegistryMessage, RegistrySink};

use crate::aggregate::{AggregateCommand, CommandSender};
use crate::config::{Config, ConfigError, Overrides, RegistryConfig};

use super::supervise::{Faults, supervise_registry};

/// How often the config file is read to notice changes. Kubernetes ConfigMap updates take up to a
/// minute to land; a 2 s poll adds little and, unlike inotify, survives the symlink swap a
/// ConfigMap volume does.
pub const CONFIG_POLL_INTERVAL: Duration = Duration::from_secs(2);

/// Where the config came from, to read it again on reload.
#[derive(Clone)]
pub struct ConfigSource {
    /// The config file.
    pub path: PathBuf,
    /// Command-line values, applied on top of the file each time.
    pub overrides: Overrides,
    /// The process environment at start (`main` reads it; nothing here does), for the variables
    /// the config takes (`CONSUL_HTTP_TOKEN`, ...).
    pub env: HashMap<String, String>,
}

impl std::fmt::Debug for ConfigSource {
    /// Leaves the environment out: it may hold tokens (SEC-7).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConfigSource")
            .field("path", &self.path)
            .field("overrides", &self.overrides)
            .finish_non_exhaustive()
    }
}

impl ConfigSource {
    /// Reads, overrides and validates the config, as `main` did at start.
    pub fn load(&self) -> Result<Config, ConfigError> {
        let mut c = Config::from_file(&self.path)?;
        c.apply_overrides(self.overrides.clone());
        c.apply_env(|k| self.env.get(k).cloned());
        c.validate()?;
        Ok(c)
    }
}

struct Entry {
    config: RegistryConfig,
    stop: CancellationToken,
}

/// Owns the registry tasks.
pub(super) struct Supervisor {
    entries: HashMap<String, Entry>,
    order: Vec<String>,
    tasks: JoinSet<()>,
    /// Where config sources publish their traffic rules.
    rules: ConfigStore,
    events: mpsc::Sender<RegistryMessage>,
    commands: CommandSender,
    shutdown: CancellationToken,
    faults: Faults,
}

impl Supervisor {
    /// Starts every registry of `registries`; returns the supervisor and the mock handles.
    pub(super) fn start(
        registries: &[RegistryConfig],
        rules: ConfigStore,
        events: mpsc::Sender<RegistryMessage>,
        commands: CommandSender,
        shutdown: CancellationToken,
        faults: Faults,
    ) -> (Self, Vec<MockHandle>) {
        let mut s = Self {
            entries: HashMap::new(),
            order: Vec::new(),
            tasks: JoinSet::new(),
            rules,
            events,
            commands,
            shutdown,
            faults: Faults::default(),
        };
        let mocks = registries
            .iter()
            .filter_map(|rc| {
                s.faults = faults.clone();
                s.spawn(rc)
            })
            .collect();
        s.faults = Faults::default();
        (s, mocks)
    }

    fn spawn(&mut self, rc: &RegistryConfig) -> Option<MockHandle> {
        let id = RegistryId::new(rc.name());
        let built = match rc {
            // A config source (or the short-form `service_entry` registry) also publishes the
            // traffic rules it reads to the config store.
            RegistryConfig::ServiceEntry(sc) => {
                let sc = (**sc).clone();
                let rules = self.rules.publisher(id.clone());
                BuiltRegistry {
                    factory: Box::new(move || {
                        Box::new(ServiceEntryRegistry::new(sc.clone()).with_rules(rules.clone()))
                    }),
                    mock: None,
                }
            }
            _ => rc.build(),
        };
        let stop = self.shutdown.child_token();
        let sink = RegistrySink::new(id.clone(), self.events.clone());
        let span = info_span!("registry", registry = %id);
        // An injected fault applies to the first start of a registry only.
        let fault = self.faults.delay_for(&format!("registry:{id}"));
        self.faults = Faults::default();
        self.tasks.spawn(
            supervise_registry(
                built.factory,
                sink,
                self.commands.clone(),
                stop.clone(),
                fault,
            )
            .instrument(span),
        );
        self.order.push(rc.name().to_string());
        self.entries.insert(
            rc.name().to_string(),
            Entry {
                config: rc.clone(),
                stop,
            },
        );
        built.mock
    }

    /// Applies the registries of a reloaded config.
    pub(super) async fn apply(&mut self, new: &[RegistryConfig]) {
        let names: Vec<&str> = new.iter().map(RegistryConfig::name).collect();
        self.rules
            .set_order(names.iter().copied().map(RegistryId::new).collect());
        let removed: Vec<String> = self
            .order
            .iter()
            .filter(|n| !names.contains(&n.as_str()))
            .cloned()
            .collect();
        for name in removed {
            if let Some(e) = self.entries.remove(&name) {
                e.stop.cancel();
            }
            self.order.retain(|n| n != &name);
            self.rules.remove(&RegistryId::new(&name));
            self.commands
                .apply(AggregateCommand::Remove(RegistryId::new(&name)))
                .await;
        }
        for rc in new {
            match self.entries.get(rc.name()) {
                Some(e) if &e.config == rc => {}
                Some(_) => {
                    if let Some(e) = self.entries.remove(rc.name()) {
                        e.stop.cancel();
                    }
                    self.order.retain(|n| n != rc.name());
                    let id = RegistryId::new(rc.name());
                    // Applied before the new instance starts, so its listing comes after.
                    self.commands.apply(AggregateCommand::Restart(id)).await;
                    self.spawn(rc);
                }
                None => {
                    info!(registry = rc.name(), "registry added by config reload");
                    self.spawn(rc);
                }
            }
        }
        let kept: Vec<&str> = names
            .iter()
            .copied()
            .filter(|n| self.order.iter().any(|o| o == n))
            .collect();
        if kept != self.order.iter().map(String::as_str).collect::<Vec<_>>() {
            warn!("config reload reorders registries; merge order changes only on restart");
        }
    }

    /// Runs until shutdown, reloading from `source` on SIGHUP and when the file changes.
    pub(super) async fn run(mut self, source: Option<ConfigSource>, mut current: Config) {
        let Some(source) = source else {
            self.shutdown.cancelled().await;
            return;
        };
        let mut last = std::fs::read(&source.path).ok();
        let mut hup = hangup();
        let mut tick = tokio::time::interval(CONFIG_POLL_INTERVAL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let forced = tokio::select! {
                () = self.shutdown.cancelled() => return,
                Some(_) = self.tasks.join_next(), if !self.tasks.is_empty() => continue,
                _ = tick.tick() => false,
                () = recv(&mut hup) => true,
            };
            let text = std::fs::read(&source.path).ok();
            if !forced && text == last {
                continue;
            }
            last = text;
            match source.load() {
                Ok(new) => {
                    warn_restart_only(&current, &new);
                    self.apply(&new.all_registries()).await;
                    info!(path = %source.path.display(), "config reloaded");
                    current = new;
                }
                Err(e) => {
                    error!(error = %e, "config reload failed; keeping the running config");
                }
            }
        }
    }
}

fn warn_restart_only(old: &Config, new: &Config) {
    let mut a = old.clone();
    a.registries = new.registries.clone();
    a.config_sources = new.config_sources.clone();
    if &a != new {
        warn!("config reload changed settings other than registries; they apply after a restart");
    }
}

#[cfg(unix)]
type Hangup = Option<tokio::signal::unix::Signal>;
#[cfg(not(unix))]
type Hangup = Option<()>;

#[cfg(unix)]
fn hangup() -> Hangup {
    tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()).ok()
}

#[cfg(not(unix))]
fn hangup() -> Hangup {
    None
}

#[cfg(unix)]
async fn recv(h: &mut Hangup) {
    match h {
        Some(s) => {
            s.recv().await;
        }
        None => std::future::pending().await,
    }
}

#[cfg(not(unix))]
async fn recv(_: &mut Hangup) {
    std::future::pending().await
}
