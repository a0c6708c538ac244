//! Namespace tests of the link shell: real packets through TUNs and the pump.
//!
//! They need root (CI is root). Without it they print `SKIP: ...` and pass, unless
//! `WEBPEP_REQUIRE_NETNS=1`, which makes them fail instead.

use std::ffi::OsString;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpListener, TcpStream, UdpSocket};
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use webpep_link::{run_command, LinkShell, LogOptions, NetNs};
use webpep_link_model::ResolvedProfile;

/// Tests that run commands take this: a signal sent by one would be forwarded by all.
static COMMANDS: Mutex<()> = Mutex::new(());

fn commands_lock() -> std::sync::MutexGuard<'static, ()> {
    COMMANDS.lock().unwrap_or_else(|p| p.into_inner())
}

use webpep_link::testing::netns_available as can_run;

fn profile() -> ResolvedProfile {
    webpep_link_model::resolve("dialup").expect("the dialup preset resolves")
}

fn shell() -> LinkShell {
    LinkShell::new(profile()).time_scale(10.0).seed(7)
}

/// Names of the links (interfaces) of a namespace.
fn links(ns: &NetNs) -> Vec<String> {
    let out = ns.ip(["-o", "link", "show"]).expect("ip link show");
    out.lines()
        .filter_map(|l| l.split(':').nth(1))
        .map(|n| n.trim().split('@').next().unwrap_or("").to_string())
        .collect()
}

/// Runs `f` on a thread of its own and returns what it returns; fails if it has not returned
/// within `guard` (a bound on a hang, not a measure of speed).
fn returns_within<T: Send + 'static>(
    what: &str,
    guard: Duration,
    f: impl FnOnce() -> T + Send + 'static,
) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    let thread = std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(guard) {
        Ok(v) => {
            thread.join().expect("joined");
            v
        }
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
            std::panic::resume_unwind(thread.join().expect_err("it panicked"))
        }
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
            panic!("{what} did not return within {guard:?}")
        }
    }
}

fn has_wpl(ns: &NetNs) -> bool {
    links(ns).iter().any(|n| n.starts_with("wpl"))
}

