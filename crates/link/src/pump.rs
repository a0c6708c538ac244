//! The packet pump: one thread that moves IP packets between two TUN devices through the
//! pure link model.
//!
//! The `inner` TUN is the device side (its packets go `Up`), the `outer` TUN the network side
//! (its packets go `Down`). The thread waits in `ppoll` on both fds, a stop eventfd and a
//! counters-request eventfd, with a timeout to the model's next wakeup (µs precision, timer
//! slack 1 ns). Emulator time is the wall time since the pump started ([`SimTime`]).
//!
//! Write errors to a TUN (e.g. `EIO` while a device goes down) are counted, not fatal.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use serde::Serialize;
use webpep_link_model::{Counters, Link, Side, SimTime};

use crate::log::{LinkLog, LogOptions};
use crate::tun::Tun;
use crate::{cvt, Error, IoContext, Result};

/// Largest packet read from a TUN.
const READ_BUFFER: usize = 65536;
/// Packets read from one fd before the other gets its turn.
const READ_BATCH: usize = 64;

/// Counters of one direction (times in emulator microseconds, i.e. scaled: multiply by the
/// time scale for what the real link would show).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct DirectionCounters {
    pub enqueued_packets: u64,
    pub enqueued_bytes: u64,
    pub delivered_packets: u64,
    pub delivered_bytes: u64,
    pub dropped_queue_packets: u64,
    pub lost_packets: u64,
    /// Delivered packets the destination TUN refused (counted, not fatal).
    pub write_errors: u64,
    /// Failed reads from the source TUN (other than "nothing to read").
    pub read_errors: u64,
    pub queue_delay_samples: u64,
    pub queue_delay_sum_us: u64,
    pub queue_delay_max_us: u64,
}

impl DirectionCounters {
    /// Mean wait in the queue before service, emulator microseconds (0 without samples).
    pub fn queue_delay_mean_us(&self) -> f64 {
        if self.queue_delay_samples == 0 {
            0.0
        } else {
            self.queue_delay_sum_us as f64 / self.queue_delay_samples as f64
        }
    }
}

/// A snapshot of both directions' counters.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct LinkCounters {
    /// Emulator time of the snapshot (µs since the pump started).
    pub elapsed_us: u64,
    pub time_scale: f64,
    /// Outer → inner (towards the device).
    pub down: DirectionCounters,
    /// Inner → outer.
    pub up: DirectionCounters,
}

impl LinkCounters {
    pub fn side(&self, side: Side) -> &DirectionCounters {
        match side {
            Side::Down => &self.down,
            Side::Up => &self.up,
        }
    }
}

/// What the pump returns when it stops.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct LinkReport {
    pub counters: LinkCounters,
    /// Every queue-delay sample of the run, emulator microseconds.
    pub down_queue_delays_us: Vec<u64>,
    pub up_queue_delays_us: Vec<u64>,
}

/// How to run the pump.
#[derive(Clone, Debug)]
pub struct PumpOptions {
    /// The model's time scale (only used to unscale the log and report it).
    pub time_scale: f64,
    pub log: Option<LogOptions>,
    /// How often the shared counters snapshot is refreshed while packets flow.
    pub snapshot_every: Duration,
}

impl Default for PumpOptions {
    fn default() -> Self {
        PumpOptions {
            time_scale: 1.0,
            log: None,
            snapshot_every: Duration::from_millis(100),
        }
    }
}

/// A non-blocking eventfd.
#[derive(Debug)]
struct EventFd(OwnedFd);

