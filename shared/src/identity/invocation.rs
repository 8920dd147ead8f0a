//! Invocation tokens: how Core tells an app, for one call, who it acts for.
//!
//! RS256 JWTs (`typ: cloud-invocation+jwt`) that live exactly 30 s, addressed to one app
//! (`aud: app:<id>`), bound to one operation and optionally a schema hash. The claims are strict
//! and cross-checked (a user principal is its own access subject, a session credential carries
//! no scopes, `session_kind: "app"` only with a session credential, …).

use std::future::Future;

use serde::{Deserialize, Deserializer, Serialize};
use uuid::Uuid;

use super::constants::{
    INVOCATION_CLOCK_TOLERANCE_SECONDS, INVOCATION_PROTOCOL_VERSION, INVOCATION_TOKEN_TTL_SECONDS,
    INVOCATION_TOKEN_TYPE, MAX_COMPACT_TOKEN_BYTES,
};
use super::{IdentityError, SigningScope, jwt};
use crate::auth::{Actor, CredentialKind, ServiceAccountKind, SessionKind};
use crate::http::headers::is_valid_request_id;

/// Whether the principal is a person or a service account.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PrincipalType {
    User,
    ServiceAccount,
}

/// The caller: always an app (`app:<id>`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Act {
    pub sub: String,
}

/// The only session kind an invocation carries: a mobile-app session.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InvocationSessionKind {
    App,
}

fn required_nullable<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    Option::<String>::deserialize(d)
}

/// The claims of an invocation token; unknown claims are refused.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InvocationClaims {
    pub iss: String,
    pub aud: String,
    pub token_use: String,
    pub sub: String,
    pub principal_type: PrincipalType,
    pub access_subject_type: PrincipalType,
    pub access_subject_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delegated_user_id: Option<String>,
    pub act: Act,
    pub credential_kind: CredentialKind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_kind: Option<InvocationSessionKind>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credential_id: Option<String>,
    pub scopes: Vec<String>,
    pub op: String,
    /// Present in every token; `null` when the operation has no schema binding.
    #[serde(deserialize_with = "required_nullable")]
    pub schema_hash: Option<String>,
    pub ver: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mandate_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mandate_revision: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workload_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workload_id: Option<String>,
    pub jti: String,
    pub iat: u64,
    pub nbf: u64,
    pub exp: u64,
}

/// Who an invocation acts for, derived from the request's actor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvocationAuthority {
    pub principal_type: PrincipalType,
    pub sub: Uuid,
    pub access_subject_type: PrincipalType,
    pub access_subject_id: Uuid,
    pub delegated_user_id: Option<Uuid>,
    pub credential_kind: CredentialKind,
    pub session_kind: Option<InvocationSessionKind>,
    pub credential_id: Option<String>,
    pub scopes: Vec<String>,
    pub mandate: Option<Mandate>,
    pub workload: Option<(String, String)>,
}

/// Mandate provenance (all four fields or none).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mandate {
    pub id: Uuid,
    pub revision: u64,
    pub workload_type: String,
    pub workload_id: String,
}

impl InvocationAuthority {
    /// The authority of a person's session: `session_kind: "app"` only for a mobile-app session.
    pub fn for_session(user_id: Uuid, kind: SessionKind) -> InvocationAuthority {
        InvocationAuthority {
            principal_type: PrincipalType::User,
            sub: user_id,
            access_subject_type: PrincipalType::User,
            access_subject_id: user_id,
            delegated_user_id: None,
            credential_kind: CredentialKind::Session,
            session_kind: matches!(kind, SessionKind::App { .. })
                .then_some(InvocationSessionKind::App),
            credential_id: None,
            scopes: Vec::new(),
            mandate: None,
            workload: None,
        }
    }

