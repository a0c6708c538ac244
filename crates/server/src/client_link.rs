//! What the kernel knows about the link to a client: the delivery rate and the minimum RTT of
//! the client's TCP connection (Linux `TCP_INFO`), as the edge measures each client's link
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

// Offsets in Linux's `struct tcp_info` (include/uapi/linux/tcp.h), stable since 4.9/4.10.
const SRTT_US: usize = 68;
const MIN_RTT_US: usize = 148;
const DELIVERY_RATE: usize = 160;
/// The length up to and including `tcpi_delivery_rate`.
pub const TCP_INFO_LEN: usize = DELIVERY_RATE + 8;

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn u64_at(b: &[u8], at: usize) -> Option<u64> {
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
        let mut info = [0u8; 232];
        let mut len = info.len() as libc::socklen_t;
        // SAFETY: info and len are valid for writes of the sizes given.
        let rc = unsafe {
            libc::getsockopt(
                fd.as_raw_fd(),
                libc::IPPROTO_TCP,
                libc::TCP_INFO,
                info.as_mut_ptr() as *mut libc::c_void,
                &mut len,
            )
        };
        (rc == 0 && len as usize >= TCP_INFO_LEN).then(|| ClientLink::from_tcp_info(&info))
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

#[cfg(test)]
mod tests {
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
}
