//! The lab's network (DESIGN §7.1):
//!
//! ```text
//!  ue ──(emulated slow link)── edge ──(wired link, ~20 ms RTT)── net
//!  loader, client proxy         resolver, server proxy          replay server, authoritative DNS,
//!                                                               one address per virtual domain
//! ```
//!
//! Every namespace is anonymous (it vanishes with the lab), both hops are webpep link
//! emulators (this kernel has no netem), and edge forwards between them. Virtual domains live
//! on `net`'s loopback as 10.90.x.y/32; edge routes 10.90.0.0/16 to net.

use std::collections::BTreeMap;
use std::io::Write;
use std::net::Ipv4Addr;
use std::process::Stdio;
use std::time::Duration;

use webpep_link::{LinkShell, NetNs, RunningLink};
use webpep_link_model::profile::{DirectionSpec, JitterSpec, LossSpec, RateSpec};
use webpep_link_model::{Profile, ResolvedProfile};
use webpep_server::initial_rto::{netns_cookie_here, InitialRto, RtoRule};

use crate::{LabError, Result};

/// The prefix the virtual domains' addresses come from.
pub const DOMAIN_PREFIX: (u8, u8) = (10, 90);
/// The authoritative DNS server's address in `net`.
pub const AUTH_DNS_ADDR: Ipv4Addr = Ipv4Addr::new(10, 90, 255, 53);

/// What to build.
#[derive(Clone, Debug)]
pub struct TopologyConfig {
    /// The slow link between ue and edge.
    pub air: ResolvedProfile,
    pub time_scale: f64,
    pub seed: u64,
    /// Round-trip time of the wired edge–net hop (unscaled), default 20 ms.
    pub wired_rtt_ms: f64,
    /// Rate of the wired hop, kbit/s (unscaled), default 100 Mbit/s.
    pub wired_kbps: f64,
    /// The virtual domains to give addresses to.
    pub domains: Vec<String>,
    /// The end hosts' TCP (browser in `ue`, origins in `net`).
    pub tcp: TcpEra,
}

/// Which TCP the end hosts run. The papers measured 2003 stacks; today's kernel (BBR by
/// default in new namespaces here, IW10, RACK, tail-loss probes, F-RTO) hides much of what
/// made web loads slow over GPRS (001 §4: excess queueing, poor loss recovery).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum TcpEra {
    /// The kernel's defaults.
    Modern,
    /// As in 2003: Reno, initial window 2 segments (RFC 2414), no RACK, no tail-loss probe
    /// or early retransmit, no F-RTO; SACK and timestamps kept (Linux 2.4 had them).
    #[default]
    Y2003,
}

impl std::str::FromStr for TcpEra {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "modern" => Ok(TcpEra::Modern),
            "2003" => Ok(TcpEra::Y2003),
            _ => Err(format!("unknown TCP era {s:?} (modern, 2003)")),
        }
    }
}

impl TcpEra {
    /// The initial retransmission timeout (SYN, SYN-ACK, first data), unscaled: 3 s in 2003
    /// (RFC 2988; Linux 2.4, the papers' laptop), 1 s today (RFC 6298). Over GPRS a first
    /// packet takes 1–3 s, so the 1 s timer retransmits SYNs that were never lost.
    pub fn initial_rto(self) -> Duration {
        match self {
            TcpEra::Y2003 => Duration::from_secs(3),
            TcpEra::Modern => Duration::from_secs(1),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            TcpEra::Modern => "modern",
            TcpEra::Y2003 => "2003",
        }
    }
}

impl TopologyConfig {
    pub fn new(air: ResolvedProfile, domains: Vec<String>) -> Self {
        TopologyConfig {
            air,
            time_scale: 1.0,
            seed: 1,
            wired_rtt_ms: 20.0,
            wired_kbps: 100_000.0,
            domains,
            tcp: TcpEra::default(),
        }
    }
}

/// The running lab network. Dropping it tears everything down.
pub struct Topology {
    // Drop order: links first (their pumps and TUNs), then the namespaces.
    pub air: RunningLink,
    pub wire: RunningLink,
    pub ue: NetNs,
    pub edge: NetNs,
    pub net: NetNs,
    /// Each virtual domain's address in `net`.
    pub domains: BTreeMap<String, Ipv4Addr>,
    /// The end hosts' initial RTO (scaled), held while the lab runs.
    _initial_rto: Option<InitialRto>,
}

/// Installs initial RTOs, each divided by the time scale `k` like every other delay of the
/// lab (the kernel's own 1 s would otherwise be k seconds of unscaled time). Where BPF is not
/// available the kernel's timer stays, with a warning: loads still run, less faithfully.
pub(crate) fn scaled_initial_rto(rules: &[(&NetNs, Duration)], k: f64) -> Option<InitialRto> {
    let rules = rules
        .iter()
        .map(|(ns, t)| {
            let cookie = ns
                .run(netns_cookie_here)
                .map_err(|e| e.to_string())?
                .map_err(|e| e.to_string())?;
            Ok(RtoRule {
                netns_cookie: cookie,
                local_port: None,
                timeout: Duration::from_secs_f64(t.as_secs_f64() / k),
            })
        })
        .collect::<std::result::Result<Vec<_>, String>>();
    match rules.and_then(|r| InitialRto::install(&r).map_err(|e| e.to_string())) {
        Ok(guard) => Some(guard),
        Err(e) => {
            static WARNED: std::sync::Once = std::sync::Once::new();
            WARNED.call_once(|| {
                eprintln!("warning: {e}; TCP keeps the kernel's 1 s initial RTO (not scaled)")
            });
            None
        }
    }
}