/// Whether a wpl device is still there after `wait`: the kernel unregisters a TUN device
/// asynchronously after its last descriptor closes, which takes longer on a loaded machine.
fn wpl_remains(ns: &NetNs, wait: Duration) -> bool {
    let deadline = Instant::now() + wait;
    loop {
        if !has_wpl(ns) {
            return false;
        }
        if Instant::now() >= deadline {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn temp_path(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("webpep-link-test-{}-{name}", std::process::id()))
}

#[test]
fn udp_and_tcp_cross_the_link_and_are_counted() {
    if !can_run("udp_and_tcp_cross_the_link_and_are_counted") {
        return;
    }
    let outer = NetNs::new().expect("outer namespace");
    let link = shell().start(outer.clone()).expect("link starts");
    let outer_addr = link.outer_addr();
    let outer_if = link.outer_ifname().to_string();
    assert!(
        links(&outer).contains(&outer_if),
        "{outer_if} in the outer ns"
    );
    assert!(links(link.inner()).contains(&"wpl0".to_string()));
    // No IPv6 chatter (router solicitations, MLD) on the emulated link.
    for (ns, dev) in [(link.inner(), "wpl0"), (&outer, outer_if.as_str())] {
        let out = ns
            .command("cat")
            .arg(format!("/proc/sys/net/ipv6/conf/{dev}/disable_ipv6"))
            .output()
            .expect("cat");
        let value = String::from_utf8_lossy(&out.stdout).trim().to_string();
        assert!(
            value == "1" || !out.status.success(),
            "IPv6 off on {dev}: {value:?}"
        );
    }

    // UDP: inner -> outer and back.
    let server = outer
        .run(move || UdpSocket::bind((outer_addr, 0)))
        .expect("thread in outer ns")
        .expect("bind UDP in the outer ns");
    server
        .set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    let server_addr = server.local_addr().expect("local addr");
    let client = link
        .inner()
        .run(|| UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0)))
        .expect("thread in inner ns")
        .expect("bind UDP in the inner ns");
    client
        .set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    client.send_to(&[7u8; 100], server_addr).expect("send");
    let mut buf = [0u8; 2048];
    let (n, from) = server
        .recv_from(&mut buf)
        .expect("UDP datagram crosses the link");
    assert_eq!(n, 100);
    assert_eq!(from.ip(), std::net::IpAddr::V4(link.inner_addr()));
    server.send_to(&buf[..n], from).expect("reply");
    let (n, _) = client
        .recv_from(&mut buf)
        .expect("UDP reply crosses the link");
    assert_eq!(n, 100);

    let c = link.counters_now();
    assert!(c.up.delivered_bytes >= 128, "up counted: {c:?}");
    assert!(c.down.delivered_bytes >= 128, "down counted: {c:?}");

    // TCP: 20 KB up, the byte count back.
    let listener = outer
        .run(move || TcpListener::bind((outer_addr, 0)))
        .expect("thread in outer ns")
        .expect("bind TCP in the outer ns");
    let tcp_addr = listener.local_addr().expect("local addr");
    let server = std::thread::spawn(move || -> std::io::Result<usize> {
        let (mut s, _) = listener.accept()?;
        s.set_read_timeout(Some(Duration::from_secs(10)))?;
        let mut total = 0;
        let mut buf = [0u8; 4096];
        loop {
            let n = s.read(&mut buf)?;
            if n == 0 {
                break;
            }
            total += n;
        }
        s.write_all(format!("{total}\n").as_bytes())?;
        Ok(total)
    });
    let mut stream = link
        .inner()
        .run(move || TcpStream::connect_timeout(&tcp_addr, Duration::from_secs(5)))
        .expect("thread in inner ns")
        .expect("TCP connects through the link");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    stream.write_all(&[1u8; 20_000]).expect("send 20 KB");
    stream
        .shutdown(std::net::Shutdown::Write)
        .expect("shutdown");
    let mut reply = String::new();
    stream.read_to_string(&mut reply).expect("reply");
    assert_eq!(reply.trim(), "20000");
    assert_eq!(
        server.join().expect("server thread").expect("server"),
        20_000
    );

    let c = link.counters_now();
    assert!(c.up.delivered_bytes >= 20_000 + 128, "up counted: {c:?}");
    assert!(c.up.delivered_packets >= 15, "up packets: {c:?}");
    assert!(c.down.delivered_packets >= 3, "down packets (ACKs): {c:?}");

    // The stop wakes the pump through its eventfd (an idle pump waits with no timeout): it
    // returns without waiting for the link, and the guard bounds a hang, not speed.
    let report =
        returns_within("stop", Duration::from_secs(30), move || link.stop()).expect("link stops");
    assert!(report.counters.up.delivered_bytes >= c.up.delivered_bytes);
    assert!(!report.up_queue_delays_us.is_empty());
    assert!(
        !links(&outer).contains(&outer_if),
        "{outer_if} vanished after stop: {:?}",
        links(&outer)
    );
}

#[test]
fn links_get_distinct_subnets_and_drop_removes_everything() {
    if !can_run("links_get_distinct_subnets_and_drop_removes_everything") {
        return;
    }
    let outer = NetNs::new().expect("outer namespace");
    // An address already in 10.77.1.0/24 in the outer namespace must be avoided.
    outer
        .ip(["addr", "add", "10.77.1.9/24", "dev", "lo"])
        .expect("address on lo");
    let a = shell().start(outer.clone()).expect("first link");
    let b = shell().start(outer.clone()).expect("second link");
    assert_ne!(a.outer_addr(), b.outer_addr());
    assert_ne!(a.outer_ifname(), b.outer_ifname());
    assert_ne!(a.outer_addr().octets()[2], 1, "10.77.1.0/24 was taken");
    assert_ne!(b.outer_addr().octets()[2], 1, "10.77.1.0/24 was taken");
    // A subnet asked for explicitly but already used is a clear error.
    let err = shell()
        .subnet(a.outer_addr().octets()[2])
        .start(outer.clone())
        .expect_err("subnet in use");
    assert!(err.to_string().contains("already used"), "{err}");
    let inner_a = a.inner().clone();
    assert!(a.is_running() && b.is_running());

    // Both work at the same time.
    for link in [&a, &b] {
        let addr = link.outer_addr();
        let server = outer
            .run(move || UdpSocket::bind((addr, 0)))
            .expect("thread")
            .expect("bind");
        server
            .set_read_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
        let to = server.local_addr().expect("addr");
        link.inner()
            .run(move || {
                let c = UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0))?;
                c.send_to(b"hello", to)
            })
            .expect("thread")
            .expect("send");
        let mut buf = [0u8; 64];
        let (n, _) = server.recv_from(&mut buf).expect("datagram arrives");
        assert_eq!(&buf[..n], b"hello");
    }

    // Dropping two idle links (their pumps wait with no timeout) returns: the drop wakes each
    // pump. The guard bounds a hang, not speed.
    returns_within("drop", Duration::from_secs(30), move || {
        drop(a);
        drop(b);
    });
    assert!(
        !wpl_remains(&outer, Duration::from_secs(3)),
        "no wpl device left: {:?}",
        links(&outer)
    );
    // The inner namespace (kept alive by our handle only) has lost its TUN too.
    assert!(
        !wpl_remains(&inner_a, Duration::from_secs(3)),
        "no wpl device in the inner ns: {:?}",
        links(&inner_a)
    );
}

