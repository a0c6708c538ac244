//! `[intercept]`, as both proxies read it: which CONNECTs are opened with the installation's
//! CA so that the requests inside get every stage. The client proxy opens its browser's
//! CONNECTs on the device; the edge opens those on its explicit port (for browsers that trust
//! the edge's CA).

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::policy::{Policy, PolicyError, DEFAULT_PORTS};

/// `[intercept]`: off unless the owner of the CA turns it on.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "kebab-case", deny_unknown_fields, default)]
pub struct InterceptConfig {
    /// Intercept the CONNECTs the lists name (off: every CONNECT is a tunnel).
    pub enabled: bool,
    /// Hosts to intercept (empty: every host not excluded): `example.com` (and its
    /// subdomains), `*.example.com` (subdomains only), `=example.com` (that host only).
    pub include: Vec<String>,
    /// Hosts always tunnelled untouched (the same patterns; exclusion wins).
    pub exclude: Vec<String>,
    /// CONNECT ports intercepted (a CONNECT elsewhere may carry anything but TLS).
    pub ports: Vec<u16>,
    /// The CA's directory (`ca.pem`, `ca-key.pem` mode 0600). The client proxy has a default
    /// ([`default_client_ca_dir`]); the edge requires it when enabled.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ca_dir: Option<PathBuf>,
    /// Leaf certificates kept in memory (one per intercepted host).
    pub leaf_cache: usize,
}

impl Default for InterceptConfig {
    fn default() -> Self {
        InterceptConfig {
            enabled: false,
            include: Vec::new(),
            exclude: Vec::new(),
            ports: DEFAULT_PORTS.to_vec(),
            ca_dir: None,
            leaf_cache: 1000,
        }
    }
}

impl InterceptConfig {
    /// The policy these keys describe, or the key and what is wrong with it.
    pub fn policy(&self) -> Result<Policy, (&'static str, String)> {
        let policy = Policy::new(self.enabled, &self.include, &self.exclude).map_err(|e| {
            let PolicyError::InvalidPattern { list, .. } = &e;
            let key = if *list == "exclude" {
                "intercept.exclude"
            } else {
                "intercept.include"
            };
            (key, e.to_string())
        })?;
        Ok(policy.with_ports(&self.ports))
    }

    /// The keys checked together: the key and what is wrong with it.
    pub fn validate(&self) -> Result<(), (&'static str, String)> {
        self.policy()?;
        if self.ports.contains(&0) {
            return Err(("intercept.ports", "0 is not a port".into()));
        }
        if self.leaf_cache == 0 {
            return Err(("intercept.leaf-cache", "must be at least 1".into()));
        }
        if self.enabled && self.ports.is_empty() {
            return Err((
                "intercept.ports",
                "no port: nothing would be intercepted (443 is the usual one)".into(),
            ));
        }
        Ok(())
    }
}

/// The client proxy's CA directory when none is configured: `$XDG_DATA_HOME/webpep/ca`, else
/// `$HOME/.local/share/webpep/ca`, else `./webpep-ca`.
pub fn default_client_ca_dir() -> PathBuf {
    let var = |k: &str| {
        std::env::var_os(k)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    if let Some(d) = var("XDG_DATA_HOME") {
        return d.join("webpep").join("ca");
    }
    match var("HOME") {
        Some(h) => h.join(".local").join("share").join("webpep").join("ca"),
        None => PathBuf::from("webpep-ca"),
    }
}
