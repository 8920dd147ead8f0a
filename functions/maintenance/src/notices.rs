//! The device notices: "new phone paired" (spec approvals §2.5), one mail per newly paired
//! device in the device's locale, and Cloud Login's "sign-in app enrolled" and "removed by an
//! administrator" (§3), in the installation's locale; each to the person's address, sent as
//! Core on the immediate lane through outgoing mail. The notice names the device and when it was paired, never a secret of the
//! pairing. Its idempotency key is the device id, so a run that dies after acceptance and before
//! `notified_at` is set cannot send it twice.

use k2b_core::Core;
use k2b_core::mail::accept::{self, MailContext};
use k2b_core::mail::policy::Caller;
use k2b_core::mail::{MailCode, MailError, validate};
use serde::Serialize;
use serde_json::json;

/// Devices looked at per run at most.
pub const BATCH: i64 = 100;
/// A device paired longer ago than this without its notice gets none (mail was not set up
/// then); the notice is about a pairing that just happened.
pub const NOTICE_WINDOW_HOURS: i32 = 24;

/// What one run did.
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize)]
pub struct NoticeReport {
    /// Notices handed to outgoing mail.
    pub sent: u64,
    /// Devices that get none: revoked, no address, or paired too long ago.
    pub skipped: u64,
    /// Left for the next run: outgoing mail could not take them now.
    pub deferred: u64,
}

#[derive(sqlx::FromRow)]
struct Unnotified {
    id: uuid::Uuid,
    name: String,
    platform: String,
    locale: Option<String>,
    created_at: chrono::DateTime<chrono::Utc>,
    revoked: bool,
    recent: bool,
    mail: Option<String>,
    display_name: Option<String>,
}

fn platform_label(platform: &str, german: bool) -> &'static str {
    match (platform, german) {
        ("ios", _) => "iPhone/iPad",
        ("android", _) => "Android",
        (_, true) => "Gerät",
        (_, false) => "device",
    }
}

/// The subject and text of a notice.
fn notice(device: &Unnotified) -> (String, String) {
    let german = device
        .locale
        .as_deref()
        .is_some_and(|l| l.to_ascii_lowercase().starts_with("de"));
    let at = device.created_at.format("%Y-%m-%d %H:%M UTC");
    let platform = platform_label(&device.platform, german);
    let greeting = device.display_name.as_deref().unwrap_or("");
    if german {
        (
            "Neues Telefon gekoppelt".to_string(),
            format!(
                "Hallo {greeting},\n\nam {at} wurde „{name}“ ({platform}) mit Ihrem Konto gekoppelt.\n\n\
                 Waren Sie das nicht, entfernen Sie das Gerät in Ihren Kontoeinstellungen und \
                 ändern Sie Ihr Passwort.\n",
                name = device.name
            ),
        )
    } else {
        (
            "New phone paired".to_string(),
            format!(
                "Hello {greeting},\n\n\"{name}\" ({platform}) was paired with your account on {at}.\n\n\
                 If this was not you, remove the device in your account settings and change \
                 your password.\n",
                name = device.name
            ),
        )
    }
}

/// One notice to hand to outgoing mail, for the row `id`.
struct Notice {
    id: uuid::Uuid,
    /// `None` (or not an address) when the notice is skipped.
    address: Option<String>,
    subject: String,
    text: String,
    key: String,
    scope: &'static str,
}

