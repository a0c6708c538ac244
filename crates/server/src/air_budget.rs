//! A budget of bytes in flight per client, over all its TCP connections (issue 33).
//!
//! A browser opens dozens of connections to its proxy, and each grows its own congestion
//! window: together they fill the slow link's downlink queue (120 KB over GPRS, 25 s of
//! data), and then a SYN-ACK or a small response on a fresh connection is dropped at the
//! queue and waits out a retransmission timer sized by that same queue (a measured load:
//! 94 s, then 140 s, for a 4.2 KB script). The edge therefore holds what it writes to one
//! client to a budget: the bytes not yet acknowledged on all the client's connections stay
//! under `gain` × the client's delivery rate × its minimum RTT (what the link holds, and as
//! much again queued), and never under a floor. The rate is measured over the client's
//! connections together (bytes acknowledged per round trip, the highest of the last ten
//! rounds, as BBR filters its samples): one connection's own sample is only its share.
//!
//! [`AirBudget`] is the pure estimate, fed measurements in virtual time; [`AirBudgets`],
//! [`AirSlot`] and [`AirGated`] are the shell that reads the kernel's counters (`TIOCOUTQ`,
//! `TCP_INFO`) and holds writes back until the client's link has room.

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::os::fd::{AsRawFd, BorrowedFd, RawFd};
use std::pin::Pin;
use std::sync::{Arc, Mutex, Weak};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use webpep_transport::windowed::Windowed;

/// The budget's parameters (`[air] budget-*`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BudgetConfig {
    /// Bytes in flight as a multiple of rate × minimum RTT (2: the link full, and as much
    /// again queued, which also lets a faster link show itself: the rate can double per round).
    pub gain: f64,
    /// The least budget, whatever was measured: a new client's, and a slow link's, where
    /// rate × RTT is a few packets.
    pub floor: u64,
    /// Clients whose least RTT is under this are not held: a LAN or loopback has no slow
    /// link to protect, and the ticks a held write waits for would cost more than its link.
    pub held_from_rtt: Duration,
    /// Whether acknowledgements that came together beyond the rate are added to the budget
    /// ([`AirBudget::extra_acked`]).
    pub late_acks: bool,
}

impl Default for BudgetConfig {
    fn default() -> Self {
        BudgetConfig {
            gain: 2.0,
            floor: 16 * 1024,
            held_from_rtt: Duration::from_millis(5),
            late_acks: true,
        }
    }
}

/// How many rounds (minimum RTTs) the highest rate sample stands for the link's rate.
pub const RATE_ROUNDS: u32 = 10;
/// How long the highest burst of acknowledgements beyond the rate counts, in whole seconds:
/// a slow uplink's stalls recur every few seconds, far more rounds apart than the rate's
/// window.
pub const EXTRA_WINDOW: Duration = Duration::from_secs(10);
/// The slots [`AirBudget`]'s late-acknowledgement window is counted in.
const EXTRA_SLOT: Duration = Duration::from_secs(1);
/// The round before any RTT was measured.
const DEFAULT_ROUND: Duration = Duration::from_millis(100);
/// The shortest interval a rate sample is taken over (a loopback RTT is microseconds).
const MIN_ROUND: Duration = Duration::from_millis(5);

/// One client's budget from measurements of its connections: the bytes acknowledged so far
/// (a counter over all its connections) and their least RTT.
#[derive(Debug, Clone)]
pub struct AirBudget {
    cfg: BudgetConfig,
    /// (when, bytes acknowledged then): the points a rate sample is taken between, kept for
    /// one round.
    points: VecDeque<(Instant, u64)>,
    /// Rate samples (bytes/s) by round: the highest stands for [`RATE_ROUNDS`] whole rounds.
    maxima: Windowed<f64>,
    /// The round now, and when it began: a round ends once a minimum RTT has passed.
    round: (u64, Option<Instant>),
    min_rtt: Option<Duration>,
    /// Since when (and from what count) acknowledgements have come faster than the rate:
    /// the start of an aggregation epoch.
    epoch: Option<(Instant, u64)>,
    /// Bytes acknowledged beyond what the rate explains in an epoch, by [`EXTRA_SLOT`]
    /// since `origin`.
    extra: Windowed<u64>,
    /// The first measurement: slot 0 of `extra`.
    origin: Option<Instant>,
}

