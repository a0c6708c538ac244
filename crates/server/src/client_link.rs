//! What the kernel knows about the link to a client: the delivery rate and the minimum RTT of
//! the client's TCP connection (Linux `TCP_INFO`), or of a client proxy's QUIC connection (its
//! controller's and RTT estimator's), as the edge measures each client's link
//! (issue 33: inline sizes, waits and transforms are to scale with rate × RTT). The parse is
//! pure; [`ClientLink::of_socket`] is the one system call.

use std::time::Duration;

/// A client connection's link as TCP measured it so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientLink {
    /// The most recent delivery-rate sample (bytes per second); `None` before the
    /// connection has delivered data to the client.
    pub delivery_rate: Option<u64>,
    /// The least RTT seen on the connection; `None` before the first sample.
    pub min_rtt: Option<Duration>,
    /// The smoothed RTT.
    pub srtt: Option<Duration>,
}

impl ClientLink {
    /// The link a time-scaled link (rates ×`k`, delays ÷`k`, as the lab runs) stands for.
    pub fn unscaled(self, k: f64) -> ClientLink {
        if !(k.is_finite() && k > 0.0) || k == 1.0 {
            return self;
        }
        ClientLink {
            delivery_rate: self.delivery_rate.map(|r| (r as f64 / k).round() as u64),
            min_rtt: self.min_rtt.map(|d| d.mul_f64(k)),
            srtt: self.srtt.map(|d| d.mul_f64(k)),
        }
    }
}

impl ClientLink {
    /// A client proxy's link as the QUIC connection to it measured it (its congestion
    /// controller's delivery rate, its RTT estimator's minimum and smoothed RTT).
    pub fn of_path(p: webpep_transport::PathEstimate) -> ClientLink {
        let nonzero = |d: Duration| (!d.is_zero()).then_some(d);
        ClientLink {
            delivery_rate: p.rate.map(|r| r.round() as u64).filter(|&r| r > 0),
            min_rtt: nonzero(p.min_rtt),
            srtt: nonzero(p.srtt),
        }
    }
}

// Offsets in Linux's `struct tcp_info` (include/uapi/linux/tcp.h), stable since 4.9/4.10.
const SRTT_US: usize = 68;
const MIN_RTT_US: usize = 148;
const DELIVERY_RATE: usize = 160;
/// The length up to and including `tcpi_delivery_rate`.
pub const TCP_INFO_LEN: usize = DELIVERY_RATE + 8;

/// `getsockopt(TCP_INFO)` of the socket `fd` (open for the call), when the kernel filled in
/// at least [`TCP_INFO_LEN`] bytes (the rest stays zero).
pub fn tcp_info(fd: std::os::fd::RawFd) -> Option<[u8; 232]> {
    let mut info = [0u8; 232];
    let mut len = info.len() as libc::socklen_t;
    // SAFETY: info and len are valid for writes of the sizes given.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            info.as_mut_ptr() as *mut libc::c_void,
            &mut len,
        )
    };
    (rc == 0 && len as usize >= TCP_INFO_LEN).then_some(info)
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

pub(crate) fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_ne_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

impl ClientLink {
    /// From the bytes `getsockopt(TCP_INFO)` filled in (as many as the kernel gave). Fields
    /// the kernel did not fill, or that are still zero (no sample yet), are `None`; a minimum
    /// RTT of `u32::MAX` is the kernel's "none yet".
    pub fn from_tcp_info(info: &[u8]) -> ClientLink {
        let rtt = |at| {
            u32_at(info, at)
                .filter(|&us| us > 0 && us != u32::MAX)
                .map(|us| Duration::from_micros(u64::from(us)))
        };
        ClientLink {
            delivery_rate: u64_at(info, DELIVERY_RATE).filter(|&r| r > 0),
            min_rtt: rtt(MIN_RTT_US),
            srtt: rtt(SRTT_US),
        }
    }

    /// The link of a TCP socket, or `None` when the kernel cannot say (not TCP, an old
    /// kernel).
    pub fn of_socket(fd: std::os::fd::BorrowedFd<'_>) -> Option<ClientLink> {
        use std::os::fd::AsRawFd;
        tcp_info(fd.as_raw_fd()).map(|info| ClientLink::from_tcp_info(&info))
    }

    /// The delivery rate in kbit/s, if measured.
    pub fn rate_kbps(&self) -> Option<f64> {
        self.delivery_rate.map(|b| b as f64 * 8.0 / 1000.0)
    }

    /// Rate × minimum RTT in bytes: what the link holds in flight, the scale for how much
    /// a response may grow or wait.
    pub fn bdp_bytes(&self) -> Option<u64> {
        Some((self.delivery_rate? as f64 * self.min_rtt?.as_secs_f64()) as u64)
    }
}

/// How many clients' links are remembered at most (the memory is cleared when full).
pub const REMEMBERED_CLIENTS: usize = 65_536;

