//! OAuth access tokens presented to Core's routes (`Authorization: Bearer <jwt>`), verified
//! against the OAuth issuer's published keys (`CLOUD_OAUTH_JWKS_ORIGIN` +
//! `/.well-known/jwks.json`, else the issuer's own origin) with the rules of
//! [`RemoteKeySet`](super::remote::RemoteKeySet).
//!
//! A token is accepted when: it is at most 4096 bytes with the header of
//! [`jwt::parse_access`](super::jwt::parse_access); its RS256 signature verifies with the key its
//! `kid` names; `iss` is this installation's issuer; `aud` is or contains `cloud`;
//! `token_use` is `access`; `client_id` is a non-empty string; `exp` has not passed and `nbf`
//! (when present) has, with the identity clock tolerance; and `scope`, when present, is a
//! space-separated list of at most 100 RFC 6749 scope tokens.

use std::sync::Arc;

use chrono::Utc;
use serde_json::Value;
use uuid::Uuid;

use super::constants::{IDENTITY_CLOCK_TOLERANCE_SECONDS, SESSION_AUDIENCE};
use super::remote::RemoteKeySet;
use super::{Identity, IdentityError, jwt};

/// Most scopes an access token may carry.
pub const MAX_SCOPES: usize = 100;
/// Longest `client_id` and scope token accepted.
const MAX_CLAIM_CHARS: usize = 200;

/// Who an accepted access token names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AccessPrincipal {
    /// A service account (client credentials), by its id.
    ServiceAccount(Uuid),
    /// A person, by account id.
    UserId(Uuid),
    /// A person, by uid.
    Uid(String),
}

/// The parts of an accepted access token Core acts on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccessClaims {
    pub principal: AccessPrincipal,
    pub client_id: String,
    pub scopes: Vec<String>,
}

fn is_scope_token(scope: &str) -> bool {
    !scope.is_empty()
        && scope.len() <= MAX_CLAIM_CHARS
        && scope
            .bytes()
            .all(|b| b == 0x21 || (0x23..=0x5b).contains(&b) || (0x5d..=0x7e).contains(&b))
}

fn string_claim<'a>(claims: &'a Value, name: &str) -> Option<&'a str> {
    claims.get(name).and_then(Value::as_str)
}

fn numeric_date(claims: &Value, name: &str) -> Option<Option<i64>> {
    match claims.get(name) {
        None | Some(Value::Null) => Some(None),
        Some(value) => value
            .as_i64()
            .or_else(|| value.as_f64().filter(|f| f.is_finite()).map(|f| f as i64))
            .map(Some),
    }
}

/// The claim rules of an access token at `now` (seconds): the accepted claims, or `None`.
pub fn check_access_claims(claims: &Value, issuer: &str, now: i64) -> Option<AccessClaims> {
    let tolerance = IDENTITY_CLOCK_TOLERANCE_SECONDS;
    if string_claim(claims, "iss")? != issuer || string_claim(claims, "token_use")? != "access" {
        return None;
    }
    let audience_ok = match claims.get("aud")? {
        Value::String(aud) => aud == SESSION_AUDIENCE,
        Value::Array(auds) => auds.iter().any(|a| a.as_str() == Some(SESSION_AUDIENCE)),
        _ => false,
    };
    if !audience_ok {
        return None;
    }
    let exp = numeric_date(claims, "exp")??;
    if exp <= now.saturating_sub(tolerance) {
        return None;
    }
    if numeric_date(claims, "nbf")?.is_some_and(|nbf| nbf > now.saturating_add(tolerance)) {
        return None;
    }
    let client_id = string_claim(claims, "client_id")?.trim();
    if client_id.is_empty() || client_id.chars().count() > MAX_CLAIM_CHARS {
        return None;
    }
    let scopes: Vec<String> = match claims.get("scope") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::String(scope)) => scope.split_whitespace().map(str::to_string).collect(),
        Some(_) => return None,
    };
    if scopes.len() > MAX_SCOPES || !scopes.iter().all(|s| is_scope_token(s)) {
        return None;
    }
    let principal = if let Some(id) = claims.get("service_account_id") {
        AccessPrincipal::ServiceAccount(Uuid::parse_str(id.as_str()?).ok()?)
    } else if let Some(id) = claims.get("id") {
        AccessPrincipal::UserId(Uuid::parse_str(id.as_str()?).ok()?)
    } else if let Some(uid) = string_claim(claims, "uid").or_else(|| string_claim(claims, "sub")) {
        let uid = uid.trim();
        if uid.is_empty() || uid.chars().count() > 64 {
            return None;
        }
        AccessPrincipal::Uid(uid.to_string())
    } else {
        return None;
    };
    Some(AccessClaims {
        principal,
        client_id: client_id.to_string(),
        scopes,
    })
}