    /// The authority of a request's actor; `None` for anonymous requests and for app workload
    /// credentials (an invocation cannot be exchanged for another).
    pub fn from_actor(actor: &Actor) -> Option<InvocationAuthority> {
        match actor {
            Actor::User(user) => Some(InvocationAuthority::for_session(user.user.id, user.session)),
            Actor::OAuthUser(oauth) => {
                let mut scopes = oauth.scopes.clone();
                scopes.sort();
                scopes.dedup();
                Some(InvocationAuthority {
                    principal_type: PrincipalType::User,
                    sub: oauth.user.id,
                    access_subject_type: PrincipalType::User,
                    access_subject_id: oauth.user.id,
                    delegated_user_id: None,
                    credential_kind: CredentialKind::Oauth,
                    session_kind: None,
                    credential_id: None,
                    scopes,
                    mandate: None,
                    workload: None,
                })
            }
            Actor::ServiceAccount(account) => {
                let mut scopes = account.scopes.clone();
                scopes.sort();
                scopes.dedup();
                let delegated = match account.kind {
                    ServiceAccountKind::UserDelegated => {
                        account.delegated_user.as_ref().map(|u| u.id)
                    }
                    ServiceAccountKind::ResourceBound => None,
                };
                Some(InvocationAuthority {
                    principal_type: PrincipalType::ServiceAccount,
                    sub: account.id,
                    access_subject_type: if delegated.is_some() {
                        PrincipalType::User
                    } else {
                        PrincipalType::ServiceAccount
                    },
                    access_subject_id: delegated.unwrap_or(account.id),
                    delegated_user_id: delegated,
                    credential_kind: account.credential_kind,
                    session_kind: None,
                    credential_id: (!account.credential_id.is_empty())
                        .then(|| account.credential_id.clone()),
                    scopes,
                    mandate: None,
                    workload: None,
                })
            }
            Actor::App(_) | Actor::Anonymous => None,
        }
    }
}

/// One invocation to sign.
#[derive(Debug, Clone)]
pub struct InvocationRequest<'a> {
    pub target_app: &'a str,
    pub caller_app: &'a str,
    pub operation: &'a str,
    pub schema_hash: Option<&'a str>,
    pub authority: &'a InvocationAuthority,
    pub request_id: Option<&'a str>,
    /// Issue time in seconds (default now).
    pub issued_at: Option<u64>,
    pub jti: Option<Uuid>,
}

/// An app id as invocations name them.
pub fn is_app_id(value: &str) -> bool {
    crate::registry::is_valid_app_id(value)
}

/// `^[a-z][a-z0-9:._-]*$`, 1–200 characters.
pub fn is_operation(value: &str) -> bool {
    let bytes = value.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= 200
        && bytes[0].is_ascii_lowercase()
        && bytes.iter().all(|b| {
            b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b':' | b'.' | b'_' | b'-')
        })
}

/// 64 lowercase hexadecimal characters.
pub fn is_schema_hash(value: &str) -> bool {
    value.len() == 64
        && value
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

fn is_scope(value: &str) -> bool {
    (1..=120).contains(&value.len())
        && value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b':' | b'.' | b'_' | b'*' | b'-'))
}

/// A UUID in canonical hyphenated form (versions 1–8, RFC variant), either case.
fn is_uuid(value: &str) -> bool {
    let bytes = value.as_bytes();
    bytes.len() == 36
        && bytes.iter().enumerate().all(|(i, b)| match i {
            8 | 13 | 18 | 23 => *b == b'-',
            14 => (b'1'..=b'8').contains(b),
            19 => matches!(b.to_ascii_lowercase(), b'8' | b'9' | b'a' | b'b'),
            _ => b.is_ascii_hexdigit(),
        })
}

fn is_bounded_id(value: &str) -> bool {
    is_valid_request_id(value.as_bytes())
}

