//! The link shell: an inner namespace whose only way out is the emulated link.
//!
//! ```text
//!   inner netns (anonymous)          pump thread             outer netns (given)
//!   wpl0 10.77.N.2/24  <-- TUN fd -->  Link model  <-- TUN fd -->  wpl-K 10.77.N.1/24
//!   default via 10.77.N.1
//! ```
//!
//! Everything is tied to file descriptors held by [`RunningLink`]: dropping it joins the pump,
//! closes both TUN fds (the non-persistent devices vanish) and the inner namespace's fd (the
//! namespace dies with its last process). [`run_command`] runs a command inside, like
//! Mahimahi's `mm-link`.

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::io;
use std::net::Ipv4Addr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Child, ExitStatus};
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use webpep_link_model::{Link, ResolvedProfile};

use crate::log::LogOptions;
use crate::netns::NetNs;
use crate::pump::{LinkCounters, LinkReport, Pump, PumpOptions};
use crate::tun::{Tun, TunConfig};
use crate::{Error, Result};

/// Name of the device-side TUN in the inner namespace.
pub const INNER_IFNAME: &str = "wpl0";
/// Name pattern of the network-side TUN in the outer namespace (the kernel picks `%d`).
pub const OUTER_IFNAME_PATTERN: &str = "wpl-%d";
/// MTU of both TUNs.
pub const MTU: u32 = 1500;

/// Configuration of an emulated link between a fresh inner namespace and an outer one.
#[derive(Clone, Debug)]
pub struct LinkShell {
    profile: ResolvedProfile,
    time_scale: f64,
    seed: u64,
    log: Option<LogOptions>,
    subnet: Option<u8>,
    snapshot_every: Duration,
    inner: Option<NetNs>,
}

impl LinkShell {
    /// A link with `profile`, time scale 1, seed 0, no log, subnet picked automatically.
    pub fn new(profile: ResolvedProfile) -> Self {
        LinkShell {
            profile,
            time_scale: 1.0,
            seed: 0,
            log: None,
            subnet: None,
            snapshot_every: Duration::from_millis(100),
            inner: None,
        }
    }

    /// Use this namespace as the device side instead of a new one (the lab's `ue`, or `net`
    /// for the wired edge–net hop). Its default route is set to the link.
    pub fn inner(mut self, ns: NetNs) -> Self {
        self.inner = Some(ns);
        self
    }

    /// Time scale k (rates ×k, delays ÷k).
    pub fn time_scale(mut self, k: f64) -> Self {
        self.time_scale = k;
        self
    }

    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    pub fn log(mut self, log: Option<LogOptions>) -> Self {
        self.log = log;
        self
    }

    /// Uses 10.77.`n`.0/24 (1..=254) instead of picking a free one.
    pub fn subnet(mut self, n: u8) -> Self {
        self.subnet = Some(n);
        self
    }

    /// How often the shared counters snapshot is refreshed (default 100 ms).
    pub fn snapshot_every(mut self, every: Duration) -> Self {
        self.snapshot_every = every;
        self
    }

    pub fn profile(&self) -> &ResolvedProfile {
        &self.profile
    }

    pub fn get_time_scale(&self) -> f64 {
        self.time_scale
    }

    /// Builds the link: a new inner namespace, a TUN on each side, addresses and routes, and
    /// the pump. On error nothing is left behind.
    pub fn start(&self, outer: NetNs) -> Result<RunningLink> {
        if !(self.time_scale.is_finite() && self.time_scale > 0.0) {
            return Err(Error::Other(format!(
                "invalid time scale {} (must be a positive number)",
                self.time_scale
            )));
        }
        if let Some(n) = self.subnet {
            if n == 0 || n == 255 {
                return Err(Error::Other(format!(
                    "invalid subnet 10.77.{n}.0/24 (use 1..=254)"
                )));
            }
        }
        let mut tried = BTreeSet::new();
        let mut last_collision = None;
        for _attempt in 0..8 {
            let lease = SubnetLease::acquire(&outer, self.subnet, &tried)?;
            let n = lease.n;
            match self.try_start(&outer, lease)? {
                Started::Running(link) => return Ok(link),
                Started::Collision(dev) => {
                    // Someone else (another process) took the same subnet at the same time.
                    tried.insert(n);
                    last_collision = Some((n, dev));
                    if self.subnet.is_some() {
                        break;
                    }
                }
            }
        }
        let (n, dev) = last_collision.unwrap_or((0, String::new()));
        Err(Error::Other(format!(
            "subnet 10.77.{n}.0/24 is already used by {dev} in the outer namespace"
        )))
    }

