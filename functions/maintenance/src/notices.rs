//! The "new phone paired" notice (spec approvals §2.5): one mail per newly paired device, to the
//! person's address, in the device's locale, sent as Core on the immediate lane through
//! outgoing mail. The notice names the device and when it was paired, never a secret of the
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
    if devices.is_empty() {
        return Ok(report);
    }
    let objects = core.mail_objects.store().await;
    let ctx = MailContext {
        pool: &core.pool,
        objects,
        wakeups: core.wakeups.as_ref(),
        request_id: None,
    };
    let caller = Caller::core();
    let mut notified = Vec::new();
    for device in &devices {
        let address = device
            .mail
            .as_deref()
            .map(str::trim)
            .filter(|m| validate::is_valid_address(m));
        let Some(address) = address.filter(|_| device.recent && !device.revoked) else {
            report.skipped += 1;
            notified.push(device.id);
            continue;
        };
        let (subject, text) = notice(device);
        let message = validate::parse_message(&json!({
            "to": [address],
            "subject": subject,
            "text": text,
            "key": format!("pwa-device-paired:{}", device.id),
            "ref": {"scope": "pwa.device", "id": device.id.to_string()},
        }))?;
        match accept::send(&ctx, &caller, message).await {
            Ok(_) => {
                report.sent += 1;
                notified.push(device.id);
            }
            Err(error) => {
                report.deferred += 1;
                match error.code() {
                    // Outgoing mail is not set up (yet): try again next run, within the window.
                    Some(MailCode::MailUnavailable | MailCode::ProfileRequired) => {
                        tracing::debug!(device_id = %device.id, error = %error, "pairing notice deferred");
                    }
                    _ => {
                        tracing::warn!(device_id = %device.id, error = %error, "pairing notice deferred");
                    }
                }
            }
        }
    }
    sqlx::query("UPDATE auth.pwa_devices SET notified_at = now() WHERE id = ANY($1)")
        .bind(&notified)
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(report)
}
