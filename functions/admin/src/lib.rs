//! Operator commands against an installation's production configuration.
//!
//! The same commands run two ways: as the `k2b-admin` command line on a machine that reaches
//! the database, and as the `admin` Lambda function inside the VPC (`aws lambda invoke` with
//! `{"command": ["keys", "status"]}`), where the database usually is the only place it can be
//! reached from. Each command returns an [`Outcome`]: lines for people, a JSON value for
//! scripts, and whether it succeeded (the doctor fails when any check fails).

use chrono::{DateTime, Utc};
use clap::{Parser, Subcommand, ValueEnum};
use k2b_core::Core;
use k2b_core::config::Needs;
use k2b_core::db;
use k2b_core::identity::{IdentityError, Purpose, ring};
use k2b_core::operations::{self, OperationsError, doctor};
use k2b_core::settings::SettingsError;
use k2b_core::settings::definitions;
use serde_json::{Value, json};

/// What the `admin` function holds: the database, stored settings, the identity
/// key-encryption keys (status, revocation, rotation and the doctor's decrypt check), and the
/// queues the doctor checks.
pub const NEEDS: Needs = Needs::DATABASE
    .with_settings()
    .with_signing_keys()
    .with_queues();

/// The command line (and the `command` of an `admin` invocation, without the program name).
#[derive(Debug, Parser)]
#[command(
    name = "k2b-admin",
    version,
    about = "Operate a K2B Cloud installation (reads the production configuration from the environment)"
)]
pub struct Cli {
    /// Print the result as JSON instead of lines.
    #[arg(long, global = true)]
    pub json: bool,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Identity signing keys.
    Keys {
        #[command(subcommand)]
        command: KeysCommand,
    },
    /// Outbox health.
    Outbox {
        #[command(subcommand)]
        command: OutboxCommand,
    },
    /// The app registry.
    Registry {
        #[command(subcommand)]
        command: RegistryCommand,
    },
    /// Installation settings.
    Settings {
        #[command(subcommand)]
        command: SettingsCommand,
    },
    /// Apply pending migrations (under the migrator's lock; safe to repeat).
    Migrate,
    /// Check the deployment: one line per check, with the fix for each failure.
    Doctor,
}

#[derive(Debug, Subcommand)]
pub enum KeysCommand {
    /// Every signing key by purpose, newest first.
    Status,
    /// Emergency revocation: the key stops signing and verifying at once; a successor takes over.
    Revoke {
        kid: String,
        /// Why (kept with the key).
        #[arg(long)]
        reason: String,
    },
    /// Publish a successor now; it signs after the activation lead (10 minutes).
    Rotate {
        #[arg(long, value_enum)]
        purpose: PurposeArg,
    },
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum PurposeArg {
    Session,
    Invocation,
    Oauth,
}

impl From<PurposeArg> for Purpose {
    fn from(value: PurposeArg) -> Purpose {
        match value {
            PurposeArg::Session => Purpose::Session,
            PurposeArg::Invocation => Purpose::Invocation,
            PurposeArg::Oauth => Purpose::Oauth,
        }
    }
}

#[derive(Debug, Subcommand)]
pub enum OutboxCommand {
    /// Depth, oldest row age and failing keys per outbox.
    Status,
}

#[derive(Debug, Subcommand)]
pub enum RegistryCommand {
    /// Every registry entry with its expiry.
    List,
}

#[derive(Debug, Subcommand)]
pub enum SettingsCommand {
    /// Print a setting's current value.
    Get { key: String },
    /// Store a setting (`-` reads the value from standard input on the command line).
    Set { key: String, value: String },
}

/// The error of a command that could not run.
#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    #[error("{0}")]
    Usage(String),
    #[error(transparent)]
    Operations(#[from] OperationsError),
}

impl From<IdentityError> for AdminError {
    fn from(error: IdentityError) -> AdminError {
        AdminError::Operations(error.into())
    }
}

impl From<SettingsError> for AdminError {
    fn from(error: SettingsError) -> AdminError {
        AdminError::Operations(error.into())
    }
}

impl From<sqlx::Error> for AdminError {
    fn from(error: sqlx::Error) -> AdminError {
        AdminError::Operations(error.into())
    }
}

impl From<db::DbError> for AdminError {
    fn from(error: db::DbError) -> AdminError {
        AdminError::Operations(error.into())
    }
}

/// What a command did.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    /// Whether it succeeded (a doctor with a failed check, a revocation of an unknown key: not).
    pub ok: bool,
    /// For people.
    pub lines: Vec<String>,
    /// For scripts.
    pub value: Value,
}

