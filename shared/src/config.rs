//! Every environment variable the functions read, parsed once into one typed [`Config`].
//!
//! A function reads its configuration at start and refuses to run with a bad one: the error names
//! the variable and what is expected, and never echoes a secret's value.

use std::path::PathBuf;
use std::time::Duration;

use crate::kek::{self, KekError, KekSet};
pub use crate::secret::Secret;

/// The app id of Core itself: the only application that holds the identity keys, and the one
/// Core's own mail is sent as.
pub const CORE_APP_ID: &str = "core";
/// Variable names of the JWKS transport origins.
pub const JWKS_ORIGIN_VARIABLE: &str = "CLOUD_IDENTITY_JWKS_ORIGIN";
pub const OAUTH_JWKS_ORIGIN_VARIABLE: &str = "CLOUD_OAUTH_JWKS_ORIGIN";

/// Built-in `APP_SECRET` of local mode. Anything encrypted with it is readable by anyone with this
/// source, which is why production refuses to start without a real secret.
const LOCAL_APP_SECRET: &str = "k2b-local-development-secret-never-use-in-production";
/// The database the local runner uses when `DATABASE_URL` is not set.
pub const LOCAL_DATABASE_URL: &str = "postgres://postgres@127.0.0.1:5432/k2b_local";
/// `PGPORT`, as libpq reads it: moves the local default to another port.
pub const LOCAL_PORT_VARIABLE: &str = "PGPORT";

/// The local default database on `port` (`PGPORT`), or on 5432.
pub fn local_database_url(port: Option<&str>) -> Result<String, ConfigError> {
    match port {
        None => Ok(LOCAL_DATABASE_URL.to_string()),
        Some(port) => match port.parse::<u16>() {
            Ok(port) if port > 0 => Ok(format!("postgres://postgres@127.0.0.1:{port}/k2b_local")),
            _ => Err(ConfigError::new(
                LOCAL_PORT_VARIABLE,
                "must be a TCP port (1 to 65535)",
            )),
        },
    }
}
/// Shortest `APP_SECRET` accepted outside local mode: 32 characters of entropy for the settings key.
pub const MIN_APP_SECRET_CHARS: usize = 32;

/// A scheduled `outbox` run listens for a minute and five seconds: the next run (a minute
/// later) is listening before this one stops, so no commit falls between two runs.
pub const DEFAULT_OUTBOX_FOLLOW: Duration = Duration::from_secs(65);

/// Where the process runs. Local mode fills in safe development defaults and relaxes cookie
/// `Secure` flags; production insists on every secret.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Local,
    Production,
}

impl Mode {
    pub fn is_local(self) -> bool {
        self == Mode::Local
    }
}

/// Log output: JSON lines for Lambda and CloudWatch, human-readable text locally.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    Json,
    Pretty,
}

/// What a function holds besides its database. Each piece is read — and required outside local
/// mode — only by the functions that use it, so no function holds a secret or a queue it never
/// needs (and the template gives each function only its own variables).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Needs {
    /// `APP_SECRET`: reads or writes stored settings (every stored value is encrypted with it).
    pub settings: bool,
    /// `CLOUD_IDENTITY_KEY_ENCRYPTION_KEY` (and the previous/next keys): decrypts or encrypts
    /// identity signing keys, that is, signs tokens or maintains the key ring. Verifying tokens
    /// needs only public keys.
    pub signing_keys: bool,
    /// `K2B_WAKEUP_QUEUE_URL`: sends outbox wake-ups.
    pub wakeups: bool,
    /// `K2B_LIVE_QUEUE_URL`: publishes live updates.
    pub live_updates: bool,
    /// `K2B_MAIL_BUCKET`: keeps outgoing mail attachments (a local folder in local mode).
    pub mail_objects: bool,
    /// `K2B_APP_NETWORKS`: calls app origins taken from the registry.
    pub app_calls: bool,
}

