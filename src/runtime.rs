//! Wires registries → aggregate → snapshot builder → xDS server, plus the admin server.
//!
//! Every long-lived task is owned by one `JoinSet` and stops on one cancellation token. Listen
//! sockets are bound first, so a port in use fails start-up with a message that says which.

pub(crate) mod accept;
mod coalesce;
mod connections;
mod first_frames;
pub(crate) mod forward_io;
mod liveness;
pub(crate) mod metrics;
mod registries;
mod serve;
mod supervise;

pub use registries::{CONFIG_POLL_INTERVAL, ConfigSource};
pub use supervise::{FaultParseError, Faults, RESTART_INITIAL, RESTART_MAX};

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, error, info, info_span, warn};
use tributary_registries::RegistryId;
use tributary_registries::config_store::ConfigStore;
use tributary_registries::mock::{self, MockControl, MockHandle};

use crate::admin::{self, AdminState};
use crate::aggregate::{Aggregate, AggregateSettings, CommandSender, RegistriesView};
use crate::config::{Config, ShutdownSettings};
use crate::envoy::GenerateOptions;
use crate::snapshot::{MeshBuilder, SnapshotStore, run_builder};
use crate::xds::{XdsOptions, XdsServer};

/// Registry events waiting for the aggregate. Large enough to absorb a registry's initial listing in
/// a few batches; when full, registries wait (back-pressure, never unbounded memory).
const REGISTRY_EVENTS_CAPACITY: usize = 1024;
/// Push requests waiting for the builder: one, because the aggregate sends the next only after the
/// previous is done (one push pipeline at a time, REG-13).
const PUSH_REQUESTS_CAPACITY: usize = 1;
/// Reload commands waiting for the aggregate: a reload sends one per changed registry, and the
/// supervisor waits when full.
const RELOAD_COMMANDS_CAPACITY: usize = 16;

/// A running tributary.
pub struct Running {
    /// Where plaintext xDS listens.
    pub xds_addr: SocketAddr,
    /// Where the mock control API listens, when it is served (`control_api:`).
    pub control_addr: Option<SocketAddr>,
    /// Where mTLS xDS listens, if configured.
    pub xds_tls_addr: Option<SocketAddr>,
    /// Where admin HTTP listens.
    pub admin_addr: SocketAddr,
    /// Handles of the mock registries, in configured order, to drive them in-process.
    pub mocks: Vec<MockHandle>,
    /// The published snapshots.
    pub store: SnapshotStore,
    /// The xDS server (connections, drain).
    pub xds: XdsServer,
    tasks: JoinSet<()>,
    servers: JoinSet<()>,
    names: supervise::TaskNames,
    shutdown: CancellationToken,
    draining: CancellationToken,
    stop_servers: CancellationToken,
    settings: ShutdownSettings,
}

impl Running {
    /// Shuts down gracefully (TRANS-8), in order: `/ready` turns 503; after `drain_delay`, new
    /// streams are refused with `UNAVAILABLE` and live ones end with `UNAVAILABLE` once the
    /// response under way is out; the servers stop accepting and send GOAWAY; connections get
    /// `grace_period` to close, then are dropped. Only then do registries, aggregate and builder
    /// stop, so nothing is published, and so nothing partial or empty pushed, while streams live.
    pub async fn stop(mut self) {
        self.draining.cancel();
        if !self.settings.drain_delay.is_zero() {
            tokio::time::sleep(self.settings.drain_delay).await;
        }
        self.xds.drain();
        self.stop_servers.cancel();
        let servers = async { while self.servers.join_next().await.is_some() {} };
        if tokio::time::timeout(self.settings.grace_period, servers)
            .await
            .is_err()
        {
            warn!(grace = %humantime::format_duration(self.settings.grace_period), "xDS connections still open after the grace period; closing them");
            self.servers.shutdown().await;
        }
        self.shutdown.cancel();
        self.tasks.shutdown().await;
    }

    /// Waits until a critical task (aggregate, builder, admin, an xDS server, the registry
    /// supervisor) ends before [`Running::stop`], and says which and how (REL-2). `/ready` turns
    /// 503 at once: a half-alive control plane must not look ready while it stops.
    pub async fn failed(&mut self) -> String {
        let ended = tokio::select! {
            Some(r) = self.tasks.join_next_with_id() => r.map(|(id, ())| id),
            Some(r) = self.servers.join_next_with_id() => r.map(|(id, ())| id),
            else => return "every task ended".to_string(),
        };
        self.draining.cancel();
        self.names.describe(ended)
    }

    /// Whether `/ready` reports shutting down.
    pub fn is_draining(&self) -> bool {
        self.draining.is_cancelled()
    }
}

