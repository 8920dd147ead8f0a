//! The registry entry an app publishes about itself, and its validation.
//!
//! Entries are validated when read, because the table may hold entries written by older or newer
//! releases. Fields the validation checks are typed strictly; optional fields added by later
//! releases are read leniently (a wrong type reads as absent), so one odd field never hides an app.

use std::collections::HashMap;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Map, Value};

/// An app id: a lowercase letter, then lowercase letters, digits and `-`, at most 80 characters.
pub fn is_valid_app_id(id: &str) -> bool {
    let bytes = id.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= 80
        && bytes[0].is_ascii_lowercase()
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
}

/// Reads an optional field, treating a value of the wrong type as absent.
fn lenient<'de, D, T>(deserializer: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: DeserializeOwned,
{
    let value = Option::<Value>::deserialize(deserializer)?;
    Ok(value.and_then(|v| serde_json::from_value(v).ok()))
}

/// One running app, as published by its heartbeat.
///
/// The schema is what [`validate_entry`] and the publication rules ([`super::rules`]) accept:
/// fields they do not name are kept as written, and an optional field they check may be absent
/// but not `null`. The whole entry is at most 65 536 bytes of JSON.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AppRegistryEntry {
    /// The app id: a lowercase letter, then lowercase letters, digits and `-`.
    #[schema(min_length = 1, max_length = 80, pattern = "^[a-z][a-z0-9-]*$")]
    pub id: String,
    #[schema(min_length = 1)]
    pub name: String,
    #[schema(min_length = 1)]
    pub icon: String,
    #[schema(min_length = 1)]
    pub description: String,
    /// Where the app serves HTTP (scheme, host, port and an optional path prefix): an `http` or
    /// `https` URL with a host and without user name or password.
    #[schema(min_length = 1, example = "http://app-inventory:3000")]
    pub base_url: String,
    /// Top-level path prefixes the gateway routes to this app: at most 50 same-origin paths
    /// without query, fragment, `%` or dot segments. None may be `/` or `/api`, be or lie below
    /// one of Core's paths (`/api/auth`, `/pwa/_auth`, `/pwa/manifest.webmanifest`,
    /// `/pwa/sw.js`, `/branding`, `/.well-known`, `/api/registry`, `/api/widgets`, `/api/help`,
    /// `/api/mail`, `/api/admin/core`, `/api/accounts/users`, `/api/_internal`, `/healthz`,
    /// `/_local`; compared case-insensitively), and below `/pwa` an app other than `pwa` may
    /// claim only `/pwa/<its id>`.
    #[schema(max_items = 50, value_type = Vec<RoutePrefix>)]
    pub routes: Vec<String>,
    /// The platform permissions the app asks for.
    #[serde(
        default,
        deserialize_with = "lenient",
        skip_serializing_if = "Option::is_none"
    )]
    #[schema(value_type = Option<Vec<PlatformPermission>>, nullable = false)]
    pub platform_permissions: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub presentation: Option<AppPresentation>,
    /// Free-form appearance hints (for example `{"accent": "#0d9488"}`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Value>)]
    pub appearance: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub runtime: Option<AppRuntime>,
    /// Process start (epoch milliseconds) reported by the app: a finite number.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub started_at: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub nav: Option<AppNav>,
    /// The app's groups in the admin navigation: at most 50.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Vec<AdminNavGroup>>, nullable = false, max_items = 50)]
    pub admin_nav: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub capabilities: Option<CapabilitySummary>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub help: Option<HelpSummary>,
    /// The app's published skills (`{manifestHash}`); a value of another shape reads as absent.
    #[serde(
        default,
        deserialize_with = "lenient",
        skip_serializing_if = "Option::is_none"
    )]
    #[schema(value_type = Option<Value>)]
    pub skills: Option<SkillsSummary>,
    /// At most 50 links.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false, max_items = 50)]
    pub legal_links: Option<Vec<LegalLink>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Vec<SearchLink>>, nullable = false)]
    pub search_links: Option<Vec<Value>>,
    /// The app's part of the mobile app (`{href: "/pwa/<id>", requiresRoles?}`); a value of
    /// another shape reads as absent.
    #[serde(
        default,
        deserialize_with = "lenient",
        skip_serializing_if = "Option::is_none"
    )]
    #[schema(value_type = Option<Value>)]
    pub pwa: Option<PwaPart>,
    /// The app's dashboard widgets: at most 20.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false, max_items = 20)]
    pub widgets: Option<Vec<RegistryWidget>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub setting_keys: Option<Vec<String>>,
    /// Where the app serves its OpenAPI document.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub openapi: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Value>)]
    pub cli_modules: Option<Value>,
}