/// Hands each notice to outgoing mail as Core; returns the ids that are done (sent or skipped).
/// A notice outgoing mail cannot take now is left for the next run.
async fn deliver(core: &Core, notices: Vec<Notice>, report: &mut NoticeReport) -> Vec<uuid::Uuid> {
    let mut done = Vec::new();
    if notices.is_empty() {
        return done;
    }
    let objects = core.mail_objects.store().await;
    let ctx = MailContext {
        pool: &core.pool,
        objects,
        wakeups: core.wakeups.as_ref(),
        request_id: None,
    };
    let caller = Caller::core();
    for notice in notices {
        let address = notice
            .address
            .as_deref()
            .map(str::trim)
            .filter(|m| validate::is_valid_address(m));
        let Some(address) = address else {
            report.skipped += 1;
            done.push(notice.id);
            continue;
        };
        let message = validate::parse_message(&json!({
            "to": [address],
            "subject": notice.subject,
            "text": notice.text,
            "key": notice.key,
            "ref": {"scope": notice.scope, "id": notice.id.to_string()},
        }));
        let sent = match message {
            Ok(message) => accept::send(&ctx, &caller, message).await.map(|_| ()),
            Err(error) => Err(MailError::from(error)),
        };
        match sent {
            Ok(()) => {
                report.sent += 1;
                done.push(notice.id);
            }
            Err(error) => {
                report.deferred += 1;
                match error.code() {
                    // Outgoing mail is not set up (yet): try again next run.
                    Some(MailCode::MailUnavailable | MailCode::ProfileRequired) => {
                        tracing::debug!(row_id = %notice.id, scope = notice.scope, error = %error, "notice deferred");
                    }
                    _ => {
                        tracing::warn!(row_id = %notice.id, scope = notice.scope, error = %error, "notice deferred");
                    }
                }
            }
        }
    }
    done
}

/// Sends the notices of up to [`BATCH`] devices without one and marks them notified.
pub async fn run(core: &Core) -> Result<NoticeReport, MailError> {
    let mut report = NoticeReport::default();
    let mut tx = core.pool.begin().await?;
    let devices: Vec<Unnotified> = sqlx::query_as(
        "SELECT d.id, d.name, d.platform, d.locale, d.created_at,
                d.revoked_at IS NOT NULL AS revoked,
                d.created_at > now() - make_interval(hours => $2) AS recent,
                u.mail, u.display_name
           FROM auth.pwa_devices d JOIN auth.users u ON u.id = d.user_id
          WHERE d.notified_at IS NULL
          ORDER BY d.created_at
          LIMIT $1
            FOR UPDATE OF d SKIP LOCKED",
    )
    .bind(BATCH)
    .bind(NOTICE_WINDOW_HOURS)
    .fetch_all(&mut *tx)
    .await?;
    let notices = devices
        .iter()
        .map(|device| {
            let (subject, text) = notice(device);
            Notice {
                id: device.id,
                address: device
                    .mail
                    .clone()
                    .filter(|_| device.recent && !device.revoked),
                subject,
                text,
                key: format!("pwa-device-paired:{}", device.id),
                scope: "pwa.device",
            }
        })
        .collect();
    let notified = deliver(core, notices, &mut report).await;
    sqlx::query("UPDATE auth.pwa_devices SET notified_at = now() WHERE id = ANY($1)")
        .bind(&notified)
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(report)
}

#[derive(sqlx::FromRow)]
struct Authenticator {
    id: uuid::Uuid,
    name: String,
    at: chrono::DateTime<chrono::Utc>,
    assisted: bool,
    recent: bool,
    mail: Option<String>,
    display_name: Option<String>,
}

fn german(locale: &str) -> bool {
    locale.to_ascii_lowercase().starts_with("de")
}

/// "Authenticator enrolled" (spec approvals §3, the one-time enrollment notice).
fn enrolled_notice(device: &Authenticator, locale: &str) -> (String, String) {
    let at = device.at.format("%Y-%m-%d %H:%M UTC");
    let greeting = device.display_name.as_deref().unwrap_or("");
    let name = &device.name;
    match (german(locale), device.assisted) {
        (true, assisted) => (
            "Neue Anmelde-App eingerichtet".to_string(),
            format!(
                "Hallo {greeting},\n\nam {at} wurde „{name}“ {by}als Anmelde-App für Ihr Konto \
                 eingerichtet. Damit können Anmeldungen im Browser bestätigt werden.\n\n\
                 Waren Sie das nicht, entfernen Sie die App in Ihren Kontoeinstellungen.\n",
                by = if assisted {
                    "von einer Administratorin oder einem Administrator "
                } else {
                    ""
                },
            ),
        ),
        (false, assisted) => (
            "New sign-in app enrolled".to_string(),
            format!(
                "Hello {greeting},\n\n\"{name}\" was enrolled {by}as a sign-in app for your \
                 account on {at}. It can approve sign-ins in a browser.\n\n\
                 If this was not you, remove it in your account settings.\n",
                by = if assisted { "by an administrator " } else { "" },
            ),
        ),
    }
}

