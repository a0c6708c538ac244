//! The order in which one connection's streams hand their bytes to quinn.
//!
//! quinn sends the bytes it holds by stream priority, but with the stream budget
//! ([`crate::congestion::LinkAware::stream_budget`]) it holds little more than its window:
//! the rest waits in the writers, and when an acknowledgement frees room quinn wakes every
//! blocked writer at once, the last blocked first. Whoever runs first takes the room, and the
//! priorities are lost: over gprs a page's thirty tunnel openings, which must go first come,
//! first served, went in turn and every handshake timed out. So writers go through
//! [`WriteOrder`]: a writer waits while one of a higher priority waits or writes, and one in
//! the middle of a blocked write steps aside when a higher one comes. Writers of the same
//! priority hand over a packet's worth at a time (every writer does: quinn frees a write's room
//! only once all of it is acknowledged) and yield while others of it wait, so a small response
//! beside a bulk one gets its share of each room that opens; a lower one is never waited on,
//! so a stream the peer does not read (its flow control shut) holds up no stream above it.

use std::collections::BTreeMap;
use std::sync::Mutex;

/// What a writer hands quinn at a time: a packet's payload. quinn frees a write's room only
/// when all of it has been acknowledged, and writers of one priority share each room that
/// opens.
const SHARE: usize = 1200;

/// The writers of one connection and their priorities.
#[derive(Debug, Default)]
pub struct WriteOrder {
    /// Priority → writers of that priority waiting or writing.
    writers: Mutex<BTreeMap<i32, usize>>,
    changed: tokio::sync::Notify,
}

/// A writer's place in [`WriteOrder`]; leaving it (drop) lets lower writers on.
struct Place<'a> {
    order: &'a WriteOrder,
    priority: i32,
}

impl Drop for Place<'_> {
    fn drop(&mut self) {
        {
            let mut writers = self.order.lock();
            if let Some(n) = writers.get_mut(&self.priority) {
                *n -= 1;
                if *n == 0 {
                    writers.remove(&self.priority);
                }
            }
        }
        self.order.changed.notify_waiters();
    }
}

impl WriteOrder {
    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<i32, usize>> {
        self.writers.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn take_place(&self, priority: i32) -> Place<'_> {
        *self.lock().entry(priority).or_default() += 1;
        self.changed.notify_waiters();
        Place {
            order: self,
            priority,
        }
    }

    /// Whether another writer of `priority` is waiting or writing.
    fn sharing(&self, priority: i32) -> bool {
        sharing(&self.lock(), priority)
    }

    /// Resolves once `ready` holds for the writers present.
    async fn until(&self, ready: impl Fn(&BTreeMap<i32, usize>) -> bool) {
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if ready(&self.lock()) {
                return;
            }
            changed.await;
        }
    }

    /// Writes all of `bytes` to `send`, at the stream's priority, after every writer of a
    /// higher priority on the connection.
    pub async fn write_all<S: OrderedSend>(
        &self,
        send: &mut S,
        bytes: &[u8],
    ) -> Result<(), quinn::WriteError> {
        let priority = send.priority();
        let _place = self.take_place(priority);
        let mut written = 0;
        let above = |w: &BTreeMap<i32, usize>| highest(w).is_some_and(|h| h > priority);
        while written < bytes.len() {
            self.until(|w| !above(w)).await;
            // quinn's write is cancel-safe: stepping aside writes nothing. A higher writer
            // that came is seen before any room that came with it.
            // Among writers of one priority, a packet's worth at a time: each room that
            // opens goes to whoever runs first, and a bulk writer would take all of it from a
            // small response beside it.
            // A packet's worth at a time, always: quinn frees a write's room only once all of
            // it is acknowledged (a chunk partly acknowledged still counts whole), so one
            // write of the whole budget made the writer wait for the whole window's
            // acknowledgements before writing more: a round trip per window.
            let end = bytes.len().min(written + SHARE);
            tokio::select! {
                biased;
                _ = self.until(above) => {}
                n = send.write(&bytes[written..end]) => written += n?,
            }
            if self.sharing(priority) {
                // The others of this priority woke with this one: their turn in the room.
                tokio::task::yield_now().await;
            }
        }
        Ok(())
    }
}

/// A stream [`WriteOrder`] writes to: quinn's, or in tests a stand-in.
pub trait OrderedSend {
    fn priority(&self) -> i32;
    /// Writes some of `buf` once there is room (quinn's `write`: cancel-safe).
    fn write(
        &mut self,
        buf: &[u8],
    ) -> impl std::future::Future<Output = Result<usize, quinn::WriteError>> + Send;
}

impl OrderedSend for quinn::SendStream {
    fn priority(&self) -> i32 {
        quinn::SendStream::priority(self).unwrap_or(0)
    }
    fn write(
        &mut self,
        buf: &[u8],
    ) -> impl std::future::Future<Output = Result<usize, quinn::WriteError>> + Send {
        quinn::SendStream::write(self, buf)
    }
}

/// The highest priority of a writer waiting or writing.
fn highest(writers: &BTreeMap<i32, usize>) -> Option<i32> {
    writers.keys().next_back().copied()
}

