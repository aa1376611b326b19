//! The binary as an operator meets it (issue 19): bad input at start is an exit with file:line,
//! `tributary validate` reports every problem, logs are JSON only in JSON mode and never carry
//! colour codes into files, and a config without registries is an empty mesh, not the demo.
//! Run: `cargo test --test e2e cli::`.

#![allow(clippy::unwrap_used)] // test setup: a failure is the test failing

use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use crate::support::harness;
use crate::support::harness::{
    Tributary, free_port, loopback, mesh, tls_service_entry, tributary_bin,
};

/// Longest a failing start may take to exit.
const EXIT_LIMIT: Duration = Duration::from_secs(20);

const BAD_MOCK: &str =
    "services:\n- hostname: a.example\n  ports: [{name: http, port: 0, protocol: HTTP}]\n";

/// Runs the binary to completion (bounded), with no backtraces in its messages.
fn run(dir: &Path, args: &[&str]) -> Output {
    let mut child = Command::new(tributary_bin())
        .args(args)
        .current_dir(dir)
        .env_remove("RUST_BACKTRACE")
        .env_remove("RUST_LIB_BACKTRACE")
        .env("RUST_LOG", "info")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("tributary runs");
    let deadline = Instant::now() + EXIT_LIMIT;
    while child.try_wait().expect("wait").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("tributary {args:?} did not exit within {EXIT_LIMIT:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().expect("output")
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[test]
fn a_missing_or_invalid_mock_file_stops_start_up_with_its_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let xds = loopback(free_port()).to_string();
    let admin = loopback(free_port()).to_string();
    let ports = ["--xds-addr", xds.as_str(), "--admin-addr", admin.as_str()];

    let mut args = vec!["--mock-file", "missing.yaml"];
    args.extend(ports);
    let out = run(dir.path(), &args);
    assert!(!out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("missing.yaml"), "{}", text(&out));

    std::fs::write(dir.path().join("bad.yaml"), BAD_MOCK).unwrap();
    let mut args = vec!["--mock-file", "bad.yaml"];
    args.extend(ports);
    let out = run(dir.path(), &args);
    assert!(!out.status.success());
    assert!(
        text(&out).contains("bad.yaml:3:") && text(&out).contains("port 0"),
        "{}",
        text(&out)
    );

    // The same through a config file.
    std::fs::write(
        dir.path().join("tributary.yaml"),
        "registries:\n- {type: mock, file: bad.yaml}\n",
    )
    .unwrap();
    let mut args = vec!["--config", "tributary.yaml"];
    args.extend(ports);
    let out = run(dir.path(), &args);
    assert!(!out.status.success());
    assert!(text(&out).contains("bad.yaml:3:"), "{}", text(&out));

    // A ServiceEntry directory that is not there.
    std::fs::write(
        dir.path().join("se.yaml"),
        "registries:\n- {type: service_entry, directory: no-such-dir}\n",
    )
    .unwrap();
    let mut args = vec!["--config", "se.yaml"];
    args.extend(ports);
    let out = run(dir.path(), &args);
    assert!(!out.status.success());
    assert!(text(&out).contains("no-such-dir"), "{}", text(&out));
}

#[test]
fn an_invalid_log_filter_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let out = run(dir.path(), &["--log-level", "info,tributary=loud"]);
    assert!(!out.status.success());
    assert!(
        text(&out).contains("invalid log filter \"info,tributary=loud\""),
        "{}",
        text(&out)
    );
}

