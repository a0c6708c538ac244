//! Async work inside a namespace: a thread that enters the namespace and runs a tokio
//! current-thread runtime, so every socket its tasks create lands there. The servers and the
//! loader know nothing of namespaces; this is the only place that joins the two.

use std::future::Future;
use std::thread::JoinHandle;

use tokio::sync::oneshot;
use webpep_link::NetNs;

use crate::{LabError, Result};

/// A long-running service (server, resolver) in a namespace; stopped and joined on drop.
pub struct NsService {
    name: String,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
}

impl NsService {
    /// Starts `make()` in `ns`. `make` runs on the service's thread (inside the namespace and
    /// the runtime) and returns the service future; the future is dropped (cancelled) when the
    /// service stops. Set-up errors of `make` are returned here.
    pub fn start<M, F>(ns: &NetNs, name: &str, make: M) -> Result<NsService>
    where
        M: FnOnce() -> std::result::Result<F, String> + Send + 'static,
        F: Future<Output = ()> + 'static,
    {
        let ns = ns.clone();
        let (stop_tx, stop_rx) = oneshot::channel::<()>();
        let (ready_tx, ready_rx) = std::sync::mpsc::channel::<std::result::Result<(), String>>();
        let tname = name.to_string();
        let thread = std::thread::Builder::new()
            .name(format!("lab-{name}"))
            .spawn(move || {
                if let Err(e) = ns.enter_current_thread() {
                    let _ = ready_tx.send(Err(format!("entering the namespace: {e}")));
                    return;
                }
                let rt = match runtime() {
                    Ok(rt) => rt,
                    Err(e) => {
                        let _ = ready_tx.send(Err(format!("runtime: {e}")));
                        return;
                    }
                };
                rt.block_on(async move {
                    let fut = match make() {
                        Ok(f) => f,
                        Err(e) => {
                            let _ = ready_tx.send(Err(e));
                            return;
                        }
                    };
                    let _ = ready_tx.send(Ok(()));
                    tokio::select! {
                        _ = fut => tracing::debug!("{tname} ended"),
                        _ = stop_rx => {}
                    }
                });
            })
            .map_err(|e| LabError::Other(format!("{name}: thread: {e}")))?;
        match ready_rx.recv() {
            Ok(Ok(())) => Ok(NsService {
                name: name.to_string(),
                stop: Some(stop_tx),
                thread: Some(thread),
            }),
            Ok(Err(e)) => {
                let _ = thread.join();
                Err(LabError::Other(format!("{name}: {e}")))
            }
            Err(_) => {
                let _ = thread.join();
                Err(LabError::Other(format!("{name}: the service thread died")))
            }
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }
}

impl Drop for NsService {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Runs one future to completion in `ns` (on a fresh thread with its own runtime) and returns
/// its output: how a page load runs in `ue`.
pub fn run_in<F, Fut, T>(ns: &NetNs, f: F) -> Result<T>
where
    F: FnOnce() -> Fut + Send,
    Fut: Future<Output = T>,
    T: Send,
{
    let out = ns.run(move || -> std::result::Result<T, String> {
        let rt = runtime().map_err(|e| format!("runtime: {e}"))?;
        Ok(rt.block_on(f()))
    })?;
    out.map_err(LabError::Other)
}

/// In a child between fork and exec: gives it a private mount namespace in which `resolv`
/// is bind-mounted over `/etc/resolv.conf`, so programs that take DNS from resolv.conf (real
/// Chromium, Ziproxy) ask the lab's resolver while the host's file stays untouched.
///
/// # Safety
/// Only for a `pre_exec` hook: it makes async-signal-safe syscalls on a path prepared before
/// the fork and allocates nothing.
pub unsafe fn own_resolv_conf(resolv: &std::ffi::CStr) -> std::io::Result<()> {
    let fail = || Err(std::io::Error::last_os_error());
    if libc::unshare(libc::CLONE_NEWNS) != 0 {
        return fail();
    }
    // Private propagation first, or the bind mount would reach the host's namespace.
    let flags = libc::MS_REC | libc::MS_PRIVATE;
    let null = std::ptr::null();
    if libc::mount(
        null,
        c"/".as_ptr(),
        null,
        flags,
        null as *const libc::c_void,
    ) != 0
    {
        return fail();
    }
    let target = c"/etc/resolv.conf";
    if libc::mount(
        resolv.as_ptr(),
        target.as_ptr(),
        null,
        libc::MS_BIND,
        std::ptr::null(),
    ) != 0
    {
        return fail();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use webpep_link::testing::netns_available;

    #[test]
    fn a_service_binds_inside_its_namespace_and_stops() {
        if !netns_available("a_service_binds_inside_its_namespace_and_stops") {
            return;
        }
        let ns = NetNs::new().unwrap();
        let svc = NsService::start(&ns, "echo", || {
            let l = std::net::UdpSocket::bind("127.0.0.1:5555").map_err(|e| e.to_string())?;
            l.set_nonblocking(true).map_err(|e| e.to_string())?;
            let sock = tokio::net::UdpSocket::from_std(l).map_err(|e| e.to_string())?;
            Ok(async move {
                let mut buf = [0u8; 64];
                while let Ok((n, from)) = sock.recv_from(&mut buf).await {
                    let _ = sock.send_to(&buf[..n], from).await;
                }
            })
        })
        .unwrap();
        // The port is free in *this* namespace (the service's socket lives in `ns`).
        assert!(std::net::UdpSocket::bind("127.0.0.1:5555").is_ok());
        let got = run_in(&ns, || async {
            let s = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
            s.send_to(b"hi", "127.0.0.1:5555").await.unwrap();
            let mut buf = [0u8; 8];
            let n = tokio::time::timeout(std::time::Duration::from_secs(2), s.recv(&mut buf))
                .await
                .unwrap()
                .unwrap();
            buf[..n].to_vec()
        })
        .unwrap();
        assert_eq!(got, b"hi");
        drop(svc);
        // A failing set-up is reported.
        let e = NsService::start(
            &ns,
            "bad",
            || -> std::result::Result<std::future::Ready<()>, String> { Err("nope".into()) },
        );
        assert!(e.is_err());
    }
}
