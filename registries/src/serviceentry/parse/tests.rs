use super::*;

const SE: &str = "apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata:
  name: api
  namespace: shop
spec:
  hosts: [api.example.com]
  ports:
  - number: 443
    name: https
    protocol: HTTPS
  resolution: DNS
";

fn object(text: &str, first_line: Option<usize>, strict: bool) -> Parsed {
    match parse_document(text, first_line, "default", strict) {
        Ok(Document::Object(p)) => *p,
        other => panic!("expected an object: {other:?}"),
    }
}

fn problems(text: &str) -> Vec<Problem> {
    match object(text, Some(1), true).result {
        Err(p) => p,
        Ok(v) => panic!("expected problems, got {v:?}"),
    }
}

#[test]
fn documents_split_on_separator_lines_with_their_start_lines() {
    let text =
        "# leading comment\n---\na: 1\n--- # comment\nb: 2\n...\nignored: after end\n---\nc: 3\n";
    let docs = split_documents(text);
    let starts: Vec<usize> = docs.iter().map(|(l, _)| *l).collect();
    assert_eq!(starts, [1, 3, 5, 9]);
    assert_eq!(docs[1].1, "a: 1\n");
    assert_eq!(
        docs[2].1, "b: 2\n",
        "text after `...` is not part of the document"
    );
    assert_eq!(docs[3].1, "c: 3\n");
    // `---text` is not a separator; `--- {…}` starts a document on the separator line.
    let docs = split_documents("---x: 1\n--- {d: 4}\n");
    assert_eq!(docs[0].1, "---x: 1\n");
    assert_eq!(docs[1], (2, "{d: 4}\n".to_string()));
}

#[test]
fn a_valid_object_is_identified_and_checked() {
    let p = object(SE, Some(10), true);
    assert_eq!(p.key.to_string(), "ServiceEntry shop/api");
    assert_eq!(p.line, Some(10));
    assert!(p.result.is_ok(), "{:?}", p.result);
    // Without a namespace, the default one.
    let p = object(&SE.replace("  namespace: shop\n", ""), None, true);
    assert_eq!(p.key.namespace, "default");
}

#[test]
fn unreadable_documents_say_why_and_where() {
    // A half-written document: broken YAML.
    let e =
        parse_document("kind: ServiceEntry\nspec: {hosts: [a\n", Some(5), "d", true).unwrap_err();
    assert_eq!(e.line, Some(7), "{e:?}");
    assert!(e.message.contains("flow sequence"), "{e:?}");
    let e = parse_document("- a\n- b\n", Some(1), "d", true).unwrap_err();
    assert!(e.message.contains("mapping"), "{e:?}");
    let e = parse_document("apiVersion: v1\n", Some(1), "d", true).unwrap_err();
    assert!(e.message.contains("no `kind`"), "{e:?}");
    // Truncated before the name: cannot be identified.
    let e = parse_document(
        "apiVersion: networking.istio.io/v1\nkind: ServiceEntry\n",
        Some(3),
        "d",
        true,
    )
    .unwrap_err();
    assert_eq!(e.line, Some(3));
    assert!(e.message.contains("metadata.name"), "{e:?}");
}

#[test]
fn other_kinds_and_empty_documents_are_skipped() {
    // The config store reads four kinds; a Gateway (or a Deployment) is not one of them.
    let gw = "apiVersion: networking.istio.io/v1\nkind: Gateway\nmetadata: {name: x}\n";
    assert_eq!(
        parse_document(gw, Some(1), "d", true),
        Ok(Document::Ignored)
    );
    assert_eq!(
        parse_document("# nothing\n", Some(1), "d", true),
        Ok(Document::Empty)
    );
}

#[test]
fn type_errors_name_the_field_and_its_line() {
    // REG-11: the error names the field; the file line comes from the parser.
    let p = problems(&SE.replace("number: 443", "number: https"));
    assert_eq!(p.len(), 1, "{p:?}");
    assert_eq!(p[0].field, "spec.ports[0].number");
    assert_eq!(p[0].line, Some(9));
    assert!(p[0].message.contains("expected u32"), "{p:?}");
}

#[test]
fn unknown_fields_are_errors_in_files_and_ignored_from_the_api() {
    let typo = SE.replace("resolution: DNS", "resolutoin: DNS");
    let p = problems(&typo);
    let unknown: Vec<&Problem> = p.iter().filter(|p| p.message == "unknown field").collect();
    assert_eq!(unknown.len(), 1, "{p:?}");
    assert_eq!(unknown[0].field, "spec.resolutoin");
    assert_eq!(unknown[0].line, Some(12));
    // Metadata and status the API server adds are not unknown.
    let served = SE.replace(
        "  namespace: shop\n",
        "  namespace: shop\n  uid: x\n  resourceVersion: '7'\n  managedFields: [{manager: kubectl}]\n",
    ) + "status: {conditions: []}\n";
    assert!(object(&served, Some(1), true).result.is_ok());
    // From the API (not strict) an unknown field is only logged.
    let newer = SE.replace("resolution: DNS", "resolution: DNS\n  trafficPolicy: {}");
    assert!(object(&newer, None, false).result.is_ok());
}

#[test]
fn the_api_version_must_be_a_served_istio_version() {
    for v in API_VERSIONS {
        let text = SE.replace(
            "networking.istio.io/v1",
            &format!("networking.istio.io/{v}"),
        );
        assert!(object(&text, Some(1), true).result.is_ok(), "{v}");
    }
    let p = problems(&SE.replace("networking.istio.io/v1", "networking.istio.io/v2"));
    assert_eq!(p[0].field, "apiVersion");
    assert_eq!(p[0].line, Some(1));
    assert!(p[0].message.contains("v1beta1"), "{p:?}");
}

#[test]
fn validation_problems_carry_the_line_of_their_field_or_its_parent() {
    let text = SE
        .replace("number: 443", "number: 0")
        .replace("hosts: [api.example.com]", "hosts: []");
    let p = object(&text, Some(20), true).result.unwrap_err();
    let lines: Vec<(String, Option<usize>)> = p.iter().map(|p| (p.field.clone(), p.line)).collect();
    assert!(
        lines.contains(&("spec.hosts".into(), Some(26))),
        "{lines:?}"
    );
    assert!(
        lines.contains(&("spec.ports[0].number".into(), Some(28))),
        "{lines:?}"
    );
    // From the API: no lines.
    let p = object(&text, None, false).result.unwrap_err();
    assert!(p.iter().all(|p| p.line.is_none()), "{p:?}");
}

#[test]
fn json_from_the_api_parses_like_yaml() {
    let json = r#"{"apiVersion":"networking.istio.io/v1beta1","kind":"WorkloadEntry","metadata":{"name":"vm-1","namespace":"shop","labels":{"app":"api"},"creationTimestamp":"2026-01-01T00:00:00Z"},"spec":{"address":"10.0.0.1","ports":{"http":8080}}}"#;
    let p = object(json, None, false);
    assert_eq!(p.key.to_string(), "WorkloadEntry shop/vm-1");
    let Ok(Valid::WorkloadEntry(we)) = p.result else {
        panic!("{:?}", p.result)
    };
    assert_eq!(
        we.workload.labels["app"], "api",
        "metadata labels are workload labels"
    );
    assert_eq!(we.workload.ports["http"], 8080);
    assert!(we.meta.created.is_some());
}
