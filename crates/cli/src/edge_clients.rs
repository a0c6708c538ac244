//! `webpep server enroll | revoke | clients`: the client credentials of the edge's QUIC
//! transport (issued by the edge installation's own CA; see docs/transport.md).

use std::path::{Path, PathBuf};

use webpep_transport::{Credential, EdgeIdentity};

use crate::BadInput;

/// What `webpep server` does instead of serving.
#[derive(clap::Subcommand, Debug)]
pub enum Action {
    /// Issue a credential for a client proxy called NAME and write it (mode 0600) for the
    /// device; `webpep client --credential FILE` uses it.
    Enroll {
        /// The client's name (letters, digits, '.', '_', '-'; at most 64).
        name: String,
        /// Where to write the credential (default: NAME.credential in the current directory).
        #[arg(long, value_name = "FILE")]
        out: Option<PathBuf>,
        #[command(flatten)]
        state: StateDir,
    },
    /// Revoke every credential issued to NAME; a running edge refuses it at the next
    /// handshake (no restart).
    Revoke {
        /// The client's name, as enrolled.
        name: String,
        #[command(flatten)]
        state: StateDir,
    },
    /// List the credentials issued, and which are revoked.
    Clients {
        #[command(flatten)]
        state: StateDir,
    },
}

#[derive(clap::Args, Debug)]
pub struct StateDir {
    /// The edge's transport state: its CA, server certificate and client lists (created
    /// mode 0700 on first use; default /var/lib/webpep/edge as root, else
    /// ~/.local/state/webpep/edge).
    #[arg(long, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
}

impl StateDir {
    pub fn resolve(&self) -> PathBuf {
        if let Some(d) = &self.state_dir {
            return d.clone();
        }
        // SAFETY: geteuid has no preconditions and cannot fail.
        if unsafe { libc::geteuid() } == 0 {
            return PathBuf::from("/var/lib/webpep/edge");
        }
        match std::env::var_os("HOME") {
            Some(home) => Path::new(&home).join(".local/state/webpep/edge"),
            None => PathBuf::from("webpep-edge"),
        }
    }
}

fn bad(msg: String) -> anyhow::Error {
    BadInput(msg).into()
}

pub fn run(action: Action) -> anyhow::Result<u8> {
    match action {
        Action::Enroll { name, out, state } => {
            let dir = state.resolve();
            let identity = EdgeIdentity::load_or_create(&dir).map_err(|e| bad(e.to_string()))?;
            let cred = identity.enroll(&name).map_err(|e| bad(e.to_string()))?;
            let out = out.unwrap_or_else(|| PathBuf::from(format!("{name}.credential")));
            cred.write(&out).map_err(|e| bad(e.to_string()))?;
            let fp = cred_fingerprint(&cred)?;
            println!(
                "enrolled {name}: credential written to {} (mode 0600; it holds the client's key)",
                out.display()
            );
            println!("certificate fingerprint (SHA-256): {fp}");
            println!("edge state: {}", dir.display());
            Ok(0)
        }
        Action::Revoke { name, state } => {
            let dir = state.resolve();
            let identity = EdgeIdentity::load_or_create(&dir).map_err(|e| bad(e.to_string()))?;
            let n = identity.revoke(&name).map_err(|e| bad(e.to_string()))?;
            println!("revoked {n} credential(s) of {name}; the edge refuses them from its next handshake");
            Ok(0)
        }
        Action::Clients { state } => {
            let dir = state.resolve();
            let identity = EdgeIdentity::load_or_create(&dir).map_err(|e| bad(e.to_string()))?;
            let revocations = identity.revocations();
            let enrolled = identity.enrolled().map_err(|e| bad(e.to_string()))?;
            println!("name\tissued (unix s)\tstate\tfingerprint");
            for e in enrolled {
                let revoked = revocations.is_revoked_fingerprint(&e.fingerprint);
                println!(
                    "{}\t{}\t{}\t{}",
                    e.name,
                    e.issued,
                    if revoked { "revoked" } else { "valid" },
                    e.fingerprint
                );
            }
            Ok(0)
        }
    }
}

fn cred_fingerprint(cred: &Credential) -> anyhow::Result<String> {
    let der = cred.cert_der().map_err(|e| bad(e.to_string()))?;
    Ok(webpep_transport::credential::fingerprint(&der))
}
