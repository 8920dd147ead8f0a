//! The app side of widgets: the route Core invokes (`GET /api/_internal/widgets/v1/{widgetId}`)
//! and each widget's public path, both running the app's handler with the caller's actor, the
//! fitted size and the preferred locale.
//!
//! The internal route accepts only a valid Cloud invocation for this app and `widget.read:<id>`;
//! an app workload credential used as an API key is refused before anything else runs.

use std::collections::HashMap;
use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::{Path, Query, Request, State};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use futures::future::BoxFuture;
use http::{HeaderValue, StatusCode, header};
use serde_json::Value;

use super::declaration::WidgetDeclaration;
use super::size::{WidgetSize, fit_size};
use super::{INTERNAL_WIDGET_PATH, SIZE_PARAM, WidgetsError, widget_operation};
use crate::Core;
use crate::access::{
    OAUTH_READ_SCOPE_REQUIRED, WORKLOAD_FORBIDDEN, authenticate, bearer_token, has_read_scope,
    reader,
};
use crate::auth::{Actor, CredentialKind};
use crate::http::ApiError;
use crate::http::headers::client_request_id;
use crate::http::locale::preferred_locale;
use crate::identity::Purpose;
use crate::identity::invocation::{
    InvocationClaims, InvocationExpectation, resolve_invocation_actor, verify_invocation,
};
use crate::identity::remote::RemoteVerifier;

/// What a widget handler gets.
#[derive(Debug, Clone)]
pub struct WidgetCall {
    pub widget_id: String,
    pub actor: Actor,
    /// The fitted size (`large` on the public path).
    pub size: WidgetSize,
    pub locale: Option<String>,
    pub request_id: Option<String>,
    /// The verified invocation (internal route only).
    pub invocation: Option<InvocationClaims>,
}

/// What a widget handler answers.
#[derive(Debug, Clone, PartialEq)]
pub enum WidgetReply {
    /// 200 with this JSON body.
    Json(Value),
    /// 204: nothing to show.
    Empty,
    /// 403: not at this access level.
    Forbidden,
    /// 500: the handler failed (Core reports the widget as an error).
    Failed,
}

pub type WidgetHandler = Arc<dyn Fn(WidgetCall) -> BoxFuture<'static, WidgetReply> + Send + Sync>;

/// How the app checks Core's invocation tokens.
#[derive(Clone)]
pub enum InvocationKeys {
    /// Core's key ring in the same database (the issuer from the runtime configuration).
    Local,
    /// Core's published invocation JWKS.
    Remote(Arc<RemoteVerifier>),
}

const INVOCATION_REQUIRED: &str = "A valid Cloud invocation is required";

/// An app's widget handlers, checked against its declarations.
#[derive(Clone)]
pub struct WidgetProvider {
    app_id: String,
    core: Core,
    keys: InvocationKeys,
    declarations: Arc<HashMap<String, WidgetDeclaration>>,
    handlers: Arc<HashMap<String, WidgetHandler>>,
}

impl WidgetProvider {
    /// Binds handlers to declared widgets; a handler for an undeclared widget is an error.
    pub fn new(
        core: Core,
        app_id: impl Into<String>,
        keys: InvocationKeys,
        declarations: &[WidgetDeclaration],
        handlers: HashMap<String, WidgetHandler>,
    ) -> Result<WidgetProvider, WidgetsError> {
        let declarations: HashMap<String, WidgetDeclaration> = declarations
            .iter()
            .map(|d| (d.id.clone(), d.clone()))
            .collect();
        if let Some(undeclared) = handlers.keys().find(|id| !declarations.contains_key(*id)) {
            return Err(WidgetsError::Declaration(format!(
                "widget {undeclared:?} has a handler but is not declared"
            )));
        }
        Ok(WidgetProvider {
            app_id: app_id.into(),
            core,
            keys,
            declarations: Arc::new(declarations),
            handlers: Arc::new(handlers),
        })
    }

    /// The internal route and every bound widget's public path. The internal route exists only
    /// when handlers are bound.
    pub fn router(&self) -> Router {
        let mut router = Router::new();
        if !self.handlers.is_empty() {
            router = router.route(
                &format!("{INTERNAL_WIDGET_PATH}{{widget_id}}"),
                get(internal).layer(middleware::from_fn_with_state(
                    self.core.clone(),
                    reject_reserved_workload_credential,
                )),
            );
        }
        for (id, declaration) in self.declarations.iter() {
            if self.handlers.contains_key(id) && declaration.path.starts_with('/') {
                let widget_id = id.clone();
                router = router.route(
                    &declaration.path,
                    get(move |state: State<WidgetProvider>, request: Request| {
                        public(state, widget_id, request)
                    }),
                );
            }
        }
        router.with_state(self.clone())
    }

