//! `webpep server`: the edge proxy for browsers without client software (explicit,
//! transparent and URL-rewriting modes; cache, compression, transcoding).

use std::net::SocketAddr;
use std::path::PathBuf;

use webpep_server::config::{parse_duration_text, Congestion, Secs};
use webpep_server::{CancellationToken, Server, ServerConfig};

use crate::BadInput;

/// Flags of `webpep server`; each overrides the matching key of `--config`.
#[derive(clap::Args, Debug)]
#[command(args_conflicts_with_subcommands = true)]
pub struct Args {
    /// Manage the client credentials of the QUIC transport, or the interception CA, instead
    /// of serving.
    #[command(subcommand)]
    pub action: Option<crate::edge_clients::Action>,
    /// TOML configuration file (keys: listen, admin-listen, [acl], [auth], [origin], [cache],
    /// [compress], [transcode], [url-rewrite], [prefetch], [air], [limits], [quic],
    /// [intercept]; see --print-config).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Address to accept proxy traffic on (repeatable; default 0.0.0.0:3128).
    #[arg(long, value_name = "ADDR")]
    pub listen: Vec<SocketAddr>,
    /// Address for the Prometheus /metrics endpoint.
    #[arg(long, value_name = "ADDR")]
    pub admin_listen: Option<SocketAddr>,
    /// Directory of the disk cache.
    #[arg(long, value_name = "DIR")]
    pub cache_dir: Option<PathBuf>,
    /// Turn the shared cache off.
    #[arg(long)]
    pub no_cache: bool,
    /// Turn compression towards browsers off.
    #[arg(long)]
    pub no_compress: bool,
    /// Do not fetch pages' objects before browsers ask (as `[prefetch] enabled = false`).
    #[arg(long)]
    pub no_prefetch: bool,
    /// Do not copy small stylesheets, scripts and images into pages (as `[inline] enabled =
    /// false`).
    #[arg(long)]
    pub no_inline: bool,
    /// Do not put tiny images into pages as data: URIs (as `[inline] images = false`).
    #[arg(long)]
    pub no_inline_images: bool,
    /// Image transcoding preset: lossless, balanced, aggressive, or off.
    #[arg(long, value_name = "PRESET|off")]
    pub transcode: Option<String>,
    /// Turn URL-rewriting mode on; AUTHORITY is the host[:port] browsers reach the proxy at.
    #[arg(long, value_name = "AUTHORITY")]
    pub url_rewrite: Option<String>,
    /// Client network allowed to use the proxy (CIDR; repeatable; replaces the list).
    #[arg(long, value_name = "CIDR")]
    pub allow_client: Vec<String>,
    /// Private/loopback destination network to allow (CIDR; repeatable; added to the list).
    #[arg(long, value_name = "CIDR")]
    pub allow_destination: Vec<String>,
    /// Refuse connections that open with a TLS ClientHello instead of relaying them by SNI
    /// (as `[acl] tls-relay = false`).
    #[arg(long)]
    pub no_tls_relay: bool,
    /// DNS server for origin names (IP or IP:port; default: first nameserver of /etc/resolv.conf).
    #[arg(long, value_name = "ADDR")]
    pub dns_upstream: Option<String>,
    /// What https:// origins' certificates are verified against: system, bundled, or a PEM
    /// file (repeatable) (as `[origin] tls-roots`).
    #[arg(long, value_name = "system|bundled|PEM")]
    pub tls_roots: Vec<String>,
    /// Congestion control for client sockets: bbr, cubic or reno.
    #[arg(long, value_name = "ALG")]
    pub congestion: Option<String>,
    /// Initial retransmission timeout of accepted (air-side) connections, e.g. 7s (as
    /// `[air] initial-rto`; needs root and cgroup v2).
    #[arg(long, value_name = "DURATION")]
    pub initial_rto: Option<String>,
    /// Users who may use the proxy explicitly (`name:HASH` lines; turns Basic proxy
    /// authentication on, as `[auth] users-file`).
    #[arg(long, value_name = "FILE")]
    pub users_file: Option<PathBuf>,
    /// Read a password from the first line of stdin, print its hash (as `NAME:HASH` for a
    /// users file when NAME is given) and exit.
    #[arg(long, value_name = "NAME", num_args = 0..=1, default_missing_value = "")]
    pub hash_password: Option<String>,
    /// UDP address for enrolled client proxies (`webpep client`) over QUIC (as `[quic]
    /// listen`).
    #[arg(long, value_name = "ADDR")]
    pub quic_listen: Option<SocketAddr>,
    /// The edge's transport state directory (as `[quic] state-dir`).
    #[arg(long, value_name = "DIR")]
    pub quic_state_dir: Option<PathBuf>,
    #[command(flatten)]
    pub intercept: crate::intercept_args::InterceptArgs,
    /// Print the effective configuration as TOML and exit.
    #[arg(long)]
    pub print_config: bool,
    /// Check a configuration file (its keys, values and the files it names: users file, trust
    /// roots, interception CA) and exit: 0 and `FILE:
    /// ok` when it would start, 2 with the file, line and key otherwise.
    #[arg(long, value_name = "FILE")]
    pub check_config: Option<PathBuf>,
}

