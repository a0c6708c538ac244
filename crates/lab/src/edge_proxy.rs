//! webpep's edge proxy in the lab (issue 4): `webpep server` (and, for DNS rewriting,
//! `webpep dns`) started in `edge` for one load with a configuration's switches, cold (or a
//! peer proxy in its place, [`crate::peers`]); the
//! air-side TCP settings of the edge; the nft redirect of the intercepting mode. The loader
//! is pointed at the proxy the way each mode's browser would be.

use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;

use webpep_link::NetNs;
use webpep_loader::LoaderConfig;
use webpep_replay::CancellationToken;
use webpep_server::config::Secs;
use webpep_server::ipnet::{IpNet, Ipv4Net};
use webpep_server::{toml, ServerConfig};

use crate::configs::{Browser, LabConfig, Peer, ProxyMode};
use crate::nsrt::NsService;
use crate::peers::PeerProxy;
use crate::topology::{ip_batch, scaled_initial_rto, sysctl, TcpEra, Topology, DOMAIN_PREFIX};
use crate::{LabError, Result};

/// The explicit proxy's port.
pub const PROXY_PORT: u16 = 3128;
/// Where the nft redirect of the intercepting mode sends port-80 traffic.
pub const INTERCEPT_PORT: u16 = 3129;
/// The rewriting DNS proxy's port (the lab's plain resolver has 53 on the same address).
pub const DNS_PROXY_PORT: u16 = 5353;
/// The edge's QUIC port for the dual proxy (UDP).
pub const QUIC_PORT: u16 = 4433;
/// `webpep client`'s port on ue's loopback.
pub const CLIENT_PROXY_PORT: u16 = 8118;
/// `webpep client`'s HTTPS port in ue (`client_https`).
pub const CLIENT_HTTPS_PORT: u16 = 8119;
/// Name of the nft table the intercepting mode adds in `edge`.
const NFT_TABLE: &str = "webpep_intercept";

/// A running edge proxy for one load. Dropping it stops the services, removes the nft table
/// and the cache directory.
pub struct EdgeProxy {
    services: Vec<NsService>,
    cancel: CancellationToken,
    edge: NetNs,
    nft: bool,
    cache_dir: PathBuf,
    mode: ProxyMode,
    edge_addr: Ipv4Addr,
    /// A peer proxy (Squid, Ziproxy) running in place of webpep's; held to be stopped on drop.
    peer: Option<PeerProxy>,
    /// The edge's initial RTO for this load (see [`set_air_tcp`]).
    _initial_rto: Option<webpep_server::initial_rto::InitialRto>,
    /// webpep's proxy (not a peer's), for its counters.
    server: Option<Arc<webpep_server::Server>>,
    /// The browser reaches webpep client on its HTTPS port (`client_https`).
    client_https: bool,
    /// webpep client's counts of the browser side (`proxy = "dual"`).
    client_counters: Option<Arc<webpep_client::BrowserCounters>>,
}

fn other(what: &str) -> impl Fn(std::io::Error) -> String + '_ {
    move |e| format!("{what}: {e}")
}