#[test]
fn the_log_files_are_written() {
    if !can_run("the_log_files_are_written") {
        return;
    }
    for (name, options) in [
        ("packets.csv", LogOptions::packets(temp_path("packets.csv"))),
        (
            "interval.csv",
            LogOptions::interval(temp_path("interval.csv"), 50.0),
        ),
    ] {
        let outer = NetNs::new().expect("outer namespace");
        let link = shell()
            .log(Some(options.clone()))
            .start(outer.clone())
            .expect("link starts");
        let addr = link.outer_addr();
        let server = outer
            .run(move || UdpSocket::bind((addr, 0)))
            .expect("thread")
            .expect("bind");
        server
            .set_read_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
        let to = server.local_addr().expect("addr");
        link.inner()
            .run(move || {
                let c = UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0))?;
                for _ in 0..5 {
                    c.send_to(&[0u8; 472], to)?;
                }
                Ok::<_, std::io::Error>(())
            })
            .expect("thread")
            .expect("send");
        let mut buf = [0u8; 1024];
        for _ in 0..5 {
            server.recv_from(&mut buf).expect("datagram arrives");
        }
        // The stop drains the model's events into the log and writes the partial interval:
        // nothing to wait for.
        link.stop().expect("stop");
        let text = std::fs::read_to_string(&options.path).expect("log exists");
        let _ = std::fs::remove_file(&options.path);
        let mut lines = text.lines();
        if name == "packets.csv" {
            assert_eq!(
                lines.next(),
                Some("time_ms,direction,event,bytes,queue_bytes,delay_ms")
            );
            let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
            let ups = |ev: &str| {
                rows.iter()
                    .filter(|r| r[1] == "up" && r[2] == ev && r[3] == "500")
                    .count()
            };
            assert_eq!(ups("+"), 5, "{text}");
            assert_eq!(ups("-"), 5, "{text}");
            // Unscaled delays: dialup one-way delay is 50 ms (+ jitter, + 500 B at 33.6 kbps).
            let delay: f64 = rows
                .iter()
                .find(|r| r[1] == "up" && r[2] == "-")
                .map(|r| r[5].parse().expect("delay_ms is a number"))
                .expect("a delivery row");
            assert!((50.0..400.0).contains(&delay), "unscaled delay {delay} ms");
        } else {
            assert_eq!(
                lines.next(),
                Some(
                    "t_ms,down_bytes,up_bytes,down_drops,up_drops,\
                     down_queue_delay_ms_mean,up_queue_delay_ms_mean"
                )
            );
            let rows: Vec<Vec<String>> = lines
                .map(|l| l.split(',').map(str::to_string).collect())
                .collect();
            assert!(rows.len() >= 2, "{text}");
            let up: u64 = rows
                .iter()
                .map(|r| r[2].parse::<u64>().expect("bytes"))
                .sum();
            assert!(up >= 2500, "up bytes {up}: {text}");
            let t: Vec<f64> = rows.iter().map(|r| r[0].parse().expect("t_ms")).collect();
            assert!(
                t.windows(2).all(|w| (w[1] - w[0] - 50.0).abs() < 1e-6),
                "{t:?}"
            );
        }
    }
}

#[test]
fn run_command_returns_exit_codes() {
    if !can_run("run_command_returns_exit_codes") {
        return;
    }
    let _guard = commands_lock();
    let outer = NetNs::new().expect("outer namespace");
    let sh = |script: &str| -> Vec<OsString> { vec!["sh".into(), "-c".into(), script.into()] };
    let s = shell();
    assert_eq!(
        run_command(&s, outer.clone(), &sh("exit 3")).expect("runs"),
        3
    );
    assert_eq!(
        run_command(&s, outer.clone(), &sh("exit 0")).expect("runs"),
        0
    );
    assert_eq!(
        run_command(&s, outer.clone(), &sh("kill -TERM $$")).expect("runs"),
        128 + libc::SIGTERM
    );
    assert_eq!(
        run_command(&s, outer.clone(), &sh("kill -SEGV $$")).expect("runs"),
        128 + libc::SIGSEGV
    );
    // The command sees only the link: wpl0 with the inner address, default route via it.
    let check = "ip -o -4 addr show dev wpl0 | grep -q \"inet $WEBPEP_LINK_INNER_ADDR/24\" \
                 && ip route | grep -q \"default via $WEBPEP_LINK_OUTER_ADDR dev wpl0\" \
                 && test \"$(ip -o link show | grep -vc ': lo:')\" = 1";
    assert_eq!(run_command(&s, outer.clone(), &sh(check)).expect("runs"), 0);
    assert!(
        !wpl_remains(&outer, Duration::from_secs(3)),
        "nothing left: {:?}",
        links(&outer)
    );
}

