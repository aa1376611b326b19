//! The xDS transports: the plaintext server (loopback by default) and the mTLS server, both served
//! by one connection loop with one set of HTTP/2 settings, and both serving the same [`XdsServer`];
//! and, when configured, the mock control API on a listener of its own (never on an xDS port).

use std::net::SocketAddr;

use anyhow::Context;
use tokio::net::TcpListener;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, info_span, warn};
use tributary_registries::mock::MockControl;

use crate::config::{Config, ConnectionSettings, RegistryConfig};
use crate::control_api::{self, Token};
use crate::tls::{self, ServerTls};
use crate::xds::XdsServer;

use super::connections;
use super::supervise::{Faults, TaskNames};

/// Bound xDS sockets, before serving.
pub(super) struct Listeners {
    pub plain: TcpListener,
    pub tls: Option<(TcpListener, ServerTls)>,
    /// The control API's listener and the token it requires, when configured.
    pub control: Option<(TcpListener, Option<Token>)>,
}

impl Listeners {
    /// Binds the plaintext port and, if configured, loads TLS and binds the mTLS port.
    pub(super) async fn bind(config: &Config) -> anyhow::Result<Self> {
        let plain = TcpListener::bind(config.xds_addr).await.with_context(|| {
            format!(
                "cannot listen for xDS on {}: is another tributary or istiod running? (--xds-addr)",
                config.xds_addr
            )
        })?;
        if !config.xds_addr.ip().is_loopback() {
            // SEC-14: an insecure mode is explicit and loud.
            warn!(addr = %config.xds_addr, "plaintext xDS is reachable from the network without authentication (insecure_plaintext_xds)");
        }
        let tls = match &config.tls {
            None => None,
            Some(tc) => {
                let material = ServerTls::load(tc)
                    .with_context(|| "cannot load the TLS material for xDS (tls:)")?;
                let listener = TcpListener::bind(tc.addr).await.with_context(|| {
                    format!("cannot listen for mTLS xDS on {} (tls.addr)", tc.addr)
                })?;
                Some((listener, material))
            }
        };
        let has_mock = config
            .registries
            .iter()
            .any(|r| matches!(r, RegistryConfig::Mock(_)));
        let control = match &config.control_api {
            Some(_) if !has_mock => {
                warn!("control_api is configured but no mock registry is: not serving it");
                None
            }
            None => None,
            Some(c) => {
                let token = c.load_token()?;
                let listener = TcpListener::bind(c.addr).await.with_context(|| {
                    format!(
                        "cannot listen for the mock control API on {} (control_api.addr)",
                        c.addr
                    )
                })?;
                if token.is_none() {
                    // Validation allows this only on loopback.
                    warn!(addr = %c.addr, "the mock control API accepts calls without credentials (loopback only; set control_api.token_file to require a token)");
                }
                Some((listener, token))
            }
        };
        Ok(Self {
            plain,
            tls,
            control,
        })
    }

    /// The control API's address, if it is served.
    pub(super) fn control_addr(&self) -> anyhow::Result<Option<SocketAddr>> {
        Ok(match &self.control {
            Some((l, _)) => Some(l.local_addr()?),
            None => None,
        })
    }

    /// The mTLS address, if any.
    pub(super) fn tls_addr(&self) -> anyhow::Result<Option<SocketAddr>> {
        Ok(match &self.tls {
            Some((l, _)) => Some(l.local_addr()?),
            None => None,
        })
    }
}

/// Spawns the servers on `servers`; they stop accepting and send GOAWAY when `stop` is cancelled,
/// then end when their connections have.
pub(super) fn spawn(
    servers: &mut JoinSet<()>,
    listeners: Listeners,
    xds: &XdsServer,
    control: Option<MockControl>,
    settings: &ConnectionSettings,
    stop: &CancellationToken,
    (faults, names): (&Faults, &mut TaskNames),
) {
    if let (Some((listener, token)), Some(control)) = (listeners.control, control) {
        let incoming = tonic::transport::server::TcpIncoming::from(listener);
        let t = servers.spawn(
            connections::serve(
                "control_api",
                incoming,
                control_api::routes(control, token),
                settings.clone(),
                stop.clone(),
            )
            .instrument(info_span!("control_api")),
        );
        names.insert(t.id(), "mock control API server");
    }
    let mut routes = xds.routes();
    // Client status (CSDS) on the plaintext port only: it shows every client's config.
    routes = routes.add_service(xds.csds().into_server());
    // REST-JSON xDS polls (HTTP/1.1 or h2) beside gRPC.
    routes = xds.rest().mount(routes);
    // Pushes are small writes that must leave at once: no Nagle delay.
    let incoming =
        tonic::transport::server::TcpIncoming::from(listeners.plain).with_nodelay(Some(true));
    let t = servers.spawn(
        faults
            .wrap(
                "xds",
                connections::serve("xds", incoming, routes, settings.clone(), stop.clone()),
            )
            .instrument(info_span!("xds")),
    );
    names.insert(t.id(), "plaintext xDS server");
    if let Some((listener, material)) = listeners.tls {
        let t = servers.spawn(
            tls::run_reloader(material.clone(), stop.clone()).instrument(info_span!("tls_reload")),
        );
        names.insert(t.id(), "TLS reloader");
        let incoming = tls::incoming(listener, material, stop.clone());
        let t = servers.spawn(
            connections::serve(
                "xds_tls",
                incoming,
                xds.routes(),
                settings.clone(),
                stop.clone(),
            )
            .instrument(info_span!("xds_tls")),
        );
        names.insert(t.id(), "mTLS xDS server");
    }
}
