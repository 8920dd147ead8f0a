//! Outbox configuration: which table, which rows, in which order, and the claim lock key.

use std::time::Duration;

use super::OutboxError;

/// How long a claim lasts; also bounds the claim statements and the lock wait.
pub const DEFAULT_CLAIM: Duration = Duration::from_secs(30);
/// Rows per claim at most.
pub const DEFAULT_BATCH_SIZE: i64 = 100;
/// A publish slower than this counts as failed (and is retried): well below the claim period,
/// so a lease cannot end while most of its publishes are still waiting.
pub const DEFAULT_PUBLISH_TIMEOUT: Duration = Duration::from_secs(10);

/// One outbox: a table (or the rows of it matching `filter`) drained in `sequence` order, one
/// ordering key at a time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutboxConfig {
    /// Table, optionally schema-qualified (`events.outbox`).
    pub table: String,
    /// Log source name (`events:live:mail`).
    pub name: String,
    /// The ordering-key column: rows of one key are published in sequence order.
    pub order_by: String,
    /// The insertion-order column.
    pub sequence: String,
    /// Fixed `column = value` conditions (text columns) selecting this outbox's rows, in
    /// declaration order.
    pub filter: Vec<(String, String)>,
    /// How long a claim holds its rows.
    pub claim: Duration,
    /// Rows per claim at most.
    pub batch_size: i64,
    /// Bound on one publish.
    pub publish_timeout: Duration,
}

/// An identifier part: `^[a-z_][a-z0-9_]*$` (lowercase only).
fn is_identifier_part(part: &str) -> bool {
    let bytes = part.as_bytes();
    !bytes.is_empty()
        && (bytes[0].is_ascii_lowercase() || bytes[0] == b'_')
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'_')
}

/// A possibly qualified identifier: every `.`-separated part is an identifier part.
pub fn is_identifier(name: &str) -> bool {
    name.split('.').all(is_identifier_part)
}

impl OutboxConfig {
    pub fn new(table: &str, name: &str, order_by: &str, sequence: &str) -> OutboxConfig {
        OutboxConfig {
            table: table.into(),
            name: name.into(),
            order_by: order_by.into(),
            sequence: sequence.into(),
            filter: Vec::new(),
            claim: DEFAULT_CLAIM,
            batch_size: DEFAULT_BATCH_SIZE,
            publish_timeout: DEFAULT_PUBLISH_TIMEOUT,
        }
    }

    /// Adds a fixed `column = value` condition.
    pub fn filter(mut self, column: &str, value: &str) -> OutboxConfig {
        self.filter.push((column.into(), value.into()));
        self
    }

    /// Checks every identifier before any query: `Invalid outbox <label>: <name>`.
    pub fn validate(&self) -> Result<(), OutboxError> {
        let checks = [
            ("table", &self.table),
            ("ordering column", &self.order_by),
            ("sequence column", &self.sequence),
        ];
        for (label, name) in checks {
            if !is_identifier(name) {
                return Err(OutboxError::InvalidConfig(format!(
                    "Invalid outbox {label}: {name}"
                )));
            }
        }
        for (column, _) in &self.filter {
            if !is_identifier(column) {
                return Err(OutboxError::InvalidConfig(format!(
                    "Invalid outbox filter column: {column}"
                )));
            }
        }
        if self.batch_size < 1 || self.claim.is_zero() {
            return Err(OutboxError::InvalidConfig(
                "Invalid outbox batch size or claim period".into(),
            ));
        }
        Ok(())
    }

    /// The claim lock key: the table as configured, `:`, and the filter as compact JSON with its
    /// entries sorted by column name descending — byte-identical to the TypeScript platform's
    /// key, so replicas of both take turns on the same lock.
    pub fn lock_key(&self) -> String {
        let mut entries: Vec<&(String, String)> = self.filter.iter().collect();
        entries.sort_by(|a, b| b.0.cmp(&a.0));
        let body: Vec<String> = entries
            .iter()
            .map(|(column, value)| {
                format!(
                    "{}:{}",
                    serde_json::Value::String(column.clone()),
                    serde_json::Value::String(value.clone())
                )
            })
            .collect();
        format!("{}:{{{}}}", self.table, body.join(","))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Scenario 1: invalid identifiers are refused at construction, before any query.
    #[test]
    fn scenario_1_identifiers_are_validated() {
        let bad_table = OutboxConfig::new("events.outbox; DROP TABLE x", "n", "key", "seq");
        assert_eq!(
            bad_table.validate().expect_err("table").to_string(),
            "Invalid outbox table: events.outbox; DROP TABLE x"
        );
        let bad_sequence = OutboxConfig::new("events.outbox", "n", "key", "seq desc");
        assert_eq!(
            bad_sequence.validate().expect_err("sequence").to_string(),
            "Invalid outbox sequence column: seq desc"
        );
        let bad_order = OutboxConfig::new("events.outbox", "n", "Key", "seq");
        assert!(
            bad_order
                .validate()
                .expect_err("order")
                .to_string()
                .contains("ordering column")
        );
        let bad_filter =
            OutboxConfig::new("events.outbox", "n", "key", "seq").filter("app id", "x");
        assert!(
            bad_filter
                .validate()
                .expect_err("filter")
                .to_string()
                .contains("filter column")
        );
        assert!(
            OutboxConfig::new("inventory.stock_reports", "n", "item_id", "seq")
                .validate()
                .is_ok()
        );
    }

    #[test]
    fn lock_key_sorts_filter_columns_descending_in_compact_json() {
        let config = OutboxConfig::new("events.outbox", "events:live:mail", "ordering_key", "seq")
            .filter("app_id", "mail")
            .filter("kind", "live");
        assert_eq!(
            config.lock_key(),
            r#"events.outbox:{"kind":"live","app_id":"mail"}"#
        );
        let plain = OutboxConfig::new("inventory.stock_reports", "n", "item_id", "seq");
        assert_eq!(plain.lock_key(), "inventory.stock_reports:{}");
        let quoted = OutboxConfig::new("t", "n", "k", "s").filter("a", "x\"y\\z\n");
        assert_eq!(quoted.lock_key(), r#"t:{"a":"x\"y\\z\n"}"#);
    }

    #[test]
    fn identifiers() {
        for ok in ["events.outbox", "_t", "a1.b_2"] {
            assert!(is_identifier(ok), "{ok}");
        }
        for bad in ["", "Events", "1a", "a.", "a-b", "a b", "a;b"] {
            assert!(!is_identifier(bad), "{bad}");
        }
    }
}