/// Localised names and descriptions: `translations` maps a locale to a partial overlay.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = RegistryPresentation)]
pub struct AppPresentation {
    pub base_locale: String,
    /// Locale → the overlay of that language.
    #[schema(value_type = HashMap<String, PresentationOverlay>)]
    pub translations: Map<String, Value>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = RegistryRuntime)]
pub struct AppRuntime {
    /// The app's version; a value that is not a string reads as absent.
    #[serde(
        default,
        deserialize_with = "lenient",
        skip_serializing_if = "Option::is_none"
    )]
    #[schema(value_type = Option<Value>)]
    pub version: Option<String>,
    #[schema(min_length = 1)]
    pub release: String,
    #[schema(min_length = 1)]
    pub sync_version: String,
}

/// Where an app sits in the navigation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = RegistryNav)]
pub struct AppNav {
    /// The app's link: empty (no link: reached only through `adminHref`), a same-origin path
    /// or an `http(s)` URL with a host and no credentials; no control characters; at most
    /// 2000 characters.
    #[schema(value_type = LinkHref)]
    pub href: String,
    /// The path prefix that marks the entry active; a value that is not a string reads as absent.
    #[serde(
        default,
        rename = "match",
        deserialize_with = "lenient",
        skip_serializing_if = "Option::is_none"
    )]
    #[schema(value_type = Option<Value>)]
    pub match_prefix: Option<String>,
    pub section: NavSection,
    /// A value that is not a boolean reads as absent.
    #[serde(
        default,
        deserialize_with = "lenient",
        skip_serializing_if = "Option::is_none"
    )]
    #[schema(value_type = Option<Value>)]
    pub requires_auth: Option<bool>,
    /// Role names as the app wrote them; names this release does not know never match.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub requires_roles: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Value>)]
    pub badge: Option<Value>,
    /// The app's page in the admin area: a link as `href`.
    #[serde(
        default,
        deserialize_with = "lenient",
        skip_serializing_if = "Option::is_none"
    )]
    #[schema(value_type = Option<LinkHref>, nullable = false)]
    pub admin_href: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
#[schema(as = RegistryNavSection)]
pub enum NavSection {
    Primary,
    More,
    Hidden,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = RegistryCapabilities)]
pub struct CapabilitySummary {
    pub protocol_version: f64,
    pub manifest_hash: String,
}

/// The app's published Help corpus: its content hash, page base and base locale.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = RegistryHelpSummary)]
pub struct HelpSummary {
    pub manifest_hash: String,
    /// Where the app serves its Help pages: a path.
    #[schema(pattern = "^/")]
    pub page_base: String,
    pub base_locale: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SkillsSummary {
    pub manifest_hash: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = RegistryLegalLink)]
pub struct LegalLink {
    pub label: String,
    #[schema(value_type = LinkHref)]
    pub href: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub icon: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PwaPart {
    pub href: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requires_roles: Option<Vec<String>>,
}

/// A widget as declared in the registry. Beyond `id` and `path`, fields are kept as written: a
/// record from another release may carry odd values, which degrade to defaults when the widget
/// is resolved rather than hiding it (`title` ≤ 80 and `description` ≤ 200 characters,
/// `sizes` of `small`, `medium`, `large`, `defaultSize`, `suggest`, `requiresRoles`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RegistryWidget {
    pub id: String,
    /// The app's public handler of the widget.
    pub path: String,
    #[serde(flatten)]
    #[schema(ignore)]
    pub declared: Map<String, Value>,
}