/// Every field and cross-claim rule of an invocation token (times excepted).
pub fn claims_are_consistent(c: &InvocationClaims) -> bool {
    let Some(target) = c.aud.strip_prefix("app:") else {
        return false;
    };
    let Some(caller) = c.act.sub.strip_prefix("app:") else {
        return false;
    };
    let mut unique = c.scopes.clone();
    unique.sort();
    unique.dedup();
    let fields_ok = !c.iss.is_empty()
        && url::Url::parse(&c.iss).is_ok()
        && is_app_id(target)
        && is_app_id(caller)
        && c.token_use == "invocation"
        && is_uuid(&c.sub)
        && is_uuid(&c.access_subject_id)
        && c.delegated_user_id.as_deref().is_none_or(is_uuid)
        && c.credential_id.as_deref().is_none_or(is_bounded_id)
        && c.scopes.len() <= 100
        && unique.len() == c.scopes.len()
        && c.scopes.iter().all(|s| is_scope(s))
        && is_operation(&c.op)
        && c.schema_hash.as_deref().is_none_or(is_schema_hash)
        && c.ver == INVOCATION_PROTOCOL_VERSION
        && c.request_id.as_deref().is_none_or(is_bounded_id)
        && c.mandate_id.as_deref().is_none_or(is_uuid)
        && c.mandate_revision.is_none_or(|r| r > 0)
        && c.workload_type.as_deref().is_none_or(is_bounded_id)
        && c.workload_id.as_deref().is_none_or(is_bounded_id)
        && is_uuid(&c.jti)
        && c.exp > 0;
    if !fields_ok {
        return false;
    }
    // 1. Exactly 30 s, not valid before issue.
    if c.exp != c.iat + INVOCATION_TOKEN_TTL_SECONDS as u64 || c.nbf != c.iat {
        return false;
    }
    // 2.–4. Who the access subject is.
    let subjects_ok = match c.principal_type {
        PrincipalType::User => {
            c.access_subject_type == PrincipalType::User
                && c.access_subject_id == c.sub
                && c.delegated_user_id.is_none()
                && c.credential_kind != CredentialKind::ApiKey
        }
        PrincipalType::ServiceAccount => match &c.delegated_user_id {
            Some(delegated) => {
                c.access_subject_type == PrincipalType::User && &c.access_subject_id == delegated
            }
            None => {
                c.access_subject_type == PrincipalType::ServiceAccount
                    && c.access_subject_id == c.sub
            }
        },
    };
    if !subjects_ok {
        return false;
    }
    // 5.–7. Session credentials: a person, no scopes; only they may say "app session".
    if c.credential_kind == CredentialKind::Session
        && (c.principal_type != PrincipalType::User || !c.scopes.is_empty())
    {
        return false;
    }
    if c.session_kind.is_some() && c.credential_kind != CredentialKind::Session {
        return false;
    }
    // 8. API keys name their credential.
    if c.credential_kind == CredentialKind::ApiKey && c.credential_id.is_none() {
        return false;
    }
    // 9. Mandates carry all their provenance; nothing else carries any.
    let mandate_fields = [
        c.mandate_id.is_some(),
        c.mandate_revision.is_some(),
        c.workload_type.is_some(),
        c.workload_id.is_some(),
    ];
    if c.credential_kind == CredentialKind::Mandate {
        mandate_fields.iter().all(|f| *f)
    } else {
        mandate_fields.iter().all(|f| !*f)
    }
}

/// Builds and checks the claims of a request (before anything is signed): invalid targets,
/// operations or schema hashes are errors; an invalid request id is dropped silently.
pub fn build_claims(
    issuer: &str,
    request: &InvocationRequest<'_>,
) -> Result<InvocationClaims, IdentityError> {
    if !is_app_id(request.target_app) || !is_app_id(request.caller_app) {
        return Err(IdentityError::InvalidInvocation("app id"));
    }
    if !is_operation(request.operation) {
        return Err(IdentityError::InvalidInvocation("operation"));
    }
    if request.schema_hash.is_some_and(|h| !is_schema_hash(h)) {
        return Err(IdentityError::InvalidInvocation("schema hash"));
    }
    let authority = request.authority;
    let issued_at = request
        .issued_at
        .unwrap_or_else(|| chrono::Utc::now().timestamp().max(0) as u64);
    let mut scopes = authority.scopes.clone();
    scopes.sort();
    scopes.dedup();
    let claims = InvocationClaims {
        iss: issuer.to_string(),
        aud: format!("app:{}", request.target_app),
        token_use: "invocation".into(),
        sub: authority.sub.to_string(),
        principal_type: authority.principal_type,
        access_subject_type: authority.access_subject_type,
        access_subject_id: authority.access_subject_id.to_string(),
        delegated_user_id: authority.delegated_user_id.map(|id| id.to_string()),
        act: Act {
            sub: format!("app:{}", request.caller_app),
        },
        credential_kind: authority.credential_kind,
        session_kind: authority.session_kind,
        credential_id: authority.credential_id.clone(),
        scopes,
        op: request.operation.to_string(),
        schema_hash: request.schema_hash.map(str::to_string),
        ver: INVOCATION_PROTOCOL_VERSION,
        request_id: request
            .request_id
            .filter(|id| is_bounded_id(id))
            .map(str::to_string),
        mandate_id: authority.mandate.as_ref().map(|m| m.id.to_string()),
        mandate_revision: authority.mandate.as_ref().map(|m| m.revision),
        workload_type: authority.mandate.as_ref().map(|m| m.workload_type.clone()),
        workload_id: authority.mandate.as_ref().map(|m| m.workload_id.clone()),
        jti: request.jti.unwrap_or_else(Uuid::new_v4).to_string(),
        iat: issued_at,
        nbf: issued_at,
        exp: issued_at + INVOCATION_TOKEN_TTL_SECONDS as u64,
    };
    if !claims_are_consistent(&claims) {
        return Err(IdentityError::InvalidInvocation("inconsistent authority"));
    }
    Ok(claims)
}