impl AirBudget {
    pub fn new(cfg: BudgetConfig) -> AirBudget {
        AirBudget {
            cfg,
            points: VecDeque::new(),
            // One slot more than the rounds: the current round is only begun.
            maxima: Windowed::max(u64::from(RATE_ROUNDS) + 1),
            round: (0, None),
            min_rtt: None,
            epoch: None,
            extra: Windowed::max(EXTRA_WINDOW.as_secs() / EXTRA_SLOT.as_secs()),
            origin: None,
        }
    }

    /// The interval a rate sample spans: one minimum RTT.
    pub fn round(&self) -> Duration {
        self.min_rtt.unwrap_or(DEFAULT_ROUND).max(MIN_ROUND)
    }

    /// An RTT seen on one of the client's connections (a new connection's handshake).
    pub fn rtt_seen(&mut self, rtt: Option<Duration>) {
        if let Some(r) = rtt.filter(|r| !r.is_zero()) {
            self.min_rtt = Some(self.min_rtt.map_or(r, |m| m.min(r)));
        }
    }

    /// Whether the client's writes are held to the budget: not for a client nearer than
    /// [`BudgetConfig::held_from_rtt`].
    pub fn holds(&self) -> bool {
        self.min_rtt.is_none_or(|r| r >= self.cfg.held_from_rtt)
    }

    /// A measurement at `now`: `acked`, the bytes the client has acknowledged so far on all
    /// its connections (never decreasing), and the least RTT its connections have seen.
    pub fn measured(&mut self, now: Instant, acked: u64, min_rtt: Option<Duration>) {
        self.rtt_seen(min_rtt);
        let round = self.round();
        let round_no = match self.round {
            (n, Some(began)) if now.saturating_duration_since(began) < round => n,
            (n, began) => {
                let n = if began.is_some() { n + 1 } else { n };
                self.round = (n, Some(now));
                n
            }
        };
        let progress = match self.points.back() {
            // A counter that went back (a connection's count lost): start over from here.
            Some(&(_, last)) if acked < last => {
                self.points.clear();
                true
            }
            Some(&(_, last)) => acked > last,
            None => true,
        };
        // Only points where acknowledgements came: a sample then spans from the last
        // acknowledgement before it, so that acknowledgements held back and let go together
        // count over the time their bytes took, not as a burst of the rate (as BBR takes a
        // sample over the longer of its send and ack intervals).
        if progress {
            self.points.push_back((now, acked));
        }
        while self.points.len() > 2 && now.saturating_duration_since(self.points[1].0) >= round {
            self.points.pop_front();
        }
        let (t0, a0) = self.points[0];
        let span = now.saturating_duration_since(t0);
        if progress && span >= round {
            let rate = (acked - a0) as f64 / span.as_secs_f64();
            self.maxima.update(round_no, rate);
        }
        self.maxima.expire(round_no);
        self.aggregation(now, acked, round * RATE_ROUNDS);
    }

    /// Acknowledgements that come late and then together (a slow uplink queues them behind
    /// the browser's requests; a radio link sends them in bunches) leave the client's bytes
    /// unacknowledged longer than a round, though they have arrived: what came beyond the
    /// rate since acknowledgements last fell behind it is added to the budget (the highest
    /// of the last [`EXTRA_WINDOW`]), as BBR adds its "extra acked" to its window. Without
    /// it, a stall of the uplink idles the downlink.
    fn aggregation(&mut self, now: Instant, acked: u64, window: Duration) {
        let origin = *self.origin.get_or_insert(now);
        let slot = now.saturating_duration_since(origin).as_secs() / EXTRA_SLOT.as_secs();
        let Some(rate) = self.rate() else {
            self.epoch = Some((now, acked));
            return;
        };
        let (mut t0, mut a0) = *self.epoch.get_or_insert((now, acked));
        if now.saturating_duration_since(t0) > window {
            // An epoch lasts ten rounds at most: acknowledgements that keep pace with the
            // rate after a burst would otherwise carry its extra on for ever.
            (t0, a0) = (now, acked);
            self.epoch = Some((t0, a0));
        }
        let expected = rate * now.saturating_duration_since(t0).as_secs_f64();
        let got = acked.saturating_sub(a0) as f64;
        if got <= expected {
            self.epoch = Some((now, acked));
        } else {
            self.extra.update(slot, (got - expected) as u64);
        }
        self.extra.expire(slot);
    }

    /// Bytes acknowledged together beyond the rate lately (see [`AirBudget::aggregation`]).
    pub fn extra_acked(&self) -> u64 {
        self.extra.best().unwrap_or(0)
    }

    /// The client's delivery rate (bytes/s): the highest sample of the last [`RATE_ROUNDS`]
    /// rounds; `None` before a round was measured.
    pub fn rate(&self) -> Option<f64> {
        self.maxima.best()
    }