/// The pattern of a [`LinkHref`]: what [`super::rules::is_safe_link`] accepts, or empty.
pub const LINK_HREF_PATTERN: &str = r"^(|/([^/\\\x00-\x20\x7F-\x9F][^\\\x00-\x20\x7F-\x9F]*)?| *[Hh][Tt][Tt][Pp][Ss]?:[^\x00-\x1F\x7F-\x9F]*)$";
/// The pattern of a [`RoutePrefix`]: a same-origin path without backslash, ASCII whitespace,
/// `?`, `#` or `%` (dot segments and Core's paths are refused too, which it does not say).
pub const ROUTE_PREFIX_PATTERN: &str = r"^/([^/\\?#%\t\n\x0B\x0C\r ][^\\?#%\t\n\x0B\x0C\r ]*)?$";

/// A link of the registry entry (`nav.href`, `nav.adminHref`, `adminNav[].links[].href`,
/// `legalLinks[].href`), as a schema: empty (no link), a same-origin path (`/…`, not `//…`, no
/// backslash or whitespace) or an `http(s)` URL with a host and no credentials; no control
/// characters; at most 2000 characters.
pub struct LinkHref;

impl utoipa::PartialSchema for LinkHref {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        utoipa::openapi::ObjectBuilder::new()
            .schema_type(utoipa::openapi::Type::String)
            .description(Some(
                "A link: empty (no link), a same-origin path (`/…`, not `//…`, without backslash \
                 or whitespace) or an `http(s)` URL with a host and without user name or \
                 password; no control characters; at most 2000 characters.",
            ))
            .max_length(Some(super::rules::MAX_HREF_CHARS))
            .pattern(Some(LINK_HREF_PATTERN))
            .into()
    }
}

impl utoipa::ToSchema for LinkHref {
    fn name() -> std::borrow::Cow<'static, str> {
        "RegistryLinkHref".into()
    }
}

/// A route prefix an app claims, as a schema (see [`super::rules::route_refusal`]).
pub struct RoutePrefix;

impl utoipa::PartialSchema for RoutePrefix {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        utoipa::openapi::ObjectBuilder::new()
            .schema_type(utoipa::openapi::Type::String)
            .description(Some(
                "A path prefix the gateway routes to the app: a same-origin path (`/…`, not \
                 `//…`) without backslash, whitespace, `?`, `#`, `%` or dot segments, outside \
                 Core's paths.",
            ))
            .pattern(Some(ROUTE_PREFIX_PATTERN))
            .into()
    }
}

impl utoipa::ToSchema for RoutePrefix {
    fn name() -> std::borrow::Cow<'static, str> {
        "RegistryRoutePrefix".into()
    }
}

/// A platform permission an app may ask for: sending outgoing mail, and reading the mail logs
/// other apps granted.
#[derive(utoipa::ToSchema)]
#[allow(dead_code)]
#[schema(as = RegistryPlatformPermission)]
pub enum PlatformPermission {
    #[schema(rename = "mail:send")]
    MailSend,
    #[schema(rename = "mail:read")]
    MailRead,
}

/// A translation overlay of the presentation: `name` and `description` are strings,
/// `adminGroups`, `adminLinks`, `legalLinks` and `searchLinks` maps of strings; other fields
/// (`widgets`, `searchLinkDescriptions`, …) are kept as written.
#[derive(utoipa::ToSchema)]
#[allow(dead_code)]
#[schema(rename_all = "camelCase", as = RegistryPresentationOverlay)]
pub struct PresentationOverlay {
    #[schema(nullable = false)]
    name: Option<String>,
    #[schema(nullable = false)]
    description: Option<String>,
    #[schema(nullable = false)]
    admin_groups: Option<HashMap<String, String>>,
    #[schema(nullable = false)]
    admin_links: Option<HashMap<String, String>>,
    #[schema(nullable = false)]
    legal_links: Option<HashMap<String, String>>,
    #[schema(nullable = false)]
    search_links: Option<HashMap<String, String>>,
}