impl Needs {
    /// Everything: the local runner, admin commands and tests.
    pub const ALL: Needs = Needs {
        settings: true,
        signing_keys: true,
        wakeups: true,
        live_updates: true,
        mail_objects: true,
        app_calls: true,
    };
    /// The database alone.
    pub const DATABASE: Needs = Needs {
        settings: false,
        signing_keys: false,
        wakeups: false,
        live_updates: false,
        mail_objects: false,
        app_calls: false,
    };
    /// Adds `APP_SECRET`.
    pub const fn with_settings(self) -> Needs {
        Needs {
            settings: true,
            ..self
        }
    }
    /// Adds the identity key-encryption keys.
    pub const fn with_signing_keys(self) -> Needs {
        Needs {
            signing_keys: true,
            ..self
        }
    }
    /// Adds the wake-up queue alone (a writer whose rows the `outbox` function delivers).
    pub const fn with_wakeups(self) -> Needs {
        Needs {
            wakeups: true,
            ..self
        }
    }
    /// Adds the object store of outgoing mail attachments.
    pub const fn with_mail_objects(self) -> Needs {
        Needs {
            mail_objects: true,
            ..self
        }
    }
    /// Adds calls to app origins (and the networks they may reach).
    pub const fn with_app_calls(self) -> Needs {
        Needs {
            app_calls: true,
            ..self
        }
    }
    /// Adds both queues of the outbox (wake-ups and live updates).
    pub const fn with_queues(self) -> Needs {
        Needs {
            wakeups: true,
            live_updates: true,
            ..self
        }
    }
}

/// Connection pool settings, sized for Lambda: one execution environment serves one request at a
/// time, so a handful of connections is plenty and many environments must not exhaust Postgres.
#[derive(Debug, Clone)]
pub struct DbSettings {
    pub max_connections: u32,
    pub acquire_timeout: Duration,
    pub idle_timeout: Duration,
}

/// The whole configuration of a function or of the local runner.
#[derive(Debug, Clone)]
pub struct Config {
    /// `K2B_ENV`: `local` or `production`.
    pub mode: Mode,
    /// `DATABASE_URL`: the Postgres connection string (a secret: it may hold a password).
    pub database_url: Secret,
    /// What this process holds besides its database.
    pub needs: Needs,
    /// `APP_SECRET`: encrypts `settings.entries` values (`None` where settings are not needed).
    pub app_secret: Option<Secret>,
    /// `APP_ID`: must be `core` for the identity services.
    pub app_id: String,
    /// `APP_URL`: fallback for the `app.url` setting while the database has none.
    pub app_url: Option<String>,
    /// `K2B_DB_MAX_CONNECTIONS`, `K2B_DB_ACQUIRE_TIMEOUT_MS`, `K2B_DB_IDLE_TIMEOUT_MS`.
    pub db: DbSettings,
    /// `K2B_LOG_FORMAT`: `json` or `pretty`.
    pub log_format: LogFormat,
    /// `K2B_SETTINGS_CACHE_MS`: how long a setting read is reused in this process.
    pub settings_cache: Duration,
    /// `K2B_OUTBOX_FOLLOW_SECONDS`: how long a scheduled `outbox` run keeps listening for rows
    /// that writers commit (0: the run sweeps and ends).
    pub outbox_follow: Duration,
    /// Signing-key encryption and JWKS locations.
    pub identity: IdentityConfig,
    /// `K2B_WAKEUP_QUEUE_URL`: SQS queue of outbox wake-ups (unset, only in local mode:
    /// delivered in process).
    pub wakeup_queue_url: Option<String>,
    /// `K2B_LIVE_QUEUE_URL`: SQS FIFO queue live updates are published to (unset, only in local
    /// mode: kept in memory).
    pub live_queue_url: Option<String>,
    /// `K2B_MAIL_BUCKET`: the S3 bucket of outgoing mail attachments (unset, only in local
    /// mode: the folder `mail_dir`).
    pub mail_bucket: Option<String>,
    /// `K2B_DATA_DIR` + `/mail`: where local mode keeps outgoing mail attachments.
    pub mail_dir: PathBuf,
    /// `K2B_SMTP_CA_FILE`: PEM certificates trusted for SMTP TLS besides the public roots (a
    /// private relay's CA), read at start.
    pub smtp_extra_roots: Vec<Vec<u8>>,
    /// `K2B_APP_NETWORKS`: the private networks and host names Core's calls to app origins may
    /// reach besides the public internet (loopback too in local mode).
    pub app_networks: std::sync::Arc<crate::http::egress::AppNetworks>,
    /// Names of the variables that took a local-mode default, for the start-up notice.
    pub local_defaults: Vec<&'static str>,
}

/// A configuration problem, named by its variable. Displays as one line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ConfigError {
    pub variable: &'static str,
    pub message: String,
}

