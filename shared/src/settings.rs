//! Installation settings (`settings.entries`): encrypted values, typed getters with the reference
//! defaults, and a short in-process cache.

pub mod cipher;
pub mod definitions;

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::Value;
use sqlx::{PgConnection, PgPool};

pub use cipher::{DecryptError, SettingsCipher};
pub use definitions::{SETTINGS, SettingDef, SettingKind};

use crate::http::origin::canonical_origin;

/// The settings area's one error type.
#[derive(Debug, thiserror::Error)]
pub enum SettingsError {
    #[error("unknown setting `{0}`")]
    Unknown(String),
    #[error("setting `{key}` {reason}")]
    Invalid { key: String, reason: String },
    /// The stored value was changed outside the application or written under another secret.
    #[error(
        "stored value of setting `{0}` does not decrypt (tampered, or written with another APP_SECRET)"
    )]
    Tampered(String),
    /// A stored value, and this process holds no `APP_SECRET` (a function that reads no settings).
    #[error("setting `{0}` is stored encrypted and this process holds no APP_SECRET")]
    NoSecret(String),
    #[error("stored value of setting `{key}` is not valid: {reason}")]
    InvalidStored { key: String, reason: String },
    #[error("settings database error: {0}")]
    Database(#[from] sqlx::Error),
}

/// Account categories that can be switched off as a whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AccountCategory {
    /// FreeIPA accounts.
    FreeIpa,
    /// Local guest accounts.
    Guest,
    /// Local full accounts.
    Login,
}

impl AccountCategory {
    pub fn as_str(self) -> &'static str {
        match self {
            AccountCategory::FreeIpa => "freeipa",
            AccountCategory::Guest => "guest",
            AccountCategory::Login => "login",
        }
    }
    /// The setting that switches the category on or off.
    pub fn setting_key(self) -> &'static str {
        match self {
            AccountCategory::FreeIpa => "user.category.freeipa.enabled",
            AccountCategory::Guest => "user.category.guest.enabled",
            AccountCategory::Login => "user.category.login.enabled",
        }
    }
}

/// Reads and writes settings. One per process, shared through [`crate::Core`].
pub struct Settings {
    pool: PgPool,
    /// `None` in a function that holds no `APP_SECRET`: defaults still read, stored values do not.
    cipher: Option<SettingsCipher>,
    cache_ttl: Duration,
    cache: Mutex<HashMap<&'static str, (Instant, Value)>>,
    env_app_url: Option<String>,
}

impl Settings {
    /// `cache_ttl` zero disables the cache; `env_app_url` is `APP_URL`, the fallback for `app.url`;
    /// without `app_secret`, stored values cannot be read or written.
    pub fn new(
        pool: PgPool,
        app_secret: Option<&str>,
        cache_ttl: Duration,
        env_app_url: Option<String>,
    ) -> Settings {
        Settings {
            pool,
            cipher: app_secret.map(SettingsCipher::new),
            cache_ttl,
            cache: Mutex::new(HashMap::new()),
            env_app_url,
        }
    }

    /// The current value of a known setting: the stored one, else its fallback and default.
    /// Served from the in-process cache while fresh.
    pub async fn get(&self, key: &str) -> Result<Value, SettingsError> {
        let def = definitions::find(key).ok_or_else(|| SettingsError::Unknown(key.to_string()))?;
        if let Some(value) = self.cached(def.key) {
            return Ok(value);
        }
        let stored = self
            .read_with(&mut *self.pool.acquire().await?, def)
            .await?;
        if !self.cache_ttl.is_zero()
            && let Ok(mut cache) = self.cache.lock()
        {
            cache.insert(def.key, (Instant::now() + self.cache_ttl, stored.clone()));
        }
        Ok(stored)
    }