/// The `webpep server` configuration for a lab configuration's switches: the proxy in `edge`
/// serves only `ue`, reaches the lab's origins (in [`DOMAIN_PREFIX`]) through the lab's
/// resolver on `edge`, keeps its cache in `cache_dir`, and scales its air-side timers by
/// `time_scale`. Everything else is `webpep server`'s default.
pub fn server_config(
    cfg: &LabConfig,
    ue: Ipv4Addr,
    edge: Ipv4Addr,
    cache_dir: &Path,
    time_scale: f64,
) -> ServerConfig {
    let sw = cfg.switches();
    // TCP keep-alive counts whole seconds: the probe interval (4 s, under the 6 s radio
    // release of 003 Table 3) cannot follow the time scale below 1 s of wall time.
    let scaled_s = |s: f64| Secs::from_secs(((s / time_scale).ceil() as u64).max(1));
    let (p0, p1) = DOMAIN_PREFIX;
    let mut c = ServerConfig::default();
    c.acl.allow_clients = vec![IpNet::from(IpAddr::from(ue))];
    c.acl.allow_destinations = vec![IpNet::V4(
        Ipv4Net::new(Ipv4Addr::new(p0, p1, 0, 0), 16).expect("a /16 is a prefix length"),
    )];
    c.origin.dns_upstream = Some(SocketAddr::from((edge, 53)));
    c.cache.enabled = sw.cache;
    c.cache.dir = Some(cache_dir.to_path_buf());
    c.cache.max_bytes = 256 << 20;
    c.compress.enabled = sw.compress;
    c.transcode.enabled = sw.transcode != "off";
    if c.transcode.enabled {
        c.transcode
            .options
            .insert("preset".into(), toml::Value::String(sw.transcode.clone()));
    }
    c.url_rewrite.enabled = cfg.proxy == ProxyMode::TransparentUrl;
    c.url_rewrite.proxy_authority = Some(edge.to_string());
    c.prefetch.enabled = sw.prefetch;
    c.inline.enabled = sw.inline;
    c.inline.images = sw.inline_images;
    // The edge measures the scaled link: its decisions must weigh the link it stands for.
    c.air.adapt = sw.adapt;
    c.air.link_time_scale = time_scale;
    c.air.budget = sw.air_budget;
    if let Some(floor) = sw.air_budget_floor {
        c.air.budget_floor = floor;
    }
    if let Some(gain) = sw.air_budget_gain {
        c.air.budget_gain = gain;
    }
    // The lab has one client, ue; its loader's connections stay far below this.
    c.limits.max_client_connections = 1024;
    if sw.air_tuning {
        c.air.congestion = Some(sw.air_congestion);
        c.air.notsent_lowat = Some(16384);
        // Tuned, the proxy sets its accepted side's initial RTO itself (÷ k like every delay).
        c.air.initial_rto = Some(Secs(AIR_TUNED_INITIAL_RTO.div_f64(time_scale)));
    }
    c.air.keepalive_probes = sw.keepalive_probes;
    c.air.probe_interval = scaled_s(4.0);
    c.air.probe_stop = scaled_s(20.0);
    c.quic.zstd = cfg.quic_zstd;
    c
}

/// Air-side TCP of the edge for one load: tuned (003 §6.1: initial window 10 towards ue,
/// initial RTO 7 s; the proxy picks the client sockets' congestion control itself) or,
/// untuned, the same stack as the lab's end hosts. Returns the initial-RTO guard to hold
/// while the load runs (none when the proxy sets its initial RTO itself). A namespace other
/// than the first may only default to the kernel's non-restricted algorithms (here reno and
/// bbr); a socket of a root process may pick any.
fn set_air_tcp(
    topo: &Topology,
    tuned: bool,
    era: TcpEra,
    time_scale: f64,
    rto_set_by_proxy: bool,
) -> Result<Option<webpep_server::initial_rto::InitialRto>> {
    let (cc, iw) = match (tuned, era) {
        (true, _) => ("bbr", Some(10)),
        (false, TcpEra::Y2003) => ("reno", Some(2)),
        (false, TcpEra::Modern) => ("bbr", None),
    };
    sysctl(&topo.edge, "net.ipv4.tcp_congestion_control", cc)?;
    let early = if era == TcpEra::Y2003 && !tuned {
        "0"
    } else {
        "3"
    };
    sysctl(&topo.edge, "net.ipv4.tcp_early_retrans", early)?;
    let net = network_of(topo.edge_addr(), topo.air.prefix_len());
    let route = format!(
        "route replace {net}/{} dev {} proto kernel scope link src {}",
        topo.air.prefix_len(),
        topo.air.outer_ifname(),
        topo.edge_addr()
    );
    let line = match iw {
        Some(iw) => format!("{route} initcwnd {iw}"),
        None => route,
    };
    ip_batch(&topo.edge, &[line])?;
    if rto_set_by_proxy {
        return Ok(None);
    }
    // 003 §6.1's tuned stack starts its retransmission timer at 7 s, above GPRS's first-packet
    // RTTs, so no SYN-ACK is sent twice.
    let rto = if tuned {
        AIR_TUNED_INITIAL_RTO
    } else {
        era.initial_rto()
    };
    Ok(scaled_initial_rto(&[(&topo.edge, rto)], time_scale))
}

/// The tuned air side's initial RTO (003 §6.1: "Retransmission initial = 7000 ms").
pub const AIR_TUNED_INITIAL_RTO: std::time::Duration = std::time::Duration::from_secs(7);

fn network_of(a: Ipv4Addr, prefix: u8) -> Ipv4Addr {
    let mask = if prefix == 0 {
        0
    } else {
        u32::MAX << (32 - prefix as u32)
    };
    Ipv4Addr::from(u32::from(a) & mask)
}

