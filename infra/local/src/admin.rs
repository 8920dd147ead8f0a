//! The admin subcommands. Each opens the same database the server uses (creating and migrating
//! it when needed) and does one thing.

use std::io::Read;
use std::path::Path;

use anyhow::{Context, bail};
use k2b_core::Core;
use k2b_core::auth::{self, NewUser, Profile, Provider};
use k2b_core::config::Config;
use k2b_core::db;
use k2b_core::identity::IssueOptions;
use k2b_core::identity::session::{IssuedSession, SESSION_COOKIE, SessionRequest};
use k2b_core::identity::workload;
use k2b_core::registry::store;
use k2b_core::settings::definitions;
use serde_json::Value;

/// Creates the database if missing, applies pending migrations and builds the shared state.
pub async fn open(config: Config) -> anyhow::Result<(Core, db::MigrationReport)> {
    let created = db::ensure_database(config.database_url.expose())
        .await
        .context("cannot reach Postgres (is it running? see DATABASE_URL)")?;
    if created {
        eprintln!("created the database");
    }
    let core = Core::new(config)?;
    let report = db::migrate(&core.pool).await?;
    Ok((core, report))
}

pub async fn migrate(config: Config) -> anyhow::Result<()> {
    let (_, report) = open(config).await?;
    match report.current {
        Some(version) if report.applied.is_empty() => {
            println!("schema is up to date (migration {version})")
        }
        Some(version) => println!("schema migrated to {version}"),
        None => println!("no migrations"),
    }
    Ok(())
}

pub async fn create_user(
    config: Config,
    uid: String,
    name: Option<String>,
    mail: Option<String>,
    admin: bool,
    guest: bool,
    ipa: bool,
) -> anyhow::Result<()> {
    let (core, _) = open(config).await?;
    let user = NewUser {
        uid,
        provider: if ipa { Provider::Ipa } else { Provider::Local },
        profile: if guest { Profile::Guest } else { Profile::User },
        display_name: name,
        mail,
        admin,
    };
    let record = auth::create_user(&mut *core.pool.acquire().await?, &user).await?;
    println!("{}", record.id);
    Ok(())
}

pub async fn set_setting(config: Config, key: &str, raw: &str) -> anyhow::Result<()> {
    let def = definitions::find(key).with_context(|| format!("unknown setting `{key}`"))?;
    let text = if raw == "-" {
        let mut input = String::new();
        std::io::stdin()
            .read_to_string(&mut input)
            .context("cannot read the value from standard input")?;
        input.trim_end_matches(['\r', '\n']).to_string()
    } else {
        raw.to_string()
    };
    let value = definitions::parse_text(def, &text)
        .map_err(|reason| anyhow::anyhow!("setting `{key}` {reason}"))?;
    let (core, _) = open(config).await?;
    core.settings.set(key, value).await?;
    Ok(())
}

pub async fn get_setting(config: Config, key: &str) -> anyhow::Result<()> {
    let (core, _) = open(config).await?;
    match core.settings.get(key).await? {
        Value::String(text) => println!("{text}"),
        other => println!("{other}"),
    }
    Ok(())
}

pub async fn issue_session(config: Config, uid: &str) -> anyhow::Result<()> {
    let (core, _) = open(config).await?;
    let session = web_session(&core, uid).await?;
    println!("{SESSION_COOKIE}={}", session.token);
    Ok(())
}

/// A new web session for the account `uid`.
pub async fn web_session(core: &Core, uid: &str) -> anyhow::Result<IssuedSession> {
    let user = auth::find_user_by_uid(&mut *core.pool.acquire().await?, uid)
        .await?
        .with_context(|| format!("no account with uid `{uid}`"))?;
    Ok(core
        .identity
        .issue_session(
            &core.settings,
            SessionRequest::web(user.id),
            IssueOptions::default(),
        )
        .await?)
}

pub async fn issue_app_credential(config: Config, app_id: &str) -> anyhow::Result<()> {
    if !k2b_core::registry::is_valid_app_id(app_id) {
        bail!("`{app_id}` is not a valid app id (lowercase letter, then letters, digits or -)");
    }
    let (core, _) = open(config).await?;
    let (token, _) = workload::issue_app_credential(
        &mut *core.pool.acquire().await?,
        app_id,
        workload::WORKLOAD_SCOPES,
    )
    .await?;
    println!("{token}");
    Ok(())
}

pub async fn register_app(config: Config, file: &Path, ttl_seconds: u64) -> anyhow::Result<()> {
    let text = if file == Path::new("-") {
        let mut input = String::new();
        std::io::stdin().read_to_string(&mut input)?;
        input
    } else {
        std::fs::read_to_string(file).with_context(|| format!("cannot read {}", file.display()))?
    };
    let value: Value = serde_json::from_str(&text).context("the entry is not JSON")?;
    if ttl_seconds == 0 {
        bail!("--ttl-seconds must be positive");
    }
    let (core, _) = open(config).await?;
    let entry = store::upsert(
        &mut *core.pool.acquire().await?,
        &value,
        std::time::Duration::from_secs(ttl_seconds),
    )
    .await?;
    println!("registered {} for {ttl_seconds} s", entry.id);
    Ok(())
}