/// A group of the admin navigation.
#[derive(utoipa::ToSchema)]
#[allow(dead_code)]
#[schema(as = RegistryAdminNavGroup)]
pub struct AdminNavGroup {
    #[schema(nullable = false)]
    id: Option<String>,
    /// Only `ai` (the group sits in the AI section).
    #[schema(value_type = Option<AdminNavSection>, nullable = false)]
    section: Option<String>,
    label: String,
    /// At most 50 links.
    #[schema(max_items = 50)]
    links: Vec<AdminNavLink>,
}

/// The section an admin navigation group may name.
#[derive(utoipa::ToSchema)]
#[allow(dead_code)]
#[schema(rename_all = "lowercase", as = RegistryAdminNavSection)]
pub enum AdminNavSection {
    Ai,
}

/// A link of an admin navigation group.
#[derive(utoipa::ToSchema)]
#[allow(dead_code)]
#[schema(as = RegistryAdminNavLink)]
pub struct AdminNavLink {
    label: String,
    #[schema(value_type = LinkHref)]
    href: String,
    icon: String,
}

/// A link the shell's search offers.
#[derive(utoipa::ToSchema)]
#[allow(dead_code)]
#[schema(as = RegistrySearchLink)]
pub struct SearchLink {
    /// Not blank.
    #[schema(pattern = "\\S")]
    label: String,
    /// A same-origin path: `/…`, not `//…`, without backslash or whitespace.
    #[schema(pattern = "^/([^/\\\\\\t\\n\\x0B\\x0C\\r ][^\\\\\\t\\n\\x0B\\x0C\\r ]*)?$")]
    href: String,
    #[schema(nullable = false)]
    icon: Option<String>,
    #[schema(nullable = false)]
    keywords: Option<Vec<String>>,
}

impl AppRegistryEntry {
    /// Validates a raw entry and reads it.
    pub fn parse(value: &Value) -> Result<AppRegistryEntry, String> {
        validate_entry(value)?;
        serde_json::from_value(value.clone()).map_err(|e| format!("entry is malformed: {e}"))
    }
}

fn invalid(path: &str, expected: &str) -> String {
    format!("{path} must be {expected}")
}

fn is_string_array(value: &Value) -> bool {
    value
        .as_array()
        .is_some_and(|items| items.iter().all(Value::is_string))
}

fn is_string_map(value: &Value) -> bool {
    value
        .as_object()
        .is_some_and(|map| map.values().all(Value::is_string))
}

fn string_field<'a>(object: &'a Map<String, Value>, key: &str) -> Option<&'a str> {
    object.get(key).and_then(Value::as_str)
}

/// The platform permissions an entry may declare: sending outgoing mail, and reading the mail
/// logs other apps granted.
pub const PLATFORM_PERMISSIONS: &[&str] = &["mail:send", "mail:read"];

