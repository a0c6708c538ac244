//! TCP's initial retransmission timeout, per network namespace and local port.
//!
//! The initial RTO times the SYN, the SYN-ACK and the first data before any RTT sample. Linux
//! fixes it at 1 s (RFC 6298, since 2011); the papers' stacks used 3 s (RFC 2988, Linux 2.4),
//! and W-PEP tuned its air side to 7 s (003 §6.1) because a first packet over GPRS takes 1–3 s
//! and a 1 s timer retransmits SYNs and SYN-ACKs that were never lost. Only a BPF `sock_ops`
//! program can change it (`BPF_SOCK_OPS_TIMEOUT_INIT`), so [`InitialRto::install`] loads one:
//! it matches a socket by its namespace's cookie (and, if a rule says so, its local port: a
//! proxy's listening port, so that only the air side is slowed, not its origin side) and
//! answers that rule's timeout.
//!
//! The program is attached to this process's cgroup (v2) through a BPF link, which the kernel
//! drops with its last fd: dropping the guard, or the process dying, detaches it. Sockets of
//! other namespaces and other cgroups are untouched.

use std::fs;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

// bpf(2) commands, program and attach types, helper ids (include/uapi/linux/bpf.h).
const BPF_PROG_LOAD: libc::c_long = 5;
const BPF_LINK_CREATE: libc::c_long = 28;
const BPF_PROG_TYPE_SOCK_OPS: u32 = 13;
const BPF_CGROUP_SOCK_OPS: u32 = 3;
const BPF_SOCK_OPS_TIMEOUT_INIT: i32 = 1;
const HELPER_GET_NETNS_COOKIE: i32 = 122;
/// Offsets in `struct bpf_sock_ops`: `op`, the `reply` the kernel reads back, and
/// `local_port` (host byte order).
const OFF_OP: i16 = 0;
const OFF_REPLY: i16 = 4;
const OFF_LOCAL_PORT: i16 = 68;
/// The kernel's ceiling for any RTO (TCP_RTO_MAX).
pub const RTO_MAX: Duration = Duration::from_secs(120);

/// Which sockets get which initial RTO.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RtoRule {
    /// The namespace (its cookie: [`netns_cookie`], [`netns_cookie_here`]).
    pub netns_cookie: u64,
    /// Only sockets with this local port (accepted ones: the listening port); `None`: all.
    pub local_port: Option<u16>,
    pub timeout: Duration,
}

/// An installed initial-RTO program; dropping it detaches the program.
#[derive(Debug)]
pub struct InitialRto {
    _link: OwnedFd,
    _prog: OwnedFd,
}

impl InitialRto {
    /// Installs `rules` (the first that matches a socket answers). Needs root (`CAP_BPF` +
    /// `CAP_NET_ADMIN`) and a cgroup v2 hierarchy.
    pub fn install(rules: &[RtoRule]) -> io::Result<InitialRto> {
        if rules.is_empty() {
            return Err(io::Error::other("initial RTO: no rule given"));
        }
        if let Some(r) = rules
            .iter()
            .find(|r| r.timeout.is_zero() || r.timeout > RTO_MAX)
        {
            return Err(io::Error::other(format!(
                "initial RTO {:?} is outside (0, {RTO_MAX:?}]",
                r.timeout
            )));
        }
        let hz = kernel_hz()?;
        let compiled: Vec<(u64, Option<u16>, i32)> = rules
            .iter()
            .map(|r| {
                let jiffies = (r.timeout.as_secs_f64() * hz as f64).round().max(1.0) as i32;
                (r.netns_cookie, r.local_port, jiffies)
            })
            .collect();
        let prog = load(&program(&compiled))?;
        let cgroup = open_own_cgroup()?;
        let link = link_create(&prog, &cgroup)?;
        Ok(InitialRto {
            _link: link,
            _prog: prog,
        })
    }
}

