//! Peer proxies in the lab (DESIGN §7.4): Debian's Squid or Ziproxy started in `edge` as the
//! explicit proxy for one load, in place of `webpep server`, with stock settings and a cold
//! cache, so that webpep is measured beside the proxies an operator could deploy instead.
//! Each peer asks the lab's resolver in edge for origin names (Squid by `dns_nameservers`,
//! Ziproxy through a private resolv.conf) and admits only `ue`. The two-level hierarchy adds
//! a Squid child on ue's loopback, the browser's proxy, whose only way out is its parent
//! Squid at the edge (the classic dual proxy, plain HTTP/1.1 on TCP over the air).

use std::ffi::CString;
use std::net::{Ipv4Addr, SocketAddr};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use webpep_link::NetNs;

use crate::configs::Peer;
use crate::{LabError, Result};

/// Where Debian installs each peer.
pub(crate) fn binary(peer: Peer) -> &'static str {
    match peer {
        Peer::Squid | Peer::SquidHierarchy => "/usr/sbin/squid",
        Peer::Ziproxy => "/usr/bin/ziproxy",
    }
}

/// Whether `peer` is installed where Debian puts it.
fn installed(peer: Peer) -> bool {
    Path::new(binary(peer)).is_file()
}

/// Why `peer` cannot run in this process, if it cannot: Squid started as root drops to its
/// user `proxy`, which the user namespace of an unprivileged run (only root mapped) lacks.
pub fn cannot_run(peer: Peer) -> Option<String> {
    if !installed(peer) {
        return Some(format!(
            "{} is not installed (apt-get install {})",
            binary(peer),
            peer.name()
        ));
    }
    let only_root_mapped = std::fs::read_to_string("/proc/self/uid_map")
        .map(|m| {
            m.lines()
                .map(|l| l.split_whitespace().nth(2) == Some("1"))
                .eq([true])
        })
        .unwrap_or(false);
    if matches!(peer, Peer::Squid | Peer::SquidHierarchy) && only_root_mapped {
        return Some(
            "Squid needs real root: it drops privileges to its user `proxy`, which the user \
             namespace of an unprivileged run does not map"
                .into(),
        );
    }
    None
}

/// Where a peer runs: its namespace and address, the one client it admits, the resolver it
/// asks, and (a child cache) the parent it sends every request to.
struct Placement<'a> {
    ns: &'a NetNs,
    addr: SocketAddr,
    client: Ipv4Addr,
    resolver: Ipv4Addr,
    parent: Option<SocketAddr>,
}

/// The Squid child cache's port on ue's loopback (the browser's proxy under
/// `squid-hierarchy`).
pub const SQUID_CHILD_PORT: u16 = 3128;

/// A running peer proxy; dropping it stops the process and removes its directory.
pub struct PeerProxy {
    peer: Peer,
    /// Squid runs in the foreground as our child; Ziproxy only as a daemon, found by its
    /// pid file.
    child: Option<Child>,
    pid_file: PathBuf,
    dir: PathBuf,
    /// The child cache in ue of a two-level hierarchy (stopped before its parent).
    below: Option<Box<PeerProxy>>,
}