impl EventFd {
    fn new() -> Result<EventFd> {
        // SAFETY: plain syscall.
        let fd = cvt(
            unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) },
            || "eventfd".into(),
        )?;
        // SAFETY: fresh fd we own.
        Ok(EventFd(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    fn signal(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a local. Failure (counter overflow) still leaves it
        // readable, which is all that matters.
        unsafe { libc::write(self.0.as_raw_fd(), (&one as *const u64).cast(), 8) };
    }

    fn drain(&self) {
        let mut v: u64 = 0;
        // SAFETY: reads 8 bytes into a local.
        unsafe { libc::read(self.0.as_raw_fd(), (&mut v as *mut u64).cast(), 8) };
    }
}

#[derive(Debug, Default)]
struct SharedState {
    counters: LinkCounters,
    generation: u64,
    finished: bool,
    /// Asked of the pump with the next snapshot: start the link over in this epoch first.
    restart: Option<u64>,
}

#[derive(Debug, Default)]
struct Shared {
    state: Mutex<SharedState>,
    cond: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, SharedState> {
        // A poisoned lock only means a panic elsewhere; the counters are still usable.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A running pump. Dropping it stops the thread and closes the TUNs.
#[derive(Debug)]
pub struct Pump {
    thread: Option<JoinHandle<Result<LinkReport>>>,
    stop: Arc<EventFd>,
    request: Arc<EventFd>,
    shared: Arc<Shared>,
}

impl Pump {
    /// Starts the pump thread, which owns `link` and both TUNs from now on.
    pub fn start(
        link: Link<Vec<u8>>,
        inner: Tun,
        outer: Tun,
        options: PumpOptions,
    ) -> Result<Pump> {
        let log = match &options.log {
            Some(o) => Some(LinkLog::create(o, options.time_scale)?),
            None => None,
        };
        let stop = Arc::new(EventFd::new()?);
        let request = Arc::new(EventFd::new()?);
        let shared = Arc::new(Shared::default());
        shared.lock().counters.time_scale = options.time_scale;
        let worker = Worker {
            link,
            inner,
            outer,
            stop: Arc::clone(&stop),
            request: Arc::clone(&request),
            shared: Arc::clone(&shared),
            log,
            options,
        };
        let thread = thread::Builder::new()
            .name("webpep-link-pump".into())
            .spawn(move || worker.run())
            .ctx(|| "spawning the packet pump thread")?;
        Ok(Pump {
            thread: Some(thread),
            stop,
            request,
            shared,
        })
    }

    /// The latest counters snapshot (at most `snapshot_every` old while packets flow).
    pub fn counters(&self) -> LinkCounters {
        self.shared.lock().counters.clone()
    }

    /// Asks the pump for a fresh snapshot and waits for it (up to one second).
    pub fn counters_now(&self) -> LinkCounters {
        self.snapshot(None)
    }

    /// Starts the link over now in epoch `epoch`, as a new Mahimahi shell would (traces from
    /// their start, the outage schedule from now, the epoch's random streams: see
    /// `Link::restart`), and returns the snapshot taken at that moment. The lab calls it as
    /// each load starts, with the load's repeat number, so that every configuration's load r
    /// meets the same link whenever it runs.
    pub fn restart(&self, epoch: u64) -> LinkCounters {
        self.snapshot(Some(epoch))
    }

    fn snapshot(&self, restart: Option<u64>) -> LinkCounters {
        let mut state = self.shared.lock();
        if restart.is_some() {
            state.restart = restart;
        }
        let target = state.generation + 1;
        self.request.signal();
        let deadline = Instant::now() + Duration::from_secs(1);
        while state.generation < target && !state.finished {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            state = match self.shared.cond.wait_timeout(state, left) {
                Ok((s, _)) => s,
                Err(p) => p.into_inner().0,
            };
        }
        state.counters.clone()
    }

    /// Whether the pump thread is still running.
    pub fn is_running(&self) -> bool {
        self.thread.as_ref().is_some_and(|t| !t.is_finished())
    }

    /// Stops the pump, closes the TUNs and returns the final counters.
    pub fn stop(mut self) -> Result<LinkReport> {
        self.stop_inner()
    }

    fn stop_inner(&mut self) -> Result<LinkReport> {
        let Some(thread) = self.thread.take() else {
            return Err(Error::Other("the packet pump was already stopped".into()));
        };
        self.stop.signal();
        match thread.join() {
            Ok(result) => result,
            Err(_) => Err(Error::Other("the packet pump thread panicked".into())),
        }
    }
}

impl Drop for Pump {
    fn drop(&mut self) {
        if self.thread.is_some() {
            if let Err(e) = self.stop_inner() {
                tracing::warn!("stopping the packet pump: {e}");
            }
        }
    }
}

/// Running sums over the model's queue-delay samples.
#[derive(Debug, Default)]
struct DelayStats {
    seen: usize,
    sum: u64,
    max: u64,
}

struct Worker {
    link: Link<Vec<u8>>,
    inner: Tun,
    outer: Tun,
    stop: Arc<EventFd>,
    request: Arc<EventFd>,
    shared: Arc<Shared>,
    log: Option<LinkLog>,
    options: PumpOptions,
}

const SIDES: [Side; 2] = [Side::Down, Side::Up];

fn slot(side: Side) -> usize {
    match side {
        Side::Down => 0,
        Side::Up => 1,
    }
}

impl Worker {
    fn run(mut self) -> Result<LinkReport> {
        // Precise wakeups: the default 50 µs timer slack would blur the schedule.
        // SAFETY: plain prctl on the calling thread.
        unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0) };
        if self.log.is_some() {
            self.link.set_event_log(true);
        }
        let start = Instant::now();
        let now = || SimTime::from_micros(start.elapsed().as_micros() as u64);

        let mut buf = vec![0u8; READ_BUFFER];
        // Index: 0 = inner (reads go Up, Down deliveries are written to it), 1 = outer.
        let fds: [RawFd; 2] = [self.inner.as_raw_fd(), self.outer.as_raw_fd()];
        let mut dead = [false; 2];
        let mut write_errors = [0u64; 2];
        let mut read_errors = [0u64; 2];
        let mut delays = [DelayStats::default(), DelayStats::default()];
        let mut last_snapshot = Instant::now();
        let mut dirty = false;
        let mut requested = false;
        let mut idle_spins = 0u32;

        loop {
            // 1. Read what is waiting on both TUNs.
            let mut progress = false;
            for (i, side) in [(0usize, Side::Up), (1usize, Side::Down)] {
                if dead[i] {
                    continue;
                }
                let mut n_read = 0;
                while n_read < READ_BATCH {
                    // SAFETY: reads into our buffer, within its length.
                    let n = unsafe { libc::read(fds[i], buf.as_mut_ptr().cast(), buf.len()) };
                    if n > 0 {
                        let n = n as usize;
                        self.link.enqueue(side, now(), n, buf[..n].to_vec());
                        n_read += 1;
                        continue;
                    }
                    if n == 0 {
                        break;
                    }
                    let err = io::Error::last_os_error();
                    match err.raw_os_error() {
                        Some(libc::EAGAIN) => break,
                        Some(libc::EINTR) => continue,
                        _ => {
                            read_errors[slot(side)] += 1;
                            tracing::warn!(
                                "reading TUN {}: {err}",
                                [&self.inner, &self.outer][i].name()
                            );
                            break;
                        }
                    }
                }
                progress |= n_read > 0;
            }

            // 2. Deliver what is due.
            let t = now();
            for side in SIDES {
                // Down goes to the inner TUN, Up to the outer one.
                let dst = match side {
                    Side::Down => fds[0],
                    Side::Up => fds[1],
                };
                while let Some(d) = self.link.poll_deliver(side, t) {
                    progress = true;
                    if !write_packet(dst, &d.payload) {
                        write_errors[slot(side)] += 1;
                    }
                }
            }

            // 3. Queue-delay statistics and the log.
            for side in SIDES {
                let samples = self.link.counters(side).queue_delay_samples();
                let st = &mut delays[slot(side)];
                if samples.len() > st.seen {
                    let new = &samples[st.seen..];
                    for &s in new {
                        st.sum = st.sum.saturating_add(s);
                        st.max = st.max.max(s);
                    }
                    if let Some(log) = self.log.as_mut() {
                        log.queue_delays(t, side, new);
                    }
                    st.seen = samples.len();
                }
            }
            if let Some(log) = self.log.as_mut() {
                let down = self.link.drain_events(Side::Down);
                let up = self.link.drain_events(Side::Up);
                log.events(&down, &up);
                log.advance(t);
            }

            // 4. The shared snapshot.
            dirty |= progress;
            if requested || (dirty && last_snapshot.elapsed() >= self.options.snapshot_every) {
                let restart = if requested {
                    self.shared.lock().restart.take()
                } else {
                    None
                };
                if let Some(epoch) = restart {
                    self.link.restart(now(), epoch);
                }
                self.publish(
                    now(),
                    &write_errors,
                    &read_errors,
                    &delays,
                    requested,
                    false,
                );
                last_snapshot = Instant::now();
                dirty = false;
                requested = false;
            }

            // 5. Sleep until the next wakeup, a packet, or a stop/request.
            let t = now();
            let mut timeout_us: Option<u64> = self
                .link
                .next_wakeup()
                .map(|w| w.as_micros().saturating_sub(t.as_micros()));
            if dirty {
                let left = self
                    .options
                    .snapshot_every
                    .saturating_sub(last_snapshot.elapsed())
                    .as_micros() as u64;
                timeout_us = Some(timeout_us.map_or(left, |u| u.min(left)));
            }
            // Guard against a model that keeps asking for a wakeup it does not act on.
            if timeout_us == Some(0) && !progress {
                idle_spins += 1;
                if idle_spins > 1000 {
                    timeout_us = Some(1000);
                }
            } else {
                idle_spins = 0;
            }

            let mut pfds = [
                pollfd(if dead[0] { -1 } else { fds[0] }),
                pollfd(if dead[1] { -1 } else { fds[1] }),
                pollfd(self.stop.0.as_raw_fd()),
                pollfd(self.request.0.as_raw_fd()),
            ];
            let ts = timeout_us.map(|us| libc::timespec {
                tv_sec: (us / 1_000_000) as libc::time_t,
                tv_nsec: ((us % 1_000_000) * 1000) as libc::c_long,
            });
            let ts_ptr = ts
                .as_ref()
                .map_or(std::ptr::null(), |t| t as *const libc::timespec);
            // SAFETY: valid pollfd array and timespec (or null for "forever").
            let r = unsafe {
                libc::ppoll(
                    pfds.as_mut_ptr(),
                    pfds.len() as libc::nfds_t,
                    ts_ptr,
                    std::ptr::null(),
                )
            };
            if r < 0 {
                let err = io::Error::last_os_error();
                if err.raw_os_error() == Some(libc::EINTR) {
                    continue;
                }
                self.finish_log(now());
                return Err(Error::io("ppoll in the packet pump", err));
            }
            if pfds[2].revents != 0 {
                break;
            }
            if pfds[3].revents != 0 {
                self.request.drain();
                requested = true;
            }
            for i in 0..2 {
                let bad = libc::POLLERR | libc::POLLHUP | libc::POLLNVAL;
                if !dead[i] && pfds[i].revents & bad != 0 && pfds[i].revents & libc::POLLIN == 0 {
                    dead[i] = true;
                    tracing::warn!(
                        "TUN {} reported an error (revents {:#x}); no longer reading it",
                        [&self.inner, &self.outer][i].name(),
                        pfds[i].revents
                    );
                }
            }
        }

        let end = now();
        let log_result = match self.log.as_mut() {
            Some(log) => {
                let down = self.link.drain_events(Side::Down);
                let up = self.link.drain_events(Side::Up);
                log.events(&down, &up);
                self.log.take().map_or(Ok(()), |l| l.finish(end))
            }
            None => Ok(()),
        };
        let counters = self.publish(end, &write_errors, &read_errors, &delays, true, true);
        log_result?;
        Ok(LinkReport {
            counters,
            down_queue_delays_us: self
                .link
                .counters(Side::Down)
                .queue_delay_samples()
                .to_vec(),
            up_queue_delays_us: self.link.counters(Side::Up).queue_delay_samples().to_vec(),
        })
    }

    fn finish_log(&mut self, end: SimTime) {
        if let Some(log) = self.log.take() {
            if let Err(e) = log.finish(end) {
                tracing::warn!("{e}");
            }
        }
        self.shared.lock().finished = true;
        self.shared.cond.notify_all();
    }

    fn publish(
        &self,
        t: SimTime,
        write_errors: &[u64; 2],
        read_errors: &[u64; 2],
        delays: &[DelayStats; 2],
        notify: bool,
        finished: bool,
    ) -> LinkCounters {
        let dir = |side: Side| -> DirectionCounters {
            let c: &Counters = self.link.counters(side);
            let i = slot(side);
            DirectionCounters {
                enqueued_packets: c.enqueued_packets,
                enqueued_bytes: c.enqueued_bytes,
                delivered_packets: c.delivered_packets,
                delivered_bytes: c.delivered_bytes,
                dropped_queue_packets: c.dropped_queue_packets,
                lost_packets: c.lost_packets,
                write_errors: write_errors[i],
                read_errors: read_errors[i],
                queue_delay_samples: delays[i].seen as u64,
                queue_delay_sum_us: delays[i].sum,
                queue_delay_max_us: delays[i].max,
            }
        };
        let counters = LinkCounters {
            elapsed_us: t.as_micros(),
            time_scale: self.options.time_scale,
            down: dir(Side::Down),
            up: dir(Side::Up),
        };
        {
            let mut state = self.shared.lock();
            state.counters = counters.clone();
            state.generation += 1;
            state.finished |= finished;
        }
        if notify || finished {
            self.shared.cond.notify_all();
        }
        counters
    }
}

fn pollfd(fd: RawFd) -> libc::pollfd {
    libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    }
}

/// Writes one packet; false if the TUN refused it.
fn write_packet(fd: RawFd, packet: &[u8]) -> bool {
    loop {
        // SAFETY: writes from a valid slice.
        let n = unsafe { libc::write(fd, packet.as_ptr().cast(), packet.len()) };
        if n >= 0 {
            return n as usize == packet.len();
        }
        if io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            return false;
        }
    }
}
