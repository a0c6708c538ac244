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