    fn try_start(&self, outer: &NetNs, lease: SubnetLease) -> Result<Started> {
        let n = lease.n;
        let inner_addr = Ipv4Addr::new(10, 77, n, 2);
        let outer_addr = Ipv4Addr::new(10, 77, n, 1);
        let inner = match &self.inner {
            Some(ns) => ns.clone(),
            None => NetNs::new()?,
        };
        let inner_tun = Tun::create(&inner, INNER_IFNAME)?;
        let outer_tun = Tun::create(outer, OUTER_IFNAME_PATTERN)?;
        inner_tun.configure(
            &inner,
            &TunConfig {
                addr: inner_addr,
                prefix_len: 24,
                mtu: MTU,
            },
        )?;
        inner_tun.add_route(&inner, "default", Some(outer_addr))?;
        outer_tun.configure(
            outer,
            &TunConfig {
                addr: outer_addr,
                prefix_len: 24,
                mtu: MTU,
            },
        )?;
        // Another process may have taken the same subnet between our check and now.
        if let Some((dev, _)) = ipv4_addresses(outer)?
            .into_iter()
            .find(|(dev, a)| dev != outer_tun.name() && in_subnet(*a, n))
        {
            return Ok(Started::Collision(dev));
        }
        let inner_ifname = inner_tun.name().to_string();
        let outer_ifname = outer_tun.name().to_string();
        let link = Link::new(&self.profile, self.time_scale, self.seed);
        let pump = Pump::start(
            link,
            inner_tun,
            outer_tun,
            PumpOptions {
                time_scale: self.time_scale,
                log: self.log.clone(),
                snapshot_every: self.snapshot_every,
            },
        )?;
        tracing::debug!(
            "link up: {inner_ifname} {inner_addr} (inner) <-> {outer_ifname} {outer_addr} (outer)"
        );
        Ok(Started::Running(RunningLink {
            pump: Some(pump),
            inner,
            outer: outer.clone(),
            inner_addr,
            outer_addr,
            inner_ifname,
            outer_ifname,
            _lease: lease,
        }))
    }
}

enum Started {
    Running(RunningLink),
    Collision(String),
}

/// A running emulated link. Dropping it stops the pump and removes both TUNs; the inner
/// namespace dies once no process or handle keeps it.
#[derive(Debug)]
pub struct RunningLink {
    // Field order matters for drop: the pump (and its TUNs) goes first, the lease last.
    pump: Option<Pump>,
    inner: NetNs,
    outer: NetNs,
    inner_addr: Ipv4Addr,
    outer_addr: Ipv4Addr,
    inner_ifname: String,
    outer_ifname: String,
    _lease: SubnetLease,
}

impl RunningLink {
    /// The device-side namespace (anonymous, made for this link).
    pub fn inner(&self) -> &NetNs {
        &self.inner
    }

    /// The network-side namespace (the one given to [`LinkShell::start`]).
    pub fn outer(&self) -> &NetNs {
        &self.outer
    }

    /// The address of the inner TUN (10.77.N.2).
    pub fn inner_addr(&self) -> Ipv4Addr {
        self.inner_addr
    }

    /// The address of the outer TUN (10.77.N.1), the inner namespace's gateway.
    pub fn outer_addr(&self) -> Ipv4Addr {
        self.outer_addr
    }

    pub fn prefix_len(&self) -> u8 {
        24
    }

    pub fn inner_ifname(&self) -> &str {
        &self.inner_ifname
    }

    pub fn outer_ifname(&self) -> &str {
        &self.outer_ifname
    }

    /// The latest counters snapshot (refreshed every `snapshot_every` while packets flow).
    pub fn counters(&self) -> LinkCounters {
        self.pump.as_ref().map(|p| p.counters()).unwrap_or_default()
    }

    /// A fresh counters snapshot, taken by the pump now (waits for it, at most 1 s).
    pub fn counters_now(&self) -> LinkCounters {
        self.pump
            .as_ref()
            .map(|p| p.counters_now())
            .unwrap_or_default()
    }

    /// Starts the link over now in epoch `epoch` and returns the snapshot taken then (see
    /// [`Pump::restart`]).
    pub fn restart(&self, epoch: u64) -> LinkCounters {
        self.pump
            .as_ref()
            .map(|p| p.restart(epoch))
            .unwrap_or_default()
    }

