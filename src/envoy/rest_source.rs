//! Resources as a REST-JSON client must see them: EDS and RDS fetched over REST, not ADS.
//!
//! A client polling over HTTP has no ADS stream, so a cluster that says "endpoints over ADS" or an
//! HTTP connection manager that says "routes over ADS" cannot be followed (REST-3 in
//! `docs/rest-xds.md`). For REST, those config sources become `api_config_source {api_type: REST,
//! cluster_names: [xds-grpc]}`: the same static cluster the client's bootstrap polls CDS and LDS
//! through (`tributary bootstrap --rest`). Everything else is the snapshot's resource unchanged.

use std::time::Duration;

use envoy_types::pb::envoy::config::cluster::v3::Cluster;
use envoy_types::pb::envoy::config::core::v3::{
    ApiConfigSource, ApiVersion, ConfigSource, api_config_source::ApiType,
    config_source::ConfigSourceSpecifier,
};
use envoy_types::pb::envoy::config::listener::v3::{Listener, filter};
use envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3::{
    HttpConnectionManager, http_connection_manager,
};
use envoy_types::pb::google::protobuf::Any;
use prost::{Message, Name};

use super::pb::{any, duration};
use super::{EncodedResource, ResourceType};

/// The static cluster through which a REST client reaches tributary, as `tributary bootstrap
/// --rest` names it.
pub const REST_XDS_CLUSTER: &str = "xds-grpc";

/// How often a REST client polls EDS and RDS. Envoy's REST subscriptions poll; one second keeps an
/// endpoint change within about a second of reaching the client, at one small request per second
/// and resource set (an unchanged set is answered with 304).
pub const REST_REFRESH_DELAY: Duration = Duration::from_secs(1);

/// Longest a REST poll may take before the client gives up and retries.
const REST_REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// Why a resource could not be rewritten for REST.
#[derive(Debug, thiserror::Error)]
pub enum RestSourceError {
    /// A resource of the snapshot did not decode (a bug: the snapshot encodes what it holds).
    #[error("resource {name} does not decode as {type_url}: {source}")]
    Decode {
        /// Its name.
        name: String,
        /// Its type.
        type_url: &'static str,
        /// What the decoder said.
        source: prost::DecodeError,
    },
}

/// "Fetch it over REST from the `xds-grpc` cluster."
pub fn rest_config_source() -> ConfigSource {
    ConfigSource {
        resource_api_version: ApiVersion::V3 as i32,
        config_source_specifier: Some(ConfigSourceSpecifier::ApiConfigSource(ApiConfigSource {
            api_type: ApiType::Rest as i32,
            transport_api_version: ApiVersion::V3 as i32,
            cluster_names: vec![REST_XDS_CLUSTER.to_string()],
            refresh_delay: Some(duration(REST_REFRESH_DELAY)),
            request_timeout: Some(duration(REST_REQUEST_TIMEOUT)),
            ..Default::default()
        })),
        ..Default::default()
    }
}

/// `r` as a REST client must see it (an `Any`): clusters and listeners with their ADS sources
/// replaced; endpoints, routes (and MCP resources, which REST never serves) as they are.
pub fn for_rest(r: &EncodedResource) -> Result<Any, RestSourceError> {
    let decode_err = |source| RestSourceError::Decode {
        name: r.name.to_string(),
        type_url: r.ty.type_url(),
        source,
    };
    match r.ty {
        ResourceType::Cluster => {
            let mut c = Cluster::decode(r.to_any().value.as_slice()).map_err(decode_err)?;
            if let Some(eds) = &mut c.eds_cluster_config
                && is_ads(eds.eds_config.as_ref())
            {
                eds.eds_config = Some(rest_config_source());
            }
            Ok(any(&c))
        }
        ResourceType::Listener => {
            let mut l = Listener::decode(r.to_any().value.as_slice()).map_err(decode_err)?;
            for f in l
                .filter_chains
                .iter_mut()
                .flat_map(|c| c.filters.iter_mut())
            {
                if let Some(filter::ConfigType::TypedConfig(typed)) = &mut f.config_type {
                    rest_rds(typed).map_err(decode_err)?;
                }
            }
            Ok(any(&l))
        }
        ResourceType::Endpoint
        | ResourceType::Route
        | ResourceType::VirtualHost
        | ResourceType::ServiceEntry
        | ResourceType::WorkloadEntry
        | ResourceType::DestinationRule
        | ResourceType::VirtualService => Ok(r.to_any()),
    }
}

fn is_ads(source: Option<&ConfigSource>) -> bool {
    matches!(
        source.and_then(|s| s.config_source_specifier.as_ref()),
        Some(ConfigSourceSpecifier::Ads(_))
    )
}

/// Points an HCM's RDS at the REST source, when `typed` is an HCM fetching routes over ADS.
fn rest_rds(typed: &mut Any) -> Result<(), prost::DecodeError> {
    if typed.type_url != HttpConnectionManager::type_url() {
        return Ok(());
    }
    let mut hcm = HttpConnectionManager::decode(typed.value.as_slice())?;
    if let Some(http_connection_manager::RouteSpecifier::Rds(rds)) = &mut hcm.route_specifier
        && is_ads(rds.config_source.as_ref())
    {
        rds.config_source = Some(rest_config_source());
        *typed = any(&hcm);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::envoy::fixtures::{merged, port};
    use crate::envoy::{GenerateOptions, clusters_for, listener_for_port};
    use tributary_registries::Protocol;

    fn is_rest(s: Option<&ConfigSource>) -> bool {
        matches!(
            s.and_then(|s| s.config_source_specifier.as_ref()),
            Some(ConfigSourceSpecifier::ApiConfigSource(a))
                if a.api_type == ApiType::Rest as i32 && a.cluster_names == [REST_XDS_CLUSTER]
        )
    }

    #[test]
    fn clusters_and_listeners_fetch_eds_and_rds_over_rest() {
        // REST-3: no ADS source survives in what a REST client receives.
        let svc = merged("web.test", vec![port("http", 8080, Protocol::Http)], vec![]);
        let cluster = &clusters_for(&svc, &GenerateOptions::default(), &mut Vec::new())[0];
        let c = Cluster::decode(for_rest(cluster).unwrap().value.as_slice()).unwrap();
        assert!(is_rest(c.eds_cluster_config.unwrap().eds_config.as_ref()));
        let listener =
            listener_for_port(8080, &[&svc], "0.0.0.0".parse().unwrap(), &mut Vec::new()).unwrap();
        let l = Listener::decode(for_rest(&listener).unwrap().value.as_slice()).unwrap();
        let Some(filter::ConfigType::TypedConfig(typed)) =
            &l.filter_chains[0].filters[0].config_type
        else {
            panic!("typed HCM expected");
        };
        let hcm = HttpConnectionManager::decode(typed.value.as_slice()).unwrap();
        let Some(http_connection_manager::RouteSpecifier::Rds(rds)) = hcm.route_specifier else {
            panic!("RDS expected");
        };
        assert!(is_rest(rds.config_source.as_ref()));
        assert_eq!(rds.route_config_name, "8080");
    }
}