    pub fn min_rtt(&self) -> Option<Duration> {
        self.min_rtt
    }

    /// The bytes the client may have unacknowledged over all its connections.
    pub fn budget(&self) -> u64 {
        let measured = match (self.rate(), self.min_rtt) {
            (Some(rate), Some(rtt)) => (self.cfg.gain * rate * rtt.as_secs_f64()) as u64,
            _ => 0,
        };
        let late = if self.cfg.late_acks {
            self.extra_acked()
        } else {
            0
        };
        measured.max(self.cfg.floor) + late
    }
}

/// The clients' budgets, one per client address; `None` inside: the budget is off.
#[derive(Debug, Default)]
pub struct AirBudgets {
    cfg: Option<BudgetConfig>,
    clients: Mutex<HashMap<IpAddr, Weak<ClientAir>>>,
}

impl AirBudgets {
    /// Budgets with `cfg`, or none (every write goes straight through).
    pub fn new(cfg: Option<BudgetConfig>) -> AirBudgets {
        AirBudgets {
            cfg,
            clients: Mutex::default(),
        }
    }

    /// Registers a connection of `client` whose socket is `fd`: its writes, wrapped in
    /// [`AirGated`] with the slot, count against the client's budget until the slot is
    /// dropped. The slot must be dropped before the socket is closed (it reads the socket by
    /// its descriptor); `AirGated` drops it first. `None` when the budget is off.
    pub fn join(&self, client: IpAddr, fd: BorrowedFd<'_>) -> Option<AirSlot> {
        let cfg = self.cfg?;
        let air = {
            let mut clients = self.clients.lock().unwrap_or_else(|e| e.into_inner());
            match clients.get(&client).and_then(Weak::upgrade) {
                Some(a) => a,
                None => {
                    // Clients whose connections have all gone are forgotten when others come.
                    if clients.len() >= 1024 {
                        clients.retain(|_, w| w.strong_count() > 0);
                    }
                    let a = Arc::new(ClientAir {
                        state: Mutex::new(AirState::new(cfg)),
                    });
                    clients.insert(client, Arc::downgrade(&a));
                    a
                }
            }
        };
        let id = {
            let mut st = air.lock();
            st.next_id += 1;
            let id = st.next_id;
            let fd = fd.as_raw_fd();
            let counters = socket_counters(fd);
            st.budget
                .rtt_seen(counters.as_ref().and_then(|c| c.min_rtt));
            let base = counters.map_or(0, |c| c.acked);
            st.conns.push(Conn { id, fd, base });
            id
        };
        Some(AirSlot {
            air,
            id,
            ticket: None,
        })
    }
}

impl AirBudgets {
    /// The bytes waiting for `client`'s link: those unacknowledged on its connections at the
    /// last measurement and written since, and what each writer waiting for room has to
    /// write (a response at hand is one write: all of it), 0 when the budget is off or the
    /// client is not held. A response made now waits for them before its own bytes go.
    pub fn waiting_bytes(&self, client: IpAddr) -> u64 {
        if self.cfg.is_none() {
            return 0;
        }
        let air = {
            let clients = self.clients.lock().unwrap_or_else(|e| e.into_inner());
            clients.get(&client).and_then(Weak::upgrade)
        };
        let Some(air) = air else {
            return 0;
        };
        let st = air.lock();
        if !st.budget.holds() {
            return 0;
        }
        st.unacked + st.written_since + st.queue.iter().map(|w| w.bytes).sum::<u64>()
    }
}

/// One client's connections and budget.
#[derive(Debug)]
pub struct ClientAir {
    state: Mutex<AirState>,
}

impl ClientAir {
    fn lock(&self) -> std::sync::MutexGuard<'_, AirState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[derive(Debug)]
struct Conn {
    id: u64,
    fd: RawFd,
    /// The socket's acknowledged bytes when it joined (a socket may join twice: its
    /// requests', then its tunnel's).
    base: u64,
}

#[derive(Debug)]
struct AirState {
    budget: AirBudget,
    conns: Vec<Conn>,
    next_id: u64,
    /// Bytes acknowledged on connections that have left.
    retired: u64,
    /// Unacknowledged bytes over all connections at the last measurement...
    unacked: u64,
    /// ...and bytes written since.
    written_since: u64,
    measured_at: Option<Instant>,
    /// Writers waiting for room, served in turn (one write each, then to the back), and
    /// whether a task is measuring for them.
    queue: VecDeque<Waiter>,
    next_ticket: u64,
    ticking: bool,
}

impl AirState {
    fn new(cfg: BudgetConfig) -> AirState {
        AirState {
            budget: AirBudget::new(cfg),
            conns: Vec::new(),
            next_id: 0,
            retired: 0,
            unacked: 0,
            written_since: 0,
            measured_at: None,
            queue: VecDeque::new(),
            next_ticket: 0,
            ticking: false,
        }
    }