/// An empty directory `<parent>/<prefix>-<pid>-<n>`, unique in this process.
pub(crate) fn fresh_dir(parent: &Path, prefix: &str) -> Result<PathBuf> {
    static SERIAL: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = SERIAL.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = parent.join(format!("{prefix}-{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(io("peer directory"))?;
    Ok(dir)
}

fn io(what: &'static str) -> impl Fn(std::io::Error) -> LabError {
    move |e| LabError::Other(format!("{what}: {e}"))
}

impl PeerProxy {
    /// Starts `peer` in `edge` on `addr`, admitting `client`, resolving through `resolver`
    /// (port 53); for the hierarchy, also its child in `ue` on 127.0.0.1:[`SQUID_CHILD_PORT`].
    /// Call from a thread that outlives the load (a child is killed when its spawning thread
    /// exits). Returns once the proxies accept connections.
    pub fn start(
        peer: Peer,
        edge: &NetNs,
        ue: &NetNs,
        addr: SocketAddr,
        client: Ipv4Addr,
        resolver: Ipv4Addr,
        work_dir: &Path,
    ) -> Result<PeerProxy> {
        if let Some(why) = cannot_run(peer) {
            return Err(LabError::BadInput(format!("peer {}: {why}", peer.name())));
        }
        let at = Placement {
            ns: edge,
            addr,
            client,
            resolver,
            parent: None,
        };
        let mut proxy = Self::start_at(peer, &at, work_dir)?;
        if peer == Peer::SquidHierarchy {
            let child = Placement {
                ns: ue,
                addr: SocketAddr::from((Ipv4Addr::LOCALHOST, SQUID_CHILD_PORT)),
                client: Ipv4Addr::LOCALHOST,
                resolver,
                parent: Some(addr),
            };
            proxy.below = Some(Box::new(Self::start_at(peer, &child, work_dir)?));
        }
        Ok(proxy)
    }

    pub fn kind(&self) -> Peer {
        self.peer
    }

    fn start_at(peer: Peer, at: &Placement<'_>, work_dir: &Path) -> Result<PeerProxy> {
        let role = if at.parent.is_some() { "-child" } else { "" };
        let dir = fresh_dir(work_dir, &format!("peer-{}{role}", peer.name()))?;
        let pid_file = dir.join(format!("{}.pid", peer.name()));
        let mut proxy = PeerProxy {
            peer,
            child: None,
            pid_file,
            dir,
            below: None,
        };
        match peer {
            Peer::Squid | Peer::SquidHierarchy => proxy.start_squid(at)?,
            Peer::Ziproxy => proxy.start_ziproxy(at)?,
        }
        proxy.wait_listening(at.ns, at.addr)?;
        Ok(proxy)
    }

    fn start_squid(&mut self, at: &Placement<'_>) -> Result<()> {
        let conf = self.dir.join("squid.conf");
        // A child cache sends everything to its parent, never to an origin itself. Each Squid
        // names itself apart: they share this host's name, and a Squid that finds its own
        // name in a request's Via refuses it as a forwarding loop.
        let upward = match at.parent {
            Some(p) => format!(
                "cache_peer {} parent {} 0 no-query no-digest default\nnever_direct allow all\n\
                 visible_hostname webpep-lab-child\n",
                p.ip(),
                p.port()
            ),
            None => "visible_hostname webpep-lab-edge\n".to_string(),
        };
        std::fs::write(
            &conf,
            format!(
                "{upward}http_port {addr}\n\
                 acl lab_client src {client}/32\n\
                 http_access allow lab_client\n\
                 http_access deny all\n\
                 dns_nameservers {resolver}\n\
                 cache_mem 64 MB\n\
                 access_log none\n\
                 cache_log {log}\n\
                 cache_store_log none\n\
                 pid_filename {pid}\n\
                 coredump_dir {dir}\n\
                 shutdown_lifetime 0 seconds\n",
                addr = at.addr,
                client = at.client,
                resolver = at.resolver,
                log = self.dir.join("cache.log").display(),
                pid = self.pid_file.display(),
                dir = self.dir.display(),
            ),
        )
        .map_err(io("squid.conf"))?;
        // Squid started as root drops to `proxy`: its files must be writable by it.
        let _ = Command::new("chown")
            .arg("-R")
            .arg("proxy")
            .arg(&self.dir)
            .status();
        let child = at
            .ns
            .command(binary(Peer::Squid))
            // Its own service name: two Squids run side by side in the hierarchy.
            .arg("-n")
            .arg(if at.parent.is_some() {
                "webpepchild"
            } else {
                "webpep"
            })
            .arg("-N")
            .arg("-f")
            .arg(&conf)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(io("starting squid"))?;
        self.child = Some(child);
        Ok(())
    }

    fn start_ziproxy(&mut self, at: &Placement<'_>) -> Result<()> {
        let conf = self.dir.join("ziproxy.conf");
        // Only what a deployment must set; everything else is Ziproxy's default (gzip on,
        // JPEG/PNG/GIF recompressed, ImageQuality {30,25,25,20}).
        std::fs::write(
            &conf,
            format!(
                "Port = {port}\nAddress = \"{ip}\"\nOnlyFrom = \"{client}\"\n\
                 PIDFile = \"{pid}\"\nErrorLog = \"{err}\"\nAccessLog = \"{acc}\"\n",
                port = at.addr.port(),
                ip = at.addr.ip(),
                client = at.client,
                pid = self.pid_file.display(),
                err = self.dir.join("error.log").display(),
                acc = self.dir.join("access.log").display(),
            ),
        )
        .map_err(io("ziproxy.conf"))?;
        let resolv = self.dir.join("resolv.conf");
        std::fs::write(&resolv, format!("nameserver {}\n", at.resolver))
            .map_err(io("resolv.conf"))?;
        let resolv_c = CString::new(resolv.as_os_str().as_bytes())
            .map_err(|_| LabError::Other("ziproxy: a NUL in the work directory's path".into()))?;
        let mut cmd = at.ns.command(binary(Peer::Ziproxy));
        cmd.arg("-d")
            .arg("-c")
            .arg(&conf)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        // SAFETY: async-signal-safe syscalls on a path prepared before the fork.
        unsafe {
            cmd.pre_exec(move || crate::nsrt::own_resolv_conf(&resolv_c));
        }
        // The daemon forks; the first process exits once it has.
        let status = cmd
            .status()
            .map_err(io("starting ziproxy (apt-get install ziproxy)"))?;
        if !status.success() {
            return Err(LabError::Other(format!(
                "ziproxy exited: {status} (see {})",
                self.dir.join("error.log").display()
            )));
        }
        Ok(())
    }

    fn wait_listening(&mut self, ns: &NetNs, addr: SocketAddr) -> Result<()> {
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            let up = ns
                .run(|| std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(200)))
                .map_err(|e| LabError::Other(format!("peer {}: {e}", self.peer.name())))?;
            if up.is_ok() {
                return Ok(());
            }
            if let Some(Ok(Some(st))) = self.child.as_mut().map(|c| c.try_wait()) {
                return Err(LabError::Other(format!(
                    "peer {} exited: {st} (its log is in {})",
                    self.peer.name(),
                    self.dir.display()
                )));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Err(LabError::Other(format!(
            "peer {} did not listen on {addr} within 20 s",
            self.peer.name()
        )))
    }

    /// The daemon's pid, from its pid file.
    fn daemon_pid(&self) -> Option<i32> {
        let text = std::fs::read_to_string(&self.pid_file).ok()?;
        text.trim().parse().ok().filter(|p: &i32| *p > 1)
    }
}

/// Whether `pid` is alive: not gone and not a zombie (a daemon's parent is init, which in a
/// container may never reap it).
fn running(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the parenthesized command name.
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| !rest.trim_start().starts_with(['Z', 'X'])),
        Err(_) => false,
    }
}

/// Signals `pid` and waits up to `wait` for it to be gone.
fn stop_pid(pid: i32, wait: Duration) {
    // SAFETY: plain syscalls; pid came from the peer's own pid file or our child.
    unsafe {
        libc::kill(pid, libc::SIGTERM);
    }
    let until = Instant::now() + wait;
    while Instant::now() < until {
        if !running(pid) {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    // SAFETY: as above.
    unsafe {
        libc::kill(pid, libc::SIGKILL);
    }
}

impl Drop for PeerProxy {
    fn drop(&mut self) {
        self.below = None;
        match self.child.take() {
            Some(mut child) => {
                stop_pid(child.id() as i32, Duration::from_secs(3));
                let _ = child.wait();
            }
            None => {
                if let Some(pid) = self.daemon_pid() {
                    stop_pid(pid, Duration::from_secs(3));
                }
            }
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
