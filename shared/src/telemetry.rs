//! Logging: JSON lines in Lambda, readable text locally, filtered by `RUST_LOG` (default `info`).

use tracing_subscriber::EnvFilter;

use crate::config::LogFormat;

/// Without `RUST_LOG`: our own information, and only warnings from libraries (Postgres notices
/// such as "relation already exists, skipping" are not news).
const DEFAULT_FILTER: &str = "info,sqlx=warn";

/// Installs the global subscriber once; later calls do nothing.
pub fn init(format: LogFormat) {
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(DEFAULT_FILTER));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false);
    let _ = match format {
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .with_ansi(false)
            .try_init(),
        LogFormat::Pretty => builder.compact().try_init(),
    };
}
