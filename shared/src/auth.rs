//! Accounts (`auth.users`) and the actor a request acts as.

pub mod roles;

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::{FromRow, PgConnection};
use uuid::Uuid;

pub use roles::{Profile, Provider, Role, build_roles, without_admin_role};

use crate::settings::{AccountCategory, Settings, SettingsError};

/// Whether a service account acts for a person or for a resource (an app, a mailbox).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ServiceAccountKind {
    UserDelegated,
    ResourceBound,
}

/// Scopes that make a resource-bound credential an app's workload credential rather than an
/// ordinary API key (including the retired `identity:oauth-issue`).
pub const RESERVED_SCOPES: &[&str] = &[
    "identity:invoke",
    "registry:publish",
    "mail",
    "identity:oauth-issue",
];

/// The registered app a service account belongs to: its `app_id`, or the resource id of a
/// `cloud.app` resource.
pub fn app_of_account(
    app_id: Option<&str>,
    resource_type: Option<&str>,
    resource_id: Option<&str>,
) -> Option<String> {
    app_id.map(str::to_string).or_else(|| {
        (resource_type == Some("cloud.app")).then(|| resource_id.unwrap_or_default().to_string())
    })
}

/// An active service account as a credential sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActiveServiceAccount {
    pub kind: ServiceAccountKind,
    pub delegated_user_id: Option<Uuid>,
    /// The registered app it belongs to ([`app_of_account`]).
    pub app_id: Option<String>,
}

/// The service account `id` if it exists and is active.
pub async fn active_service_account(
    conn: &mut PgConnection,
    id: Uuid,
) -> Result<Option<ActiveServiceAccount>, sqlx::Error> {
    #[derive(FromRow)]
    struct Row {
        kind: String,
        delegated_user_id: Option<Uuid>,
        app_id: Option<String>,
        resource_type: Option<String>,
        resource_id: Option<String>,
    }
    let row: Option<Row> = sqlx::query_as(
        "SELECT kind, delegated_user_id, app_id, resource_type, resource_id
         FROM auth.service_accounts WHERE id = $1 AND status = 'active'",
    )
    .bind(id)
    .fetch_optional(conn)
    .await?;
    Ok(row.map(|row| ActiveServiceAccount {
        kind: if row.kind == "user_delegated" {
            ServiceAccountKind::UserDelegated
        } else {
            ServiceAccountKind::ResourceBound
        },
        delegated_user_id: row.delegated_user_id,
        app_id: app_of_account(
            row.app_id.as_deref(),
            row.resource_type.as_deref(),
            row.resource_id.as_deref(),
        ),
    }))
}

/// Whether a credential is a reserved workload credential: resource-bound with a reserved scope.
pub fn is_reserved_workload_credential(kind: ServiceAccountKind, scopes: &[String]) -> bool {
    kind == ServiceAccountKind::ResourceBound
        && scopes.iter().any(|s| RESERVED_SCOPES.contains(&s.as_str()))
}