impl Outcome {
    fn ok(lines: Vec<String>, value: Value) -> Outcome {
        Outcome {
            ok: true,
            lines,
            value,
        }
    }
}

/// Parses a command given as words (without the program name).
pub fn parse<I, S>(words: I) -> Result<Cli, clap::Error>
where
    I: IntoIterator<Item = S>,
    S: Into<std::ffi::OsString> + Clone,
{
    let words: Vec<std::ffi::OsString> = std::iter::once("k2b-admin".into())
        .chain(words.into_iter().map(Into::into))
        .collect();
    Cli::try_parse_from(words)
}

/// The configuration a command needs: the doctor also reads the queues that are configured
/// (and names the ones that are not), the other commands only the database, settings and keys.
pub fn needs_of(command: &Command, is_set: impl Fn(&str) -> bool) -> Needs {
    let base = Needs::DATABASE.with_settings().with_signing_keys();
    match command {
        Command::Doctor => {
            let mut needs = base;
            needs.wakeups = is_set("K2B_WAKEUP_QUEUE_URL");
            needs.live_updates = is_set("K2B_LIVE_QUEUE_URL");
            needs
        }
        _ => base,
    }
}

/// Runs one command. `value` of `settings set` is the value itself here (standard input is the
/// command line's business).
pub async fn execute(core: &Core, command: Command) -> Result<Outcome, AdminError> {
    match command {
        Command::Keys { command } => keys(core, command).await,
        Command::Outbox {
            command: OutboxCommand::Status,
        } => outbox_status(core).await,
        Command::Registry {
            command: RegistryCommand::List,
        } => registry_list(core).await,
        Command::Settings { command } => settings(core, command).await,
        Command::Migrate => migrate(core).await,
        Command::Doctor => {
            let report = doctor::run(core).await;
            let value = serde_json::to_value(&report).unwrap_or(Value::Null);
            let mut lines = report.lines();
            let failed = report
                .checks
                .iter()
                .filter(|c| c.verdict == doctor::Verdict::Fail)
                .count();
            lines.push(match failed {
                0 => format!("{} checks, all passed", report.checks.len()),
                n => format!("{} checks, {n} failed", report.checks.len()),
            });
            Ok(Outcome {
                ok: report.healthy(),
                lines,
                value,
            })
        }
    }
}

