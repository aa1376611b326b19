//! The control API over a real tonic server on 127.0.0.1:0, through the generated client.

use tokio::net::TcpListener;
use tonic::Code;
use tonic::transport::Channel;
use tonic::transport::server::TcpIncoming;

use super::*;
use crate::mock::MockControl;
use crate::mock::proto;
use crate::mock::proto::mock_registry_client::MockRegistryClient;

async fn serve(handle: MockHandle) -> (MockRegistryClient<Channel>, JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move {
        tonic::transport::Server::builder()
            .add_service(MockControl::new(handle).into_server())
            .serve_with_incoming(TcpIncoming::from(listener))
            .await
            .unwrap();
    });
    let client = MockRegistryClient::connect(format!("http://{addr}"))
        .await
        .unwrap();
    (client, server)
}

fn proto_service(host: &str, addr: &str) -> proto::Service {
    proto::Service {
        hostname: host.into(),
        ports: vec![proto::Port {
            name: "http".into(),
            port: 8080,
            protocol: proto::Protocol::Http as i32,
        }],
        endpoints: vec![proto_endpoint(addr)],
        ..Default::default()
    }
}

fn proto_endpoint(addr: &str) -> proto::Endpoint {
    proto::Endpoint {
        address: addr.into(),
        ports: [("http".to_string(), 19090)].into(),
        labels: [("version".to_string(), "v1".to_string())].into(),
        locality: "us-east/zone-a".into(),
        health: proto::Health::Draining as i32,
        weight: Some(2),
        ..Default::default()
    }
}