fn nft(ns: &NetNs, script: &str) -> Result<()> {
    use std::io::Write;
    let mut child = ns
        .command("nft")
        .args(["-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| LabError::Other(format!("nft (apt-get install nftables): {e}")))?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(script.as_bytes())
            .map_err(|e| LabError::Other(format!("nft: {e}")))?;
    }
    let out = child
        .wait_with_output()
        .map_err(|e| LabError::Other(format!("nft: {e}")))?;
    if !out.status.success() {
        return Err(LabError::Other(format!(
            "nft failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(())
}

impl EdgeProxy {
    /// Starts the proxy (and its DNS side) for `cfg` in `edge`, with a fresh cache under
    /// `work_dir`. `lab_ca`, the lab CA's directory, is what the edge trusts for https origins
    /// and what signs an intercepting proxy's leaf certificates.
    pub fn start(
        topo: &Topology,
        cfg: &LabConfig,
        tcp: TcpEra,
        work_dir: &Path,
        time_scale: f64,
        lab_ca: Option<&Path>,
    ) -> Result<EdgeProxy> {
        static SERIAL: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = SERIAL.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let cache_dir = work_dir.join(format!("edge-cache-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&cache_dir);
        std::fs::create_dir_all(&cache_dir)
            .map_err(|e| LabError::Other(format!("{}: {e}", cache_dir.display())))?;
        let edge_addr = topo.edge_addr();
        let cancel = CancellationToken::new();
        let mut proxy = EdgeProxy {
            services: Vec::new(),
            cancel: cancel.clone(),
            edge: topo.edge.clone(),
            nft: false,
            cache_dir,
            mode: cfg.proxy,
            edge_addr,
            peer: None,
            _initial_rto: None,
            server: None,
            client_https: cfg.client_https,
            client_counters: None,
        };
        if let Some(peer) = cfg.peer {
            proxy._initial_rto = set_air_tcp(topo, cfg.air_tuning, tcp, time_scale, false)?;
            let addr = SocketAddr::from((edge_addr, PROXY_PORT));
            let p = PeerProxy::start(
                peer,
                &topo.edge,
                &topo.ue,
                addr,
                topo.ue_addr(),
                edge_addr,
                work_dir,
            )?;
            proxy.peer = Some(p);
            return Ok(proxy);
        }
        let mut scfg = server_config(cfg, topo.ue_addr(), edge_addr, &proxy.cache_dir, time_scale);
        if let Some(dir) = lab_ca {
            scfg.origin.tls_roots =
                webpep_server::config::TlsRoots::Files(vec![dir.join("ca.pem")]);
        }
        if cfg.tls_intercept && cfg.proxy == ProxyMode::Explicit {
            // The browsers trust the lab's CA: the edge intercepts with it.
            let dir = lab_ca.ok_or_else(|| {
                LabError::Other("tls_intercept needs the lab CA, and none was given".into())
            })?;
            scfg.intercept.enabled = true;
            scfg.intercept.ca_dir = Some(dir.to_path_buf());
        }
        scfg.validate("lab edge proxy configuration").map_err(|e| {
            LabError::Other(format!("edge proxy configuration: {e}\n{}", scfg.to_toml()))
        })?;
        let server = webpep_server::Server::new(scfg)
            .map_err(|e| LabError::Other(format!("edge proxy: {e}")))?;
        proxy.server = Some(server.clone());
        let server_for_quic = server.clone();
        let tuned = cfg.switches().air_tuning;
        // Tuned, webpep's server sets its own initial RTO (`[air] initial-rto`).
        proxy._initial_rto = set_air_tcp(topo, tuned, tcp, time_scale, tuned)?;
        let c = cancel.clone();
        proxy
            .services
            .push(NsService::start(&topo.edge, "edge-proxy", move || {
                let mut listeners = Vec::new();
                // 443: TLS relayed by its server name (https names under DNS rewriting).
                for port in [PROXY_PORT, 80, 443, INTERCEPT_PORT] {
                    listeners.push(
                        TcpListener::bind((edge_addr, port)).map_err(other("bind edge proxy"))?,
                    );
                }
                Ok(async move {
                    if let Err(e) = server.serve(listeners, None, c).await {
                        tracing::error!("edge proxy: {e}");
                    }
                })
            })?);

        if cfg.proxy == ProxyMode::Dual {
            proxy.start_dual(topo, server_for_quic.clone(), cfg, lab_ca)?;
        } else if cfg.tls_intercept && cfg.proxy != ProxyMode::Explicit {
            return Err(LabError::BadInput(format!(
                "tls_intercept = true is built for proxy = \"dual\" and \"explicit\" only, not {:?}",
                cfg.proxy.name()
            )));
        }

        if cfg.proxy == ProxyMode::TransparentDns {
            // 002's answer: the proxy first for a day, the originals after it (one TTL).
            let policy =
                webpep_dns::RewritePolicy::new(webpep_dns::NameMatch::All, vec![edge_addr.into()]);
            let mut dcfg = webpep_dns::DnsProxyConfig::new(SocketAddr::from((edge_addr, 53)));
            dcfg.policy = Some(policy);
            // Only the browser in ue, as the HTTP proxy admits only it.
            dcfg.allow_clients = vec![std::net::IpAddr::from(topo.ue_addr()).into()];
            let dns = Arc::new(webpep_dns::DnsProxy::new(dcfg));
            let c = cancel.clone();
            proxy
                .services
                .push(NsService::start(&topo.edge, "edge-dns", move || {
                    let addr = SocketAddr::from((edge_addr, DNS_PROXY_PORT));
                    let udp = UdpSocket::bind(addr).map_err(other("bind dns proxy udp"))?;
                    let tcp = TcpListener::bind(addr).map_err(other("bind dns proxy tcp"))?;
                    Ok(async move {
                        if let Err(e) = dns.serve(Some(udp), Some(tcp), c).await {
                            tracing::error!("dns proxy: {e}");
                        }
                    })
                })?);
        }

        if cfg.proxy == ProxyMode::TransparentDns && cfg.browser() == Browser::Chromium {
            // Chromium takes its DNS server from resolv.conf, which names no port: the
            // browser asks edge:53, and the network hands its queries to the rewriting proxy,
            // as an operator would intercept DNS. The proxy's own upstream queries start in
            // edge and are not redirected.
            nft(
                &topo.edge,
                &format!(
                    "table ip {NFT_TABLE} {{\n chain prerouting {{\n  type nat hook prerouting priority dstnat; policy accept;\n  iifname \"{0}\" udp dport 53 redirect to :{DNS_PROXY_PORT}\n  iifname \"{0}\" tcp dport 53 redirect to :{DNS_PROXY_PORT}\n }}\n}}\n",
                    topo.air.outer_ifname()
                ),
            )?;
            proxy.nft = true;
        }

        if cfg.proxy == ProxyMode::Intercept {
            nft(
                &topo.edge,
                &format!(
                    "table ip {NFT_TABLE} {{\n chain prerouting {{\n  type nat hook prerouting priority dstnat; policy accept;\n  iifname \"{}\" tcp dport 80 redirect to :{INTERCEPT_PORT}\n }}\n}}\n",
                    topo.air.outer_ifname()
                ),
            )?;
            proxy.nft = true;
        }
        Ok(proxy)
    }

    /// Where the dual proxy's edge keeps its CA and enrolled client for this load.
    fn quic_state_dir(&self) -> PathBuf {
        self.cache_dir.with_extension("quic")
    }

    /// The dual proxy's two ends: the edge's QUIC front end (an identity and one enrolled
    /// client, kept beside the load's cache directory) beside its HTTP/1 listener, and
    /// `webpep client` on ue's loopback.
    fn start_dual(
        &mut self,
        topo: &Topology,
        server: Arc<webpep_server::Server>,
        cfg: &LabConfig,
        lab_ca: Option<&Path>,
    ) -> Result<()> {
        // Interception's leaves and the HTTPS port's certificate are the lab CA's, which the
        // browsers trust.
        let ca = match (cfg.tls_intercept || cfg.client_https, lab_ca) {
            (false, _) => None,
            (true, None) => {
                return Err(LabError::Other(
                    "tls_intercept and client_https need the lab CA, and none was given".into(),
                ))
            }
            (true, Some(dir)) => Some(Arc::new(
                webpep_intercept::CaStore::load(dir)
                    .map_err(|e| LabError::Other(format!("the lab CA for webpep client: {e}")))?,
            )),
        };
        let client_tls = match &ca {
            Some(ca) if cfg.client_https => {
                let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, CLIENT_HTTPS_PORT));
                Some(
                    webpep_client::proxy_tls_config(ca, addr)
                        .map_err(|e| LabError::Other(format!("the client's HTTPS port: {e}")))?,
                )
            }
            _ => None,
        };
        let intercept = match (&ca, lab_ca) {
            (Some(ca), Some(dir)) if cfg.tls_intercept => {
                let icfg = webpep_client::InterceptConfig {
                    enabled: true,
                    ..webpep_client::InterceptConfig::default()
                };
                let i = webpep_client::Interception::new(ca.clone(), &icfg, dir.to_path_buf())
                    .map_err(LabError::Other)?;
                Some(Arc::new(i))
            }
            _ => None,
        };
        let state = self.quic_state_dir();
        let _ = std::fs::remove_dir_all(&state);
        let identity = Arc::new(
            webpep_transport::EdgeIdentity::load_or_create(&state)
                .map_err(|e| LabError::Other(format!("edge QUIC identity: {e}")))?,
        );
        let credential = identity
            .enroll("lab")
            .map_err(|e| LabError::Other(format!("enrolling the lab's client: {e}")))?;
        let settings = webpep_transport::TransportSettings {
            congestion: cfg.quic_congestion.factory(),
            header_table: cfg.header_table,
            ..webpep_transport::TransportSettings::default()
        };
        let edge = Arc::new(
            webpep_transport::EdgeTransport::new(identity, &settings)
                .map_err(|e| LabError::Other(format!("edge QUIC: {e}")))?,
        );
        let edge_addr = self.edge_addr;
        let c = self.cancel.clone();
        self.services
            .push(NsService::start(&topo.edge, "edge-quic", move || {
                let endpoint = quinn::Endpoint::server(
                    edge.server_config(),
                    SocketAddr::from((edge_addr, QUIC_PORT)),
                )
                .map_err(other("bind edge QUIC"))?;
                Ok(async move {
                    webpep_server::quic::serve_quic(server, endpoint, edge, c).await;
                })
            })?);
        let c = self.cancel.clone();
        let resumed = cfg.quic_resumed;
        let fast_connect = cfg.fast_connect;
        let counters = Arc::new(webpep_client::BrowserCounters::default());
        self.client_counters = Some(counters.clone());
        let (warmed_tx, warmed) = std::sync::mpsc::channel::<std::result::Result<(), String>>();
        self.services
            .push(NsService::start(&topo.ue, "webpep-client", move || {
                let upstream = Arc::new(
                    webpep_client::QuicUpstream::new(
                        SocketAddr::from((edge_addr, QUIC_PORT)),
                        &credential,
                        &settings,
                    )
                    .map_err(|e| format!("webpep client: {e}"))?
                    .fast_connect(fast_connect),
                );
                let listener =
                    std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, CLIENT_PROXY_PORT))
                        .and_then(|l| {
                            l.set_nonblocking(true)?;
                            Ok(l)
                        })
                        .map_err(other("bind webpep client"))?;
                let listener = tokio::net::TcpListener::from_std(listener)
                    .map_err(other("webpep client listener"))?;
                let tls_listener = match client_tls {
                    None => None,
                    Some(tls) => {
                        let l =
                            std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, CLIENT_HTTPS_PORT))
                                .and_then(|l| {
                                    l.set_nonblocking(true)?;
                                    tokio::net::TcpListener::from_std(l)
                                })
                                .map_err(other("bind webpep client's HTTPS port"))?;
                        Some((l, tls))
                    }
                };
                let cfg = Arc::new(webpep_client::ClientConfig {
                    listen: SocketAddr::from((Ipv4Addr::LOCALHOST, CLIENT_PROXY_PORT)),
                    tls_listen: tls_listener
                        .as_ref()
                        .map(|_| SocketAddr::from((Ipv4Addr::LOCALHOST, CLIENT_HTTPS_PORT))),
                    ..webpep_client::ClientConfig::default()
                });
                let proxy = webpep_client::ClientProxy::new(cfg, upstream.clone(), intercept)
                    .counting_into(counters);
                Ok(async move {
                    if resumed {
                        // Before the load's idle gap: a connection that gets the edge's
                        // session ticket, then closes.
                        let r = upstream
                            .connect_and_close()
                            .await
                            .map_err(|e| e.to_string());
                        let _ = warmed_tx.send(r);
                    }
                    if let Some((l, tls)) = tls_listener {
                        tokio::spawn(proxy.clone().serve_tls(l, tls, c.clone()));
                    }
                    proxy.serve(listener, c).await;
                })
            })?);
        if resumed {
            match warmed.recv_timeout(std::time::Duration::from_secs(120)) {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    return Err(LabError::Other(format!(
                        "webpep client's earlier session: {e}"
                    )))
                }
                Err(_) => {
                    return Err(LabError::Other(
                        "webpep client's earlier session: no connection within 120 s".into(),
                    ))
                }
            }
        }
        Ok(())
    }

    /// webpep client's counts of the browser side, with the dual proxy.
    pub fn client_counters(&self) -> Option<&Arc<webpep_client::BrowserCounters>> {
        self.client_counters.as_ref()
    }

    /// How real Chromium names the proxy at `addr` (`--proxy-server`): over TLS to the
    /// client's HTTPS port with `client_https`.
    pub fn chromium_proxy(&self, addr: SocketAddr) -> String {
        if self.client_https {
            format!("https://{addr}")
        } else {
            format!("http://{addr}")
        }
    }

    /// The DNS server real Chromium is given in this mode (port 53: resolv.conf names no
    /// port; under DNS rewriting, edge redirects port 53 from the air to the rewriting proxy).
    /// webpep's proxy for this load (`None` with a peer proxy).
    pub fn server(&self) -> Option<Arc<webpep_server::Server>> {
        self.server.clone()
    }

    pub fn chromium_resolver(&self, lc: &LoaderConfig) -> SocketAddr {
        match self.mode {
            ProxyMode::TransparentDns => SocketAddr::from((self.edge_addr, 53)),
            _ => lc.resolver,
        }
    }

    /// Points the loader at the proxy as this mode's browser would be; returns the URL to
    /// open.
    pub fn adjust_loader(&self, lc: &mut LoaderConfig, page_url: &str) -> Result<String> {
        match self.mode {
            ProxyMode::None | ProxyMode::Intercept => {}
            ProxyMode::Explicit
                if self.peer.as_ref().map(PeerProxy::kind) == Some(Peer::SquidHierarchy) =>
            {
                lc.proxy = Some(SocketAddr::from((
                    Ipv4Addr::LOCALHOST,
                    crate::peers::SQUID_CHILD_PORT,
                )))
            }
            ProxyMode::Explicit => lc.proxy = Some(SocketAddr::from((self.edge_addr, PROXY_PORT))),
            ProxyMode::Dual => {
                let port = if self.client_https {
                    CLIENT_HTTPS_PORT
                } else {
                    CLIENT_PROXY_PORT
                };
                lc.proxy = Some(SocketAddr::from((Ipv4Addr::LOCALHOST, port)))
            }
            ProxyMode::TransparentDns => {
                lc.resolver = SocketAddr::from((self.edge_addr, DNS_PROXY_PORT))
            }
            ProxyMode::TransparentUrl => {
                let u = url::Url::parse(page_url)
                    .map_err(|e| LabError::Other(format!("page URL {page_url}: {e}")))?;
                return webpep_optimize::rewrite::to_proxy_url(&u, &self.edge_addr.to_string())
                    .ok_or_else(|| {
                        LabError::Other(format!("page URL {page_url} cannot be URL-rewritten"))
                    });
            }
        }
        Ok(page_url.to_string())
    }
}

