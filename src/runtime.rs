//! Wires registries → aggregate → snapshot builder → xDS server, plus the admin server.
//!
//! Every long-lived task is owned by one `JoinSet` and stops on one cancellation token. Listen
//! sockets are bound first, so a port in use fails start-up with a message that says which.

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context;
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, error, info, info_span, warn};
use tributary_registries::consul::ConsulRegistry;
use tributary_registries::kubernetes::KubernetesRegistry;
use tributary_registries::mock::{self, MockControl, MockHandle, MockRegistry};
use tributary_registries::serviceentry::ServiceEntryRegistry;
use tributary_registries::{Registry, RegistryError, RegistryId, RegistrySink};

use crate::admin::{self, AdminState};
use crate::aggregate::{Aggregate, AggregateSettings, RegistriesView};
use crate::config::{Config, RegistryConfig};
use crate::envoy::GenerateOptions;
use crate::snapshot::{MeshBuilder, SnapshotStore, run_builder};
use crate::xds::{XdsOptions, XdsServer};

/// Registry events waiting for the aggregate. Large enough to absorb a registry's initial listing in
/// a few batches; when full, registries wait (back-pressure, never unbounded memory).
const REGISTRY_EVENTS_CAPACITY: usize = 1024;
/// Push requests waiting for the builder: one, because the aggregate sends the next only after the
/// previous is done (one push pipeline at a time, REG-13).
const PUSH_REQUESTS_CAPACITY: usize = 1;

/// A running tributary.
pub struct Running {
    /// Where xDS (and the mock control API) listens.
    pub xds_addr: SocketAddr,
    /// Where admin HTTP listens.
    pub admin_addr: SocketAddr,
    /// Handles of the mock registries, in configured order, to drive them in-process.
    pub mocks: Vec<MockHandle>,
    /// The published snapshots.
    pub store: SnapshotStore,
    tasks: JoinSet<()>,
    shutdown: CancellationToken,
}

impl Running {
    /// Stops everything and waits for the tasks to end.
    pub async fn stop(mut self) {
        self.shutdown.cancel();
        self.tasks.shutdown().await;
    }
}

/// Runs tributary until SIGINT or SIGTERM.
pub async fn run(config: Config) -> anyhow::Result<()> {
    let demo = config.is_demo();
    let running = start(config).await?;
    let mut backends = match demo {
        true => Some(crate::demo::start_backends(mock::demo_endpoints()).await),
        false => None,
    };
    print_banner(&running, demo);
    wait_for_signal().await;
    info!("shutting down");
    if let Some(b) = backends.as_mut() {
        b.shutdown().await;
    }
    running.stop().await;
    Ok(())
}

