//! `tributary mock ...`: a small client of the mock registry's control API (gRPC,
//! `tributary.mock.v1.MockRegistry`), so driving the mock needs neither grpcurl nor the `.proto`.
//! Services go in and come out in the mock file's YAML form.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::{Args, Subcommand};
use tonic::Request;
use tonic::metadata::MetadataValue;
use tonic::transport::Channel;
use tributary_registries::mock::proto::mock_registry_client::MockRegistryClient;
use tributary_registries::mock::proto::{self, fault};
use tributary_registries::mock::{
    EndpointSpec, MockConfig, MockFile, ServiceSpec, spec_from_proto, spec_to_proto,
};

/// How long to wait for the control API to accept the connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long one call may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// Flags of `tributary mock`.
#[derive(Debug, Args)]
pub struct MockArgs {
    /// Where the control API listens (HOST:PORT).
    #[arg(long, value_name = "ADDR", default_value = crate::control_api::DEFAULT_CONTROL_ADDR)]
    pub addr: String,
    /// A file holding the bearer token the control API requires, if it requires one.
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<PathBuf>,
    /// What to do.
    #[command(subcommand)]
    pub action: MockAction,
}

/// `tributary mock` actions.
#[derive(Debug, Subcommand)]
pub enum MockAction {
    /// Print every service (mock file YAML) and the registry's state.
    List,
    /// Print one service.
    Get {
        /// Its hostname.
        hostname: String,
    },
    /// Add or replace the services of a mock file (YAML with `services:`), or `-` for stdin.
    Upsert {
        /// The file.
        file: PathBuf,
    },
    /// Remove a service.
    Delete {
        /// Its hostname.
        hostname: String,
    },
    /// Replace a service's endpoints with those of a YAML list (mock file endpoint form).
    SetEndpoints {
        /// The service's hostname.
        hostname: String,
        /// A YAML file holding a list of endpoints, or `-` for stdin.
        file: PathBuf,
    },
    /// Inject a fault, or clear them all.
    Fault {
        /// The fault.
        #[command(subcommand)]
        fault: FaultAction,
    },
}

/// Faults `tributary mock fault` can inject.
#[derive(Debug, Subcommand)]
pub enum FaultAction {
    /// Deliver every change this many milliseconds late.
    Delay {
        /// Milliseconds.
        millis: u64,
    },
    /// Report the registry as degraded with this message.
    Error {
        /// The reason shown in /debug/registryz.
        message: String,
    },
    /// Stop delivering changes.
    Stall,
    /// Clear every fault.
    Clear,
}

impl MockArgs {
    /// Runs the action, printing its result.
    pub async fn run(&self) -> anyhow::Result<()> {
        let mut client = self.client().await?;
        match &self.action {
            MockAction::List => {
                let list = client.list_services(self.request(proto::ListServicesRequest {})?);
                let list = list.await?.into_inner();
                let services = list
                    .services
                    .into_iter()
                    .map(spec_from_proto)
                    .collect::<Result<Vec<_>, _>>()?;
                print!("{}", serde_yaml::to_string(&MockFile { services })?);
                println!(
                    "# synced: {}, sync held: {}, paused: {}, faults: {}{}",
                    list.synced,
                    list.sync_held,
                    list.paused,
                    list.faults.len(),
                    match list.degraded_reason.is_empty() {
                        true => String::new(),
                        false => format!(", degraded: {}", list.degraded_reason),
                    }
                );
            }
            MockAction::Get { hostname } => {
                let found = self.service(&mut client, hostname).await?;
                print!("{}", serde_yaml::to_string(&spec_from_proto(found)?)?);
            }
            MockAction::Upsert { file } => {
                let text = read(file)?;
                let parsed: MockFile = serde_yaml::from_str(&text)
                    .with_context(|| format!("{}: not a mock file", file.display()))?;
                let origin = MockConfig::default().origin();
                for spec in &parsed.services {
                    let service = spec_to_proto(spec, &origin)
                        .with_context(|| format!("service {:?}", spec.hostname))?;
                    let req = proto::UpsertServiceRequest {
                        service: Some(service),
                    };
                    client.upsert_service(self.request(req)?).await?;
                    println!("upserted {}", spec.hostname);
                }
            }
            MockAction::Delete { hostname } => {
                let req = proto::DeleteServiceRequest {
                    hostname: hostname.clone(),
                };
                client.delete_service(self.request(req)?).await?;
                println!("deleted {hostname}");
            }
            MockAction::SetEndpoints { hostname, file } => {
                let endpoints = self.endpoints(&mut client, hostname, file).await?;
                let n = endpoints.len();
                let req = proto::SetEndpointsRequest {
                    hostname: hostname.clone(),
                    endpoints,
                };
                client.set_endpoints(self.request(req)?).await?;
                println!("{hostname}: {n} endpoint(s)");
            }
            MockAction::Fault { fault } => {
                let kind = match fault {
                    FaultAction::Clear => {
                        client
                            .clear_faults(self.request(proto::ClearFaultsRequest {})?)
                            .await?;
                        println!("faults cleared");
                        return Ok(());
                    }
                    FaultAction::Delay { millis } => {
                        fault::Kind::Delay(proto::DelayFault { millis: *millis })
                    }
                    FaultAction::Error { message } => fault::Kind::Error(proto::ErrorFault {
                        message: message.clone(),
                    }),
                    FaultAction::Stall => fault::Kind::Stall(proto::StallFault {}),
                };
                let req = proto::InjectFaultRequest {
                    fault: Some(proto::Fault { kind: Some(kind) }),
                };
                client.inject_fault(self.request(req)?).await?;
                println!("fault injected");
            }
        }
        Ok(())
    }

