//! Who a request acts as: a bearer credential when an `Authorization` header is present (a `cld_`
//! API key, else an OAuth access token), else a browser session (`session_token`), else a
//! mobile-app session (`pwa_session`), else nobody.

use axum::extract::{FromRef, FromRequestParts};
use http::request::Parts;
use http::{HeaderMap, header};

use crate::Core;
use crate::auth::{
    Actor, AuthError, AuthUser, CredentialKind, OAuthUserActor, ServiceAccountActor,
    ServiceAccountKind, SessionKind, UserActor, find_user, find_user_by_uid, roles_given, roles_of,
};
use crate::http::ApiError;
use crate::http::cookies::get_cookie;
use crate::identity::oauth::AccessPrincipal;
use crate::identity::session::{APP_SESSION_COOKIE, SESSION_COOKIE, validate_session};
use crate::identity::workload;

/// The bearer token of a request, if it sends `Authorization: Bearer <token>`.
pub fn bearer_token(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then_some(token.trim())
        .filter(|t| !t.is_empty())
}

/// 403 for an app's workload credential on a route that is not one of Core's authority routes.
pub const WORKLOAD_FORBIDDEN: &str =
    "App workload credentials require a dedicated Core authority route";
/// 403 for an OAuth credential without the `read` or `admin` scope on a reading route.
pub const OAUTH_READ_SCOPE_REQUIRED: &str = "OAuth scope read or admin is required";

/// Whether OAuth `scopes` allow reading.
pub fn has_read_scope(scopes: &[String]) -> bool {
    scopes.iter().any(|s| s == "read" || s == "admin")
}

/// The checks of a reading route, in order: an actor (401), not an app workload credential
/// (403), and for OAuth credentials the scope `read` or `admin` (403). Sessions and API keys
/// are not scope-checked.
pub fn check_reader(actor: &Actor) -> Result<(), ApiError> {
    if !actor.is_authenticated() {
        return Err(ApiError::unauthorized());
    }
    if actor.is_reserved_workload_credential() {
        return Err(ApiError::forbidden(WORKLOAD_FORBIDDEN));
    }
    if actor
        .oauth_scopes()
        .is_some_and(|scopes| !has_read_scope(scopes))
    {
        return Err(ApiError::forbidden(OAUTH_READ_SCOPE_REQUIRED));
    }
    Ok(())
}

/// The request's actor for a reading route ([`check_reader`]); 503 when credentials cannot be
/// checked.
pub async fn reader(core: &Core, headers: &HeaderMap) -> Result<Actor, ApiError> {
    let actor = authenticate(core, headers).await.map_err(|error| {
        tracing::warn!(error = %error, "authentication unavailable");
        ApiError::unavailable("Authentication is unavailable right now.")
    })?;
    check_reader(&actor)?;
    Ok(actor)
}

/// Middleware of reading routes: [`reader`] before the route runs, the actor then in the
/// request's extensions. An actor already placed there (by an outer layer) is used as is.
pub async fn require_reader(
    axum::extract::State(core): axum::extract::State<Core>,
    mut request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    let actor = match request.extensions().get::<Actor>() {
        Some(actor) => check_reader(actor).map(|()| actor.clone()),
        None => reader(&core, request.headers()).await,
    };
    match actor {
        Ok(actor) => {
            request.extensions_mut().insert(actor);
            next.run(request).await
        }
        Err(error) => error.into_response(),
    }
}

/// 401 for a missing, unknown, revoked or non-workload credential.
fn app_credential_required() -> ApiError {
    ApiError::new(
        http::StatusCode::UNAUTHORIZED,
        "UNAUTHORIZED",
        "A valid app credential is required.",
    )
}

/// Authenticates an app's own request: `Authorization: Bearer cld_…` of the app's resource-bound
/// service account with `scope`. 401 when the credential is missing, unknown, revoked or not a
/// workload credential; 403 when it belongs to another app or lacks the scope; 503 when it
/// cannot be checked. The credential's last use is recorded (best effort).
pub async fn app_credential(
    pool: &sqlx::PgPool,
    headers: &HeaderMap,
    app_id: &str,
    scope: &str,
) -> Result<workload::WorkloadIdentity, ApiError> {
    credential_for(pool, headers, Some(app_id), scope).await
}

/// Authenticates a request of whichever app the credential belongs to (`Authorization: Bearer
/// cld_…` of an app's resource-bound service account with `scope`): the app is the
/// credential's, never anything the request says.
pub async fn calling_app(
    pool: &sqlx::PgPool,
    headers: &HeaderMap,
    scope: &str,
) -> Result<workload::WorkloadIdentity, ApiError> {
    credential_for(pool, headers, None, scope).await
}