fn sharing(writers: &BTreeMap<i32, usize>, priority: i32) -> bool {
    writers.get(&priority).is_some_and(|&n| n > 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The highest priority present decides who may write; a place left lets the next on.
    #[tokio::test]
    async fn a_writer_waits_while_a_higher_one_is_present() {
        let order = WriteOrder::default();
        let low = order.take_place(0);
        let high = order.take_place(5);
        assert_eq!(highest(&order.lock()), Some(5));
        let waiting = order.until(|w| highest(w) == Some(0));
        tokio::pin!(waiting);
        assert!(futures_poll_once(waiting.as_mut()).await.is_pending());
        drop(high);
        waiting.await;
        assert_eq!(highest(&order.lock()), Some(0));
        drop(low);
        assert_eq!(highest(&order.lock()), None);
    }

    /// A connection's room for bytes, shared by its streams (quinn's send window), given
    /// out by the test as acknowledgements would.
    #[derive(Default)]
    struct Room {
        free: Mutex<usize>,
        more: tokio::sync::Notify,
        /// (stream, bytes) in the order the room went.
        log: Mutex<Vec<(i32, usize)>>,
    }

    struct Stream<'a> {
        priority: i32,
        room: &'a Room,
    }

    impl Room {
        /// A stream of `priority` writing into this room.
        fn stream(&self, priority: i32) -> Stream<'_> {
            Stream {
                priority,
                room: self,
            }
        }
    }

    impl OrderedSend for Stream<'_> {
        fn priority(&self) -> i32 {
            self.priority
        }
        async fn write(&mut self, buf: &[u8]) -> Result<usize, quinn::WriteError> {
            loop {
                let more = self.room.more.notified();
                tokio::pin!(more);
                more.as_mut().enable();
                {
                    let mut free = self.room.free.lock().unwrap();
                    if *free > 0 {
                        let n = buf.len().min(*free);
                        *free -= n;
                        self.room.log.lock().unwrap().push((self.priority, n));
                        return Ok(n);
                    }
                }
                more.await;
            }
        }
    }

    /// A low-priority writer already waiting for room steps aside for a higher one that
    /// comes later: each bit of room goes to the higher one until it is done.
    #[tokio::test]
    async fn room_goes_to_the_highest_priority_writer_first() {
        let order = WriteOrder::default();
        let room = Room::default();
        let (mut low, mut high) = (room.stream(0), room.stream(7));
        let low_write = order.write_all(&mut low, &[0; 100]);
        let high_write = order.write_all(&mut high, &[1; 30]);
        let give = async {
            // Both writers are waiting before any room comes.
            tokio::task::yield_now().await;
            for _ in 0..13 {
                *room.free.lock().unwrap() += 10;
                room.more.notify_waiters();
                for _ in 0..4 {
                    tokio::task::yield_now().await;
                }
            }
        };
        let (l, h, ()) = tokio::join!(low_write, high_write, give);
        l.unwrap();
        h.unwrap();
        let log = room.log.lock().unwrap().clone();
        let high_done = log.iter().rposition(|&(p, _)| p == 7).unwrap();
        assert!(
            log[..high_done].iter().all(|&(p, _)| p == 7),
            "the low writer got room before the high one was done: {log:?}"
        );
        assert_eq!(log.iter().map(|&(_, n)| n).sum::<usize>(), 130);
    }

    /// Writers of one priority share each room that opens: a small response beside a bulk
    /// one that was already waiting is through within the first room, whichever of them runs
    /// first (tried with the small writer coming at several points of the polling order).
    #[tokio::test]
    async fn writers_of_one_priority_share_the_room() {
        for small_after in 0..4 {
            let order = WriteOrder::default();
            let room = Room::default();
            let (mut bulk, mut small) = (room.stream(0), room.stream(0));
            let bulk_write = order.write_all(&mut bulk, &[0; 24_000]);
            let small_write = async {
                for _ in 0..small_after {
                    tokio::task::yield_now().await;
                }
                order.write_all(&mut small, &[1; 1_000]).await
            };
            let give = async {
                for _ in 0..5 {
                    tokio::task::yield_now().await;
                }
                for _ in 0..11 {
                    *room.free.lock().unwrap() += 2_400;
                    room.more.notify_waiters();
                    for _ in 0..4 {
                        tokio::task::yield_now().await;
                    }
                }
            };
            let (b, s, ()) = tokio::join!(bulk_write, small_write, give);
            b.unwrap();
            s.unwrap();
            let log = room.log.lock().unwrap().clone();
            let small_done = log.iter().position(|&(_, n)| n == 1_000).unwrap();
            let before: usize = log[..small_done].iter().map(|&(_, n)| n).sum();
            assert!(
                before < 2_400,
                "small after {small_after}: the bulk writer took {before} bytes first: {log:?}"
            );
        }
    }

    /// quinn frees a write's room only when all of it is acknowledged: a write goes over in
    /// pieces of a packet's payload, each freed when its packet is, even with room for all.
    #[tokio::test]
    async fn a_write_goes_a_packets_payload_at_a_time() {
        let order = WriteOrder::default();
        let room = Room::default();
        *room.free.lock().unwrap() = 100_000;
        let mut stream = room.stream(0);
        order.write_all(&mut stream, &[0; 5_000]).await.unwrap();
        let pieces: Vec<usize> = room.log.lock().unwrap().iter().map(|&(_, n)| n).collect();
        assert_eq!(pieces, [1200, 1200, 1200, 1200, 200]);
    }

    async fn futures_poll_once<F: std::future::Future + Unpin>(f: F) -> std::task::Poll<()> {
        let mut f = f;
        std::future::poll_fn(|cx| {
            std::task::Poll::Ready(match std::pin::Pin::new(&mut f).poll(cx) {
                std::task::Poll::Ready(_) => std::task::Poll::Ready(()),
                std::task::Poll::Pending => std::task::Poll::Pending,
            })
        })
        .await
    }
}
