//! `webpep server` from the command line: bad flags and configuration files → exit 2 with a
//! message naming the file and key; `--print-config` shows the effective configuration; a
//! real run serves a request and stops on SIGTERM.

use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_webpep");

/// A file in the temp directory, removed when the guard goes (also when a test fails).
struct TempFile(std::path::PathBuf);

impl TempFile {
    fn to_str(&self) -> Option<&str> {
        self.0.to_str()
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn temp_file(name: &str, text: &str) -> TempFile {
    let p = std::env::temp_dir().join(format!("webpep-server-cli-{}-{name}", std::process::id()));
    std::fs::write(&p, text).expect("write temp file");
    TempFile(p)
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
        &["server", "--initial-rto", "soon", "--print-config"][..],
        &["server", "--initial-rto", "0", "--print-config"][..],
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
        "--initial-rto",
        "7s",
        "--no-tls-relay",
        "--no-prefetch",
        "--no-inline",
        "--no-inline-images",
        "--print-config",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("127.0.0.1:8080"), "{out}");
    assert!(out.contains("preset = \"aggressive\""), "{out}");
    assert!(out.contains("proxy.test:8080"), "{out}");
    assert!(out.contains("10.0.0.0/8"), "{out}");
    assert!(out.contains("congestion = \"bbr\""), "{out}");
    assert!(out.contains("initial-rto = \"7s\""), "{out}");
    assert!(out.contains("tls-relay = false"), "{out}");
    assert!(out.contains("[prefetch]\nenabled = false"), "{out}");
    assert!(out.contains("[inline]\nenabled = false"), "{out}");
    assert!(out.contains("\nimages = false"), "{out}");
    let f = temp_file("printed.toml", &out);
    let (code, out2, err) = run(&["server", "--config", f.to_str().unwrap(), "--print-config"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, out2);
}

/// Starts `webpep server` on a free loopback port with `extra` flags; returns the child and
/// the port once it accepts connections.
fn start_server(extra: &[&str]) -> (std::process::Child, u16) {
    // The server binds a port of the system's choosing and names it in its first log line:
    // a port found free here could be taken by another test before the server binds it.
    let mut args = vec![
        "server",
        "--listen",
        "127.0.0.1:0",
        "--no-cache",
        "--dns-upstream",
        "127.0.0.1:9",
    ];
    args.extend_from_slice(extra);
    let mut child = Command::new(BIN)
        .args(&args)
        .env("WEBPEP_LOG", "info")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let stderr = child.stderr.take().expect("stderr");
    let (tx, rx) = std::sync::mpsc::channel();
    // Reads the log to its end (the access log must not fill the pipe), sending the port on.
    std::thread::spawn(move || {
        use std::io::BufRead;
        let mut tx = Some(tx);
        for line in std::io::BufReader::new(stderr).lines() {
            let Ok(line) = line else { return };
            if let Some(port) = line
                .split_once("proxy on 127.0.0.1:")
                .and_then(|(_, rest)| rest.split(|c: char| !c.is_ascii_digit()).next())
                .and_then(|p| p.parse::<u16>().ok())
            {
                if let Some(tx) = tx.take() {
                    let _ = tx.send(port);
                }
            }
        }
    });
    let port = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("the server names its port within 10 s");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match std::net::TcpStream::connect(("127.0.0.1", port)) {
            Ok(_) => return (child, port),
            Err(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(50)),
            Err(e) => panic!("server did not start: {e}"),
        }
    }
}

/// One request on a new connection; the whole response as text.
fn exchange(port: u16, request: &str) -> String {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
    s.write_all(request.as_bytes()).unwrap();
    let mut resp = String::new();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let _ = s.read_to_string(&mut resp);
    resp
}

/// Sends SIGTERM and expects a clean exit within 10 s.
fn stop_server(mut child: std::process::Child) {
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

#[test]
fn serves_and_stops_on_sigterm() {
    let (child, port) = start_server(&[]);
    // A private destination is refused by default: the proxy is not an open proxy.
    let resp = exchange(
        port,
        "GET http://10.1.2.3/ HTTP/1.1\r\nHost: 10.1.2.3\r\nConnection: close\r\n\r\n",
    );
    assert!(resp.starts_with("HTTP/1.1 403"), "{resp}");
    stop_server(child);
}

#[test]
fn a_hashed_password_logs_in_to_the_real_server() {
    // The password comes on stdin, never as an argument.
    let mut child = Command::new(BIN)
        .args(["server", "--hash-password", "alice"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"secret pw\n")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{:?}", out);
    let line = String::from_utf8(out.stdout).unwrap();
    assert!(line.starts_with("alice:$pbkdf2-sha256$"), "{line}");
    assert!(!line.contains("secret"), "{line}");
    let users = temp_file("users", &line);
    let (child, port) = start_server(&["--users-file", users.to_str().unwrap()]);
    let get = |auth: &str| {
        exchange(
            port,
            &format!("GET http://10.1.2.3/ HTTP/1.1\r\nHost: 10.1.2.3\r\n{auth}Connection: close\r\n\r\n"),
        )
    };
    let none = get("");
    assert!(none.starts_with("HTTP/1.1 407"), "{none}");
    assert!(none.contains("realm=\"webpep\""), "{none}");
    let wrong = get("Proxy-Authorization: Basic YWxpY2U6d3Jvbmc=\r\n");
    assert!(wrong.starts_with("HTTP/1.1 407"), "{wrong}");
    // Logged in, the request goes on to the destination check: 10.0.0.0/8 is refused.
    let right = get("Proxy-Authorization: Basic YWxpY2U6c2VjcmV0IHB3\r\n");
    assert!(right.starts_with("HTTP/1.1 403"), "{right}");
    stop_server(child);
    // No password on stdin: exit 2 with a reason.
    let out = Command::new(BIN)
        .args(["server", "--hash-password"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--hash-password"));
}

/// An origin on loopback that reads each request's head and then resets the connection
/// (SO_LINGER 0) while the proxy is still sending the body.
/// Verified to kill a proxy that restores the default SIGPIPE disposition.
fn resetting_origin() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { return };
            let mut head = Vec::new();
            let mut b = [0u8; 4096];
            while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                match s.read(&mut b) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => head.extend_from_slice(&b[..n]),
                }
            }
            let linger = libc::linger {
                l_onoff: 1,
                l_linger: 0,
            };
            use std::os::fd::AsRawFd;
            // SAFETY: a valid socket and a live linger struct of the given size.
            unsafe {
                libc::setsockopt(
                    s.as_raw_fd(),
                    libc::SOL_SOCKET,
                    libc::SO_LINGER,
                    (&linger as *const libc::linger).cast(),
                    std::mem::size_of::<libc::linger>() as libc::socklen_t,
                );
            }
            drop(s);
        }
    });
    port
}