async fn credential_for(
    pool: &sqlx::PgPool,
    headers: &HeaderMap,
    app_id: Option<&str>,
    scope: &str,
) -> Result<workload::WorkloadIdentity, ApiError> {
    let unavailable = |_| ApiError::unavailable("Credentials cannot be checked right now.");
    let Some(token) = bearer_token(headers).filter(|t| t.starts_with("cld_")) else {
        return Err(app_credential_required());
    };
    let record = {
        let mut conn = pool.acquire().await.map_err(unavailable)?;
        workload::lookup(&mut conn, token)
            .await
            .map_err(|_| ApiError::unavailable("Credentials cannot be checked right now."))?
    };
    let Some(record) = record.filter(workload::is_usable_workload) else {
        return Err(app_credential_required());
    };
    let app_id = match app_id {
        Some(app_id) => app_id.to_string(),
        None => record.app_id.clone().unwrap_or_default(),
    };
    let identity = workload::check_workload(&record, &app_id, scope).ok_or_else(|| {
        tracing::warn!(
            app_id = %app_id.chars().take(80).collect::<String>(),
            credential_app = record.app_id.as_deref().unwrap_or(""),
            scope,
            "app request refused: credential of another app or without the scope"
        );
        ApiError::forbidden("This credential may not act for this app.")
    })?;
    if let Err(error) = workload::touch_credential(pool, identity.credential_id).await {
        tracing::debug!(error = %error, "credential last-use not recorded");
    }
    Ok(identity)
}

/// Resolves the actor of a request. A request that sends `Authorization` is judged by that
/// credential alone; an unknown credential or session is simply anonymous.
pub async fn authenticate(core: &Core, headers: &HeaderMap) -> Result<Actor, AuthError> {
    if headers.contains_key(header::AUTHORIZATION) {
        return match bearer_token(headers) {
            Some(token) if token.starts_with("cld_") => api_key_actor(core, token).await,
            Some(token) => oauth_actor(core, token).await,
            None => Ok(Actor::Anonymous),
        };
    }
    for cookie in [SESSION_COOKIE, APP_SESSION_COOKIE] {
        if let Some(token) = get_cookie(headers, cookie)
            && let Some(actor) = session_actor(core, token).await?
        {
            return Ok(actor);
        }
    }
    Ok(Actor::Anonymous)
}

/// The actor of a session token, if the token and its family are valid. An app session's person
/// never carries the `admin` role.
pub async fn session_actor(core: &Core, token: &str) -> Result<Option<Actor>, AuthError> {
    let Some(claims) = core
        .identity
        .check_session_token(token)
        .await
        .map_err(|e| AuthError::Unavailable(e.to_string()))?
    else {
        return Ok(None);
    };
    let mut conn = core.pool.acquire().await?;
    let valid = validate_session(&mut conn, &core.settings, &claims)
        .await
        .map_err(|e| AuthError::Unavailable(e.to_string()))?;
    let Some(valid) = valid else {
        return Ok(None);
    };
    let roles = roles_given(&mut conn, &core.settings, &valid.user, valid.manages_groups).await?;
    let mut user = AuthUser::from_record(&valid.user, roles);
    if matches!(valid.kind, SessionKind::App { .. }) {
        user = user.without_admin_role();
    }
    Ok(Some(Actor::User(UserActor {
        user,
        sid: valid.sid,
        session: valid.kind,
    })))
}

async fn api_key_actor(core: &Core, token: &str) -> Result<Actor, AuthError> {
    let mut conn = core.pool.acquire().await?;
    let Some(record) = workload::lookup(&mut conn, token).await? else {
        return Ok(Actor::Anonymous);
    };
    let usable = record.credential_kind == "api_token"
        && !record.credential_revoked
        && record.account_status == "active";
    if !usable {
        return Ok(Actor::Anonymous);
    }
    let delegated_user = match (record.kind(), record.delegated_user_id) {
        (ServiceAccountKind::UserDelegated, Some(user_id)) => {
            // A delegated key acts for its person only while the account can act.
            let user = find_user(&mut conn, user_id).await?;
            let Some(person) = usable_person(core, &mut conn, user).await? else {
                return Ok(Actor::Anonymous);
            };
            Some(person)
        }
        _ => None,
    };
    Ok(Actor::ServiceAccount(ServiceAccountActor {
        id: record.service_account_id,
        kind: record.kind(),
        delegated_user,
        credential_kind: CredentialKind::ApiKey,
        credential_id: record.credential_id.to_string(),
        app_id: crate::auth::app_of_account(
            record.app_id.as_deref(),
            record.resource_type.as_deref(),
            record.resource_id.as_deref(),
        ),
        scopes: record.scopes,
    }))
}