fn bad(msg: String) -> anyhow::Error {
    BadInput(msg).into()
}

/// Builds the effective configuration from the file and the flags.
fn effective_config(args: &Args) -> anyhow::Result<ServerConfig> {
    let mut cfg = match &args.config {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .map_err(|e| bad(format!("cannot read {}: {e}", path.display())))?;
            ServerConfig::from_toml(&text, &path.display().to_string())
                .map_err(|e| bad(e.to_string()))?
        }
        None => ServerConfig::default(),
    };
    if !args.listen.is_empty() {
        cfg.listen = args.listen.clone();
    }
    if args.admin_listen.is_some() {
        cfg.admin_listen = args.admin_listen;
    }
    if let Some(d) = &args.cache_dir {
        cfg.cache.dir = Some(d.clone());
    }
    if args.no_cache {
        cfg.cache.enabled = false;
    }
    if args.no_compress {
        cfg.compress.enabled = false;
    }
    if args.no_prefetch {
        cfg.prefetch.enabled = false;
    }
    if args.no_inline {
        cfg.inline.enabled = false;
    }
    if args.no_inline_images {
        cfg.inline.images = false;
    }
    if let Some(p) = &args.transcode {
        if p.eq_ignore_ascii_case("off") {
            cfg.transcode.enabled = false;
        } else {
            if !["lossless", "balanced", "aggressive"].contains(&p.as_str()) {
                return Err(bad(format!(
                    "--transcode: unknown preset {p:?} (lossless, balanced, aggressive, off)"
                )));
            }
            cfg.transcode.enabled = true;
            cfg.transcode.options.insert(
                "preset".into(),
                webpep_server::toml::Value::String(p.clone()),
            );
        }
    }
    if let Some(a) = &args.url_rewrite {
        cfg.url_rewrite.enabled = true;
        cfg.url_rewrite.proxy_authority = Some(a.clone());
    }
    if !args.allow_client.is_empty() {
        cfg.acl.allow_clients = parse_nets("--allow-client", &args.allow_client).map_err(bad)?;
    }
    for c in &args.allow_destination {
        let n = parse_net(c).map_err(|e| bad(format!("--allow-destination {c:?}: {e}")))?;
        cfg.acl.allow_destinations.push(n);
    }
    if args.no_tls_relay {
        cfg.acl.tls_relay = false;
    }
    if let Some(d) = &args.dns_upstream {
        let addr = d
            .parse::<SocketAddr>()
            .or_else(|_| {
                d.parse::<std::net::IpAddr>()
                    .map(|ip| SocketAddr::new(ip, 53))
            })
            .map_err(|_| bad(format!("--dns-upstream: not an address: {d:?}")))?;
        cfg.origin.dns_upstream = Some(addr);
    }
    if !args.tls_roots.is_empty() {
        cfg.origin.tls_roots =
            webpep_server::config::TlsRoots::from_flags(&args.tls_roots).map_err(bad)?;
    }
    if let Some(c) = &args.congestion {
        cfg.air.congestion = Some(match c.as_str() {
            "bbr" => Congestion::Bbr,
            "cubic" => Congestion::Cubic,
            "reno" => Congestion::Reno,
            _ => {
                return Err(bad(format!(
                    "--congestion: unknown algorithm {c:?} (bbr, cubic, reno)"
                )))
            }
        });
    }
    if let Some(t) = &args.initial_rto {
        let s = parse_duration_text(t)
            .ok()
            .filter(|s| s.is_finite() && *s >= 0.0)
            .ok_or_else(|| bad(format!("--initial-rto: not a duration: {t:?} (e.g. 7s)")))?;
        cfg.air.initial_rto = Some(Secs(std::time::Duration::from_secs_f64(s)));
    }
    if let Some(f) = &args.users_file {
        cfg.auth.users_file = Some(f.clone());
    }
    if let Some(a) = args.quic_listen {
        cfg.quic.listen = Some(a);
    }
    if let Some(d) = &args.quic_state_dir {
        cfg.quic.state_dir = Some(d.clone());
    }
    args.intercept.apply(&mut cfg.intercept);
    cfg.validate("flags").map_err(|e| bad(e.to_string()))?;
    Ok(cfg)
}

/// A CIDR, or a bare address as a single-host network.
fn parse_net(s: &str) -> Result<webpep_server::ipnet::IpNet, String> {
    s.parse::<webpep_server::ipnet::IpNet>()
        .or_else(|_| {
            s.parse::<std::net::IpAddr>()
                .map(webpep_server::ipnet::IpNet::from)
        })
        .map_err(|_| "not a CIDR network".to_string())
}

/// Every value of a repeated CIDR flag, or a message naming the flag and the bad value.
pub(crate) fn parse_nets(
    flag: &str,
    values: &[String],
) -> Result<Vec<webpep_server::ipnet::IpNet>, String> {
    values
        .iter()
        .map(|c| parse_net(c).map_err(|e| format!("{flag} {c:?}: {e}")))
        .collect()
}