/// A plain origin answering every request with 200 "fine".
fn fine_origin() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { return };
            let mut head = Vec::new();
            let mut b = [0u8; 4096];
            while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                match s.read(&mut b) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => head.extend_from_slice(&b[..n]),
                }
            }
            let _ = s.write_all(
                b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\nConnection: close\r\n\r\nfine",
            );
        }
    });
    port
}

/// An origin that resets an upload mid-body must not kill the proxy: the write that fails is
/// a vectored one, which raises SIGPIPE unless the process ignores it (issue 30: 7 of 8
/// proxies died within 5 uploads of 8 MB, exit status 141, every client dropped).
#[test]
fn an_origin_resetting_an_upload_does_not_kill_the_proxy() {
    let (mut child, port) = start_server(&["--allow-destination", "127.0.0.0/8"]);
    let bad = resetting_origin();
    let good = fine_origin();
    let body = vec![b'u'; 8 << 20];
    for i in 0..5 {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let head = format!(
            "POST http://127.0.0.1:{bad}/upload HTTP/1.1\r\nHost: 127.0.0.1:{bad}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            body.len()
        );
        s.write_all(head.as_bytes()).unwrap();
        let _ = s.write_all(&body);
        let mut resp = Vec::new();
        let _ = s.read_to_end(&mut resp);
        assert!(
            child.try_wait().unwrap().is_none(),
            "the proxy died after upload {i}: {:?}",
            child.try_wait()
        );
    }
    let resp = exchange(
        port,
        &format!("GET http://127.0.0.1:{good}/ HTTP/1.1\r\nHost: 127.0.0.1:{good}\r\nConnection: close\r\n\r\n"),
    );
    assert!(
        resp.starts_with("HTTP/1.1 200") && resp.ends_with("fine"),
        "{resp}"
    );
    stop_server(child);
}