    /// How often writers that wait look again: a quarter round, within [1 ms, 50 ms].
    fn tick(&self) -> Duration {
        (self.budget.round() / 4).clamp(Duration::from_millis(1), Duration::from_millis(50))
    }

    /// Reads every connection's counters (the descriptors are valid: a slot leaves before
    /// its socket closes, under this state's lock).
    fn measure(&mut self, now: Instant) {
        let mut unacked = 0;
        let mut acked = self.retired;
        let mut min_rtt: Option<Duration> = None;
        for c in &self.conns {
            if let Some(k) = socket_counters(c.fd) {
                unacked += k.unacked;
                acked += k.acked.saturating_sub(c.base);
                if let Some(r) = k.min_rtt {
                    min_rtt = Some(min_rtt.map_or(r, |m| m.min(r)));
                }
            }
        }
        self.budget.measured(now, acked, min_rtt);
        self.unacked = unacked;
        self.written_since = 0;
        self.measured_at = Some(now);
    }

    fn measure_if_stale(&mut self, now: Instant) {
        if self
            .measured_at
            .is_none_or(|t| now.saturating_duration_since(t) >= self.tick())
        {
            self.measure(now);
        }
    }

    /// The bytes that may be written now.
    fn room(&self) -> u64 {
        self.budget
            .budget()
            .saturating_sub(self.unacked + self.written_since)
    }
}

/// A writer waiting for its turn.
#[derive(Debug)]
struct Waiter {
    ticket: u64,
    waker: Waker,
    /// Ticks since it was woken at the front without writing: a writer whose future was
    /// dropped (its connection busy elsewhere) must not hold the others back.
    woken_ticks: u32,
    /// The length of the write it waits to make.
    bytes: u64,
}

/// Ticks a woken writer at the front may take to write before it loses its turn.
const TURN_TICKS: u32 = 4;

impl AirState {
    /// Wakes the first waiter, if any.
    fn wake_front(&mut self) {
        if let Some(w) = self.queue.front_mut() {
            w.woken_ticks = w.woken_ticks.max(1);
            w.waker.wake_by_ref();
        }
    }