/// Runs `webpep server`.
pub fn run(mut args: Args) -> anyhow::Result<u8> {
    if let Some(action) = args.action.take() {
        return crate::edge_clients::run(action);
    }
    if let Some(name) = &args.hash_password {
        let name = (!name.is_empty()).then_some(name.as_str());
        let line = webpep_server::auth::hash_password_cli(name, &mut std::io::stdin().lock())
            .map_err(|e| bad(format!("--hash-password: {e}")))?;
        println!("{line}");
        return Ok(0);
    }
    if let Some(path) = &args.check_config {
        let text = std::fs::read_to_string(path)
            .map_err(|e| bad(format!("cannot read {}: {e}", path.display())))?;
        let cfg = ServerConfig::from_toml(&text, &path.display().to_string())
            .map_err(|e| bad(e.to_string()))?;
        // The stages check their own keys (`[stages.NAME]`, the built-ins' options).
        webpep_server::stage::Stages::build(
            &cfg,
            &webpep_server::stages::default_stages(),
            &path.display().to_string(),
        )
        .map_err(|e| bad(e.to_string()))?;
        if let Some(users) = &cfg.auth.users_file {
            webpep_server::auth::load_users(users)
                .map_err(|e| bad(format!("{}: auth.users-file: {e}", path.display())))?;
        }
        // The files the keys name, read as a start would read them.
        webpep_server::origin::tls_config(&cfg.origin)
            .map_err(|e| bad(format!("{}: origin.tls-roots: {e}", path.display())))?;
        webpep_server::intercept::Interception::from_config(&cfg.intercept)
            .map_err(|e| bad(format!("{}: {e}", path.display())))?;
        println!("{}: ok", path.display());
        return Ok(0);
    }
    let cfg = effective_config(&args)?;
    if args.print_config {
        print!("{}", cfg.to_toml());
        return Ok(0);
    }
    let mut listeners = Vec::new();
    for addr in &cfg.listen {
        let l = std::net::TcpListener::bind(addr)
            .map_err(|e| anyhow::anyhow!("cannot listen on {addr}: {e}"))?;
        listeners.push(l);
    }
    let admin = match cfg.admin_listen {
        Some(a) => Some(
            std::net::TcpListener::bind(a)
                .map_err(|e| anyhow::anyhow!("cannot listen on {a}: {e}"))?,
        ),
        None => None,
    };
    let proxy_addrs: Vec<String> = listeners
        .iter()
        .filter_map(|l| l.local_addr().ok())
        .map(|a| a.to_string())
        .collect();
    let metrics_at = admin
        .as_ref()
        .and_then(|a| a.local_addr().ok())
        .map_or("off (admin-listen unset)".to_string(), |a| {
            format!("http://{a}/metrics")
        });
    // The QUIC front end: its identity and socket before anything is served, so a bad state
    // directory or a taken port stops the start with the reason.
    let quic = match cfg.quic.listen {
        Some(addr) => {
            let dir = crate::edge_clients::StateDir {
                state_dir: cfg.quic.state_dir.clone(),
            }
            .resolve();
            let identity = std::sync::Arc::new(
                webpep_transport::EdgeIdentity::load_or_create(&dir)
                    .map_err(|e| bad(format!("[quic] state-dir: {e}")))?,
            );
            let edge = webpep_transport::EdgeTransport::new(
                identity,
                &webpep_transport::TransportSettings::default(),
            )
            .map_err(|e| bad(format!("[quic]: {e}")))?;
            Some((addr, std::sync::Arc::new(edge), dir))
        }
        None => None,
    };
    let server = Server::new(cfg).map_err(|e| bad(e.to_string()))?;
    tracing::info!(
        "webpep server: proxy on {}; metrics {metrics_at}; PAC file at /proxy.pac; access log below (WEBPEP_LOG=warn to silence)",
        proxy_addrs.join(", ")
    );
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let cancel = CancellationToken::new();
        let c = cancel.clone();
        tokio::spawn(async move {
            wait_for_signal().await;
            tracing::info!("shutting down");
            c.cancel();
        });
        if let Some((addr, edge, dir)) = quic {
            let endpoint = quinn::Endpoint::server(edge.server_config(), addr).map_err(|e| {
                std::io::Error::new(e.kind(), format!("cannot listen on {addr} (UDP): {e}"))
            })?;
            tracing::info!(
                "client proxies over QUIC on {} (enrolled clients of {})",
                endpoint
                    .local_addr()
                    .map_or(addr.to_string(), |a| a.to_string()),
                dir.display()
            );
            tokio::spawn(webpep_server::quic::serve_quic(
                server.clone(),
                endpoint,
                edge,
                cancel.clone(),
            ));
        }
        server.serve(listeners, admin, cancel).await
    })?;
    Ok(0)
}

pub(crate) async fn wait_for_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
        }
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}
