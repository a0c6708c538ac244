//! Starts the lab's services in their namespaces: the replay server (one address per virtual
//! domain, HTTP on 80 and HTTPS on 443) and the authoritative DNS in `net`; the caching resolver
//! in `edge`, where `ue` sends its queries (so they cross the emulated link).

use std::net::{Ipv4Addr, SocketAddr, TcpListener, UdpSocket};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use webpep_replay::{
    AuthDns, CachingResolver, CancellationToken, LabCa, Listener, ReplayServer, ResolverConfig,
};

use crate::nsrt::NsService;
use crate::topology::{Topology, AUTH_DNS_ADDR};
use crate::{LabError, Result};

/// The running services. Dropping it cancels and joins them.
pub struct Hosting {
    // Services stop (and join) before the handles below go away.
    services: Vec<NsService>,
    cancel: CancellationToken,
    pub replay: ReplayServer,
    pub auth: AuthDns,
    pub resolver: CachingResolver,
    /// The lab CA's certificate (PEM), for clients that must trust the HTTPS origins.
    pub ca_pem: String,
    /// The directory of the lab CA (`ca.pem`, and `ca-key.pem` mode 0600): Chromium's NSS
    /// database and the edge's origin roots take `ca.pem`; a proxy that intercepts HTTPS in
    /// the lab signs its leaf certificates with this CA, so browsers trust one CA per run.
    pub ca_dir: PathBuf,
    /// Where `ue` sends DNS queries.
    pub resolver_addr: SocketAddr,
}

fn other(what: &str) -> impl Fn(std::io::Error) -> String + '_ {
    move |e| format!("{what}: {e}")
}

impl Hosting {
    /// `replay` must already hold the corpus; its domains must have addresses in `topo`.
    /// `dns_ttl` is the authoritative TTL (seconds, unscaled; it is divided by the time scale,
    /// rounding up to whole seconds, since DNS TTLs are whole seconds).
    pub fn start(
        topo: &Topology,
        replay: ReplayServer,
        dns_ttl_s: u32,
        time_scale: f64,
        ca_dir: &Path,
    ) -> Result<Hosting> {
        let cancel = CancellationToken::new();
        let ca = LabCa::load_or_generate(ca_dir)
            .map_err(|e| LabError::Other(format!("lab CA in {}: {e}", ca_dir.display())))?;
        let tls = ca
            .server_config(replay.domains())
            .map_err(|e| LabError::Other(format!("lab certificate: {e}")))?;
        let mut domains: Vec<(String, Ipv4Addr)> = Vec::new();
        for d in replay.domains() {
            let a = topo.domains.get(d).ok_or_else(|| {
                LabError::Other(format!("domain {d} has no address in the lab network"))
            })?;
            domains.push((d.clone(), *a));
        }
        let ttl = if dns_ttl_s == 0 {
            0
        } else {
            ((dns_ttl_s as f64 / time_scale).ceil() as u32).max(1)
        };
        let auth = AuthDns::new(
            domains
                .iter()
                .map(|(d, a)| (d.clone(), std::net::IpAddr::V4(*a))),
            ttl,
        );
        let mut services = Vec::new();

        let (srv, c, doms, tls2) = (replay.clone(), cancel.clone(), domains.clone(), tls.clone());
        services.push(NsService::start(&topo.net, "replay", move || {
            let mut listeners = Vec::new();
            for (d, a) in &doms {
                listeners.push(Listener {
                    socket: TcpListener::bind((*a, 80)).map_err(other("bind :80"))?,
                    domain: Some(d.clone()),
                    tls: None,
                });
                listeners.push(Listener {
                    socket: TcpListener::bind((*a, 443)).map_err(other("bind :443"))?,
                    domain: Some(d.clone()),
                    tls: Some(Arc::clone(&tls2)),
                });
            }
            Ok(async move {
                if let Err(e) = srv.serve(listeners, c).await {
                    tracing::error!("replay server: {e}");
                }
            })
        })?);

        let (a2, c) = (auth.clone(), cancel.clone());
        services.push(NsService::start(&topo.net, "auth-dns", move || {
            let addr = SocketAddr::from((AUTH_DNS_ADDR, 53));
            let udp = UdpSocket::bind(addr).map_err(other("bind dns udp"))?;
            let tcp = TcpListener::bind(addr).map_err(other("bind dns tcp"))?;
            Ok(async move {
                let (u, t) = (a2.clone(), a2);
                let (c1, c2) = (c.clone(), c);
                let _ = tokio::join!(u.serve_udp(udp, c1), t.serve_tcp(tcp, c2));
            })
        })?);

        let resolver_addr = SocketAddr::from((topo.edge_addr(), 53));
        let resolver =
            CachingResolver::new(ResolverConfig::new(SocketAddr::from((AUTH_DNS_ADDR, 53))));
        let (r2, c) = (resolver.clone(), cancel.clone());
        services.push(NsService::start(&topo.edge, "resolver", move || {
            let udp = UdpSocket::bind(resolver_addr).map_err(other("bind resolver udp"))?;
            let tcp = TcpListener::bind(resolver_addr).map_err(other("bind resolver tcp"))?;
            Ok(async move {
                let (u, t) = (r2.clone(), r2);
                let (c1, c2) = (c.clone(), c);
                let _ = tokio::join!(u.serve_udp(udp, c1), t.serve_tcp(tcp, c2));
            })
        })?);

        Ok(Hosting {
            services,
            cancel,
            replay,
            auth,
            resolver,
            ca_pem: ca.ca_pem().to_string(),
            ca_dir: ca_dir.to_path_buf(),
            resolver_addr,
        })
    }
}

impl Drop for Hosting {
    fn drop(&mut self) {
        self.cancel.cancel();
        self.services.clear();
    }
}
