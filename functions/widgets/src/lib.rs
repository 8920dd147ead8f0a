//! The `widgets` function: `GET /api/widgets/v1` streams every requested widget of every app as
//! NDJSON, one line per widget as soon as it answers, each within its own budget; and
//! `GET /api/widgets/v1/{appId}/{widgetId}` answers one widget as JSON.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::middleware;
use k2b_core::Core;
use k2b_core::access::require_reader;
use k2b_core::config::Needs;
use k2b_core::http::headers::request_id;
use k2b_core::http::routes::Routes;
use k2b_core::widgets::{
    DashboardWidget, WIDGET_CONCURRENCY, WIDGET_STREAM_DEADLINE, WIDGET_TIMEOUT,
};

pub mod call;
mod signing;
mod single;
mod stream;

pub use call::{Outcome, Phase, Reason};

/// Budgets of the widget routes.
#[derive(Clone)]
pub struct WidgetsOptions {
    /// Each widget's own budget from its start (and the setup's bound).
    pub timeout: Duration,
    /// The whole stream's bound (the invocation tokens' lifetime).
    pub stream_deadline: Duration,
    /// Widgets asked at once.
    pub concurrency: usize,
}

impl Default for WidgetsOptions {
    fn default() -> Self {
        WidgetsOptions {
            timeout: WIDGET_TIMEOUT,
            stream_deadline: WIDGET_STREAM_DEADLINE,
            concurrency: WIDGET_CONCURRENCY,
        }
    }
}

#[derive(Clone)]
pub(crate) struct WidgetsState {
    pub core: Core,
    pub options: Arc<WidgetsOptions>,
    /// Calls to app origins, confined to the networks the configuration allows.
    pub apps: call::AppClient,
    /// Invocation tokens released by this environment, for reuse while still fresh.
    pub tokens: Arc<signing::TokenCache>,
    /// The widgets the last registry read declared (the next stream signs for them while it
    /// reads the registry again).
    pub recent: Arc<Mutex<Option<Arc<Vec<DashboardWidget>>>>>,
}

impl WidgetsState {
    fn recent_widgets(&self) -> Option<Arc<Vec<DashboardWidget>>> {
        self.recent.lock().ok().and_then(|recent| recent.clone())
    }

    fn remember_widgets(&self, declared: Arc<Vec<DashboardWidget>>) {
        if let Ok(mut recent) = self.recent.lock() {
            *recent = Some(declared);
        }
    }
}

/// The function: the database, `APP_SECRET` (the issuer and account settings) and the identity
/// key-encryption keys (it signs invocation tokens).
pub const FUNCTION: k2b_core::lambda::Function = k2b_core::lambda::Function {
    name: "widgets",
    needs: Needs::DATABASE
        .with_settings()
        .with_signing_keys()
        .with_app_calls(),
};

/// The function's part of the API's OpenAPI document: every route of [`routes`].
pub fn openapi() -> utoipa::openapi::OpenApi {
    let mut document = stream::openapi();
    document.merge(single::openapi());
    document
}

/// The routes with the standard budgets.
pub fn routes(core: Core) -> Routes {
    routes_with(core, WidgetsOptions::default())
}

/// The routes with the standard budgets, as the front door serves them.
pub fn router(core: Core) -> Router {
    router_with(core, WidgetsOptions::default())
}

/// [`routes_with`] as the front door serves them.
pub fn router_with(core: Core, options: WidgetsOptions) -> Router {
    k2b_core::lambda::front_door(routes_with(core, options))
}

/// The routes with the given budgets and client.
pub fn routes_with(core: Core, options: WidgetsOptions) -> Routes {
    let state = WidgetsState {
        apps: call::AppClient::new(core.config.app_networks.clone()),
        core,
        options: Arc::new(options),
        tokens: Arc::default(),
        recent: Arc::default(),
    };
    Routes::new()
        .get("/api/widgets/v1", stream::widgets)
        .get("/api/widgets/v1/{app_id}/{widget_id}", single::widget)
        .layer(middleware::from_fn_with_state(
            state.core.clone(),
            require_reader,
        ))
        .layer(middleware::from_fn(request_id))
        .layer(middleware::from_fn(stream::mark_arrival))
        .with_state(state)
}

#[cfg(test)]
mod tests {
    use k2b_core::http::openapi::{contract_problems, documented_operations};

    use super::*;

    /// The document names exactly the routes of [`routes`] (building them needs a `Core`; the
    /// shared drift test compares the table itself), each with an id, its security and the
    /// `Error` body on every failure.
    #[test]
    fn the_document_lists_every_route_with_ids_and_error_bodies() {
        let document = serde_json::to_value(openapi()).expect("json");
        assert_eq!(contract_problems(&document, &[]), Vec::<String>::new());
        let mut operations = Vec::new();
        for operation in documented_operations(&document) {
            assert_eq!(operation.operation["tags"], serde_json::json!(["widgets"]));
            operations.push(operation.name());
        }
        operations.sort();
        assert_eq!(
            operations,
            [
                "GET /api/widgets/v1",
                "GET /api/widgets/v1/{app_id}/{widget_id}"
            ]
        );
        // The stream's lines: one of the three, told apart by `type`.
        let line = &document["components"]["schemas"]["WidgetStreamLine"];
        assert_eq!(line["oneOf"].as_array().map(Vec::len), Some(3), "{line}");
        assert_eq!(line["discriminator"]["propertyName"], "type");
        assert!(
            document["paths"]["/api/widgets/v1"]["get"]["responses"]["200"]["content"]
                ["application/x-ndjson"]
                .is_object()
        );
    }
}
