//! The interception flags `webpep client` and `webpep server` share (over `[intercept]`).

use std::path::PathBuf;

use webpep_intercept::InterceptConfig;

/// Flags over `[intercept]`.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct InterceptArgs {
    /// Open the HTTPS CONNECTs the policy names with this installation's CA (as `[intercept]
    /// enabled = true`; off by default; docs/interception.md; the edge needs --ca-dir).
    #[arg(long)]
    pub intercept: bool,
    /// Intercept only these hosts (repeatable; `example.com` covers its subdomains,
    /// `*.example.com` only them, `=example.com` only that host).
    #[arg(long, value_name = "PATTERN")]
    pub intercept_include: Vec<String>,
    /// Never intercept these hosts (repeatable; same patterns; wins over includes).
    #[arg(long, value_name = "PATTERN")]
    pub intercept_exclude: Vec<String>,
    /// The interception CA's directory (as `[intercept] ca-dir`): the client's defaults to
    /// $XDG_DATA_HOME/webpep/ca; the edge's is the one `webpep server ca init --dir` made.
    #[arg(long, value_name = "DIR")]
    pub ca_dir: Option<PathBuf>,
}

impl InterceptArgs {
    /// The flags given, over `cfg`.
    pub fn apply(&self, cfg: &mut InterceptConfig) {
        if self.intercept {
            cfg.enabled = true;
        }
        if !self.intercept_include.is_empty() {
            cfg.include = self.intercept_include.clone();
        }
        if !self.intercept_exclude.is_empty() {
            cfg.exclude = self.intercept_exclude.clone();
        }
        if let Some(d) = &self.ca_dir {
            cfg.ca_dir = Some(d.clone());
        }
    }
}
