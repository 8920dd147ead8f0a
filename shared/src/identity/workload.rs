//! App workload credentials: `cld_` tokens of a resource-bound service account that belongs to
//! one registered app. Only the token's SHA-256 is stored.

use std::future::Future;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use rand::RngCore;
use sha2::{Digest, Sha256};
use sqlx::{FromRow, PgConnection};
use uuid::Uuid;

pub use crate::auth::{RESERVED_SCOPES, ServiceAccountKind, is_reserved_workload_credential};

/// Scopes a workload credential may carry: invoking Core's identity authority, publishing the
/// app's registry entry, and handing Core the app's outgoing mail.
pub const WORKLOAD_SCOPES: &[&str] = &["identity:invoke", "registry:publish", "mail"];
/// The resource type of an app's workload service account.
pub const APP_RESOURCE_TYPE: &str = "cloud.app";
const TOKEN_PREFIX: &str = "cld_";

/// A new random token: `cld_` and 43 base64url characters (256 bits).
pub fn new_token() -> String {
    let mut bytes = [0u8; 32];
    rand::rngs::OsRng.fill_bytes(&mut bytes);
    format!("{TOKEN_PREFIX}{}", URL_SAFE_NO_PAD.encode(bytes))
}

/// The stored form of a token.
pub fn hash_token(token: &str) -> String {
    hex::encode(Sha256::digest(token.as_bytes()))
}

/// A credential as stored, joined with its service account.
#[derive(Debug, Clone, PartialEq, Eq, FromRow)]
pub struct CredentialRecord {
    pub credential_id: Uuid,
    pub credential_kind: String,
    pub credential_revoked: bool,
    pub scopes: Vec<String>,
    pub service_account_id: Uuid,
    pub account_kind: String,
    pub account_status: String,
    pub delegated_user_id: Option<Uuid>,
    pub app_id: Option<String>,
    pub resource_type: Option<String>,
    pub resource_id: Option<String>,
}

impl CredentialRecord {
    pub fn kind(&self) -> ServiceAccountKind {
        if self.account_kind == "user_delegated" {
            ServiceAccountKind::UserDelegated
        } else {
            ServiceAccountKind::ResourceBound
        }
    }
}

/// Finds the credential of a token (any state), or `None`.
pub async fn lookup(
    conn: &mut PgConnection,
    token: &str,
) -> Result<Option<CredentialRecord>, sqlx::Error> {
    sqlx::query_as(
        "SELECT c.id AS credential_id, c.kind AS credential_kind,
                c.revoked_at IS NOT NULL AS credential_revoked, c.scopes,
                a.id AS service_account_id, a.kind AS account_kind, a.status AS account_status,
                a.delegated_user_id, a.app_id, a.resource_type, a.resource_id
         FROM auth.service_account_credentials c
         JOIN auth.service_accounts a ON a.id = c.service_account_id
         WHERE c.token_hash = $1",
    )
    .bind(hash_token(token))
    .fetch_optional(conn)
    .await
}

/// An authenticated workload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkloadIdentity {
    pub app_id: String,
    pub service_account_id: Uuid,
    pub credential_id: Uuid,
    pub scope: String,
}

/// Whether a usable credential (active token of an active resource-bound account without a
/// delegated user, bound to `cloud.app`/`app_id`) grants `scope` to `app_id`.
pub fn check_workload(
    record: &CredentialRecord,
    app_id: &str,
    scope: &str,
) -> Option<WorkloadIdentity> {
    let usable = is_usable_workload(record)
        && record.app_id.as_deref() == Some(app_id)
        && record.resource_type.as_deref() == Some(APP_RESOURCE_TYPE)
        && record.resource_id.as_deref() == Some(app_id)
        && record.scopes.iter().any(|s| s == scope);
    usable.then(|| WorkloadIdentity {
        app_id: app_id.to_string(),
        service_account_id: record.service_account_id,
        credential_id: record.credential_id,
        scope: scope.to_string(),
    })
}