/// The wired hop's profile: fast, a fixed delay, a deep queue, nothing else.
pub fn wired_profile(rtt_ms: f64, kbps: f64) -> Result<ResolvedProfile> {
    let dir = DirectionSpec {
        rate: RateSpec::Kbps(kbps),
        base_delay_ms: rtt_ms / 2.0,
        jitter: JitterSpec::default(),
        radio: None,
        queue_bytes: 4 << 20,
        loss: LossSpec::default(),
        fec: None,
        bunching: None,
    };
    let p = Profile {
        name: "wired".into(),
        description: format!("wired edge–net hop, {rtt_ms} ms RTT"),
        down: dir.clone(),
        up: dir,
        outages: Default::default(),
    };
    Ok(p.resolve(None)?)
}

/// The address of the i-th virtual domain.
pub fn domain_addr(i: usize) -> Result<Ipv4Addr> {
    if i >= 250 * 250 {
        return Err(LabError::Other(format!("too many virtual domains ({i})")));
    }
    Ok(Ipv4Addr::new(
        DOMAIN_PREFIX.0,
        DOMAIN_PREFIX.1,
        (i / 250) as u8,
        (i % 250 + 1) as u8,
    ))
}

/// Runs `ip -batch -` in `ns` with the given commands (one per line).
pub(crate) fn ip_batch(ns: &NetNs, lines: &[String]) -> Result<()> {
    let mut child = ns
        .command("ip")
        .args(["-batch", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| LabError::Other(format!("ip -batch: {e}")))?;
    if let Some(mut stdin) = child.stdin.take() {
        for l in lines {
            writeln!(stdin, "{l}").map_err(|e| LabError::Other(format!("ip -batch: {e}")))?;
        }
    }
    let out = child
        .wait_with_output()
        .map_err(|e| LabError::Other(format!("ip -batch: {e}")))?;
    if !out.status.success() {
        return Err(LabError::Other(format!(
            "ip -batch failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(())
}

pub(crate) fn sysctl(ns: &NetNs, key: &str, value: &str) -> Result<()> {
    let path = format!("/proc/sys/{}", key.replace('.', "/"));
    let value = value.to_string();
    ns.run(move || std::fs::write(&path, value))?
        .map_err(|e| LabError::Other(format!("sysctl {key}: {e}")))
}

impl Topology {
    pub fn build(cfg: &TopologyConfig) -> Result<Topology> {
        let ue = NetNs::new()?;
        let edge = NetNs::new()?;
        let net = NetNs::new()?;
        sysctl(&edge, "net.ipv4.ip_forward", "1")?;
        for ns in [&ue, &edge, &net] {
            sysctl(ns, "net.ipv4.conf.all.rp_filter", "0")?;
            sysctl(ns, "net.ipv4.conf.default.rp_filter", "0")?;
        }
        let air = LinkShell::new(cfg.air.clone())
            .time_scale(cfg.time_scale)
            .seed(cfg.seed)
            .inner(ue.clone())
            .start(edge.clone())?;
        let wire = LinkShell::new(wired_profile(cfg.wired_rtt_ms, cfg.wired_kbps)?)
            .time_scale(cfg.time_scale)
            .seed(cfg.seed.wrapping_add(1))
            .inner(net.clone())
            .start(edge.clone())?;
        let mut domains = BTreeMap::new();
        let mut lines = vec![format!("addr add {AUTH_DNS_ADDR}/32 dev lo")];
        for (i, d) in cfg.domains.iter().enumerate() {
            let a = domain_addr(i)?;
            domains.insert(d.clone(), a);
            lines.push(format!("addr add {a}/32 dev lo"));
        }
        ip_batch(&net, &lines)?;
        // net answers from its loopback addresses through the wire; edge sends the domains'
        // prefix to net.
        ip_batch(
            &edge,
            &[format!(
                "route add {}.{}.0.0/16 via {}",
                DOMAIN_PREFIX.0,
                DOMAIN_PREFIX.1,
                wire.inner_addr()
            )],
        )?;
        if cfg.tcp == TcpEra::Y2003 {
            for ns in [&ue, &net] {
                sysctl(ns, "net.ipv4.tcp_congestion_control", "reno")?;
                sysctl(ns, "net.ipv4.tcp_early_retrans", "0")?;
                sysctl(ns, "net.ipv4.tcp_recovery", "0")?;
                sysctl(ns, "net.ipv4.tcp_frto", "0")?;
            }
            let iw = |link: &RunningLink| {
                format!(
                    "route change default via {} dev {} initcwnd 2",
                    link.outer_addr(),
                    link.inner_ifname()
                )
            };
            ip_batch(&net, &[iw(&wire)])?;
            ip_batch(&ue, &[iw(&air)])?;
        }
        let rto = cfg.tcp.initial_rto();
        let initial_rto = scaled_initial_rto(&[(&ue, rto), (&net, rto)], cfg.time_scale);
        Ok(Topology {
            air,
            wire,
            ue,
            edge,
            net,
            domains,
            _initial_rto: initial_rto,
        })
    }

    /// The edge's address as seen from ue (where ue's resolver and proxies are).
    pub fn edge_addr(&self) -> Ipv4Addr {
        self.air.outer_addr()
    }

    /// The ue's address.
    pub fn ue_addr(&self) -> Ipv4Addr {
        self.air.inner_addr()
    }
}