/// Checks what readers rely on: the required fields, an http(s) `baseUrl` without credentials,
/// absolute `routes`, the platform permissions it declares, and the shape of every optional part
/// that readers interpret. Returns the first problem as `<field> must be <expectation>`.
pub fn validate_entry(value: &Value) -> Result<(), String> {
    let Some(entry) = value.as_object() else {
        return Err("entry must be an object".into());
    };
    for field in ["id", "name", "icon", "description", "baseUrl"] {
        if string_field(entry, field).is_none_or(str::is_empty) {
            return Err(invalid(field, "a non-empty string"));
        }
    }
    let base_ok = string_field(entry, "baseUrl")
        .and_then(|raw| url::Url::parse(raw).ok())
        .is_some_and(|url| {
            matches!(url.scheme(), "http" | "https")
                && url.username().is_empty()
                && url.password().is_none()
                && url.host_str().is_some()
        });
    if !base_ok {
        return Err(invalid(
            "baseUrl",
            "an HTTP(S) URL without embedded credentials",
        ));
    }
    let routes_ok = entry.get("routes").is_some_and(|routes| {
        is_string_array(routes)
            && routes.as_array().is_some_and(|r| {
                r.iter()
                    .filter_map(Value::as_str)
                    .all(|p| p.starts_with('/'))
            })
    });
    if !routes_ok {
        return Err(invalid("routes", "an array of absolute paths"));
    }
    if let Some(permissions) = entry.get("platformPermissions") {
        let known = permissions.as_array().is_some_and(|items| {
            items.iter().all(|p| {
                p.as_str()
                    .is_some_and(|name| PLATFORM_PERMISSIONS.contains(&name))
            })
        });
        if !known {
            return Err(invalid(
                "platformPermissions",
                "an array of \"mail:send\" and \"mail:read\"",
            ));
        }
    }
    if let Some(started) = entry.get("startedAt")
        && !started.as_f64().is_some_and(f64::is_finite)
    {
        return Err(invalid("startedAt", "a finite number"));
    }
    if let Some(runtime) = entry.get("runtime") {
        let Some(runtime) = runtime.as_object() else {
            return Err(invalid("runtime", "an object"));
        };
        for field in ["release", "syncVersion"] {
            if string_field(runtime, field).is_none_or(str::is_empty) {
                return Err(invalid(&format!("runtime.{field}"), "a non-empty string"));
            }
        }
    }
    if let Some(presentation) = entry.get("presentation") {
        validate_presentation(presentation)?;
    }
    if let Some(nav) = entry.get("nav") {
        let Some(nav) = nav.as_object() else {
            return Err(invalid("nav", "an object"));
        };
        let section_ok = matches!(
            string_field(nav, "section"),
            Some("primary" | "more" | "hidden")
        );
        if string_field(nav, "href").is_none() || !section_ok {
            return Err(invalid("nav", "a valid navigation object"));
        }
        if let Some(roles) = nav.get("requiresRoles")
            && !is_string_array(roles)
        {
            return Err(invalid("nav.requiresRoles", "an array of strings"));
        }
    }
    if let Some(admin_nav) = entry.get("adminNav") {
        let ok = admin_nav.as_array().is_some_and(|groups| {
            groups.iter().all(|group| {
                group.as_object().is_some_and(|g| {
                    g.get("id").is_none_or(Value::is_string)
                        && g.get("section").is_none_or(|s| s == "ai")
                        && g.get("label").is_some_and(Value::is_string)
                        && g.get("links")
                            .and_then(Value::as_array)
                            .is_some_and(|links| {
                                links.iter().all(|link| {
                                    link.as_object().is_some_and(|l| {
                                        ["label", "href", "icon"]
                                            .iter()
                                            .all(|k| l.get(*k).is_some_and(Value::is_string))
                                    })
                                })
                            })
                })
            })
        });
        if !ok {
            return Err(invalid("adminNav", "an array of valid navigation groups"));
        }
    }
    if let Some(links) = entry.get("legalLinks") {
        let ok = links.as_array().is_some_and(|links| {
            links.iter().all(|link| {
                link.as_object().is_some_and(|l| {
                    l.get("label").is_some_and(Value::is_string)
                        && l.get("href").is_some_and(Value::is_string)
                        && l.get("icon").is_none_or(Value::is_string)
                })
            })
        });
        if !ok {
            return Err(invalid("legalLinks", "an array of valid links"));
        }
    }
    if let Some(links) = entry.get("searchLinks") {
        let ok = links.as_array().is_some_and(|links| {
            links.iter().all(|link| {
                link.as_object().is_some_and(|l| {
                    string_field(l, "label").is_some_and(|label| !label.trim().is_empty())
                        && string_field(l, "href").is_some_and(is_same_origin_path)
                        && l.get("icon").is_none_or(Value::is_string)
                        && l.get("keywords").is_none_or(is_string_array)
                })
            })
        });
        if !ok {
            return Err(invalid(
                "searchLinks",
                "an array of same-origin navigation links",
            ));
        }
    }
    if let Some(widgets) = entry.get("widgets") {
        let ok = widgets.as_array().is_some_and(|widgets| {
            widgets.iter().all(|w| {
                w.as_object().is_some_and(|w| {
                    w.get("id").is_some_and(Value::is_string)
                        && w.get("path").is_some_and(Value::is_string)
                })
            })
        });
        if !ok {
            return Err(invalid("widgets", "an array of valid widgets"));
        }
    }
    if let Some(keys) = entry.get("settingKeys")
        && !is_string_array(keys)
    {
        return Err(invalid("settingKeys", "an array of strings"));
    }
    if let Some(capabilities) = entry.get("capabilities") {
        let ok = capabilities.as_object().is_some_and(|c| {
            c.get("protocolVersion").is_some_and(Value::is_number)
                && c.get("manifestHash").is_some_and(Value::is_string)
        });
        if !ok {
            return Err(invalid("capabilities", "a valid capability summary"));
        }
    }
    if let Some(help) = entry.get("help") {
        let ok = help.as_object().is_some_and(|h| {
            h.get("manifestHash").is_some_and(Value::is_string)
                && h.get("baseLocale").is_some_and(Value::is_string)
                && string_field(h, "pageBase").is_some_and(|p| p.starts_with('/'))
        });
        if !ok {
            return Err(invalid("help", "a valid Help reference"));
        }
    }
    if let Some(openapi) = entry.get("openapi")
        && !openapi.is_string()
    {
        return Err(invalid("openapi", "a string"));
    }
    Ok(())
}