    /// Whether the pump thread is still running.
    pub fn is_running(&self) -> bool {
        self.pump.as_ref().is_some_and(|p| p.is_running())
    }

    /// Stops the pump, removes the TUNs and returns the final counters.
    pub fn stop(mut self) -> Result<LinkReport> {
        match self.pump.take() {
            Some(pump) => pump.stop(),
            None => Err(Error::Other("the link was already stopped".into())),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Subnets

/// Subnets (the N of 10.77.N.0/24) used by running links of this process.
static USED_SUBNETS: Mutex<BTreeSet<u8>> = Mutex::new(BTreeSet::new());

fn used_subnets() -> std::sync::MutexGuard<'static, BTreeSet<u8>> {
    USED_SUBNETS.lock().unwrap_or_else(|p| p.into_inner())
}

/// A subnet reserved in this process; released on drop.
#[derive(Debug)]
struct SubnetLease {
    n: u8,
}

impl SubnetLease {
    /// Reserves `wanted`, or the lowest N that no link of this process uses, that has no
    /// address in the outer namespace, and that is not in `skip`.
    fn acquire(outer: &NetNs, wanted: Option<u8>, skip: &BTreeSet<u8>) -> Result<SubnetLease> {
        let taken: BTreeSet<u8> = ipv4_addresses(outer)?
            .into_iter()
            .filter(|(_, a)| a.octets()[0] == 10 && a.octets()[1] == 77)
            .map(|(_, a)| a.octets()[2])
            .collect();
        let mut used = used_subnets();
        let n = match wanted {
            Some(n) => {
                if used.contains(&n) {
                    return Err(Error::Other(format!(
                        "subnet 10.77.{n}.0/24 is already used by another link of this process"
                    )));
                }
                if taken.contains(&n) {
                    return Err(Error::Other(format!(
                        "subnet 10.77.{n}.0/24 is already used in the outer namespace"
                    )));
                }
                n
            }
            None => (1..=254u8)
                .find(|n| !used.contains(n) && !taken.contains(n) && !skip.contains(n))
                .ok_or_else(|| {
                    Error::Other("no free subnet left in 10.77.1.0/24 .. 10.77.254.0/24".into())
                })?,
        };
        used.insert(n);
        Ok(SubnetLease { n })
    }
}

impl Drop for SubnetLease {
    fn drop(&mut self) {
        used_subnets().remove(&self.n);
    }
}

fn in_subnet(a: Ipv4Addr, n: u8) -> bool {
    let o = a.octets();
    o[0] == 10 && o[1] == 77 && o[2] == n
}

/// (device, address) of every IPv4 address in `ns`.
fn ipv4_addresses(ns: &NetNs) -> Result<Vec<(String, Ipv4Addr)>> {
    let out = ns.ip(["-o", "-4", "addr", "show"])?;
    Ok(parse_ip_addr_lines(&out))
}

/// Parses `ip -o -4 addr show` lines: `2: eth0    inet 10.0.0.5/24 brd ... scope global eth0`.
fn parse_ip_addr_lines(out: &str) -> Vec<(String, Ipv4Addr)> {
    let mut found = Vec::new();
    for line in out.lines() {
        let mut tokens = line.split_whitespace();
        let _index = tokens.next();
        let Some(dev) = tokens.next() else { continue };
        let dev = dev.split('@').next().unwrap_or(dev).trim_end_matches(':');
        let mut rest = tokens.skip_while(|t| *t != "inet");
        if rest.next().is_none() {
            continue;
        }
        let Some(addr) = rest.next() else { continue };
        let addr = addr.split('/').next().unwrap_or(addr);
        if let Ok(a) = addr.parse::<Ipv4Addr>() {
            found.push((dev.to_string(), a));
        }
    }
    found
}

// ---------------------------------------------------------------------------------------------
// Running a command inside

/// What [`run_command_report`] returns.
#[derive(Clone, Debug)]
pub struct CommandOutcome {
    /// The command's exit code, or 128 + signal if a signal killed it.
    pub exit_code: i32,
    /// The link's final counters.
    pub report: LinkReport,
}

/// Starts the link, runs `argv` inside the inner namespace (in its own process group, with
/// `WEBPEP_LINK_INNER_ADDR` / `WEBPEP_LINK_OUTER_ADDR` set), forwards SIGINT, SIGTERM and
/// SIGHUP to the command's process group (the third signal sends SIGKILL), waits, kills what
/// is left in the group, stops the link, and returns the exit code (128 + signal if killed).
///
/// If stdin is a terminal whose foreground group is ours, the command gets the terminal (so
/// Ctrl-C reaches it directly, and interactive shells work) and we take it back afterwards.
///
/// Call it from a thread that lives until it returns (the child has `PR_SET_PDEATHSIG`).
pub fn run_command(shell: &LinkShell, outer: NetNs, argv: &[OsString]) -> Result<i32> {
    Ok(run_command_report(shell, outer, argv)?.exit_code)
}

/// [`run_command`], also returning the link's final counters.
pub fn run_command_report(
    shell: &LinkShell,
    outer: NetNs,
    argv: &[OsString],
) -> Result<CommandOutcome> {
    let Some((program, args)) = argv.split_first() else {
        return Err(Error::Other("no command given".into()));
    };
    let signals = SignalWatch::install()?;
    let link = shell.start(outer)?;
    if let Some(sig) = signals.take_pending().first() {
        return Err(Error::Other(format!(
            "interrupted by signal {sig} before the command started"
        )));
    }

    // SAFETY: these have no preconditions.
    let tty_foreground = unsafe {
        libc::isatty(libc::STDIN_FILENO) == 1
            && libc::tcgetpgrp(libc::STDIN_FILENO) == libc::getpgrp()
    };
    let mut cmd = link.inner().command(program);
    cmd.args(args)
        .process_group(0)
        .env("WEBPEP_LINK_INNER_ADDR", link.inner_addr().to_string())
        .env("WEBPEP_LINK_OUTER_ADDR", link.outer_addr().to_string());
    // SAFETY: only async-signal-safe calls, no allocation.
    unsafe {
        cmd.pre_exec(move || {
            if tty_foreground {
                let mut block: libc::sigset_t = std::mem::zeroed();
                libc::sigemptyset(&mut block);
                libc::sigaddset(&mut block, libc::SIGTTOU);
                libc::sigprocmask(libc::SIG_BLOCK, &block, std::ptr::null_mut());
                // Best effort: a failure only means the command runs in the background.
                libc::tcsetpgrp(libc::STDIN_FILENO, libc::getpid());
            }
            // std inherits the parent thread's signal mask; start the command with none.
            let mut empty: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut empty);
            libc::sigprocmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut());
            Ok(())
        });
    }
    let child = match cmd.spawn() {
        Ok(child) => child,
        Err(e) => {
            let program = program.to_string_lossy();
            let hint = if e.kind() == io::ErrorKind::NotFound {
                " (command not found)"
            } else {
                ""
            };
            if tty_foreground {
                take_back_terminal();
            }
            drop(link);
            return Err(Error::io(format!("cannot run `{program}`{hint}"), e));
        }
    };
    let mut child = ChildGuard::new(child);
    let waited = wait_forwarding(&mut child, &signals);
    if tty_foreground {
        take_back_terminal();
    }
    let status = waited?;
    let report = link.stop()?;
    let exit_code = match (status.code(), status.signal()) {
        (Some(code), _) => code,
        (None, Some(sig)) => 128 + sig,
        (None, None) => 1,
    };
    Ok(CommandOutcome { exit_code, report })
}

