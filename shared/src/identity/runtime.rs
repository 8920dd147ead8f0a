//! The identity runtime configuration: the token issuer (the installation's origin), the admin
//! groups, and where the JWKS documents are fetched from. Loaded from settings, shared by
//! concurrent callers, bounded at 30 s and cached for 60 s.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::FutureExt;
use futures::future::{BoxFuture, Shared};
use serde_json::Value;
use tokio::time::Instant;

use super::IdentityError;
use super::constants::{
    INVOCATION_JWKS_PATH, OAUTH_JWKS_PATH, REFRESH_TIMEOUT, RUNTIME_CONFIG_CACHE, SESSION_JWKS_PATH,
};
pub use crate::config::{JWKS_ORIGIN_VARIABLE, OAUTH_JWKS_ORIGIN_VARIABLE};
use crate::http::origin::{canonical_origin, transport_origin};
use crate::settings::normalise_groups;

/// What identity needs from settings, read together.
#[derive(Debug, Clone, PartialEq)]
pub struct IdentitySettings {
    pub app_url: String,
    pub admin_groups: Value,
}

/// Where the settings come from (the database in production; anything in tests).
pub trait IdentitySettingsSource: Send + Sync {
    fn load(&self) -> BoxFuture<'static, Result<IdentitySettings, IdentityError>>;
}

/// The resolved runtime configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuntimeConfig {
    pub issuer: String,
    pub admin_groups: Vec<String>,
    pub session_jwks_url: String,
    pub invocation_jwks_url: String,
    pub oauth_jwks_url: String,
}

/// The issuer of an `app.url`: its canonical origin (`https` assumed without a scheme, `http`
/// for loopback hosts). Production requires https.
pub fn issuer_of(app_url: &str, production: bool) -> Result<String, IdentityError> {
    let issuer = canonical_origin(app_url).ok_or(IdentityError::InvalidIssuer)?;
    if production && !issuer.starts_with("https://") {
        return Err(IdentityError::IssuerNotHttps);
    }
    Ok(issuer)
}

/// A JWKS URL: `path` on the transport `origin` when set (a private address such as
/// `http://app-core:3000`), else on the issuer.
pub fn jwks_url(
    issuer: &str,
    origin: Option<&str>,
    variable: &'static str,
    path: &str,
) -> Result<String, IdentityError> {
    let base = match origin.map(str::trim).filter(|o| !o.is_empty()) {
        Some(origin) => transport_origin(origin).ok_or(IdentityError::BadJwksOrigin(variable))?,
        None => issuer.to_string(),
    };
    Ok(format!("{base}{path}"))
}

/// Builds the configuration from loaded settings.
pub fn resolve(
    settings: &IdentitySettings,
    production: bool,
    jwks_origin: Option<&str>,
    oauth_jwks_origin: Option<&str>,
) -> Result<RuntimeConfig, IdentityError> {
    let issuer = issuer_of(&settings.app_url, production)?;
    Ok(RuntimeConfig {
        admin_groups: normalise_groups(&settings.admin_groups),
        session_jwks_url: jwks_url(
            &issuer,
            jwks_origin,
            JWKS_ORIGIN_VARIABLE,
            SESSION_JWKS_PATH,
        )?,
        invocation_jwks_url: jwks_url(
            &issuer,
            jwks_origin,
            JWKS_ORIGIN_VARIABLE,
            INVOCATION_JWKS_PATH,
        )?,
        oauth_jwks_url: jwks_url(
            &issuer,
            oauth_jwks_origin,
            OAUTH_JWKS_ORIGIN_VARIABLE,
            OAUTH_JWKS_PATH,
        )?,
        issuer,
    })
}

type SharedLoad = Shared<BoxFuture<'static, Result<Arc<RuntimeConfig>, Arc<IdentityError>>>>;

