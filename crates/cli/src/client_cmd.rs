//! `webpep client`: the device proxy. Browsers on this device use it as their HTTP proxy (or
//! its PAC file); it carries every request to the edge over one QUIC connection.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use webpep_client::{ClientConfig, ClientProxy, Interception, QuicUpstream};
use webpep_server::CancellationToken;
use webpep_transport::{Credential, TransportSettings};

use crate::BadInput;

/// Flags of `webpep client`; each overrides the matching key of `--config`.
#[derive(clap::Args, Debug)]
#[command(args_conflicts_with_subcommands = true)]
pub struct Args {
    /// Manage the device's interception CA instead of serving.
    #[command(subcommand)]
    pub action: Option<Action>,
    /// TOML configuration file (keys: listen, tls-listen, server, credential, link-down-after,
    /// idle-timeout, fast-connect, allow-clients, max-header-bytes, max-request-body,
    /// [intercept]; see docs/configuration.md).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Where browsers reach the proxy (default 127.0.0.1:8118).
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<SocketAddr>,
    /// Also serve browsers on this HTTPS port: TLS with a certificate from the client's CA
    /// (`webpep client ca init`; browsers must trust it), HTTP/2 or HTTP/1.1. Over HTTP/2 a
    /// browser sends every request and CONNECT of a page at once, where HTTP/1.1 to a proxy
    /// limits it to a few connections (Chromium: --proxy-server=https://localhost:PORT).
    #[arg(long, value_name = "ADDR")]
    pub tls_listen: Option<SocketAddr>,
    /// The edge's QUIC address (`webpep server --quic-listen`).
    #[arg(long, value_name = "ADDR")]
    pub server: Option<SocketAddr>,
    /// The credential `webpep server enroll` wrote for this device (mode 0600).
    #[arg(long, value_name = "FILE")]
    pub credential: Option<PathBuf>,
    /// After this long without anything from the edge (answers, acknowledgements,
    /// keep-alives), a browser waiting on it gets a page saying the link is down (e.g. 30s).
    /// A busy link, slow to answer one request, is not down.
    #[arg(long, value_name = "DURATION")]
    pub link_down_after: Option<String>,
    /// Answer a browser's CONNECT only once the edge has connected to the origin (the
    /// browser then gets the edge's error page for a tunnel it refuses). By default the
    /// tunnel is given at once and the browser's TLS handshake crosses the link with the
    /// CONNECT: a round trip less per HTTPS connection.
    #[arg(long)]
    pub no_fast_connect: bool,
    #[command(flatten)]
    pub intercept: crate::intercept_args::InterceptArgs,
}

/// `webpep client ca ...`.
#[derive(clap::Subcommand, Debug)]
pub enum Action {
    /// The certificate authority that interception's leaf certificates chain to.
    #[command(subcommand)]
    Ca(CaAction),
}

#[derive(clap::Subcommand, Debug)]
pub enum CaAction {
    /// Create this device's CA (an ECDSA P-256 key, mode 0600, and a certificate) and print
    /// its fingerprint and how to install it.
    Init {
        /// The CA's directory (default $XDG_DATA_HOME/webpep/ca).
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
        /// Replace an existing CA (browsers that trusted the old one must trust the new one).
        #[arg(long)]
        force: bool,
    },
    /// Print the CA's certificate path and fingerprint (refuses a key others can read).
    Show {
        /// The CA's directory (default $XDG_DATA_HOME/webpep/ca).
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
    },
}

fn ca(action: CaAction) -> anyhow::Result<u8> {
    let (dir, init) = match action {
        CaAction::Init { dir, force } => (dir, Some(force)),
        CaAction::Show { dir } => (dir, None),
    };
    let dir = dir.unwrap_or_else(webpep_intercept::default_client_ca_dir);
    ca_command(
        &dir,
        init,
        "(Firefox, the system store, and the CA page the proxy serves: docs/interception.md)",
    )
}

/// `ca init` (`init`: `Some(force)`) or `ca show` of an interception CA in `dir`, for the
/// device's proxy and the edge alike: its paths, fingerprint and how to trust it (`more`: where
/// the rest is said).
pub(crate) fn ca_command(dir: &Path, init: Option<bool>, more: &str) -> anyhow::Result<u8> {
    let store = match init {
        Some(force) => webpep_intercept::CaStore::init(dir, force),
        None => webpep_intercept::CaStore::load(dir),
    }
    .map_err(|e| bad(e.to_string()))?;
    let pem = dir.join("ca.pem");
    println!("CA certificate: {}", pem.display());
    println!(
        "CA key:         {} (mode 0600)",
        dir.join("ca-key.pem").display()
    );
    println!("SHA-256 fingerprint: {}", store.fingerprint());
    println!(
        "Trust it in Chromium: certutil -d sql:$HOME/.pki/nssdb -A -t \"C,,\" -n webpep -i {}",
        pem.display()
    );
    println!("{more}");
    Ok(0)
}