async fn keys(core: &Core, command: KeysCommand) -> Result<Outcome, AdminError> {
    match command {
        KeysCommand::Status => {
            let keys = ring::status(&core.pool).await?;
            let mut lines = vec![format!(
                "{:<10} {:<8} {:<36} {:<16} {:<24} {:<24} {:<24}",
                "purpose", "state", "kid", "kek", "signs from", "signs until", "verifies until"
            )];
            lines.extend(keys.iter().map(|k| {
                format!(
                    "{:<10} {:<8} {:<36} {:<16} {:<24} {:<24} {:<24}",
                    k.purpose,
                    k.state,
                    k.kid,
                    k.encryption_key_id,
                    k.activate_at,
                    k.sign_until,
                    k.verify_until
                )
            }));
            Ok(Outcome::ok(lines, json!({ "keys": keys })))
        }
        KeysCommand::Revoke { kid, reason } => {
            if reason.trim().is_empty() {
                return Err(AdminError::Usage("--reason must say why".into()));
            }
            let revoked = core.identity.revoke_key(&kid, &reason).await?;
            Ok(Outcome {
                ok: revoked,
                lines: vec![if revoked {
                    format!("revoked {kid}: it no longer signs or verifies; a successor is active")
                } else {
                    format!("no key {kid} to revoke (unknown or already revoked)")
                }],
                value: json!({ "kid": kid, "revoked": revoked }),
            })
        }
        KeysCommand::Rotate { purpose } => {
            let purpose = Purpose::from(purpose);
            let rotation = core.identity.rotate_key(purpose).await?;
            let line = match &rotation {
                ring::Rotation::Scheduled { kid, activate_at } => format!(
                    "{} successor {kid} published; it signs from {activate_at}",
                    purpose.as_str()
                ),
                ring::Rotation::AlreadyScheduled { kid, activate_at } => format!(
                    "{} successor {kid} was already published; it signs from {activate_at}",
                    purpose.as_str()
                ),
                ring::Rotation::CreatedActive { kid } => format!(
                    "{} had no usable key: {kid} created and signing now",
                    purpose.as_str()
                ),
            };
            Ok(Outcome::ok(
                vec![line],
                json!({ "purpose": purpose, "rotation": rotation }),
            ))
        }
    }
}

fn age(seconds: Option<f64>) -> String {
    match seconds {
        None => "-".into(),
        Some(s) if s < 120.0 => format!("{s:.0}s"),
        Some(s) if s < 7200.0 => format!("{:.0}m", s / 60.0),
        Some(s) => format!("{:.1}h", s / 3600.0),
    }
}

async fn outbox_status(core: &Core) -> Result<Outcome, AdminError> {
    let report = operations::outbox::status(&core.pool).await?;
    let mut lines = vec![format!(
        "{:<28} {:>7} {:>7} {:>8} {:>10} {:>8}",
        "outbox", "depth", "due", "oldest", "oldest due", "failing"
    )];
    for outbox in &report {
        lines.push(format!(
            "{:<28} {:>7} {:>7} {:>8} {:>10} {:>8}",
            outbox.name,
            outbox.depth,
            outbox.due,
            age(outbox.oldest_age_seconds),
            age(outbox.oldest_due_age_seconds),
            outbox.failing_key_count
        ));
        for key in &outbox.failing_keys {
            lines.push(format!(
                "  failing {} after {} attempts, retry in {}: {}",
                key.key,
                key.attempts,
                age(Some(key.retry_in_seconds.max(0.0))),
                key.last_error.as_deref().unwrap_or("-")
            ));
        }
    }
    if report.is_empty() {
        lines.push("every outbox is empty".into());
    }
    let oldest = operations::outbox::oldest_due_age_seconds(&report);
    Ok(Outcome::ok(
        lines,
        json!({ "outboxes": report, "oldestDueAgeSeconds": oldest }),
    ))
}