impl Drop for EdgeProxy {
    fn drop(&mut self) {
        self.cancel.cancel();
        self.services.clear();
        if self.nft {
            let _ = nft(&self.edge, &format!("delete table ip {NFT_TABLE}\n"));
        }
        let _ = std::fs::remove_dir_all(&self.cache_dir);
        let _ = std::fs::remove_dir_all(self.quic_state_dir());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// The lab's built-in configurations that run webpep's proxy (not direct, not a peer).
    fn webpep_configs() -> Vec<(String, LabConfig)> {
        crate::configs::load(None)
            .unwrap()
            .into_iter()
            .filter(|(_, c)| c.proxy != ProxyMode::None && c.peer.is_none())
            .collect()
    }

    const UE: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 2);
    const EDGE: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 1);

    fn build(name: &str, time_scale: f64) -> ServerConfig {
        let all = crate::configs::load(None).unwrap();
        server_config(
            &all[name],
            UE,
            EDGE,
            Path::new("/tmp/edge-cache"),
            time_scale,
        )
    }

    #[test]
    fn every_webpep_configuration_builds_a_valid_config_that_round_trips() {
        let configs = webpep_configs();
        let names: Vec<&str> = configs.iter().map(|(n, _)| n.as_str()).collect();
        for n in [
            "explicit",
            "transparent-dns",
            "transparent-url",
            "intercept",
            "explicit-no-compress",
            "explicit-no-transcode",
            "explicit-no-cache",
            "explicit-no-tuning",
            "explicit-no-probes",
            "explicit-no-prefetch",
            "explicit-no-inline",
            "explicit-no-inline-images",
            "explicit-plain",
            "explicit-lossless",
            "explicit-webp",
            "explicit-aggressive",
            "chromium-explicit",
        ] {
            assert!(names.contains(&n), "{n} is not among {names:?}");
        }
        for peer in ["squid", "ziproxy"] {
            assert!(!names.contains(&peer), "{peer} runs a peer, not webpep");
        }
        // 1 and 10 (the lab tests') give whole milliseconds, which `Secs` prints exactly.
        for k in [1.0, 10.0] {
            for (name, lab) in &configs {
                let c = server_config(lab, UE, EDGE, Path::new("/tmp/edge-cache"), k);
                c.validate(name)
                    .unwrap_or_else(|e| panic!("{name} at k = {k}: {e}"));
                let text = c.to_toml();
                let back = ServerConfig::from_toml(&text, name)
                    .unwrap_or_else(|e| panic!("{name} at k = {k}: {e}\n{text}"));
                assert_eq!(
                    back, c,
                    "{name} at k = {k}: to_toml does not round-trip\n{text}"
                );
                // What every lab configuration shares.
                assert_eq!(c.acl.allow_clients, vec!["10.77.0.2/32".parse().unwrap()]);
                assert_eq!(
                    c.acl.allow_destinations,
                    vec!["10.90.0.0/16".parse().unwrap()]
                );
                assert_eq!(c.origin.dns_upstream, Some("10.77.0.1:53".parse().unwrap()));
                assert_eq!(c.cache.dir.as_deref(), Some(Path::new("/tmp/edge-cache")));
                assert_eq!(c.url_rewrite.proxy_authority.as_deref(), Some("10.77.0.1"));
                assert_eq!(
                    c.url_rewrite.enabled,
                    lab.proxy == ProxyMode::TransparentUrl,
                    "{name}"
                );
                assert_eq!(c.limits.max_client_connections, 1024);
            }
        }
    }

    #[test]
    fn explicit_is_the_default_server_with_the_labs_network_and_tuning() {
        let mut want = ServerConfig::default();
        want.acl.allow_clients = vec!["10.77.0.2/32".parse().unwrap()];
        want.acl.allow_destinations = vec!["10.90.0.0/16".parse().unwrap()];
        want.origin.dns_upstream = Some("10.77.0.1:53".parse().unwrap());
        want.cache.dir = Some("/tmp/edge-cache".into());
        want.cache.max_bytes = 268_435_456;
        want.transcode.options = toml::from_str("preset = \"balanced\"").expect("a TOML table");
        want.url_rewrite.proxy_authority = Some("10.77.0.1".into());
        want.limits.max_client_connections = 1024;
        want.air.congestion = Some(webpep_server::config::Congestion::Cubic);
        want.air.notsent_lowat = Some(16384);
        want.air.initial_rto = Some(Secs(Duration::from_millis(700)));
        want.air.keepalive_probes = true;
        want.air.probe_interval = Secs::from_secs(1);
        want.air.probe_stop = Secs::from_secs(2);
        // The edge weighs the link the scaled one stands for.
        want.air.link_time_scale = 10.0;
        // The switches on by default are the server's defaults too.
        let d = ServerConfig::default();
        assert!(d.compress.enabled && d.transcode.enabled && d.cache.enabled);
        assert!(d.prefetch.enabled && d.inline.enabled && d.inline.images);
        assert_eq!(build("explicit", 10.0), want);
        // Modes other than URL rewriting configure the proxy alike; the browser's side differs.
        for n in [
            "transparent-dns",
            "intercept",
            "explicit-webp",
            "chromium-explicit",
        ] {
            assert_eq!(build(n, 10.0), want, "{n}");
        }
        let mut url = want.clone();
        url.url_rewrite.enabled = true;
        assert_eq!(build("transparent-url", 10.0), url);

        // Unscaled: 7 s initial RTO, probes every 4 s for 20 s.
        let one = build("explicit", 1.0);
        assert_eq!(one.air.initial_rto, Some(Secs::from_secs(7)));
        assert_eq!(one.air.link_time_scale, 1.0);
        assert_eq!(
            (one.air.probe_interval, one.air.probe_stop),
            (Secs::from_secs(4), Secs::from_secs(20))
        );
        // Scaled past a second of wall time, probes stay at 1 s (keep-alive counts seconds).
        let fast = build("explicit", 40.0);
        assert_eq!(fast.air.initial_rto, Some(Secs(Duration::from_millis(175))));
        assert_eq!(
            (fast.air.probe_interval, fast.air.probe_stop),
            (Secs::from_secs(1), Secs::from_secs(1))
        );
    }

    #[test]
    fn each_ablation_turns_off_its_own_key() {
        let base = build("explicit", 10.0);
        let off = |name: &str, f: &dyn Fn(&mut ServerConfig)| {
            let mut want = base.clone();
            f(&mut want);
            assert_eq!(build(name, 10.0), want, "{name}");
        };
        off("explicit-no-compress", &|c| c.compress.enabled = false);
        off("explicit-no-transcode", &|c| {
            c.transcode.enabled = false;
            c.transcode.options.clear();
        });
        off("explicit-no-cache", &|c| c.cache.enabled = false);
        off("explicit-no-tuning", &|c| {
            c.air.congestion = None;
            c.air.notsent_lowat = None;
            c.air.initial_rto = None;
        });
        off("explicit-no-probes", &|c| c.air.keepalive_probes = false);
        off("explicit-no-prefetch", &|c| c.prefetch.enabled = false);
        off("explicit-no-inline", &|c| c.inline.enabled = false);
        off("explicit-no-inline-images", &|c| c.inline.images = false);
        // Browser-side only: the proxy is `explicit`'s.
        off("explicit-no-conns", &|_| {});
        off("explicit-pipelining", &|_| {});
        for preset in ["lossless", "aggressive"] {
            off(&format!("explicit-{preset}"), &|c| {
                c.transcode.options.insert("preset".into(), preset.into());
            });
        }
        off("explicit-plain", &|c| {
            c.compress.enabled = false;
            c.transcode.enabled = false;
            c.transcode.options.clear();
            c.cache.enabled = false;
            c.air.congestion = None;
            c.air.notsent_lowat = None;
            c.air.initial_rto = None;
            c.air.keepalive_probes = false;
            c.prefetch.enabled = false;
            c.inline.enabled = false;
        });
        // 002's caching proxy: `explicit-plain` with the cache, reached by URL rewriting.
        let mut want = build("explicit-plain", 10.0);
        want.cache.enabled = true;
        want.url_rewrite.enabled = true;
        assert_eq!(build("transparent-url-002", 10.0), want);
    }

    #[test]
    fn a_bad_preset_is_refused_by_validation() {
        let mut lab = crate::configs::load(None).unwrap()["explicit"].clone();
        lab.transcode = "extreme".into();
        let c = server_config(&lab, UE, EDGE, Path::new("/tmp/c"), 1.0);
        let e = c
            .validate("lab edge proxy configuration")
            .unwrap_err()
            .to_string();
        assert!(e.contains("transcode"), "{e}");
    }

    #[test]
    fn the_budget_switches_reach_the_air_config_and_a_bad_gain_is_refused() {
        let all = crate::configs::load(None).unwrap();
        let c = build("explicit-modern-budget", 1.0);
        assert!(c.air.budget);
        assert_eq!(c.air.budget_gain, ServerConfig::default().air.budget_gain);
        let mut lab = all["explicit-modern-budget"].clone();
        lab.air_budget_gain = Some(4.0);
        lab.air_budget_floor = Some(65_536);
        let c = server_config(&lab, UE, EDGE, Path::new("/tmp/c"), 1.0);
        let b = c.air.budget_config().expect("the budget is on");
        assert_eq!((b.gain, b.floor), (4.0, 65_536));
        lab.air_budget_gain = Some(0.5);
        let c = server_config(&lab, UE, EDGE, Path::new("/tmp/c"), 1.0);
        let e = c.validate("lab").unwrap_err().to_string();
        assert!(e.contains("budget-gain"), "{e}");
    }

    #[test]
    fn network_of_masks_the_host_bits() {
        assert_eq!(
            network_of(Ipv4Addr::new(10, 77, 0, 6), 30),
            Ipv4Addr::new(10, 77, 0, 4)
        );
        assert_eq!(
            network_of(Ipv4Addr::new(10, 77, 3, 9), 16),
            Ipv4Addr::new(10, 77, 0, 0)
        );
    }
}