/// Longest a stop may take beyond the configured grace period (task wind-down).
const STOP_SLACK: Duration = Duration::from_secs(5);

/// Runs tributary until SIGINT or SIGTERM, reloading the config from `source` if given.
pub async fn run(config: Config, source: Option<ConfigSource>) -> anyhow::Result<()> {
    run_with_faults(config, source, Faults::default(), false).await
}

/// [`run`], with a task killed on purpose (supervision tests). Returns an error, so the process
/// exits non-zero, when a critical task dies (REL-2). With `json_logs`, the start-up banner is a
/// log event, so standard output stays JSON lines.
pub async fn run_with_faults(
    config: Config,
    source: Option<ConfigSource>,
    faults: Faults,
    json_logs: bool,
) -> anyhow::Result<()> {
    let demo = config.is_demo();
    if config.registries.is_empty() && config.config_sources.is_empty() && !demo {
        warn!("the config file configures no registries: serving an empty mesh");
    }
    let mut running = start_inner(config, source, faults).await?;
    let mut backends = match demo {
        true => Some(crate::demo::start_backends(mock::demo_endpoints()).await),
        false => None,
    };
    match json_logs {
        true => info!(
            xds = %running.xds_addr,
            xds_tls = running.xds_tls_addr.map(|a| a.to_string()),
            admin = %running.admin_addr,
            demo,
            "tributary is serving"
        ),
        false => print_banner(&running, demo),
    }
    let failure = tokio::select! {
        () = wait_for_signal() => None,
        why = running.failed() => Some(why),
    };
    match &failure {
        None => info!("shutting down"),
        Some(why) => {
            error!(reason = %why, "a critical task died; shutting down and exiting non-zero so the process is restarted")
        }
    }
    if let Some(b) = backends.as_mut() {
        b.shutdown().await;
    }
    let limit = running.settings.drain_delay + running.settings.grace_period + STOP_SLACK;
    if tokio::time::timeout(limit, running.stop()).await.is_err() {
        warn!("shutdown did not finish in time; exiting anyway");
    }
    match failure {
        None => Ok(()),
        Some(why) => Err(anyhow::anyhow!("{why}")),
    }
}

/// Starts every task; returns once the sockets are bound (not once registries synced).
pub async fn start(config: Config) -> anyhow::Result<Running> {
    start_reloadable(config, None).await
}

/// Like [`start`]; with a `source`, the config file is reloaded on SIGHUP and when it changes
/// (registries added, removed or restarted; see `registries.rs`).
pub async fn start_reloadable(
    config: Config,
    source: Option<ConfigSource>,
) -> anyhow::Result<Running> {
    start_inner(config, source, Faults::default()).await
}

/// Like [`start`], with a task killed on purpose (supervision tests).
pub async fn start_with_faults(config: Config, faults: Faults) -> anyhow::Result<Running> {
    start_inner(config, None, faults).await
}