    async fn verify(&self, token: &str, operation: &str) -> Option<InvocationClaims> {
        match &self.keys {
            InvocationKeys::Remote(verifier) => {
                verifier
                    .verify_invocation(token, &self.app_id, operation, None, false)
                    .await
            }
            InvocationKeys::Local => {
                let issuer = self
                    .core
                    .identity
                    .runtime_config()
                    .await
                    .ok()?
                    .issuer
                    .clone();
                let expected = InvocationExpectation {
                    issuer: &issuer,
                    target_app: &self.app_id,
                    operation,
                    schema_hash: None,
                    defer_schema_binding: false,
                };
                let identity = self.core.identity.clone();
                verify_invocation(
                    token,
                    &expected,
                    chrono::Utc::now().timestamp(),
                    |kid| async move { identity.verification_key(Purpose::Invocation, &kid).await },
                )
                .await
            }
        }
    }

    async fn run(&self, call: WidgetCall) -> Response {
        let Some(handler) = self.handlers.get(&call.widget_id) else {
            return ApiError::unauthorized_with(INVOCATION_REQUIRED).into_response();
        };
        match handler(call).await {
            WidgetReply::Json(body) => axum::Json(body).into_response(),
            WidgetReply::Empty => empty(StatusCode::NO_CONTENT),
            WidgetReply::Forbidden => empty(StatusCode::FORBIDDEN),
            WidgetReply::Failed => ApiError::internal().into_response(),
        }
    }
}

fn empty(status: StatusCode) -> Response {
    (
        status,
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        Body::empty(),
    )
        .into_response()
}

/// Middleware: an app workload credential (a resource-bound account's API key with a reserved
/// scope) gets 403 before the route runs; every other request passes untouched.
pub async fn reject_reserved_workload_credential(
    State(core): State<Core>,
    request: Request,
    next: Next,
) -> Response {
    let is_api_key = bearer_token(request.headers()).is_some_and(|t| t.starts_with("cld_"));
    if is_api_key {
        match authenticate(&core, request.headers()).await {
            Ok(actor) if actor.is_reserved_workload_credential() => {
                return ApiError::forbidden(WORKLOAD_FORBIDDEN).into_response();
            }
            Ok(_) => {}
            Err(error) => {
                tracing::warn!(error = %error, "credential check unavailable");
                return ApiError::unavailable("Authentication is unavailable right now.")
                    .into_response();
            }
        }
    }
    next.run(request).await
}

async fn internal(
    State(provider): State<WidgetProvider>,
    Path(widget_id): Path<String>,
    Query(query): Query<HashMap<String, String>>,
    request: Request,
) -> Response {
    let headers = request.headers();
    let unauthorized = || ApiError::unauthorized_with(INVOCATION_REQUIRED).into_response();
    let (Some(declaration), true) = (
        provider.declarations.get(&widget_id),
        provider.handlers.contains_key(&widget_id),
    ) else {
        return unauthorized();
    };
    let Some(token) = bearer_token(headers) else {
        return unauthorized();
    };
    let Some(claims) = provider.verify(token, &widget_operation(&widget_id)).await else {
        return unauthorized();
    };
    if claims.credential_kind == CredentialKind::Oauth && !has_read_scope(&claims.scopes) {
        return ApiError::forbidden(OAUTH_READ_SCOPE_REQUIRED).into_response();
    }
    let actor = match provider.core.pool.acquire().await {
        Ok(mut conn) => resolve_invocation_actor(&mut conn, &provider.core.settings, &claims).await,
        Err(error) => Err(error.into()),
    };
    let actor = match actor {
        Ok(Some(actor)) => actor,
        Ok(None) => return unauthorized(),
        Err(error) => {
            tracing::warn!(error = %error, "invocation actor unavailable");
            return ApiError::unavailable("The widget is unavailable right now.").into_response();
        }
    };
    let size = fit_size(
        query.get(SIZE_PARAM).map(String::as_str),
        &declaration.offered(),
        declaration.default(),
    );
    let call = WidgetCall {
        widget_id,
        actor,
        size,
        locale: preferred_locale(headers),
        request_id: client_request_id(headers),
        invocation: Some(claims),
    };
    provider.run(call).await
}

async fn public(
    State(provider): State<WidgetProvider>,
    widget_id: String,
    request: Request,
) -> Response {
    let headers = request.headers();
    let actor = match reader(&provider.core, headers).await {
        Ok(actor) => actor,
        Err(error) => return error.into_response(),
    };
    let call = WidgetCall {
        widget_id,
        actor,
        size: WidgetSize::Large,
        locale: preferred_locale(headers),
        request_id: client_request_id(headers),
        invocation: None,
    };
    provider.run(call).await
}
