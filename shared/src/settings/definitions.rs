//! The platform settings this bundle reads: key, kind, default and meaning.

use serde_json::{Value, json};

use crate::http::locale::canonicalize_locale;
use crate::http::origin::canonical_origin;

/// What a setting holds, which decides how a value is validated and parsed from the command line.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum SettingKind {
    /// Any string.
    Text,
    /// Empty, or an absolute URL (an uploaded image arrives as a `data:` URI).
    Image,
    /// An http(s) URL or a host name; its canonical origin is the installation's origin.
    Origin,
    /// A BCP 47 language tag.
    Locale,
    Boolean,
    /// A finite number within the bounds.
    Number {
        min: f64,
        max: f64,
    },
    /// A list of strings.
    StringList,
}

/// One declared setting.
#[derive(Debug, Clone, Copy)]
pub struct SettingDef {
    pub key: &'static str,
    pub kind: SettingKind,
    pub default: DefaultValue,
    pub description: &'static str,
}

/// A setting's default, as a constant.
#[derive(Debug, Clone, Copy)]
pub enum DefaultValue {
    Text(&'static str),
    Boolean(bool),
    Number(f64),
    List(&'static [&'static str]),
}

impl DefaultValue {
    pub fn to_value(self) -> Value {
        match self {
            DefaultValue::Text(text) => json!(text),
            DefaultValue::Boolean(flag) => json!(flag),
            DefaultValue::Number(number) => json!(number),
            DefaultValue::List(items) => json!(items),
        }
    }
}

const fn def(
    key: &'static str,
    kind: SettingKind,
    default: DefaultValue,
    description: &'static str,
) -> SettingDef {
    SettingDef {
        key,
        kind,
        default,
        description,
    }
}

/// Every setting the bundle knows, with the reference platform's defaults.
pub const SETTINGS: &[SettingDef] = &[
    def(
        "app.name",
        SettingKind::Text,
        DefaultValue::Text("My App"),
        "Installation display name",
    ),
    def(
        "app.url",
        SettingKind::Origin,
        DefaultValue::Text("localhost:3000"),
        "Public URL of the installation (with or without scheme); falls back to APP_URL",
    ),
    def(
        "app.locale",
        SettingKind::Locale,
        DefaultValue::Text("en"),
        "Default BCP 47 locale",
    ),
    def(
        "app.logo",
        SettingKind::Image,
        DefaultValue::Text(""),
        "Logo image (a data: URI or a link)",
    ),
    def(
        "app.favicon",
        SettingKind::Image,
        DefaultValue::Text(""),
        "Favicon image",
    ),
    def(
        "freeipa.groups.admin",
        SettingKind::StringList,
        DefaultValue::List(&["admins"]),
        "FreeIPA groups whose members are administrators",
    ),
    def(
        "user.category.guest.enabled",
        SettingKind::Boolean,
        DefaultValue::Boolean(true),
        "Guest accounts may sign in and use user-bound credentials",
    ),
    def(
        "user.category.login.enabled",
        SettingKind::Boolean,
        DefaultValue::Boolean(true),
        "Local full accounts may sign in and use user-bound credentials",
    ),
    def(
        "user.category.freeipa.enabled",
        SettingKind::Boolean,
        DefaultValue::Boolean(true),
        "FreeIPA accounts may sign in and use user-bound credentials",
    ),
    def(
        "user.app_approval.enabled",
        SettingKind::Boolean,
        DefaultValue::Boolean(false),
        "Cloud Login: authenticator apps may enroll and approve browser sign-ins",
    ),
    def(
        "user.app_approval.admin_pairing",
        SettingKind::Boolean,
        DefaultValue::Boolean(false),
        "Cloud Login: administrators may enroll an authenticator for another person",
    ),
    def(
        "user.app_approval.origin",
        SettingKind::Text,
        DefaultValue::Text("https://cloud-login.pwa.k2b.dev"),
        "Cloud Login: origin of the authenticator app (https, path /)",
    ),
    def(
        "user.session.expiry_hours",
        SettingKind::Number {
            min: 1.0,
            max: 8760.0,
        },
        DefaultValue::Number(8.0),
        "How long a web session stays valid, in hours",
    ),
    def(
        "security.rate_limit_per_second",
        SettingKind::Number {
            min: 1.0,
            max: 100_000.0,
        },
        DefaultValue::Number(60.0),
        "Requests per second per client address on rate-limited routes",
    ),
    def(
        "outgoing_mail.content_retention_days",
        SettingKind::Number {
            min: 1.0,
            max: 36500.0,
        },
        DefaultValue::Number(90.0),
        "Days an outgoing message keeps its text, HTML and headers",
    ),
    def(
        "outgoing_mail.record_retention_days",
        SettingKind::Number {
            min: 1.0,
            max: 36500.0,
        },
        DefaultValue::Number(365.0),
        "Days an outgoing message's record is kept",
    ),
];

/// The definition of `key`, if the bundle knows it.
pub fn find(key: &str) -> Option<&'static SettingDef> {
    SETTINGS.iter().find(|def| def.key == key)
}