async fn start_inner(
    config: Config,
    source: Option<ConfigSource>,
    faults: Faults,
) -> anyhow::Result<Running> {
    let listeners = serve::Listeners::bind(&config).await?;
    let admin_listener = TcpListener::bind(config.admin_addr)
        .await
        .with_context(|| {
            format!(
                "cannot listen for admin HTTP on {} (--admin-addr)",
                config.admin_addr
            )
        })?;
    let xds_addr = listeners.plain.local_addr()?;
    let xds_tls_addr = listeners.tls_addr()?;
    let control_addr = listeners.control_addr()?;
    let admin_addr = admin_listener.local_addr()?;
    if !admin_addr.ip().is_loopback() {
        // SEC-6, SEC-14: the admin/debug server has no authentication; exposing it is explicit.
        warn!(addr = %admin_addr, "admin and debug endpoints are reachable beyond loopback, without authentication");
    }
    admin::metrics::handle();

    let shutdown = CancellationToken::new();
    let mut tasks = JoinSet::new();
    let mut names = supervise::TaskNames::default();
    let store = SnapshotStore::new();
    let view = RegistriesView::default();
    let (events_tx, events_rx) = mpsc::channel(REGISTRY_EVENTS_CAPACITY);
    let (push_tx, push_rx) = mpsc::channel(PUSH_REQUESTS_CAPACITY);

    let all_registries = config.all_registries();
    let order: Vec<RegistryId> = all_registries
        .iter()
        .map(|rc| RegistryId::new(rc.name()))
        .collect();
    let (rules, rules_rx) = ConfigStore::new();
    rules.set_order(order.clone());
    let (commands_tx, commands_rx) = CommandSender::channel(RELOAD_COMMANDS_CAPACITY);
    let (supervisor, mocks) = registries::Supervisor::start(
        &all_registries,
        rules.clone(),
        events_tx,
        commands_tx,
        shutdown.clone(),
        faults.clone(),
    );
    let t = tasks.spawn(
        faults
            .wrap("registries", supervisor.run(source, config.clone()))
            .instrument(info_span!("registries")),
    );
    names.insert(t.id(), "registry supervisor");

    let settings = AggregateSettings {
        registries: order,
        debounce: config.debounce,
        sync_timeout: config.sync_timeout,
    };
    let aggregate = Aggregate::new(settings, view.clone()).with_commands(commands_rx);
    let t = tasks.spawn(
        cancellable(
            faults.wrap("aggregate", aggregate.run(events_rx, push_tx)),
            shutdown.clone(),
        )
        .instrument(info_span!("aggregate")),
    );
    names.insert(t.id(), "aggregate");
    let options = GenerateOptions {
        send_unhealthy_endpoints: config.send_unhealthy_endpoints,
        connect_timeout: config.connect_timeout,
    };
    let mesh = MeshBuilder::new(options)
        .with_mcp(config.mcp.clone())
        .with_traffic_options(config.traffic.options());
    let t = tasks.spawn(
        cancellable(
            faults.wrap(
                "builder",
                run_builder(push_rx, rules_rx, store.clone(), mesh),
            ),
            shutdown.clone(),
        )
        .instrument(info_span!("builder")),
    );
    names.insert(t.id(), "snapshot builder");

    let xds = XdsServer::new(
        store.clone(),
        XdsOptions {
            identity: config.tls.as_ref().map(|t| t.identity).unwrap_or_default(),
            trust_domain: config.tls.as_ref().and_then(|t| t.trust_domain.clone()),
            serve_mcp: config.mcp.enabled,
            ..XdsOptions::default()
        },
    );
    let control = mocks.first().map(|h| MockControl::new(h.clone()));
    if mocks.len() > 1 {
        warn!("several mock registries: the control API drives the first one only");
    }
    let draining = CancellationToken::new();
    let stop_servers = CancellationToken::new();
    let mut servers = JoinSet::new();
    serve::spawn(
        &mut servers,
        listeners,
        &xds,
        control,
        &config.connections,
        &stop_servers,
        (&faults, &mut names),
    );
    let settings = config.shutdown.clone();
    let admin_state = AdminState {
        store: store.clone(),
        registries: view,
        xds: Arc::new(xds.connections()),
        config: Arc::new(config),
        draining: draining.clone(),
        rules,
    };
    let t = tasks.spawn(
        faults
            .wrap(
                "admin",
                admin::serve(admin_listener, admin_state, shutdown.clone()),
            )
            .instrument(info_span!("admin")),
    );
    names.insert(t.id(), "admin server");
    Ok(Running {
        xds_addr,
        control_addr,
        xds_tls_addr,
        admin_addr,
        mocks,
        store,
        xds,
        tasks,
        servers,
        names,
        shutdown,
        draining,
        stop_servers,
        settings,
    })
}

async fn cancellable(task: impl std::future::Future<Output = ()>, shutdown: CancellationToken) {
    tokio::select! {
        _ = shutdown.cancelled() => {}
        _ = task => {}
    }
}

async fn wait_for_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let Ok(mut term) = signal(SignalKind::terminate()) else {
            let _ = tokio::signal::ctrl_c().await;
            return;
        };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

fn print_banner(r: &Running, demo: bool) {
    let what = match demo {
        true => "the embedded demo mesh (echo, greeter, orders, db on 127.0.0.1)",
        false => "the configured registries",
    };
    println!(
        "tributary is serving {what}\n\
         \n  xDS (ADS, gRPC):  {xds}{tls}\n  admin:           http://{admin}/ready  /metrics  /debug\n\
         \nPoint an Envoy at it:\n\
         \n  tributary bootstrap --node-id demo --xds-addr {xds} --listener-address 127.0.0.1 > envoy.yaml\
         \n  envoy -c envoy.yaml --disable-hot-restart\n",
        xds = r.xds_addr,
        tls = match r.xds_tls_addr {
            Some(a) => format!("\n  xDS over mTLS:    {a}"),
            None => String::new(),
        } + &match r.control_addr {
            Some(a) => format!("\n  mock control API: {a}"),
            None => String::new(),
        },
        admin = r.admin_addr,
    );
    if demo {
        println!(
            "then:\n\n  curl -H 'Host: echo.demo.svc.cluster.local' http://127.0.0.1:18080/\n"
        );
    }
}