    /// Whether `key` has a stored value (rather than its fallback or default).
    pub async fn is_stored(&self, key: &str) -> Result<bool, SettingsError> {
        Ok(
            sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM settings.entries WHERE key = $1)")
                .bind(key)
                .fetch_one(&self.pool)
                .await?,
        )
    }

    /// Reads a setting on `conn` (inside the caller's transaction), bypassing the cache. For
    /// decisions that must see the committed value now, such as whether a category is enabled.
    pub async fn get_uncached(
        &self,
        conn: &mut PgConnection,
        key: &str,
    ) -> Result<Value, SettingsError> {
        let def = definitions::find(key).ok_or_else(|| SettingsError::Unknown(key.to_string()))?;
        self.read_with(conn, def).await
    }

    /// Reads several settings on `conn` in one round trip, bypassing the cache; the values come
    /// back in the order of `keys`.
    pub async fn get_many_uncached(
        &self,
        conn: &mut PgConnection,
        keys: &[&str],
    ) -> Result<Vec<Value>, SettingsError> {
        let defs = keys
            .iter()
            .map(|key| {
                definitions::find(key).ok_or_else(|| SettingsError::Unknown(key.to_string()))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let names: Vec<&str> = defs.iter().map(|def| def.key).collect();
        let rows: Vec<(String, String)> =
            sqlx::query_as("SELECT key, value FROM settings.entries WHERE key = ANY($1)")
                .bind(&names)
                .fetch_all(conn)
                .await?;
        defs.iter()
            .map(|def| match rows.iter().find(|(key, _)| key == def.key) {
                Some((_, stored)) => self.decode(def, stored),
                None => Ok(self.fallback(def)),
            })
            .collect()
    }

    async fn read_with(
        &self,
        conn: &mut PgConnection,
        def: &'static SettingDef,
    ) -> Result<Value, SettingsError> {
        let row: Option<String> =
            sqlx::query_scalar("SELECT value FROM settings.entries WHERE key = $1")
                .bind(def.key)
                .fetch_optional(conn)
                .await?;
        match row {
            Some(stored) => self.decode(def, &stored),
            None => Ok(self.fallback(def)),
        }
    }

    fn decode(&self, def: &SettingDef, stored: &str) -> Result<Value, SettingsError> {
        let plaintext = self
            .cipher(def)?
            .decrypt(def.key, stored)
            .map_err(|_| SettingsError::Tampered(def.key.to_string()))?;
        let value: Value =
            serde_json::from_slice(&plaintext).map_err(|_| SettingsError::InvalidStored {
                key: def.key.to_string(),
                reason: "not JSON".into(),
            })?;
        if !definitions::has_kind_type(def, &value) {
            return Err(SettingsError::InvalidStored {
                key: def.key.to_string(),
                reason: "has the wrong type".into(),
            });
        }
        Ok(value)
    }

    /// Encrypts a secret stored outside `settings.entries` (an SMTP password) with the same key
    /// as settings; `label` binds the ciphertext to its place, so it cannot be moved elsewhere.
    pub fn seal(&self, label: &str, plaintext: &str) -> Result<String, SettingsError> {
        let cipher = self
            .cipher
            .as_ref()
            .ok_or_else(|| SettingsError::NoSecret(label.to_string()))?;
        Ok(cipher.encrypt(label, plaintext.as_bytes()))
    }

    /// Decrypts what [`Settings::seal`] stored under `label`.
    pub fn unseal(&self, label: &str, stored: &str) -> Result<String, SettingsError> {
        let cipher = self
            .cipher
            .as_ref()
            .ok_or_else(|| SettingsError::NoSecret(label.to_string()))?;
        let plaintext = cipher
            .decrypt(label, stored)
            .map_err(|_| SettingsError::Tampered(label.to_string()))?;
        String::from_utf8(plaintext).map_err(|_| SettingsError::Tampered(label.to_string()))
    }

    fn cipher(&self, def: &SettingDef) -> Result<&SettingsCipher, SettingsError> {
        self.cipher
            .as_ref()
            .ok_or_else(|| SettingsError::NoSecret(def.key.to_string()))
    }

    fn fallback(&self, def: &SettingDef) -> Value {
        if def.key == "app.url"
            && let Some(url) = &self.env_app_url
        {
            return Value::String(url.clone());
        }
        def.default.to_value()
    }

    fn cached(&self, key: &str) -> Option<Value> {
        let cache = self.cache.lock().ok()?;
        let (fresh_until, value) = cache.get(key)?;
        (Instant::now() < *fresh_until).then(|| value.clone())
    }

    /// Validates, encrypts and stores a value, then drops this process's cached copy.
    pub async fn set(&self, key: &str, value: Value) -> Result<Value, SettingsError> {
        let mut conn = self.pool.acquire().await?;
        let stored = self.set_in(&mut conn, key, value).await?;
        self.invalidate(key);
        Ok(stored)
    }

    /// Stores a value on `conn`, typically inside the caller's transaction. The caller calls
    /// [`Settings::invalidate`] after commit: dropping the cache before would let a concurrent read
    /// cache the old row again.
    pub async fn set_in(
        &self,
        conn: &mut PgConnection,
        key: &str,
        value: Value,
    ) -> Result<Value, SettingsError> {
        let def = definitions::find(key).ok_or_else(|| SettingsError::Unknown(key.to_string()))?;
        let value = definitions::validate(def, value).map_err(|reason| SettingsError::Invalid {
            key: key.to_string(),
            reason,
        })?;
        let plaintext = serde_json::to_vec(&value).map_err(|_| SettingsError::Invalid {
            key: key.to_string(),
            reason: "cannot be serialised".into(),
        })?;
        let encrypted = self.cipher(def)?.encrypt(def.key, &plaintext);
        sqlx::query(
            "INSERT INTO settings.entries (key, value, updated_at) VALUES ($1, $2, now())
             ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value, updated_at = now()",
        )
        .bind(def.key)
        .bind(encrypted)
        .execute(conn)
        .await?;
        Ok(value)
    }

    /// Removes a stored value (the setting returns to its default).
    pub async fn delete(&self, key: &str) -> Result<(), SettingsError> {
        let def = definitions::find(key).ok_or_else(|| SettingsError::Unknown(key.to_string()))?;
        sqlx::query("DELETE FROM settings.entries WHERE key = $1")
            .bind(def.key)
            .execute(&self.pool)
            .await?;
        self.invalidate(key);
        Ok(())
    }

    /// Forgets this process's cached copy of `key`.
    pub fn invalidate(&self, key: &str) {
        if let Ok(mut cache) = self.cache.lock() {
            cache.retain(|cached, _| *cached != key);
        }
    }

    async fn get_string(&self, key: &str) -> Result<String, SettingsError> {
        Ok(self
            .get(key)
            .await?
            .as_str()
            .unwrap_or_default()
            .to_string())
    }

    /// `app.name` (default "My App").
    pub async fn app_name(&self) -> Result<String, SettingsError> {
        self.get_string("app.name").await
    }

    /// `app.url` as configured (default "localhost:3000", or `APP_URL`).
    pub async fn app_url(&self) -> Result<String, SettingsError> {
        self.get_string("app.url").await
    }

    /// The canonical origin of `app.url`: what `Origin` headers and token issuers are compared with.
    pub async fn public_origin(&self) -> Result<String, SettingsError> {
        let url = self.app_url().await?;
        canonical_origin(&url).ok_or_else(|| SettingsError::InvalidStored {
            key: "app.url".into(),
            reason: "not an http(s) URL".into(),
        })
    }

    /// `app.locale` (default "en").
    pub async fn app_locale(&self) -> Result<String, SettingsError> {
        self.get_string("app.locale").await
    }

    /// `app.logo` (default ""): a data URI, a link, or nothing.
    pub async fn app_logo(&self) -> Result<String, SettingsError> {
        self.get_string("app.logo").await
    }

    /// `freeipa.groups.admin`: trimmed, non-empty, de-duplicated; `["admins"]` when none remain.
    pub async fn admin_groups(&self) -> Result<Vec<String>, SettingsError> {
        Ok(normalise_groups(&self.get("freeipa.groups.admin").await?))
    }

    /// Whether accounts of `category` may be used, read on `conn` and never from the cache. A
    /// stored value of the wrong type is an error, not "enabled".
    pub async fn category_enabled(
        &self,
        conn: &mut PgConnection,
        category: AccountCategory,
    ) -> Result<bool, SettingsError> {
        let key = category.setting_key();
        let stored: Option<String> =
            sqlx::query_scalar("SELECT value FROM settings.entries WHERE key = $1")
                .bind(key)
                .fetch_optional(conn)
                .await?;
        self.category_enabled_in(category, stored.as_deref())
    }

    /// [`Settings::category_enabled`] from the category setting's stored value (`None`: not
    /// stored), read by the caller in a statement of its own.
    pub fn category_enabled_in(
        &self,
        category: AccountCategory,
        stored: Option<&str>,
    ) -> Result<bool, SettingsError> {
        let key = category.setting_key();
        let def = definitions::find(key).ok_or_else(|| SettingsError::Unknown(key.to_string()))?;
        let value = match stored {
            Some(stored) => self.decode(def, stored)?,
            None => self.fallback(def),
        };
        value.as_bool().ok_or_else(|| SettingsError::InvalidStored {
            key: key.to_string(),
            reason: "not a boolean".into(),
        })
    }
}

/// Admin group names from a setting value: strings trimmed, blanks dropped, duplicates removed;
/// anything else (or nothing left) means the default `admins` group.
pub fn normalise_groups(value: &Value) -> Vec<String> {
    let mut groups: Vec<String> = Vec::new();
    if let Value::Array(items) = value {
        for item in items.iter().filter_map(Value::as_str) {
            let name = item.trim();
            if !name.is_empty() && !groups.iter().any(|g| g == name) {
                groups.push(name.to_string());
            }
        }
    }
    if groups.is_empty() {
        groups.push("admins".to_string());
    }
    groups
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::testing::{TEST_APP_SECRET, TestDb};
    use serde_json::json;

    fn settings(db: &TestDb, ttl: Duration) -> Settings {
        Settings::new(db.pool.clone(), Some(TEST_APP_SECRET), ttl, None)
    }

    async fn stored_value(db: &TestDb, key: &str) -> String {
        sqlx::query_scalar("SELECT value FROM settings.entries WHERE key = $1")
            .bind(key)
            .fetch_one(&db.pool)
            .await
            .expect("row")
    }

    #[tokio::test]
    async fn round_trip_stores_ciphertext_only() {
        let db = TestDb::new().await;
        let settings = settings(&db, Duration::ZERO);
        assert_eq!(settings.app_name().await.expect("default"), "My App");
        settings
            .set("app.name", json!("Example Cloud"))
            .await
            .expect("set");
        assert_eq!(settings.app_name().await.expect("get"), "Example Cloud");
        let raw = stored_value(&db, "app.name").await;
        assert!(raw.starts_with("v1."), "{raw}");
        assert!(!raw.contains("Example"));
        // Another process with the same secret reads it.
        let other = Settings::new(db.pool.clone(), Some(TEST_APP_SECRET), Duration::ZERO, None);
        assert_eq!(other.app_name().await.expect("get"), "Example Cloud");
    }

    #[tokio::test]
    async fn tampered_or_foreign_values_read_as_errors() {
        let db = TestDb::new().await;
        let settings = settings(&db, Duration::ZERO);
        settings
            .set("app.name", json!("Example Cloud"))
            .await
            .expect("set");
        let raw = stored_value(&db, "app.name").await;
        let mut chars: Vec<char> = raw.chars().collect();
        let i = chars.len() - 2;
        chars[i] = if chars[i] == 'A' { 'B' } else { 'A' };
        let tampered: String = chars.into_iter().collect();
        sqlx::query("UPDATE settings.entries SET value = $1 WHERE key = 'app.name'")
            .bind(&tampered)
            .execute(&db.pool)
            .await
            .expect("update");
        assert!(
            matches!(settings.app_name().await, Err(SettingsError::Tampered(k)) if k == "app.name")
        );
        // A value moved from another key is detected the same way.
        settings.set("app.locale", json!("de")).await.expect("set");
        let locale = stored_value(&db, "app.locale").await;
        sqlx::query("UPDATE settings.entries SET value = $1 WHERE key = 'app.name'")
            .bind(&locale)
            .execute(&db.pool)
            .await
            .expect("update");
        assert!(matches!(
            settings.app_name().await,
            Err(SettingsError::Tampered(_))
        ));
        // And so is a value written under another APP_SECRET.
        let foreign = Settings::new(
            db.pool.clone(),
            Some("a different secret, at least 32 characters long"),
            Duration::ZERO,
            None,
        );
        assert!(matches!(
            foreign.app_locale().await,
            Err(SettingsError::Tampered(_))
        ));
    }

    #[tokio::test]
    async fn without_app_secret_defaults_read_and_stored_values_do_not() {
        let db = TestDb::new().await;
        settings(&db, Duration::ZERO)
            .set("app.name", json!("Stored"))
            .await
            .expect("set");
        let keyless = Settings::new(db.pool.clone(), None, Duration::ZERO, None);
        assert_eq!(
            keyless.get("app.locale").await.expect("a default"),
            json!("en")
        );
        assert!(matches!(
            keyless.get("app.name").await,
            Err(SettingsError::NoSecret(key)) if key == "app.name"
        ));
        assert!(matches!(
            keyless.set("app.name", json!("Other")).await,
            Err(SettingsError::NoSecret(_))
        ));
    }

    #[tokio::test]
    async fn cache_serves_until_invalidated_and_set_invalidates() {
        let db = TestDb::new().await;
        let settings = settings(&db, Duration::from_secs(60));
        assert_eq!(settings.app_name().await.expect("default"), "My App");
        // A write by another process is not seen while the cached copy is fresh...
        let other = Settings::new(db.pool.clone(), Some(TEST_APP_SECRET), Duration::ZERO, None);
        other
            .set("app.name", json!("Elsewhere"))
            .await
            .expect("set");
        assert_eq!(settings.app_name().await.expect("cached"), "My App");
        settings.invalidate("app.name");
        assert_eq!(settings.app_name().await.expect("fresh"), "Elsewhere");
        // ...while this process's own write is visible at once.
        settings.set("app.name", json!("Here")).await.expect("set");
        assert_eq!(settings.app_name().await.expect("fresh"), "Here");
    }

    #[tokio::test]
    async fn unknown_and_invalid_values_are_refused() {
        let db = TestDb::new().await;
        let settings = settings(&db, Duration::ZERO);
        assert!(matches!(
            settings.set("app.nope", json!(1)).await,
            Err(SettingsError::Unknown(_))
        ));
        assert!(matches!(
            settings
                .set("user.category.guest.enabled", json!("yes"))
                .await,
            Err(SettingsError::Invalid { .. })
        ));
        assert!(matches!(
            settings.get("nope").await,
            Err(SettingsError::Unknown(_))
        ));
    }

    #[tokio::test]
    async fn app_url_falls_back_to_env_then_default_and_yields_an_origin() {
        let db = TestDb::new().await;
        let plain = settings(&db, Duration::ZERO);
        assert_eq!(
            plain.public_origin().await.expect("origin"),
            "http://localhost:3000"
        );
        let with_env = Settings::new(
            db.pool.clone(),
            Some(TEST_APP_SECRET),
            Duration::ZERO,
            Some("https://cloud.example.test/".into()),
        );
        assert_eq!(
            with_env.public_origin().await.expect("origin"),
            "https://cloud.example.test"
        );
        with_env
            .set("app.url", json!("cloud.example.org"))
            .await
            .expect("set");
        assert_eq!(
            with_env.public_origin().await.expect("origin"),
            "https://cloud.example.org"
        );
    }

    #[tokio::test]
    async fn category_switch_is_read_uncached_inside_the_transaction() {
        let db = TestDb::new().await;
        let settings = settings(&db, Duration::from_secs(60));
        let mut tx = db.pool.begin().await.expect("begin");
        assert!(
            settings
                .category_enabled(&mut tx, AccountCategory::Guest)
                .await
                .expect("read")
        );
        settings
            .set_in(&mut tx, "user.category.guest.enabled", json!(false))
            .await
            .expect("set");
        assert!(
            !settings
                .category_enabled(&mut tx, AccountCategory::Guest)
                .await
                .expect("read")
        );
        tx.rollback().await.expect("rollback");
        let mut conn = db.pool.acquire().await.expect("conn");
        assert!(
            settings
                .category_enabled(&mut conn, AccountCategory::Guest)
                .await
                .expect("read")
        );
    }

    #[test]
    fn admin_groups_are_normalised() {
        assert_eq!(
            normalise_groups(&json!([" admins ", "ops", "ops", ""])),
            vec!["admins", "ops"]
        );
        assert_eq!(normalise_groups(&json!("admins")), vec!["admins"]);
        assert_eq!(normalise_groups(&json!(["  "])), vec!["admins"]);
    }
}
