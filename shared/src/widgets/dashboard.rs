//! The resolved widget list: every widget of every live app, in registry order, with localized
//! titles and resolved sizes. A declaration with odd values from another release degrades to
//! defaults; the widget itself is kept.

use serde::Serialize;
use serde_json::Value;
use sqlx::PgPool;

use super::WidgetsError;
use super::size::{WidgetSize, resolve_sizes};
use crate::auth::Role;
use crate::registry::entry::localized;
use crate::registry::{AppRegistryEntry, list_apps};

const MAX_TITLE: usize = 80;
const MAX_DESCRIPTION: usize = 200;

/// A widget as the dashboard and the stream see it.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DashboardWidget {
    pub app_id: String,
    pub app_name: String,
    pub app_icon: String,
    pub widget_id: String,
    /// The app's base URL (without a trailing `/`) followed by the declared path.
    pub url: String,
    pub title: String,
    pub description: String,
    pub sizes: Vec<WidgetSize>,
    pub default_size: WidgetSize,
    pub suggest: bool,
    /// Who sees the widget in the gallery and on the default board (empty: everyone). Core's
    /// stream never filters on it: the app authorizes each call.
    pub requires_roles: Vec<Role>,
}

impl DashboardWidget {
    /// `<appId>/<widgetId>`.
    pub fn key(&self) -> String {
        super::widget_key(&self.app_id, &self.widget_id)
    }
}

/// A trimmed text of 1..=`max` characters, if `value` is one.
fn bounded_text(value: Option<&Value>, max: usize) -> Option<String> {
    let text = value?.as_str()?.trim();
    let length = super::response::utf16_len(text);
    (1..=max).contains(&length).then(|| text.to_string())
}

/// The widgets of one app, in declaration order, localized for `locale`.
pub fn dashboard_widgets_of(
    entry: &AppRegistryEntry,
    locale: Option<&str>,
) -> Vec<DashboardWidget> {
    let Some(widgets) = &entry.widgets else {
        return Vec::new();
    };
    let overlays = entry.overlays(locale);
    let app_name = localized(&overlays, "name", &entry.name);
    let app_description = localized(&overlays, "description", &entry.description);
    let base = entry.base_url.trim_end_matches('/');
    widgets
        .iter()
        .map(|widget| {
            let translated = |field: &str| {
                overlays.iter().find_map(|o| {
                    o.get("widgets")?
                        .get(&widget.id)?
                        .get(field)
                        .filter(|v| v.is_string())
                })
            };
            let pick = |field: &str, max: usize, fallback: &str| {
                bounded_text(
                    translated(field).or_else(|| widget.declared.get(field)),
                    max,
                )
                .unwrap_or_else(|| fallback.to_string())
            };
            let (sizes, default_size) = resolve_sizes(
                widget.declared.get("sizes"),
                widget.declared.get("defaultSize"),
            );
            let path = if widget.path.starts_with('/') {
                widget.path.clone()
            } else {
                format!("/{}", widget.path)
            };
            DashboardWidget {
                app_id: entry.id.clone(),
                app_name: app_name.clone(),
                app_icon: entry.icon.clone(),
                widget_id: widget.id.clone(),
                url: format!("{base}{path}"),
                title: pick("title", MAX_TITLE, &app_name),
                description: pick("description", MAX_DESCRIPTION, &app_description),
                sizes,
                default_size,
                suggest: widget.declared.get("suggest") == Some(&Value::Bool(true)),
                requires_roles: widget
                    .declared
                    .get("requiresRoles")
                    .and_then(Value::as_array)
                    .map(|roles| {
                        roles
                            .iter()
                            .filter_map(Value::as_str)
                            .filter_map(Role::parse)
                            .collect()
                    })
                    .unwrap_or_default(),
            }
        })
        .collect()
}

/// Every declared widget of the live registry, in app order then declaration order.
pub async fn list_widgets(
    pool: &PgPool,
    locale: Option<&str>,
) -> Result<Vec<DashboardWidget>, WidgetsError> {
    Ok(list_apps(pool)
        .await?
        .iter()
        .flat_map(|entry| dashboard_widgets_of(entry, locale))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn inventory() -> AppRegistryEntry {
        AppRegistryEntry::parse(&json!({
            "id": "inventory",
            "name": "Inventory",
            "icon": "ti ti-box",
            "description": "Stock and orders",
            "baseUrl": "http://inventory:3000/custom/path/",
            "routes": ["/app/inventory"],
            "presentation": {
                "baseLocale": "en",
                "translations": {"de": {"name": "Lager", "widgets": {"stock": {"title": "Bestand"}}}}
            },
            "widgets": [
                {"id": "stock", "path": "/api/inventory/widget/stock", "title": "Stock",
                 "description": "Items in stock", "sizes": ["large", "small"], "defaultSize": "small",
                 "suggest": true, "requiresRoles": ["admin"]},
                {"id": "legacy", "path": "widget/legacy"}
            ]
        }))
        .expect("valid entry")
    }

    /// Scenario 30: localized titles, URLs, sizes, suggestion and roles.
    #[test]
    fn scenario_30_widgets_resolve_with_their_translations() {
        let widgets = dashboard_widgets_of(&inventory(), Some("de-CH"));
        let stock = &widgets[0];
        assert_eq!(stock.key(), "inventory/stock");
        assert_eq!(stock.app_name, "Lager");
        assert_eq!(stock.title, "Bestand");
        assert_eq!(stock.description, "Items in stock");
        assert_eq!(
            stock.url,
            "http://inventory:3000/custom/path/api/inventory/widget/stock"
        );
        assert_eq!(stock.sizes, [WidgetSize::Small, WidgetSize::Large]);
        assert_eq!(stock.default_size, WidgetSize::Small);
        assert!(stock.suggest);
        assert_eq!(stock.requires_roles, [Role::Admin]);

        let legacy = &widgets[1];
        assert_eq!(
            legacy.url,
            "http://inventory:3000/custom/path/widget/legacy"
        );
        assert_eq!(legacy.title, "Lager");
        assert_eq!(legacy.description, "Stock and orders");
        assert_eq!(legacy.sizes, [WidgetSize::Large]);
        assert_eq!(legacy.default_size, WidgetSize::Large);
        assert!(!legacy.suggest);
        assert!(legacy.requires_roles.is_empty());

        let plain = dashboard_widgets_of(&inventory(), None);
        assert_eq!(plain[0].title, "Stock");
        assert_eq!(plain[1].title, "Inventory");
    }

    /// Scenario 31: a broken declaration is kept with defaults.
    #[test]
    fn scenario_31_broken_records_degrade_to_defaults() {
        let entry = AppRegistryEntry::parse(&json!({
            "id": "broken", "name": "Broken", "icon": "i", "description": "d",
            "baseUrl": "http://broken:3000", "routes": ["/app/broken"],
            "widgets": [{"id": "w", "path": "/w", "title": " ", "sizes": ["huge"],
                         "defaultSize": "huge", "suggest": "yes", "requiresRoles": ["root"]}]
        }))
        .expect("valid entry");
        let widgets = dashboard_widgets_of(&entry, None);
        assert_eq!(widgets.len(), 1);
        let w = &widgets[0];
        assert_eq!(w.title, "Broken");
        assert_eq!(w.sizes, [WidgetSize::Large]);
        assert_eq!(w.default_size, WidgetSize::Large);
        assert!(!w.suggest);
        assert!(w.requires_roles.is_empty());
    }
}