    /// The most one turn may write: a quarter of the budget, so that a turn of a bulk
    /// response leaves room for the next writer's small one.
    fn quantum(&self) -> u64 {
        (self.budget.budget() / 4).max(1)
    }
}

/// A connection's place in its client's budget; dropping it leaves.
#[derive(Debug)]
pub struct AirSlot {
    air: Arc<ClientAir>,
    id: u64,
    /// Its place in the queue of waiting writers.
    ticket: Option<u64>,
}

impl Drop for AirSlot {
    fn drop(&mut self) {
        let mut st = self.air.lock();
        if let Some(i) = st.conns.iter().position(|c| c.id == self.id) {
            let c = st.conns.swap_remove(i);
            if let Some(k) = socket_counters(c.fd) {
                st.retired += k.acked.saturating_sub(c.base);
            }
        }
        if let Some(t) = self.ticket {
            if let Some(i) = st.queue.iter().position(|w| w.ticket == t) {
                st.queue.remove(i);
                if i == 0 {
                    st.wake_front();
                }
            }
        }
    }
}

/// What the kernel counts for one TCP socket.
struct SocketCounters {
    /// Bytes written and not yet acknowledged (`TIOCOUTQ`: in flight and still unsent).
    unacked: u64,
    /// `tcpi_bytes_acked`.
    acked: u64,
    min_rtt: Option<Duration>,
}

/// `tcpi_bytes_acked`'s offset in Linux's `struct tcp_info` (since 4.1).
const BYTES_ACKED: usize = 120;

fn socket_counters(fd: RawFd) -> Option<SocketCounters> {
    let mut outq: libc::c_int = 0;
    // SAFETY: fd is a socket the caller keeps open; outq is a live c_int.
    if unsafe { libc::ioctl(fd, libc::TIOCOUTQ, &mut outq) } != 0 {
        return None;
    }
    let info = crate::client_link::tcp_info(fd)?;
    let acked = crate::client_link::u64_at(&info, BYTES_ACKED)?;
    Some(SocketCounters {
        unacked: outq.max(0) as u64,
        acked,
        min_rtt: crate::client_link::ClientLink::from_tcp_info(&info).min_rtt,
    })
}

/// A client connection's writing side, held to its client's budget (a pass-through without
/// a slot). The slot is declared first so that it leaves before the socket closes.
pub struct AirGated<S> {
    slot: Option<AirSlot>,
    inner: S,
}

impl<S> AirGated<S> {
    pub fn new(slot: Option<AirSlot>, inner: S) -> AirGated<S> {
        AirGated { slot, inner }
    }

    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The stream, out of the budget.
    pub fn into_inner(self) -> S {
        let AirGated { slot, inner } = self;
        drop(slot);
        inner
    }
}

/// Measures for `air`'s waiting writers every tick and wakes the first when there is room;
/// ends when none waits.
fn start_ticker(air: Arc<ClientAir>) {
    tokio::spawn(async move {
        loop {
            let tick = air.lock().tick();
            tokio::time::sleep(tick).await;
            let mut st = air.lock();
            st.measure(Instant::now());
            if st.room() > 0 {
                if st.queue.front().is_some_and(|w| w.woken_ticks > TURN_TICKS) {
                    st.queue.pop_front();
                }
                if let Some(w) = st.queue.front_mut() {
                    if w.woken_ticks > 0 {
                        w.woken_ticks += 1;
                    }
                }
                st.wake_front();
            }
            if st.queue.is_empty() {
                st.ticking = false;
                return;
            }
        }
    });
}

impl<S: AsyncWrite + Unpin> AsyncWrite for AirGated<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let this = &mut *self;
        let Some(slot) = &mut this.slot else {
            return Pin::new(&mut this.inner).poll_write(cx, buf);
        };
        let mut st = slot.air.lock();
        if !st.budget.holds() || buf.is_empty() {
            drop(st);
            return Pin::new(&mut this.inner).poll_write(cx, buf);
        }
        let place = slot
            .ticket
            .and_then(|t| st.queue.iter().position(|w| w.ticket == t));
        if place.is_none() {
            slot.ticket = None;
        }
        // Writers take turns: one that waits goes when it is first; one that comes while
        // others wait goes behind them.
        let first = match place {
            Some(i) => i == 0,
            None => st.queue.is_empty(),
        };
        if first {
            // The last measurement over-counts what is unacknowledged (acknowledgements
            // came since): measured again only when it leaves too little room.
            let mut room = st.room();
            if room < buf.len() as u64 {
                st.measure_if_stale(Instant::now());
                room = st.room();
            }
            if room > 0 {
                let n = (buf.len() as u64).min(room).min(st.quantum());
                let r = Pin::new(&mut this.inner).poll_write(cx, &buf[..n as usize]);
                if let Poll::Ready(Ok(w)) = r {
                    st.written_since += w as u64;
                }
                // Written, failed, or the socket is full (its reader lags): the turn passes
                // either way, and the next writer goes if there is room.
                if place.is_some() {
                    st.queue.pop_front();
                    slot.ticket = None;
                }
                if st.room() > 0 {
                    st.wake_front();
                }
                return r;
            }
        }
        match place {
            Some(i) => {
                st.queue[i].waker = cx.waker().clone();
                st.queue[i].woken_ticks = 0;
                st.queue[i].bytes = buf.len() as u64;
            }
            None => {
                st.next_ticket += 1;
                let ticket = st.next_ticket;
                st.queue.push_back(Waiter {
                    ticket,
                    waker: cx.waker().clone(),
                    woken_ticks: 0,
                    bytes: buf.len() as u64,
                });
                slot.ticket = Some(ticket);
            }
        }
        if !st.ticking {
            st.ticking = true;
            start_ticker(slot.air.clone());
        }
        Poll::Pending
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for AirGated<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    const MS: Duration = Duration::from_millis(1);

    fn cfg() -> BudgetConfig {
        BudgetConfig::default()
    }

    #[test]
    fn a_new_client_has_the_floor() {
        let b = AirBudget::new(cfg());
        assert_eq!(b.rate(), None);
        assert_eq!(b.budget(), 16 * 1024);
    }

    #[test]
    fn the_budget_is_gain_times_the_rate_times_the_least_rtt() {
        // A link of 500 KB/s and 100 ms: 50 KB in flight fills it; the budget is twice that.
        let mut b = AirBudget::new(cfg());
        let t0 = Instant::now();
        for i in 0..=40u64 {
            let rtt = if i % 2 == 0 { 100 * MS } else { 180 * MS };
            b.measured(t0 + 25 * MS * i as u32, 12_500 * i, Some(rtt));
        }
        assert_eq!(b.min_rtt(), Some(100 * MS));
        let rate = b.rate().unwrap();
        assert!((rate - 500_000.0).abs() < 1.0, "{rate}");
        assert!(b.budget().abs_diff(100_000) <= 1, "{}", b.budget());
    }

