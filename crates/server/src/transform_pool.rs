//! A bounded pool for the response transforms (image transcoding, brotli): at most `workers`
//! run at once on tokio's blocking threads, the rest wait their turn in order.
//!
//! Why bounded: a transcode decodes the image and keeps several float planes for SSIM, about
//! 40 bytes per pixel at its peak, and uses a core for tens of milliseconds. tokio's blocking
//! pool would start up to 512 of them at once, so a burst of large images (each within
//! `max-pixels`) could take gigabytes and every core at once, and slow the connections'
//! own I/O. Bounded, the memory is at most `workers` × 40 B × `max-pixels`, and a burst
//! queues instead of thrashing. Each job also reserves its estimated peak memory from a
//! shared budget (`[limits] transform-memory`), so many cores do not multiply that bound.

use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Semaphore;

/// Counts shared by the pool and its jobs (a job may outlive the request that queued it).
#[derive(Debug, Default)]
struct Gauges {
    waiting: AtomicI64,
    /// The expected work (µs) of the jobs a client's job queued now would wait behind: the
    /// clients' jobs waiting, and the background jobs past their turn waiting for a slot.
    work_ahead_us: AtomicI64,
    running: AtomicI64,
    /// Highest `running` seen since start.
    peak: AtomicUsize,
}

/// At most `workers` transforms at once.
#[derive(Debug, Clone)]
pub struct TransformPool {
    slots: Arc<Semaphore>,
    /// Background jobs (prefetches) hold one of these while they wait for or hold a slot, so
    /// they never take more than `workers − 1` slots (1 with one worker) and a client's
    /// request waits behind at most that many of them.
    background: Arc<Semaphore>,
    /// The memory jobs may reserve at once, in [`MEMORY_UNIT`]s (None: unbounded).
    memory: Option<Arc<Semaphore>>,
    memory_units: u32,
    workers: usize,
    gauges: Arc<Gauges>,
}

/// The grain of memory reservations (64 KiB), so a bound of terabytes still counts in u32.
pub const MEMORY_UNIT: u64 = 64 * 1024;

/// Whose work a job is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Priority {
    /// For a response a client is waiting for.
    Client,
    /// Work no client waits for yet (prefetch).
    Background,
}

/// Why a job did not return a value.
#[derive(Debug, PartialEq, Eq)]
pub enum JobError {
    /// The job panicked; its slot was released.
    Panicked,
    /// The pool was closed before a slot was free (the proxy never closes it).
    Closed,
}

/// Adds to a gauge until dropped (a job counted, or its expected work), so that a cancelled
/// wait or a panicking job still counts right.
struct Count<'a>(&'a AtomicI64, i64);

impl<'a> Count<'a> {
    /// Adds `w`; also returns the gauge this made (not a later one's).
    fn add(g: &'a AtomicI64, w: i64) -> (Count<'a>, i64) {
        let now = g.fetch_add(w, Relaxed) + w;
        (Count(g, w), now)
    }

    /// Counts one more.
    fn up(g: &'a AtomicI64) -> (Count<'a>, i64) {
        Count::add(g, 1)
    }
}

impl Drop for Count<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(self.1, Relaxed);
    }
}

impl TransformPool {
    /// A pool of `workers` slots; 0 means one per available core. No memory bound.
    pub fn new(workers: usize) -> TransformPool {
        TransformPool::with_memory(workers, 0)
    }

    /// A pool of `workers` slots whose jobs reserve at most `memory` bytes at once (0: no
    /// bound but the slots).
    pub fn with_memory(workers: usize, memory: u64) -> TransformPool {
        let workers = if workers == 0 {
            std::thread::available_parallelism().map_or(1, |n| n.get())
        } else {
            workers
        };
        let memory_units = u32::try_from(memory.div_ceil(MEMORY_UNIT)).unwrap_or(u32::MAX >> 4);
        TransformPool {
            slots: Arc::new(Semaphore::new(workers)),
            background: Arc::new(Semaphore::new(workers.saturating_sub(1).max(1))),
            memory: (memory_units > 0).then(|| Arc::new(Semaphore::new(memory_units as usize))),
            memory_units,
            workers,
            gauges: Arc::default(),
        }
    }

    /// Slots in the pool.
    pub fn workers(&self) -> usize {
        self.workers
    }

    /// Jobs waiting for a slot now.
    pub fn waiting(&self) -> i64 {
        self.gauges.waiting.load(Relaxed)
    }