/// Gives the terminal's foreground back to our process group.
fn take_back_terminal() {
    // SAFETY: signal-mask and terminal calls on valid arguments; SIGTTOU is blocked around
    // tcsetpgrp so that a background process may take the terminal back.
    unsafe {
        let mut block: libc::sigset_t = std::mem::zeroed();
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut block);
        libc::sigaddset(&mut block, libc::SIGTTOU);
        libc::pthread_sigmask(libc::SIG_BLOCK, &block, &mut old);
        libc::tcsetpgrp(libc::STDIN_FILENO, libc::getpgrp());
        libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
    }
}

/// A spawned command: on drop (error paths, panics), its whole process group is killed and
/// the leader reaped.
struct ChildGuard {
    child: Option<Child>,
    pgid: libc::pid_t,
}

impl ChildGuard {
    fn new(child: Child) -> Self {
        let pgid = child.id() as libc::pid_t;
        ChildGuard {
            child: Some(child),
            pgid,
        }
    }

    fn kill_group(&self, sig: libc::c_int) {
        // SAFETY: plain syscall; ESRCH (group gone) is fine.
        unsafe { libc::kill(-self.pgid, sig) };
    }

    /// Whether the leader has exited (without reaping it, so its pid and group stay ours).
    fn has_exited(&self) -> Result<bool> {
        // SAFETY: `info` is a valid siginfo_t; WNOWAIT leaves the child waitable.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        let r = unsafe {
            libc::waitid(
                libc::P_PID,
                self.pgid as libc::id_t,
                &mut info,
                libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
            )
        };
        if r != 0 {
            return Err(Error::io(
                "waiting for the command",
                io::Error::last_os_error(),
            ));
        }
        // SAFETY: si_pid is valid for a waitid result (0 when nothing changed).
        Ok(unsafe { info.si_pid() } != 0)
    }

    /// Kills what is left of the group and reaps the leader.
    fn finish(&mut self) -> Result<ExitStatus> {
        self.kill_group(libc::SIGKILL);
        let Some(mut child) = self.child.take() else {
            return Err(Error::Other("the command was already reaped".into()));
        };
        child
            .wait()
            .map_err(|e| Error::io("waiting for the command", e))
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        if self.child.is_some() {
            let _ = self.finish();
        }
    }
}

