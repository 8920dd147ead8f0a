//! The `mail` function: outgoing mail for apps, and its administration.
//!
//! - Apps, with their own workload credential (`Authorization: Bearer cld_…`, scope `mail`);
//!   what they may do comes from their registry entry's `platformPermissions`:
//!   `POST /api/mail/v1/send`, `POST /api/mail/v1/enqueue`, `GET /api/mail/v1/messages`,
//!   `GET /api/mail/v1/readable-apps`, `GET /api/mail/v1/profiles`, and attachment uploads
//!   (`POST /api/mail/v1/uploads`, then a presigned PUT to the object store, or locally
//!   `PUT /api/mail/v1/uploads/{id}`).
//! - Administrators, with their web session: `/api/admin/core/outgoing-mail/...`.

mod admin;
mod app;

use axum::response::{IntoResponse, Response};
use axum::{Json, Router, middleware};
use k2b_core::Core;
use k2b_core::config::Needs;
use k2b_core::http::headers::{no_store, request_id};
use k2b_core::http::routes::Routes;
use k2b_core::lambda::Function;
use k2b_core::mail::MailError;

/// The function: the database, `APP_SECRET` (SMTP passwords and retention settings), the
/// wake-up queue (delivery) and the attachment store.
pub const FUNCTION: Function = Function {
    name: "mail",
    needs: Needs::DATABASE
        .with_settings()
        .with_wakeups()
        .with_mail_objects(),
};

/// The function's routes.
pub fn routes(core: Core) -> Routes {
    app::routes()
        .merge(admin::routes())
        .layer(middleware::from_fn(no_store))
        .layer(middleware::from_fn(request_id))
        .with_state(core)
}

/// The function's part of the API's OpenAPI document: the apps' mail API (`mail`) and its
/// administration (`mail-admin`).
pub fn openapi() -> utoipa::openapi::OpenApi {
    use utoipa::OpenApi;
    let mut document = app::Api::openapi();
    document.merge(admin::Api::openapi());
    document
}

/// The routes as the front door serves them.
pub fn router(core: Core) -> Router {
    k2b_core::lambda::front_door(routes(core))
}

/// An app API error: `{code, message, status, limit?, used?, requested?}`; anything that is
/// not a domain error is logged and answered as `mail_unavailable`.
pub(crate) fn app_error(error: MailError) -> Response {
    if !matches!(error, MailError::Fault(_)) {
        tracing::error!(error = %error, "outgoing mail unavailable");
    }
    let fault = error.to_fault();
    (fault.status(), Json(fault.body())).into_response()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use k2b_core::http::openapi::{contract_problems, documented_operations, methods_of};

    use super::*;

    #[test]
    fn the_document_lists_exactly_the_routes() {
        let table = app::routes().merge(admin::routes());
        let routes: BTreeSet<(String, String)> = table
            .table()
            .iter()
            .map(|r| (r.method.as_str().to_lowercase(), r.path.to_string()))
            .collect();
        let document = openapi();
        let documented: BTreeSet<(String, String)> = document
            .paths
            .paths
            .iter()
            .flat_map(|(path, item)| {
                methods_of(item)
                    .into_iter()
                    .map(move |method| (method.to_string(), path.clone()))
            })
            .collect();
        assert_eq!(documented, routes);
        assert_eq!(routes.len(), 23);
    }

    #[test]
    fn every_operation_is_named_tagged_secured_and_answers_errors_with_the_error_body() {
        let json = serde_json::to_value(openapi()).expect("the document serialises");
        assert_eq!(contract_problems(&json, &[]), Vec::<String>::new());
        let mut ids = BTreeSet::new();
        for documented in documented_operations(&json) {
            let (name, path, operation) =
                (documented.name(), documented.path, documented.operation);
            let id = operation["operationId"].as_str().expect("operationId");
            assert!(id.starts_with("mail"), "{name}: {id}");
            ids.insert(id);
            let tag = if path.starts_with("/api/mail/v1/") {
                "mail"
            } else {
                "mail-admin"
            };
            assert_eq!(operation["tags"], serde_json::json!([tag]), "{name}");
            let scheme = if tag == "mail" {
                "appCredential"
            } else {
                "session"
            };
            assert_eq!(
                operation["security"],
                serde_json::json!([{ scheme: [] }]),
                "{name}"
            );
            let responses = operation["responses"].as_object().expect("responses");
            assert!(responses.contains_key("401"), "{name}");
            assert!(responses.contains_key("403"), "{name}");
        }
        assert_eq!(ids.len(), 23);
        let schemas = json["components"]["schemas"].as_object().expect("schemas");
        for name in schemas.keys() {
            assert!(name.starts_with("Mail") || name == "Error", "{name}");
        }
    }
}
