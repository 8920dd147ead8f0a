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
