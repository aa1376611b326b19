//! SotW xDS protocol conformance, against the in-process server over real gRPC (H-RAW).
//! Each test cites the rule it checks in `shared/xds-conformance.md`.

mod support;

use support::resources::*;
use support::*;

#[tokio::test]
async fn smoke() {
    let s = TestServer::start(vec![cluster("a", "1"), cluster("b", "1")]).await;
    let mut c = s.ads("n1").await;
    c.subscribe(CDS, &[]).await;
    let r = c.expect(CDS, &["a", "b"]).await;
    c.ack(&r, &[]).await;
    c.expect_no_response().await;
}