/// An active token of an active resource-bound account without a delegated user.
pub fn is_usable_workload(record: &CredentialRecord) -> bool {
    record.credential_kind == "api_token"
        && !record.credential_revoked
        && record.account_status == "active"
        && record.kind() == ServiceAccountKind::ResourceBound
        && record.delegated_user_id.is_none()
}

/// Authenticates a workload credential for `app_id` and `scope`. The app id must be non-empty
/// and already trimmed, the scope a workload scope, and the token a `cld_` token; otherwise no
/// lookup happens at all.
pub async fn authenticate_workload_credential<F, Fut>(
    token: Option<&str>,
    app_id: &str,
    scope: &str,
    lookup: F,
) -> Option<WorkloadIdentity>
where
    F: FnOnce(String) -> Fut,
    Fut: Future<Output = Option<CredentialRecord>>,
{
    if app_id.is_empty() || app_id.trim() != app_id || !WORKLOAD_SCOPES.contains(&scope) {
        return None;
    }
    let token = token.filter(|t| t.starts_with(TOKEN_PREFIX))?;
    let record = lookup(token.to_string()).await?;
    check_workload(&record, app_id, scope)
}

/// Issues a new workload credential for `app_id` (creating the app's resource-bound service
/// account on first use) and returns the token, shown only this once.
pub async fn issue_app_credential(
    conn: &mut PgConnection,
    app_id: &str,
    scopes: &[&str],
) -> Result<(String, Uuid), sqlx::Error> {
    let account: Uuid = sqlx::query_scalar(
        "INSERT INTO auth.service_accounts (kind, name, app_id, resource_type, resource_id)
         VALUES ('resource_bound', $2, $1, $3, $1)
         ON CONFLICT (app_id) WHERE kind = 'resource_bound' AND resource_type = 'cloud.app'
         DO UPDATE SET name = EXCLUDED.name
         RETURNING id",
    )
    .bind(app_id)
    .bind(format!("app:{app_id}"))
    .bind(APP_RESOURCE_TYPE)
    .fetch_one(&mut *conn)
    .await?;
    let token = new_token();
    let scopes: Vec<String> = scopes.iter().map(|s| s.to_string()).collect();
    let credential: Uuid = sqlx::query_scalar(
        "INSERT INTO auth.service_account_credentials (service_account_id, token_hash, scopes)
         VALUES ($1, $2, $3) RETURNING id",
    )
    .bind(account)
    .bind(hash_token(&token))
    .bind(&scopes)
    .fetch_one(&mut *conn)
    .await?;
    Ok((token, credential))
}

/// Records that a credential was used.
pub async fn touch_credential(pool: &sqlx::PgPool, credential_id: Uuid) -> Result<(), sqlx::Error> {
    sqlx::query("UPDATE auth.service_account_credentials SET last_used_at = now() WHERE id = $1")
        .bind(credential_id)
        .execute(pool)
        .await?;
    Ok(())
}

