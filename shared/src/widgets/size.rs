//! Widget sizes: `small` (1×1), `medium` (2×1), `large` (2×2), in that canonical order.

use serde::{Deserialize, Serialize};
use serde_json::Value;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WidgetSize {
    Small,
    Medium,
    Large,
}

impl WidgetSize {
    pub const ALL: [WidgetSize; 3] = [WidgetSize::Small, WidgetSize::Medium, WidgetSize::Large];

    pub fn as_str(self) -> &'static str {
        match self {
            WidgetSize::Small => "small",
            WidgetSize::Medium => "medium",
            WidgetSize::Large => "large",
        }
    }

    /// The size named exactly `value`.
    pub fn parse(value: &str) -> Option<WidgetSize> {
        WidgetSize::ALL.into_iter().find(|s| s.as_str() == value)
    }

    fn from_value(value: &Value) -> Option<WidgetSize> {
        value.as_str().and_then(WidgetSize::parse)
    }
}

impl std::fmt::Display for WidgetSize {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The sizes a declaration offers and its default: the known declared sizes in canonical order
/// (duplicates collapse; only `large` when none remain), and the declared default when it is
/// offered, else the largest offered size. Values of the wrong type count as absent.
pub fn resolve_sizes(
    sizes: Option<&Value>,
    default_size: Option<&Value>,
) -> (Vec<WidgetSize>, WidgetSize) {
    let declared: Vec<WidgetSize> = sizes
        .and_then(Value::as_array)
        .map(|items| items.iter().filter_map(WidgetSize::from_value).collect())
        .unwrap_or_default();
    let mut offered: Vec<WidgetSize> = WidgetSize::ALL
        .into_iter()
        .filter(|size| declared.contains(size))
        .collect();
    if offered.is_empty() {
        offered.push(WidgetSize::Large);
    }
    let default = default_size
        .and_then(WidgetSize::from_value)
        .filter(|size| offered.contains(size))
        .unwrap_or(offered[offered.len() - 1]);
    (offered, default)
}

/// The size to ask a widget for: the requested one if the widget offers it, else its default
/// (a missing or unknown request gets the default too).
pub fn fit_size(
    requested: Option<&str>,
    offered: &[WidgetSize],
    default: WidgetSize,
) -> WidgetSize {
    requested
        .and_then(WidgetSize::parse)
        .filter(|size| offered.contains(size))
        .unwrap_or(default)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn resolve(sizes: Value, default: Value) -> (Vec<WidgetSize>, WidgetSize) {
        resolve_sizes(
            (!sizes.is_null()).then_some(&sizes),
            (!default.is_null()).then_some(&default),
        )
    }

    /// Scenario 27: size resolution and fitting.
    #[test]
    fn scenario_27_sizes_resolve_and_fit() {
        use WidgetSize::*;
        assert_eq!(resolve(Value::Null, Value::Null), (vec![Large], Large));
        assert_eq!(
            resolve(json!(["medium", "small"]), Value::Null),
            (vec![Small, Medium], Medium)
        );
        assert_eq!(
            resolve(json!(["medium", "small"]), json!("small")),
            (vec![Small, Medium], Small)
        );
        assert_eq!(
            resolve(json!(["huge"]), json!("small")),
            (vec![Large], Large)
        );
        let (offered, default) = resolve(json!(["small", "medium"]), json!("small"));
        assert_eq!(fit_size(Some("medium"), &offered, default), Medium);
        assert_eq!(fit_size(Some("large"), &offered, default), Small);
        assert_eq!(fit_size(None, &offered, default), Small);
        assert_eq!(fit_size(Some("huge"), &offered, default), Small);
    }

    #[test]
    fn duplicates_collapse_and_wrong_types_degrade() {
        use WidgetSize::*;
        assert_eq!(
            resolve(json!(["large", "small", "large", 3, null]), json!(7)),
            (vec![Small, Large], Large)
        );
        assert_eq!(
            resolve(json!("small"), json!("small")),
            (vec![Large], Large)
        );
    }
}