/// The RTO a new TCP connection from this thread's namespace (from `local` if given) to `dst`
/// starts with: `tcpi_rto` right after its SYN leaves, the check that a timeout is in force.
/// `dst` should not answer within microseconds: a host across an emulated link, or an
/// address nobody holds.
pub fn rto_of_a_new_connection(
    dst: std::net::SocketAddr,
    local: Option<std::net::SocketAddr>,
) -> io::Result<Duration> {
    let s = socket2::Socket::new(
        socket2::Domain::for_address(dst),
        socket2::Type::STREAM,
        None,
    )?;
    if let Some(local) = local {
        s.bind(&local.into())?;
    }
    s.set_nonblocking(true)?;
    match s.connect(&dst.into()) {
        Ok(()) => {}
        Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => {}
        Err(e) => return Err(e),
    }
    // struct tcp_info: eight one-byte fields, then u32 tcpi_rto (µs).
    let mut info = [0u8; 232];
    let mut len = info.len() as libc::socklen_t;
    // SAFETY: info and len are valid for writes of the sizes given.
    let rc = unsafe {
        libc::getsockopt(
            s.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            info.as_mut_ptr() as *mut libc::c_void,
            &mut len,
        )
    };
    if rc < 0 || len < 12 {
        return Err(io::Error::last_os_error());
    }
    let us = u32::from_ne_bytes([info[8], info[9], info[10], info[11]]);
    Ok(Duration::from_micros(us as u64))
}

/// One eBPF instruction (`struct bpf_insn`).
#[derive(Clone, Copy)]
#[repr(C)]
struct Insn {
    code: u8,
    regs: u8,
    off: i16,
    imm: i32,
}

