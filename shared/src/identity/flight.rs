//! Single-flight refreshes with generations: concurrent callers share one refresh per key, and an
//! invalidation during a flight makes that flight fail instead of committing stale data.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, Mutex};

use futures::FutureExt;
use futures::future::{BoxFuture, Shared};
use tracing::Instrument;

/// How a shared flight ended for its callers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FlightError<E> {
    /// The key was invalidated while the flight ran; nothing was committed.
    Invalidated,
    /// The refresh itself failed.
    Failed(E),
}

type SharedFlight<V, E> = Shared<BoxFuture<'static, Result<V, FlightError<E>>>>;

struct Slot<V: Clone, E: Clone> {
    generation: u64,
    flight: Option<(u64, SharedFlight<V, E>)>,
}

struct Inner<K, V: Clone, E: Clone> {
    slots: Mutex<HashMap<K, Slot<V, E>>>,
    next_id: Mutex<u64>,
}

/// One flight per key at a time; see the module documentation.
pub struct SingleFlight<K, V: Clone, E: Clone> {
    inner: Arc<Inner<K, V, E>>,
}

impl<K, V, E> Default for SingleFlight<K, V, E>
where
    K: Eq + Hash + Clone + Send + 'static,
    V: Clone + Send + Sync + 'static,
    E: Clone + Send + Sync + 'static,
{
    fn default() -> Self {
        SingleFlight {
            inner: Arc::new(Inner {
                slots: Mutex::new(HashMap::new()),
                next_id: Mutex::new(0),
            }),
        }
    }
}

