//! The widget response contract: what Core accepts from an app and re-serializes for the
//! browser. Unknown keys are dropped at every level; string limits count UTF-16 code units (as
//! the browser does); links must resolve to http(s).

use std::sync::LazyLock;

use serde::Serialize;
use serde_json::{Map, Value};

const TEXT: usize = 10_000;
const LABEL: usize = 500;
const ICON: usize = 120;
const CLASS: usize = 500;
const HREF: usize = 2_048;
const MAX_BLOCKS: usize = 24;
const MAX_LIST_ITEMS: usize = 100;
const MAX_PILLS: usize = 50;

/// Where a response broke the contract (a JSON path, never a value).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("widget response is invalid at {0}")]
pub struct SchemaViolation(pub String);

/// A widget's answer, stripped to the contract. String limits count UTF-16 code units (so a
/// limit of N allows at most N characters); links are at most 2048 long and resolve to http(s).
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct WidgetResponse {
    #[schema(max_length = 500)]
    pub title: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(max_length = 120, nullable = false)]
    pub icon: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(min_length = 1, max_length = 2048, nullable = false)]
    pub href: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(max_length = 500, nullable = false)]
    pub meta: Option<String>,
    #[schema(max_items = 24)]
    pub blocks: Vec<Block>,
}

/// A block of a widget, by its `kind`.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
#[serde(tag = "kind", rename_all = "lowercase")]
#[schema(as = WidgetBlock)]
pub enum Block {
    Stat(StatBlock),
    List(ListBlock),
    Status(StatusBlock),
    Pills(PillsBlock),
    Placeholder(PlaceholderBlock),
    Hero(HeroBlock),
}

#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = WidgetStatBlock)]
pub struct StatBlock {
    /// A string (≤ 10 000) or a number.
    #[schema(value_type = TextOrNumber)]
    pub value: Value,
    #[schema(max_length = 500)]
    pub label: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(max_length = 10000, nullable = false)]
    pub sub: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(max_length = 500, nullable = false)]
    pub value_class: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub accent: Option<Accent>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub grow: Option<bool>,
}

#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
#[schema(as = WidgetAccent)]
pub struct Accent {
    #[schema(value_type = Tone)]
    pub tone: String,
    #[schema(max_length = 120)]
    pub icon: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(max_length = 500, nullable = false)]
    pub text: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = WidgetListBlock)]
pub struct ListBlock {
    #[schema(max_items = 100)]
    pub items: Vec<ListItem>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(max_length = 10000, nullable = false)]
    pub empty_message: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub grow: Option<bool>,
}

#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = WidgetListItem)]
pub struct ListItem {
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(max_length = 120, nullable = false)]
    pub icon: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Tone>, nullable = false)]
    pub icon_tone: Option<String>,
    #[schema(max_length = 500)]
    pub label: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(max_length = 10000, nullable = false)]
    pub sub: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(max_length = 500, nullable = false)]
    pub meta: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(min_length = 1, max_length = 2048, nullable = false)]
    pub href: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
#[schema(as = WidgetStatusBlock)]
pub struct StatusBlock {
    #[schema(value_type = StatusTone)]
    pub tone: String,
    #[schema(max_length = 500)]
    pub title: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(max_length = 10000, nullable = false)]
    pub message: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(max_length = 120, nullable = false)]
    pub icon: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub grow: Option<bool>,
}

#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
#[schema(as = WidgetPillsBlock)]
pub struct PillsBlock {
    #[schema(max_items = 50)]
    pub pills: Vec<Pill>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub grow: Option<bool>,
}

#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
#[schema(as = WidgetPill)]
pub struct Pill {
    #[schema(max_length = 500)]
    pub label: String,
    /// A string (≤ 10 000) or a number.
    #[schema(value_type = TextOrNumber)]
    pub value: Value,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Tone>, nullable = false)]
    pub tone: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(min_length = 1, max_length = 2048, nullable = false)]
    pub href: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
#[schema(as = WidgetPlaceholderBlock)]
pub struct PlaceholderBlock {
    #[schema(max_length = 500)]
    pub title: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(max_length = 10000, nullable = false)]
    pub description: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(max_length = 120, nullable = false)]
    pub icon: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
