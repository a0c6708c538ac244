//! Network namespaces held by file descriptor.
//!
//! A [`NetNs`] owns an fd of `/proc/<tid>/ns/net`. Namespaces made by [`NetNs::new`] are
//! anonymous (never bind-mounted under `/run/netns`), so nothing named is left behind: a
//! namespace dies with its last fd and its last process.
//!
//! Threads, not processes, carry a network namespace: [`NetNs::run`] runs a closure on a fresh
//! thread that joined the namespace, and sockets created there stay in that namespace whatever
//! thread uses them later. Child processes join it in [`NetNs::command`]'s `pre_exec`.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, OnceLock};
use std::thread;

use crate::{cvt, Error, IoContext, Result};

/// An owned handle of a network namespace. Cloning shares the same fd.
#[derive(Clone, Debug)]
pub struct NetNs {
    fd: Arc<OwnedFd>,
}

impl NetNs {
    /// Creates a new, anonymous network namespace, with `lo` up.
    ///
    /// A helper thread `unshare`s into it, opens its fd and exits; the namespace then lives as
    /// long as this handle (or any process or socket inside it).
    pub fn new() -> Result<NetNs> {
        let handle = thread::Builder::new()
            .name("webpep-netns-new".into())
            .spawn(|| -> Result<OwnedFd> {
                // SAFETY: plain syscall; affects only this (short-lived) thread.
                cvt(unsafe { libc::unshare(libc::CLONE_NEWNET) }, || {
                    "unshare(CLONE_NEWNET): creating a network namespace needs root \
                     (or a user namespace)"
                        .into()
                })?;
                let fd = open_ns_file(Path::new("/proc/thread-self/ns/net"))?;
                set_interface_up("lo")?;
                Ok(fd)
            })
            .ctx(|| "spawning a thread to create a network namespace")?;
        let fd = join_thread(handle)?;
        Ok(NetNs { fd: Arc::new(fd) })
    }

    /// The network namespace of the calling thread.
    pub fn current() -> Result<NetNs> {
        Ok(NetNs {
            fd: Arc::new(open_ns_file(Path::new("/proc/thread-self/ns/net"))?),
        })
    }

    /// Opens a namespace file, e.g. `/run/netns/NAME` or `/proc/PID/ns/net`.
    pub fn open(path: &Path) -> Result<NetNs> {
        Ok(NetNs {
            fd: Arc::new(open_ns_file(path)?),
        })
    }

    /// The namespace's inode number: two handles with the same inode are the same namespace.
    pub fn inode(&self) -> Result<u64> {
        let file = File::from(self.fd.try_clone().ctx(|| "duplicating a namespace fd")?);
        Ok(file.metadata().ctx(|| "fstat on a namespace fd")?.ino())
    }

    /// Moves the calling thread into this namespace. Prefer [`NetNs::run`], which does it on a
    /// fresh thread; use this only on threads you own and whose namespace no one else expects.
    pub fn enter_current_thread(&self) -> Result<()> {
        setns(self.fd.as_raw_fd())
    }

    /// Runs `f` on a fresh thread inside this namespace and returns its result. A panic in `f`
    /// is propagated to the caller.
    pub fn run<F, T>(&self, f: F) -> Result<T>
    where
        F: FnOnce() -> T + Send,
        T: Send,
    {
        let fd = self.fd.as_raw_fd();
        thread::scope(|scope| {
            let handle = thread::Builder::new()
                .name("webpep-netns".into())
                .spawn_scoped(scope, move || -> Result<T> {
                    setns(fd)?;
                    Ok(f())
                })
                .ctx(|| "spawning a thread to enter a network namespace")?;
            match handle.join() {
                Ok(result) => result,
                Err(panic) => std::panic::resume_unwind(panic),
            }
        })
    }