#[tokio::test]
async fn edits_and_lists_services_over_grpc() {
    let mut r = start(MockConfig::default());
    r.settle().await;
    let (mut client, server) = serve(r.handle.clone()).await;

    client
        .upsert_service(proto::UpsertServiceRequest {
            service: Some(proto_service("echo.demo", "10.0.0.1")),
        })
        .await
        .unwrap();
    assert_eq!(summary(&r.drain()), ["+echo.demo/1"]);

    let list = client
        .list_services(proto::ListServicesRequest {})
        .await
        .unwrap()
        .into_inner();
    assert!(list.synced && !list.sync_held && !list.paused);
    assert_eq!(list.degraded_reason, "");
    let mut expected = proto_service("echo.demo", "10.0.0.1");
    expected.resolution = proto::Resolution::Static as i32;
    expected.location = proto::MeshLocation::MeshInternal as i32;
    expected.endpoints[0].locality = "us-east/zone-a/".into();
    assert_eq!(list.services, [expected], "round trip through the model");

    client
        .set_endpoints(proto::SetEndpointsRequest {
            hostname: "echo.demo".into(),
            endpoints: vec![proto_endpoint("10.0.0.1"), proto_endpoint("10.0.0.2")],
        })
        .await
        .unwrap();
    assert_eq!(summary(&r.drain()), ["+echo.demo/2"]);

    client
        .delete_service(proto::DeleteServiceRequest {
            hostname: "echo.demo".into(),
        })
        .await
        .unwrap();
    assert_eq!(summary(&r.drain()), ["-echo.demo"]);
    let err = client
        .delete_service(proto::DeleteServiceRequest {
            hostname: "echo.demo".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::NotFound, "{err:?}");
    server.abort();
}

#[tokio::test]
async fn bad_requests_are_invalid_argument_naming_the_field() {
    let mut r = start(MockConfig::default());
    r.settle().await;
    let (mut client, server) = serve(r.handle.clone()).await;
    client
        .upsert_service(proto::UpsertServiceRequest {
            service: Some(proto_service("echo.demo", "10.0.0.1")),
        })
        .await
        .unwrap();
    assert_eq!(summary(&r.drain()), ["+echo.demo/1"]);

    let mut cases: Vec<(proto::Service, &str)> = Vec::new();
    cases.push((proto_service("bad..host", "10.0.0.1"), "service.hostname"));
    let mut s = proto_service("a.demo", "10.0.0.1");
    s.ports[0].port = 0;
    cases.push((s, "service.ports[0].port"));
    let mut s = proto_service("a.demo", "10.0.0.1");
    s.ports[0].port = 70000;
    cases.push((s, "service.ports[0].port"));
    let mut s = proto_service("a.demo", "10.0.0.1");
    s.ports[0].protocol = proto::Protocol::Unspecified as i32;
    cases.push((s, "service.ports[0].protocol"));
    let mut s = proto_service("a.demo", "10.0.0.1");
    s.endpoints[0].ports.insert("nope".into(), 1);
    cases.push((s, "service.endpoints[0].ports.nope"));
    let mut s = proto_service("a.demo", "10.0.0.1");
    s.endpoints[0].weight = Some(0);
    cases.push((s, "service.endpoints[0].weight"));
    let mut s = proto_service("a.demo", "10.0.0.1");
    s.vips = vec!["not-an-ip".into()];
    cases.push((s, "service.vips[0]"));
    for (service, field) in cases {
        let err = client
            .upsert_service(proto::UpsertServiceRequest {
                service: Some(service),
            })
            .await
            .unwrap_err();
        assert_eq!(err.code(), Code::InvalidArgument, "{field}: {err:?}");
        assert!(
            err.message().contains(field),
            "{field} in {:?}",
            err.message()
        );
    }

    let mut ep = proto_endpoint("10.0.0.3");
    ep.ports = [("grpc".to_string(), 9000)].into();
    let err = client
        .set_endpoints(proto::SetEndpointsRequest {
            hostname: "echo.demo".into(),
            endpoints: vec![ep],
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(
        err.message().contains("endpoints[0].ports.grpc"),
        "{}",
        err.message()
    );

    let err = client
        .inject_fault(proto::InjectFaultRequest { fault: None })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(err.message().contains("fault"), "{}", err.message());
    assert_eq!(r.settle().await.len(), 0, "bad requests change nothing");
    server.abort();
}

#[tokio::test]
async fn faults_and_sync_control_over_grpc() {
    let mut r = start(MockConfig {
        hold_sync: true,
        services: vec![spec("a.demo", &["10.0.0.1"])],
        ..MockConfig::default()
    });
    let (mut client, server) = serve(r.handle.clone()).await;
    let list = client
        .list_services(proto::ListServicesRequest {})
        .await
        .unwrap()
        .into_inner();
    assert!(list.sync_held && !list.synced);
    assert_eq!(r.drain(), []);
    client
        .release_sync(proto::ReleaseSyncRequest {})
        .await
        .unwrap();
    assert_eq!(summary(&r.drain()), ["+a.demo/1", "synced"]);

    let error = proto::Fault {
        kind: Some(proto::fault::Kind::Error(proto::ErrorFault {
            message: "injected".into(),
        })),
    };
    client
        .inject_fault(proto::InjectFaultRequest {
            fault: Some(error.clone()),
        })
        .await
        .unwrap();
    assert_eq!(summary(&r.drain()), ["degraded"]);
    let list = client
        .list_services(proto::ListServicesRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(list.faults, [error]);
    assert_eq!(list.degraded_reason, "injected");
    client
        .upsert_service(proto::UpsertServiceRequest {
            service: Some(proto_service("b.demo", "10.0.0.2")),
        })
        .await
        .unwrap();
    assert_eq!(r.drain(), []);
    client
        .clear_faults(proto::ClearFaultsRequest {})
        .await
        .unwrap();
    assert_eq!(summary(&r.drain()), ["healthy", "+b.demo/1"]);

    client.pause_sync(proto::PauseSyncRequest {}).await.unwrap();
    client
        .delete_service(proto::DeleteServiceRequest {
            hostname: "a.demo".into(),
        })
        .await
        .unwrap();
    assert_eq!(r.drain(), []);
    client
        .resume_sync(proto::ResumeSyncRequest {})
        .await
        .unwrap();
    assert_eq!(summary(&r.drain()), ["-a.demo"]);
    server.abort();
}

#[tokio::test]
async fn oversized_labels_and_names_are_refused_over_grpc() {
    // docs/hardening.md, "The mock file": the same bounds apply to control-API requests.
    let mut r = start(MockConfig::default());
    r.settle().await;
    let (mut client, server) = serve(r.handle.clone()).await;
    let mut big_label = proto_service("echo.demo", "10.0.0.1");
    big_label.endpoints[0]
        .labels
        .insert("app".into(), "v".repeat(1_000_000));
    let mut big_name = proto_service("echo.demo", "10.0.0.1");
    big_name.ports[0].name = "p".repeat(300);
    for (service, says) in [
        (big_label, "label value is 1000000 bytes"),
        (big_name, "at most 253"),
    ] {
        let err = client
            .upsert_service(proto::UpsertServiceRequest {
                service: Some(service),
            })
            .await
            .unwrap_err();
        assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
        assert!(err.message().contains(says), "{}", err.message());
        assert!(
            err.message().len() < 1_000,
            "the error does not echo the value"
        );
    }
    assert_eq!(r.drain(), []);
    server.abort();
}