/// Waits for the command, forwarding the signals we catch to its process group.
fn wait_forwarding(child: &mut ChildGuard, signals: &SignalWatch) -> Result<ExitStatus> {
    // SAFETY: plain syscall; a pidfd becomes readable when the process exits.
    let pidfd = unsafe { libc::syscall(libc::SYS_pidfd_open, child.pgid, 0) };
    let pidfd: Option<OwnedFd> = if pidfd >= 0 {
        // SAFETY: fresh fd we own.
        Some(unsafe { OwnedFd::from_raw_fd(pidfd as RawFd) })
    } else {
        None
    };
    let mut forwarded = 0u32;
    loop {
        if child.has_exited()? {
            return child.finish();
        }
        let mut pfds = [
            libc::pollfd {
                fd: signals.read_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: pidfd.as_ref().map_or(-1, |f| f.as_raw_fd()),
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        // Without a pidfd (old kernels), poll for the exit every 50 ms.
        let timeout = if pidfd.is_some() { -1 } else { 50 };
        // SAFETY: valid pollfd array.
        let r = unsafe { libc::poll(pfds.as_mut_ptr(), 2, timeout) };
        if r < 0 {
            let err = io::Error::last_os_error();
            if err.raw_os_error() != Some(libc::EINTR) {
                return Err(Error::io("waiting for the command (poll)", err));
            }
        }
        for sig in signals.take_pending() {
            forwarded += 1;
            let send = if forwarded >= 3 { libc::SIGKILL } else { sig };
            tracing::debug!("forwarding signal {send} to the command's process group");
            child.kill_group(send);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Signals

/// Signals forwarded to the command.
const FORWARDED: [libc::c_int; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];
const SLOTS: usize = 32;

/// One watcher's self-pipe. Pipes are made once and never closed, so a handler that raced
/// with a watcher going away never writes into a reused fd.
struct Slot {
    active: AtomicBool,
    read: AtomicI32,
    write: AtomicI32,
}

#[allow(clippy::declare_interior_mutable_const)]
const EMPTY_SLOT: Slot = Slot {
    active: AtomicBool::new(false),
    read: AtomicI32::new(-1),
    write: AtomicI32::new(-1),
};
static SIGNAL_SLOTS: [Slot; SLOTS] = [EMPTY_SLOT; SLOTS];

struct Installed {
    users: usize,
    previous: Vec<(libc::c_int, libc::sigaction)>,
}

static INSTALLED: Mutex<Installed> = Mutex::new(Installed {
    users: 0,
    previous: Vec::new(),
});

extern "C" fn on_signal(sig: libc::c_int) {
    // Only atomics and write(2): async-signal-safe.
    // SAFETY: errno is thread-local; we restore it so the interrupted code does not see ours.
    let saved_errno = unsafe { *libc::__errno_location() };
    let byte = sig as u8;
    for slot in SIGNAL_SLOTS.iter() {
        if slot.active.load(Ordering::Acquire) {
            let fd = slot.write.load(Ordering::Acquire);
            if fd >= 0 {
                // SAFETY: writes one byte from a local to a pipe that is never closed.
                unsafe { libc::write(fd, (&byte as *const u8).cast(), 1) };
            }
        }
    }
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = saved_errno };
}

/// While alive, SIGINT, SIGTERM and SIGHUP are caught (process-wide) and queued for us.
/// Several watchers may be alive at once (each sees every signal).
struct SignalWatch {
    slot: usize,
}

impl SignalWatch {
    fn install() -> Result<SignalWatch> {
        let mut installed = INSTALLED.lock().unwrap_or_else(|p| p.into_inner());
        let Some(slot) = SIGNAL_SLOTS.iter().position(|s| {
            s.active
                .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
        }) else {
            return Err(Error::Other(format!(
                "too many commands running at once (at most {SLOTS})"
            )));
        };
        let s = &SIGNAL_SLOTS[slot];
        if s.write.load(Ordering::Acquire) < 0 {
            let mut fds = [-1; 2];
            // SAFETY: valid 2-int array.
            if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) } != 0 {
                let err = io::Error::last_os_error();
                s.active.store(false, Ordering::Release);
                return Err(Error::io("creating the signal pipe", err));
            }
            s.read.store(fds[0], Ordering::Release);
            s.write.store(fds[1], Ordering::Release);
        }
        let watch = SignalWatch { slot };
        watch.take_pending();
        if installed.users == 0 {
            installed.previous.clear();
            for sig in FORWARDED {
                // SAFETY: sigaction with valid structs; our handler is async-signal-safe.
                unsafe {
                    let mut old: libc::sigaction = std::mem::zeroed();
                    if libc::sigaction(sig, std::ptr::null(), &mut old) != 0 {
                        continue;
                    }
                    // Leave ignored signals ignored (e.g. SIGHUP under nohup).
                    if old.sa_sigaction == libc::SIG_IGN {
                        continue;
                    }
                    let mut new: libc::sigaction = std::mem::zeroed();
                    new.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as usize;
                    new.sa_flags = libc::SA_RESTART;
                    libc::sigemptyset(&mut new.sa_mask);
                    if libc::sigaction(sig, &new, std::ptr::null_mut()) == 0 {
                        installed.previous.push((sig, old));
                    }
                }
            }
        }
        installed.users += 1;
        Ok(watch)
    }

    fn read_fd(&self) -> RawFd {
        SIGNAL_SLOTS[self.slot].read.load(Ordering::Acquire)
    }

    /// The signals caught since the last call.
    fn take_pending(&self) -> Vec<libc::c_int> {
        let mut sigs = Vec::new();
        let mut buf = [0u8; 64];
        loop {
            // SAFETY: reads into a local buffer.
            let n = unsafe { libc::read(self.read_fd(), buf.as_mut_ptr().cast(), buf.len()) };
            if n <= 0 {
                break;
            }
            sigs.extend(buf[..n as usize].iter().map(|&b| b as libc::c_int));
        }
        sigs
    }
}

impl Drop for SignalWatch {
    fn drop(&mut self) {
        let mut installed = INSTALLED.lock().unwrap_or_else(|p| p.into_inner());
        installed.users = installed.users.saturating_sub(1);
        if installed.users == 0 {
            for (sig, old) in installed.previous.drain(..) {
                // SAFETY: restores a disposition we saved.
                unsafe { libc::sigaction(sig, &old, std::ptr::null_mut()) };
            }
        }
        self.take_pending();
        SIGNAL_SLOTS[self.slot]
            .active
            .store(false, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_can_move_between_threads() {
        fn send_sync<T: Send + Sync>() {}
        send_sync::<RunningLink>();
        send_sync::<LinkShell>();
        send_sync::<NetNs>();
        send_sync::<Pump>();
    }

    #[test]
    fn parses_ip_addr_output() {
        let out = "1: lo    inet 127.0.0.1/8 scope host lo\\       valid_lft forever\n\
                   5: wpl-0    inet 10.77.1.1/24 scope global wpl-0\\       valid_lft forever\n\
                   7: veth0@if6    inet 10.77.3.9/30 brd 10.77.3.11 scope global veth0\n";
        let found = parse_ip_addr_lines(out);
        assert_eq!(
            found,
            vec![
                ("lo".to_string(), Ipv4Addr::new(127, 0, 0, 1)),
                ("wpl-0".to_string(), Ipv4Addr::new(10, 77, 1, 1)),
                ("veth0".to_string(), Ipv4Addr::new(10, 77, 3, 9)),
            ]
        );
        assert!(in_subnet(Ipv4Addr::new(10, 77, 3, 9), 3));
        assert!(!in_subnet(Ipv4Addr::new(10, 78, 3, 9), 3));
    }
}
