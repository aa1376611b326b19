//! The virtual hosts of route responses, read without decoding them: whether a host is routable.
//!
//! tributary names the virtual host of a hostname on a port `<hostname>:<port>` inside route
//! configuration `<port>`; over VHDS the `VirtualHost` resource is `<route configuration>/<virtual
//! host>` (`docs/architecture.md`, "Route configurations for delta clients").

use bytes::{Buf, Bytes};
use prost::encoding::{WireType, decode_key};

use super::{Response, WireError, read_len_delimited, skip};

/// `RouteConfiguration.virtual_hosts`.
const VIRTUAL_HOSTS_TAG: u32 = 2;
/// `VirtualHost.name`.
const VIRTUAL_HOST_NAME_TAG: u32 = 1;

/// Whether virtual host `vhost` (`<hostname>:<port>`, or a bare hostname) is one of `host`'s.
pub(crate) fn is_host(vhost: &[u8], host: &str) -> bool {
    vhost
        .strip_prefix(host.as_bytes())
        .is_some_and(|rest| rest.is_empty() || rest.first() == Some(&b':'))
}

/// Whether VHDS resource `name` (`<route configuration>/<virtual host>`) is one of `host`'s.
pub(crate) fn is_host_resource(name: &str, host: &str) -> bool {
    name.split_once('/')
        .is_some_and(|(_, vhost)| is_host(vhost.as_bytes(), host))
}

/// Whether encoded route configuration `rc` has a virtual host of `host`.
fn has_host(mut rc: Bytes, host: &str) -> Result<bool, WireError> {
    while rc.has_remaining() {
        let (tag, wire) = decode_key(&mut rc)?;
        if tag != VIRTUAL_HOSTS_TAG || wire != WireType::LengthDelimited {
            skip(wire, &mut rc)?;
            continue;
        }
        let mut vhost = read_len_delimited(&mut rc)?;
        while vhost.has_remaining() {
            let (tag, wire) = decode_key(&mut vhost)?;
            if tag == VIRTUAL_HOST_NAME_TAG && wire == WireType::LengthDelimited {
                if is_host(&read_len_delimited(&mut vhost)?, host) {
                    return Ok(true);
                }
                break;
            }
            skip(wire, &mut vhost)?;
        }
    }
    Ok(false)
}

impl Response {
    /// For a route configuration (RDS) response: for each route configuration it carries, whether
    /// that configuration has a virtual host of `host`. A resource that cannot be read is an error.
    pub(crate) fn routes_with_host(&self, delta: bool, host: &str) -> Result<Vec<bool>, WireError> {
        (0..self.resources.len())
            .map(|i| {
                let (_, rc) = self
                    .resource(i, delta)
                    .ok_or_else(|| WireError(format!("route configuration {i} unreadable")))?;
                has_host(rc, host)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests;
