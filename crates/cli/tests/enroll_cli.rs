//! `webpep server enroll | revoke | clients` from the command line: a credential written
//! 0600, the list showing it, revocation, and bad names or unknown clients exiting 2.

use std::os::unix::fs::PermissionsExt;
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_webpep");

fn run(dir: &std::path::Path, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(BIN)
        .current_dir(dir)
        .args(args)
        .output()
        .expect("run webpep");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn enroll_list_revoke() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("edge");
    let state = state.to_str().unwrap();
    let (code, out, err) = run(
        dir.path(),
        &["server", "enroll", "alice", "--state-dir", state],
    );
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("alice.credential"), "{out}");
    let cred = dir.path().join("alice.credential");
    let mode = std::fs::metadata(&cred).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    assert!(std::fs::read_to_string(&cred)
        .unwrap()
        .contains("BEGIN PRIVATE KEY"));

    let (code, out, _) = run(dir.path(), &["server", "clients", "--state-dir", state]);
    assert_eq!(code, 0);
    assert!(
        out.lines()
            .any(|l| l.starts_with("alice\t") && l.contains("\tvalid\t")),
        "{out}"
    );

    let (code, out, err) = run(
        dir.path(),
        &["server", "revoke", "alice", "--state-dir", state],
    );
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("revoked 1"), "{out}");
    let (_, out, _) = run(dir.path(), &["server", "clients", "--state-dir", state]);
    assert!(
        out.lines()
            .any(|l| l.starts_with("alice\t") && l.contains("\trevoked\t")),
        "{out}"
    );

    let (code, _, err) = run(
        dir.path(),
        &["server", "revoke", "bob", "--state-dir", state],
    );
    assert_eq!(code, 2);
    assert!(err.contains("\"bob\""), "{err}");
    let (code, _, err) = run(
        dir.path(),
        &["server", "enroll", "a/b", "--state-dir", state],
    );
    assert_eq!(code, 2);
    assert!(err.contains("a/b"), "{err}");
}

/// Starts `webpep` with `args` and logging on, and returns it with the port each of `markers`
/// names in its log ("proxy on 127.0.0.1:" then the port). The programs bind ports of the
/// system's choosing: a port found free here could be taken by another test first.
fn spawn_naming_ports(args: &[&str], markers: &[&'static str]) -> (Killed, Vec<u16>) {
    let mut child = Command::new(BIN)
        .args(args)
        .env("WEBPEP_LOG", "info")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let child = Killed(child);
    let (tx, rx) = std::sync::mpsc::channel();
    let markers_owned = markers.to_vec();
    // Reads the log to its end so that it never fills the pipe.
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stderr).lines() {
            let Ok(line) = line else { return };
            for (i, marker) in markers_owned.iter().enumerate() {
                if let Some(port) = line
                    .split_once(marker)
                    .and_then(|(_, rest)| rest.split(|c: char| !c.is_ascii_digit()).next())
                    .and_then(|p| p.parse::<u16>().ok())
                {
                    let _ = tx.send((i, port));
                }
            }
        }
    });
    let mut ports = vec![0u16; markers.len()];
    while ports.contains(&0) {
        let (i, port) = rx
            .recv_timeout(std::time::Duration::from_secs(10))
            .unwrap_or_else(|_| panic!("`webpep {}` did not name its ports", args[0]));
        ports[i] = port;
    }
    (child, ports)
}

struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        // SAFETY: SIGTERM to our own child.
        unsafe {
            libc::kill(self.0.id() as libc::pid_t, libc::SIGTERM);
        }
        let _ = self.0.wait();
    }
}

