//! The I/O shell of the webpep link emulator (DESIGN §7.2): network namespaces, TUN devices,
//! the packet pump that drives the pure model of `webpep-link-model`, the CSV logs, the
//! `webpep link -- COMMAND` runner, and the probe.
//!
//! Everything here is Linux-only and needs `CAP_NET_ADMIN` + `CAP_SYS_ADMIN` (root, or root
//! inside a user namespace made by [`netns::enter_user_namespace_if_unprivileged`]).

pub mod log;
pub mod netns;
pub mod probe;
pub mod pump;
pub mod shell;
pub mod testing;
pub mod tun;

use std::io;

pub use log::{LogFormat, LogOptions};
pub use netns::{enter_user_namespace_if_unprivileged, NetNs};
pub use pump::{DirectionCounters, LinkCounters, LinkReport, Pump, PumpOptions};
pub use shell::{run_command, run_command_report, CommandOutcome, LinkShell, RunningLink};
pub use tun::{Tun, TunConfig};

/// Errors of the I/O shell.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A system call or file operation failed; `context` says what we were doing.
    #[error("{context}")]
    Io {
        context: String,
        #[source]
        source: io::Error,
    },
    /// An external command (`ip`) ran but failed.
    #[error("`{command}` failed ({status}): {stderr}")]
    Command {
        command: String,
        status: String,
        stderr: String,
    },
    /// Anything else, with a message that says what and why.
    #[error("{0}")]
    Other(String),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub(crate) fn io(context: impl Into<String>, source: io::Error) -> Self {
        Error::Io {
            context: context.into(),
            source,
        }
    }
}

/// Adds context to `io::Result`s.
pub(crate) trait IoContext<T> {
    fn ctx<C: Into<String>>(self, context: impl FnOnce() -> C) -> Result<T>;
}

impl<T> IoContext<T> for io::Result<T> {
    fn ctx<C: Into<String>>(self, context: impl FnOnce() -> C) -> Result<T> {
        self.map_err(|e| Error::io(context(), e))
    }
}

/// Checks the return value of a libc call that signals failure with -1.
pub(crate) fn cvt(ret: libc::c_int, context: impl FnOnce() -> String) -> Result<libc::c_int> {
    if ret == -1 {
        let err = io::Error::last_os_error();
        Err(Error::io(context(), err))
    } else {
        Ok(ret)
    }
}
