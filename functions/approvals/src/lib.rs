//! The `approvals` function: pairing the installed mobile web app with an account, and Cloud
//! Login's authenticator apps.
//!
//! - Web (`/api/auth/pwa/v1/...`, a browser session only): start, inspect, confirm and cancel a
//!   pairing; list and revoke one's own devices.
//! - Phone (`/pwa/_auth/...`, the only path that receives the device key): claim a pairing,
//!   complete it, renew the app session, launch, rename and unpair.
//! - Cloud Login (`/api/auth/app-approval/v1/...`): authenticator apps enroll with a P-256 key
//!   and approve browser sign-ins with signed commands.
//! - Accounts (`/api/accounts/users/{id}/app-devices` and `/devices`, administrators): list and
//!   revoke another person's phones and authenticators.
//!
//! Every PWA response is `no-store`, `no-referrer` and varies by `Origin`; every state-changing
//! request must come from the installation's own origin.

mod admin;
mod cloud_login;
mod phone;
mod sessions;
mod web;

use std::net::SocketAddr;

use axum::Router;
use axum::extract::{ConnectInfo, FromRef, Request, State};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use k2b_core::Core;
use k2b_core::config::Needs;
use k2b_core::http::ApiError;
use k2b_core::http::cookies::SetCookie;
use k2b_core::http::headers::{client_request_id, request_id};
use k2b_core::http::origin::origin_matches;
use k2b_core::http::rate_limit::{self, RateLimitError};
use k2b_core::http::routes::Routes;
use k2b_core::pwa::PwaError;

/// Shared state of the function's routers.
#[derive(Clone)]
pub struct ApprovalsState {
    pub core: Core,
}

impl FromRef<ApprovalsState> for Core {
    fn from_ref(state: &ApprovalsState) -> Core {
        state.core.clone()
    }
}

/// The function: the database, `APP_SECRET` (origin, rate limit, issuer and account settings)
/// and the identity key-encryption keys (it issues app sessions).
pub const FUNCTION: k2b_core::lambda::Function = k2b_core::lambda::Function {
    name: "approvals",
    needs: Needs::DATABASE.with_settings().with_signing_keys(),
};

/// The function's routes.
pub fn routes(core: Core) -> Routes {
    let state = ApprovalsState { core };
    // A known path with another method is a bad request like any other (JSON body, PWA headers).
    let pwa = web::routes()
        .merge(phone::routes())
        .map_router(|router| {
            router.method_not_allowed_fallback(|| async { PwaError::InvalidRequest })
        })
        .layer(middleware::from_fn_with_state(state.clone(), transport));
    pwa.merge(cloud_login::routes(state.clone()))
        .merge(admin::routes())
        .layer(middleware::from_fn(request_id))
        .with_state(state)
}

/// The function's part of the API document (tags `pairing`, `app-approval` and `accounts`).
pub fn openapi() -> utoipa::openapi::OpenApi {
    let mut document = web::openapi();
    document.merge(phone::openapi());
    document.merge(cloud_login::openapi());
    document.merge(admin::openapi());
    document
}

/// The routes as the front door serves them.
pub fn router(core: Core) -> Router {
    k2b_core::lambda::front_door(routes(core))
}

/// Transport rules of both PWA routers: the privacy headers on every response, the `Origin`
/// check for every method but GET and HEAD, and the per-client rate limit.
async fn transport(State(state): State<ApprovalsState>, request: Request, next: Next) -> Response {
    with_privacy_headers(guarded(&state, request, next).await)
}

/// `no-store`, `no-referrer` and `Vary: Origin`, on every answer of both routers.
pub(crate) fn with_privacy_headers(mut response: Response) -> Response {
    let headers = response.headers_mut();
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    headers.append(header::VARY, HeaderValue::from_static("Origin"));
    response
}