/// The person a credential acts for, with their roles, if their account can act: it exists, has
/// not expired, and its category is on.
async fn usable_person(
    core: &Core,
    conn: &mut sqlx::PgConnection,
    user: Option<crate::auth::UserRecord>,
) -> Result<Option<AuthUser>, AuthError> {
    let Some(user) = user.filter(|user| {
        user.account_expires
            .is_none_or(|at| at > chrono::Utc::now())
    }) else {
        return Ok(None);
    };
    if !core
        .settings
        .category_enabled(&mut *conn, user.category())
        .await?
    {
        return Ok(None);
    }
    let roles = roles_of(&mut *conn, &core.settings, &user).await?;
    Ok(Some(AuthUser::from_record(&user, roles)))
}

/// The actor of an OAuth access token ([`crate::identity::oauth`]): the service account it names
/// (active; a delegated one only while its person's account lives and its category is on), or
/// the person (by `id`, else `uid`, else `sub` as uid; not expired, category on) with the
/// token's client and scopes. Anything else is anonymous.
async fn oauth_actor(core: &Core, token: &str) -> Result<Actor, AuthError> {
    let Some(claims) = core
        .identity
        .verify_access_token(token)
        .await
        .map_err(|e| AuthError::Unavailable(e.to_string()))?
    else {
        return Ok(Actor::Anonymous);
    };
    let mut conn = core.pool.acquire().await?;
    match claims.principal {
        AccessPrincipal::ServiceAccount(id) => {
            let Some(account) = crate::auth::active_service_account(&mut conn, id).await? else {
                return Ok(Actor::Anonymous);
            };
            let (kind, delegated_user_id, app_id) =
                (account.kind, account.delegated_user_id, account.app_id);
            let delegated_user = match (kind, delegated_user_id) {
                (ServiceAccountKind::UserDelegated, Some(user_id)) => {
                    let user = find_user(&mut conn, user_id).await?;
                    let Some(person) = usable_person(core, &mut conn, user).await? else {
                        return Ok(Actor::Anonymous);
                    };
                    Some(person)
                }
                (ServiceAccountKind::UserDelegated, None) => return Ok(Actor::Anonymous),
                _ => None,
            };
            Ok(Actor::ServiceAccount(ServiceAccountActor {
                id,
                kind,
                delegated_user,
                credential_kind: CredentialKind::Oauth,
                credential_id: String::new(),
                scopes: claims.scopes,
                app_id,
            }))
        }
        AccessPrincipal::UserId(_) | AccessPrincipal::Uid(_) => {
            let user = match &claims.principal {
                AccessPrincipal::UserId(id) => find_user(&mut conn, *id).await?,
                AccessPrincipal::Uid(uid) => find_user_by_uid(&mut conn, uid).await?,
                AccessPrincipal::ServiceAccount(_) => None,
            };
            let Some(person) = usable_person(core, &mut conn, user).await? else {
                return Ok(Actor::Anonymous);
            };
            Ok(Actor::OAuthUser(OAuthUserActor {
                user: person,
                client_id: claims.client_id,
                scopes: claims.scopes,
            }))
        }
    }
}

/// Extractor: the request's actor (anonymous when none). Fails with 503 only when the database
/// cannot be asked.
pub struct CurrentActor(pub Actor);

impl<S> FromRequestParts<S> for CurrentActor
where
    Core: FromRef<S>,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        if let Some(actor) = parts.extensions.get::<Actor>() {
            return Ok(CurrentActor(actor.clone()));
        }
        let core = Core::from_ref(state);
        match authenticate(&core, &parts.headers).await {
            Ok(actor) => {
                parts.extensions.insert(actor.clone());
                Ok(CurrentActor(actor))
            }
            Err(error) => {
                tracing::warn!(error = %error, "authentication unavailable");
                Err(ApiError::unavailable(
                    "Authentication is unavailable right now.",
                ))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    #[test]
    fn bearer_tokens_are_read_case_insensitively() {
        let mut headers = HeaderMap::new();
        headers.insert(
            header::AUTHORIZATION,
            HeaderValue::from_static("bearer cld_abc"),
        );
        assert_eq!(bearer_token(&headers), Some("cld_abc"));
        headers.insert(header::AUTHORIZATION, HeaderValue::from_static("Basic x"));
        assert_eq!(bearer_token(&headers), None);
        headers.insert(header::AUTHORIZATION, HeaderValue::from_static("Bearer "));
        assert_eq!(bearer_token(&headers), None);
    }
}