impl Identity {
    /// The key set of the OAuth issuer's JWKS at `url` (kept while the URL stays the same).
    fn oauth_key_set(&self, url: &str) -> Arc<RemoteKeySet> {
        let mut held = self
            .0
            .oauth_keys
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match held.as_ref() {
            Some(keys) if keys.url() == url => keys.clone(),
            _ => {
                let keys = Arc::new(RemoteKeySet::new(url, self.0.metrics.clone()));
                *held = Some(keys.clone());
                keys
            }
        }
    }

    /// How many times the OAuth JWKS was requested (since its URL last changed).
    pub fn oauth_jwks_fetches(&self) -> u64 {
        self.0
            .oauth_keys
            .lock()
            .ok()
            .and_then(|held| held.as_ref().map(|keys| keys.fetch_count()))
            .unwrap_or(0)
    }

    /// Verifies an OAuth access token: `Ok(None)` when it is not a valid access token, `Err`
    /// when the issuer or its published keys cannot be read (an outage, never an anonymous
    /// caller).
    pub async fn verify_access_token(
        &self,
        token: &str,
    ) -> Result<Option<AccessClaims>, IdentityError> {
        let Some(parsed) = jwt::parse_access(token) else {
            return Ok(None);
        };
        let runtime = self.runtime_config().await?;
        let keys = self.oauth_key_set(&runtime.oauth_jwks_url);
        let Some(candidate) = keys
            .lookup(&parsed.kid)
            .await
            .map_err(|_| IdentityError::KeysUnavailable(runtime.oauth_jwks_url.clone()))?
        else {
            return Ok(None);
        };
        let Some(claims) = parsed.verify::<Value>(&candidate.key) else {
            return Ok(None);
        };
        let Some(accepted) = check_access_claims(&claims, &runtime.issuer, Utc::now().timestamp())
        else {
            return Ok(None);
        };
        keys.confirm(&candidate).await;
        Ok(Some(accepted))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const ISSUER: &str = "https://cloud.example";

    fn claims(now: i64) -> Value {
        json!({"iss": ISSUER, "aud": ["cloud", "other"], "token_use": "access",
               "client_id": "reports-cli", "scope": "read  openid", "sub": "ada",
               "exp": now + 600, "iat": now})
    }

    #[test]
    fn access_claims_follow_the_rules() {
        let now = 1_800_000_000;
        let accepted = check_access_claims(&claims(now), ISSUER, now).expect("accepted");
        assert_eq!(accepted.principal, AccessPrincipal::Uid("ada".into()));
        assert_eq!(accepted.scopes, vec!["read", "openid"]);
        assert_eq!(accepted.client_id, "reports-cli");

        let refused = |change: &dyn Fn(&mut Value)| {
            let mut c = claims(now);
            change(&mut c);
            check_access_claims(&c, ISSUER, now).is_none()
        };
        assert!(refused(&|c| c["iss"] = json!("https://other.example")));
        assert!(refused(&|c| c["aud"] = json!("app:mail")));
        assert!(refused(&|c| c["aud"] = json!(["x"])));
        assert!(refused(&|c| c["token_use"] = json!("session")));
        assert!(refused(&|c| c["exp"] = json!(now - 31)));
        assert!(refused(&|c| {
            c.as_object_mut().map(|o| o.remove("exp"));
        }));
        assert!(refused(&|c| c["nbf"] = json!(now + 31)));
        assert!(refused(&|c| c["client_id"] = json!(" ")));
        assert!(refused(&|c| c["scope"] = json!(["read"])));
        assert!(refused(&|c| c["scope"] = json!("re\"ad")));
        assert!(refused(&|c| c["scope"] = json!("s ".repeat(101))));
        assert!(refused(&|c| c["id"] = json!("not-a-uuid")));
        assert!(refused(&|c| c["service_account_id"] = json!(7)));
        assert!(!refused(&|c| c["exp"] = json!(now - 29)));

        let id = Uuid::new_v4();
        let mut c = claims(now);
        c["service_account_id"] = json!(id.to_string());
        c["id"] = json!(Uuid::new_v4().to_string());
        assert_eq!(
            check_access_claims(&c, ISSUER, now).map(|a| a.principal),
            Some(AccessPrincipal::ServiceAccount(id))
        );
        let mut c = claims(now);
        c["id"] = json!(id.to_string());
        assert_eq!(
            check_access_claims(&c, ISSUER, now).map(|a| a.principal),
            Some(AccessPrincipal::UserId(id))
        );
        let mut c = claims(now);
        c["uid"] = json!("grace");
        assert_eq!(
            check_access_claims(&c, ISSUER, now).map(|a| a.principal),
            Some(AccessPrincipal::Uid("grace".into()))
        );
    }
}
