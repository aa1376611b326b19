//! The fake API server speaks the wire format kube-rs expects: paged lists, watches with
//! resourceVersion, bookmarks, 410 in both forms, label selectors, and a generic (CRD) kind.

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::api::{ListParams, WatchEvent, WatchParams};
use kube::runtime::watcher::{self, Event};
use kube::{Api, Client};
use serde_json::json;

use super::*;
use crate::kubernetes::fake::ResourceType;

async fn client(c: &FakeCluster) -> Client {
    let kc = kube::config::Kubeconfig::read_from(&c.kubeconfig).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .unwrap();
    Client::try_from(config).unwrap()
}

#[tokio::test]
async fn paged_lists_with_label_selectors() {
    let c = FakeCluster::start().await;
    for i in 0..5 {
        let labels: &[(&str, &str)] = if i % 2 == 0 { &[("app", "even")] } else { &[] };
        c.server
            .apply(&objects::pod("ns", &format!("p{i}"), labels, "sa", "n"))
            .unwrap();
    }
    c.server.set_max_page_size(Some(2));
    let api: Api<Pod> = Api::namespaced(client(&c).await, "ns");
    let page = api.list(&ListParams::default().limit(10)).await.unwrap();
    assert_eq!(page.items.len(), 2, "the server caps the page");
    let token = page.metadata.continue_.clone().expect("a continue token");
    let rest = api
        .list(&ListParams::default().limit(10).continue_token(&token))
        .await
        .unwrap();
    assert_eq!(rest.items.len(), 2);
    assert_eq!(
        rest.metadata.resource_version, page.metadata.resource_version,
        "one snapshot"
    );
    let even = api
        .list(&ListParams::default().labels("app=even"))
        .await
        .unwrap();
    assert_eq!(even.items.len(), 2, "first page of the selected three");
    assert_eq!(c.server.counts::<Pod>().lists, 3);
    let all: Api<Pod> = Api::all(client(&c).await);
    let stream = watcher::watcher(all, watcher::Config::default().page_size(2));
    let mut stream = stream.boxed();
    let mut seen = 0;
    loop {
        match stream.next().await.unwrap().unwrap() {
            Event::InitApply(_) => seen += 1,
            Event::InitDone => break,
            _ => {}
        }
    }
    assert_eq!(seen, 5, "kube's watcher follows continue tokens");
}

#[tokio::test]
async fn watch_resumes_from_a_version_and_sends_bookmarks_and_410() {
    let c = FakeCluster::start().await;
    let api: Api<Service> = Api::namespaced(client(&c).await, "ns");
    c.server
        .apply(&objects::service("ns", "a", "10.0.0.1", &[("http", 80)]))
        .unwrap();
    let rv = api
        .list(&ListParams::default())
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    c.server
        .apply(&objects::service("ns", "b", "10.0.0.2", &[("http", 80)]))
        .unwrap();
    // A no-op apply changes nothing, as on a real server.
    c.server
        .apply(&objects::service("ns", "b", "10.0.0.2", &[("http", 80)]))
        .unwrap();
    let wp = WatchParams {
        bookmarks: true,
        ..WatchParams::default()
    };
    let mut w = api.watch(&wp, &rv).await.unwrap().boxed();
    match w.next().await.unwrap().unwrap() {
        WatchEvent::Added(s) => assert_eq!(s.metadata.name.as_deref(), Some("b")),
        other => panic!("expected ADDED b, got {other:?}"),
    }
    c.server.bookmark::<Service>();
    assert!(matches!(
        w.next().await.unwrap().unwrap(),
        WatchEvent::Bookmark(_)
    ));
    c.server.touch::<Service>("ns", "a").unwrap();
    assert!(matches!(
        w.next().await.unwrap().unwrap(),
        WatchEvent::Modified(_)
    ));
    c.server.expire::<Service>();
    match w.next().await.unwrap().unwrap() {
        WatchEvent::Error(e) => assert_eq!(e.code, 410),
        other => panic!("expected ERROR 410, got {other:?}"),
    }
    assert!(w.next().await.is_none(), "the watch ends after the error");
    // Resuming from the compacted version: ERROR 410 event, or HTTP 410 when asked.
    let mut w = api.watch(&wp, &rv).await.unwrap().boxed();
    assert!(matches!(w.next().await.unwrap().unwrap(), WatchEvent::Error(e) if e.code == 410));
    c.server.set_gone_as_http_status(true);
    match api.watch(&wp, &rv).await {
        Err(kube::Error::Api(s)) => assert_eq!(s.code, 410),
        Ok(_) => panic!("expected HTTP 410"),
        Err(e) => panic!("expected HTTP 410, got {e}"),
    }
    assert_eq!(c.server.counts::<Service>().watches, 3);
}

#[tokio::test]
async fn crds_are_one_register_away_and_the_server_goes_down_and_up() {
    let c = FakeCluster::start().await;
    let rt = ResourceType::new(
        "networking.istio.io",
        "v1",
        "serviceentries",
        "ServiceEntry",
        true,
    );
    c.server.register(rt.clone());
    c.server
        .apply_json(&rt, json!({"metadata": {"name": "ext", "namespace": "ns"}, "spec": {"hosts": ["a.example"]}}))
        .unwrap();
    let ar = kube::api::ApiResource {
        group: rt.group.clone(),
        version: rt.version.clone(),
        api_version: rt.api_version(),
        kind: rt.kind.clone(),
        plural: rt.plural.clone(),
    };
    let api: Api<kube::api::DynamicObject> = Api::namespaced_with(client(&c).await, "ns", &ar);
    let list = api.list(&ListParams::default()).await.unwrap();
    assert_eq!(list.items[0].data["spec"]["hosts"][0], "a.example");
    c.server.stop().await;
    assert!(
        api.list(&ListParams::default()).await.is_err(),
        "down means refused"
    );
    c.server.restart().await.unwrap();
    let list = api.list(&ListParams::default()).await.unwrap();
    assert_eq!(list.items.len(), 1, "objects survive an outage");
}