impl<K, V, E> SingleFlight<K, V, E>
where
    K: Eq + Hash + Clone + Send + 'static,
    V: Clone + Send + Sync + 'static,
    E: Clone + Send + Sync + 'static,
{
    /// Joins the key's current flight, or starts one running `refresh` in its own task (so it
    /// finishes even when every caller gives up). When it succeeds and the key's generation is
    /// unchanged, `commit` runs once and every caller gets the value.
    pub async fn run<F>(
        &self,
        key: K,
        refresh: F,
        commit: impl FnOnce(&V) + Send + 'static,
    ) -> Result<V, FlightError<E>>
    where
        F: std::future::Future<Output = Result<V, E>> + Send + 'static,
    {
        self.run_joining(key, refresh, commit).await.0
    }

    /// [`SingleFlight::run`], also telling whether this caller joined a flight another caller
    /// had started (and so waited for someone else's refresh).
    pub async fn run_joining<F>(
        &self,
        key: K,
        refresh: F,
        commit: impl FnOnce(&V) + Send + 'static,
    ) -> (Result<V, FlightError<E>>, bool)
    where
        F: std::future::Future<Output = Result<V, E>> + Send + 'static,
    {
        let (flight, joined) = {
            let mut slots = match self.inner.slots.lock() {
                Ok(slots) => slots,
                Err(poisoned) => poisoned.into_inner(),
            };
            let slot = slots.entry(key.clone()).or_insert(Slot {
                generation: 0,
                flight: None,
            });
            if let Some((_, flight)) = &slot.flight {
                (flight.clone(), true)
            } else {
                let id = {
                    let mut next = match self.inner.next_id.lock() {
                        Ok(next) => next,
                        Err(poisoned) => poisoned.into_inner(),
                    };
                    *next += 1;
                    *next
                };
                let generation = slot.generation;
                let inner = self.inner.clone();
                let flight_key = key.clone();
                // The refresh logs under the invocation that started it.
                let task = tokio::spawn(
                    async move {
                        let outcome = refresh.await;
                        let mut slots = match inner.slots.lock() {
                            Ok(slots) => slots,
                            Err(poisoned) => poisoned.into_inner(),
                        };
                        let current = slots.get_mut(&flight_key);
                        let still_current =
                            current.as_ref().is_some_and(|s| s.generation == generation);
                        if let Some(slot) = current
                            && slot.flight.as_ref().is_some_and(|(fid, _)| *fid == id)
                        {
                            slot.flight = None;
                        }
                        match outcome {
                            Ok(value) if still_current => {
                                commit(&value);
                                Ok(value)
                            }
                            Ok(_) => Err(FlightError::Invalidated),
                            Err(error) => Err(FlightError::Failed(error)),
                        }
                    }
                    .in_current_span(),
                );
                let flight: SharedFlight<V, E> = async move {
                    match task.await {
                        Ok(result) => result,
                        // The refresh task panicked or was aborted: treat it as invalidated.
                        Err(_) => Err(FlightError::Invalidated),
                    }
                }
                .boxed()
                .shared();
                slot.flight = Some((id, flight.clone()));
                (flight, false)
            }
        };
        (flight.await, joined)
    }

    /// Bumps the key's generation and forgets its flight: a flight still running will not commit.
    pub fn invalidate(&self, key: &K) {
        let mut slots = match self.inner.slots.lock() {
            Ok(slots) => slots,
            Err(poisoned) => poisoned.into_inner(),
        };
        if let Some(slot) = slots.get_mut(key) {
            slot.generation += 1;
            slot.flight = None;
        }
    }

    /// [`SingleFlight::invalidate`] for every key.
    pub fn invalidate_all(&self) {
        let mut slots = match self.inner.slots.lock() {
            Ok(slots) => slots,
            Err(poisoned) => poisoned.into_inner(),
        };
        for slot in slots.values_mut() {
            slot.generation += 1;
            slot.flight = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio::sync::oneshot;

    /// Scenario 8: concurrent runs share one refresh and one commit.
    #[tokio::test]
    async fn scenario_8_concurrent_runs_share_one_refresh() {
        let flights: SingleFlight<&str, String, String> = SingleFlight::default();
        let refreshes = Arc::new(AtomicUsize::new(0));
        let commits = Arc::new(AtomicUsize::new(0));
        let (release, gate) = oneshot::channel::<()>();
        let start = |refreshes: Arc<AtomicUsize>, gate: Option<oneshot::Receiver<()>>| async move {
            refreshes.fetch_add(1, Ordering::SeqCst);
            if let Some(gate) = gate {
                gate.await.ok();
            }
            Ok::<_, String>("signer-a".to_string())
        };
        let c1 = commits.clone();
        let first = flights.run("session", start(refreshes.clone(), Some(gate)), move |_| {
            c1.fetch_add(1, Ordering::SeqCst);
        });
        let c2 = commits.clone();
        let second = flights.run("session", start(refreshes.clone(), None), move |_| {
            c2.fetch_add(1, Ordering::SeqCst);
        });
        let releaser = async {
            tokio::task::yield_now().await;
            release.send(()).ok();
        };
        let (a, b, ()) = tokio::join!(first, second, releaser);
        assert_eq!(a, Ok("signer-a".to_string()));
        assert_eq!(b, Ok("signer-a".to_string()));
        assert_eq!(refreshes.load(Ordering::SeqCst), 1);
        assert_eq!(commits.load(Ordering::SeqCst), 1);
    }

    /// Scenario 9: an invalidation during a flight rejects it; the next run commits fresh data.
    #[tokio::test]
    async fn scenario_9_invalidation_rejects_the_running_flight() {
        let flights: Arc<SingleFlight<&str, String, String>> = Arc::new(SingleFlight::default());
        let committed = Arc::new(Mutex::new(Vec::<String>::new()));
        let (release, gate) = oneshot::channel::<()>();
        let c1 = committed.clone();
        let old = tokio::spawn({
            let flights = flights.clone();
            async move {
                flights
                    .run(
                        "session",
                        async move {
                            gate.await.ok();
                            Ok("signer-a".to_string())
                        },
                        move |v| c1.lock().expect("lock").push(v.clone()),
                    )
                    .await
            }
        });
        tokio::task::yield_now().await;
        flights.invalidate(&"session");
        let c2 = committed.clone();
        let fresh = flights
            .run("session", async { Ok("signer-b".to_string()) }, move |v| {
                c2.lock().expect("lock").push(v.clone())
            })
            .await;
        release.send(()).ok();
        assert_eq!(old.await.expect("join"), Err(FlightError::Invalidated));
        assert_eq!(fresh, Ok("signer-b".to_string()));
        assert_eq!(
            *committed.lock().expect("lock"),
            vec!["signer-b".to_string()]
        );
    }

    /// Scenario 10: invalidating one key leaves another key's flight alone.
    #[tokio::test]
    async fn scenario_10_invalidation_is_per_key() {
        let flights: Arc<SingleFlight<&str, String, String>> = Arc::new(SingleFlight::default());
        let (release, gate) = oneshot::channel::<()>();
        let commits = Arc::new(AtomicUsize::new(0));
        let c = commits.clone();
        let session = tokio::spawn({
            let flights = flights.clone();
            async move {
                flights
                    .run(
                        "session",
                        async move {
                            gate.await.ok();
                            Ok("session-signer".to_string())
                        },
                        move |_| {
                            c.fetch_add(1, Ordering::SeqCst);
                        },
                    )
                    .await
            }
        });
        tokio::task::yield_now().await;
        flights.invalidate(&"invocation");
        release.send(()).ok();
        assert_eq!(
            session.await.expect("join"),
            Ok("session-signer".to_string())
        );
        assert_eq!(commits.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn a_failed_flight_is_dropped_so_the_next_caller_starts_fresh() {
        let flights: SingleFlight<&str, String, String> = SingleFlight::default();
        let failed = flights
            .run("k", async { Err("down".to_string()) }, |_| {})
            .await;
        assert_eq!(failed, Err(FlightError::Failed("down".to_string())));
        let ok = flights
            .run("k", async { Ok("up".to_string()) }, |_| {})
            .await;
        assert_eq!(ok, Ok("up".to_string()));
    }
}