/// The dual proxy from the command line: `webpep server --quic-listen` and `webpep client`
/// with an enrolled credential carry a browser's request to an origin and back.
#[test]
fn webpep_client_reaches_an_origin_through_webpep_server_over_quic() {
    use std::io::{Read, Write};
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("edge");
    let cred = dir.path().join("phone.credential");
    let (code, _, err) = run(
        dir.path(),
        &[
            "server",
            "enroll",
            "phone",
            "--state-dir",
            state.to_str().unwrap(),
            "--out",
            cred.to_str().unwrap(),
        ],
    );
    assert_eq!(code, 0, "{err}");

    // The origin: one answer per connection.
    let origin = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let origin_addr = origin.local_addr().unwrap();
    std::thread::spawn(move || {
        for s in origin.incoming() {
            let Ok(mut s) = s else { return };
            let mut buf = [0u8; 4096];
            let _ = s.read(&mut buf);
            let _ = s.write_all(
                b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 15\r\nConnection: close\r\n\r\nhello over quic",
            );
        }
    });

    let (server, ports) = spawn_naming_ports(
        &[
            "server",
            "--listen",
            "127.0.0.1:0",
            "--quic-listen",
            "127.0.0.1:0",
            "--quic-state-dir",
            state.to_str().unwrap(),
            "--allow-destination",
            "127.0.0.0/8",
            "--no-cache",
            "--dns-upstream",
            "127.0.0.1:9",
        ],
        &["QUIC on 127.0.0.1:"],
    );
    let quic = format!("127.0.0.1:{}", ports[0]);
    let (client, ports) = spawn_naming_ports(
        &[
            "client",
            "--listen",
            "127.0.0.1:0",
            "--server",
            &quic,
            "--credential",
            cred.to_str().unwrap(),
        ],
        &["proxy on 127.0.0.1:"],
    );
    let client_port = ports[0];
    let mut s = std::net::TcpStream::connect(("127.0.0.1", client_port)).unwrap();
    s.set_read_timeout(Some(std::time::Duration::from_secs(20)))
        .unwrap();
    write!(
        s,
        "GET http://{origin_addr}/page HTTP/1.1\r\nHost: {origin_addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut resp = String::new();
    let _ = s.read_to_string(&mut resp);
    assert!(resp.starts_with("HTTP/1.1 200"), "{resp}");
    assert!(resp.ends_with("hello over quic"), "{resp}");
    drop(client);
    drop(server);
}

#[test]
fn webpep_client_without_an_edge_or_credential_exits_2() {
    let dir = tempfile::tempdir().unwrap();
    let (code, _, err) = run(dir.path(), &["client", "--credential", "x"]);
    assert_eq!(code, 2);
    assert!(err.contains("--server"), "{err}");
    let (code, _, err) = run(dir.path(), &["client", "--server", "127.0.0.1:4433"]);
    assert_eq!(code, 2);
    assert!(err.contains("--credential"), "{err}");
    let (code, _, err) = run(
        dir.path(),
        &[
            "client",
            "--server",
            "127.0.0.1:4433",
            "--credential",
            "missing.credential",
        ],
    );
    assert_eq!(code, 2);
    assert!(err.contains("missing.credential"), "{err}");
}

/// `webpep client ca init | show`: the key written 0600, the fingerprint printed and shown
/// again; a second init refused without --force; a client with interception on refuses to
/// start while the key is readable by others.
#[test]
fn the_interception_ca_from_the_command_line() {
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca");
    let ca_s = ca.to_str().unwrap();
    let (code, out, err) = run(dir.path(), &["client", "ca", "init", "--dir", ca_s]);
    assert_eq!(code, 0, "{err}");
    let fp = out
        .lines()
        .find_map(|l| l.strip_prefix("SHA-256 fingerprint: "))
        .unwrap_or_else(|| panic!("no fingerprint: {out}"))
        .to_string();
    assert_eq!(fp.len(), 32 * 3 - 1, "{fp}");
    let key = ca.join("ca-key.pem");
    assert_eq!(
        std::fs::metadata(&key).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let (code, out, _) = run(dir.path(), &["client", "ca", "show", "--dir", ca_s]);
    assert_eq!(code, 0);
    assert!(out.contains(&fp), "{out}");
    let (code, _, err) = run(dir.path(), &["client", "ca", "init", "--dir", ca_s]);
    assert_eq!(code, 2, "a second init replaces nothing: {err}");
    assert!(err.contains("--force") || err.contains("exists"), "{err}");

    // An edge and a credential, so that only the key stops the start.
    let state = dir.path().join("edge");
    let (code, _, err) = run(
        dir.path(),
        &[
            "server",
            "enroll",
            "dev",
            "--state-dir",
            state.to_str().unwrap(),
        ],
    );
    assert_eq!(code, 0, "{err}");
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
    let (code, _, err) = run(
        dir.path(),
        &[
            "client",
            "--server",
            "127.0.0.1:4433",
            "--credential",
            "dev.credential",
            "--listen",
            "127.0.0.1:0",
            "--intercept",
            "--ca-dir",
            ca_s,
        ],
    );
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("chmod 600"), "{err}");
    let (code, _, err) = run(dir.path(), &["client", "ca", "show", "--dir", ca_s]);
    assert_eq!(code, 2);
    assert!(err.contains("chmod 600"), "{err}");
}