/// The auth area's one error type.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    #[error("invalid account: {0}")]
    Invalid(String),
    #[error("an account with uid `{0}` already exists")]
    Exists(String),
    #[error("settings: {0}")]
    Settings(#[from] SettingsError),
    #[error("auth database error: {0}")]
    Database(#[from] sqlx::Error),
    #[error("credentials cannot be checked: {0}")]
    Unavailable(String),
}

/// A row of `auth.users`.
#[derive(Debug, Clone, PartialEq, Eq, FromRow)]
pub struct UserRecord {
    pub id: Uuid,
    pub uid: String,
    pub provider: String,
    pub profile: String,
    pub display_name: Option<String>,
    pub mail: Option<String>,
    pub account_expires: Option<DateTime<Utc>>,
    pub admin: bool,
    pub auth_epoch: i64,
}

impl UserRecord {
    pub fn provider(&self) -> Provider {
        Provider::parse(&self.provider).unwrap_or(Provider::Local)
    }
    pub fn profile(&self) -> Profile {
        Profile::parse(&self.profile).unwrap_or(Profile::Guest)
    }
    /// The category that can switch this account off.
    pub fn category(&self) -> AccountCategory {
        match (self.provider(), self.profile()) {
            (Provider::Ipa, _) => AccountCategory::FreeIpa,
            (Provider::Local, Profile::Guest) => AccountCategory::Guest,
            (Provider::Local, Profile::User) => AccountCategory::Login,
        }
    }
    /// The name shown to people: the trimmed display name, else the uid.
    pub fn shown_name(&self) -> &str {
        self.display_name
            .as_deref()
            .map(str::trim)
            .filter(|n| !n.is_empty())
            .unwrap_or(&self.uid)
    }
}

const USER_COLUMNS: &str =
    "id, uid, provider, profile, display_name, mail, account_expires, admin, auth_epoch";

/// A new account.
#[derive(Debug, Clone)]
pub struct NewUser {
    pub uid: String,
    pub provider: Provider,
    pub profile: Profile,
    pub display_name: Option<String>,
    pub mail: Option<String>,
    pub admin: bool,
}

/// Creates an account. The uid is trimmed; duplicates are refused.
pub async fn create_user(conn: &mut PgConnection, user: &NewUser) -> Result<UserRecord, AuthError> {
    let uid = user.uid.trim();
    if uid.is_empty() || uid.chars().count() > 64 || uid.chars().any(char::is_whitespace) {
        return Err(AuthError::Invalid(
            "uid must be 1 to 64 characters without spaces".into(),
        ));
    }
    if user.admin && user.provider != Provider::Local {
        return Err(AuthError::Invalid(
            "only local accounts carry an admin flag; FreeIPA admins come from groups".into(),
        ));
    }
    let statement = format!(
        "INSERT INTO auth.users (uid, provider, profile, display_name, mail, admin)
         VALUES ($1, $2, $3, $4, $5, $6) RETURNING {USER_COLUMNS}"
    );
    sqlx::query_as(sqlx::AssertSqlSafe(statement))
        .bind(uid)
        .bind(user.provider.as_str())
        .bind(user.profile.as_str())
        .bind(user.display_name.as_deref().map(str::trim))
        .bind(user.mail.as_deref().map(str::trim))
        .bind(user.admin)
        .fetch_one(conn)
        .await
        .map_err(|e| {
            if crate::db::is_unique_violation(&e) {
                AuthError::Exists(uid.to_string())
            } else {
                AuthError::Database(e)
            }
        })
}

/// The account with id `id`.
pub async fn find_user(conn: &mut PgConnection, id: Uuid) -> Result<Option<UserRecord>, AuthError> {
    let statement = format!("SELECT {USER_COLUMNS} FROM auth.users WHERE id = $1");
    Ok(sqlx::query_as(sqlx::AssertSqlSafe(statement))
        .bind(id)
        .fetch_optional(conn)
        .await?)
}

/// The account with uid `uid`.
pub async fn find_user_by_uid(
    conn: &mut PgConnection,
    uid: &str,
) -> Result<Option<UserRecord>, AuthError> {
    let statement = format!("SELECT {USER_COLUMNS} FROM auth.users WHERE uid = $1");
    Ok(sqlx::query_as(sqlx::AssertSqlSafe(statement))
        .bind(uid.trim())
        .fetch_optional(conn)
        .await?)
}

/// The account with id `id`, locked `FOR UPDATE` for the rest of the transaction.
pub async fn lock_user(conn: &mut PgConnection, id: Uuid) -> Result<Option<UserRecord>, AuthError> {
    let statement = format!("SELECT {USER_COLUMNS} FROM auth.users WHERE id = $1 FOR UPDATE");
    Ok(sqlx::query_as(sqlx::AssertSqlSafe(statement))
        .bind(id)
        .fetch_optional(conn)
        .await?)
}

/// The current roles of an account: a local account's stored admin flag or an IPA account's
/// membership of an admin group (`freeipa.groups.admin`), and whether it manages a group.
pub async fn roles_of(
    conn: &mut PgConnection,
    settings: &Settings,
    user: &UserRecord,
) -> Result<Vec<Role>, AuthError> {
    let manages: bool =
        sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM auth.group_managers WHERE user_id = $1)")
            .bind(user.id)
            .fetch_one(&mut *conn)
            .await?;
    roles_given(conn, settings, user, manages).await
}

/// [`roles_of`] when whether the account manages a group is known already (a session's
/// validation reads it with the session).
pub async fn roles_given(
    conn: &mut PgConnection,
    settings: &Settings,
    user: &UserRecord,
    manages: bool,
) -> Result<Vec<Role>, AuthError> {
    let admin = match user.provider() {
        Provider::Local => user.admin,
        Provider::Ipa => {
            let groups = settings.admin_groups().await?;
            sqlx::query_scalar(
                "SELECT EXISTS (SELECT 1 FROM auth.ipa_user_effective_groups
                 WHERE user_id = $1 AND group_name = ANY($2))",
            )
            .bind(user.id)
            .bind(&groups)
            .fetch_one(&mut *conn)
            .await?
        }
    };
    Ok(build_roles(user.provider(), user.profile(), admin, manages))
}

/// A person as a request sees them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AuthUser {
    pub id: Uuid,
    pub uid: String,
    pub provider: Provider,
    pub profile: Profile,
    pub display_name: Option<String>,
    pub roles: Vec<Role>,
}

