//! `webpep dns`: the rewriting DNS proxy of paper 002 §3.2 (crate `webpep-dns`). Flags, an
//! optional TOML file with the same keys (flags win), then serve UDP and TCP until SIGINT or
//! SIGTERM.

use std::net::{IpAddr, SocketAddr, TcpListener, UdpSocket};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use tracing::{info, warn};
use webpep_dns::{
    parse_config_file, CancellationToken, DnsProxy, DnsProxyConfig, FileConfig, NameMatch,
    RewritePolicy, DEFAULT_PROXY_TTL,
};

use crate::BadInput;

/// The default address to answer on.
const DEFAULT_LISTEN: &str = "0.0.0.0:53";

/// Flags of `webpep dns`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Address to answer DNS queries on, over UDP and TCP [default: 0.0.0.0:53]
    #[arg(long, value_name = "ADDR:PORT")]
    listen: Option<SocketAddr>,
    /// The resolver every query is forwarded to (required unless `upstream` is in --config)
    #[arg(long, value_name = "ADDR:PORT")]
    upstream: Option<SocketAddr>,
    /// Which names get the proxy's address first: `all`, `www` (names whose first label is
    /// www), a comma-separated list of names and `*.suffix` patterns, or `none` [default: none,
    /// a plain forwarder]
    #[arg(long, value_name = "all|www|NAME,...")]
    rewrite: Option<String>,
    /// An address of the caching proxy to put first in rewritten answers (repeatable: IPv4
    /// ones go into A answers, IPv6 ones into AAAA answers; required with --rewrite)
    #[arg(long = "proxy-addr", value_name = "IP")]
    proxy_addr: Vec<IpAddr>,
    /// TTL of the proxy's records in seconds, long so that clients keep them [default: 86400]
    #[arg(long, value_name = "SECS")]
    ttl: Option<u32>,
    /// Drop the original addresses instead of keeping them after the proxy's (the mobility
    /// fallback of paper 002 §5)
    #[arg(long)]
    no_fallback: bool,
    /// Keep the original records' own TTLs (002 Fig. 3 as drawn) instead of giving the whole
    /// rewritten answer --ttl; clients cache an answer for its lowest TTL (RFC 2181 §5.2), so
    /// they then ask again over the air when the origin's TTL runs out
    #[arg(long)]
    keep_origin_ttl: bool,
    /// Client network served (CIDR; repeatable; replaces the default, loopback only); queries
    /// from others get REFUSED and are never forwarded
    #[arg(long, value_name = "CIDR")]
    allow_client: Vec<String>,
    /// How long to wait for each of the two upstream attempts before answering SERVFAIL
    #[arg(long, value_name = "MS", default_value_t = 2000)]
    timeout_ms: u64,
    /// TOML file with the same keys: listen, upstream, rewrite, proxy-addrs, ttl, fallback,
    /// keep-origin-ttl, allow-clients
    /// (flags override it; unknown keys are an error)
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
}

/// Everything `run` needs, after flags and file are merged and checked.
#[derive(Debug)]
struct Settings {
    listen: SocketAddr,
    proxy: DnsProxyConfig,
}

/// Reads the configuration file named by `--config`, if any.
fn load_file(args: &Args) -> Result<FileConfig, BadInput> {
    let Some(path) = &args.config else {
        return Ok(FileConfig::default());
    };
    let text = std::fs::read_to_string(path)
        .map_err(|e| BadInput(format!("cannot read {}: {e}", path.display())))?;
    parse_config_file(&text).map_err(|e| BadInput(format!("{}: {e}", path.display())))
}