/// Starts every task; returns once the sockets are bound (not once registries synced).
pub async fn start(mut config: Config) -> anyhow::Result<Running> {
    if config.is_demo() {
        config
            .registries
            .push(RegistryConfig::Mock(mock::demo_config()));
    }
    let xds_listener = TcpListener::bind(config.xds_addr).await.with_context(|| {
        format!(
            "cannot listen for xDS on {}: is another tributary or istiod running? (--xds-addr)",
            config.xds_addr
        )
    })?;
    let admin_listener = TcpListener::bind(config.admin_addr)
        .await
        .with_context(|| {
            format!(
                "cannot listen for admin HTTP on {} (--admin-addr)",
                config.admin_addr
            )
        })?;
    let xds_addr = xds_listener.local_addr()?;
    let admin_addr = admin_listener.local_addr()?;
    admin::metrics::handle();

    let shutdown = CancellationToken::new();
    let mut tasks = JoinSet::new();
    let store = SnapshotStore::new();
    let view = RegistriesView::default();
    let (events_tx, events_rx) = mpsc::channel(REGISTRY_EVENTS_CAPACITY);
    let (push_tx, push_rx) = mpsc::channel(PUSH_REQUESTS_CAPACITY);

    let mut mocks = Vec::new();
    let mut order = Vec::new();
    for rc in &config.registries {
        let id = RegistryId::new(rc.name());
        order.push(id.clone());
        let registry: Box<dyn Registry> = match rc {
            RegistryConfig::Mock(mc) => {
                let (registry, handle) = MockRegistry::new(mc.clone());
                mocks.push(handle);
                Box::new(registry)
            }
            RegistryConfig::Kubernetes(kc) => Box::new(KubernetesRegistry::new((**kc).clone())),
            RegistryConfig::Consul(cc) => Box::new(ConsulRegistry::new((**cc).clone())),
            RegistryConfig::ServiceEntry(sc) => Box::new(ServiceEntryRegistry::new((**sc).clone())),
        };
        let sink = RegistrySink::new(id.clone(), events_tx.clone());
        let span = info_span!("registry", registry = %id);
        tasks.spawn(run_registry(registry, sink, shutdown.clone()).instrument(span));
    }
    drop(events_tx);

    let settings = AggregateSettings {
        registries: order,
        debounce: config.debounce,
        sync_timeout: config.sync_timeout,
    };
    let aggregate = Aggregate::new(settings, view.clone());
    tasks.spawn(
        cancellable(aggregate.run(events_rx, push_tx), shutdown.clone())
            .instrument(info_span!("aggregate")),
    );
    let options = GenerateOptions {
        send_unhealthy_endpoints: config.send_unhealthy_endpoints,
        connect_timeout: config.connect_timeout,
    };
    tasks.spawn(
        cancellable(
            run_builder(push_rx, store.clone(), MeshBuilder::new(options)),
            shutdown.clone(),
        )
        .instrument(info_span!("builder")),
    );

    let xds = XdsServer::new(store.clone(), XdsOptions::default());
    let control = mocks
        .first()
        .map(|h| MockControl::new(h.clone()).into_server());
    if mocks.len() > 1 {
        warn!("several mock registries: the control API drives the first one only");
    }
    let admin_state = AdminState {
        store: store.clone(),
        registries: view,
        xds: Arc::new(xds.connections()),
        config: Arc::new(config),
    };
    let token = shutdown.clone();
    tasks.spawn(
        async move {
            let router =
                xds.add_to(tonic::transport::Server::builder().add_optional_service(control));
            // Pushes are small writes that must leave at once: no Nagle delay (tonic sets
            // TCP_NODELAY only for listeners it binds itself).
            let incoming =
                tonic::transport::server::TcpIncoming::from(xds_listener).with_nodelay(Some(true));
            if let Err(e) = router
                .serve_with_incoming_shutdown(incoming, token.cancelled())
                .await
            {
                error!(error = %e, "xDS server stopped");
            }
        }
        .instrument(info_span!("xds")),
    );
    tasks.spawn(
        admin::serve(admin_listener, admin_state, shutdown.clone()).instrument(info_span!("admin")),
    );
    Ok(Running {
        xds_addr,
        admin_addr,
        mocks,
        store,
        tasks,
        shutdown,
    })
}

async fn run_registry(
    registry: Box<dyn Registry>,
    sink: RegistrySink,
    shutdown: CancellationToken,
) {
    tokio::select! {
        _ = shutdown.cancelled() => {}
        result = registry.run(sink) => match result {
            Ok(()) | Err(RegistryError::Closed) => info!("registry stopped"),
            Err(e) => error!(error = %e, "registry stopped; its last state is still served"),
        },
    }
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
         \n  xDS (ADS, gRPC):  {xds}\n  admin:           http://{admin}/ready  /metrics  /debug\n\
         \nPoint an Envoy at it:\n\
         \n  tributary bootstrap --node-id demo --xds-addr {xds} --listener-address 127.0.0.1 > envoy.yaml\
         \n  envoy -c envoy.yaml --disable-hot-restart\n",
        xds = r.xds_addr,
        admin = r.admin_addr,
    );
    if demo {
        println!(
            "then:\n\n  curl -H 'Host: echo.demo.svc.cluster.local' http://127.0.0.1:18080/\n"
        );
    }
}