impl AuthUser {
    pub fn from_record(record: &UserRecord, roles: Vec<Role>) -> AuthUser {
        AuthUser {
            id: record.id,
            uid: record.uid.clone(),
            provider: record.provider(),
            profile: record.profile(),
            display_name: record.display_name.clone(),
            roles,
        }
    }
    pub fn has_role(&self, role: Role) -> bool {
        self.roles.contains(&role)
    }
    /// The same person without the `admin` role (a mobile-app session's view).
    pub fn without_admin_role(&self) -> AuthUser {
        AuthUser {
            roles: without_admin_role(&self.roles),
            ..self.clone()
        }
    }
}

/// The kind of a session: a browser sign-in, or the installed mobile app bound to a device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase", tag = "kind")]
pub enum SessionKind {
    Web,
    App { device_id: Uuid },
}

/// How a person's request was authenticated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CredentialKind {
    Session,
    Oauth,
    ApiKey,
    Mandate,
}

impl CredentialKind {
    pub fn as_str(self) -> &'static str {
        match self {
            CredentialKind::Session => "session",
            CredentialKind::Oauth => "oauth",
            CredentialKind::ApiKey => "api_key",
            CredentialKind::Mandate => "mandate",
        }
    }
}

/// A signed-in person.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserActor {
    pub user: AuthUser,
    /// The session family (`sid`) and its kind.
    pub sid: Uuid,
    pub session: SessionKind,
}

/// A service account acting with an API key or an OAuth token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceAccountActor {
    pub id: Uuid,
    pub kind: ServiceAccountKind,
    pub delegated_user: Option<AuthUser>,
    pub credential_kind: CredentialKind,
    pub credential_id: String,
    pub scopes: Vec<String>,
    /// The registered app whose workload account this is (`None` for ordinary service
    /// accounts). An app's credential acts only as the app, on the routes made for apps.
    pub app_id: Option<String>,
}

/// A person acting through an OAuth client with the scopes the client was granted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OAuthUserActor {
    pub user: AuthUser,
    pub client_id: String,
    pub scopes: Vec<String>,
}

/// A registered app calling with its own workload credential.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppActor {
    pub app_id: String,
    pub service_account_id: Uuid,
    pub credential_id: String,
}

/// Who a request acts as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Actor {
    Anonymous,
    User(UserActor),
    OAuthUser(OAuthUserActor),
    ServiceAccount(ServiceAccountActor),
    App(AppActor),
}

impl Actor {
    pub fn is_authenticated(&self) -> bool {
        !matches!(self, Actor::Anonymous)
    }

    /// The person behind the request: the signed-in user, or the user a service account acts
    /// for. Resource-bound accounts, apps and anonymous requests have none.
    pub fn person(&self) -> Option<&AuthUser> {
        match self {
            Actor::User(actor) => Some(&actor.user),
            Actor::OAuthUser(actor) => Some(&actor.user),
            Actor::ServiceAccount(actor) => actor.delegated_user.as_ref(),
            Actor::App(_) | Actor::Anonymous => None,
        }
    }

    /// The scopes of an OAuth credential; `None` for every other credential (sessions and API
    /// keys are not scope-checked by OAuth rules).
    pub fn oauth_scopes(&self) -> Option<&[String]> {
        match self {
            Actor::OAuthUser(actor) => Some(&actor.scopes),
            Actor::ServiceAccount(actor) if actor.credential_kind == CredentialKind::Oauth => {
                Some(&actor.scopes)
            }
            _ => None,
        }
    }

    /// Whether this is an app's workload credential used as an API key: a key of a registered
    /// app's own account (whatever its scopes), or a resource-bound account's key with a reserved
    /// scope. Such keys only work on the routes where an app acts as itself.
    pub fn is_reserved_workload_credential(&self) -> bool {
        match self {
            Actor::ServiceAccount(actor) => match actor.credential_kind {
                CredentialKind::ApiKey => {
                    actor.app_id.is_some()
                        || is_reserved_workload_credential(actor.kind, &actor.scopes)
                }
                CredentialKind::Oauth => actor.app_id.is_some(),
                CredentialKind::Session | CredentialKind::Mandate => false,
            },
            Actor::App(_) => true,
            _ => false,
        }
    }

    /// Whether the person behind the request may use their administrator role here: they hold
    /// it, this is not a mobile-app session, and an OAuth credential carries the `admin` scope.
    pub fn may_act_as_admin(&self) -> bool {
        self.person()
            .is_some_and(|person| person.has_role(Role::Admin))
            && !self.is_app_session()
            && self
                .oauth_scopes()
                .is_none_or(|scopes| scopes.iter().any(|s| s == "admin"))
    }

