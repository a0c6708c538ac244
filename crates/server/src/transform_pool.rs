//! A bounded pool for the response transforms (image transcoding, brotli): at most `workers`
//! run at once on tokio's blocking threads, the rest wait their turn in order.
//!
//! Why bounded: a transcode decodes the image and keeps several float planes for SSIM, about
//! 40 bytes per pixel at its peak, and uses a core for tens of milliseconds. tokio's blocking
//! pool would start up to 512 of them at once, so a burst of large images (each within
//! `max-pixels`) could take gigabytes and every core at once, and slow the connections'
//! own I/O. Bounded, the memory is at most `workers` × 40 B × `max-pixels`, and a burst
//! queues instead of thrashing.

use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;

use tokio::sync::Semaphore;

/// Counts shared by the pool and its jobs (a job may outlive the request that queued it).
#[derive(Debug, Default)]
struct Gauges {
    waiting: AtomicI64,
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
    workers: usize,
    gauges: Arc<Gauges>,
}

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

/// Decrements a gauge when dropped, so that a cancelled wait or a panicking job still counts
/// right.
struct Count<'a>(&'a AtomicI64);

impl<'a> Count<'a> {
    /// Counts one more; also returns the count this one made (not a later one's).
    fn up(g: &'a AtomicI64) -> (Count<'a>, i64) {
        let now = g.fetch_add(1, Relaxed) + 1;
        (Count(g), now)
    }
}

impl Drop for Count<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Relaxed);
    }
}

impl TransformPool {
    /// A pool of `workers` slots; 0 means one per available core.
    pub fn new(workers: usize) -> TransformPool {
        let workers = if workers == 0 {
            std::thread::available_parallelism().map_or(1, |n| n.get())
        } else {
            workers
        };
        TransformPool {
            slots: Arc::new(Semaphore::new(workers)),
            background: Arc::new(Semaphore::new(workers.saturating_sub(1).max(1))),
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
        self.run_as(Priority::Client, job).await
    }

    /// [`run`](Self::run) at a priority: background jobs take at most `workers − 1` slots
    /// (1 with one worker), so a client's job always finds a slot free or waits behind at
    /// most that many of them.
    pub async fn run_as<T, F>(&self, priority: Priority, job: F) -> Result<T, JobError>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        let (turn, slot) = {
            let (_waiting, _) = Count::up(&self.gauges.waiting);
            // The semaphores are never closed, so acquiring only waits.
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
            let slot = self
                .slots
                .clone()
                .acquire_owned()
                .await
                .map_err(|_| JobError::Closed)?;
            (turn, slot)
        };
        let gauges = self.gauges.clone();
        tokio::task::spawn_blocking(move || {
            let _slot = slot;
            let _turn = turn;
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
             # HELP webpep_transforms_waiting Transforms waiting for a free worker now.\n# TYPE webpep_transforms_waiting gauge\nwebpep_transforms_waiting {}\n",
            self.workers,
            self.running(),
            self.peak_running(),
            self.waiting()
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
    async fn background_jobs_leave_a_slot_for_clients() {
        let pool = TransformPool::new(3);
        // Ten background jobs of 300 ms: at most 2 of the 3 slots run them.
        let bg: Vec<_> = (0..10)
            .map(|_| {
                let p = pool.clone();
                tokio::spawn(async move { p.run_as(Priority::Background, busy(300)).await })
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(pool.running(), 2);
        // A client's job does not queue behind them.
        let t0 = Instant::now();
        assert_eq!(pool.run(busy(10)).await, Ok(10));
        assert!(
            t0.elapsed() < Duration::from_millis(250),
            "{:?}",
            t0.elapsed()
        );
        for j in bg {
            assert_eq!(j.await.unwrap(), Ok(300));
        }
        assert_eq!(pool.peak_running(), 3);
        // With one worker, background work still runs.
        let one = TransformPool::new(1);
        assert_eq!(one.run_as(Priority::Background, || 5u8).await, Ok(5));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_panicking_job_frees_its_slot_and_a_cancelled_wait_runs_nothing() {
        let pool = TransformPool::new(1);
        let r = pool.run(|| -> u8 { panic!("a broken image") }).await;
        assert_eq!(r, Err(JobError::Panicked));
        assert_eq!(pool.run(|| 7u8).await, Ok(7), "the slot came back");

        // Hold the only slot, queue a job, give up on it: it never runs, and counts go back.
        let ran = Arc::new(AtomicUsize::new(0));
        let holder = {
            let p = pool.clone();
            tokio::spawn(async move { p.run(busy(150)).await })
        };
        tokio::time::sleep(Duration::from_millis(30)).await;
        let r2 = ran.clone();
        let waiting = {
            let p = pool.clone();
            tokio::spawn(async move { p.run(move || r2.fetch_add(1, Relaxed)).await })
        };
        tokio::time::sleep(Duration::from_millis(30)).await;
        assert_eq!((pool.running(), pool.waiting()), (1, 1));
        waiting.abort();
        let _ = waiting.await;
        assert_eq!(pool.waiting(), 0);
        assert_eq!(holder.await.unwrap(), Ok(150));
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