/// Merges flags over the file and checks the result (pure, so it is unit-tested).
fn settings(args: &Args, file: FileConfig) -> Result<Settings, BadInput> {
    let listen = match args.listen.or(file.listen) {
        Some(a) => a,
        None => DEFAULT_LISTEN
            .parse()
            .map_err(|_| BadInput("bad default listen address".into()))?,
    };
    let upstream = args.upstream.or(file.upstream).ok_or_else(|| {
        BadInput("webpep dns: --upstream ADDR:PORT is required (or `upstream` in --config)".into())
    })?;
    if forwards_to_itself(listen, upstream) {
        return Err(BadInput(format!(
            "webpep dns: the upstream {upstream} is this proxy's own address {listen}"
        )));
    }
    if args.timeout_ms == 0 {
        return Err(BadInput("webpep dns: --timeout-ms must be above 0".into()));
    }
    let proxy_addrs = if args.proxy_addr.is_empty() {
        file.proxy_addrs.unwrap_or_default()
    } else {
        args.proxy_addr.clone()
    };
    let rewrite = args.rewrite.clone().or(file.rewrite);
    let names = match rewrite.as_deref().map(str::trim) {
        None => None,
        Some(r) if r.eq_ignore_ascii_case("none") => None,
        Some(r) => Some(
            r.parse::<NameMatch>()
                .map_err(|e| BadInput(format!("webpep dns: --rewrite {r:?}: {e}")))?,
        ),
    };
    let policy = match names {
        Some(names) => {
            if proxy_addrs.is_empty() {
                return Err(BadInput(
                    "webpep dns: --rewrite needs at least one --proxy-addr IP".into(),
                ));
            }
            let mut p = RewritePolicy::new(names, proxy_addrs);
            p.ttl = args.ttl.or(file.ttl).unwrap_or(DEFAULT_PROXY_TTL);
            p.keep_original = !args.no_fallback && file.fallback.unwrap_or(true);
            p.keep_origin_ttl = args.keep_origin_ttl || file.keep_origin_ttl.unwrap_or(false);
            Some(p)
        }
        None => {
            if !proxy_addrs.is_empty() {
                warn!("webpep dns: proxy addresses given without --rewrite: forwarding only");
            }
            None
        }
    };
    let mut proxy = DnsProxyConfig::new(upstream);
    if !args.allow_client.is_empty() {
        proxy.allow_clients = crate::server_cmd::parse_nets("--allow-client", &args.allow_client)
            .map_err(|e| BadInput(format!("webpep dns: {e}")))?;
    } else if let Some(nets) = file.allow_clients {
        proxy.allow_clients = nets;
    }
    proxy.policy = policy;
    proxy.timeout = Duration::from_millis(args.timeout_ms);
    Ok(Settings { listen, proxy })
}

/// Whether forwarding to `upstream` would send queries back to this proxy.
fn forwards_to_itself(listen: SocketAddr, upstream: SocketAddr) -> bool {
    if listen.port() != upstream.port() {
        return false;
    }
    listen.ip() == upstream.ip()
        || (upstream.ip().is_loopback()
            && (listen.ip().is_unspecified() || listen.ip().is_loopback()))
}

/// Runs `webpep dns` until SIGINT or SIGTERM.
pub fn run(args: Args) -> anyhow::Result<u8> {
    let file = load_file(&args)?;
    let settings = settings(&args, file)?;
    let udp = UdpSocket::bind(settings.listen)
        .with_context(|| format!("webpep dns: cannot listen on udp {}", settings.listen))?;
    let tcp = TcpListener::bind(settings.listen)
        .with_context(|| format!("webpep dns: cannot listen on tcp {}", settings.listen))?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("webpep dns: tokio runtime")?;
    let listen = udp.local_addr().unwrap_or(settings.listen);
    let policy_desc = match &settings.proxy.policy {
        Some(p) => format!(
            "rewrite {:?} to {:?} (ttl {} s, fallback {}, origin ttls kept {})",
            p.names, p.proxy_addrs, p.ttl, p.keep_original, p.keep_origin_ttl
        ),
        None => "plain forwarder".to_string(),
    };
    eprintln!(
        "webpep dns: listening on {listen} (udp, tcp) for {:?}, upstream {}, {policy_desc}",
        settings.proxy.allow_clients, settings.proxy.upstream
    );
    let proxy = Arc::new(DnsProxy::new(settings.proxy));
    let cancel = CancellationToken::new();
    rt.block_on(async {
        let stopper = cancel.clone();
        tokio::spawn(async move {
            wait_for_signal().await;
            info!("webpep dns: shutting down");
            stopper.cancel();
        });
        proxy.clone().serve(Some(udp), Some(tcp), cancel).await
    })
    .context("webpep dns: serving")?;
    let s = proxy.stats();
    info!(
        queries = s.queries,
        rewritten = s.rewritten,
        forwarded = s.forwarded,
        malformed = s.malformed,
        upstream_failures = s.upstream_failures,
        "webpep dns: stopped"
    );
    Ok(0)
}