    /// Whether this is a mobile-app session (which never acts as an administrator).
    pub fn is_app_session(&self) -> bool {
        matches!(
            self,
            Actor::User(UserActor {
                session: SessionKind::App { .. },
                ..
            })
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::testing::{TEST_APP_SECRET, TestDb};
    use std::time::Duration;

    fn new_user(uid: &str, provider: Provider, profile: Profile, admin: bool) -> NewUser {
        NewUser {
            uid: uid.into(),
            provider,
            profile,
            display_name: Some(format!("  {uid} Example ")),
            mail: None,
            admin,
        }
    }

    #[tokio::test]
    async fn users_are_created_once_and_their_roles_derived() {
        let db = TestDb::new().await;
        let settings = Settings::new(db.pool.clone(), Some(TEST_APP_SECRET), Duration::ZERO, None);
        let mut conn = db.pool.acquire().await.expect("conn");

        let ada = create_user(
            &mut conn,
            &new_user("ada", Provider::Local, Profile::User, true),
        )
        .await
        .expect("create");
        assert_eq!(ada.shown_name(), "ada Example");
        assert_eq!(ada.category(), AccountCategory::Login);
        assert!(matches!(
            create_user(
                &mut conn,
                &new_user("ada", Provider::Local, Profile::User, false)
            )
            .await,
            Err(AuthError::Exists(_))
        ));
        let roles = roles_of(&mut conn, &settings, &ada).await.expect("roles");
        assert!(roles.contains(&Role::Admin));

        let grace = create_user(
            &mut conn,
            &new_user("grace", Provider::Ipa, Profile::User, false),
        )
        .await
        .expect("create");
        assert!(
            !roles_of(&mut conn, &settings, &grace)
                .await
                .expect("roles")
                .contains(&Role::Admin)
        );
        sqlx::query(
            "INSERT INTO auth.ipa_user_effective_groups VALUES ($1, 'admins'), ($1, 'staff')",
        )
        .bind(grace.id)
        .execute(&mut *conn)
        .await
        .expect("groups");
        sqlx::query("INSERT INTO auth.group_managers VALUES ($1, 'staff')")
            .bind(grace.id)
            .execute(&mut *conn)
            .await
            .expect("manager");
        let roles = roles_of(&mut conn, &settings, &grace).await.expect("roles");
        assert_eq!(
            roles,
            vec![
                Role::User,
                Role::Ipa,
                Role::IpaUser,
                Role::Admin,
                Role::GroupManager
            ]
        );

        assert!(matches!(
            create_user(
                &mut conn,
                &new_user("x", Provider::Ipa, Profile::User, true)
            )
            .await,
            Err(AuthError::Invalid(_))
        ));
        assert!(matches!(
            create_user(
                &mut conn,
                &new_user("two words", Provider::Local, Profile::User, false)
            )
            .await,
            Err(AuthError::Invalid(_))
        ));
        assert_eq!(
            find_user_by_uid(&mut conn, "grace")
                .await
                .expect("find")
                .map(|u| u.id),
            Some(grace.id)
        );
    }

    #[tokio::test]
    async fn the_database_refuses_what_the_specs_forbid() {
        let db = TestDb::new().await;
        for statement in [
            "INSERT INTO auth.users (uid, provider) VALUES ('x', 'ldap')",
            "INSERT INTO auth.users (uid, provider, profile) VALUES ('x', 'local', 'robot')",
            "INSERT INTO auth.users (uid, provider, admin) VALUES ('x', 'ipa', true)",
            "INSERT INTO auth.users (uid, provider, auth_epoch) VALUES ('x', 'local', -1)",
            "INSERT INTO auth.users (uid, provider) VALUES ('', 'local')",
        ] {
            assert!(
                sqlx::query(statement).execute(&db.pool).await.is_err(),
                "{statement}"
            );
        }
    }

    #[test]
    fn app_sessions_are_recognised_and_persons_resolved() {
        let user = AuthUser {
            id: Uuid::new_v4(),
            uid: "ada".into(),
            provider: Provider::Local,
            profile: Profile::User,
            display_name: None,
            roles: vec![Role::User, Role::Admin],
        };
        let app = Actor::User(UserActor {
            user: user.without_admin_role(),
            sid: Uuid::new_v4(),
            session: SessionKind::App {
                device_id: Uuid::new_v4(),
            },
        });
        assert!(app.is_app_session());
        assert!(!app.person().is_some_and(|u| u.has_role(Role::Admin)));
        let bound = Actor::ServiceAccount(ServiceAccountActor {
            id: Uuid::new_v4(),
            kind: ServiceAccountKind::ResourceBound,
            delegated_user: None,
            credential_kind: CredentialKind::ApiKey,
            credential_id: "c".into(),
            scopes: vec!["read".into()],
            app_id: None,
        });
        assert!(bound.is_authenticated());
        assert!(bound.person().is_none());
        assert!(!Actor::Anonymous.is_authenticated());
    }
}