/// Checks a value against its kind and returns it normalised (trimmed, canonical), or why not.
pub fn validate(def: &SettingDef, value: Value) -> Result<Value, String> {
    match def.kind {
        SettingKind::Text => match value {
            Value::String(_) => Ok(value),
            _ => Err("must be a string".into()),
        },
        SettingKind::Image => match value {
            Value::String(text) => {
                let trimmed = text.trim();
                if trimmed.is_empty() || url::Url::parse(trimmed).is_ok() {
                    Ok(Value::String(trimmed.to_string()))
                } else {
                    Err("must be empty or an absolute URL (for example a data: URI)".into())
                }
            }
            _ => Err("must be a string".into()),
        },
        SettingKind::Origin => match value {
            Value::String(text) if canonical_origin(&text).is_some() => {
                Ok(Value::String(text.trim().to_string()))
            }
            _ => Err("must be an http(s) URL or a host name".into()),
        },
        SettingKind::Locale => match value.as_str().and_then(canonicalize_locale) {
            Some(tag) => Ok(Value::String(tag)),
            None => Err("must be a BCP 47 language tag such as en or de-CH".into()),
        },
        SettingKind::Boolean => match value {
            Value::Bool(_) => Ok(value),
            _ => Err("must be true or false".into()),
        },
        SettingKind::Number { min, max } => match value.as_f64() {
            Some(number) if number.is_finite() && number >= min && number <= max => Ok(value),
            _ => Err(format!("must be a number from {min} to {max}")),
        },
        SettingKind::StringList => match &value {
            Value::Array(items) if items.iter().all(Value::is_string) => Ok(value),
            _ => Err("must be a list of strings".into()),
        },
    }
}

/// Whether a stored value has its kind's JSON type (the full rules ran when it was written;
/// repeating them on every read would, for example, re-parse a 10 MiB logo URI).
pub fn has_kind_type(def: &SettingDef, value: &Value) -> bool {
    match def.kind {
        SettingKind::Text | SettingKind::Image | SettingKind::Origin | SettingKind::Locale => {
            value.is_string()
        }
        SettingKind::Boolean => value.is_boolean(),
        SettingKind::Number { .. } => value.as_f64().is_some_and(f64::is_finite),
        SettingKind::StringList => value
            .as_array()
            .is_some_and(|items| items.iter().all(Value::is_string)),
    }
}

/// Parses a command-line argument into a value of the setting's kind (lists take a JSON array or
/// comma-separated text).
pub fn parse_text(def: &SettingDef, raw: &str) -> Result<Value, String> {
    let value = match def.kind {
        SettingKind::Text | SettingKind::Image | SettingKind::Origin | SettingKind::Locale => {
            Value::String(raw.to_string())
        }
        SettingKind::Boolean => match raw.trim() {
            "true" => Value::Bool(true),
            "false" => Value::Bool(false),
            _ => return Err("must be true or false".into()),
        },
        SettingKind::Number { .. } => {
            let number: f64 = raw
                .trim()
                .parse()
                .map_err(|_| "must be a number".to_string())?;
            json!(number)
        }
        SettingKind::StringList => {
            let trimmed = raw.trim();
            if trimmed.starts_with('[') {
                serde_json::from_str(trimmed).map_err(|_| "must be a JSON list of strings")?
            } else {
                json!(
                    trimmed
                        .split(',')
                        .map(str::trim)
                        .filter(|s| !s.is_empty())
                        .collect::<Vec<_>>()
                )
            }
        }
    };
    validate(def, value)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn setting(key: &str) -> &'static SettingDef {
        find(key).expect("known setting")
    }

    #[test]
    fn defaults_match_the_reference_platform() {
        assert_eq!(setting("app.name").default.to_value(), json!("My App"));
        assert_eq!(setting("app.locale").default.to_value(), json!("en"));
        assert_eq!(setting("app.logo").default.to_value(), json!(""));
        assert_eq!(
            setting("app.url").default.to_value(),
            json!("localhost:3000")
        );
        assert_eq!(
            setting("freeipa.groups.admin").default.to_value(),
            json!(["admins"])
        );
        assert_eq!(
            setting("user.session.expiry_hours").default.to_value(),
            json!(8.0)
        );
        for def in SETTINGS {
            assert!(
                validate(def, def.default.to_value()).is_ok(),
                "{} default",
                def.key
            );
        }
    }

    #[test]
    fn validation_follows_the_kind() {
        let logo = setting("app.logo");
        assert_eq!(validate(logo, json!("  ")), Ok(json!("")));
        assert!(validate(logo, json!("data:image/png;base64,AAAA")).is_ok());
        assert!(validate(logo, json!("https://logo.example.test/l.png")).is_ok());
        assert!(validate(logo, json!("not a url")).is_err());
        assert_eq!(
            validate(setting("app.locale"), json!("de-ch")),
            Ok(json!("de-CH"))
        );
        assert!(validate(setting("app.locale"), json!("??")).is_err());
        assert!(validate(setting("app.url"), json!("ftp://x")).is_err());
        assert!(validate(setting("user.session.expiry_hours"), json!(0.5)).is_err());
        assert!(validate(setting("user.category.guest.enabled"), json!("true")).is_err());
    }

    #[test]
    fn command_line_values_parse_by_kind() {
        assert_eq!(
            parse_text(setting("app.name"), "Example Cloud"),
            Ok(json!("Example Cloud"))
        );
        assert_eq!(
            parse_text(setting("user.category.login.enabled"), "false"),
            Ok(json!(false))
        );
        assert_eq!(
            parse_text(setting("user.session.expiry_hours"), "24"),
            Ok(json!(24.0))
        );
        assert_eq!(
            parse_text(setting("freeipa.groups.admin"), "admins, cloud-admins"),
            Ok(json!(["admins", "cloud-admins"]))
        );
        assert_eq!(
            parse_text(setting("freeipa.groups.admin"), r#"["a"]"#),
            Ok(json!(["a"]))
        );
        assert!(parse_text(setting("user.category.login.enabled"), "yes").is_err());
    }
}
