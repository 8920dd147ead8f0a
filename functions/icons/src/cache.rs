//! One render per logo version, shared by concurrent requests; a failed run is kept for 60 s so
//! failing requests cannot start a worker each; a new logo renders at once. Counted as
//! `IconRenders` / `IconWorkerFailures` per run (with its `IconRenderDuration`) and
//! `IconCacheHits` per request the held run answers.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::FutureExt;
use futures::future::{BoxFuture, Shared};
use k2b_core::branding::AppIconSource;
use k2b_core::telemetry::metrics::{self, Unit};
use tokio::time::Instant;
use tracing::Instrument;

use crate::worker::{IconRenderer, RenderFailure, RenderedIcons};

/// A failed run stays current this long; the icon routes ask clients to retry after it.
pub const APP_ICON_RETRY_SECONDS: u64 = 60;

type SharedRun = Shared<BoxFuture<'static, Result<Arc<RenderedIcons>, RenderFailure>>>;

struct Run {
    version: String,
    result: SharedRun,
    failed_at: Arc<Mutex<Option<Instant>>>,
}

/// The process-wide icon cache.
pub struct AppIcons {
    renderer: Arc<dyn IconRenderer>,
    current: Mutex<Option<Run>>,
}

impl AppIcons {
    pub fn new(renderer: Arc<dyn IconRenderer>) -> AppIcons {
        AppIcons {
            renderer,
            current: Mutex::new(None),
        }
    }

    /// The rendered icons of `source`: the current run when it is for this version (and not a
    /// failure older than the retry period), else a new run.
    pub async fn icons(&self, source: &AppIconSource) -> Result<Arc<RenderedIcons>, RenderFailure> {
        let run = {
            let mut current = match self.current.lock() {
                Ok(current) => current,
                Err(poisoned) => poisoned.into_inner(),
            };
            let reusable = current.as_ref().is_some_and(|run| {
                let retry_due = run
                    .failed_at
                    .lock()
                    .ok()
                    .and_then(|failed| *failed)
                    .is_some_and(|at| at.elapsed() >= Duration::from_secs(APP_ICON_RETRY_SECONDS));
                run.version == source.version && !retry_due
            });
            if reusable {
                metrics::count("IconCacheHits", 1);
            } else {
                let failed_at = Arc::new(Mutex::new(None));
                let marker = failed_at.clone();
                let work = self.renderer.render(source);
                // The run proceeds on its own task: a client that disconnects does not stop it.
                let task = tokio::spawn(
                    async move {
                        let started = Instant::now();
                        let result = work.await;
                        metrics::observe(
                            "IconRenderDuration",
                            Unit::Milliseconds,
                            started.elapsed().as_secs_f64() * 1000.0,
                        );
                        match &result {
                            Ok(_) => metrics::count("IconRenders", 1),
                            Err(_) => {
                                metrics::count("IconWorkerFailures", 1);
                                if let Ok(mut failed) = marker.lock() {
                                    *failed = Some(Instant::now());
                                }
                            }
                        }
                        result.map(Arc::new)
                    }
                    .in_current_span(),
                );
                let result = async move {
                    task.await
                        .unwrap_or_else(|_| Err(RenderFailure("Icon rendering failed.".into())))
                }
                .boxed()
                .shared();
                *current = Some(Run {
                    version: source.version.clone(),
                    result,
                    failed_at,
                });
            }
            current.as_ref().map(|run| run.result.clone())
        };
        match run {
            Some(run) => run.await,
            None => Err(RenderFailure("Icon rendering failed.".into())),
        }
    }
}