/// Whether the client may make one more request under `router`'s per-second limit
/// (`security.rate_limit_per_second`, default 60), counted for the whole installation.
pub(crate) fn within_rate_limit<'a>(
    state: &'a ApprovalsState,
    router: &str,
    request: &Request,
) -> impl Future<Output = Result<bool, RateLimitError>> + Send + 'a {
    // Only the key is kept: the request itself is not held across the settings read.
    let key = format!("{router}:{}", client_address(request));
    async move {
        let limit = state
            .core
            .settings
            .get("security.rate_limit_per_second")
            .await
            .ok()
            .and_then(|v| v.as_f64())
            .filter(|v| v.is_finite() && *v >= 1.0)
            .map_or(60, |v| v.min(f64::from(u32::MAX)) as u32);
        rate_limit::allow(&state.core.pool, &key, limit).await
    }
}

/// How [`rate_limited`] is documented on every route it guards.
pub(crate) struct RateLimitedAnswer;

impl utoipa::IntoResponses for RateLimitedAnswer {
    fn responses() -> std::collections::BTreeMap<
        String,
        utoipa::openapi::RefOr<utoipa::openapi::response::Response>,
    > {
        use utoipa::openapi::{RefOr, header::HeaderBuilder};
        let mut answers = k2b_core::http::openapi::error_responses(&[(
            "429",
            "`RATE_LIMITED`: too many requests from this client (`Retry-After: 1`).",
        )]);
        for answer in answers.values_mut() {
            if let RefOr::T(response) = answer {
                response.headers.insert(
                    "Retry-After".to_string(),
                    RefOr::T(
                        HeaderBuilder::new()
                            .schema(Some(<String as utoipa::PartialSchema>::schema()))
                            .description(Some("`1`."))
                            .build(),
                    ),
                );
            }
        }
        answers
    }
}

/// 429 `RATE_LIMITED` with `Retry-After: 1`.
pub(crate) fn rate_limited() -> Response {
    let mut response = ApiError::new(
        StatusCode::TOO_MANY_REQUESTS,
        "RATE_LIMITED",
        "Too many requests. Try again shortly.",
    )
    .into_response();
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    response
}

async fn guarded(state: &ApprovalsState, request: Request, next: Next) -> Response {
    let method = request.method().clone();
    // Every method but GET and HEAD (OPTIONS too) needs the installation's own origin.
    if method != Method::GET
        && method != Method::HEAD
        && let Err(error) = require_own_origin(&state.core, request.headers()).await
    {
        return error.into_response();
    }
    let router = if request
        .uri()
        .path()
        .starts_with(k2b_core::pwa::PHONE_API_PATH)
    {
        "phone"
    } else {
        "web"
    };
    match within_rate_limit(state, router, &request).await {
        Ok(true) => {}
        verdict => {
            if request.uri().path() == "/pwa/_auth/session/launch" {
                return phone::launch_redirect(phone::UNAVAILABLE_TARGET, &[]);
            }
            return match verdict {
                Err(error) => {
                    tracing::warn!(error = %error, router, "rate limit unreadable");
                    PwaError::Unavailable("RateLimitError").into_response()
                }
                Ok(_) => rate_limited(),
            };
        }
    }
    next.run(request).await
}

/// The request's `Origin` must be the canonical origin of `app.url` (forwarded headers ignored).
pub(crate) async fn require_own_origin(core: &Core, headers: &HeaderMap) -> Result<(), PwaError> {
    let expected = core
        .settings
        .public_origin()
        .await
        .map_err(|_| PwaError::Unavailable("SettingsError"))?;
    if origin_matches(headers, &expected) {
        Ok(())
    } else {
        Err(PwaError::Forbidden)
    }
}

/// The client's address as the platform saw it: API Gateway's source IP, else the socket's
/// peer. Forwarded headers are never trusted.
fn client_address(request: &Request) -> String {
    use lambda_http::request::RequestContext;
    let from_gateway =
        request
            .extensions()
            .get::<RequestContext>()
            .and_then(|context| match context {
                RequestContext::ApiGatewayV1(c) => c.identity.source_ip.clone(),
                RequestContext::ApiGatewayV2(c) => c.http.source_ip.clone(),
                _ => None,
            });
    from_gateway
        .or_else(|| {
            request
                .extensions()
                .get::<ConnectInfo<SocketAddr>>()
                .map(|c| c.0.ip().to_string())
        })
        .unwrap_or_else(|| "unknown".into())
}

