//! The widgets an app declares, checked when the app starts (a bad declaration stops it): ids
//! unique, non-blank and without `@`; titles 1..80 and descriptions 1..200 characters after
//! trimming; sizes non-empty, distinct and known (stored small → large); a default the widget
//! offers (`large` when no sizes are given); `suggest` strictly boolean; known roles only.

use serde::Serialize;
use serde_json::{Map, Value};

use super::WidgetsError;
use super::response::utf16_len;
use super::size::WidgetSize;
use crate::auth::Role;

/// One declared widget, normalized for the registry entry.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WidgetDeclaration {
    pub id: String,
    pub path: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sizes: Option<Vec<WidgetSize>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub default_size: Option<WidgetSize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub suggest: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub requires_roles: Option<Vec<Role>>,
}

impl WidgetDeclaration {
    /// The sizes the widget offers (declared, else only `large`).
    pub fn offered(&self) -> Vec<WidgetSize> {
        self.sizes
            .clone()
            .unwrap_or_else(|| vec![WidgetSize::Large])
    }

    /// The size used when none (or one not offered) is asked for.
    pub fn default(&self) -> WidgetSize {
        self.default_size
            .or_else(|| self.sizes.as_ref().and_then(|s| s.last().copied()))
            .unwrap_or(WidgetSize::Large)
    }
}

fn fail(id: &str, problem: &str) -> WidgetsError {
    WidgetsError::Declaration(format!("widget {id:?}: {problem}"))
}

fn trimmed_text(
    object: &Map<String, Value>,
    key: &str,
    max: usize,
    id: &str,
) -> Result<Option<String>, WidgetsError> {
    match object.get(key) {
        None => Ok(None),
        Some(Value::String(text)) => {
            let text = text.trim();
            if (1..=max).contains(&utf16_len(text)) {
                Ok(Some(text.to_string()))
            } else {
                Err(fail(id, &format!("{key} must be 1 to {max} characters")))
            }
        }
        Some(_) => Err(fail(id, &format!("{key} must be a string"))),
    }
}

fn one(value: &Value, id: &str) -> Result<(String, WidgetDeclaration), WidgetsError> {
    let object = value
        .as_object()
        .ok_or_else(|| fail("?", "a declaration must be an object"))?;
    let raw_id = object
        .get("id")
        .and_then(Value::as_str)
        .ok_or_else(|| fail(id, "id must be a string"))?;
    if raw_id.trim().is_empty() {
        return Err(fail(raw_id, "id must not be blank"));
    }
    if raw_id.contains('@') {
        return Err(fail(raw_id, "id must not contain @"));
    }
    let path = object
        .get("path")
        .and_then(Value::as_str)
        .filter(|p| !p.is_empty())
        .ok_or_else(|| fail(raw_id, "path must be a non-empty string"))?;
    let title = trimmed_text(object, "title", 80, raw_id)?;
    let description = trimmed_text(object, "description", 200, raw_id)?;
    let sizes = match object.get("sizes") {
        None => None,
        Some(Value::Array(items)) => {
            if items.is_empty() {
                return Err(fail(raw_id, "sizes must not be empty"));
            }
            let mut sizes = Vec::new();
            for item in items {
                let size = item
                    .as_str()
                    .and_then(WidgetSize::parse)
                    .ok_or_else(|| fail(raw_id, "sizes must be small, medium or large"))?;
                if sizes.contains(&size) {
                    return Err(fail(raw_id, "sizes must be distinct"));
                }
                sizes.push(size);
            }
            sizes.sort();
            Some(sizes)
        }
        Some(_) => return Err(fail(raw_id, "sizes must be an array")),
    };
    let default_size = match object.get("defaultSize") {
        None => None,
        Some(value) => {
            let size = value
                .as_str()
                .and_then(WidgetSize::parse)
                .ok_or_else(|| fail(raw_id, "defaultSize must be small, medium or large"))?;
            let offered = sizes.clone().unwrap_or_else(|| vec![WidgetSize::Large]);
            if !offered.contains(&size) {
                return Err(fail(raw_id, "defaultSize must be one of the offered sizes"));
            }
            Some(size)
        }
    };
    let suggest = match object.get("suggest") {
        None => None,
        Some(Value::Bool(b)) => Some(*b),
        Some(_) => return Err(fail(raw_id, "suggest must be true or false")),
    };
    let requires_roles = match object.get("requiresRoles") {
        None => None,
        Some(Value::Array(items)) => Some(
            items
                .iter()
                .map(|r| {
                    r.as_str()
                        .and_then(Role::parse)
                        .ok_or_else(|| fail(raw_id, "requiresRoles must name known roles"))
                })
                .collect::<Result<Vec<_>, _>>()?,
        ),
        Some(_) => return Err(fail(raw_id, "requiresRoles must be an array")),
    };
    Ok((
        raw_id.to_string(),
        WidgetDeclaration {
            id: raw_id.to_string(),
            path: path.to_string(),
            title,
            description,
            sizes,
            default_size,
            suggest,
            requires_roles,
        },
    ))
}