    /// The expected work of the jobs a client's job queued now would wait behind, as their
    /// callers estimated it ([`run_costed`](Self::run_costed)): the clients' jobs waiting and
    /// the background jobs already waiting for a slot (the others wait for their turn, at
    /// most `workers − 1` at a time, behind it). Not `waiting` × this job's work: a burst of
    /// deferred variants queued in the background does not stand in a client's way, and a
    /// queue of small texts is not a queue of photos.
    pub fn work_ahead_of_client(&self) -> Duration {
        Duration::from_micros(self.gauges.work_ahead_us.load(Relaxed).max(0) as u64)
    }

    /// Jobs running now.
    pub fn running(&self) -> i64 {
        self.gauges.running.load(Relaxed)
    }

    /// The most jobs that ran at once since the pool was made.
    pub fn peak_running(&self) -> usize {
        self.gauges.peak.load(Relaxed)
    }

    /// Runs `job` on a blocking thread once a slot is free. The slot is held until the job
    /// returns, even if the caller stops waiting (the work cannot be interrupted, so it
    /// still counts against the bound). Dropping the future before a slot is free drops the
    /// job unrun.
    pub async fn run<T, F>(&self, job: F) -> Result<T, JobError>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        self.run_as(Priority::Client, 0, job).await
    }

    /// The memory bound in bytes (0: none).
    pub fn memory_limit(&self) -> u64 {
        u64::from(self.memory_units) * MEMORY_UNIT
    }

    /// Bytes reserved now: by running jobs, and what waiting ones hold so far.
    pub fn memory_reserved(&self) -> u64 {
        match &self.memory {
            Some(m) => u64::from(self.memory_units)
                .saturating_sub(m.available_permits() as u64)
                .saturating_mul(MEMORY_UNIT),
            None => 0,
        }
    }

    /// [`run`](Self::run) at a priority, reserving `memory` bytes (the job's peak, as
    /// estimated by the caller) for as long as it runs: background jobs take at most
    /// `workers − 1` slots (1 with one worker), so a client's job always finds a slot free or
    /// waits behind at most that many of them; and jobs wait until their memory is free (one
    /// that needs more than the whole bound runs alone).
    pub async fn run_as<T, F>(&self, priority: Priority, memory: u64, job: F) -> Result<T, JobError>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        self.run_costed(priority, memory, Duration::ZERO, job).await
    }

    /// [`run_as`](Self::run_as) with the job's expected `work`, counted in
    /// [`work_ahead_of_client`](Self::work_ahead_of_client) while it waits.
    pub async fn run_costed<T, F>(
        &self,
        priority: Priority,
        memory: u64,
        work: Duration,
        job: F,
    ) -> Result<T, JobError>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        let us = i64::try_from(work.as_micros()).unwrap_or(i64::MAX / 4);
        let (reserved, turn, slot) = {
            let (_waiting, _) = Count::up(&self.gauges.waiting);
            let _client =
                (priority == Priority::Client).then(|| Count::add(&self.gauges.work_ahead_us, us));
            // The semaphores are never closed, so acquiring only waits.
            let units = u32::try_from(memory.div_ceil(MEMORY_UNIT))
                .unwrap_or(u32::MAX)
                .min(self.memory_units);
            let reserved = match &self.memory {
                Some(m) if units > 0 => Some(
                    m.clone()
                        .acquire_many_owned(units)
                        .await
                        .map_err(|_| JobError::Closed)?,
                ),
                _ => None,
            };
            let turn = match priority {
                Priority::Client => None,
                Priority::Background => Some(
                    self.background
                        .clone()
                        .acquire_owned()
                        .await
                        .map_err(|_| JobError::Closed)?,
                ),
            };
            let _at_slot = turn
                .is_some()
                .then(|| Count::add(&self.gauges.work_ahead_us, us));
            let slot = self
                .slots
                .clone()
                .acquire_owned()
                .await
                .map_err(|_| JobError::Closed)?;
            (reserved, turn, slot)
        };
        let gauges = self.gauges.clone();
        tokio::task::spawn_blocking(move || {
            let _slot = slot;
            let _turn = turn;
            let _reserved = reserved;
            let (_running, now) = Count::up(&gauges.running);
            gauges.peak.fetch_max(now.max(0) as usize, Relaxed);
            job()
        })
        .await
        .map_err(|_| JobError::Panicked)
    }

    /// Prometheus text of the pool's gauges.
    pub fn metrics_text(&self) -> String {
        format!(
            "# HELP webpep_transform_workers Transforms (image transcoding, compression) allowed at once ([limits] transform-workers).\n# TYPE webpep_transform_workers gauge\nwebpep_transform_workers {}\n\
             # HELP webpep_transforms_running Transforms running now.\n# TYPE webpep_transforms_running gauge\nwebpep_transforms_running {}\n\
             # HELP webpep_transforms_running_max The most transforms that ran at once since start.\n# TYPE webpep_transforms_running_max gauge\nwebpep_transforms_running_max {}\n\
             # HELP webpep_transforms_waiting Transforms waiting for a free worker or memory now.\n# TYPE webpep_transforms_waiting gauge\nwebpep_transforms_waiting {}\n\
             # HELP webpep_transform_memory_limit_bytes Memory transforms may reserve at once ([limits] transform-memory; 0: unbounded).\n# TYPE webpep_transform_memory_limit_bytes gauge\nwebpep_transform_memory_limit_bytes {}\n\
             # HELP webpep_transform_memory_reserved_bytes Memory reserved by transforms now (a transcode about 40 bytes per pixel).\n# TYPE webpep_transform_memory_reserved_bytes gauge\nwebpep_transform_memory_reserved_bytes {}\n",
            self.workers,
            self.running(),
            self.peak_running(),
            self.waiting(),
            self.memory_limit(),
            self.memory_reserved()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    fn busy(ms: u64) -> impl FnOnce() -> u64 + Send + 'static {
        move || {
            std::thread::sleep(Duration::from_millis(ms));
            ms
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn no_more_than_the_workers_run_at_once_and_all_finish() {
        for workers in [1, 3] {
            let pool = TransformPool::new(workers);
            let started = Instant::now();
            let jobs: Vec<_> = (0..8)
                .map(|_| {
                    let p = pool.clone();
                    tokio::spawn(async move { p.run(busy(40)).await })
                })
                .collect();
            for j in jobs {
                assert_eq!(j.await.unwrap(), Ok(40));
            }
            assert_eq!(pool.peak_running(), workers, "workers {workers}");
            // 8 jobs of 40 ms in ceil(8 / workers) rounds, not all at once.
            let rounds = 8usize.div_ceil(workers) as u32;
            assert!(
                started.elapsed() >= Duration::from_millis(40) * rounds,
                "workers {workers}: {:?}",
                started.elapsed()
            );
            assert_eq!((pool.running(), pool.waiting()), (0, 0));
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn jobs_wait_for_memory_and_an_oversized_one_runs_alone() {
        let unit = MEMORY_UNIT;
        // Three workers, but memory for one 6-unit job at a time.
        let pool = TransformPool::with_memory(3, 10 * unit);
        assert_eq!(pool.memory_limit(), 10 * unit);
        let started = Instant::now();
        let mut jobs = Vec::new();
        for m in [6 * unit, 6 * unit, 1000 * unit] {
            let p = pool.clone();
            jobs.push(tokio::spawn(async move {
                p.run_as(Priority::Client, m, busy(100)).await
            }));
            // In this order.
            tokio::time::sleep(Duration::from_millis(15)).await;
        }
        assert_eq!(pool.running(), 1);
        // Waiters hold what they have been given so far (tokio's semaphore is fair).
        assert!(pool.memory_reserved() >= 6 * unit);
        assert!(pool.memory_reserved() <= pool.memory_limit());
        // Jobs that need no memory still run beside them.
        assert_eq!(pool.run(|| 1u8).await, Ok(1));
        for j in jobs {
            assert_eq!(j.await.unwrap(), Ok(100));
        }
        assert!(
            started.elapsed() >= Duration::from_millis(300),
            "one at a time: {:?}",
            started.elapsed()
        );
        assert_eq!(
            pool.peak_running(),
            2,
            "the memory-free job beside one big one"
        );
        assert_eq!(pool.memory_reserved(), 0);
        // No bound: memory is not counted.
        let free = TransformPool::new(2);
        assert_eq!(free.run_as(Priority::Client, u64::MAX, || 2u8).await, Ok(2));
        assert_eq!(free.memory_limit(), 0);
    }

    /// Polls until `ready` holds (the gauges are updated by other threads).
    async fn until(ready: impl Fn() -> bool) {
        while !ready() {
            tokio::task::yield_now().await;
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn background_jobs_leave_a_slot_for_clients() {
        let pool = TransformPool::new(3);
        // Ten background jobs that run until released: at most 2 of the 3 slots take them.
        let (release, held) = std::sync::mpsc::channel::<()>();
        let held = Arc::new(std::sync::Mutex::new(held));
        let bg: Vec<_> = (0..10)
            .map(|_| {
                let p = pool.clone();
                let held = held.clone();
                tokio::spawn(async move {
                    p.run_costed(
                        Priority::Background,
                        0,
                        Duration::from_millis(300),
                        move || held.lock().unwrap().recv().is_ok(),
                    )
                    .await
                })
            })
            .collect();
        until(|| pool.running() == 2 && pool.waiting() == 8).await;
        assert_eq!(
            pool.work_ahead_of_client(),
            Duration::ZERO,
            "a slot is free for a client"
        );
        // A client's job runs while every background job is still held: it did not queue
        // behind them.
        assert_eq!(pool.run(|| 10u8).await, Ok(10));
        assert_eq!(pool.peak_running(), 3);
        for _ in 0..10 {
            release.send(()).unwrap();
        }
        for j in bg {
            assert_eq!(j.await.unwrap(), Ok(true));
        }
        // With one worker, background work still runs.
        let one = TransformPool::new(1);
        assert_eq!(one.run_as(Priority::Background, 0, || 5u8).await, Ok(5));
    }

    // One runtime thread: a queued job's first poll (count it waiting, take its turn, add its
    // work, wait for the slot) ends before the test reads the gauges, which on two threads
    // could land between the `waiting` count and the work added after the turn.
    #[tokio::test(flavor = "current_thread")]
    async fn the_work_ahead_of_a_client_counts_clients_and_background_jobs_at_a_slot() {
        let pool = TransformPool::new(1);
        let ms = Duration::from_millis;
        // The only slot is held until `release` sends.
        let (release, held) = std::sync::mpsc::channel::<()>();
        let holder = {
            let p = pool.clone();
            tokio::spawn(async move { p.run(move || held.recv().is_ok()).await })
        };
        until(|| pool.running() == 1).await;
        let mut jobs = Vec::new();
        for (priority, work) in [
            (Priority::Client, ms(100)),
            (Priority::Client, ms(10)),
            (Priority::Background, ms(1000)),
            (Priority::Background, ms(2000)),
            (Priority::Background, ms(4000)),
        ] {
            let p = pool.clone();
            jobs.push(tokio::spawn(async move {
                p.run_costed(priority, 0, work, || 0u8).await
            }));
            until(|| pool.waiting() == jobs.len() as i64).await;
        }
        // Both clients' jobs, and the one background job whose turn it is (one worker: one
        // turn); the other two wait behind a client's job that comes now.
        assert_eq!(pool.work_ahead_of_client(), ms(1110));
        release.send(()).unwrap();
        assert_eq!(holder.await.unwrap(), Ok(true));
        for j in jobs {
            assert_eq!(j.await.unwrap(), Ok(0));
        }
        assert_eq!(pool.work_ahead_of_client(), Duration::ZERO);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_panicking_job_frees_its_slot_and_a_cancelled_wait_runs_nothing() {
        let pool = TransformPool::new(1);
        let r = pool.run(|| -> u8 { panic!("a broken image") }).await;
        assert_eq!(r, Err(JobError::Panicked));
        assert_eq!(pool.run(|| 7u8).await, Ok(7), "the slot came back");

        // Hold the only slot, queue a job, give up on it: it never runs, and counts go back.
        let ran = Arc::new(AtomicUsize::new(0));
        let (release, held) = std::sync::mpsc::channel::<()>();
        let holder = {
            let p = pool.clone();
            tokio::spawn(async move { p.run(move || held.recv().is_ok()).await })
        };
        until(|| pool.running() == 1).await;
        let r2 = ran.clone();
        let waiting = {
            let p = pool.clone();
            tokio::spawn(async move { p.run(move || r2.fetch_add(1, Relaxed)).await })
        };
        until(|| pool.waiting() == 1).await;
        assert_eq!((pool.running(), pool.waiting()), (1, 1));
        waiting.abort();
        let _ = waiting.await;
        assert_eq!(pool.waiting(), 0);
        release.send(()).unwrap();
        assert_eq!(holder.await.unwrap(), Ok(true));
        assert_eq!(pool.run(|| 1u8).await, Ok(1));
        assert_eq!(ran.load(Relaxed), 0, "the abandoned job never ran");
        assert!(pool.metrics_text().contains("webpep_transform_workers 1\n"));
    }

    #[test]
    fn zero_workers_means_one_per_core() {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        assert_eq!(TransformPool::new(0).workers(), cores);
    }
}
