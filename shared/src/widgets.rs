//! Dashboard widgets: the sizes a widget offers, the response contract Core accepts from an app,
//! the resolved widget list read from the registry, the app-side declaration rules, and the
//! app-side provider route that answers Core's widget invocations.

use std::time::Duration;

pub mod dashboard;
pub mod declaration;
pub mod provider;
pub mod response;
pub mod size;

pub use dashboard::{DashboardWidget, dashboard_widgets_of, list_widgets};
pub use declaration::{WidgetDeclaration, compile_declarations};
pub use response::{WidgetResponse, parse_widget_response};
pub use size::{WidgetSize, fit_size, resolve_sizes};

/// Each widget's own budget, counted from the moment it is started.
pub const WIDGET_TIMEOUT: Duration = Duration::from_millis(8_000);
/// Widgets asked at the same time for one dashboard.
pub const WIDGET_CONCURRENCY: usize = 8;
/// Widgets one stream runs at most (as many as a dashboard holds): more asked for by name is a
/// 400; more declared, without names, runs the first ones in registry order.
pub const MAX_STREAM_WIDGETS: usize = 100;
/// Largest widget body Core reads from an app (on `Content-Length` and on bytes read).
pub const WIDGET_MAX_RESPONSE_BYTES: usize = 128 * 1024;
/// A stream signs every invocation up front, so no widget starts after they expire.
pub const WIDGET_STREAM_DEADLINE: Duration =
    Duration::from_secs(crate::identity::constants::INVOCATION_TOKEN_TTL_SECONDS as u64);
/// The app-side route Core calls, followed by the percent-encoded widget id.
pub const INTERNAL_WIDGET_PATH: &str = "/api/_internal/widgets/v1/";
/// The query parameter carrying the fitted size.
pub const SIZE_PARAM: &str = "size";
/// The header naming the invoked operation.
pub const OPERATION_HEADER: &str = "x-cloud-invocation-operation";

/// `<appId>/<widgetId>`: how the board, the stream and `?widget=` name a widget.
pub fn widget_key(app_id: &str, widget_id: &str) -> String {
    format!("{app_id}/{widget_id}")
}

/// The invocation operation of reading a widget.
pub fn widget_operation(widget_id: &str) -> String {
    format!("widget.read:{widget_id}")
}

/// The widgets area's one error type.
#[derive(Debug, thiserror::Error)]
pub enum WidgetsError {
    #[error("widget registry: {0}")]
    Registry(#[from] crate::registry::RegistryError),
    #[error("widget declaration: {0}")]
    Declaration(String),
}