/// Facts of a request every handler uses.
pub(crate) struct RequestFacts {
    pub request_id: Option<String>,
    pub user_agent: Option<String>,
}

impl RequestFacts {
    pub fn from_headers(headers: &HeaderMap) -> RequestFacts {
        RequestFacts {
            request_id: client_request_id(headers),
            user_agent: headers
                .get(header::USER_AGENT)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string),
        }
    }
}

/// A response with cookies.
pub(crate) fn with_cookies(mut response: Response, cookies: &[SetCookie]) -> Response {
    for cookie in cookies {
        cookie.append_to(response.headers_mut());
    }
    response
}

/// Whether cookies carry `Secure` (everywhere but local mode's plain HTTP).
pub(crate) fn secure_cookies(core: &Core) -> bool {
    !core.config.mode.is_local()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k2b_core::http::openapi::{contract_problems, documented_operations};
    use std::collections::BTreeSet;

    /// The document lists exactly the routes of the table, every operation with its id, its
    /// security and the `Error` body on every error answer.
    #[tokio::test]
    async fn the_document_matches_the_routes() {
        let config = k2b_core::config::Config::from_lookup(k2b_core::config::Mode::Local, |k| {
            (k == "DATABASE_URL").then(|| "postgres://nobody@127.0.0.1:1/none".to_string())
        })
        .expect("config");
        let core = Core::new(config).expect("core");
        let routes: BTreeSet<(String, String)> = routes(core)
            .table()
            .iter()
            .map(|r| (r.method.to_string(), r.path.to_string()))
            .collect();
        let document = openapi();
        let json = serde_json::to_value(&document).expect("json");
        let documented: BTreeSet<(String, String)> = documented_operations(&json)
            .into_iter()
            .map(|o| (o.method, o.path.to_string()))
            .collect();
        assert_eq!(documented, routes);

        assert_eq!(contract_problems(&json, &[]), Vec::<String>::new());
        for operation in documented_operations(&json) {
            let expected = if operation.path.starts_with("/api/auth/app-approval/") {
                "app-approval"
            } else if operation.path.starts_with("/api/accounts/") {
                "accounts"
            } else {
                "pairing"
            };
            assert_eq!(
                operation.operation["tags"],
                serde_json::json!([expected]),
                "{}",
                operation.name()
            );
        }
        for schema in [
            "PwaStartedPairing",
            "PwaPairingStatus",
            "PwaDevice",
            "CloudLoginCommandAnswer",
            "CloudLoginDeviceRequest",
            "CloudLoginDevicePage",
        ] {
            assert!(
                json["components"]["schemas"][schema].is_object(),
                "schema {schema}"
            );
        }
    }

    /// The typed bodies keep the wire shapes of the answers they replace.
    #[test]
    fn bodies_keep_their_wire_shape() {
        let limits = serde_json::to_value(k2b_core::cloud_login::limits()).expect("limits");
        assert_eq!(
            limits,
            serde_json::json!({
                "bodyBytes": 8192, "pairingSeconds": 300, "loginSeconds": 300,
                "proofSeconds": 60, "recentSessionSeconds": 600, "devicesPerAccount": 20,
                "pendingPerAccount": 5, "pageSize": 20, "pollSeconds": 5,
            })
        );
        use k2b_core::cloud_login::device::CommandOutcome;
        assert_eq!(
            serde_json::to_value(CommandOutcome::Approved.answer()).expect("json"),
            serde_json::json!({"state": "approved"})
        );
        assert_eq!(
            serde_json::to_value(CommandOutcome::Pending(Vec::new()).answer()).expect("json"),
            serde_json::json!({"requests": [], "pollAfterSeconds": 5})
        );
    }
}