    /// A `Command` whose child joins this namespace before `exec`, and gets `SIGKILL` when the
    /// thread that spawned it exits (`PR_SET_PDEATHSIG`; note: the *thread*, so spawn from a
    /// thread that outlives the child).
    pub fn command<S: AsRef<OsStr>>(&self, program: S) -> Command {
        let mut cmd = Command::new(program);
        let keep = Arc::clone(&self.fd);
        // SAFETY: getpid has no preconditions.
        let parent = unsafe { libc::getpid() };
        // SAFETY: the closure only makes async-signal-safe syscalls and allocates nothing.
        unsafe {
            cmd.pre_exec(move || {
                if libc::setns(keep.as_raw_fd(), libc::CLONE_NEWNET) != 0 {
                    return Err(io::Error::last_os_error());
                }
                if libc::prctl(
                    libc::PR_SET_PDEATHSIG,
                    libc::SIGKILL as libc::c_ulong,
                    0,
                    0,
                    0,
                ) != 0
                {
                    return Err(io::Error::last_os_error());
                }
                // The parent may have died before prctl took effect.
                if libc::getppid() != parent {
                    return Err(io::Error::from_raw_os_error(libc::ESRCH));
                }
                Ok(())
            });
        }
        cmd
    }

    /// Runs `ip ARGS...` (iproute2) inside this namespace; returns its stdout, or an error with
    /// its stderr.
    pub fn ip<I, S>(&self, args: I) -> Result<String>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let args: Vec<OsString> = args.into_iter().map(|a| a.as_ref().to_owned()).collect();
        let shown = format!(
            "ip {}",
            args.iter()
                .map(|a| a.to_string_lossy().into_owned())
                .collect::<Vec<_>>()
                .join(" ")
        );
        let output = self
            .command(ip_program())
            .args(&args)
            .stdin(Stdio::null())
            .output()
            .ctx(|| format!("running `{shown}` (is iproute2 installed?)"))?;
        if !output.status.success() {
            return Err(Error::Command {
                command: shown,
                status: output.status.to_string(),
                stderr: String::from_utf8_lossy(&output.stderr).trim().to_string(),
            });
        }
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    }
}

impl AsFd for NetNs {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl AsRawFd for NetNs {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

/// If not root, enters a new user namespace (mapping root to our uid and gid) together with a
/// new network namespace, so that namespaces and TUN devices can be made without privileges.
/// Returns whether it did so.
///
/// Must be called while the process is single-threaded (first thing in `main`): the kernel
/// refuses `CLONE_NEWUSER` in a multi-threaded process. The caller's network namespace is then
/// a fresh, isolated one (with `lo` up); nothing in it reaches the host's network.
pub fn enter_user_namespace_if_unprivileged() -> Result<bool> {
    // SAFETY: these have no preconditions.
    let (euid, egid) = unsafe { (libc::geteuid(), libc::getegid()) };
    if euid == 0 {
        return Ok(false);
    }
    match thread_count() {
        Some(n) if n > 1 => {
            return Err(Error::Other(format!(
                "cannot enter a user namespace: the process already has {n} threads \
                 (enter_user_namespace_if_unprivileged must run before any thread starts)"
            )))
        }
        _ => {}
    }
    // SAFETY: plain syscall.
    if unsafe { libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNET) } != 0 {
        let err = io::Error::last_os_error();
        let hint = match err.raw_os_error() {
            Some(libc::EPERM) | Some(libc::ENOSPC) | Some(libc::EACCES) => {
                " (unprivileged user namespaces look disabled: see the sysctls \
                 user.max_user_namespaces, kernel.unprivileged_userns_clone and \
                 kernel.apparmor_restrict_unprivileged_userns; or run as root)"
            }
            Some(libc::EINVAL) => " (is the process multi-threaded?)",
            _ => "",
        };
        return Err(Error::io(
            format!("unshare(CLONE_NEWUSER|CLONE_NEWNET) as uid {euid}{hint}"),
            err,
        ));
    }
    write_proc("/proc/self/setgroups", "deny")?;
    write_proc("/proc/self/uid_map", &format!("0 {euid} 1\n"))?;
    write_proc("/proc/self/gid_map", &format!("0 {egid} 1\n"))?;
    set_interface_up("lo")?;
    Ok(true)
}

fn write_proc(path: &str, content: &str) -> Result<()> {
    std::fs::write(path, content).ctx(|| format!("writing {content:?} to {path}"))
}

fn thread_count() -> Option<usize> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .and_then(|n| n.trim().parse().ok())
}

