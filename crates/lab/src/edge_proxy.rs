//! webpep's edge proxy in the lab (issue 4): `webpep server` (and, for DNS rewriting,
//! `webpep dns`) started in `edge` for one load with a configuration's switches, cold (or a
//! peer proxy in its place, [`crate::peers`]); the
//! air-side TCP settings of the edge; the nft redirect of the intercepting mode. The loader
//! is pointed at the proxy the way each mode's browser would be.

use std::net::{Ipv4Addr, SocketAddr, TcpListener, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;

use webpep_link::NetNs;
use webpep_loader::LoaderConfig;
use webpep_replay::CancellationToken;

use crate::configs::{Browser, LabConfig, ProxyMode};
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
}

fn other(what: &str) -> impl Fn(std::io::Error) -> String + '_ {
    move |e| format!("{what}: {e}")
}

/// The `webpep server` configuration (TOML, as a user would write it) for a lab
/// configuration's switches.
pub fn server_toml(cfg: &LabConfig, topo: &Topology, cache_dir: &Path, time_scale: f64) -> String {
    let sw = cfg.switches();
    let edge = topo.edge_addr();
    // TCP keep-alive counts whole seconds: the probe interval (4 s, under the 6 s radio
    // release of 003 Table 3) cannot follow the time scale below 1 s of wall time.
    let scaled_s = |s: f64| ((s / time_scale).ceil() as u64).max(1);
    let transcode = if sw.transcode == "off" {
        "enabled = false\n".to_string()
    } else {
        format!("enabled = true\npreset = \"{}\"\n", sw.transcode)
    };
    format!(
        r#"# webpep server configuration for lab configuration {desc:?}
[acl]
allow-clients = ["{ue}/32"]
allow-destinations = ["{p0}.{p1}.0.0/16"]

[origin]
dns-upstream = "{edge}:53"

[cache]
enabled = {cache}
dir = "{dir}"
max-bytes = 268435456

[compress]
enabled = {compress}

[transcode]
{transcode}
[url-rewrite]
enabled = {url}
proxy-authority = "{edge}"

[prefetch]
enabled = {prefetch}

[inline]
enabled = {inline}
images = {inline_images}

# The lab has one client, ue; its loader's connections stay far below this.
[limits]
max-client-connections = 1024

[air]
{congestion}{initial_rto}notsent-lowat = {lowat}
keepalive-probes = {probes}
probe-interval = {probe}
probe-stop = {stop}
"#,
        desc = cfg.description,
        ue = topo.ue_addr(),
        p0 = DOMAIN_PREFIX.0,
        p1 = DOMAIN_PREFIX.1,
        cache = sw.cache,
        dir = cache_dir.display(),
        compress = sw.compress,
        url = cfg.proxy == ProxyMode::TransparentUrl,
        prefetch = sw.prefetch,
        inline = sw.inline,
        inline_images = sw.inline_images,
        congestion = if sw.air_tuning {
            format!("congestion = \"{}\"\n", sw.air_congestion.name())
        } else {
            String::new()
        },
        lowat = if sw.air_tuning { 16384 } else { 0 },
        // Tuned, the proxy sets its accepted side's initial RTO itself (÷ k like every delay).
        initial_rto = if sw.air_tuning {
            format!(
                "initial-rto = {:.6}\n",
                AIR_TUNED_INITIAL_RTO.as_secs_f64() / time_scale
            )
        } else {
            String::new()
        },
        probes = sw.keepalive_probes,
        probe = scaled_s(4.0),
        stop = scaled_s(20.0),
    )
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
    /// `work_dir`.
    pub fn start(
        topo: &Topology,
        cfg: &LabConfig,
        tcp: TcpEra,
        work_dir: &Path,
        time_scale: f64,
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
        };
        if let Some(peer) = cfg.peer {
            proxy._initial_rto = set_air_tcp(topo, cfg.air_tuning, tcp, time_scale, false)?;
            let addr = SocketAddr::from((edge_addr, PROXY_PORT));
            let p = PeerProxy::start(peer, &topo.edge, addr, topo.ue_addr(), edge_addr, work_dir)?;
            proxy.peer = Some(p);
            return Ok(proxy);
        }
        let text = server_toml(cfg, topo, &proxy.cache_dir, time_scale);
        let scfg = webpep_server::ServerConfig::from_toml(&text, "lab edge proxy configuration")
            .map_err(|e| LabError::Other(format!("edge proxy configuration: {e}\n{text}")))?;
        let server = webpep_server::Server::new(scfg)
            .map_err(|e| LabError::Other(format!("edge proxy: {e}")))?;
        proxy.server = Some(server.clone());
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
            ProxyMode::Explicit => lc.proxy = Some(SocketAddr::from((self.edge_addr, PROXY_PORT))),
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
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