/// "Authenticator removed by an administrator".
fn revoked_notice(device: &Authenticator, locale: &str) -> (String, String) {
    let at = device.at.format("%Y-%m-%d %H:%M UTC");
    let greeting = device.display_name.as_deref().unwrap_or("");
    let name = &device.name;
    if german(locale) {
        (
            "Anmelde-App entfernt".to_string(),
            format!(
                "Hallo {greeting},\n\nam {at} hat eine Administratorin oder ein Administrator \
                 die Anmelde-App „{name}“ von Ihrem Konto entfernt.\n"
            ),
        )
    } else {
        (
            "Sign-in app removed".to_string(),
            format!(
                "Hello {greeting},\n\nan administrator removed the sign-in app \"{name}\" from \
                 your account on {at}.\n"
            ),
        )
    }
}

/// One kind of Cloud Login notice: which devices are due, and the column that marks it sent.
struct AuthenticatorNotice {
    at: &'static str,
    pending: &'static str,
    recent: &'static str,
    marker: &'static str,
    key: &'static str,
    compose: fn(&Authenticator, &str) -> (String, String),
}

/// Cloud Login's notices: one per newly enrolled authenticator (`notified_at`), and one per
/// authenticator an administrator removed (`revocation_notified_at`). Keys are the device id,
/// so a run that dies after acceptance sends none twice.
pub async fn run_cloud_login(core: &Core) -> Result<NoticeReport, MailError> {
    let mut report = NoticeReport::default();
    let locale = core
        .settings
        .app_locale()
        .await
        .unwrap_or_else(|_| "en".to_string());
    let mut tx = core.pool.begin().await?;
    let kinds: [AuthenticatorNotice; 2] = [
        AuthenticatorNotice {
            at: "d.created_at",
            pending: "d.notified_at IS NULL",
            recent: "d.revoked_at IS NULL AND d.created_at",
            marker: "notified_at",
            key: "app-device-enrolled",
            compose: enrolled_notice,
        },
        AuthenticatorNotice {
            at: "d.revoked_at",
            pending: "d.revocation_reason = 'admin' AND d.revocation_notified_at IS NULL",
            recent: "d.revoked_at",
            marker: "revocation_notified_at",
            key: "app-device-revoked",
            compose: revoked_notice,
        },
    ];
    for kind in kinds {
        let statement = format!(
            "SELECT d.id, d.name, {at} AS at, d.assisted,
                    {recent} > now() - make_interval(hours => $2) AS recent,
                    u.mail, u.display_name
               FROM auth.app_devices d JOIN auth.users u ON u.id = d.user_id
              WHERE {pending}
              ORDER BY {at}
              LIMIT $1
                FOR UPDATE OF d SKIP LOCKED",
            at = kind.at,
            recent = kind.recent,
            pending = kind.pending,
        );
        let devices: Vec<Authenticator> = sqlx::query_as(sqlx::AssertSqlSafe(statement))
            .bind(BATCH)
            .bind(NOTICE_WINDOW_HOURS)
            .fetch_all(&mut *tx)
            .await?;
        let notices = devices
            .iter()
            .map(|device| {
                let (subject, text) = (kind.compose)(device, &locale);
                Notice {
                    id: device.id,
                    address: device.mail.clone().filter(|_| device.recent),
                    subject,
                    text,
                    key: format!("{}:{}", kind.key, device.id),
                    scope: "app.device",
                }
            })
            .collect();
        let notified = deliver(core, notices, &mut report).await;
        let update = format!(
            "UPDATE auth.app_devices SET {} = now() WHERE id = ANY($1)",
            kind.marker
        );
        sqlx::query(sqlx::AssertSqlSafe(update))
            .bind(&notified)
            .execute(&mut *tx)
            .await?;
    }
    tx.commit().await?;
    Ok(report)
}