fn open_ns_file(path: &Path) -> Result<OwnedFd> {
    let file = File::open(path).ctx(|| format!("opening network namespace {}", path.display()))?;
    Ok(OwnedFd::from(file))
}

fn setns(fd: RawFd) -> Result<()> {
    // SAFETY: plain syscall on a valid fd; affects only the calling thread.
    cvt(unsafe { libc::setns(fd, libc::CLONE_NEWNET) }, || {
        "setns(CLONE_NEWNET): entering a network namespace".into()
    })?;
    Ok(())
}

fn join_thread<T>(handle: thread::JoinHandle<Result<T>>) -> Result<T> {
    match handle.join() {
        Ok(result) => result,
        Err(panic) => std::panic::resume_unwind(panic),
    }
}

/// `struct ifreq` with the flags member of its union (40 bytes on Linux).
#[repr(C)]
pub(crate) struct IfReqFlags {
    pub name: [libc::c_char; libc::IFNAMSIZ],
    pub flags: libc::c_short,
    _pad: [u8; 22],
}

impl IfReqFlags {
    /// An `ifreq` with `name` (must be shorter than IFNAMSIZ) and `flags`.
    pub(crate) fn new(name: &str, flags: libc::c_short) -> Result<IfReqFlags> {
        let bytes = name.as_bytes();
        if bytes.len() >= libc::IFNAMSIZ || bytes.contains(&0) {
            return Err(Error::Other(format!(
                "invalid interface name {name:?} (at most {} bytes, no NUL)",
                libc::IFNAMSIZ - 1
            )));
        }
        let mut req = IfReqFlags {
            name: [0; libc::IFNAMSIZ],
            flags,
            _pad: [0; 22],
        };
        for (dst, src) in req.name.iter_mut().zip(bytes) {
            *dst = *src as libc::c_char;
        }
        Ok(req)
    }

    pub(crate) fn name(&self) -> String {
        let bytes: Vec<u8> = self
            .name
            .iter()
            .take_while(|c| **c != 0)
            .map(|c| *c as u8)
            .collect();
        String::from_utf8_lossy(&bytes).into_owned()
    }
}

/// Sets `IFF_UP` on an interface of the calling thread's namespace (no `ip` process needed).
pub(crate) fn set_interface_up(name: &str) -> Result<()> {
    // SAFETY: plain syscall.
    let sock = cvt(
        unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) },
        || "socket(AF_INET) for interface ioctls".into(),
    )?;
    // SAFETY: `sock` is a fresh fd we own.
    let sock = unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(sock) };
    let mut req = IfReqFlags::new(name, 0)?;
    // SAFETY: `req` is a valid, 40-byte `struct ifreq`.
    cvt(
        unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCGIFFLAGS, &mut req) },
        || format!("SIOCGIFFLAGS on {name}"),
    )?;
    req.flags |= libc::IFF_UP as libc::c_short;
    // SAFETY: as above.
    cvt(
        unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCSIFFLAGS, &req) },
        || format!("bringing {name} up (SIOCSIFFLAGS)"),
    )?;
    Ok(())
}

/// The `ip` binary: /usr/sbin/ip, /sbin/ip, /usr/bin/ip, /bin/ip, else `ip` from PATH.
fn ip_program() -> &'static Path {
    static IP: OnceLock<PathBuf> = OnceLock::new();
    IP.get_or_init(|| {
        ["/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"]
            .iter()
            .map(PathBuf::from)
            .find(|p| p.is_file())
            .unwrap_or_else(|| PathBuf::from("ip"))
    })
}