    #[test]
    fn a_slow_link_keeps_the_floor() {
        // GPRS: 4.75 KB/s and 700 ms; twice rate × RTT is 6.6 KB, under the floor.
        let mut b = AirBudget::new(cfg());
        let t0 = Instant::now();
        for i in 0..=20u64 {
            b.measured(t0 + 175 * MS * i as u32, 831 * i, Some(700 * MS));
        }
        assert!(b.rate().unwrap() > 4_700.0);
        assert_eq!(b.budget(), 16 * 1024);
    }

    #[test]
    fn the_rate_is_the_highest_of_ten_rounds_then_falls() {
        let mut b = AirBudget::new(cfg());
        let t0 = Instant::now();
        let mut acked = 0;
        let mut t = t0;
        // 2 s at 1 MB/s, measured every 10 ms, RTT 50 ms.
        for _ in 0..200 {
            t += 10 * MS;
            acked += 10_000;
            b.measured(t, acked, Some(50 * MS));
        }
        assert!((b.rate().unwrap() - 1e6).abs() < 1.0);
        // Then 100 KB/s: the high sample stands for ten rounds (500 ms), then goes.
        for i in 1..=100 {
            t += 10 * MS;
            acked += 1_000;
            b.measured(t, acked, Some(50 * MS));
            let r = b.rate().unwrap();
            if i <= 50 {
                assert!(r > 900_000.0, "step {i}: {r}");
            }
        }
        assert!((b.rate().unwrap() - 100_000.0).abs() < 1.0);
        assert_eq!(b.budget(), 16 * 1024);
    }

    #[test]
    fn an_idle_client_keeps_its_rate_for_the_window() {
        let mut b = AirBudget::new(cfg());
        let t0 = Instant::now();
        for i in 0..=10u64 {
            b.measured(t0 + 50 * MS * i as u32, 25_000 * i, Some(50 * MS));
        }
        assert!(b.budget().abs_diff(50_000) <= 1, "{}", b.budget());
        // Nothing acknowledged for 300 ms (app-limited): the rate stands.
        b.measured(t0 + 800 * MS, 250_000, Some(50 * MS));
        assert!(b.budget().abs_diff(50_000) <= 1, "{}", b.budget());
    }

    #[test]
    fn acknowledgements_that_come_together_grow_the_budget_by_what_they_carry() {
        // 100 KB/s, RTT 50 ms: 5 KB of rate x RTT, budget 10 KB...
        let mut b = AirBudget::new(BudgetConfig {
            floor: 4096,
            ..cfg()
        });
        let t0 = Instant::now();
        let mut acked = 0;
        for i in 1..=40u32 {
            acked += 1_000;
            b.measured(t0 + 10 * MS * i, acked, Some(50 * MS));
        }
        assert_eq!(b.extra_acked(), 0, "steady acknowledgements are the rate");
        assert!(b.budget().abs_diff(10_000) <= 1, "{}", b.budget());
        // ...then the uplink holds the acknowledgements for 300 ms and lets them go at once:
        // 30 KB that had arrived come together.
        let stall = t0 + 400 * MS;
        for i in 1..=30u32 {
            b.measured(stall + 10 * MS * i, acked, Some(50 * MS));
        }
        acked += 30_000;
        b.measured(stall + 310 * MS, acked, Some(50 * MS));
        let extra = b.extra_acked();
        assert!((28_000..=31_000).contains(&extra), "{extra}");
        assert!(b.budget() >= 10_000 + 28_000, "{}", b.budget());
        // With steady acknowledgements again it is forgotten once its epoch (ten rounds at
        // most) and then EXTRA_WINDOW have passed.
        for i in 1..=1_100u32 {
            acked += 1_000;
            b.measured(stall + 310 * MS + 10 * MS * i, acked, Some(50 * MS));
        }
        assert_eq!(b.extra_acked(), 0);
    }

    #[test]
    fn a_near_client_is_not_held() {
        let mut b = AirBudget::new(cfg());
        assert!(b.holds(), "an unmeasured client is held");
        b.rtt_seen(Some(20 * MS));
        assert!(b.holds());
        b.rtt_seen(Some(Duration::from_micros(40)));
        assert!(!b.holds(), "loopback");
    }

