//! VHDS: a route configuration split into its virtual hosts, for delta clients that take them one
//! by one (`docs/architecture.md`, "Route configurations for delta clients").
//!
//! The route configuration such a client gets keeps every field but its virtual hosts and says
//! `vhds: {config_source: {ads: {}}}`; each virtual host becomes a `VirtualHost` resource named
//! `<route configuration>/<virtual host>`. Envoy files a virtual host under the route
//! configuration its name starts with (up to the last `/`) and removes one by its `name` field, so
//! that field is the resource name too.
//!
//! The split works on the encoded bytes: a virtual host's bytes are copied as they are (they are
//! already canonical, `canonical.rs`), followed by the new `name`. Protobuf keeps the last value
//! of a repeated scalar field, so the copy decodes with the new name and nothing is re-encoded.

use bytes::Buf;
use envoy_types::pb::envoy::config::route::v3::{RouteConfiguration, Vhds};
use prost::encoding::{DecodeContext, WireType, decode_key, decode_varint, skip_field};
use prost::{DecodeError, Message};

use super::super::pb::ads;
use super::super::{EncodedResource, ResourceType};
use super::canonical::Encoded;

/// `Any.value`.
const ANY_VALUE_TAG: u32 = 2;
/// `RouteConfiguration.virtual_hosts`.
const VIRTUAL_HOSTS_TAG: u32 = 2;
/// `VirtualHost.name`.
const VIRTUAL_HOST_NAME_TAG: u32 = 1;
/// What separates the route configuration from the virtual host in a VHDS resource name.
const VHDS_SEPARATOR: char = '/';

/// Why an encoded resource could not be split (never with what tributary encodes).
#[derive(Debug, thiserror::Error)]
pub enum VhdsError {
    /// The bytes are not valid protobuf.
    #[error("route configuration does not decode: {0}")]
    Decode(#[from] DecodeError),
    /// The bytes are protobuf, but not a route configuration tributary could have written.
    #[error("route configuration is malformed: {0}")]
    Malformed(&'static str),
}

/// One route configuration as a VHDS client receives it.
#[derive(Debug)]
pub struct VhdsSplit {
    /// The route configuration without its virtual hosts, pointing at VHDS over ADS.
    pub route: EncodedResource,
    /// Its virtual hosts, one resource each, in the route configuration's order.
    pub virtual_hosts: Vec<EncodedResource>,
}

/// The VHDS resource name of virtual host `vhost` of route configuration `route`.
pub(crate) fn virtual_host_resource_name(route: &str, vhost: &str) -> String {
    format!("{route}{VHDS_SEPARATOR}{vhost}")
}

/// The prefix every VHDS resource name of route configuration `route` starts with.
pub fn virtual_host_prefix(route: &str) -> String {
    format!("{route}{VHDS_SEPARATOR}")
}

/// Splits an encoded route configuration (an [`EncodedResource`] of [`ResourceType::Route`]).
/// Fails only on bytes that are not a route configuration, which tributary never encodes.
pub fn split_route_config(rc: &EncodedResource) -> Result<VhdsSplit, VhdsError> {
    let any = rc.any_bytes();
    let value = field(&any, ANY_VALUE_TAG)?.unwrap_or_default();
    let mut rest = Vec::with_capacity(value.len().min(256));
    let mut virtual_hosts = Vec::new();
    let mut buf = value;
    while buf.has_remaining() {
        let start = buf;
        let (tag, wire) = decode_key(&mut buf)?;
        if tag == VIRTUAL_HOSTS_TAG && wire == WireType::LengthDelimited {
            let len = length(&mut buf)?;
            let vh = &buf[..len];
            buf.advance(len);
            let vh_name = field(vh, VIRTUAL_HOST_NAME_TAG)?.unwrap_or_default();
            let vh_name = std::str::from_utf8(vh_name)
                .map_err(|_| VhdsError::Malformed("virtual host name is not UTF-8"))?;
            let name = virtual_host_resource_name(&rc.name, vh_name);
            let mut bytes = Vec::with_capacity(vh.len() + name.len() + 4);
            bytes.extend_from_slice(vh);
            prost::encoding::string::encode(VIRTUAL_HOST_NAME_TAG, &name, &mut bytes);
            virtual_hosts.push(EncodedResource::encode(
                ResourceType::VirtualHost,
                &name,
                &Encoded::from_bytes(bytes),
            ));
        } else {
            skip_field(wire, tag, &mut buf, DecodeContext::default())?;
            rest.extend_from_slice(&start[..start.len() - buf.len()]);
        }
    }
    let vhds = RouteConfiguration {
        vhds: Some(Vhds {
            config_source: Some(ads()),
        }),
        ..Default::default()
    };
    vhds.encode_raw(&mut rest);
    Ok(VhdsSplit {
        route: EncodedResource::encode(ResourceType::Route, &rc.name, &Encoded::from_bytes(rest)),
        virtual_hosts,
    })
}

/// The bytes of the first length-delimited field `tag` of message `msg`, if any.
fn field(msg: &[u8], tag: u32) -> Result<Option<&[u8]>, VhdsError> {
    let mut buf = msg;
    while buf.has_remaining() {
        let (t, wire) = decode_key(&mut buf)?;
        if t == tag && wire == WireType::LengthDelimited {
            let len = length(&mut buf)?;
            return Ok(Some(&buf[..len]));
        }
        skip_field(wire, t, &mut buf, DecodeContext::default())?;
    }
    Ok(None)
}

/// Reads a length prefix and checks it fits in what is left.
fn length(buf: &mut &[u8]) -> Result<usize, VhdsError> {
    let len = usize::try_from(decode_varint(buf)?)
        .map_err(|_| VhdsError::Malformed("length does not fit in usize"))?;
    if len > buf.remaining() {
        return Err(VhdsError::Malformed("length past the end of the message"));
    }
    Ok(len)
}

#[cfg(test)]
mod tests;