#[test]
fn validate_prints_every_problem_with_file_and_line_and_exits_1() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::create_dir(d.join("istio")).unwrap();
    std::fs::write(d.join("istio/good.yaml"), tls_service_entry(443)).unwrap();
    std::fs::write(d.join("mesh.yaml"), mesh(8080, &[loopback(9090)])).unwrap();
    std::fs::write(
        d.join("tributary.yaml"),
        format!(
            "registries:\n- {{type: mock, file: {}}}\n- {{type: service_entry, directory: {}}}\n",
            d.join("mesh.yaml").display(),
            d.join("istio").display()
        ),
    )
    .unwrap();
    let clean = run(
        d,
        &[
            "validate",
            "--config",
            "tributary.yaml",
            "mesh.yaml",
            "istio",
        ],
    );
    assert!(clean.status.success(), "{}", text(&clean));
    assert!(text(&clean).contains("no validation issues found"));

    std::fs::write(d.join("istio/bad.yaml"), tls_service_entry(0)).unwrap();
    std::fs::write(d.join("bad-mock.yaml"), BAD_MOCK).unwrap();
    std::fs::write(d.join("broken.yaml"), "registries: [\n").unwrap();
    let out = run(
        d,
        &[
            "validate",
            "--config",
            "tributary.yaml",
            "bad-mock.yaml",
            "broken.yaml",
        ],
    );
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let printed = String::from_utf8_lossy(&out.stdout).to_string();
    // The config's ServiceEntry directory, the mock file, the unparsable config: each with a line.
    assert!(
        printed.contains("bad.yaml:6:") && printed.contains("spec.ports[0].number"),
        "{printed}"
    );
    assert!(printed.contains("bad-mock.yaml:3:"), "{printed}");
    assert!(printed.contains("broken.yaml:"), "{printed}");
    assert!(
        text(&out).contains("3 validation problem(s) found"),
        "{}",
        text(&out)
    );

    let none = run(d, &["validate"]);
    assert_eq!(none.status.code(), Some(1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_mode_prints_json_lines_only_with_display_fields() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("mesh.yaml");
    std::fs::write(&file, mesh(8080, &[loopback(9090)])).unwrap();
    let file_arg = file.display().to_string();
    let mut t = Tributary::start_with_env(
        dir.path(),
        loopback(free_port()),
        loopback(free_port()),
        &["--log-json", "--mock-file", &file_arg],
        &[("RUST_LOG", "info"), ("NO_COLOR", "")],
    )
    .await;
    assert!(t.proc.terminate(Duration::from_secs(20)));
    let log = std::fs::read_to_string(&t.proc.log).unwrap();
    let events: Vec<serde_json::Value> = log
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    let message = |e: &serde_json::Value| e["fields"]["message"].as_str().unwrap_or("").to_string();
    assert!(
        events.iter().any(|e| message(e) == "tributary is serving"),
        "the banner is an event:\n{log}"
    );
    let starting = events
        .iter()
        .find(|e| message(e) == "mock registry starting")
        .expect("mock registry start is logged");
    assert_eq!(starting["fields"]["file"], file_arg.as_str(), "{starting}");
    assert!(!log.contains("Some("), "Debug text in fields:\n{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn text_logs_to_a_file_have_no_colour_and_a_config_without_registries_is_not_the_demo() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("tributary.yaml"), "sync_timeout: 5s\n").unwrap();
    let config = dir.path().join("tributary.yaml").display().to_string();
    let mut t = Tributary::start(
        dir.path(),
        loopback(free_port()),
        loopback(free_port()),
        &["--config", &config],
    )
    .await;
    let registryz: serde_json::Value =
        serde_json::from_str(&t.get("/debug/registryz").await).unwrap();
    assert_eq!(registryz["services"], serde_json::json!([]), "{registryz}");
    assert_eq!(
        registryz["registries"],
        serde_json::json!([]),
        "{registryz}"
    );
    assert!(t.proc.terminate(Duration::from_secs(20)));
    let log = std::fs::read_to_string(&t.proc.log).unwrap();
    assert!(
        !log.contains('\u{1b}'),
        "ANSI escape codes in a log file:\n{log}"
    );
    assert!(log.contains("serving an empty mesh"), "{log}");
    assert!(!log.contains("demo mesh"), "{log}");
}

/// `run` off the async runtime.
async fn run_async(dir: &Path, args: Vec<String>) -> Output {
    let dir = dir.to_path_buf();
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        run(&dir, &args)
    })
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_mock_cli_drives_a_running_mock_registry() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("mesh.yaml"), mesh(8080, &[loopback(9090)])).unwrap();
    let addr = loopback(free_port()).to_string();
    let t = Tributary::start(
        d,
        loopback(free_port()),
        loopback(free_port()),
        &[
            "--mock-file",
            &d.join("mesh.yaml").display().to_string(),
            "--control-addr",
            &addr,
        ],
    )
    .await;
    let mock = |args: &[&str]| {
        let mut all = vec!["mock".to_string(), "--addr".to_string(), addr.clone()];
        all.extend(args.iter().map(|a| a.to_string()));
        run_async(d, all)
    };
    let list = mock(&["list"]).await;
    assert!(list.status.success(), "{}", text(&list));
    let listed: tributary_registries::mock::MockFile =
        serde_yaml::from_slice(&list.stdout).expect("list prints a mock file");
    assert_eq!(listed.services[0].hostname, "web.e2e.local");

    std::fs::write(
        d.join("extra.yaml"),
        "services:\n- hostname: extra.test\n  ports: [{name: http, port: 80, protocol: HTTP}]\n",
    )
    .unwrap();
    let up = mock(&["upsert", "extra.yaml"]).await;
    assert!(up.status.success(), "{}", text(&up));
    std::fs::write(
        d.join("eps.yaml"),
        "- {address: 127.0.0.7, ports: {http: 8081}}\n",
    )
    .unwrap();
    let set = mock(&["set-endpoints", "extra.test", "eps.yaml"]).await;
    assert!(set.status.success(), "{}", text(&set));
    let got = mock(&["get", "extra.test"]).await;
    assert!(got.status.success(), "{}", text(&got));
    let spec: tributary_registries::mock::ServiceSpec =
        serde_yaml::from_slice(&got.stdout).unwrap();
    assert_eq!(spec.endpoints.len(), 1);
    assert_eq!(spec.endpoints[0].address, "127.0.0.7");
    // Served once the push goes out (debounced).
    harness::eventually(
        Duration::from_secs(10),
        "the new endpoint served",
        || async {
            t.get("/debug/endpointz")
                .await
                .contains("127.0.0.7")
                .then_some(())
        },
    )
    .await;

    let fault = mock(&["fault", "error", "injected by the CLI test"]).await;
    assert!(fault.status.success(), "{}", text(&fault));
    let degraded = harness::eventually(Duration::from_secs(10), "degraded", || async {
        let r = t.get("/debug/registryz").await;
        r.contains("injected by the CLI test").then_some(r)
    })
    .await;
    assert!(degraded.contains("degraded"), "{degraded}");
    assert!(mock(&["fault", "clear"]).await.status.success());
    let del = mock(&["delete", "extra.test"]).await;
    assert!(del.status.success(), "{}", text(&del));
    let missing = mock(&["get", "extra.test"]).await;
    assert!(!missing.status.success());
    assert!(
        text(&missing).contains("no service \"extra.test\""),
        "{}",
        text(&missing)
    );

    // Bad input is refused before it is sent, with the service named.
    std::fs::write(d.join("bad.yaml"), BAD_MOCK).unwrap();
    let bad = mock(&["upsert", "bad.yaml"]).await;
    assert!(!bad.status.success());
    assert!(text(&bad).contains("a.example"), "{}", text(&bad));
    // Nothing listens: a clear message.
    let nowhere = run_async(
        d,
        ["mock", "--addr", &loopback(free_port()).to_string(), "list"]
            .map(String::from)
            .to_vec(),
    )
    .await;
    assert!(!nowhere.status.success());
    assert!(
        text(&nowhere).contains("cannot reach the mock control API"),
        "{}",
        text(&nowhere)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_reflection_lists_and_describes_the_control_api() {
    use prost::Message;
    use tonic_reflection::pb::v1::ServerReflectionRequest;
    use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
    use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
    use tonic_reflection::pb::v1::server_reflection_response::MessageResponse;

    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("mesh.yaml"), mesh(8080, &[loopback(9090)])).unwrap();
    let file = dir.path().join("mesh.yaml").display().to_string();
    let control = loopback(free_port()).to_string();
    let _t = Tributary::start(
        dir.path(),
        loopback(free_port()),
        loopback(free_port()),
        &["--mock-file", &file, "--control-addr", &control],
    )
    .await;
    let channel = tonic::transport::Channel::from_shared(format!("http://{control}"))
        .unwrap()
        .connect()
        .await
        .expect("reflection client connects");
    let mut client = ServerReflectionClient::new(channel);
    let ask = |m: MessageRequest| ServerReflectionRequest {
        host: String::new(),
        message_request: Some(m),
    };
    let requests = tokio_stream::iter(vec![
        ask(MessageRequest::ListServices(String::new())),
        ask(MessageRequest::FileContainingSymbol(
            "tributary.mock.v1.MockRegistry".into(),
        )),
    ]);
    let mut replies = client
        .server_reflection_info(requests)
        .await
        .expect("reflection answers")
        .into_inner();
    let listed = replies.message().await.unwrap().unwrap().message_response;
    let Some(MessageResponse::ListServicesResponse(list)) = listed else {
        panic!("not a service list: {listed:?}");
    };
    let names: Vec<String> = list.service.into_iter().map(|s| s.name).collect();
    assert!(
        names.contains(&"tributary.mock.v1.MockRegistry".to_string()),
        "{names:?}"
    );
    let described = replies.message().await.unwrap().unwrap().message_response;
    let Some(MessageResponse::FileDescriptorResponse(files)) = described else {
        panic!("no descriptor: {described:?}");
    };
    let services: Vec<String> = files
        .file_descriptor_proto
        .iter()
        .map(|b| prost_types::FileDescriptorProto::decode(b.as_slice()).unwrap())
        .flat_map(|f| f.service.into_iter().map(|s| s.name().to_string()))
        .collect();
    assert!(
        services.contains(&"MockRegistry".to_string()),
        "{services:?}"
    );
}
