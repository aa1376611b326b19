//! Settings for what traffic rules generate that the rules themselves do not say (istiod's
//! MeshConfig `defaultHttpRetryPolicy`).

use serde::{Deserialize, Serialize};

use crate::envoy::rules::TrafficOptions;

/// Most default retry attempts accepted: each attempt can multiply the load on a failing upstream,
/// so a value past this is a typo, not a policy.
const MAX_DEFAULT_RETRY_ATTEMPTS: u32 = 10;

/// The `traffic:` section of the config file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TrafficSettings {
    /// Attempts of the retry policy given to VirtualService routes that set no `retries` (istiod's
    /// default: 2, on `connect-failure,refused-stream,unavailable,cancelled,retriable-status-codes`
    /// and 503); 0 turns the default policy off.
    pub default_retry_attempts: u32,
}

impl Default for TrafficSettings {
    fn default() -> Self {
        Self {
            default_retry_attempts: TrafficOptions::default().default_retry_attempts,
        }
    }
}

impl TrafficSettings {
    /// Checks the values are usable.
    pub fn validate(&self) -> Result<(), String> {
        if self.default_retry_attempts > MAX_DEFAULT_RETRY_ATTEMPTS {
            return Err(format!(
                "traffic.default_retry_attempts must be at most {MAX_DEFAULT_RETRY_ATTEMPTS} (0 \
                 turns the default retries off), not {}",
                self.default_retry_attempts
            ));
        }
        Ok(())
    }

    /// The options the snapshot builder generates with.
    pub fn options(&self) -> TrafficOptions {
        TrafficOptions {
            default_retry_attempts: self.default_retry_attempts,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    #[test]
    fn default_retry_attempts_come_from_the_file() {
        let c: Config = serde_yaml::from_str("traffic: {default_retry_attempts: 0}\n").unwrap();
        assert_eq!(c.traffic.options().default_retry_attempts, 0);
        c.validate().unwrap();
        assert_eq!(
            Config::default().traffic.options(),
            TrafficOptions::default()
        );
    }

    #[test]
    fn absurd_retry_attempts_are_refused_with_the_field_named() {
        let c: Config = serde_yaml::from_str("traffic: {default_retry_attempts: 50}\n").unwrap();
        let e = c.validate().unwrap_err().to_string();
        assert!(e.contains("traffic.default_retry_attempts"), "{e}");
        assert!(serde_yaml::from_str::<Config>("traffic: {retries: 1}\n").is_err());
    }
}