/// The cached, shared, bounded loader.
pub struct RuntimeConfigCache {
    source: Arc<dyn IdentitySettingsSource>,
    production: bool,
    jwks_origin: Option<String>,
    oauth_jwks_origin: Option<String>,
    cached: Mutex<Option<(Instant, Arc<RuntimeConfig>)>>,
    loading: Arc<Mutex<Option<SharedLoad>>>,
    timeout: Duration,
}

impl RuntimeConfigCache {
    pub fn new(
        source: Arc<dyn IdentitySettingsSource>,
        production: bool,
        jwks_origin: Option<String>,
        oauth_jwks_origin: Option<String>,
    ) -> RuntimeConfigCache {
        RuntimeConfigCache {
            source,
            production,
            jwks_origin,
            oauth_jwks_origin,
            cached: Mutex::new(None),
            loading: Arc::new(Mutex::new(None)),
            timeout: REFRESH_TIMEOUT,
        }
    }

    /// The configuration: cached for 60 s; concurrent callers share one load, which gives up
    /// after 30 s ("Cloud identity settings did not load within 30 s"). Failures are not cached.
    pub async fn get(&self) -> Result<Arc<RuntimeConfig>, IdentityError> {
        if let Ok(cached) = self.cached.lock()
            && let Some((fresh_until, config)) = cached.as_ref()
            && Instant::now() < *fresh_until
        {
            return Ok(config.clone());
        }
        let load = {
            let mut loading = match self.loading.lock() {
                Ok(loading) => loading,
                Err(poisoned) => poisoned.into_inner(),
            };
            match loading.as_ref() {
                Some(load) => load.clone(),
                None => {
                    let source = self.source.load();
                    let production = self.production;
                    let jwks_origin = self.jwks_origin.clone();
                    let oauth_origin = self.oauth_jwks_origin.clone();
                    let timeout = self.timeout;
                    let slot = self.loading.clone();
                    let load: SharedLoad = async move {
                        let result = match tokio::time::timeout(timeout, source).await {
                            Ok(Ok(settings)) => resolve(
                                &settings,
                                production,
                                jwks_origin.as_deref(),
                                oauth_origin.as_deref(),
                            )
                            .map(Arc::new)
                            .map_err(Arc::new),
                            Ok(Err(error)) => Err(Arc::new(error)),
                            Err(_) => Err(Arc::new(IdentityError::SettingsTimeout)),
                        };
                        // The shared slot is cleared once the load settles.
                        if let Ok(mut loading) = slot.lock() {
                            *loading = None;
                        }
                        result
                    }
                    .boxed()
                    .shared();
                    *loading = Some(load.clone());
                    load
                }
            }
        };
        match load.await {
            Ok(config) => {
                if let Ok(mut cached) = self.cached.lock() {
                    *cached = Some((Instant::now() + RUNTIME_CONFIG_CACHE, config.clone()));
                }
                Ok(config)
            }
            Err(error) => Err(IdentityError::Shared(error)),
        }
    }