    async fn client(&self) -> anyhow::Result<MockRegistryClient<Channel>> {
        let uri = match self.addr.contains("://") {
            true => self.addr.clone(),
            false => format!("http://{}", self.addr),
        };
        let channel = Channel::from_shared(uri.clone())
            .with_context(|| format!("--addr {:?} is not HOST:PORT", self.addr))?
            .connect_timeout(CONNECT_TIMEOUT)
            .timeout(CALL_TIMEOUT)
            .connect()
            .await
            .with_context(|| {
                format!("cannot reach the mock control API at {uri}: is tributary running with a mock registry, and is --addr its control address?")
            })?;
        Ok(MockRegistryClient::new(channel))
    }

    /// A request carrying the bearer token, if one is configured.
    fn request<T>(&self, message: T) -> anyhow::Result<Request<T>> {
        let mut req = Request::new(message);
        if let Some(path) = &self.token_file {
            let token = std::fs::read_to_string(path)
                .with_context(|| format!("cannot read --token-file {}", path.display()))?;
            let value: MetadataValue<_> = format!("Bearer {}", token.trim())
                .parse()
                .context("the token is not a valid header value")?;
            req.metadata_mut().insert("authorization", value);
        }
        Ok(req)
    }

    /// The service the mock registry serves for `hostname` (compared case-insensitively).
    async fn service(
        &self,
        client: &mut MockRegistryClient<Channel>,
        hostname: &str,
    ) -> anyhow::Result<proto::Service> {
        let list = client.list_services(self.request(proto::ListServicesRequest {})?);
        list.await?
            .into_inner()
            .services
            .into_iter()
            .find(|s| s.hostname.eq_ignore_ascii_case(hostname))
            .with_context(|| format!("no service {hostname:?} in the mock registry"))
    }

    /// The endpoints of `file`, checked against the service's ports.
    async fn endpoints(
        &self,
        client: &mut MockRegistryClient<Channel>,
        hostname: &str,
        file: &PathBuf,
    ) -> anyhow::Result<Vec<proto::Endpoint>> {
        let text = read(file)?;
        let endpoints: Vec<EndpointSpec> = serde_yaml::from_str(&text)
            .with_context(|| format!("{}: not a YAML list of endpoints", file.display()))?;
        let current = self.service(client, hostname).await?;
        let mut spec: ServiceSpec = spec_from_proto(current)?;
        spec.endpoints = endpoints;
        let service = spec_to_proto(&spec, &MockConfig::default().origin())
            .with_context(|| format!("endpoints of {hostname:?}"))?;
        Ok(service.endpoints)
    }
}

fn read(file: &PathBuf) -> anyhow::Result<String> {
    if file.as_os_str() == "-" {
        return std::io::read_to_string(std::io::stdin()).context("reading standard input");
    }
    std::fs::read_to_string(file).with_context(|| format!("cannot read {}", file.display()))
}