/// How long a client's measured link is used for its later requests.
pub const REMEMBERED_FOR: Duration = Duration::from_secs(600);

/// How long a client's highest delivery-rate sample stands for its link's rate.
pub const RATE_WINDOW: Duration = Duration::from_secs(10);

/// Each client's link as measured (after each response to it, on any of its connections),
/// for the decisions on its next requests: a new connection has measured nothing yet, but
/// the client's link is the same. The rate is the highest sample of the last
/// [`RATE_WINDOW`] (a windowed maximum, as BBR filters its bandwidth samples): one
/// connection's sample is at most its share of the link, and less when it had little to send
/// (a browser spreads a page over dozens of connections, each with a few small responses;
/// over an LTE trace of 4.6 Mbit/s they measured a median of 0.5 Mbit/s). The minimum RTT is
/// the least seen while remembered; the smoothed RTT is the latest.
#[derive(Debug, Default)]
pub struct ClientLinks {
    seen: std::sync::Mutex<std::collections::HashMap<std::net::IpAddr, Remembered>>,
    /// Every client's link taken to be this, whatever was measured (tests).
    fixed: Option<ClientLink>,
}

#[derive(Debug, Clone, Copy)]
struct Remembered {
    link: ClientLink,
    /// When the last sample came.
    at: std::time::Instant,
    /// When the rate in `link` (the window's highest) was sampled.
    rate_at: std::time::Instant,
}

impl ClientLinks {
    /// Links as measured.
    pub fn new() -> ClientLinks {
        ClientLinks::default()
    }

    /// Every client's link taken to be `link` (tests: a loopback connection measures no
    /// link worth scaling by).
    pub fn fixed(link: ClientLink) -> ClientLinks {
        ClientLinks {
            fixed: Some(link),
            ..ClientLinks::default()
        }
    }

    /// Adds `link`, a connection's sample, to `client`'s link when it measured both a rate
    /// and an RTT.
    pub fn measured(&self, client: std::net::IpAddr, link: ClientLink, now: std::time::Instant) {
        let (Some(rate), Some(min_rtt)) = (link.delivery_rate, link.min_rtt) else {
            return;
        };
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        if seen.len() >= REMEMBERED_CLIENTS && !seen.contains_key(&client) {
            seen.clear();
        }
        let before = seen
            .get(&client)
            .filter(|r| now.saturating_duration_since(r.at) <= REMEMBERED_FOR)
            .copied();
        let next = match before {
            None => Remembered {
                link,
                at: now,
                rate_at: now,
            },
            Some(r) => {
                let old_rate = r.link.delivery_rate.unwrap_or(0);
                let window_over = now.saturating_duration_since(r.rate_at) > RATE_WINDOW;
                let (rate, rate_at) = if window_over || rate >= old_rate {
                    (rate, now)
                } else {
                    (old_rate, r.rate_at)
                };
                Remembered {
                    link: ClientLink {
                        delivery_rate: Some(rate),
                        min_rtt: Some(r.link.min_rtt.map_or(min_rtt, |m| m.min(min_rtt))),
                        srtt: link.srtt.or(r.link.srtt),
                    },
                    at: now,
                    rate_at,
                }
            }
        };
        seen.insert(client, next);
    }

