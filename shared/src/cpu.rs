//! CPU-bound work (RSA signatures) off the async workers, at most one job per core at a time.
//! A burst of requests then queues here instead of starting a blocking thread per job: threads
//! beyond the core count add no throughput, only memory.

use std::sync::LazyLock;

use tokio::sync::Semaphore;

static CORES: LazyLock<usize> =
    LazyLock::new(|| std::thread::available_parallelism().map_or(2, |n| n.get()));

static PERMITS: LazyLock<Semaphore> = LazyLock::new(|| Semaphore::new(*CORES));

/// The jobs that run at once: one per core this process may use.
pub fn cores() -> usize {
    *CORES
}

/// Why a job did not produce its result.
#[derive(Debug, thiserror::Error)]
#[error("the CPU job did not finish")]
pub struct CpuJobFailed;

/// Runs `job` on a blocking thread once a core's permit is free.
pub async fn run<T, F>(job: F) -> Result<T, CpuJobFailed>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    let _permit = PERMITS.acquire().await.map_err(|_| CpuJobFailed)?;
    tokio::task::spawn_blocking(job)
        .await
        .map_err(|_| CpuJobFailed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn jobs_run_at_most_one_per_core() {
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        let running = Arc::new(AtomicUsize::new(0));
        let peak = Arc::new(AtomicUsize::new(0));
        let jobs: Vec<_> = (0..cores * 4)
            .map(|i| {
                let running = running.clone();
                let peak = peak.clone();
                tokio::spawn(run(move || {
                    let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                    peak.fetch_max(now, Ordering::SeqCst);
                    std::thread::sleep(std::time::Duration::from_millis(20));
                    running.fetch_sub(1, Ordering::SeqCst);
                    i * 2
                }))
            })
            .collect();
        let mut results = Vec::new();
        for job in jobs {
            results.push(job.await.expect("task").expect("job"));
        }
        assert_eq!(results, (0..cores * 4).map(|i| i * 2).collect::<Vec<_>>());
        assert!(peak.load(Ordering::SeqCst) <= cores);
        assert!(peak.load(Ordering::SeqCst) >= 1);
    }
}