impl ConfigError {
    /// `<VARIABLE> <what is expected>`.
    pub fn new(variable: &'static str, expected: impl AsRef<str>) -> Self {
        ConfigError {
            variable,
            message: format!("{variable} {}", expected.as_ref()),
        }
    }

    /// A message that already names the variable.
    pub fn with_message(variable: &'static str, message: impl Into<String>) -> Self {
        ConfigError {
            variable,
            message: message.into(),
        }
    }
}

/// An S3 bucket name as S3 accepts it (3–63 characters of lowercase letters, digits, dots and
/// hyphens, starting and ending with a letter or digit).
fn is_bucket_name(name: &str) -> bool {
    let bytes = name.as_bytes();
    (3..=63).contains(&bytes.len())
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'.' | b'-'))
        && bytes.first().is_some_and(u8::is_ascii_alphanumeric)
        && bytes.last().is_some_and(u8::is_ascii_alphanumeric)
}

/// Development key-encryption key of local mode (never valid outside it).
const LOCAL_IDENTITY_KEK: &str = "6b32622d6c6f63616c2d6465762d6b656b2d6e6f742d666f722d70726f642121";

/// How invocation authority is issued (`CLOUD_INVOCATION_ISSUANCE_MODE`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InvocationIssuanceMode {
    Legacy,
    Jwt,
}

/// The identity part of the configuration.
#[derive(Debug, Clone)]
pub struct IdentityConfig {
    /// `CLOUD_IDENTITY_KEY_ENCRYPTION_KEY` (+ `_PREVIOUS_KEY` / `_NEXT_KEY`), parsed; `None`
    /// where signing keys are not needed.
    pub keks: Option<KekSet>,
    /// `CLOUD_IDENTITY_JWKS_ORIGIN`: private transport origin of the session/invocation JWKS.
    pub jwks_origin: Option<String>,
    /// `CLOUD_OAUTH_JWKS_ORIGIN`: private transport origin of the OAuth JWKS.
    pub oauth_jwks_origin: Option<String>,
    /// `CLOUD_INVOCATION_ISSUANCE_MODE`: `legacy` (default) or `jwt`.
    pub invocation_issuance_mode: InvocationIssuanceMode,
}

/// Every variable [`Config`] reads, with its meaning; the README's configuration table follows it.
pub const VARIABLES: &[(&str, &str)] = &[
    ("K2B_ENV", "`local` or `production`"),
    ("DATABASE_URL", "Postgres connection string"),
    (
        "PGPORT",
        "local mode without `DATABASE_URL`: the local default's port",
    ),
    (
        "APP_SECRET",
        "encrypts stored settings; at least 32 characters",
    ),
    ("APP_ID", "must be `core`"),
    ("APP_URL", "fallback for the `app.url` setting"),
    (
        "K2B_DB_MAX_CONNECTIONS",
        "pool size per execution environment",
    ),
    ("K2B_DB_ACQUIRE_TIMEOUT_MS", "wait for a pooled connection"),
    ("K2B_DB_IDLE_TIMEOUT_MS", "close idle connections after"),
    ("K2B_LOG_FORMAT", "`json` or `pretty`"),
    (
        "K2B_SETTINGS_CACHE_MS",
        "in-process settings cache lifetime",
    ),
    (
        "K2B_OUTBOX_FOLLOW_SECONDS",
        "how long a scheduled outbox run listens for new rows",
    ),
    (
        "K2B_SMTP_CA_FILE",
        "PEM certificates trusted for SMTP TLS besides the public roots",
    ),
    (
        "K2B_APP_NETWORKS",
        "private CIDR ranges and host names Core's calls to apps may reach",
    ),
];

impl Config {
    /// Reads the process environment with everything needed. `default_mode` applies when
    /// `K2B_ENV` is unset: Lambda functions pass [`Mode::Production`], the local runner
    /// [`Mode::Local`].
    pub fn from_env(default_mode: Mode) -> Result<Config, ConfigError> {
        Config::from_env_for(default_mode, Needs::ALL)
    }

    /// Reads the process environment, taking only what `needs` names.
    pub fn from_env_for(default_mode: Mode, needs: Needs) -> Result<Config, ConfigError> {
        Config::from_lookup_for(default_mode, needs, |name| std::env::var(name).ok())
    }

    /// Parses a configuration with everything needed from any variable source (tests pass a map).
    pub fn from_lookup(
        default_mode: Mode,
        lookup: impl Fn(&str) -> Option<String>,
    ) -> Result<Config, ConfigError> {
        Config::from_lookup_for(default_mode, Needs::ALL, lookup)
    }