#[test]
fn check_config_accepts_a_good_file_and_names_file_line_and_key_of_a_bad_one() {
    let good = temp_file(
        "good.toml",
        "listen = [\"127.0.0.1:3128\"]\n[limits]\nheader-timeout = \"10s\"\n",
    );
    let (code, out, err) = run(&["server", "--check-config", good.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert!(out.trim_end().ends_with(": ok"), "{out}");
    let bad = temp_file(
        "bad-check.toml",
        "[limits]\nmax-pipeline = 4\nheader-timeot = \"1s\"\n",
    );
    let (code, _, err) = run(&["server", "--check-config", bad.to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("bad-check.toml") && err.contains("line 3") && err.contains("header-timeot"),
        "{err}"
    );
    let (code, _, err) = run(&["server", "--log-format", "xml", "--print-config"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("text") && err.contains("json"), "{err}");
    // The files the keys name are read, as a start would read them.
    let roots = temp_file("not-pem.txt", "no certificate here\n");
    let missing = roots.0.with_file_name("no-such-ca-dir");
    let cases = [
        (
            "roots.toml",
            format!(
                "[origin]\ntls-roots = [{:?}]\n",
                roots.0.display().to_string()
            ),
            "origin.tls-roots",
        ),
        (
            "ca.toml",
            format!(
                "[intercept]\nenabled = true\nca-dir = {:?}\n",
                missing.display().to_string()
            ),
            "intercept.ca-dir",
        ),
    ];
    for (name, text, key) in cases {
        let f = temp_file(name, &text);
        let (code, _, err) = run(&["server", "--check-config", f.to_str().unwrap()]);
        assert_eq!(code, 2, "{name}: {err}");
        assert!(err.contains(name) && err.contains(key), "{err}");
    }
}

/// The log an operator gets without setting anything: a start line naming the listeners and
/// the access log, plain text in a file (no colour codes), or JSON lines with `--log-format`.
#[test]
fn the_server_logs_its_start_and_each_request_without_colour_codes() {
    for format in ["text", "json"] {
        // A port of the system's choosing, read from the log (a port found free here could
        // be taken by another test first).
        let mut child = Command::new(BIN)
            .args([
                "server",
                "--listen",
                "127.0.0.1:0",
                "--no-cache",
                "--dns-upstream",
                "127.0.0.1:9",
                "--log-format",
                format,
            ])
            .env_remove("WEBPEP_LOG")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn");
        let stderr = child.stderr.take().expect("stderr");
        let (tx, rx) = std::sync::mpsc::channel();
        // Reads the whole log, sending the port on when it is named.
        let reader = std::thread::spawn(move || {
            use std::io::BufRead;
            let mut lines = Vec::new();
            for line in std::io::BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                if let Some(port) = line
                    .split_once("proxy on 127.0.0.1:")
                    .and_then(|(_, rest)| rest.split(|c: char| !c.is_ascii_digit()).next())
                    .and_then(|p| p.parse::<u16>().ok())
                {
                    let _ = tx.send(port);
                }
                lines.push(line);
            }
            lines.join("\n")
        });
        let port = rx
            .recv_timeout(Duration::from_secs(30))
            .expect("the server names its port");
        let listen = format!("127.0.0.1:{port}");
        let resp = exchange(
            port,
            "GET http://10.1.2.3/x HTTP/1.1\r\nHost: 10.1.2.3\r\nConnection: close\r\n\r\n",
        );
        assert!(resp.starts_with("HTTP/1.1 403"), "{resp}");
        // SAFETY: SIGTERM to our own child.
        unsafe {
            libc::kill(child.id() as libc::pid_t, libc::SIGTERM);
        }
        child.wait().unwrap();
        let err = reader.join().unwrap();
        assert!(!err.contains('\x1b'), "colour codes in a file: {err}");
        assert!(err.contains(&format!("proxy on {listen}")), "{err}");
        assert!(
            err.contains("http://10.1.2.3/x") && err.contains("403"),
            "{err}"
        );
        if format == "json" {
            for line in err.lines() {
                assert!(
                    serde_json::from_str::<serde_json::Value>(line).is_ok(),
                    "not a JSON line: {line}"
                );
            }
        }
    }
}

#[test]
fn the_sample_configuration_in_dist_checks() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../dist/webpep.toml");
    let (code, out, err) = run(&["server", "--check-config", path]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains(": ok"), "{out}");
}

#[test]
fn the_edge_ca_is_made_shown_and_used_by_intercept_flags() {
    let dir = std::env::temp_dir().join(format!("webpep-server-cli-{}-ca", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let d = dir.to_str().unwrap();
    let (code, out, err) = run(&["server", "ca", "init", "--dir", d]);
    assert_eq!(code, 0, "{err}");
    let fingerprint = out
        .lines()
        .find_map(|l| l.strip_prefix("SHA-256 fingerprint: "))
        .unwrap_or_else(|| panic!("{out}"))
        .to_string();
    let (code, _, err) = run(&["server", "ca", "init", "--dir", d]);
    assert_eq!(
        code, 2,
        "an existing CA is not replaced without --force: {err}"
    );
    let (code, shown, err) = run(&["server", "ca", "show", "--dir", d]);
    assert_eq!(code, 0, "{err}");
    assert!(shown.contains(&fingerprint), "{shown}");

    let (code, printed, err) = run(&[
        "server",
        "--intercept",
        "--ca-dir",
        d,
        "--intercept-exclude",
        "=bank.example",
        "--print-config",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(
        printed.contains("[intercept]\nenabled = true") && printed.contains("=bank.example"),
        "{printed}"
    );
    let (code, _, err) = run(&["server", "--intercept", "--print-config"]);
    assert_eq!(code, 2);
    assert!(err.contains("intercept.ca-dir"), "{err}");

    // A key others can read stops the start, naming it.
    use std::os::unix::fs::PermissionsExt;
    let key = dir.join("ca-key.pem");
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
    let (code, _, err) = run(&[
        "server",
        "--listen",
        "127.0.0.1:0",
        "--intercept",
        "--ca-dir",
        d,
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("ca-key.pem") && err.contains("chmod 600"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
