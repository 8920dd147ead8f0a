//! The small pure rules acceptance and delivery share (spec mail §5, §6): the bulk backlog, the
//! pacing slot and drain continuation, retry backoff, the Message-ID, the sender's display name,
//! and which SMTP answers are worth retrying.

use std::time::Duration;

use uuid::Uuid;

/// A profile's bulk backlog may hold this many minutes of mail at its pace: what it can send in a
/// day, the life of a message before its deadline.
pub const BACKLOG_MINUTES: i64 = 24 * 60;
/// The longest a drain continuation waits: the recovery scan runs this often anyway, and fresh
/// mail coalesced behind a long wait must not sit longer than that.
pub const MAX_CONTINUATION_DELAY_MS: i64 = 30_000;
/// The first retry waits this long; each further attempt doubles it.
pub const FIRST_BACKOFF: Duration = Duration::from_secs(60);
/// The longest retry wait.
pub const MAX_BACKOFF: Duration = Duration::from_secs(60 * 60);

/// Whether adding `added` bulk messages to a profile that already has `queued` would exceed a
/// day at its pace. Adding nothing never fills it, so a batch of known keys always replays.
pub fn backlog_full(queued: i64, added: i64, pace_per_minute: i32) -> bool {
    added > 0 && queued.saturating_add(added) > i64::from(pace_per_minute) * BACKLOG_MINUTES
}

/// Milliseconds between two bulk sends at `pace_per_minute`, fractional so that paces which do
/// not divide a minute keep their exact rate.
pub fn slot_ms(pace_per_minute: i32) -> f64 {
    60_000.0 / f64::from(pace_per_minute.max(1))
}

/// How long a drain waits before its next run: until both the pacing gate (`slot`) and the
/// earliest queued message (`due`) are open, at most [`MAX_CONTINUATION_DELAY_MS`]. All values
/// are epoch milliseconds.
pub fn continuation_delay_ms(now: i64, slot: i64, due: i64) -> i64 {
    slot.max(due)
        .saturating_sub(now)
        .clamp(0, MAX_CONTINUATION_DELAY_MS)
}

/// The wait before the next try after `attempts` tries: 1, 2, 4 … 32 minutes, then an hour.
pub fn backoff(attempts: i32) -> Duration {
    // Beyond six doublings the cap holds anyway; stopping there keeps the shift in range.
    let doublings = attempts.saturating_sub(1).clamp(0, 6).unsigned_abs();
    (FIRST_BACKOFF * 2u32.pow(doublings)).min(MAX_BACKOFF)
}

/// The fixed `Message-ID` of a message: `<id@domain>`, the domain being the profile's from
/// address after its last `@`, lowercased. Retries reuse it, so receivers can drop duplicates.
pub fn message_id_header(id: Uuid, from_address: &str) -> String {
    let domain = from_address
        .rsplit_once('@')
        .map_or(from_address, |(_, domain)| domain);
    format!("<{id}@{}>", domain.to_lowercase())
}

/// The sender's display name: the message's `fromName`, else the profile's name, else the
/// registered app's name, else the app id; empty names are skipped.
pub fn display_name<'a>(
    from_name: Option<&'a str>,
    profile_name: Option<&'a str>,
    app_name: Option<&'a str>,
    app_id: &'a str,
) -> &'a str {
    [from_name, profile_name, app_name]
        .into_iter()
        .flatten()
        .find(|name| !name.is_empty())
        .unwrap_or(app_id)
}

/// Whether a failed attempt may be retried: no SMTP code (connection, timeout) or a transient one.
pub fn is_retryable(code: Option<u16>) -> bool {
    code.is_none_or(|code| code < 500)
}

/// Whether a message whose every recipient was rejected may be retried: if any rejection was
/// transient, that recipient may still take it.
pub fn all_rejected_retryable(codes: &[u16]) -> bool {
    codes.iter().any(|code| (400..500).contains(code))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Scenario 16.
    #[test]
    fn backlog_allows_exactly_one_day_at_the_profile_pace() {
        assert!(!backlog_full(1439, 1, 1));
        assert!(backlog_full(1440, 1, 1));
        assert!(!backlog_full(86_399, 1, 60));
        assert!(backlog_full(86_399, 2, 60));
    }

    #[test]
    fn adding_nothing_never_fills_the_backlog() {
        assert!(!backlog_full(9_000_000, 0, 1));
        assert!(!backlog_full(i64::MAX, 0, 1));
    }

    /// Scenario 17.
    #[test]
    fn slots_are_fractional_milliseconds_per_message() {
        assert_eq!(slot_ms(1), 60_000.0);
        assert_eq!(slot_ms(60), 1000.0);
        assert!((slot_ms(7) - 8_571.428_571).abs() < 1e-6);
        assert_eq!(slot_ms(6000), 10.0);
    }

    /// Scenario 17.
    #[test]
    fn a_drain_waits_for_both_the_slot_and_the_due_message() {
        assert_eq!(continuation_delay_ms(1000, 4000, 2000), 3000);
        assert_eq!(continuation_delay_ms(1000, 500, 500), 0);
        assert_eq!(continuation_delay_ms(1000, 2000, 10_000), 9000);
    }

    #[test]
    fn a_drain_never_waits_longer_than_the_recovery_interval() {
        assert_eq!(
            continuation_delay_ms(1000, 2000, 1000 + 60 * 60_000),
            30_000
        );
        assert_eq!(continuation_delay_ms(1000, 61_000, 1000), 30_000);
        assert_eq!(continuation_delay_ms(i64::MIN, i64::MAX, 0), 30_000);
    }

    /// Scenario 21.
    #[test]
    fn backoff_doubles_from_one_minute_and_caps_at_one_hour() {
        let minutes: Vec<u64> = [1, 2, 3, 6, 7, 1000, i32::MAX]
            .map(|n| backoff(n).as_secs() / 60)
            .to_vec();
        assert_eq!(minutes, [1, 2, 4, 32, 60, 60, 60]);
        assert_eq!(backoff(0), FIRST_BACKOFF);
    }

    /// Scenario 21.
    #[test]
    fn the_message_id_uses_the_domain_of_the_from_address() {
        let id = Uuid::nil();
        assert_eq!(
            message_id_header(id, "alerts@Example.ORG"),
            format!("<{id}@example.org>")
        );
        assert_eq!(
            message_id_header(id, "\"a@b\"@mail.example.org"),
            format!("<{id}@mail.example.org>")
        );
    }

    /// Scenario 21.
    #[test]
    fn the_display_name_prefers_the_override_then_the_profile_then_the_app() {
        let name = display_name(Some("Override"), Some("Profile"), Some("Inventory"), "inv");
        assert_eq!(name, "Override");
        assert_eq!(
            display_name(None, Some("Profile"), Some("Inventory"), "inv"),
            "Profile"
        );
        assert_eq!(
            display_name(None, None, Some("Inventory"), "inv"),
            "Inventory"
        );
        assert_eq!(display_name(Some(""), None, None, "inv"), "inv");
    }

    /// Scenario 21.
    #[test]
    fn transient_and_codeless_failures_are_retried_permanent_ones_are_not() {
        assert!(is_retryable(Some(451)));
        assert!(!is_retryable(Some(550)));
        assert!(is_retryable(None));
    }

    /// Scenario 21.
    #[test]
    fn all_rejected_mail_is_retried_if_any_rejection_was_transient() {
        assert!(all_rejected_retryable(&[451, 550]));
        assert!(all_rejected_retryable(&[550, 451]));
        assert!(!all_rejected_retryable(&[550, 553]));
        assert!(!all_rejected_retryable(&[]));
    }
}