    /// `client`'s link as measured within [`REMEMBERED_FOR`] of `now`.
    pub fn get(&self, client: std::net::IpAddr, now: std::time::Instant) -> Option<ClientLink> {
        if self.fixed.is_some() {
            return self.fixed;
        }
        let seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        seen.get(&client)
            .filter(|r| now.saturating_duration_since(r.at) <= REMEMBERED_FOR)
            .map(|r| r.link)
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn a_time_scaled_link_is_read_as_the_link_it_stands_for() {
        let scaled = ClientLink {
            delivery_rate: Some(47_500),
            min_rtt: Some(Duration::from_millis(70)),
            srtt: Some(Duration::from_millis(90)),
        };
        let real = scaled.unscaled(10.0);
        assert_eq!(real.delivery_rate, Some(4_750));
        assert_eq!(real.min_rtt, Some(Duration::from_millis(700)));
        assert_eq!(real.srtt, Some(Duration::from_millis(900)));
        assert_eq!(scaled.unscaled(1.0), scaled);
        let unknown = ClientLink {
            delivery_rate: None,
            min_rtt: None,
            srtt: None,
        };
        assert_eq!(unknown.unscaled(10.0), unknown);
    }

    use super::*;

    #[test]
    fn parses_the_fields_and_treats_zero_as_unknown() {
        let mut info = [0u8; 232];
        info[SRTT_US..SRTT_US + 4].copy_from_slice(&250_000u32.to_ne_bytes());
        info[MIN_RTT_US..MIN_RTT_US + 4].copy_from_slice(&180_000u32.to_ne_bytes());
        info[DELIVERY_RATE..DELIVERY_RATE + 8].copy_from_slice(&4_750u64.to_ne_bytes());
        let l = ClientLink::from_tcp_info(&info);
        assert_eq!(l.min_rtt, Some(Duration::from_millis(180)));
        assert_eq!(l.srtt, Some(Duration::from_millis(250)));
        assert_eq!(l.delivery_rate, Some(4_750));
        assert_eq!(l.rate_kbps(), Some(38.0));
        // 4,750 B/s × 0.18 s.
        assert_eq!(l.bdp_bytes(), Some(855));
        let none = ClientLink::from_tcp_info(&[0u8; 232]);
        assert_eq!(
            (none.delivery_rate, none.min_rtt, none.bdp_bytes()),
            (None, None, None)
        );
        info[MIN_RTT_US..MIN_RTT_US + 4].copy_from_slice(&u32::MAX.to_ne_bytes());
        assert_eq!(ClientLink::from_tcp_info(&info).min_rtt, None);
        // A short buffer (an old kernel): what is there, nothing past it.
        assert_eq!(ClientLink::from_tcp_info(&info[..100]).delivery_rate, None);
    }

    #[test]
    fn a_clients_link_is_remembered_for_a_while() {
        let links = ClientLinks::new();
        let (a, b) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
        let t0 = std::time::Instant::now();
        let l = ClientLink {
            delivery_rate: Some(4_800),
            min_rtt: Some(Duration::from_millis(700)),
            srtt: None,
        };
        links.measured(a, l, t0);
        // Half measured (no rate yet): not remembered.
        links.measured(
            b,
            ClientLink {
                delivery_rate: None,
                ..l
            },
            t0,
        );
        assert_eq!(links.get(a, t0 + Duration::from_secs(1)), Some(l));
        assert_eq!(links.get(b, t0), None);
        assert_eq!(
            links.get(a, t0 + REMEMBERED_FOR + Duration::from_secs(1)),
            None
        );
        let fixed = ClientLinks::fixed(l);
        assert_eq!(fixed.get(b, t0), Some(l));
    }

    #[test]
    fn a_real_connection_reports_its_rtt_and_rate() {
        use std::io::{Read, Write};
        use std::os::fd::AsFd;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let reader = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            let mut buf = vec![0u8; 1 << 20];
            let mut got = 0;
            while got < 1 << 20 {
                match s.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => got += n,
                }
            }
            got
        });
        let mut c = std::net::TcpStream::connect(addr).unwrap();
        c.write_all(&vec![7u8; 1 << 20]).unwrap();
        c.flush().unwrap();
        assert_eq!(reader.join().unwrap(), 1 << 20);
        let link = ClientLink::of_socket(c.as_fd()).expect("TCP_INFO on Linux");
        assert!(link.min_rtt.is_some(), "{link:?}");
        assert!(link.delivery_rate.is_some_and(|r| r > 0), "{link:?}");
        assert!(link.bdp_bytes().is_some());
    }

    #[test]
    fn a_clients_rate_is_the_highest_sample_of_the_window() {
        let links = ClientLinks::new();
        let ip: std::net::IpAddr = "10.0.0.2".parse().unwrap();
        let t0 = std::time::Instant::now();
        let sample = |rate: u64, min_rtt_ms: u64, srtt_ms: u64| ClientLink {
            delivery_rate: Some(rate),
            min_rtt: Some(Duration::from_millis(min_rtt_ms)),
            srtt: Some(Duration::from_millis(srtt_ms)),
        };
        links.measured(ip, sample(60_000, 60, 90), t0);
        // Another connection had more to send and measured more of the link.
        links.measured(ip, sample(400_000, 55, 80), t0 + Duration::from_secs(1));
        // A connection with one small response measures little: the link is no slower.
        links.measured(ip, sample(30_000, 70, 120), t0 + Duration::from_secs(2));
        let l = links.get(ip, t0 + Duration::from_secs(2)).unwrap();
        assert_eq!(l.delivery_rate, Some(400_000));
        assert_eq!(l.min_rtt, Some(Duration::from_millis(55)));
        assert_eq!(l.srtt, Some(Duration::from_millis(120)), "the latest");
        // Once the highest sample is older than the window, the link may have slowed down.
        let later = t0 + Duration::from_secs(1) + RATE_WINDOW + Duration::from_millis(1);
        links.measured(ip, sample(50_000, 65, 100), later);
        assert_eq!(links.get(ip, later).unwrap().delivery_rate, Some(50_000));
        // A client not measured within REMEMBERED_FOR starts over.
        let much_later = later + REMEMBERED_FOR + Duration::from_secs(1);
        assert_eq!(links.get(ip, much_later), None);
        links.measured(ip, sample(20_000, 300, 400), much_later);
        let l = links.get(ip, much_later).unwrap();
        assert_eq!(
            (l.delivery_rate, l.min_rtt),
            (Some(20_000), Some(Duration::from_millis(300)))
        );
    }
}
