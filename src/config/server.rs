//! Settings of the xDS transport: HTTP/2 limits and keepalive (TRANS-5, TRANS-7), connection age
//! (TRANS-9) and graceful shutdown (TRANS-8).

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// HTTP/2 settings of both xDS servers (plaintext and mTLS).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ConnectionSettings {
    /// Interval of the server's HTTP/2 keepalive pings (TRANS-7; Istio: 30s): a connection whose
    /// requests have not been read for this long is pinged. 0: no keepalive.
    #[serde(with = "super::duration")]
    pub keepalive_interval: Duration,
    /// How much longer, after the interval, a peer may send nothing at all (no frame of any kind,
    /// the ping's answer included) before its connection is closed (Istio: 10s). A busy peer that
    /// keeps sending frames is not closed because one ping's answer is late.
    #[serde(with = "super::duration")]
    pub keepalive_timeout: Duration,
    /// HTTP/2 `SETTINGS_MAX_CONCURRENT_STREAMS` per connection (TRANS-5, SEC-11). Envoy opens one
    /// ADS stream, or one per type without ADS.
    pub max_concurrent_streams: u32,
    /// Largest request header block accepted (SEC-11).
    pub max_header_list_size: u32,
    /// Close connections older than this (GOAWAY, then `max_connection_age_grace`) so proxies
    /// rebalance across replicas after a scale-out (TRANS-9). Unset: never.
    #[serde(with = "opt_duration")]
    pub max_connection_age: Option<Duration>,
    /// Up to this much, drawn per connection, is added to `max_connection_age`, so connections
    /// opened together are not all closed together.
    #[serde(with = "super::duration")]
    pub max_connection_age_jitter: Duration,
    /// After a connection's age is up, how long its streams get to finish.
    #[serde(with = "super::duration")]
    pub max_connection_age_grace: Duration,
    /// How long a new connection (after the TLS handshake, on the mTLS port) has to send its first
    /// HTTP/2 frames before it is closed, so silent connections cannot pile up.
    #[serde(with = "super::duration")]
    pub first_frames_timeout: Duration,
    /// Most connections open at once from one IP address, per listener; past it new ones are
    /// closed at once. 0: no limit.
    pub max_connections_per_peer: u32,
}

impl Default for ConnectionSettings {
    fn default() -> Self {
        Self {
            keepalive_interval: Duration::from_secs(30),
            keepalive_timeout: Duration::from_secs(10),
            // Istio allows 100000; a proxy needs at most 8 (4 types, SotW or delta). 1000 leaves
            // room for test clients and proxyless gRPC while bounding one connection (SEC-11).
            max_concurrent_streams: 1000,
            // 64 KiB: gRPC request headers are a few hundred bytes.
            max_header_list_size: 64 * 1024,
            max_connection_age: None,
            max_connection_age_jitter: Duration::from_secs(0),
            max_connection_age_grace: Duration::from_secs(10),
            // As the TLS handshake timeout: a real client sends its preface in its first packet.
            first_frames_timeout: Duration::from_secs(10),
            // A proxy needs one connection. 1024 leaves room for many proxies behind one NAT
            // address or node while bounding what one address can hold open.
            max_connections_per_peer: 1024,
        }
    }
}

impl ConnectionSettings {
    /// The keepalive ping interval, unless keepalive is off (`keepalive_interval: 0s`).
    pub fn keepalive(&self) -> Option<Duration> {
        (!self.keepalive_interval.is_zero()).then_some(self.keepalive_interval)
    }

    /// The age of a new connection: `max_connection_age` plus a jitter drawn for this connection
    /// alone, so that proxies that connected together are not recycled together (TRANS-9).
    pub fn connection_age(&self) -> Option<Duration> {
        let age = self.max_connection_age?;
        let jitter = self.max_connection_age_jitter.as_millis() as u64;
        Some(age + Duration::from_millis(fastrand::u64(0..=jitter)))
    }
}

/// What happens on SIGTERM/SIGINT (TRANS-8).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ShutdownSettings {
    /// How long `/ready` reports 503 before streams are drained, so load balancers and Kubernetes
    /// endpoints stop sending new proxies here first.
    #[serde(with = "super::duration")]
    pub drain_delay: Duration,
    /// How long live streams and connections get to finish after draining starts; then they are
    /// closed (istiod's `--shutdownDuration`, 10s).
    #[serde(with = "super::duration")]
    pub grace_period: Duration,
}

impl Default for ShutdownSettings {
    fn default() -> Self {
        Self {
            drain_delay: Duration::from_secs(0),
            grace_period: Duration::from_secs(10),
        }
    }
}

/// Optional durations: `30m`, or absent/null.
mod opt_duration {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => super::super::duration::serialize(d, s),
            None => s.serialize_none(),
        }
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<Duration>, D::Error> {
        let text: Option<String> = Option::deserialize(d)?;
        text.map(|t| {
            humantime::parse_duration(&t).map_err(|e| {
                serde::de::Error::custom(format!("{t:?} is not a duration like 30m: {e}"))
            })
        })
        .transpose()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn age_jitter_stays_in_range_and_differs_per_connection() {
        // TRANS-9
        let mut c = ConnectionSettings::default();
        assert_eq!(c.connection_age(), None);
        c.max_connection_age = Some(Duration::from_secs(60));
        assert_eq!(c.connection_age(), Some(Duration::from_secs(60)));
        c.max_connection_age_jitter = Duration::from_secs(10);
        let ages: std::collections::BTreeSet<Duration> =
            (0..100).map(|_| c.connection_age().unwrap()).collect();
        assert!(
            ages.iter()
                .all(|a| *a >= Duration::from_secs(60) && *a <= Duration::from_secs(70))
        );
        assert!(
            ages.len() > 50,
            "drawn per connection: {} distinct of 100",
            ages.len()
        );
        let parsed: ConnectionSettings = serde_yaml::from_str("max_connection_age: 30m\n").unwrap();
        assert_eq!(parsed.max_connection_age, Some(Duration::from_secs(1800)));
    }
}
