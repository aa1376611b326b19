//! Parts both kinds share: string matches, port selectors, percentages and durations as Istio
//! writes them.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Istio's `StringMatch`: exactly one of `exact`, `prefix`, `regex` (RE2 syntax) should be set;
/// validation reports any other combination.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StringMatch {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exact: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub regex: Option<String>,
}

/// Istio's `PortSelector`: `{number: 8080}`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PortSelector {
    #[serde(default)]
    pub number: u32,
}

/// Istio's `Percent`: `{value: 12.5}`, a percentage in `[0, 100]`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Percent {
    #[serde(default)]
    pub value: f64,
}

/// A protobuf `Duration` as Istio's YAML writes it: Go's duration syntax (`10s`, `1.5s`, `250ms`,
/// `1h30m`, `300us`), which includes protobuf JSON's `1.500s`. Read strictly: anything else is an
/// error that shows the text; negative durations are refused here.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Duration(pub std::time::Duration);

/// A duration that is not Go's syntax.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{text:?} is not a duration like 10s, 1.5s, 250ms or 1h30m: {reason}")]
pub struct DurationError {
    text: String,
    reason: &'static str,
}

/// The longest duration accepted: protobuf's own limit (10,000 years) is far past anything a
/// proxy can use, and keeping every value under a year keeps deadline arithmetic safe.
const MAX_DURATION: std::time::Duration = std::time::Duration::from_secs(365 * 24 * 3600);

impl Duration {
    /// Reads Go's duration syntax (a sequence of decimal numbers, each with an optional fraction
    /// and a unit among `ns`, `us`, `µs`, `ms`, `s`, `m`, `h`; `0` alone is zero).
    pub fn parse(text: &str) -> Result<Duration, DurationError> {
        let fail = |reason| DurationError {
            text: text.to_string(),
            reason,
        };
        if text == "0" {
            return Ok(Duration::default());
        }
        if text.starts_with('-') {
            return Err(fail("negative durations are not allowed"));
        }
        let mut rest = text.strip_prefix('+').unwrap_or(text);
        if rest.is_empty() {
            return Err(fail("empty"));
        }
        let mut nanos: u128 = 0;
        while !rest.is_empty() {
            let int_len = rest.bytes().take_while(u8::is_ascii_digit).count();
            let (int, after) = rest.split_at(int_len);
            let (frac, after) = match after.strip_prefix('.') {
                Some(a) => {
                    let n = a.bytes().take_while(u8::is_ascii_digit).count();
                    a.split_at(n)
                }
                None => ("", after),
            };
            if int.is_empty() && frac.is_empty() {
                return Err(fail("expected a number"));
            }
            let unit_len = after
                .char_indices()
                .find(|(_, c)| c.is_ascii_digit() || *c == '.')
                .map_or(after.len(), |(i, _)| i);
            let (unit, after) = after.split_at(unit_len);
            let scale: u128 = match unit {
                "ns" => 1,
                "us" | "µs" | "μs" => 1_000,
                "ms" => 1_000_000,
                "s" => 1_000_000_000,
                "m" => 60 * 1_000_000_000,
                "h" => 3600 * 1_000_000_000,
                "" => return Err(fail("missing unit")),
                _ => return Err(fail("unknown unit")),
            };
            let whole: u128 = if int.is_empty() {
                0
            } else {
                int.parse().map_err(|_| fail("number too large"))?
            };
            let mut part = whole.checked_mul(scale).ok_or_else(|| fail("too long"))?;
            let mut denom: u128 = 1;
            for d in frac.bytes().take(18) {
                denom *= 10;
                part += u128::from(d - b'0') * scale / denom;
            }
            nanos = nanos.checked_add(part).ok_or_else(|| fail("too long"))?;
            rest = after;
        }
        if nanos > MAX_DURATION.as_nanos() {
            return Err(fail("longer than a year"));
        }
        let secs = u64::try_from(nanos / 1_000_000_000).map_err(|_| fail("too long"))?;
        let sub = u32::try_from(nanos % 1_000_000_000).map_err(|_| fail("too long"))?;
        Ok(Duration(std::time::Duration::new(secs, sub)))
    }

    /// The value.
    pub fn get(self) -> std::time::Duration {
        self.0
    }
}

impl fmt::Display for Duration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let d = self.0;
        if d.subsec_nanos() == 0 {
            write!(f, "{}s", d.as_secs())
        } else if d.subsec_nanos().is_multiple_of(1_000_000) {
            write!(f, "{}ms", d.as_millis())
        } else {
            write!(f, "{}ns", d.as_nanos())
        }
    }
}

impl<'de> Deserialize<'de> for Duration {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        Duration::parse(&text).map_err(serde::de::Error::custom)
    }
}

impl Serialize for Duration {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(text: &str) -> Result<u128, DurationError> {
        Duration::parse(text).map(|d| d.0.as_millis())
    }

    #[test]
    fn go_duration_syntax_is_read() {
        assert_eq!(ms("10s"), Ok(10_000));
        assert_eq!(ms("1.5s"), Ok(1_500));
        assert_eq!(ms("1.500s"), Ok(1_500));
        assert_eq!(ms("250ms"), Ok(250));
        assert_eq!(ms("1h30m"), Ok(5_400_000));
        assert_eq!(ms("0"), Ok(0));
        assert_eq!(ms(".5s"), Ok(500));
        assert_eq!(Duration::parse("300us").map(|d| d.0.as_micros()), Ok(300));
        assert_eq!(
            Duration::parse("1.5s").map(|d| d.to_string()),
            Ok("1500ms".into())
        );
    }

    #[test]
    fn bad_durations_say_why() {
        for bad in ["", "10", "-1s", "1x", "s", "1.5", "99999999999h", "1e3s"] {
            let err = Duration::parse(bad).expect_err(bad);
            assert!(err.to_string().contains("is not a duration"), "{err}");
        }
    }
}