    /// Parses a configuration from any variable source, taking only what `needs` names.
    pub fn from_lookup_for(
        default_mode: Mode,
        needs: Needs,
        lookup: impl Fn(&str) -> Option<String>,
    ) -> Result<Config, ConfigError> {
        let get = |name: &str| {
            lookup(name)
                .map(|v| v.trim().to_string())
                .filter(|v| !v.is_empty())
        };
        let mut local_defaults = Vec::new();

        let mode = match get("K2B_ENV").map(|v| v.to_ascii_lowercase()).as_deref() {
            None => default_mode,
            Some("local") | Some("development") => Mode::Local,
            Some("production") => Mode::Production,
            Some(_) => {
                return Err(ConfigError::new(
                    "K2B_ENV",
                    "must be `local` or `production`",
                ));
            }
        };

        let database_url = match get("DATABASE_URL") {
            Some(url) => {
                if !(url.starts_with("postgres://") || url.starts_with("postgresql://")) {
                    return Err(ConfigError::new(
                        "DATABASE_URL",
                        "must be a postgres:// or postgresql:// connection URL",
                    ));
                }
                url
            }
            None if mode.is_local() => {
                local_defaults.push("DATABASE_URL");
                local_database_url(get(LOCAL_PORT_VARIABLE).as_deref())?
            }
            None => {
                return Err(ConfigError::new(
                    "DATABASE_URL",
                    "is required outside local mode (a postgres:// connection URL)",
                ));
            }
        };

        // The secret is not trimmed: surrounding spaces would be part of the key material.
        let app_secret = match lookup("APP_SECRET").filter(|v| !v.is_empty()) {
            _ if !needs.settings => None,
            Some(secret) => {
                let chars = secret.chars().count();
                if !mode.is_local() && chars < MIN_APP_SECRET_CHARS {
                    return Err(ConfigError::new(
                        "APP_SECRET",
                        format!(
                            "must be at least {MIN_APP_SECRET_CHARS} characters outside local mode (it has {chars})"
                        ),
                    ));
                }
                Some(Secret::new(secret))
            }
            None if mode.is_local() => {
                local_defaults.push("APP_SECRET");
                Some(Secret::new(LOCAL_APP_SECRET))
            }
            None => {
                return Err(ConfigError::new(
                    "APP_SECRET",
                    format!(
                        "is required outside local mode (at least {MIN_APP_SECRET_CHARS} characters)"
                    ),
                ));
            }
        };

        let app_id = get("APP_ID").unwrap_or_else(|| CORE_APP_ID.to_string());
        if app_id != CORE_APP_ID {
            return Err(ConfigError::new(
                "APP_ID",
                format!(
                    "must be `{CORE_APP_ID}`: Cloud identity keys may only be loaded by the Core application"
                ),
            ));
        }

        let app_url = get("APP_URL");
        if let Some(url) = &app_url
            && crate::http::origin::canonical_origin(url).is_none()
        {
            return Err(ConfigError::new(
                "APP_URL",
                "must be an http(s) URL or a host name, such as https://cloud.example.org",
            ));
        }

        let max_connections = parse_number(
            &get,
            "K2B_DB_MAX_CONNECTIONS",
            1,
            100,
            if mode.is_local() { 10 } else { 2 },
        )?;
        let acquire_timeout_ms =
            parse_number(&get, "K2B_DB_ACQUIRE_TIMEOUT_MS", 100, 60_000, 3_000)?;
        let idle_timeout_ms =
            parse_number(&get, "K2B_DB_IDLE_TIMEOUT_MS", 1_000, 3_600_000, 60_000)?;

        let log_format = match get("K2B_LOG_FORMAT")
            .map(|v| v.to_ascii_lowercase())
            .as_deref()
        {
            None if mode.is_local() => LogFormat::Pretty,
            None => LogFormat::Json,
            Some("json") => LogFormat::Json,
            Some("pretty") | Some("text") => LogFormat::Pretty,
            Some(_) => {
                return Err(ConfigError::new(
                    "K2B_LOG_FORMAT",
                    "must be `json` or `pretty`",
                ));
            }
        };

        let settings_cache_ms = parse_number(&get, "K2B_SETTINGS_CACHE_MS", 0, 300_000, 5_000)?;
        let outbox_follow_s = parse_number(
            &get,
            "K2B_OUTBOX_FOLLOW_SECONDS",
            0,
            600,
            DEFAULT_OUTBOX_FOLLOW.as_secs(),
        )?;

        let keks = if needs.signing_keys {
            Some(parse_keks(&lookup, mode, &mut local_defaults)?)
        } else {
            None
        };
        let jwks_origin = get(JWKS_ORIGIN_VARIABLE);
        let oauth_jwks_origin = get(OAUTH_JWKS_ORIGIN_VARIABLE);
        for (variable, origin) in [
            (JWKS_ORIGIN_VARIABLE, &jwks_origin),
            (OAUTH_JWKS_ORIGIN_VARIABLE, &oauth_jwks_origin),
        ] {
            if let Some(origin) = origin.as_deref().map(str::trim).filter(|o| !o.is_empty())
                && crate::http::origin::transport_origin(origin).is_none()
            {
                return Err(ConfigError::with_message(
                    variable,
                    format!("{variable} must use http or https"),
                ));
            }
        }
        let invocation_issuance_mode = match get("CLOUD_INVOCATION_ISSUANCE_MODE")
            .map(|v| v.to_ascii_lowercase())
            .as_deref()
        {
            None | Some("legacy") => InvocationIssuanceMode::Legacy,
            Some("jwt") => InvocationIssuanceMode::Jwt,
            Some(_) => {
                return Err(ConfigError::new(
                    "CLOUD_INVOCATION_ISSUANCE_MODE",
                    "must be `legacy` or `jwt`",
                ));
            }
        };

        let queue_url = |variable: &'static str| -> Result<Option<String>, ConfigError> {
            match get(variable) {
                None => Ok(None),
                Some(url) => match url::Url::parse(&url) {
                    Ok(parsed) if matches!(parsed.scheme(), "http" | "https") => Ok(Some(url)),
                    _ => Err(ConfigError::new(
                        variable,
                        "must be an http(s) SQS queue URL",
                    )),
                },
            }
        };
        // Outside local mode a function that sends to a queue refuses to start without it: a
        // silent in-process fallback would lose every message.
        let required_queue = |variable: &'static str,
                              needed: bool,
                              what: &str|
         -> Result<Option<String>, ConfigError> {
            if !needed {
                return Ok(None);
            }
            match queue_url(variable)? {
                None if !mode.is_local() => Err(ConfigError::new(
                    variable,
                    format!("is required outside local mode (the SQS queue URL {what})"),
                )),
                url => Ok(url),
            }
        };
        let wakeup_queue_url = required_queue(
            "K2B_WAKEUP_QUEUE_URL",
            needs.wakeups,
            "outbox wake-ups are sent to",
        )?;
        let live_queue_url = required_queue(
            "K2B_LIVE_QUEUE_URL",
            needs.live_updates,
            "live updates are published to",
        )?;

