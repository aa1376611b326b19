//! The environment variables Consul's own tools read, for what a Consul registry's config leaves
//! unset. The lookup is passed in: `main` reads the process environment at the edge, tests pass a
//! map; nothing here calls `std::env`.

use std::path::PathBuf;

use super::ConsulConfig;

impl ConsulConfig {
    /// Fills what the config leaves unset from `CONSUL_HTTP_ADDR` (with `CONSUL_HTTP_SSL=true`, an
    /// address without scheme is https), `CONSUL_HTTP_TOKEN` / `CONSUL_HTTP_TOKEN_FILE`,
    /// `CONSUL_CACERT`, `CONSUL_CLIENT_CERT` + `CONSUL_CLIENT_KEY`. The file wins over the
    /// environment; a variable set to blanks counts as unset.
    pub fn apply_env(&mut self, env: &dyn Fn(&str) -> Option<String>) {
        let var = |k: &str| env(k).filter(|v| !v.trim().is_empty());
        if self.address.is_none()
            && let Some(addr) = var("CONSUL_HTTP_ADDR")
        {
            let ssl = var("CONSUL_HTTP_SSL").is_some_and(|v| v == "true" || v == "1");
            self.address = Some(match (addr.contains("://"), ssl) {
                (false, true) => format!("https://{addr}"),
                _ => addr,
            });
        }
        if self.token.is_none() && self.token_file.is_none() {
            self.token = var("CONSUL_HTTP_TOKEN");
            if self.token.is_none() {
                self.token_file = var("CONSUL_HTTP_TOKEN_FILE").map(PathBuf::from);
            }
        }
        if self.tls.ca_file.is_none() {
            self.tls.ca_file = var("CONSUL_CACERT").map(PathBuf::from);
        }
        if self.tls.cert_file.is_none()
            && self.tls.key_file.is_none()
            && let (Some(cert), Some(key)) = (var("CONSUL_CLIENT_CERT"), var("CONSUL_CLIENT_KEY"))
        {
            self.tls.cert_file = Some(cert.into());
            self.tls.key_file = Some(key.into());
        }
    }
}