fn validate_presentation(presentation: &Value) -> Result<(), String> {
    let Some(p) = presentation.as_object() else {
        return Err(invalid(
            "presentation",
            "a localized app-presentation catalog",
        ));
    };
    let (Some(_), Some(translations)) = (
        string_field(p, "baseLocale"),
        p.get("translations").and_then(Value::as_object),
    ) else {
        return Err(invalid(
            "presentation",
            "a localized app-presentation catalog",
        ));
    };
    for (locale, translation) in translations {
        let path = format!("presentation.translations.{locale}");
        let Some(t) = translation.as_object() else {
            return Err(invalid(&path, "an object"));
        };
        for field in ["name", "description"] {
            if t.get(field).is_some_and(|v| !v.is_string()) {
                return Err(invalid(&format!("{path}.{field}"), "a string"));
            }
        }
        for field in ["adminGroups", "adminLinks", "legalLinks", "searchLinks"] {
            if t.get(field).is_some_and(|v| !is_string_map(v)) {
                return Err(invalid(&format!("{path}.{field}"), "a string map"));
            }
        }
    }
    Ok(())
}

/// A path on this origin: starts with one `/` (not `//` or `/\`), no backslashes or whitespace.
fn is_same_origin_path(href: &str) -> bool {
    let mut chars = href.chars();
    chars.next() == Some('/')
        && !matches!(href.chars().nth(1), Some('/' | '\\'))
        && !href.chars().any(|c| c == '\\' || c.is_whitespace())
}

impl AppRegistryEntry {
    /// The presentation overlays for `locale` that the app translates, most specific first, then
    /// the base locale's.
    pub fn overlays(&self, locale: Option<&str>) -> Vec<&Map<String, Value>> {
        let Some(presentation) = &self.presentation else {
            return Vec::new();
        };
        crate::http::locale::locale_chain(locale, &presentation.base_locale)
            .iter()
            .filter_map(|tag| presentation.translations.get(tag))
            .filter_map(Value::as_object)
            .collect()
    }

    /// The app's name in `locale` (its own `name` when no overlay translates it).
    pub fn localized_name(&self, locale: Option<&str>) -> String {
        localized(&self.overlays(locale), "name", &self.name)
    }
}