    /// Forgets the cached configuration (after `app.url` changes).
    pub fn invalidate(&self) {
        if let Ok(mut cached) = self.cached.lock() {
            *cached = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::sync::atomic::{AtomicUsize, Ordering};

    struct Scripted {
        calls: AtomicUsize,
        hang_first: bool,
        app_url: String,
    }

    impl IdentitySettingsSource for Scripted {
        fn load(&self) -> BoxFuture<'static, Result<IdentitySettings, IdentityError>> {
            let call = self.calls.fetch_add(1, Ordering::SeqCst);
            let hang = self.hang_first && call == 0;
            let app_url = self.app_url.clone();
            async move {
                if hang {
                    futures::future::pending::<()>().await;
                }
                Ok(IdentitySettings {
                    app_url,
                    admin_groups: json!(["admins"]),
                })
            }
            .boxed()
        }
    }

    fn settings(url: &str) -> IdentitySettings {
        IdentitySettings {
            app_url: url.into(),
            admin_groups: json!(null),
        }
    }

    /// Scenario 1: a hung settings read fails after 30 s; the next call loads afresh.
    #[tokio::test(start_paused = true)]
    async fn scenario_1_hung_settings_time_out_and_are_not_cached() {
        let source = Arc::new(Scripted {
            calls: AtomicUsize::new(0),
            hang_first: true,
            app_url: "https://cloud.example".into(),
        });
        let cache = RuntimeConfigCache::new(source.clone(), true, None, None);
        let error = cache.get().await.expect_err("times out");
        assert_eq!(
            error.to_string(),
            "Cloud identity settings did not load within 30 s"
        );
        let config = cache.get().await.expect("second load");
        assert_eq!(config.issuer, "https://cloud.example");
        assert_eq!(source.calls.load(Ordering::SeqCst), 2);
        // Cached afterwards: no further load within 60 s.
        cache.get().await.expect("cached");
        assert_eq!(source.calls.load(Ordering::SeqCst), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn concurrent_callers_share_one_load() {
        let source = Arc::new(Scripted {
            calls: AtomicUsize::new(0),
            hang_first: false,
            app_url: "https://cloud.example".into(),
        });
        let cache = RuntimeConfigCache::new(source.clone(), true, None, None);
        let (a, b, c) = tokio::join!(cache.get(), cache.get(), cache.get());
        assert!(a.is_ok() && b.is_ok() && c.is_ok());
        assert_eq!(source.calls.load(Ordering::SeqCst), 1);
    }

    /// Scenarios 2–7: JWKS URLs from the issuer or the transport origins.
    #[test]
    fn scenarios_2_to_7_jwks_urls() {
        let plain = resolve(&settings("https://cloud.example"), true, None, None).expect("ok");
        assert_eq!(
            plain.session_jwks_url,
            "https://cloud.example/.well-known/cloud-session-jwks.json"
        );
        assert_eq!(
            plain.invocation_jwks_url,
            "https://cloud.example/.well-known/cloud-invocation-jwks.json"
        );
        let private = resolve(
            &settings("https://cloud.example"),
            true,
            Some("http://app-core:3000"),
            None,
        )
        .expect("ok");
        assert_eq!(
            private.session_jwks_url,
            "http://app-core:3000/.well-known/cloud-session-jwks.json"
        );
        assert_eq!(
            private.invocation_jwks_url,
            "http://app-core:3000/.well-known/cloud-invocation-jwks.json"
        );
        for path in [SESSION_JWKS_PATH, INVOCATION_JWKS_PATH] {
            let error = jwks_url(
                "https://cloud.example",
                Some("file:///tmp/core"),
                JWKS_ORIGIN_VARIABLE,
                path,
            )
            .expect_err("file origin");
            assert_eq!(
                error.to_string(),
                "CLOUD_IDENTITY_JWKS_ORIGIN must use http or https"
            );
        }
        assert_eq!(
            plain.oauth_jwks_url,
            "https://cloud.example/.well-known/jwks.json"
        );
        let oauth = resolve(
            &settings("https://cloud.example"),
            true,
            None,
            Some("http://app-oauth:3000"),
        )
        .expect("ok");
        assert_eq!(
            oauth.oauth_jwks_url,
            "http://app-oauth:3000/.well-known/jwks.json"
        );
        let error = resolve(
            &settings("https://cloud.example"),
            true,
            None,
            Some("file:///x"),
        )
        .expect_err("file origin");
        assert_eq!(
            error.to_string(),
            "CLOUD_OAUTH_JWKS_ORIGIN must use http or https"
        );
    }

    #[test]
    fn issuer_rules() {
        assert_eq!(
            issuer_of("cloud.example/", true).expect("https"),
            "https://cloud.example"
        );
        assert_eq!(
            issuer_of("localhost:3000", false).expect("http"),
            "http://localhost:3000"
        );
        assert_eq!(
            issuer_of("http://cloud.example", true)
                .expect_err("http")
                .to_string(),
            "Cloud identity issuer must use HTTPS in production"
        );
        let groups = resolve(&settings("https://c.example"), true, None, None).expect("ok");
        assert_eq!(groups.admin_groups, vec!["admins"]);
    }
}