/// Checks and normalizes an app's widget declarations (`None` stays `None`).
pub fn compile_declarations(
    declarations: Option<&[Value]>,
) -> Result<Option<Vec<WidgetDeclaration>>, WidgetsError> {
    let Some(declarations) = declarations else {
        return Ok(None);
    };
    let mut compiled: Vec<WidgetDeclaration> = Vec::with_capacity(declarations.len());
    for (index, value) in declarations.iter().enumerate() {
        let (id, declaration) = one(value, &format!("#{index}"))?;
        if compiled.iter().any(|d| d.id == id) {
            return Err(fail(&id, "is declared twice"));
        }
        compiled.push(declaration);
    }
    Ok(Some(compiled))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn compile(values: Vec<Value>) -> Result<Option<Vec<WidgetDeclaration>>, WidgetsError> {
        compile_declarations(Some(&values))
    }

    /// Scenario 28: valid declarations are normalized; legacy ones keep just id and path.
    #[test]
    fn scenario_28_declarations_are_normalized() {
        let compiled = compile(vec![
            json!({"id": "stock", "path": "/api/stock/widget", "title": "  Stock  ",
                   "sizes": ["large", "small"], "defaultSize": "small", "suggest": true,
                   "requiresRoles": ["admin", "user"]}),
            json!({"id": "legacy", "path": "/api/legacy/widget"}),
        ])
        .expect("valid")
        .expect("some");
        assert_eq!(compiled[0].title.as_deref(), Some("Stock"));
        assert_eq!(
            compiled[0].sizes,
            Some(vec![WidgetSize::Small, WidgetSize::Large])
        );
        assert_eq!(
            compiled[0].requires_roles,
            Some(vec![Role::Admin, Role::User])
        );
        assert_eq!(
            serde_json::to_value(&compiled[1]).expect("json"),
            json!({"id": "legacy", "path": "/api/legacy/widget"})
        );
        assert_eq!(compiled[1].default(), WidgetSize::Large);
        assert!(compile_declarations(None).expect("none").is_none());
    }

    /// Scenario 29: every startup error.
    #[test]
    fn scenario_29_bad_declarations_stop_the_app() {
        let w = |extra: Value| {
            let mut base = json!({"id": "w", "path": "/w"});
            if let (Some(b), Some(e)) = (base.as_object_mut(), extra.as_object()) {
                b.extend(e.clone());
            }
            base
        };
        let cases = vec![
            vec![w(json!({})), w(json!({}))],
            vec![w(json!({"id": "  "}))],
            vec![w(json!({"id": "stock@small"}))],
            vec![w(json!({"title": "   "}))],
            vec![w(json!({"description": "d".repeat(201)}))],
            vec![w(json!({"sizes": []}))],
            vec![w(json!({"sizes": ["small", "small"]}))],
            vec![w(json!({"sizes": ["huge"]}))],
            vec![w(json!({"sizes": ["medium"], "defaultSize": "small"}))],
            vec![w(json!({"defaultSize": "small"}))],
            vec![w(json!({"requiresRoles": ["root"]}))],
            vec![w(json!({"suggest": "true"}))],
        ];
        for case in cases {
            assert!(compile(case.clone()).is_err(), "{case:?}");
        }
        assert!(compile(vec![w(json!({"defaultSize": "large"}))]).is_ok());
    }
}