        let mail_bucket = match get("K2B_MAIL_BUCKET") {
            _ if !needs.mail_objects => None,
            Some(bucket) if is_bucket_name(&bucket) => Some(bucket),
            Some(_) => {
                return Err(ConfigError::new(
                    "K2B_MAIL_BUCKET",
                    "must be an S3 bucket name (3–63 lowercase letters, digits, dots or hyphens)",
                ));
            }
            None if mode.is_local() => None,
            None => {
                return Err(ConfigError::new(
                    "K2B_MAIL_BUCKET",
                    "is required outside local mode (the S3 bucket outgoing mail attachments are kept in)",
                ));
            }
        };
        let mail_dir = get("K2B_DATA_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| std::env::temp_dir().join("k2b-local"))
            .join("mail");

        let smtp_extra_roots = match get("K2B_SMTP_CA_FILE") {
            None => Vec::new(),
            Some(path) => match std::fs::read(&path) {
                Ok(pem) if pem.windows(27).any(|w| w == b"-----BEGIN CERTIFICATE-----") => {
                    vec![pem]
                }
                Ok(_) => {
                    return Err(ConfigError::new(
                        "K2B_SMTP_CA_FILE",
                        "must name a PEM file of certificates",
                    ));
                }
                Err(_) => {
                    return Err(ConfigError::new(
                        "K2B_SMTP_CA_FILE",
                        "names a file that cannot be read",
                    ));
                }
            },
        };

        let app_networks = crate::http::egress::AppNetworks::parse(
            get(crate::http::egress::APP_NETWORKS_VAR).as_deref(),
            mode.is_local(),
        )
        .map_err(|message| {
            ConfigError::with_message(crate::http::egress::APP_NETWORKS_VAR, message)
        })?;

        Ok(Config {
            mode,
            needs,
            app_networks: std::sync::Arc::new(app_networks),
            mail_bucket,
            mail_dir,
            smtp_extra_roots,
            database_url: Secret::new(database_url),
            app_secret,
            app_id,
            app_url,
            db: DbSettings {
                max_connections: max_connections as u32,
                acquire_timeout: Duration::from_millis(acquire_timeout_ms),
                idle_timeout: Duration::from_millis(idle_timeout_ms),
            },
            log_format,
            settings_cache: Duration::from_millis(settings_cache_ms),
            outbox_follow: Duration::from_secs(outbox_follow_s),
            identity: IdentityConfig {
                keks,
                jwks_origin,
                oauth_jwks_origin,
                invocation_issuance_mode,
            },
            wakeup_queue_url,
            live_queue_url,
            local_defaults,
        })
    }