#[schema(as = WidgetHeroBlock)]
pub struct HeroBlock {
    #[schema(max_length = 10000)]
    pub title: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(max_length = 10000, nullable = false)]
    pub subtitle: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(max_length = 120, nullable = false)]
    pub icon: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Tone>, nullable = false)]
    pub tone: Option<String>,
}

/// The schema of a `value`: a string of at most 10 000 characters, or a finite number.
pub struct TextOrNumber;

impl utoipa::PartialSchema for TextOrNumber {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        use utoipa::openapi::{ObjectBuilder, OneOfBuilder, Type};
        OneOfBuilder::new()
            .item(
                ObjectBuilder::new()
                    .schema_type(Type::String)
                    .max_length(Some(TEXT)),
            )
            .item(ObjectBuilder::new().schema_type(Type::Number))
            .description(Some("A string of at most 10 000 characters, or a number."))
            .into()
    }
}

impl utoipa::ToSchema for TextOrNumber {
    fn name() -> std::borrow::Cow<'static, str> {
        "WidgetValue".into()
    }
}

/// The schema of a tone: one of `TONES`.
pub struct Tone;

impl utoipa::PartialSchema for Tone {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        utoipa::openapi::ObjectBuilder::new()
            .schema_type(utoipa::openapi::Type::String)
            .enum_values(Some(TONES))
            .into()
    }
}

impl utoipa::ToSchema for Tone {
    fn name() -> std::borrow::Cow<'static, str> {
        "WidgetTone".into()
    }
}

/// The schema of a status block's tone: one of `STATUS_TONES`.
pub struct StatusTone;

impl utoipa::PartialSchema for StatusTone {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        utoipa::openapi::ObjectBuilder::new()
            .schema_type(utoipa::openapi::Type::String)
            .enum_values(Some(STATUS_TONES))
            .into()
    }
}

impl utoipa::ToSchema for StatusTone {
    fn name() -> std::borrow::Cow<'static, str> {
        "WidgetStatusTone".into()
    }
}

/// Length as the browser counts it (UTF-16 code units).
pub fn utf16_len(value: &str) -> usize {
    // UTF-8 never takes fewer bytes than UTF-16 code units: short strings skip the count.
    if value.len() <= 1 {
        value.len()
    } else {
        value.encode_utf16().count()
    }
}

fn within(value: &str, max: usize) -> bool {
    value.len() <= max || utf16_len(value) <= max
}

static HREF_BASE: LazyLock<Option<url::Url>> =
    LazyLock::new(|| url::Url::parse("https://cloud.invalid/").ok());

/// A link the board may render: 1..2048 characters, no backslash, no control characters
/// (C0, DEL, C1), and resolving against `https://cloud.invalid` to an http(s) URL. Relative
/// paths, fragments and queries pass as written.
pub fn is_safe_href(href: &str) -> bool {
    let length = utf16_len(href);
    if length == 0 || length > HREF {
        return false;
    }
    if href
        .chars()
        .any(|c| c == '\\' || c <= '\u{1f}' || ('\u{7f}'..='\u{9f}').contains(&c))
    {
        return false;
    }
    let Some(base) = HREF_BASE.as_ref() else {
        return false;
    };
    base.join(href)
        .is_ok_and(|url| matches!(url.scheme(), "http" | "https"))
}

const TONES: [&str; 5] = ["emerald", "amber", "red", "blue", "zinc"];
const STATUS_TONES: [&str; 4] = ["ok", "warn", "error", "info"];

/// Field access on one object with the path for errors.
struct Fields<'a> {
    map: &'a Map<String, Value>,
    path: String,
}

