//! `webpep server` from the command line: bad flags and configuration files → exit 2 with a
//! message naming the file and key; `--print-config` shows the effective configuration; a
//! real run serves a request and stops on SIGTERM.

use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_webpep");

fn temp_file(name: &str, text: &str) -> std::path::PathBuf {
    let p = std::env::temp_dir().join(format!("webpep-server-cli-{}-{name}", std::process::id()));
    std::fs::write(&p, text).expect("write temp file");
    p
}

fn run(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(BIN).args(args).output().expect("run webpep");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn unknown_config_key_names_file_and_key() {
    let f = temp_file("bad.toml", "[limits]\nmax-pipelin = 4\n");
    let (code, _, err) = run(&["server", "--config", f.to_str().unwrap(), "--print-config"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("bad.toml") && err.contains("max-pipelin"),
        "{err}"
    );
}

#[test]
fn bad_values_and_flags_exit_2() {
    let f = temp_file("badval.toml", "[origin]\nconnect-timeout = \"soon\"\n");
    let (code, _, err) = run(&["server", "--config", f.to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("connect-timeout"), "{err}");
    for args in [
        &["server", "--transcode", "extreme", "--print-config"][..],
        &["server", "--allow-client", "not-a-net", "--print-config"][..],
        &["server", "--congestion", "vegas9", "--print-config"][..],
        &["server", "--dns-upstream", "nowhere", "--print-config"][..],
        &["server", "--config", "/nonexistent/webpep.toml"][..],
    ] {
        let (code, _, err) = run(args);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(!err.is_empty());
    }
}

#[test]
fn print_config_shows_overrides_and_reparses() {
    let (code, out, err) = run(&[
        "server",
        "--listen",
        "127.0.0.1:8080",
        "--no-cache",
        "--transcode",
        "aggressive",
        "--url-rewrite",
        "proxy.test:8080",
        "--allow-client",
        "10.0.0.0/8",
        "--congestion",
        "bbr",
        "--print-config",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("127.0.0.1:8080"), "{out}");
    assert!(out.contains("preset = \"aggressive\""), "{out}");
    assert!(out.contains("proxy.test:8080"), "{out}");
    assert!(out.contains("10.0.0.0/8"), "{out}");
    assert!(out.contains("congestion = \"bbr\""), "{out}");
    let f = temp_file("printed.toml", &out);
    let (code, out2, err) = run(&["server", "--config", f.to_str().unwrap(), "--print-config"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, out2);
}

#[test]
fn serves_and_stops_on_sigterm() {
    // Find a free port, then let the server bind it.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut child = Command::new(BIN)
        .args([
            "server",
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--no-cache",
            "--dns-upstream",
            "127.0.0.1:9",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn");
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut s = loop {
        match std::net::TcpStream::connect(("127.0.0.1", port)) {
            Ok(s) => break s,
            Err(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(50)),
            Err(e) => panic!("server did not start: {e}"),
        }
    };
    // A private destination is refused by default: the proxy is not an open proxy.
    s.write_all(b"GET http://10.1.2.3/ HTTP/1.1\r\nHost: 10.1.2.3\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut resp = String::new();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let _ = s.read_to_string(&mut resp);
    assert!(resp.starts_with("HTTP/1.1 403"), "{resp}");
    // SAFETY: sending SIGTERM to our own child by its pid.
    unsafe {
        libc::kill(child.id() as libc::pid_t, libc::SIGTERM);
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            assert_eq!(st.code(), Some(0));
            break;
        }
        assert!(Instant::now() < deadline, "server did not stop on SIGTERM");
        std::thread::sleep(Duration::from_millis(50));
    }
}