    /// A one-line notice for the start-up log when local defaults are in use, else `None`.
    pub fn local_mode_notice(&self) -> Option<String> {
        if !self.mode.is_local() {
            return None;
        }
        if self.local_defaults.is_empty() {
            return Some("local mode: relaxed cookie security; not for production".to_string());
        }
        Some(format!(
            "local mode: built-in development defaults for {}; not for production",
            self.local_defaults.join(", ")
        ))
    }

    /// Reads the environment like [`Config::from_env_for`]; on a bad configuration prints one
    /// line naming the variable to standard error and exits with status 2. For `main` functions.
    pub fn from_env_or_exit(default_mode: Mode, needs: Needs) -> Config {
        match Config::from_env_for(default_mode, needs) {
            Ok(config) => config,
            Err(error) => {
                eprintln!("configuration error: {error}");
                std::process::exit(2);
            }
        }
    }

    /// The same configuration pointing at another database (tests, the local runner's admin URL).
    pub fn with_database_url(&self, url: impl Into<String>) -> Config {
        Config {
            database_url: Secret::new(url),
            ..self.clone()
        }
    }
}

/// The key-encryption keys (current, and previous or next while rolling).
fn parse_keks(
    lookup: &impl Fn(&str) -> Option<String>,
    mode: Mode,
    local_defaults: &mut Vec<&'static str>,
) -> Result<KekSet, ConfigError> {
    let current = match lookup(kek::CURRENT_VARIABLE).filter(|v| !v.trim().is_empty()) {
        Some(value) => Secret::new(value),
        None if mode.is_local() => {
            local_defaults.push(kek::CURRENT_VARIABLE);
            Secret::new(LOCAL_IDENTITY_KEK)
        }
        None => {
            return Err(ConfigError::new(
                kek::CURRENT_VARIABLE,
                "is required outside local mode (32 random bytes as 64 hexadecimal characters)",
            ));
        }
    };
    let previous = lookup(kek::PREVIOUS_VARIABLE).map(Secret::new);
    let next = lookup(kek::NEXT_VARIABLE).map(Secret::new);
    KekSet::parse(Some(&current), previous.as_ref(), next.as_ref()).map_err(|error| {
        let variable = match error {
            KekError::Malformed(variable) => variable,
            KekError::NotDistinct | KekError::PreviousAndNext => kek::PREVIOUS_VARIABLE,
        };
        ConfigError::with_message(variable, error.to_string())
    })
}