/// Signs an invocation in an issuance scope (the scope's issuer unless `issuer` is given).
pub fn sign_invocation(
    scope: &SigningScope,
    issuer: Option<&str>,
    request: &InvocationRequest<'_>,
) -> Result<String, IdentityError> {
    let claims = build_claims(issuer.unwrap_or(&scope.issuer), request)?;
    scope.sign(INVOCATION_TOKEN_TYPE, &claims)
}

/// What the receiving app expects of an invocation.
#[derive(Debug, Clone)]
pub struct InvocationExpectation<'a> {
    pub issuer: &'a str,
    pub target_app: &'a str,
    pub operation: &'a str,
    pub schema_hash: Option<&'a str>,
    /// Accept any schema hash (the app binds it later).
    pub defer_schema_binding: bool,
}

/// Verifies an invocation token: shape and header (`typ` cloud-invocation+jwt, a strict UUID
/// kid), the key from `resolve_key`, the signature, strict claims and every cross-claim rule,
/// audience, issuer, 2 s skew at `now`, operation and schema hash. Any failure is `None`.
pub async fn verify_invocation<F, Fut>(
    token: &str,
    expected: &InvocationExpectation<'_>,
    now: i64,
    resolve_key: F,
) -> Option<InvocationClaims>
where
    F: FnOnce(String) -> Fut,
    Fut: Future<Output = Option<std::sync::Arc<jsonwebtoken::DecodingKey>>>,
{
    if !is_app_id(expected.target_app)
        || !is_operation(expected.operation)
        || expected.schema_hash.is_some_and(|h| !is_schema_hash(h))
        || token.len() > MAX_COMPACT_TOKEN_BYTES
    {
        return None;
    }
    let parsed = jwt::parse(token)?;
    if parsed.typ != INVOCATION_TOKEN_TYPE || !jwt::is_strict_uuid(&parsed.kid) {
        return None;
    }
    let key = resolve_key(parsed.kid.clone()).await?;
    let claims: InvocationClaims = parsed.verify(&key)?;
    let tolerance = INVOCATION_CLOCK_TOLERANCE_SECONDS;
    let on_time = (claims.exp as i64) > now - tolerance && (claims.nbf as i64) <= now + tolerance;
    let bound = claims.iss == expected.issuer
        && claims.aud == format!("app:{}", expected.target_app)
        && claims.op == expected.operation
        && (expected.defer_schema_binding || claims.schema_hash.as_deref() == expected.schema_hash);
    (on_time && bound && claims_are_consistent(&claims)).then_some(claims)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user_authority() -> InvocationAuthority {
        InvocationAuthority::for_session(Uuid::new_v4(), SessionKind::Web)
    }

    fn request(authority: &InvocationAuthority) -> InvocationRequest<'_> {
        InvocationRequest {
            target_app: "weather",
            caller_app: "core",
            operation: "widget.read:current",
            schema_hash: None,
            authority,
            request_id: None,
            issued_at: Some(1_800_000_000),
            jti: None,
        }
    }

    /// Scenario 20 (claim side): invalid request ids are dropped, 200 printable characters kept.
    #[test]
    fn scenario_20_request_ids_are_normalised() {
        let authority = user_authority();
        for bad in ["", "two words", "ümlaut", &"x".repeat(201), "line\nbreak"] {
            let mut r = request(&authority);
            r.request_id = Some(bad);
            assert_eq!(
                build_claims("https://cloud.example", &r)
                    .expect("ok")
                    .request_id,
                None
            );
        }
        let long = "x".repeat(200);
        let mut r = request(&authority);
        r.request_id = Some(&long);
        assert_eq!(
            build_claims("https://cloud.example", &r)
                .expect("ok")
                .request_id,
            Some(long.clone())
        );
    }

    #[test]
    fn scenario_21_minimal_claims() {
        let authority = user_authority();
        let claims = build_claims("https://cloud.example", &request(&authority)).expect("ok");
        assert_eq!(claims.aud, "app:weather");
        assert_eq!(claims.act.sub, "app:core");
        assert_eq!(claims.exp - claims.iat, 30);
        assert_eq!(claims.nbf, claims.iat);
        assert_eq!(claims.schema_hash, None);
        assert!(claims.scopes.is_empty());
        let json = serde_json::to_value(&claims).expect("json");
        assert!(
            json.get("schema_hash")
                .is_some_and(serde_json::Value::is_null)
        );
        assert!(json.get("session_kind").is_none());
    }

    /// Scenarios 22, 23, 27 and 33: who may carry what.
    #[test]
    fn cross_claim_rules() {
        let base = build_claims("https://cloud.example", &request(&user_authority())).expect("ok");
        let user_id = base.sub.clone();
        let account = Uuid::new_v4().to_string();
        let with = |f: &dyn Fn(&mut InvocationClaims)| {
            let mut c = base.clone();
            f(&mut c);
            claims_are_consistent(&c)
        };
        // Delegated service account with an API key.
        assert!(with(&|c| {
            c.principal_type = PrincipalType::ServiceAccount;
            c.sub = account.clone();
            c.delegated_user_id = Some(user_id.clone());
            c.credential_kind = CredentialKind::ApiKey;
            c.credential_id = Some("cred-1".into());
            c.scopes = vec!["read".into()];
        }));
        // Resource-bound account with OAuth.
        assert!(with(&|c| {
            c.principal_type = PrincipalType::ServiceAccount;
            c.access_subject_type = PrincipalType::ServiceAccount;
            c.sub = account.clone();
            c.access_subject_id = account.clone();
            c.credential_kind = CredentialKind::Oauth;
            c.scopes = vec!["read".into(), "write".into()];
        }));
        // Full mandate provenance, and a lone mandate id.
        let mandate = |c: &mut InvocationClaims| {
            c.credential_kind = CredentialKind::Mandate;
            c.mandate_id = Some(Uuid::new_v4().to_string());
            c.mandate_revision = Some(3);
            c.workload_type = Some("ai.task".into());
            c.workload_id = Some("task-1".into());
        };
        assert!(with(&mandate));
        assert!(!with(&|c| c.mandate_id = Some(Uuid::new_v4().to_string())));
        // Inconsistent subjects.
        assert!(!with(&|c| c.access_subject_id = account.clone()));
        assert!(!with(&|c| {
            c.principal_type = PrincipalType::ServiceAccount;
            c.sub = account.clone();
            c.delegated_user_id = Some(user_id.clone());
        }));
        assert!(!with(&|c| {
            c.principal_type = PrincipalType::ServiceAccount;
            c.sub = account.clone();
            c.access_subject_type = PrincipalType::ServiceAccount;
            c.access_subject_id = user_id.clone();
            c.credential_kind = CredentialKind::Oauth;
        }));
        assert!(!with(&|c| {
            c.credential_kind = CredentialKind::ApiKey;
            c.credential_id = Some("k".into());
        }));
        // Scopes on a session, duplicates, version, lifetime.
        assert!(!with(&|c| c.scopes = vec!["read".into()]));
        assert!(!with(&|c| {
            c.principal_type = PrincipalType::ServiceAccount;
            c.access_subject_type = PrincipalType::ServiceAccount;
            c.sub = account.clone();
            c.access_subject_id = account.clone();
            c.credential_kind = CredentialKind::Oauth;
            c.scopes = vec!["read".into(), "read".into()];
        }));
        assert!(!with(&|c| c.ver = 2));
        assert!(!with(&|c| c.exp += 1));
        assert!(!with(&|c| c.nbf += 1));
        // session_kind "app": only with a session credential.
        assert!(with(&|c| c.session_kind = Some(InvocationSessionKind::App)));
        assert!(!with(&|c| {
            c.session_kind = Some(InvocationSessionKind::App);
            c.principal_type = PrincipalType::ServiceAccount;
            c.access_subject_type = PrincipalType::ServiceAccount;
            c.sub = account.clone();
            c.access_subject_id = account.clone();
            c.credential_kind = CredentialKind::Oauth;
        }));
        assert!(!with(&|c| {
            c.session_kind = Some(InvocationSessionKind::App);
            mandate(c);
        }));
        let mut value = serde_json::to_value(&base).expect("json");
        value["session_kind"] = serde_json::json!("web");
        assert!(serde_json::from_value::<InvocationClaims>(value).is_err());
    }

    #[test]
    fn schema_hash_must_be_present_even_when_null() {
        let base = build_claims("https://cloud.example", &request(&user_authority())).expect("ok");
        let mut value = serde_json::to_value(&base).expect("json");
        value.as_object_mut().expect("object").remove("schema_hash");
        assert!(serde_json::from_value::<InvocationClaims>(value).is_err());
    }

    /// Scenario 26 (request side): malformed schema hashes are refused before signing.
    #[test]
    fn malformed_requests_are_refused_before_signing() {
        let authority = user_authority();
        for hash in [
            "",
            &"a".repeat(63),
            &"a".repeat(65),
            &"A".repeat(64),
            &"g".repeat(64),
        ] {
            let mut r = request(&authority);
            r.schema_hash = Some(hash);
            assert!(build_claims("https://cloud.example", &r).is_err(), "{hash}");
        }
        let mut r = request(&authority);
        r.operation = "Widget.Read";
        assert!(build_claims("https://cloud.example", &r).is_err());
        let mut r = request(&authority);
        r.target_app = "Weather";
        assert!(build_claims("https://cloud.example", &r).is_err());
    }

    #[test]
    fn authority_from_an_app_session_says_so() {
        let user = Uuid::new_v4();
        let web = InvocationAuthority::for_session(user, SessionKind::Web);
        assert_eq!(web.session_kind, None);
        let app = InvocationAuthority::for_session(
            user,
            SessionKind::App {
                device_id: Uuid::new_v4(),
            },
        );
        assert_eq!(app.session_kind, Some(InvocationSessionKind::App));
        assert_eq!(app.credential_kind, CredentialKind::Session);
        assert!(InvocationAuthority::from_actor(&Actor::Anonymous).is_none());
    }
}