    #[test]
    fn a_counter_that_goes_back_restarts_the_samples() {
        let mut b = AirBudget::new(cfg());
        let t0 = Instant::now();
        b.measured(t0, 1_000_000, Some(10 * MS));
        b.measured(t0 + 5 * MS, 10, Some(10 * MS));
        b.measured(t0 + 20 * MS, 1_010, Some(10 * MS));
        assert_eq!(b.rate(), Some(1_000.0 / 0.015));
    }

    /// Two connections of one client on loopback whose reader lags (a 4 KB receive buffer:
    /// what is not taken stays unacknowledged in the sender's queue, as on a slow link).
    /// Returns the most their queues held together while both writers had 200 KB to send,
    /// and checks that every byte arrived in order.
    async fn two_lagging_connections(budgets: AirBudgets) -> u64 {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let mut readers = Vec::new();
        let mut fds = Vec::new();
        let mut writers = Vec::new();
        let data: Arc<Vec<u8>> = Arc::new((0..200_000u32).map(|i| (i % 251) as u8).collect());
        for _ in 0..2 {
            let (client, server_side) = lagging_pair(&listener).await;
            let peer = server_side.peer_addr().unwrap();
            readers.push(client);
            fds.push(server_side.as_raw_fd());
            let slot = budgets.join(peer.ip(), server_side.as_fd());
            let data = data.clone();
            writers.push(tokio::spawn(async move {
                let mut g = AirGated::new(slot, server_side);
                g.write_all(&data).await.unwrap();
                g.into_inner() // kept open until the end: `fds` are read until then
            }));
        }
        fn queued(fds: &[RawFd]) -> u64 {
            fds.iter()
                .map(|&fd| socket_counters(fd).expect("a TCP socket").unacked)
                .sum()
        }
        // The writers run as far as they may (virtual time: the ticks pass at once).
        for _ in 0..50 {
            tokio::task::yield_now().await;
            tokio::time::sleep(MS).await;
        }
        // Each connection read apart (a browser's connections are), 1 KB at a time, with
        // both queues looked at after each read.
        let most = Arc::new(std::sync::atomic::AtomicU64::new(queued(&fds)));
        let readers: Vec<_> = readers
            .into_iter()
            .map(|mut r| {
                let (data, fds, most) = (data.clone(), fds.clone(), most.clone());
                tokio::spawn(async move {
                    let mut got = Vec::new();
                    let mut buf = [0u8; 1024];
                    while got.len() < data.len() {
                        let n = r.read(&mut buf).await.unwrap();
                        assert!(n > 0, "closed early");
                        got.extend_from_slice(&buf[..n]);
                        most.fetch_max(queued(&fds), std::sync::atomic::Ordering::Relaxed);
                        tokio::task::yield_now().await;
                    }
                    assert!(got == *data, "bytes lost or out of order");
                })
            })
            .collect();
        for r in readers {
            r.await.unwrap();
        }
        for w in writers {
            w.await.unwrap();
        }
        most.load(std::sync::atomic::Ordering::Relaxed)
    }

