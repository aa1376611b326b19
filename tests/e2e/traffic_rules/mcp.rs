//! Issue 17's consume proof (H-ENVOY): Istio config served by the project's test MCP server
//! (`xds://`, MCP over xDS) drives a real Envoy behind tributary. A ServiceEntry from the server
//! becomes a routable service, a DestinationRule + VirtualService steer the mock registry's
//! service; when the server disappears the config stays (Envoy still routes, the source is
//! degraded in `/debug/registryz`), and a change made meanwhile arrives once it is back. Run over
//! delta (Envoy and config server) and over SotW (Envoy, and a config server without delta, so
//! the client falls back).

use serde_json::Value;

use super::scenario::{CONVERGE, Mesh, Mode, Rules, destination_rule, split, virtual_service};
use super::upstream::get;
use crate::support::harness::{eventually, free_port, loopback, no_rejections};

/// The host of the ServiceEntry the config server serves.
const API: &str = "api.mcp.local";

/// A ServiceEntry for [`API`] on `port`, whose one endpoint is `upstream` (labelled v2).
fn service_entry(port: u16, upstream: std::net::SocketAddr) -> String {
    format!(
        "apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {{name: api, namespace: default}}
spec:
  hosts: [{API}]
  ports: [{{number: {port}, name: http, protocol: HTTP}}]
  location: MESH_INTERNAL
  resolution: STATIC
  endpoints: [{{address: {}, ports: {{http: {}}}, labels: {{version: v2}}}}]
",
        upstream.ip(),
        upstream.port()
    )
}

/// The source's `status` in `/debug/registryz` once `done` holds for it.
async fn registry_status(mesh: &Mesh, id: &str, done: impl Fn(&str) -> bool) -> String {
    eventually(CONVERGE, &format!("{id} in /debug/registryz"), || async {
        let r: Value = serde_json::from_str(&mesh.t.get("/debug/registryz").await).ok()?;
        let entry = r["registries"]
            .as_array()?
            .iter()
            .find(|r| r["id"] == id)?
            .clone();
        let status = entry["status"].as_str()?.to_string();
        (entry["sync"]["state"] == "synced" && done(&status)).then_some(status)
    })
    .await
}

async fn consume(mode: Mode, sotw_only: bool) {
    let mut mesh = Mesh::with_mcp(
        mode,
        sotw_only,
        &[destination_rule(""), virtual_service(&split(100))],
    )
    .await;
    let Rules::Mcp(server) = &mesh.rules else {
        unreachable!("an MCP mesh")
    };
    let id = format!("xds://{}", server.addr());
    mesh.settle(&[], "v1", 20).await;

    // A ServiceEntry served over MCP becomes a service Envoy routes to.
    let port = free_port();
    let se = service_entry(port, mesh.v2.addr);
    let rules = |w1| {
        vec![
            destination_rule(""),
            virtual_service(&split(w1)),
            se.clone(),
        ]
    };
    mesh.set_rules(&rules(100));
    let api = || async { get(loopback(port), API, &[]).await };
    eventually(CONVERGE, "the ServiceEntry routed", || async {
        (api().await == Some((200, "v2".into()))).then_some(())
    })
    .await;
    registry_status(&mesh, &id, |s| s == "healthy").await;

    // The server disappears: the source is degraded, the config stays, Envoy still routes.
    if let Rules::Mcp(server) = &mut mesh.rules {
        server.stop().await;
    }
    let status = registry_status(&mesh, &id, |s| s.starts_with("degraded:")).await;
    assert!(status.contains(&id), "{status}");
    println!("{mode:?}: while the config server is away: {status}");
    mesh.settle(&[], "v1", 20).await;
    assert_eq!(api().await, Some((200, "v2".into())), "{}", mesh.logs());

    // A change made while it was away arrives when it comes back.
    mesh.set_rules(&rules(0));
    if let Rules::Mcp(server) = &mut mesh.rules {
        server
            .restart()
            .await
            .expect("the MCP server restarts on its port");
    }
    mesh.settle(&[], "v2", 20).await;
    registry_status(&mesh, &id, |s| s == "healthy").await;
    assert_eq!(api().await, Some((200, "v2".into())));
    no_rejections(&mesh.envoy).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_config_server_drives_envoy_and_survives_its_outage() {
    consume(Mode::Delta, false).await;
    consume(Mode::Sotw, true).await;
}