/// The actor an app installs for a verified invocation of a person: the current account (none
/// when it is gone, expired or its category is off) with its current roles, without `admin` when
/// the invocation came from a mobile-app session. Service-account principals resolve to their
/// account. One query for the principal. The actor's `sid` is nil: the app holds no session of
/// the person, only this invocation.
pub async fn resolve_invocation_actor(
    conn: &mut sqlx::PgConnection,
    settings: &crate::settings::Settings,
    claims: &InvocationClaims,
) -> Result<Option<Actor>, IdentityError> {
    use crate::auth::{AuthUser, ServiceAccountActor, UserActor, UserRecord, build_roles};
    match claims.principal_type {
        PrincipalType::User => {
            let Ok(user_id) = Uuid::parse_str(&claims.sub) else {
                return Ok(None);
            };
            let groups = settings.admin_groups().await?;
            let row: Option<(UserRecord, bool, bool)> = sqlx::query_as::<_, UserWithRoles>(
                "SELECT u.id, u.uid, u.provider, u.profile, u.display_name, u.mail,
                        u.account_expires, u.admin, u.auth_epoch,
                        CASE WHEN u.provider = 'local' THEN u.admin ELSE EXISTS (
                          SELECT 1 FROM auth.ipa_user_effective_groups g
                          WHERE g.user_id = u.id AND g.group_name = ANY($2)) END AS effective_admin,
                        EXISTS (SELECT 1 FROM auth.group_managers m WHERE m.user_id = u.id) AS manages
                 FROM auth.users u
                 WHERE u.id = $1 AND (u.account_expires IS NULL OR u.account_expires > now())",
            )
            .bind(user_id)
            .bind(&groups)
            .fetch_optional(&mut *conn)
            .await?
            .map(|r| (r.user, r.effective_admin, r.manages));
            let Some((user, admin, manages)) = row else {
                return Ok(None);
            };
            if !settings.category_enabled(conn, user.category()).await? {
                return Ok(None);
            }
            let roles = build_roles(user.provider(), user.profile(), admin, manages);
            let mut person = AuthUser::from_record(&user, roles);
            let session = if claims.session_kind == Some(InvocationSessionKind::App) {
                person = person.without_admin_role();
                SessionKind::App {
                    device_id: Uuid::nil(),
                }
            } else {
                SessionKind::Web
            };
            Ok(Some(Actor::User(UserActor {
                user: person,
                sid: Uuid::nil(),
                session,
            })))
        }
        PrincipalType::ServiceAccount => {
            let Ok(account_id) = Uuid::parse_str(&claims.sub) else {
                return Ok(None);
            };
            let Some(account) = crate::auth::active_service_account(&mut *conn, account_id).await?
            else {
                return Ok(None);
            };
            Ok(Some(Actor::ServiceAccount(ServiceAccountActor {
                id: account_id,
                kind: account.kind,
                delegated_user: None,
                credential_kind: claims.credential_kind,
                credential_id: claims.credential_id.clone().unwrap_or_default(),
                scopes: claims.scopes.clone(),
                app_id: account.app_id,
            })))
        }
    }
}

#[derive(sqlx::FromRow)]
struct UserWithRoles {
    #[sqlx(flatten)]
    user: crate::auth::UserRecord,
    effective_admin: bool,
    manages: bool,
}
