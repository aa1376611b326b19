//! The fake Consul's agent write API, as a script uses it against `consul agent -dev`:
//! `PUT /v1/agent/service/register`, `.../deregister/<id>`, `.../maintenance/<id>?enable=`,
//! `PUT /v1/agent/check/{pass,warn,fail}/<check id>`.

use std::collections::BTreeMap;
use std::sync::Arc;

use http::StatusCode;
use serde_json::Value;

use super::Inner;
use super::checks::HttpCheck;
use super::server::{Reply, json_reply, text};
use super::state::{AGENT_NODE, InstanceRecord};

/// The agent write API.
pub(super) fn write(
    inner: &Arc<Inner>,
    path: &str,
    query: &BTreeMap<String, String>,
    body: &[u8],
) -> Reply {
    let found = |ok: bool, what: &str| match ok {
        true => json_reply(StatusCode::OK, String::new(), None),
        false => text(StatusCode::NOT_FOUND, &format!("Unknown {what}")),
    };
    if path == "/v1/agent/service/register" {
        return match registration(body) {
            Ok((instance, http)) => {
                let id = instance.id.clone();
                inner.write(|c| c.upsert(instance));
                inner.checkers().replace(inner, &id, http);
                json_reply(StatusCode::OK, String::new(), None)
            }
            Err(e) => text(
                StatusCode::BAD_REQUEST,
                &format!("Request decode failed: {e}"),
            ),
        };
    }
    if let Some(id) = path.strip_prefix("/v1/agent/service/deregister/") {
        inner.checkers().stop(id);
        return found(inner.write(|c| c.remove(id)), "service ID");
    }
    if let Some(id) = path.strip_prefix("/v1/agent/service/maintenance/") {
        let on = query.get("enable").map(String::as_str) == Some("true");
        let check = format!("_service_maintenance:{id}");
        let status = on.then_some("critical");
        return found(
            inner.write(|c| c.set_instance_check(id, &check, status)),
            "service ID",
        );
    }
    for (prefix, status) in [
        ("/v1/agent/check/pass/", "passing"),
        ("/v1/agent/check/warn/", "warning"),
        ("/v1/agent/check/fail/", "critical"),
    ] {
        if let Some(id) = path.strip_prefix(prefix) {
            return found(inner.write(|c| c.set_check(id, status)), "check ID");
        }
    }
    text(
        StatusCode::NOT_FOUND,
        &format!("Invalid URL path: not found: {path}"),
    )
}

/// An agent service definition (`PUT /v1/agent/service/register`) and its HTTP checks. Keys are
/// matched without case, as the agent does.
fn registration(body: &[u8]) -> Result<(InstanceRecord, Vec<HttpCheck>), String> {
    let v: Value = serde_json::from_slice(body).map_err(|e| e.to_string())?;
    let name = field(&v, "Name")
        .and_then(Value::as_str)
        .ok_or("missing Name")?
        .to_string();
    let id = field(&v, "ID")
        .and_then(Value::as_str)
        .unwrap_or(&name)
        .to_string();
    let strings = |key: &str| -> Vec<String> {
        field(&v, key)
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|t| t.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    };
    let meta = field(&v, "Meta")
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                .collect()
        })
        .unwrap_or_default();
    let weight = |key: &str| {
        field(&v, "Weights")
            .and_then(|w| field(w, key))
            .and_then(Value::as_u64)
            .and_then(|n| u32::try_from(n).ok())
            .unwrap_or(1)
    };
    let port = field(&v, "Port").and_then(Value::as_u64).unwrap_or(0);
    let port = u16::try_from(port).map_err(|_| format!("Port {port} out of range"))?;
    let mut definitions: Vec<&Value> = field(&v, "Checks")
        .and_then(Value::as_array)
        .map(|a| a.iter().collect())
        .unwrap_or_default();
    let single = field(&v, "Check");
    definitions.extend(single);
    let numbered = definitions.len() > 1;
    let mut http = Vec::new();
    let checks = definitions
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let check_id = field(c, "CheckID")
                .or_else(|| field(c, "ID"))
                .and_then(Value::as_str)
                .map(str::to_string)
                .unwrap_or_else(|| match numbered {
                    true => format!("service:{id}:{}", i + 1),
                    false => format!("service:{id}"),
                });
            let text = |key: &str| field(c, key).and_then(Value::as_str).map(str::to_string);
            http.extend(HttpCheck::parse(&check_id, &id, text)?);
            // A new check starts critical unless its definition says otherwise, as in Consul.
            let status = field(c, "Status")
                .and_then(Value::as_str)
                .unwrap_or("critical");
            Ok((check_id, status.to_string()))
        })
        .collect::<Result<_, String>>()?;
    let record = InstanceRecord {
        id,
        service: name,
        node: AGENT_NODE.to_string(),
        address: field(&v, "Address")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string(),
        port,
        tags: strings("Tags"),
        meta,
        weights: (weight("Passing"), weight("Warning")),
        kind: field(&v, "Kind")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string(),
        checks,
    };
    Ok((record, http))
}

fn field<'a>(v: &'a Value, key: &str) -> Option<&'a Value> {
    v.as_object()?
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(key))
        .map(|(_, v)| v)
        .filter(|v| !v.is_null())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agent_registrations_parse() {
        let body = br#"{"Name": "web", "ID": "web-1", "Address": "10.0.0.7", "Port": 8080,
            "Tags": ["v1", "version=v1"], "Meta": {"protocol": "http"},
            "Weights": {"Passing": 3, "Warning": 1},
            "Check": {"TTL": "1h", "Status": "passing"}}"#;
        let (r, http) = registration(body).unwrap();
        assert!(http.is_empty(), "a TTL check is not run");
        assert_eq!(
            (r.id.as_str(), r.service.as_str(), r.port),
            ("web-1", "web", 8080)
        );
        assert_eq!(r.weights, (3, 1));
        assert_eq!(r.checks["service:web-1"], "passing");
        let (r, _) = registration(
            br#"{"name": "db", "port": 5432, "checks": [{"ttl": "1m"}, {"ttl": "1m"}]}"#,
        )
        .unwrap();
        assert_eq!(r.id, "db");
        assert_eq!(
            r.checks["service:db:1"], "critical",
            "checks start critical"
        );
        assert_eq!(r.checks.len(), 2);
        assert!(registration(b"{}").is_err());
        let (_, http) = registration(
            br#"{"Name": "vm", "ID": "vm-1", "Port": 80,
                "Check": {"HTTP": "http://127.0.0.1:1/healthz/ready", "Interval": "1s", "Timeout": "500ms"}}"#,
        )
        .unwrap();
        assert_eq!(http[0].check_id, "service:vm-1");
        assert_eq!(http[0].interval, std::time::Duration::from_secs(1));
        assert_eq!(http[0].timeout, std::time::Duration::from_millis(500));
        let no_interval = registration(br#"{"Name": "vm", "Check": {"HTTP": "http://x/"}}"#);
        assert!(no_interval.unwrap_err().contains("Interval must be > 0"));
    }
}
