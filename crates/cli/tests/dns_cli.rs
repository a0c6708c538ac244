//! `webpep dns` from the outside: bad flags and configuration files exit 2 with a message
//! naming the problem; a running proxy answers and stops cleanly on SIGTERM.

use std::net::UdpSocket;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_webpep");

fn webpep(args: &[&str]) -> Output {
    Command::new(BIN).args(args).output().expect("run webpep")
}

fn temp_file(tag: &str, contents: &str) -> PathBuf {
    let p = std::env::temp_dir().join(format!("webpep-dns-cli-{}-{tag}.toml", std::process::id()));
    std::fs::write(&p, contents).expect("write temp file");
    p
}

fn assert_bad_input(out: &Output, needle: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "stderr: {stderr}");
    assert!(stderr.contains(needle), "{needle:?} not in: {stderr}");
}

#[test]
fn bad_flags_exit_2() {
    assert_bad_input(&webpep(&["dns", "--listen", "127.0.0.1:0"]), "--upstream");
    assert_bad_input(&webpep(&["dns", "--upstream", "nowhere"]), "nowhere");
    assert_bad_input(
        &webpep(&[
            "dns",
            "--upstream",
            "192.0.2.53:53",
            "--listen",
            "127.0.0.1:0",
            "--rewrite",
            "www",
        ]),
        "--proxy-addr",
    );
    assert_bad_input(
        &webpep(&[
            "dns",
            "--upstream",
            "192.0.2.53:53",
            "--rewrite",
            "a b,c",
            "--proxy-addr",
            "10.0.0.12",
        ]),
        "a b",
    );
    assert_bad_input(
        &webpep(&[
            "dns",
            "--upstream",
            "192.0.2.53:53",
            "--proxy-addr",
            "10.0.0",
        ]),
        "10.0.0",
    );
    assert_bad_input(
        &webpep(&["dns", "--upstream", "192.0.2.53:53", "--ttl", "-5"]),
        "-5",
    );
    assert_bad_input(
        &webpep(&["dns", "--upstream", "192.0.2.53:53", "--frobnicate"]),
        "frobnicate",
    );
}

#[test]
fn bad_config_files_exit_2_naming_the_file() {
    let missing = std::env::temp_dir().join("webpep-dns-cli-no-such-file.toml");
    assert_bad_input(
        &webpep(&["dns", "--config", missing.to_str().unwrap()]),
        "no-such-file",
    );

    let unknown = temp_file(
        "unknown",
        "upstream = \"192.0.2.53:53\"\nproxy-adrs = [\"10.0.0.12\"]\n",
    );
    let out = webpep(&["dns", "--config", unknown.to_str().unwrap()]);
    assert_bad_input(&out, unknown.to_str().unwrap());
    assert_bad_input(&out, "proxy-adrs");

    let syntax = temp_file("syntax", "upstream = \n");
    assert_bad_input(
        &webpep(&["dns", "--config", syntax.to_str().unwrap()]),
        syntax.to_str().unwrap(),
    );

    let no_proxy = temp_file(
        "noproxy",
        "upstream = \"192.0.2.53:53\"\nrewrite = \"all\"\n",
    );
    assert_bad_input(
        &webpep(&["dns", "--config", no_proxy.to_str().unwrap()]),
        "--proxy-addr",
    );

    for p in [unknown, syntax, no_proxy] {
        let _ = std::fs::remove_file(p);
    }
}

#[test]
fn help_documents_every_flag() {
    let out = webpep(&["dns", "--help"]);
    assert_eq!(out.status.code(), Some(0));
    let help = String::from_utf8_lossy(&out.stdout);
    for flag in [
        "--listen",
        "--upstream",
        "--rewrite",
        "--proxy-addr",
        "--ttl",
        "--no-fallback",
        "--config",
        "--timeout-ms",
    ] {
        assert!(help.contains(flag), "{flag} missing from:\n{help}");
    }
}

/// A hand-made query for `www.example.com` A (ID 0x1234, RD), to keep the test free of DNS
/// libraries.
fn query_bytes() -> Vec<u8> {
    let mut q = vec![0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0];
    for label in ["www", "example", "com"] {
        q.push(label.len() as u8);
        q.extend_from_slice(label.as_bytes());
    }
    q.extend_from_slice(&[0, 0, 1, 0, 1]);
    q
}

#[test]
fn serves_servfail_for_a_dead_upstream_and_stops_on_sigterm() {
    // An upstream that never answers: a socket kept bound (so no other test can take its
    // port) and never read.
    let dead = UdpSocket::bind("127.0.0.1:0").unwrap();
    let dead_addr = dead.local_addr().unwrap();
    let free = UdpSocket::bind("127.0.0.1:0").unwrap();
    let listen = free.local_addr().unwrap();
    drop(free);
    let mut child = Command::new(BIN)
        .args([
            "dns",
            "--listen",
            &listen.to_string(),
            "--upstream",
            &dead_addr.to_string(),
            "--timeout-ms",
            "100",
            "--rewrite",
            "www",
            "--proxy-addr",
            "10.0.0.12",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn webpep dns");

    let client = UdpSocket::bind("127.0.0.1:0").unwrap();
    client
        .set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    let mut buf = [0u8; 512];
    let deadline = Instant::now() + Duration::from_secs(10);
    let answer = loop {
        // Retry until the proxy is up.
        client.send_to(&query_bytes(), listen).unwrap();
        if let Ok((n, _)) = client.recv_from(&mut buf) {
            break buf[..n].to_vec();
        }
        assert!(Instant::now() < deadline, "no answer from webpep dns");
    };
    assert_eq!(&answer[..2], &[0x12, 0x34], "the client's ID");
    assert_eq!(answer[2] & 0x80, 0x80, "a response");
    assert_eq!(answer[3] & 0x0f, 2, "SERVFAIL");

    // SAFETY: kill(2) on our own child's pid.
    unsafe {
        libc::kill(child.id() as libc::pid_t, libc::SIGTERM);
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(
            Instant::now() < deadline,
            "webpep dns did not stop on SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(status.code(), Some(0));
}