impl<'a> Fields<'a> {
    fn of(value: &'a Value, path: &str) -> Result<Fields<'a>, SchemaViolation> {
        value
            .as_object()
            .map(|map| Fields {
                map,
                path: path.to_string(),
            })
            .ok_or_else(|| SchemaViolation(path.to_string()))
    }

    fn fail(&self, key: &str) -> SchemaViolation {
        SchemaViolation(format!("{}.{key}", self.path))
    }

    /// An optional field: absent is `None`; present must pass `check` (`null` is not absent).
    fn optional<T>(
        &self,
        key: &str,
        check: impl FnOnce(&'a Value) -> Option<T>,
    ) -> Result<Option<T>, SchemaViolation> {
        match self.map.get(key) {
            None => Ok(None),
            Some(value) => check(value).map(Some).ok_or_else(|| self.fail(key)),
        }
    }

    fn required<T>(
        &self,
        key: &str,
        check: impl FnOnce(&'a Value) -> Option<T>,
    ) -> Result<T, SchemaViolation> {
        self.optional(key, check)?.ok_or_else(|| self.fail(key))
    }

    fn string(&self, key: &str, max: usize) -> Result<String, SchemaViolation> {
        self.required(key, |v| text(v, max))
    }

    fn opt_string(&self, key: &str, max: usize) -> Result<Option<String>, SchemaViolation> {
        self.optional(key, |v| text(v, max))
    }

    fn opt_href(&self, key: &str) -> Result<Option<String>, SchemaViolation> {
        self.optional(key, |v| {
            v.as_str().filter(|h| is_safe_href(h)).map(str::to_string)
        })
    }

    fn opt_tone(&self, key: &str) -> Result<Option<String>, SchemaViolation> {
        self.optional(key, |v| one_of(v, &TONES))
    }

    fn opt_bool(&self, key: &str) -> Result<Option<bool>, SchemaViolation> {
        self.optional(key, Value::as_bool)
    }

    fn array(&self, key: &str, max: usize) -> Result<&'a Vec<Value>, SchemaViolation> {
        self.required(key, |v| v.as_array().filter(|items| items.len() <= max))
    }
}

fn text(value: &Value, max: usize) -> Option<String> {
    value
        .as_str()
        .filter(|s| within(s, max))
        .map(str::to_string)
}

fn one_of(value: &Value, allowed: &[&str]) -> Option<String> {
    value
        .as_str()
        .filter(|s| allowed.contains(s))
        .map(str::to_string)
}

/// A string of at most 10 000 characters, or a finite number.
fn text_or_number(value: &Value) -> Option<Value> {
    match value {
        Value::String(s) if within(s, TEXT) => Some(value.clone()),
        Value::Number(n) if n.as_f64().is_some_and(f64::is_finite) => Some(value.clone()),
        _ => None,
    }
}

fn block(value: &Value, path: &str) -> Result<Block, SchemaViolation> {
    let f = Fields::of(value, path)?;
    let kind = f.required("kind", |v| v.as_str().map(str::to_string))?;
    Ok(match kind.as_str() {
        "stat" => Block::Stat(StatBlock {
            value: f.required("value", text_or_number)?,
            label: f.string("label", LABEL)?,
            sub: f.opt_string("sub", TEXT)?,
            value_class: f.opt_string("valueClass", CLASS)?,
            accent: match f.map.get("accent") {
                None => None,
                Some(accent) => {
                    let a = Fields::of(accent, &format!("{path}.accent"))?;
                    Some(Accent {
                        tone: a.required("tone", |v| one_of(v, &TONES))?,
                        icon: a.string("icon", ICON)?,
                        text: a.opt_string("text", LABEL)?,
                    })
                }
            },
            grow: f.opt_bool("grow")?,
        }),
        "list" => {
            let mut items = Vec::new();
            for (i, item) in f.array("items", MAX_LIST_ITEMS)?.iter().enumerate() {
                let it = Fields::of(item, &format!("{path}.items[{i}]"))?;
                items.push(ListItem {
                    icon: it.opt_string("icon", ICON)?,
                    icon_tone: it.opt_tone("iconTone")?,
                    label: it.string("label", LABEL)?,
                    sub: it.opt_string("sub", TEXT)?,
                    meta: it.opt_string("meta", LABEL)?,
                    href: it.opt_href("href")?,
                });
            }
            Block::List(ListBlock {
                items,
                empty_message: f.opt_string("emptyMessage", TEXT)?,
                grow: f.opt_bool("grow")?,
            })
        }
        "status" => Block::Status(StatusBlock {
            tone: f.required("tone", |v| one_of(v, &STATUS_TONES))?,
            title: f.string("title", LABEL)?,
            message: f.opt_string("message", TEXT)?,
            icon: f.opt_string("icon", ICON)?,
            grow: f.opt_bool("grow")?,
        }),
        "pills" => {
            let mut pills = Vec::new();
            for (i, pill) in f.array("pills", MAX_PILLS)?.iter().enumerate() {
                let p = Fields::of(pill, &format!("{path}.pills[{i}]"))?;
                pills.push(Pill {
                    label: p.string("label", LABEL)?,
                    value: p.required("value", text_or_number)?,
                    tone: p.opt_tone("tone")?,
                    href: p.opt_href("href")?,
                });
            }
            Block::Pills(PillsBlock {
                pills,
                grow: f.opt_bool("grow")?,
            })
        }
        "placeholder" => Block::Placeholder(PlaceholderBlock {
            title: f.string("title", LABEL)?,
            description: f.opt_string("description", TEXT)?,
            icon: f.opt_string("icon", ICON)?,
        }),
        "hero" => Block::Hero(HeroBlock {
            title: f.string("title", TEXT)?,
            subtitle: f.opt_string("subtitle", TEXT)?,
            icon: f.opt_string("icon", ICON)?,
            tone: f.opt_tone("tone")?,
        }),
        _ => return Err(f.fail("kind")),
    })
}

/// Checks an app's widget answer against the contract and returns it stripped of unknown keys.
pub fn parse_widget_response(value: &Value) -> Result<WidgetResponse, SchemaViolation> {
    let f = Fields::of(value, "$")?;
    let title = f.string("title", LABEL)?;
    let icon = f.opt_string("icon", ICON)?;
    let href = f.opt_href("href")?;
    let meta = f.opt_string("meta", LABEL)?;
    let blocks = f
        .array("blocks", MAX_BLOCKS)?
        .iter()
        .enumerate()
        .map(|(i, b)| block(b, &format!("$.blocks[{i}]")))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(WidgetResponse {
        title,
        icon,
        href,
        meta,
        blocks,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn stripped(value: Value) -> Value {
        serde_json::to_value(parse_widget_response(&value).expect("valid")).expect("json")
    }

    /// Scenario 22: a list widget with links is valid.
    #[test]
    fn scenario_22_a_list_widget_is_valid() {
        let value = json!({
            "title": "Weather",
            "href": "/app/weather?location=one",
            "blocks": [{"kind": "list", "items": [{"label": "Today", "href": "/app/weather/today"}]}]
        });
        assert_eq!(stripped(value.clone()), value);
    }

    /// Scenario 23: safe hrefs are kept exactly as written.
    #[test]
    fn scenario_23_hrefs_are_preserved() {
        for href in [
            "/app/weather",
            "../weather",
            "./weather",
            "#forecast",
            "?location=one",
            "https://weather.example/forecast",
            "http://weather.example/forecast",
        ] {
            let value = json!({"title": "W", "href": href, "blocks": [
                {"kind": "list", "items": [{"label": "x", "href": href}]}
            ]});
            assert_eq!(stripped(value)["href"], json!(href), "{href}");
        }
    }

    /// Scenario 24: unsafe hrefs are refused at the top level and in list items.
    #[test]
    fn scenario_24_unsafe_hrefs_are_rejected() {
        for href in [
            "/\\evil",
            "javascript:alert(1)",
            "data:text/html,unsafe",
            "vbscript:msgbox(1)",
            "file:///tmp/file",
            "/app/\nweather",
            "/app/\u{0085}weather",
            " javascript:alert(1)",
            "",
        ] {
            let top = json!({"title": "W", "href": href, "blocks": []});
            assert!(parse_widget_response(&top).is_err(), "top {href:?}");
            let item = json!({"title": "W", "blocks": [
                {"kind": "list", "items": [{"label": "x", "href": href}]}
            ]});
            assert!(parse_widget_response(&item).is_err(), "item {href:?}");
        }
        assert!(!is_safe_href(&format!("/{}", "a".repeat(2048))));
        assert!(is_safe_href(&format!("/{}", "a".repeat(2047))));
    }

    /// Scenario 25: unknown keys are dropped at every level.
    #[test]
    fn scenario_25_extra_keys_are_stripped() {
        let value = json!({
            "title": "W", "html": "<b>x</b>",
            "blocks": [{"kind": "list", "extra": 1, "items": [{"label": "x", "extra": true}]}]
        });
        assert_eq!(
            stripped(value),
            json!({"title": "W", "blocks": [{"kind": "list", "items": [{"label": "x"}]}]})
        );
    }

    /// Scenario 26: limits on titles and block counts.
    #[test]
    fn scenario_26_limits() {
        let long = json!({"title": "x".repeat(501), "blocks": []});
        assert!(parse_widget_response(&long).is_err());
        let ok = json!({"title": "x".repeat(500), "blocks": []});
        assert!(parse_widget_response(&ok).is_ok());
        let placeholder = json!({"kind": "placeholder", "title": "p"});
        let many = json!({"title": "W", "blocks": vec![placeholder.clone(); 25]});
        assert!(parse_widget_response(&many).is_err());
        let enough = json!({"title": "W", "blocks": vec![placeholder; 24]});
        assert!(parse_widget_response(&enough).is_ok());
    }

    #[test]
    fn lengths_count_utf16_code_units() {
        // An emoji is two UTF-16 units: 250 of them are 500 units, 251 are too many.
        let ok = json!({"title": "😀".repeat(250), "blocks": []});
        assert!(parse_widget_response(&ok).is_ok());
        let long = json!({"title": "😀".repeat(251), "blocks": []});
        assert!(parse_widget_response(&long).is_err());
        // "é" is two UTF-8 bytes but one unit: 500 of them fit.
        let accented = json!({"title": "é".repeat(500), "blocks": []});
        assert!(parse_widget_response(&accented).is_ok());
    }

    #[test]
    fn every_block_kind_round_trips_and_wrong_shapes_fail() {
        let value = json!({
            "title": "All", "icon": "ti ti-x", "meta": "now",
            "blocks": [
                {"kind": "stat", "value": 42, "label": "Open", "sub": "s", "valueClass": "c",
                 "accent": {"tone": "emerald", "icon": "ti ti-up", "text": "+2"}, "grow": true},
                {"kind": "stat", "value": "42 %", "label": "Share"},
                {"kind": "status", "tone": "warn", "title": "Degraded", "message": "m", "icon": "i", "grow": false},
                {"kind": "pills", "pills": [{"label": "a", "value": 1, "tone": "red", "href": "/a"}]},
                {"kind": "placeholder", "title": "Nothing", "description": "d", "icon": "i"},
                {"kind": "hero", "title": "Hello", "subtitle": "s", "icon": "i", "tone": "blue"},
                {"kind": "list", "items": [], "emptyMessage": "none"}
            ]
        });
        assert_eq!(stripped(value.clone()), value);
        for bad in [
            json!({"title": "W"}),
            json!({"title": 1, "blocks": []}),
            json!({"title": "W", "blocks": [{"kind": "unknown"}]}),
            json!({"title": "W", "blocks": [{"kind": "stat", "value": true, "label": "l"}]}),
            json!({"title": "W", "blocks": [{"kind": "status", "tone": "emerald", "title": "t"}]}),
            json!({"title": "W", "blocks": [{"kind": "hero", "title": "t", "tone": "ok"}]}),
            json!({"title": "W", "blocks": [{"kind": "stat", "value": 1, "label": "l", "grow": "yes"}]}),
            json!({"title": "W", "blocks": [{"kind": "stat", "value": 1, "label": "l", "accent": {"tone": "red"}}]}),
            json!({"title": "W", "icon": null, "blocks": []}),
            json!({"title": "W", "icon": "i".repeat(121), "blocks": []}),
            json!({"title": "W", "blocks": [{"kind": "list", "items": vec![json!({"label": "x"}); 101]}]}),
            json!({"title": "W", "blocks": [{"kind": "pills", "pills": vec![json!({"label": "x", "value": 1}); 51]}]}),
            json!(["not", "an", "object"]),
        ] {
            assert!(parse_widget_response(&bad).is_err(), "{bad}");
        }
    }

    proptest! {
        /// No accepted href resolves to a scheme other than http(s).
        #[test]
        fn accepted_hrefs_resolve_to_http(href in "\\PC{0,40}") {
            if is_safe_href(&href) {
                let base = url::Url::parse("https://cloud.invalid/").expect("base");
                let url = base.join(&href).expect("resolves");
                prop_assert!(matches!(url.scheme(), "http" | "https"));
            }
        }

        /// Anything with a scheme other than http(s) in front is refused.
        #[test]
        fn other_schemes_are_refused(scheme in "(javascript|data|vbscript|file|ftp|blob)", rest in "[a-z0-9/().]{0,20}") {
            let href = format!("{scheme}:{rest}");
            prop_assert!(!is_safe_href(&href));
        }
    }
}
