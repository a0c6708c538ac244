//! TUN devices (`IFF_TUN | IFF_NO_PI`, non-persistent, non-blocking fd).
//!
//! The device lives in the network namespace of the thread that opened `/dev/net/tun`, so
//! [`Tun::create`] opens it from a thread inside the target namespace. It is not persistent:
//! it vanishes when its fd is closed (when the [`Tun`] is dropped).

use std::io::{self, Write};
use std::net::Ipv4Addr;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

use crate::netns::{IfReqFlags, NetNs};
use crate::{Error, Result};

/// A TUN device and its fd. Reading gives one IP packet per `read`; writing injects one.
#[derive(Debug)]
pub struct Tun {
    fd: OwnedFd,
    name: String,
}

/// How to configure a TUN device's IPv4 side.
#[derive(Clone, Debug)]
pub struct TunConfig {
    pub addr: Ipv4Addr,
    pub prefix_len: u8,
    pub mtu: u32,
}

impl Tun {
    /// Creates a TUN device in `ns`. `name` may contain `%d` (the kernel picks the lowest free
    /// number, atomically); the actual name is [`Tun::name`].
    pub fn create(ns: &NetNs, name: &str) -> Result<Tun> {
        let name = name.to_string();
        ns.run(move || Tun::create_here(&name))?
    }

    /// Creates a TUN device in the calling thread's namespace.
    pub fn create_here(name: &str) -> Result<Tun> {
        let path = c"/dev/net/tun";
        // SAFETY: plain syscall with a NUL-terminated path.
        let fd = unsafe {
            libc::open(
                path.as_ptr(),
                libc::O_RDWR | libc::O_NONBLOCK | libc::O_CLOEXEC,
            )
        };
        if fd < 0 {
            let err = io::Error::last_os_error();
            let hint = match err.raw_os_error() {
                Some(libc::EACCES) | Some(libc::EPERM) => {
                    " (without root the device must be world read-writable: chmod 0666 \
                     /dev/net/tun, or run as root)"
                }
                Some(libc::ENOENT) | Some(libc::ENODEV) => {
                    " (is the tun module loaded? try `modprobe tun`)"
                }
                _ => "",
            };
            return Err(Error::io(format!("opening /dev/net/tun{hint}"), err));
        }
        // SAFETY: `fd` is a fresh fd we own.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let mut req = IfReqFlags::new(name, (libc::IFF_TUN | libc::IFF_NO_PI) as libc::c_short)?;
        // SAFETY: `req` is a valid 40-byte `struct ifreq`; TUNSETIFF reads and writes it.
        if unsafe { libc::ioctl(fd.as_raw_fd(), libc::TUNSETIFF, &mut req) } != 0 {
            let err = io::Error::last_os_error();
            return Err(Error::io(
                format!("creating TUN device {name:?} (ioctl TUNSETIFF; needs CAP_NET_ADMIN)"),
                err,
            ));
        }
        Ok(Tun {
            fd,
            name: req.name(),
        })
    }

    /// The device's name (as the kernel chose it).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Gives the device an address, its MTU, disables IPv6 on it (no router solicitations or
    /// MLD reports crossing the emulated link) and brings it up. `ns` must be the namespace the
    /// device lives in.
    pub fn configure(&self, ns: &NetNs, config: &TunConfig) -> Result<()> {
        let name = self.name.clone();
        ns.run(move || disable_ipv6(&name))??;
        ns.ip([
            "addr",
            "add",
            &format!("{}/{}", config.addr, config.prefix_len),
            "dev",
            &self.name,
        ])?;
        ns.ip([
            "link",
            "set",
            "dev",
            &self.name,
            "mtu",
            &config.mtu.to_string(),
            "up",
        ])?;
        Ok(())
    }

    /// Adds a route through this device: `dest` is a prefix (`10.0.0.0/8`) or `default`.
    pub fn add_route(&self, ns: &NetNs, dest: &str, via: Option<Ipv4Addr>) -> Result<()> {
        let mut args = vec!["route".to_string(), "add".to_string(), dest.to_string()];
        if let Some(via) = via {
            args.push("via".into());
            args.push(via.to_string());
        }
        args.push("dev".into());
        args.push(self.name.clone());
        ns.ip(&args)?;
        Ok(())
    }
}

impl AsFd for Tun {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl AsRawFd for Tun {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

/// Writes 1 to `/proc/sys/net/ipv6/conf/NAME/disable_ipv6` in the calling thread's namespace
/// (`/proc/sys/net` follows the namespace of the task that looks it up). A kernel without IPv6
/// has no such file, which is fine.
fn disable_ipv6(name: &str) -> Result<()> {
    let path = format!("/proc/sys/net/ipv6/conf/{name}/disable_ipv6");
    match std::fs::OpenOptions::new().write(true).open(&path) {
        Ok(mut file) => file
            .write_all(b"1\n")
            .map_err(|e| Error::io(format!("writing {path}"), e)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Error::io(format!("opening {path}"), e)),
    }
}
