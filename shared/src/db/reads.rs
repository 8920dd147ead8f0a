//! Reads shared by concurrent requests, none answered from a read older than itself.
//!
//! Reads take turns. A caller notes how many reads had started when it asked; once it has the
//! turn it answers from the last read if that read started after it asked, or else reads
//! itself. So every answer reflects the database as it was after its request arrived (a change
//! committed before a request is always seen by it), and the requests that arrive while one read
//! runs share the next one: under load the database sees one read per round trip, not one per
//! request. A failed read is not kept: the next caller reads again.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// The reads of one value (see the module documentation).
pub struct SharedReads<T> {
    started: AtomicU64,
    last: Mutex<Option<(u64, Arc<T>)>>,
    turn: tokio::sync::Mutex<()>,
}

impl<T> Default for SharedReads<T> {
    fn default() -> Self {
        SharedReads {
            started: AtomicU64::new(0),
            last: Mutex::new(None),
            turn: tokio::sync::Mutex::new(()),
        }
    }
}

impl<T> SharedReads<T> {
    pub fn new() -> SharedReads<T> {
        SharedReads::default()
    }

    fn last_after(&self, asked: u64) -> Option<Arc<T>> {
        let last = match self.last.lock() {
            Ok(last) => last,
            Err(poisoned) => poisoned.into_inner(),
        };
        last.as_ref()
            .filter(|(read, _)| *read > asked)
            .map(|(_, value)| value.clone())
    }

    /// The value from a read that started after this call: the last one if it did, else a new
    /// one by `load`.
    pub async fn read<E, F, Fut>(&self, load: F) -> Result<Arc<T>, E>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        let asked = self.started.load(Ordering::SeqCst);
        let _turn = self.turn.lock().await;
        if let Some(value) = self.last_after(asked) {
            return Ok(value);
        }
        let read = self.started.fetch_add(1, Ordering::SeqCst) + 1;
        let value = Arc::new(load().await?);
        let mut last = match self.last.lock() {
            Ok(last) => last,
            Err(poisoned) => poisoned.into_inner(),
        };
        *last = Some((read, value.clone()));
        Ok(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use std::time::Duration;

    #[tokio::test]
    async fn a_caller_never_gets_a_read_older_than_itself() {
        let reads = SharedReads::<usize>::new();
        let counter = AtomicUsize::new(0);
        let load = || async { Ok::<_, ()>(counter.fetch_add(1, Ordering::SeqCst) + 1) };
        assert_eq!(*reads.read(load).await.expect("read"), 1);
        // Nothing runs meanwhile: the next caller reads again.
        assert_eq!(*reads.read(load).await.expect("read"), 2);
    }

    #[tokio::test]
    async fn callers_that_arrive_during_a_read_share_the_next_one() {
        let reads = Arc::new(SharedReads::<usize>::new());
        let counter = Arc::new(AtomicUsize::new(0));
        let slow = |counter: Arc<AtomicUsize>| async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            Ok::<_, ()>(counter.fetch_add(1, Ordering::SeqCst) + 1)
        };
        let first = {
            let (reads, counter) = (reads.clone(), counter.clone());
            tokio::spawn(async move { *reads.read(|| slow(counter)).await.expect("read") })
        };
        tokio::time::sleep(Duration::from_millis(10)).await;
        let later: Vec<_> = (0..5)
            .map(|_| {
                let (reads, counter) = (reads.clone(), counter.clone());
                tokio::spawn(async move { *reads.read(|| slow(counter)).await.expect("read") })
            })
            .collect();
        assert_eq!(first.await.expect("join"), 1);
        for caller in later {
            assert_eq!(
                caller.await.expect("join"),
                2,
                "one read after theirs, shared"
            );
        }
        assert_eq!(counter.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn callers_waiting_on_a_read_whose_caller_left_read_again() {
        let reads = Arc::new(SharedReads::<usize>::new());
        let leader = {
            let reads = reads.clone();
            tokio::spawn(async move {
                reads
                    .read(std::future::pending::<Result<usize, ()>>)
                    .await
                    .ok();
            })
        };
        tokio::time::sleep(Duration::from_millis(10)).await;
        let waiter = {
            let reads = reads.clone();
            tokio::spawn(
                async move { *reads.read(|| async { Ok::<_, ()>(5) }).await.expect("read") },
            )
        };
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert!(!waiter.is_finished(), "waits while the other read runs");
        leader.abort();
        let value = tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .expect("woken when the other read was dropped")
            .expect("join");
        assert_eq!(value, 5);
    }

    #[tokio::test]
    async fn a_failed_read_is_not_kept() {
        let reads = SharedReads::<usize>::new();
        assert!(
            reads
                .read(|| async { Err::<usize, _>("down") })
                .await
                .is_err()
        );
        assert_eq!(
            *reads
                .read(|| async { Ok::<_, &str>(7) })
                .await
                .expect("read"),
            7
        );
    }
}