fn insn(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> Insn {
    Insn {
        code,
        regs: (src << 4) | dst,
        off,
        imm,
    }
}

/// The program: on `TIMEOUT_INIT`, find the first rule whose namespace cookie (and local port,
/// if it names one) matches the socket and reply with its timeout in jiffies; every other op
/// and socket gets the kernel's default (a reply of 0). Always returns 1 (the `sock_ops` "ok").
fn program(rules: &[(u64, Option<u16>, i32)]) -> Vec<Insn> {
    const MOV64_REG: u8 = 0xbf;
    const MOV64_IMM: u8 = 0xb7;
    const LDX_W: u8 = 0x61;
    const STX_W: u8 = 0x63;
    const LD_DW: u8 = 0x18;
    const JNE_IMM: u8 = 0x55;
    const JNE_REG: u8 = 0x5d;
    const JA: u8 = 0x05;
    const CALL: u8 = 0x85;
    const EXIT: u8 = 0x95;
    let mut p = vec![
        insn(MOV64_REG, 6, 1, 0, 0),
        insn(LDX_W, 2, 6, OFF_OP, 0),
        insn(JNE_IMM, 2, 0, 0, BPF_SOCK_OPS_TIMEOUT_INIT), // → tail
        insn(MOV64_REG, 1, 6, 0, 0),
        insn(CALL, 0, 0, 0, HELPER_GET_NETNS_COOKIE),
        insn(MOV64_REG, 7, 0, 0, 0), // the cookie, in a register calls keep
    ];
    // Jumps to patch: to the tail, and to the next rule.
    let mut to_tail = vec![2usize];
    for (cookie, port, jiffies) in rules {
        let mut to_next = Vec::new();
        p.push(insn(LD_DW, 2, 0, 0, *cookie as u32 as i32));
        p.push(insn(0, 0, 0, 0, (*cookie >> 32) as u32 as i32));
        to_next.push(p.len());
        p.push(insn(JNE_REG, 7, 2, 0, 0));
        if let Some(port) = port {
            p.push(insn(LDX_W, 3, 6, OFF_LOCAL_PORT, 0));
            to_next.push(p.len());
            p.push(insn(JNE_IMM, 3, 0, 0, *port as i32));
        }
        p.push(insn(MOV64_IMM, 2, 0, 0, *jiffies));
        p.push(insn(STX_W, 6, 2, OFF_REPLY, 0));
        to_tail.push(p.len());
        p.push(insn(JA, 0, 0, 0, 0));
        let next = p.len();
        for at in to_next {
            p[at].off = (next - at - 1) as i16;
        }
    }
    let tail = p.len();
    for at in to_tail {
        p[at].off = (tail - at - 1) as i16;
    }
    p.push(insn(MOV64_IMM, 0, 0, 0, 1));
    p.push(insn(EXIT, 0, 0, 0, 0));
    p
}

fn bpf(cmd: libc::c_long, attr: &mut [u64; 16]) -> io::Result<OwnedFd> {
    // SAFETY: attr is a zero-padded `union bpf_attr` of the size passed; the kernel reads it
    // and the buffers it points to, which outlive the call.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd,
            attr.as_mut_ptr(),
            std::mem::size_of_val(attr) as libc::c_uint,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: bpf() returned a new fd that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

fn load(insns: &[Insn]) -> io::Result<OwnedFd> {
    let license = c"GPL";
    let mut log = vec![0u8; 16 * 1024];
    let mut attr = [0u64; 16];
    attr[0] = BPF_PROG_TYPE_SOCK_OPS as u64 | ((insns.len() as u64) << 32);
    attr[1] = insns.as_ptr() as u64;
    attr[2] = license.as_ptr() as u64;
    attr[3] = 1 | ((log.len() as u64) << 32); // log_level 1, log_size
    attr[4] = log.as_mut_ptr() as u64;
    let name = b"webpep_init_rto";
    // SAFETY: prog_name[16] starts at byte 48 of the attr (6 × u64); name is 15 bytes + NUL.
    unsafe {
        std::ptr::copy_nonoverlapping(
            name.as_ptr(),
            (attr.as_mut_ptr() as *mut u8).add(48),
            name.len(),
        );
    }
    bpf(BPF_PROG_LOAD, &mut attr).map_err(|e| {
        let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
        let verifier = String::from_utf8_lossy(&log[..end]);
        io::Error::new(
            e.kind(),
            format!(
                "loading the initial-RTO sock_ops program: {e} (needs root with CAP_BPF){}",
                if verifier.trim().is_empty() {
                    String::new()
                } else {
                    format!("; verifier: {}", verifier.trim())
                }
            ),
        )
    })
}

fn link_create(prog: &OwnedFd, cgroup: &fs::File) -> io::Result<OwnedFd> {
    let mut attr = [0u64; 16];
    attr[0] = prog.as_raw_fd() as u32 as u64 | ((cgroup.as_raw_fd() as u32 as u64) << 32);
    attr[1] = BPF_CGROUP_SOCK_OPS as u64; // attach_type; flags 0
    bpf(BPF_LINK_CREATE, &mut attr).map_err(|e| {
        io::Error::new(
            e.kind(),
            format!("attaching the initial-RTO program to this process's cgroup: {e}"),
        )
    })
}

fn other(context: &str, e: io::Error) -> io::Error {
    io::Error::new(e.kind(), format!("{context}: {e}"))
}

/// The cgroup v2 directory of this process (`0::PATH` under the cgroup2 mount).
fn open_own_cgroup() -> io::Result<fs::File> {
    let mounts = fs::read_to_string("/proc/self/mountinfo")
        .map_err(|e| other("reading /proc/self/mountinfo", e))?;
    let root = mounts
        .lines()
        .find_map(|l| {
            let (pre, post) = l.split_once(" - ")?;
            (post.split(' ').next() == Some("cgroup2")).then(|| pre.split(' ').nth(4))?
        })
        .ok_or_else(|| io::Error::other("no cgroup v2 hierarchy is mounted"))?;
    let own = fs::read_to_string("/proc/self/cgroup")
        .map_err(|e| other("reading /proc/self/cgroup", e))?;
    let rel = own
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .ok_or_else(|| io::Error::other("this process is in no cgroup v2 group"))?;
    let dir = PathBuf::from(root).join(rel.trim_start_matches('/'));
    fs::File::open(&dir).map_err(|e| other(&format!("opening cgroup {}", dir.display()), e))
}

/// The cookie of the namespace `sock` lives in, as `bpf_get_netns_cookie` sees it.
pub fn netns_cookie(sock: BorrowedFd<'_>) -> io::Result<u64> {
    let mut cookie = 0u64;
    let mut len = std::mem::size_of::<u64>() as libc::socklen_t;
    // SAFETY: cookie and len are valid for writes of the sizes given.
    let rc = unsafe {
        libc::getsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_NETNS_COOKIE,
            &mut cookie as *mut u64 as *mut libc::c_void,
            &mut len,
        )
    };
    if rc < 0 {
        return Err(other(
            "reading a namespace's cookie (SO_NETNS_COOKIE)",
            io::Error::last_os_error(),
        ));
    }
    Ok(cookie)
}

/// The cookie of this thread's namespace (from a socket made for the purpose).
pub fn netns_cookie_here() -> io::Result<u64> {
    let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::DGRAM, None)?;
    netns_cookie(sock.as_fd())
}

