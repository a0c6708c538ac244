//! `webpep server enroll | revoke | clients`: the client credentials of the edge's QUIC
//! transport (issued by the edge installation's own CA; see docs/transport.md); `webpep
//! server ca init | show`: the CA of the edge's HTTPS interception (docs/server.md).

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
    /// The CA whose certificates the edge's HTTPS interception shows browsers (`[intercept]`).
    #[command(subcommand)]
    Ca(CaAction),
}

/// `webpep server ca ...`.
#[derive(clap::Subcommand, Debug)]
pub enum CaAction {
    /// Create the edge's interception CA (an ECDSA P-256 key, mode 0600, and a certificate)
    /// and print its fingerprint and how browsers trust it.
    Init {
        /// The CA's directory (`[intercept] ca-dir`).
        #[arg(long, value_name = "DIR")]
        dir: PathBuf,
        /// Replace an existing CA (browsers that trusted the old one must trust the new one).
        #[arg(long)]
        force: bool,
    },
    /// Print the CA's certificate path and fingerprint (refuses a key others can read).
    Show {
        /// The CA's directory (`[intercept] ca-dir`).
        #[arg(long, value_name = "DIR")]
        dir: PathBuf,
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
    const MORE: &str = "(Firefox and the system store: docs/interception.md; then `webpep server --intercept --ca-dir DIR`: docs/server.md)";
    match action {
        Action::Ca(CaAction::Init { dir, force }) => {
            crate::client_cmd::ca_command(&dir, Some(force), MORE)
        }
        Action::Ca(CaAction::Show { dir }) => crate::client_cmd::ca_command(&dir, None, MORE),
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
