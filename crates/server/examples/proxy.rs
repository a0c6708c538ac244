//! A minimal embedding of the proxy: `cargo run --release -p webpep-server --example proxy --
//! CONFIG.toml` serves on the config's `listen` (and `admin-listen`) until Ctrl-C. Used for
//! load measurements without building the whole `webpep` binary.

use webpep_server::{CancellationToken, Server, ServerConfig};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = std::env::args().nth(1).ok_or("usage: proxy CONFIG.toml")?;
    let cfg = ServerConfig::from_toml(&std::fs::read_to_string(&path)?, &path)?;
    let listeners = cfg
        .listen
        .iter()
        .map(std::net::TcpListener::bind)
        .collect::<Result<Vec<_>, _>>()?;
    let admin = cfg
        .admin_listen
        .map(std::net::TcpListener::bind)
        .transpose()?;
    let server = Server::new(cfg)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let cancel = CancellationToken::new();
        let c = cancel.clone();
        tokio::spawn(async move {
            let _ = tokio::signal::ctrl_c().await;
            c.cancel();
        });
        server.serve(listeners, admin, cancel).await
    })?;
    Ok(())
}
