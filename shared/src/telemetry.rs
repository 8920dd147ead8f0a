//! Logging: JSON lines in Lambda, readable text locally, filtered by `RUST_LOG` (default `info`);
//! the [`metrics`] of an invocation as one CloudWatch EMF line; and the [`trace`] context of the
//! current invocation.
//!
//! In Lambda every log line of an invocation carries the fields of its span ([`INVOCATION_SPAN`],
//! opened by the bootstrap): `requestId`, `traceId` and, on an environment's first invocation,
//! `coldStart`.

pub mod json;
pub mod metrics;
pub mod trace;

use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::format::JsonFields;

use crate::config::LogFormat;

/// Without `RUST_LOG`: our own information, and only warnings from libraries (Postgres notices
/// such as "relation already exists, skipping" are not news).
const DEFAULT_FILTER: &str = "info,sqlx=warn";

/// The name of the span the Lambda bootstrap opens around each invocation; its fields are the
/// top-level fields of every JSON log line inside it.
pub const INVOCATION_SPAN: &str = "invocation";

/// Installs the global subscriber once; later calls do nothing.
pub fn init(format: LogFormat) {
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(DEFAULT_FILTER));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false);
    let _ = match format {
        LogFormat::Json => builder
            .fmt_fields(JsonFields::new())
            .event_format(json::JsonLines)
            .try_init(),
        LogFormat::Pretty => builder.compact().try_init(),
    };
}