/// Revokes a credential; returns whether it was active.
pub async fn revoke_credential(
    conn: &mut PgConnection,
    credential_id: Uuid,
) -> Result<bool, sqlx::Error> {
    let result = sqlx::query(
        "UPDATE auth.service_account_credentials SET revoked_at = now() WHERE id = $1 AND revoked_at IS NULL",
    )
    .bind(credential_id)
    .execute(conn)
    .await?;
    Ok(result.rows_affected() == 1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn record(app: &str) -> CredentialRecord {
        CredentialRecord {
            credential_id: Uuid::new_v4(),
            credential_kind: "api_token".into(),
            credential_revoked: false,
            scopes: vec!["identity:invoke".into()],
            service_account_id: Uuid::new_v4(),
            account_kind: "resource_bound".into(),
            account_status: "active".into(),
            delegated_user_id: None,
            app_id: Some(app.into()),
            resource_type: Some(APP_RESOURCE_TYPE.into()),
            resource_id: Some(app.into()),
        }
    }

    async fn authenticate(
        token: Option<&str>,
        app: &str,
        scope: &str,
        found: Option<CredentialRecord>,
    ) -> (Option<WorkloadIdentity>, usize) {
        let lookups = AtomicUsize::new(0);
        let result = authenticate_workload_credential(token, app, scope, |_| {
            lookups.fetch_add(1, Ordering::SeqCst);
            async move { found }
        })
        .await;
        (result, lookups.load(Ordering::SeqCst))
    }

    /// Scenario 34: which credentials are reserved.
    #[test]
    fn scenario_34_reserved_credentials() {
        let scopes = |s: &[&str]| s.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert!(is_reserved_workload_credential(
            ServiceAccountKind::ResourceBound,
            &scopes(&["identity:invoke"])
        ));
        assert!(is_reserved_workload_credential(
            ServiceAccountKind::ResourceBound,
            &scopes(&["identity:oauth-issue"])
        ));
        assert!(!is_reserved_workload_credential(
            ServiceAccountKind::ResourceBound,
            &scopes(&["read"])
        ));
        assert!(!is_reserved_workload_credential(
            ServiceAccountKind::UserDelegated,
            &scopes(&["identity:invoke"])
        ));
    }

    /// Scenario 35: a bound credential authenticates.
    #[tokio::test]
    async fn scenario_35_bound_credential() {
        let found = record("reports");
        let (identity, lookups) = authenticate(
            Some("cld_x"),
            "reports",
            "identity:invoke",
            Some(found.clone()),
        )
        .await;
        assert_eq!(lookups, 1);
        assert_eq!(
            identity,
            Some(WorkloadIdentity {
                app_id: "reports".into(),
                service_account_id: found.service_account_id,
                credential_id: found.credential_id,
                scope: "identity:invoke".into(),
            })
        );
    }

    /// Scenario 36: a non-`cld` or absent token never reaches the lookup.
    #[tokio::test]
    async fn scenario_36_non_cld_tokens_are_not_looked_up() {
        for token in [None, Some("sk_live"), Some("Bearer cld_x"), Some("")] {
            let (identity, lookups) =
                authenticate(token, "reports", "identity:invoke", Some(record("reports"))).await;
            assert_eq!((identity, lookups), (None, 0));
        }
    }

    /// Scenario 37: every way a credential can be unusable.
    #[tokio::test]
    async fn scenario_37_unusable_credentials() {
        let cases: [fn(&mut CredentialRecord); 7] = [
            |r| r.credential_revoked = true,
            |r| r.account_status = "disabled".into(),
            |r| r.account_kind = "user_delegated".into(),
            |r| r.delegated_user_id = Some(Uuid::new_v4()),
            |r| r.app_id = Some("mail".into()),
            |r| r.resource_type = Some("mailbox".into()),
            |r| r.resource_id = Some("mail".into()),
        ];
        for change in cases {
            let mut found = record("reports");
            change(&mut found);
            let (identity, _) =
                authenticate(Some("cld_x"), "reports", "identity:invoke", Some(found)).await;
            assert_eq!(identity, None);
        }
    }

    /// Scenarios 38 and 39: scopes, app ids and a failed lookup.
    #[tokio::test]
    async fn scenarios_38_39_scopes_app_ids_and_missing_records() {
        for scopes in [vec![], vec!["identity:invoke:extra".to_string()]] {
            let mut found = record("reports");
            found.scopes = scopes;
            assert_eq!(
                authenticate(Some("cld_x"), "reports", "identity:invoke", Some(found))
                    .await
                    .0,
                None
            );
        }
        for app in [" ", " reports ", ""] {
            let (identity, lookups) = authenticate(
                Some("cld_x"),
                app,
                "identity:invoke",
                Some(record("reports")),
            )
            .await;
            assert_eq!((identity, lookups), (None, 0));
        }
        let (identity, lookups) =
            authenticate(Some("cld_x"), "reports", "read", Some(record("reports"))).await;
        assert_eq!((identity, lookups), (None, 0), "unknown scope");
        assert_eq!(
            authenticate(Some("cld_x"), "reports", "identity:invoke", None)
                .await
                .0,
            None
        );
    }

    #[test]
    fn tokens_are_long_random_and_hashed() {
        let a = new_token();
        assert!(a.starts_with("cld_") && a.len() == 47);
        assert_ne!(a, new_token());
        assert_eq!(hash_token(&a).len(), 64);
    }
}