/// The kernel's tick rate (CONFIG_HZ), which the program's answer is counted in: jiffies
/// advanced over 100 ms of `/proc/timer_list`'s clock, snapped to the rates Linux offers.
pub fn kernel_hz() -> io::Result<u32> {
    static HZ: OnceLock<u32> = OnceLock::new();
    if let Some(hz) = HZ.get() {
        return Ok(*hz);
    }
    let read = || -> io::Result<(f64, f64)> {
        let t = fs::read_to_string("/proc/timer_list")
            .map_err(|e| other("reading /proc/timer_list (for the kernel's HZ)", e))?;
        let num = |prefix: &str| {
            t.lines().find_map(|l| {
                l.trim()
                    .strip_prefix(prefix)?
                    .split_whitespace()
                    .next()?
                    .parse::<f64>()
                    .ok()
            })
        };
        match (num("now at "), num("jiffies:")) {
            (Some(ns), Some(j)) => Ok((ns, j)),
            _ => Err(io::Error::other(
                "/proc/timer_list has no `now at` or `jiffies:` line",
            )),
        }
    };
    let (t0, j0) = read()?;
    std::thread::sleep(Duration::from_millis(100));
    let (t1, j1) = read()?;
    let measured = (j1 - j0) / ((t1 - t0) / 1e9);
    let hz = [100u32, 250, 300, 1000]
        .into_iter()
        .min_by(|a, b| {
            (*a as f64 - measured)
                .abs()
                .total_cmp(&(*b as f64 - measured).abs())
        })
        .unwrap_or(250);
    if (hz as f64 - measured).abs() > hz as f64 * 0.2 {
        return Err(io::Error::other(format!(
            "the kernel's tick rate looks like {measured:.0} Hz, none of 100/250/300/1000"
        )));
    }
    Ok(*HZ.get_or_init(|| hz))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Where a jump at `at` lands.
    fn target(p: &[Insn], at: usize) -> usize {
        (at as isize + 1 + p[at].off as isize) as usize
    }

    #[test]
    fn program_jumps_land_on_the_next_rule_and_the_tail() {
        let p = program(&[(0x1_0000_0002, None, 750), (7, Some(3128), 1750)]);
        // 6 head; rule 1: 2 load + 1 compare + 3 answer; rule 2: + 2 port check; 2 tail.
        assert_eq!(p.len(), 6 + 6 + 8 + 2);
        let tail = p.len() - 2;
        assert_eq!(target(&p, 2), tail, "any other op goes to the tail");
        // Rule 1: the 64-bit cookie split over the wide load; a mismatch tries rule 2.
        assert_eq!((p[6].imm as u32, p[7].imm as u32), (2, 1));
        assert_eq!(target(&p, 8), 12);
        assert_eq!(p[9].imm, 750);
        assert_eq!(target(&p, 11), tail);
        // Rule 2: cookie, then local port; either mismatch falls to the tail (no rule left).
        assert_eq!(target(&p, 14), tail);
        assert_eq!((p[15].off, p[16].imm), (OFF_LOCAL_PORT, 3128));
        assert_eq!(target(&p, 16), tail);
        assert_eq!(p[17].imm, 1750);
        assert_eq!(target(&p, 19), tail);
        assert_eq!((p[tail].imm, p[tail + 1].code), (1, 0x95));
    }
}
