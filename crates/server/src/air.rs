//! Air-side TCP tuning of accepted client sockets (003 §6): congestion control, a small
//! unsent buffer, and keep-alive probes that keep the radio channel up while the client is
//! active and stop after `probe-stop` without requests. The on/off decision is a pure state
//! machine ([`ProbeSchedule`]); the setsockopt calls are a thin shell.

use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use socket2::{SockRef, TcpKeepalive};

use crate::config::AirConfig;

/// Applies congestion control and TCP_NOTSENT_LOWAT. Failures are logged, not fatal: a
/// missing congestion module must not stop the proxy.
pub fn tune_accepted(sock: &tokio::net::TcpStream, cfg: &AirConfig) {
    if let Some(cc) = cfg.congestion {
        let name = cc.name();
        // SAFETY: valid fd, pointer/length of a live byte slice.
        let rc = unsafe {
            libc::setsockopt(
                sock.as_raw_fd(),
                libc::IPPROTO_TCP,
                libc::TCP_CONGESTION,
                name.as_ptr().cast(),
                name.len() as libc::socklen_t,
            )
        };
        if rc != 0 {
            tracing::warn!(congestion = name, error = %std::io::Error::last_os_error(), "TCP_CONGESTION failed");
        }
    }
    // 0 means "leave the system default" (the lab writes 0 for untuned runs).
    if let Some(lowat) = cfg.notsent_lowat.filter(|&l| l > 0) {
        let v: libc::c_int = lowat.min(i32::MAX as u32) as libc::c_int;
        // SAFETY: valid fd, pointer to a live c_int.
        let rc = unsafe {
            libc::setsockopt(
                sock.as_raw_fd(),
                libc::IPPROTO_TCP,
                libc::TCP_NOTSENT_LOWAT,
                (&v as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if rc != 0 {
            tracing::warn!(error = %std::io::Error::last_os_error(), "TCP_NOTSENT_LOWAT failed");
        }
    }
    let _ = sock.set_nodelay(true);
}

/// Switches keep-alive probes on (with `interval` as idle time and probe interval) or off.
pub fn set_probes(sock: SockRef<'_>, on: bool, interval: Duration) {
    let r = if on {
        let ka = TcpKeepalive::new()
            .with_time(interval)
            .with_interval(interval);
        sock.set_tcp_keepalive(&ka)
    } else {
        sock.set_keepalive(false)
    };
    if let Err(e) = r {
        tracing::warn!(error = %e, on, "keep-alive probe setting failed");
    }
}

/// Reads the congestion control of a socket (for tests and diagnostics).
pub fn congestion_of(sock: &impl AsRawFd) -> Option<String> {
    let mut buf = [0u8; 32];
    let mut len = buf.len() as libc::socklen_t;
    // SAFETY: valid fd; buffer and length describe live memory.
    let rc = unsafe {
        libc::getsockopt(
            sock.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_CONGESTION,
            buf.as_mut_ptr().cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return None;
    }
    let n = buf[..len as usize]
        .iter()
        .position(|&b| b == 0)
        .unwrap_or(len as usize);
    Some(String::from_utf8_lossy(&buf[..n]).into_owned())
}

/// When keep-alive probes should be on: from a request until `stop` without requests.
#[derive(Debug, Clone)]
pub struct ProbeSchedule {
    stop: Duration,
    last_request: Option<Instant>,
    on: bool,
}

impl ProbeSchedule {
    /// Probes stop after `stop` without requests.
    pub fn new(stop: Duration) -> Self {
        ProbeSchedule {
            stop,
            last_request: None,
            on: false,
        }
    }

    /// A request arrived: returns `Some(true)` when probes must be switched on.
    pub fn on_request(&mut self, now: Instant) -> Option<bool> {
        self.last_request = Some(now);
        if self.on {
            None
        } else {
            self.on = true;
            Some(true)
        }
    }

    /// Time passed: returns `Some(false)` when probes must be switched off.
    pub fn on_tick(&mut self, now: Instant) -> Option<bool> {
        match self.last_request {
            Some(t) if self.on && now.saturating_duration_since(t) >= self.stop => {
                self.on = false;
                Some(false)
            }
            _ => None,
        }
    }

    /// When the next `on_tick` could change something.
    pub fn next_deadline(&self) -> Option<Instant> {
        if self.on {
            self.last_request.map(|t| t + self.stop)
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probes_follow_activity() {
        let t0 = Instant::now();
        let mut p = ProbeSchedule::new(Duration::from_secs(20));
        assert_eq!(p.next_deadline(), None);
        assert_eq!(p.on_request(t0), Some(true));
        assert_eq!(p.on_request(t0 + Duration::from_secs(5)), None);
        assert_eq!(p.on_tick(t0 + Duration::from_secs(24)), None);
        assert_eq!(p.next_deadline(), Some(t0 + Duration::from_secs(25)));
        assert_eq!(p.on_tick(t0 + Duration::from_secs(25)), Some(false));
        assert_eq!(p.on_tick(t0 + Duration::from_secs(99)), None);
        assert_eq!(p.on_request(t0 + Duration::from_secs(100)), Some(true));
    }

    #[tokio::test]
    async fn tuning_applies_to_a_socket() {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let c = tokio::net::TcpStream::connect(addr).await.unwrap();
        let (s, _) = l.accept().await.unwrap();
        let cfg = AirConfig {
            congestion: Some(crate::config::Congestion::Cubic),
            notsent_lowat: Some(16384),
            ..AirConfig::default()
        };
        tune_accepted(&s, &cfg);
        assert_eq!(congestion_of(&s).as_deref(), Some("cubic"));
        set_probes(SockRef::from(&s), true, Duration::from_secs(4));
        assert!(SockRef::from(&s).keepalive().unwrap());
        assert_eq!(
            SockRef::from(&s).keepalive_time().unwrap(),
            Duration::from_secs(4)
        );
        set_probes(SockRef::from(&s), false, Duration::from_secs(4));
        assert!(!SockRef::from(&s).keepalive().unwrap());
        drop(c);
    }
}
