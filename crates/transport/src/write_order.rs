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
//! priority write as they come (quinn shares the link between them in turn); a lower one is
//! never waited on, so a stream the peer does not read (its flow control shut) holds up no
//! stream above it.

use std::collections::BTreeMap;
use std::sync::Mutex;

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

    /// The highest priority of a writer waiting or writing.
    fn highest(&self) -> Option<i32> {
        self.lock().keys().next_back().copied()
    }

    /// Resolves once `ready` holds for the highest priority present.
    async fn until(&self, ready: impl Fn(i32) -> bool) {
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if self.highest().is_some_and(&ready) {
                return;
            }
            changed.await;
        }
    }

    /// Writes all of `bytes` to `send`, at the stream's priority, after every writer of a
    /// higher priority on the connection.
    pub async fn write_all(
        &self,
        send: &mut quinn::SendStream,
        bytes: &[u8],
    ) -> Result<(), quinn::WriteError> {
        let priority = send.priority().unwrap_or(0);
        let _place = self.take_place(priority);
        let mut written = 0;
        while written < bytes.len() {
            self.until(|highest| highest <= priority).await;
            // quinn's write is cancel-safe: stepping aside writes nothing.
            tokio::select! {
                n = send.write(&bytes[written..]) => written += n?,
                _ = self.until(|highest| highest > priority) => {}
            }
        }
        Ok(())
    }
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
        assert_eq!(order.highest(), Some(5));
        let waiting = order.until(|h| h <= 0);
        tokio::pin!(waiting);
        assert!(futures_poll_once(waiting.as_mut()).await.is_pending());
        drop(high);
        waiting.await;
        assert_eq!(order.highest(), Some(0));
        drop(low);
        assert_eq!(order.highest(), None);
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