#[test]
fn run_command_kills_leftovers_and_reports_missing_programs() {
    if !can_run("run_command_kills_leftovers_and_reports_missing_programs") {
        return;
    }
    let _guard = commands_lock();
    let outer = NetNs::new().expect("outer namespace");
    let s = shell();

    let err = run_command(
        &s,
        outer.clone(),
        &["/nonexistent/webpep-no-such-command".into()],
    )
    .expect_err("a missing program is an error");
    assert!(
        err.to_string().contains("webpep-no-such-command"),
        "error names the program: {err}"
    );
    assert!(
        !wpl_remains(&outer, Duration::from_secs(3)),
        "nothing left: {:?}",
        links(&outer)
    );
    assert!(run_command(&s, outer.clone(), &[]).is_err());

    // A background process of the command is killed when the command exits.
    let pid_file = temp_path("bg.pid");
    let script = format!("sleep 60 & echo $! > {}; exit 5", pid_file.display());
    let code = run_command(
        &s,
        outer.clone(),
        &["sh".into(), "-c".into(), script.into()],
    )
    .expect("runs");
    assert_eq!(code, 5);
    let pid: i32 = std::fs::read_to_string(&pid_file)
        .expect("pid file")
        .trim()
        .parse()
        .expect("pid");
    let _ = std::fs::remove_file(&pid_file);
    assert!(
        process_gone(pid, Duration::from_secs(5)),
        "background sleep {pid} killed"
    );
    assert!(
        !wpl_remains(&outer, Duration::from_secs(3)),
        "nothing left: {:?}",
        links(&outer)
    );
}

#[test]
fn sigint_is_forwarded_to_the_command() {
    if !can_run("sigint_is_forwarded_to_the_command") {
        return;
    }
    let _guard = commands_lock();
    // A test run started in the background by a shell without job control inherits SIGINT
    // ignored, and the shell rightly leaves ignored signals ignored (as under nohup); this
    // test is about forwarding, so it starts from the default disposition.
    // SAFETY: plain syscall; the default disposition is always valid.
    unsafe { libc::signal(libc::SIGINT, libc::SIG_DFL) };
    let outer = NetNs::new().expect("outer namespace");
    let s = shell();
    let pid_file = temp_path("fg.pid");
    let script = format!("echo $$ > {}; exec sleep 30", pid_file.display());
    let _ = std::fs::remove_file(&pid_file);
    let runner = {
        let outer = outer.clone();
        std::thread::spawn(move || {
            run_command(&s, outer, &["sh".into(), "-c".into(), script.into()])
        })
    };
    // Wait until the command runs `sleep` (so our handlers are installed and it has started).
    let deadline = Instant::now() + Duration::from_secs(10);
    let pid = loop {
        assert!(Instant::now() < deadline, "the command did not start");
        if let Some(pid) = std::fs::read_to_string(&pid_file)
            .ok()
            .and_then(|s| s.trim().parse::<i32>().ok())
        {
            let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
            if comm.trim() == "sleep" {
                break pid;
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let _ = std::fs::remove_file(&pid_file);
    // Ctrl-C: SIGINT to our own process; the handler forwards it to the command's group.
    // SAFETY: plain syscall.
    unsafe { libc::kill(libc::getpid(), libc::SIGINT) };
    let code = runner
        .join()
        .expect("runner thread")
        .expect("run_command returns");
    assert_eq!(code, 128 + libc::SIGINT);
    assert!(
        process_gone(pid, Duration::from_secs(5)),
        "sleep {pid} is gone"
    );
    assert!(
        !wpl_remains(&outer, Duration::from_secs(3)),
        "nothing left: {:?}",
        links(&outer)
    );
}

/// Whether `pid` is gone (or a zombie) within `within`.
fn process_gone(pid: i32, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    loop {
        match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            Err(_) => return true,
            Ok(stat) => {
                let state = stat
                    .rsplit_once(')')
                    .and_then(|(_, rest)| rest.split_whitespace().next())
                    .unwrap_or("");
                if state == "Z" || state == "X" {
                    return true;
                }
            }
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