fn bad(msg: String) -> anyhow::Error {
    BadInput(msg).into()
}

fn bind(addr: SocketAddr) -> anyhow::Result<std::net::TcpListener> {
    let listener = std::net::TcpListener::bind(addr)
        .map_err(|e| anyhow::anyhow!("cannot listen on {addr}: {e}"))?;
    listener.set_nonblocking(true)?;
    Ok(listener)
}

fn effective_config(args: &Args) -> anyhow::Result<ClientConfig> {
    let mut cfg = match &args.config {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .map_err(|e| bad(format!("cannot read {}: {e}", path.display())))?;
            ClientConfig::from_toml(&text, &path.display().to_string())
                .map_err(|e| bad(e.to_string()))?
        }
        None => ClientConfig::default(),
    };
    if let Some(a) = args.listen {
        cfg.listen = a;
    }
    if let Some(a) = args.tls_listen {
        cfg.tls_listen = Some(a);
    }
    if let Some(a) = args.server {
        cfg.server = Some(a);
    }
    if let Some(c) = &args.credential {
        cfg.credential = Some(c.clone());
    }
    args.intercept.apply(&mut cfg.intercept);
    if args.no_fast_connect {
        cfg.fast_connect = false;
    }
    if let Some(d) = &args.link_down_after {
        cfg.link_down_after = webpep_client::config::parse_duration(d).ok_or_else(|| {
            bad(format!(
                "--link-down-after: not a duration: {d:?} (e.g. 30s)"
            ))
        })?;
    }
    Ok(cfg)
}

pub fn run(mut args: Args) -> anyhow::Result<u8> {
    if let Some(Action::Ca(action)) = args.action.take() {
        return ca(action);
    }
    let cfg = effective_config(&args)?;
    let server = cfg
        .server
        .ok_or_else(|| bad("no edge: give --server ADDR (or `server` in --config)".into()))?;
    let cred_path = cfg.credential.clone().ok_or_else(|| {
        bad("no credential: give --credential FILE (from `webpep server enroll NAME`)".into())
    })?;
    let credential = Credential::load(&cred_path).map_err(|e| bad(e.to_string()))?;
    // The CA is loaded before anything listens: a key others can read stops the start.
    let intercept = if cfg.intercept.enabled {
        let i = Interception::load(&cfg.intercept).map_err(bad)?;
        tracing::info!(
            "intercepting HTTPS with the CA in {} (SHA-256 {})",
            webpep_client::config::ca_dir(&cfg.intercept).display(),
            i.fingerprint()
        );
        Some(Arc::new(i))
    } else {
        None
    };
    let listener = bind(cfg.listen)?;
    let local = listener.local_addr()?;
    // The HTTPS port's certificate comes from the client's CA, loaded (and its key's
    // permissions checked) before anything listens.
    let tls_front = match cfg.tls_listen {
        None => None,
        Some(addr) => {
            let ca = match &intercept {
                Some(i) => i.ca().clone(),
                None => Arc::new(
                    webpep_intercept::CaStore::load(&webpep_client::config::ca_dir(
                        &cfg.intercept,
                    ))
                    .map_err(|e| {
                        bad(format!(
                            "tls-listen: the HTTPS port's certificate comes from the client's CA: {e} (create it with `webpep client ca init`)"
                        ))
                    })?,
                ),
            };
            let tls = webpep_client::proxy_tls_config(&ca, addr)
                .map_err(|e| bad(format!("tls-listen: {e}")))?;
            Some((bind(addr)?, tls))
        }
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let upstream = Arc::new(
            QuicUpstream::new(server, &credential, &TransportSettings::default())
                .map_err(|e| bad(format!("the link to {server}: {e}")))?
                .fast_connect(cfg.fast_connect),
        );
        let listener = tokio::net::TcpListener::from_std(listener)?;
        tracing::info!(
            "webpep client {}: proxy on {local} (PAC file http://{local}/proxy.pac); edge {server}",
            credential.name
        );
        let cancel = CancellationToken::new();
        let c = cancel.clone();
        tokio::spawn(async move {
            crate::server_cmd::wait_for_signal().await;
            tracing::info!("shutting down");
            c.cancel();
        });
        let proxy = ClientProxy::new(Arc::new(cfg), upstream, intercept);
        if let Some((tls_listener, tls)) = tls_front {
            let tls_listener = tokio::net::TcpListener::from_std(tls_listener)?;
            tracing::info!(
                "HTTPS proxy port on {} (HTTP/2 and HTTP/1.1; its certificate is from the client's CA)",
                tls_listener.local_addr()?
            );
            tokio::spawn(proxy.clone().serve_tls(tls_listener, tls, cancel.clone()));
        }
        proxy.serve(listener, cancel).await;
        Ok::<(), anyhow::Error>(())
    })?;
    Ok(0)
}
