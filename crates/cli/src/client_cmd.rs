//! `webpep client`: the device proxy. Browsers on this device use it as their HTTP proxy (or
//! its PAC file); it carries every request to the edge over one QUIC connection.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use webpep_client::{ClientConfig, QuicUpstream};
use webpep_server::CancellationToken;
use webpep_transport::{Credential, TransportSettings};

use crate::BadInput;

/// Flags of `webpep client`; each overrides the matching key of `--config`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// TOML configuration file (keys: listen, server, credential, link-down-after,
    /// allow-clients, max-header-bytes, max-request-body; see docs/configuration.md).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Where browsers reach the proxy (default 127.0.0.1:8118).
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<SocketAddr>,
    /// The edge's QUIC address (`webpep server --quic-listen`).
    #[arg(long, value_name = "ADDR")]
    pub server: Option<SocketAddr>,
    /// The credential `webpep server enroll` wrote for this device (mode 0600).
    #[arg(long, value_name = "FILE")]
    pub credential: Option<PathBuf>,
    /// After this long without an answer from the edge, browsers get a page saying the link
    /// is down (e.g. 30s).
    #[arg(long, value_name = "DURATION")]
    pub link_down_after: Option<String>,
}

fn bad(msg: String) -> anyhow::Error {
    BadInput(msg).into()
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
    if let Some(a) = args.server {
        cfg.server = Some(a);
    }
    if let Some(c) = &args.credential {
        cfg.credential = Some(c.clone());
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

pub fn run(args: Args) -> anyhow::Result<u8> {
    let cfg = effective_config(&args)?;
    let server = cfg
        .server
        .ok_or_else(|| bad("no edge: give --server ADDR (or `server` in --config)".into()))?;
    let cred_path = cfg.credential.clone().ok_or_else(|| {
        bad("no credential: give --credential FILE (from `webpep server enroll NAME`)".into())
    })?;
    let credential = Credential::load(&cred_path).map_err(|e| bad(e.to_string()))?;
    let listener = std::net::TcpListener::bind(cfg.listen)
        .map_err(|e| anyhow::anyhow!("cannot listen on {}: {e}", cfg.listen))?;
    listener.set_nonblocking(true)?;
    let local = listener.local_addr()?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let upstream = Arc::new(
            QuicUpstream::new(server, &credential, &TransportSettings::default())
                .map_err(|e| bad(format!("the link to {server}: {e}")))?,
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
        webpep_client::serve(listener, Arc::new(cfg), upstream, cancel).await;
        Ok::<(), anyhow::Error>(())
    })?;
    Ok(0)
}
