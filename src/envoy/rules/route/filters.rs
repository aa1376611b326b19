//! The per-route pieces of a VirtualService route that are Envoy filter configs or header
//! edits: fault injection, CORS, percentages, header operations.

use envoy_types::pb::envoy::config::core::v3::{
    HeaderValue, HeaderValueOption, header_value_option::HeaderAppendAction,
};
use envoy_types::pb::envoy::config::route::v3::Route;
use envoy_types::pb::envoy::extensions::filters::common::fault::v3::{
    FaultDelay, fault_delay::FaultDelaySecifier,
};
use envoy_types::pb::envoy::extensions::filters::http::cors::v3::CorsPolicy as PbCors;
use envoy_types::pb::envoy::extensions::filters::http::fault::v3::{
    FaultAbort, HttpFault, fault_abort::ErrorType,
};
use envoy_types::pb::envoy::r#type::v3::{FractionalPercent, fractional_percent::DenominatorType};
use envoy_types::pb::google::protobuf::BoolValue;
use tributary_registries::rules::{HeaderOperations, Headers, StringMatch};

use super::string_matcher_of;
use crate::envoy::pb::duration;

/// Percentages are sent to Envoy in millionths, so `12.5%` keeps its fraction.
const PER_MILLION: f64 = 10_000.0;

pub(super) fn fraction(percent: f64) -> FractionalPercent {
    let clamped = percent.clamp(0.0, 100.0);
    FractionalPercent {
        numerator: (clamped * PER_MILLION).round() as u32,
        denominator: DenominatorType::Million as i32,
    }
}

pub(super) fn http_fault(f: &tributary_registries::rules::HttpFaultInjection) -> HttpFault {
    let mut out = HttpFault::default();
    if let Some(d) = &f.delay
        && let Some(fixed) = d.fixed_delay
    {
        let percent = d
            .percentage
            .map(|p| p.value)
            .or(d.percent.map(|p| p as f64))
            .unwrap_or(100.0);
        out.delay = Some(FaultDelay {
            percentage: Some(fraction(percent)),
            fault_delay_secifier: Some(FaultDelaySecifier::FixedDelay(duration(fixed.get()))),
        });
    }
    if let Some(a) = &f.abort {
        let error = match (a.http_status, &a.grpc_status) {
            (Some(s), _) => Some(ErrorType::HttpStatus(u32::try_from(s).unwrap_or(503))),
            (None, Some(g)) => {
                tributary_registries::rules::grpc_status_code(g).map(ErrorType::GrpcStatus)
            }
            (None, None) => None,
        };
        if let Some(error) = error {
            out.abort = Some(FaultAbort {
                percentage: Some(fraction(a.percentage.map_or(100.0, |p| p.value))),
                error_type: Some(error),
                ..Default::default()
            });
        }
    }
    out
}

pub(super) fn cors_policy(c: &tributary_registries::rules::CorsPolicy) -> PbCors {
    let exact = c.allow_origin.iter().map(|o| StringMatch {
        exact: Some(o.clone()),
        ..StringMatch::default()
    });
    PbCors {
        allow_origin_string_match: c
            .allow_origins
            .iter()
            .cloned()
            .chain(exact)
            .filter_map(|m| string_matcher_of(&m))
            .collect(),
        allow_methods: c.allow_methods.join(","),
        allow_headers: c.allow_headers.join(","),
        expose_headers: c.expose_headers.join(","),
        max_age: c
            .max_age
            .map(|d| d.get().as_secs().to_string())
            .unwrap_or_default(),
        allow_credentials: c.allow_credentials.map(|value| BoolValue { value }),
        ..Default::default()
    }
}

pub(super) fn header_edits(r: &mut Route, headers: &Headers) {
    if let Some(req) = &headers.request {
        let (add, remove) = header_options(req);
        r.request_headers_to_add = add;
        r.request_headers_to_remove = remove;
    }
    if let Some(resp) = &headers.response {
        let (add, remove) = header_options(resp);
        r.response_headers_to_add = add;
        r.response_headers_to_remove = remove;
    }
}

/// `set` overwrites, `add` appends, `remove` removes.
pub(super) fn header_options(ops: &HeaderOperations) -> (Vec<HeaderValueOption>, Vec<String>) {
    let option = |k: &String, v: &String, action: HeaderAppendAction| HeaderValueOption {
        header: Some(HeaderValue {
            key: k.clone(),
            value: v.clone(),
            ..Default::default()
        }),
        append_action: action as i32,
        ..Default::default()
    };
    let add = ops
        .set
        .iter()
        .map(|(k, v)| option(k, v, HeaderAppendAction::OverwriteIfExistsOrAdd))
        .chain(
            ops.add
                .iter()
                .map(|(k, v)| option(k, v, HeaderAppendAction::AppendIfExistsOrAdd)),
        )
        .collect();
    (add, ops.remove.clone())
}