fn parse_number(
    get: &impl Fn(&str) -> Option<String>,
    variable: &'static str,
    min: u64,
    max: u64,
    default: u64,
) -> Result<u64, ConfigError> {
    match get(variable) {
        None => Ok(default),
        Some(raw) => match raw.parse::<u64>() {
            Ok(value) if (min..=max).contains(&value) => Ok(value),
            _ => Err(ConfigError::new(
                variable,
                format!("must be a whole number from {min} to {max}"),
            )),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn parse(mode: Mode, vars: &[(&str, &str)]) -> Result<Config, ConfigError> {
        let map: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Config::from_lookup(mode, |k| map.get(k).cloned())
    }

    const GOOD_SECRET: &str = "0123456789abcdef0123456789abcdef";
    const KEK: &str = "0101010101010101010101010101010101010101010101010101010101010101";

    #[test]
    fn local_mode_fills_in_defaults_and_says_so() {
        let config = parse(Mode::Local, &[]).expect("local defaults");
        assert_eq!(config.mode, Mode::Local);
        assert_eq!(config.database_url.expose(), LOCAL_DATABASE_URL);
        let moved = parse(Mode::Local, &[("PGPORT", "6543")]).expect("another port");
        assert_eq!(
            moved.database_url.expose(),
            "postgres://postgres@127.0.0.1:6543/k2b_local"
        );
        let err = parse(Mode::Local, &[("PGPORT", "high")]).expect_err("not a port");
        assert_eq!(err.variable, "PGPORT");
        assert_eq!(
            config.app_secret.as_ref().map(Secret::expose),
            Some(LOCAL_APP_SECRET)
        );
        assert_eq!(config.log_format, LogFormat::Pretty);
        assert_eq!(
            config.identity.invocation_issuance_mode,
            InvocationIssuanceMode::Legacy
        );
        let notice = config.local_mode_notice().expect("a notice");
        assert!(notice.contains("APP_SECRET") && notice.contains("DATABASE_URL"));
    }

    #[test]
    fn production_requires_database_url_and_secret() {
        let err = parse(Mode::Production, &[("APP_SECRET", GOOD_SECRET)]).expect_err("must fail");
        assert_eq!(err.variable, "DATABASE_URL");
        let err =
            parse(Mode::Production, &[("DATABASE_URL", "postgres://db/x")]).expect_err("must fail");
        assert_eq!(err.variable, "APP_SECRET");
    }

    #[test]
    fn production_requires_the_mail_bucket_and_local_mode_keeps_a_folder() {
        let err = parse(
            Mode::Production,
            &[
                ("DATABASE_URL", "postgres://db/x"),
                ("APP_SECRET", GOOD_SECRET),
                ("CLOUD_IDENTITY_KEY_ENCRYPTION_KEY", KEK),
                ("K2B_WAKEUP_QUEUE_URL", "https://sqs.example/1/wakeup"),
                ("K2B_LIVE_QUEUE_URL", "https://sqs.example/1/live.fifo"),
            ],
        )
        .expect_err("must fail");
        assert_eq!(err.variable, "K2B_MAIL_BUCKET");
        let config = parse(Mode::Local, &[("K2B_DATA_DIR", "/srv/k2b")]).expect("local");
        assert_eq!(config.mail_bucket, None);
        assert_eq!(config.mail_dir, PathBuf::from("/srv/k2b/mail"));
    }

    #[test]
    fn short_secret_is_refused_outside_local_mode_with_one_line_naming_it() {
        let err = parse(
            Mode::Local,
            &[
                ("K2B_ENV", "production"),
                ("DATABASE_URL", "postgres://db/x"),
                ("APP_SECRET", "short"),
            ],
        )
        .expect_err("must fail");
        let line = err.to_string();
        assert!(line.starts_with("APP_SECRET must be at least 32 characters"));
        assert!(!line.contains('\n'));
        assert!(
            !line.contains("short"),
            "the secret's value is never echoed"
        );
        // The same secret is accepted locally.
        assert!(parse(Mode::Local, &[("APP_SECRET", "short")]).is_ok());
    }

    #[test]
    fn production_with_everything_set_parses() {
        let config = parse(
            Mode::Production,
            &[
                ("DATABASE_URL", "postgresql://u:p@db:5432/cloud"),
                ("APP_SECRET", GOOD_SECRET),
                ("APP_URL", "https://cloud.example.org"),
                ("K2B_DB_MAX_CONNECTIONS", "3"),
                ("CLOUD_IDENTITY_KEY_ENCRYPTION_KEY", KEK),
                ("K2B_WAKEUP_QUEUE_URL", "https://sqs.example/1/wakeup"),
                ("K2B_LIVE_QUEUE_URL", "https://sqs.example/1/live.fifo"),
                ("K2B_MAIL_BUCKET", "k2b-mail-attachments"),
            ],
        )
        .expect("valid");
        assert_eq!(config.mode, Mode::Production);
        assert_eq!(config.mail_bucket.as_deref(), Some("k2b-mail-attachments"));
        assert_eq!(config.db.max_connections, 3);
        assert_eq!(config.log_format, LogFormat::Json);
        assert!(config.local_mode_notice().is_none());
        assert!(
            !format!("{config:?}").contains("u:p@"),
            "Debug hides the URL"
        );
    }

    #[test]
    fn invalid_values_name_their_variable() {
        for (name, value) in [
            ("K2B_ENV", "staging"),
            ("DATABASE_URL", "mysql://db"),
            ("APP_ID", "mail"),
            ("APP_URL", "ftp://x"),
            ("K2B_DB_MAX_CONNECTIONS", "0"),
            ("K2B_DB_MAX_CONNECTIONS", "many"),
            ("K2B_DB_ACQUIRE_TIMEOUT_MS", "5"),
            ("K2B_LOG_FORMAT", "xml"),
            ("K2B_SETTINGS_CACHE_MS", "-1"),
            ("K2B_OUTBOX_FOLLOW_SECONDS", "601"),
            ("CLOUD_IDENTITY_KEY_ENCRYPTION_KEY", "short"),
            ("CLOUD_IDENTITY_NEXT_KEY", "zz"),
            ("CLOUD_IDENTITY_JWKS_ORIGIN", "file:///tmp/core"),
            ("CLOUD_OAUTH_JWKS_ORIGIN", "ftp://oauth"),
            ("CLOUD_INVOCATION_ISSUANCE_MODE", "maybe"),
            ("K2B_WAKEUP_QUEUE_URL", "not a url"),
            ("K2B_LIVE_QUEUE_URL", "ftp://queue"),
            ("K2B_MAIL_BUCKET", "Mail_Bucket"),
            ("K2B_MAIL_BUCKET", "-mail"),
            ("K2B_MAIL_BUCKET", "ab"),
        ] {
            let err = parse(Mode::Local, &[(name, value)]).expect_err("must fail");
            assert_eq!(err.variable, name, "{name}={value}");
        }
    }

    fn parse_for(mode: Mode, needs: Needs, vars: &[(&str, &str)]) -> Result<Config, ConfigError> {
        let map: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Config::from_lookup_for(mode, needs, |k| map.get(k).cloned())
    }

    #[test]
    fn a_function_takes_only_what_it_needs() {
        // The database alone: no secret is required, and none is held even when present.
        let config = parse_for(
            Mode::Production,
            Needs::DATABASE,
            &[
                ("DATABASE_URL", "postgres://db/x"),
                ("APP_SECRET", GOOD_SECRET),
                ("CLOUD_IDENTITY_KEY_ENCRYPTION_KEY", KEK),
                ("K2B_LIVE_QUEUE_URL", "https://sqs.example/1/live.fifo"),
            ],
        )
        .expect("database only");
        assert!(config.app_secret.is_none());
        assert!(config.identity.keks.is_none());
        assert!(config.live_queue_url.is_none());
        // Signing needs the key-encryption key, and says which variable is missing.
        let err = parse_for(
            Mode::Production,
            Needs::DATABASE.with_signing_keys(),
            &[("DATABASE_URL", "postgres://db/x")],
        )
        .expect_err("no KEK");
        assert_eq!(err.variable, "CLOUD_IDENTITY_KEY_ENCRYPTION_KEY");
        let config = parse_for(
            Mode::Production,
            Needs::DATABASE.with_signing_keys(),
            &[
                ("DATABASE_URL", "postgres://db/x"),
                ("CLOUD_IDENTITY_KEY_ENCRYPTION_KEY", KEK),
            ],
        )
        .expect("signing without settings");
        assert!(config.identity.keks.is_some() && config.app_secret.is_none());
    }

    #[test]
    fn a_sender_without_its_queue_is_refused_outside_local_mode() {
        let base = [
            ("DATABASE_URL", "postgres://db/x"),
            ("K2B_LIVE_QUEUE_URL", "https://sqs.example/1/live.fifo"),
        ];
        let err = parse_for(Mode::Production, Needs::DATABASE.with_queues(), &base)
            .expect_err("no wake-up queue");
        assert_eq!(err.variable, "K2B_WAKEUP_QUEUE_URL");
        assert!(
            err.to_string()
                .starts_with("K2B_WAKEUP_QUEUE_URL is required outside local mode")
        );
        // Locally the same function delivers in process.
        let local = parse_for(Mode::Local, Needs::DATABASE.with_queues(), &base).expect("local");
        assert!(local.wakeup_queue_url.is_none());
        assert_eq!(
            local.live_queue_url.as_deref(),
            Some("https://sqs.example/1/live.fifo")
        );
    }
}