async fn wait_for_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = term.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
            }
        }
        Err(e) => {
            warn!(error = %e, "webpep dns: no SIGTERM handler; stopping on SIGINT only");
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: Args,
    }

    fn args(flags: &[&str]) -> Args {
        let mut argv = vec!["dns"];
        argv.extend_from_slice(flags);
        Cli::try_parse_from(argv).expect("flags parse").args
    }

    #[test]
    fn flags_override_the_file() {
        let file = FileConfig {
            listen: Some("127.0.0.1:5300".parse().unwrap()),
            upstream: Some("10.0.0.53:53".parse().unwrap()),
            rewrite: Some("all".into()),
            proxy_addrs: Some(vec!["10.0.0.12".parse().unwrap()]),
            ttl: Some(600),
            fallback: Some(true),
            keep_origin_ttl: None,
            allow_clients: Some(vec!["10.0.0.0/8".parse().unwrap()]),
        };
        let s = settings(
            &args(&["--rewrite", "www", "--no-fallback", "--ttl", "60"]),
            file.clone(),
        )
        .unwrap();
        assert_eq!(s.listen, "127.0.0.1:5300".parse().unwrap());
        let p = s.proxy.policy.unwrap();
        assert_eq!(p.names, NameMatch::WwwPrefix);
        assert_eq!((p.ttl, p.keep_original), (60, false));
        assert!(!p.keep_origin_ttl);
        let s = settings(&args(&["--keep-origin-ttl"]), file.clone()).unwrap();
        assert_eq!(s.proxy.allow_clients, vec!["10.0.0.0/8".parse().unwrap()]);
        assert!(s.proxy.policy.unwrap().keep_origin_ttl);
        let s = settings(&args(&["--allow-client", "192.0.2.7"]), file.clone()).unwrap();
        assert_eq!(s.proxy.allow_clients, vec!["192.0.2.7/32".parse().unwrap()]);
        assert!(settings(&args(&["--allow-client", "nowhere"]), file.clone()).is_err());
        assert_eq!(p.proxy_addrs, vec!["10.0.0.12".parse::<IpAddr>().unwrap()]);

        let s = settings(&args(&["--rewrite", "none"]), file).unwrap();
        assert!(s.proxy.policy.is_none());
    }

    #[test]
    fn defaults_and_errors() {
        let s = settings(
            &args(&["--upstream", "10.0.0.53:53"]),
            FileConfig::default(),
        )
        .unwrap();
        assert_eq!(s.listen, "0.0.0.0:53".parse().unwrap());
        assert!(s.proxy.policy.is_none());
        assert!(settings(&args(&[]), FileConfig::default()).is_err());
        assert!(settings(
            &args(&["--upstream", "10.0.0.53:53", "--rewrite", "www"]),
            FileConfig::default()
        )
        .is_err());
        assert!(settings(
            &args(&[
                "--upstream",
                "10.0.0.53:53",
                "--rewrite",
                "a b",
                "--proxy-addr",
                "10.0.0.1"
            ]),
            FileConfig::default()
        )
        .is_err());
        assert!(settings(
            &args(&["--upstream", "127.0.0.1:53"]),
            FileConfig::default()
        )
        .is_err());
        assert!(settings(
            &args(&["--upstream", "10.0.0.53:53", "--timeout-ms", "0"]),
            FileConfig::default()
        )
        .is_err());
    }
}