async fn registry_list(core: &Core) -> Result<Outcome, AdminError> {
    let rows: Vec<(String, Value, DateTime<Utc>, DateTime<Utc>)> = sqlx::query_as(
        "SELECT app_id, entry, updated_at, expires_at FROM registry.apps ORDER BY app_id",
    )
    .fetch_all(&core.pool)
    .await?;
    let now = Utc::now();
    let mut lines = vec![format!(
        "{:<24} {:<40} {:<30} {:<14}",
        "app", "base url", "routes", "expires"
    )];
    let mut entries = Vec::new();
    for (app_id, entry, updated_at, expires_at) in rows {
        let base_url = entry["baseUrl"].as_str().unwrap_or("-").to_string();
        let routes: Vec<String> = entry["routes"]
            .as_array()
            .map(|r| {
                r.iter()
                    .filter_map(|v| v.as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default();
        let left = (expires_at - now).num_seconds();
        let expires = if left > 0 {
            format!("in {left}s")
        } else {
            format!("stale {}s", -left)
        };
        lines.push(format!(
            "{:<24} {:<40} {:<30} {:<14}",
            app_id,
            base_url,
            routes.join(","),
            expires
        ));
        entries.push(json!({
            "appId": app_id, "baseUrl": base_url, "routes": routes,
            "updatedAt": updated_at, "expiresAt": expires_at, "stale": left <= 0,
        }));
    }
    if entries.is_empty() {
        lines.push("the registry is empty".into());
    }
    Ok(Outcome::ok(lines, json!({ "apps": entries })))
}

async fn settings(core: &Core, command: SettingsCommand) -> Result<Outcome, AdminError> {
    match command {
        SettingsCommand::Get { key } => {
            if definitions::find(&key).is_none() {
                return Err(AdminError::Usage(format!("unknown setting `{key}`")));
            }
            let value = core.settings.get(&key).await?;
            let line = match &value {
                Value::String(text) => text.clone(),
                other => other.to_string(),
            };
            Ok(Outcome::ok(
                vec![line],
                json!({ "key": key, "value": value }),
            ))
        }
        SettingsCommand::Set { key, value } => {
            let def = definitions::find(&key)
                .ok_or_else(|| AdminError::Usage(format!("unknown setting `{key}`")))?;
            let parsed = definitions::parse_text(def, &value)
                .map_err(|reason| AdminError::Usage(format!("setting `{key}` {reason}")))?;
            let stored = core.settings.set(&key, parsed).await?;
            tracing::info!(key, "setting stored by an operator");
            Ok(Outcome::ok(
                vec![format!("{key} stored")],
                json!({ "key": key, "value": stored }),
            ))
        }
    }
}

async fn migrate(core: &Core) -> Result<Outcome, AdminError> {
    let applied = db::applied_versions(&core.pool).await?;
    let known = db::known_migrations();
    if let Some(newer) = applied.iter().find(|v| !known.contains(v)) {
        return Ok(Outcome {
            ok: false,
            lines: vec![format!(
                "the schema has migration {newer}, which this release does not know: deploy the \
                 release that applied it"
            )],
            value: json!({ "applied": applied, "known": known }),
        });
    }
    let report = db::migrate(&core.pool).await?;
    let line = match report.current {
        Some(version) if report.applied.is_empty() => {
            format!("schema is up to date (migration {version})")
        }
        Some(version) => format!(
            "applied {} migrations; schema now at {version}",
            report.applied.len()
        ),
        None => "no migrations".into(),
    };
    Ok(Outcome::ok(
        vec![line],
        json!({ "applied": report.applied, "current": report.current }),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_parse_from_words() {
        let cli = parse(["keys", "revoke", "k-1", "--reason", "leaked key"]).expect("parses");
        assert!(matches!(
            cli.command,
            Command::Keys {
                command: KeysCommand::Revoke { ref kid, ref reason }
            } if kid == "k-1" && reason == "leaked key"
        ));
        let cli = parse(["--json", "keys", "rotate", "--purpose", "oauth"]).expect("parses");
        assert!(cli.json);
        assert!(
            parse(["keys", "revoke", "k-1"]).is_err(),
            "a revocation needs its reason"
        );
        assert!(parse(["keys", "rotate", "--purpose", "mail"]).is_err());
        assert!(parse(["reboot"]).is_err());
    }

    #[test]
    fn only_the_doctor_reads_the_queues_and_only_those_configured() {
        let doctor = needs_of(&Command::Doctor, |name| name == "K2B_WAKEUP_QUEUE_URL");
        assert!(doctor.wakeups && !doctor.live_updates && doctor.signing_keys);
        let status = needs_of(&Command::Migrate, |_| true);
        assert!(!status.wakeups && !status.live_updates);
    }

    #[test]
    fn ages_read_at_a_glance() {
        assert_eq!(age(None), "-");
        assert_eq!(age(Some(42.4)), "42s");
        assert_eq!(age(Some(600.0)), "10m");
        assert_eq!(age(Some(9000.0)), "2.5h");
    }
}