    #[tokio::test(start_paused = true)]
    async fn a_clients_connections_together_stay_within_the_budget() {
        // gain 0 and no allowance for late acknowledgements: the floor alone (the estimate
        // is tested above; loopback's rate × RTT is anything).
        let floor = 16 * 1024;
        let budgets = AirBudgets::new(Some(BudgetConfig {
            gain: 0.0,
            floor,
            held_from_rtt: Duration::ZERO,
            late_acks: false,
        }));
        let most = two_lagging_connections(budgets).await;
        assert!(most > 0, "nothing was queued");
        assert!(
            most <= floor,
            "{most} bytes unacknowledged, over the budget of {floor}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn without_a_budget_the_same_writers_queue_far_more() {
        let most = two_lagging_connections(AirBudgets::new(None)).await;
        assert!(most > 64 * 1024, "{most}");
    }

    /// A connection of the loopback client whose receive buffer is 4 KB (what its reader
    /// has not taken stays unacknowledged at the sender): (reader, server's side).
    async fn lagging_pair(
        listener: &tokio::net::TcpListener,
    ) -> (tokio::net::TcpStream, tokio::net::TcpStream) {
        let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
        s.set_recv_buffer_size(4096).unwrap();
        s.set_nonblocking(true).unwrap();
        let s = tokio::net::TcpSocket::from_std_stream(s.into());
        let (client, accepted) =
            tokio::join!(s.connect(listener.local_addr().unwrap()), listener.accept());
        (client.unwrap(), accepted.unwrap().0)
    }

    fn floor_only() -> AirBudgets {
        AirBudgets::new(Some(BudgetConfig {
            gain: 0.0,
            floor: 16 * 1024,
            held_from_rtt: Duration::ZERO,
            late_acks: false,
        }))
    }

    /// Reads everything `r` gets until `len` bytes, adding them to `count` as they come.
    fn read_all(
        mut r: tokio::net::TcpStream,
        len: usize,
        count: Arc<std::sync::atomic::AtomicUsize>,
    ) -> tokio::task::JoinHandle<()> {
        use tokio::io::AsyncReadExt;
        tokio::spawn(async move {
            let mut buf = [0u8; 1024];
            let mut got = 0;
            while got < len {
                let n = r.read(&mut buf).await.unwrap();
                assert!(n > 0, "closed early");
                got += n;
                count.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
                tokio::task::yield_now().await;
            }
        })
    }

    #[tokio::test(start_paused = true)]
    async fn a_small_response_is_not_queued_behind_a_bulk_one() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        use tokio::io::AsyncWriteExt;
        let budgets = floor_only();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let (bulk_reader, bulk_side) = lagging_pair(&listener).await;
        let (small_reader, small_side) = lagging_pair(&listener).await;
        let ip = bulk_side.peer_addr().unwrap().ip();
        let mut bulk = AirGated::new(budgets.join(ip, bulk_side.as_fd()), bulk_side);
        let mut small = AirGated::new(budgets.join(ip, small_side.as_fd()), small_side);
        let bulk_writer = tokio::spawn(async move {
            bulk.write_all(&[1u8; 300_000]).await.unwrap();
            bulk
        });
        // The bulk response has the whole budget before the small one comes.
        for _ in 0..20 {
            tokio::time::sleep(MS).await;
        }
        let small_writer = tokio::spawn(async move {
            small.write_all(&[2u8; 2_000]).await.unwrap();
            small
        });
        let bulk_got = Arc::new(AtomicUsize::new(0));
        let small_got = Arc::new(AtomicUsize::new(0));
        let bulk_read = read_all(bulk_reader, 300_000, bulk_got.clone());
        read_all(small_reader, 2_000, small_got).await.unwrap();
        let before_small = bulk_got.load(Ordering::Relaxed);
        // What the bulk response had in the budget, and at most its turn's quarter more.
        assert!(
            before_small <= 16 * 1024 + 4 * 1024 + 4096,
            "{before_small} bytes of the bulk response came before the small one"
        );
        bulk_read.await.unwrap();
        bulk_writer.await.unwrap();
        small_writer.await.unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn a_writer_that_stops_waiting_loses_its_turn_only() {
        use std::sync::atomic::AtomicUsize;
        use tokio::io::AsyncWriteExt;
        let budgets = floor_only();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let (a_reader, a_side) = lagging_pair(&listener).await;
        let (_b_reader, b_side) = lagging_pair(&listener).await;
        let (c_reader, c_side) = lagging_pair(&listener).await;
        let ip = a_side.peer_addr().unwrap().ip();
        let mut a = AirGated::new(budgets.join(ip, a_side.as_fd()), a_side);
        let mut b = AirGated::new(budgets.join(ip, b_side.as_fd()), b_side);
        let mut c = AirGated::new(budgets.join(ip, c_side.as_fd()), c_side);
        // a takes the budget; b queues, then gives up on its write (the future is dropped,
        // the connection lives on); c queues behind b.
        let a_writer = tokio::spawn(async move {
            a.write_all(&[1u8; 64 * 1024]).await.unwrap();
            a
        });
        for _ in 0..20 {
            tokio::time::sleep(MS).await;
        }
        let gave_up = tokio::time::timeout(MS, b.write_all(&[2u8; 1000])).await;
        assert!(gave_up.is_err(), "b had no room and waited");
        // What is in flight, and what each waiting writer has still to write: all but the
        // budget's worth (and a turn) of a's 64 KB, and b's 1000 bytes.
        let waiting = budgets.waiting_bytes(ip);
        assert!(waiting >= (64 - 16 - 4) * 1024 + 1000, "{waiting}");
        assert!(waiting <= 64 * 1024 + 1000, "{waiting}");
        let c_writer = tokio::spawn(async move {
            c.write_all(&[3u8; 8_000]).await.unwrap();
            c
        });
        let a_read = read_all(a_reader, 64 * 1024, Arc::new(AtomicUsize::new(0)));
        read_all(c_reader, 8_000, Arc::new(AtomicUsize::new(0)))
            .await
            .unwrap();
        a_read.await.unwrap();
        c_writer.await.unwrap();
        a_writer.await.unwrap();
        drop(b);
    }
}