/// The first overlay's string for `field`, else `fallback`.
pub fn localized(overlays: &[&Map<String, Value>], field: &str, fallback: &str) -> String {
    overlays
        .iter()
        .find_map(|o| o.get(field).and_then(Value::as_str))
        .unwrap_or(fallback)
        .to_string()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use serde_json::json;

    pub(crate) fn valid_entry(id: &str) -> Value {
        json!({
            "id": id,
            "name": "Inventory",
            "icon": "ti ti-box",
            "description": "Stock",
            "baseUrl": format!("http://app-{id}:3000"),
            "routes": [format!("/app/{id}")],
        })
    }

    fn with(mut entry: Value, key: &str, value: Value) -> Value {
        entry[key] = value;
        entry
    }

    #[test]
    fn accepts_minimal_and_full_entries() {
        assert!(validate_entry(&valid_entry("inventory")).is_ok());
        let full = json!({
            "id": "inventory", "name": "Inventory", "icon": "i", "description": "d",
            "baseUrl": "https://inventory.internal:8443/custom/path",
            "routes": ["/app/inventory", "/api/inventory"],
            "platformPermissions": ["mail:send", "mail:read"],
            "presentation": {"baseLocale": "en", "translations": {"de": {"name": "Lager", "widgets": {"stock": {"title": "Bestand"}}}}},
            "appearance": {"accent": "#0d9488"},
            "runtime": {"version": "1.2.0", "release": "0.30.0", "syncVersion": "3"},
            "startedAt": 1_700_000_000_000u64,
            "nav": {"href": "/app/inventory", "section": "primary", "requiresRoles": ["user"], "badge": {"count": 2}},
            "adminNav": [{"label": "Inventory", "links": [{"label": "Settings", "href": "/admin/inventory", "icon": "ti ti-cog"}]}],
            "capabilities": {"protocolVersion": 1, "manifestHash": "abc"},
            "help": {"manifestHash": "h", "pageBase": "/app/inventory/help", "baseLocale": "en"},
            "skills": {"manifestHash": "s"},
            "legalLinks": [{"label": "Imprint", "href": "/imprint"}],
            "searchLinks": [{"label": "Stock", "href": "/app/inventory/stock", "keywords": ["items"]}],
            "pwa": {"href": "/pwa/inventory"},
            "widgets": [{"id": "stock", "path": "/api/inventory/widget/stock", "sizes": ["small", "large"], "suggest": true}],
            "settingKeys": ["inventory.unit"],
            "openapi": "/api/inventory/openapi.json",
            "cliModules": [{"name": "inventory"}]
        });
        let entry = AppRegistryEntry::parse(&full).expect("full entry");
        assert_eq!(
            entry.skills.as_ref().map(|s| s.manifest_hash.as_str()),
            Some("s")
        );
        assert_eq!(
            entry.pwa.as_ref().map(|p| p.href.as_str()),
            Some("/pwa/inventory")
        );
        assert_eq!(
            entry.platform_permissions,
            Some(vec!["mail:send".to_string(), "mail:read".to_string()])
        );
        let widget = &entry.widgets.as_ref().expect("widgets")[0];
        assert_eq!(widget.declared["suggest"], json!(true));
        // Serialising gives back the fields that were read.
        let round = serde_json::to_value(&entry).expect("serialise");
        assert_eq!(round["nav"]["requiresRoles"], json!(["user"]));
        assert_eq!(round["widgets"][0]["sizes"], json!(["small", "large"]));
    }

    #[test]
    fn rejects_what_readers_cannot_use() {
        let base = valid_entry("inventory");
        let cases: Vec<(Value, &str)> = vec![
            (json!("text"), "entry must be an object"),
            (with(base.clone(), "name", json!("")), "name must be"),
            (with(base.clone(), "icon", json!(3)), "icon must be"),
            (
                with(base.clone(), "baseUrl", json!("ftp://x")),
                "baseUrl must be",
            ),
            (
                with(base.clone(), "baseUrl", json!("http://u:p@x")),
                "baseUrl must be",
            ),
            (
                with(base.clone(), "baseUrl", json!("not a url")),
                "baseUrl must be",
            ),
            (
                with(base.clone(), "routes", json!(["app/x"])),
                "routes must be",
            ),
            (
                with(base.clone(), "routes", json!("/app")),
                "routes must be",
            ),
            (
                with(base.clone(), "platformPermissions", json!(["mail.send"])),
                "platformPermissions must be",
            ),
            (
                with(base.clone(), "platformPermissions", json!("mail:send")),
                "platformPermissions must be",
            ),
            (
                with(base.clone(), "startedAt", json!("yesterday")),
                "startedAt must be",
            ),
            (
                with(base.clone(), "runtime", json!({"release": ""})),
                "runtime.release must be",
            ),
            (
                with(base.clone(), "presentation", json!({"baseLocale": "en"})),
                "presentation must be",
            ),
            (
                with(
                    base.clone(),
                    "presentation",
                    json!({"baseLocale": "en", "translations": {"de": {"name": 1}}}),
                ),
                "presentation.translations.de.name",
            ),
            (
                with(
                    base.clone(),
                    "nav",
                    json!({"href": "/x", "section": "side"}),
                ),
                "nav must be",
            ),
            (
                with(
                    base.clone(),
                    "nav",
                    json!({"href": "/x", "section": "more", "requiresRoles": "admin"}),
                ),
                "nav.requiresRoles",
            ),
            (
                with(
                    base.clone(),
                    "adminNav",
                    json!([{"label": "x", "links": [{"label": "a"}]}]),
                ),
                "adminNav must be",
            ),
            (
                with(base.clone(), "legalLinks", json!([{"label": "x"}])),
                "legalLinks must be",
            ),
            (
                with(
                    base.clone(),
                    "searchLinks",
                    json!([{"label": "x", "href": "//evil"}]),
                ),
                "searchLinks must be",
            ),
            (
                with(base.clone(), "widgets", json!([{"id": "w"}])),
                "widgets must be",
            ),
            (
                with(base.clone(), "widgets", json!({"id": "w", "path": "/p"})),
                "widgets must be",
            ),
            (
                with(base.clone(), "settingKeys", json!([1])),
                "settingKeys must be",
            ),
            (
                with(
                    base.clone(),
                    "capabilities",
                    json!({"protocolVersion": "1", "manifestHash": "h"}),
                ),
                "capabilities must be",
            ),
            (
                with(
                    base.clone(),
                    "help",
                    json!({"manifestHash": "h", "pageBase": "help", "baseLocale": "en"}),
                ),
                "help must be",
            ),
            (
                with(base.clone(), "openapi", json!(true)),
                "openapi must be",
            ),
        ];
        for (entry, expected) in cases {
            let err = validate_entry(&entry).expect_err(expected);
            assert!(err.starts_with(expected), "{err} / {expected}");
        }
    }

    #[test]
    fn optional_parts_from_other_releases_degrade_instead_of_failing() {
        let entry = with(
            with(valid_entry("inventory"), "pwa", json!("yes")),
            "skills",
            json!(42),
        );
        let parsed = AppRegistryEntry::parse(&entry).expect("still valid");
        assert!(parsed.pwa.is_none() && parsed.skills.is_none());
        let entry = with(
            valid_entry("inventory"),
            "widgets",
            json!([{"id": "w", "path": "/p", "title": 5, "sizes": "huge", "suggest": "yes"}]),
        );
        let parsed = AppRegistryEntry::parse(&entry).expect("widget kept");
        assert_eq!(parsed.widgets.map(|w| w.len()), Some(1));
    }

    #[test]
    fn app_ids_are_lowercase_slugs() {
        for id in ["core", "pwa", "time-tracking", "a1", &"a".repeat(80)] {
            assert!(is_valid_app_id(id), "{id}");
        }
        for id in [
            "",
            "1x",
            "Inventory",
            "spaces/tasks",
            "_auth",
            &"a".repeat(81),
        ] {
            assert!(!is_valid_app_id(id), "{id}");
        }
    }
}
