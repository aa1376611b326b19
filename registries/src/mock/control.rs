//! The mock registry's gRPC control API (`tributary.mock.v1.MockRegistry`) over a [`MockHandle`].

use tonic::{Request, Response, Status};

use super::convert::{
    endpoints_from_proto, fault_from_proto, fault_to_proto, service_from_proto, service_to_proto,
};
use super::file_format::{InvalidField, Seg};
use super::handle::{MockError, MockHandle};
use super::proto;
use super::proto::mock_registry_server::{MockRegistry as MockRegistryApi, MockRegistryServer};
use crate::registry::RegistryStatus;

/// The control service. Mount [`MockControl::into_server`] on a tonic server.
#[derive(Debug, Clone)]
pub struct MockControl {
    handle: MockHandle,
}

impl MockControl {
    /// A control service driving the registry behind `handle`.
    pub fn new(handle: MockHandle) -> Self {
        Self { handle }
    }

    /// The tonic service to add to a server.
    pub fn into_server(self) -> MockRegistryServer<Self> {
        MockRegistryServer::new(self)
    }
}

/// gRPC server reflection for the control API, in both versions clients ask for (`v1`, and
/// `v1alpha`, which older grpcurl uses), so `grpcurl -plaintext ADDR list` and `describe` work
/// without the `.proto`. Mount them next to [`MockControl::into_server`].
pub fn reflection_services() -> (
    tonic_reflection::server::v1::ServerReflectionServer<
        impl tonic_reflection::server::v1::ServerReflection,
    >,
    tonic_reflection::server::v1alpha::ServerReflectionServer<
        impl tonic_reflection::server::v1alpha::ServerReflection,
    >,
) {
    let builder = || {
        tonic_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(proto::FILE_DESCRIPTOR_SET)
    };
    let v1 = builder()
        .build_v1()
        .expect("build.rs embeds the control API's descriptor set, compiled by protox");
    let v1alpha = builder()
        .build_v1alpha()
        .expect("build.rs embeds the control API's descriptor set, compiled by protox");
    (v1, v1alpha)
}

/// `INVALID_ARGUMENT` naming the field, `NOT_FOUND` for unknown services, `UNAVAILABLE` when the
/// registry is not running.
fn status(e: MockError) -> Status {
    match e {
        MockError::Invalid(_) => Status::invalid_argument(e.to_string()),
        MockError::UnknownService(_) => Status::not_found(e.to_string()),
        MockError::Stopped => Status::unavailable(e.to_string()),
    }
}

fn under(prefix: &str, mut e: InvalidField) -> MockError {
    e.field = e.field.under(&[Seg::Key(prefix.to_string())]);
    MockError::Invalid(e)
}

#[tonic::async_trait]
impl MockRegistryApi for MockControl {
    async fn upsert_service(
        &self,
        request: Request<proto::UpsertServiceRequest>,
    ) -> Result<Response<proto::UpsertServiceResponse>, Status> {
        let service = request
            .into_inner()
            .service
            .ok_or_else(|| Status::invalid_argument("service: required"))?;
        let spec = service_from_proto(service).map_err(|e| status(under("service", e)))?;
        self.handle
            .upsert_service(spec)
            .await
            .map_err(|e| match e {
                MockError::Invalid(e) => status(under("service", e)),
                e => status(e),
            })?;
        Ok(Response::new(proto::UpsertServiceResponse {}))
    }

    async fn delete_service(
        &self,
        request: Request<proto::DeleteServiceRequest>,
    ) -> Result<Response<proto::DeleteServiceResponse>, Status> {
        let hostname = request.into_inner().hostname;
        self.handle
            .delete_service(&hostname)
            .await
            .map_err(status)?;
        Ok(Response::new(proto::DeleteServiceResponse {}))
    }

    async fn set_endpoints(
        &self,
        request: Request<proto::SetEndpointsRequest>,
    ) -> Result<Response<proto::SetEndpointsResponse>, Status> {
        let request = request.into_inner();
        let endpoints = endpoints_from_proto(&request.endpoints).map_err(|(field, message)| {
            status(MockError::Invalid(InvalidField {
                hostname: request.hostname.clone(),
                field: field.under(&[Seg::Key("endpoints".into())]),
                message,
            }))
        })?;
        self.handle
            .set_endpoints(&request.hostname, endpoints)
            .await
            .map_err(status)?;
        Ok(Response::new(proto::SetEndpointsResponse {}))
    }

    async fn list_services(
        &self,
        _request: Request<proto::ListServicesRequest>,
    ) -> Result<Response<proto::ListServicesResponse>, Status> {
        let state = self.handle.state().await.map_err(status)?;
        Ok(Response::new(proto::ListServicesResponse {
            services: state.services.iter().map(service_to_proto).collect(),
            synced: state.synced,
            sync_held: state.sync_held,
            paused: state.paused,
            faults: state.faults.iter().map(fault_to_proto).collect(),
            degraded_reason: match state.status {
                RegistryStatus::Healthy => String::new(),
                RegistryStatus::Degraded { reason } => reason,
            },
        }))
    }

    async fn inject_fault(
        &self,
        request: Request<proto::InjectFaultRequest>,
    ) -> Result<Response<proto::InjectFaultResponse>, Status> {
        let fault =
            fault_from_proto(request.into_inner().fault).map_err(Status::invalid_argument)?;
        self.handle.inject_fault(fault).await.map_err(status)?;
        Ok(Response::new(proto::InjectFaultResponse {}))
    }

    async fn clear_faults(
        &self,
        _request: Request<proto::ClearFaultsRequest>,
    ) -> Result<Response<proto::ClearFaultsResponse>, Status> {
        self.handle.clear_faults().await.map_err(status)?;
        Ok(Response::new(proto::ClearFaultsResponse {}))
    }

    async fn release_sync(
        &self,
        _request: Request<proto::ReleaseSyncRequest>,
    ) -> Result<Response<proto::ReleaseSyncResponse>, Status> {
        self.handle.release_sync().await.map_err(status)?;
        Ok(Response::new(proto::ReleaseSyncResponse {}))
    }

    async fn pause_sync(
        &self,
        _request: Request<proto::PauseSyncRequest>,
    ) -> Result<Response<proto::PauseSyncResponse>, Status> {
        self.handle.pause_sync().await.map_err(status)?;
        Ok(Response::new(proto::PauseSyncResponse {}))
    }

    async fn resume_sync(
        &self,
        _request: Request<proto::ResumeSyncRequest>,
    ) -> Result<Response<proto::ResumeSyncResponse>, Status> {
        self.handle.resume_sync().await.map_err(status)?;
        Ok(Response::new(proto::ResumeSyncResponse {}))
    }
}
