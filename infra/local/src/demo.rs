//! The demo installation the local runner seeds: an administrator and a demo app in the registry.

use anyhow::Context;
use k2b_core::Core;
use k2b_core::auth::{self, NewUser, Profile, Provider};
use serde_json::{Value, json};

/// The seeded administrator's uid.
pub const ADMIN_UID: &str = "admin";
/// The demo app's id.
pub const DEMO_APP_ID: &str = "demo";

/// The demo app's registry entry; its endpoints are served by the runner under `/demo`.
pub fn demo_app_entry(base_url: &str) -> Value {
    json!({
        "id": DEMO_APP_ID,
        "name": "Demo",
        "icon": "ti ti-flask",
        "description": "A demo app served by the local runner",
        "baseUrl": format!("{base_url}/demo"),
        "routes": ["/app/demo", "/api/demo"],
        "nav": {"href": "/app/demo", "section": "primary"},
        "presentation": {
            "baseLocale": "en",
            "translations": {"de": {"name": "Demo", "description": "Eine Demo-App des lokalen Runners"}}
        },
        "platformPermissions": ["mail.send"],
        "widgets": [
            {"id": "stock", "path": "/api/demo/widget/stock", "title": "Stock", "sizes": ["small", "medium"], "defaultSize": "small", "suggest": true},
            {"id": "empty", "path": "/api/demo/widget/empty", "title": "Nothing to show"},
            {"id": "slow", "path": "/api/demo/widget/slow", "title": "Slow"},
            {"id": "failing", "path": "/api/demo/widget/failing", "title": "Failing"}
        ]
    })
}

/// Seeds what is missing, keeping whatever is already there. Returns the admin's id.
pub async fn seed(core: &Core) -> anyhow::Result<uuid::Uuid> {
    let mut conn = core.pool.acquire().await?;
    if let Some(existing) = auth::find_user_by_uid(&mut conn, ADMIN_UID).await? {
        return Ok(existing.id);
    }
    let admin = auth::create_user(
        &mut conn,
        &NewUser {
            uid: ADMIN_UID.into(),
            provider: Provider::Local,
            profile: Profile::User,
            display_name: Some("Local Admin".into()),
            mail: Some("admin@localhost".into()),
            admin: true,
        },
    )
    .await
    .context("seed the administrator")?;
    if core.settings.get("app.name").await? == json!("My App") {
        core.settings
            .set("app.name", json!("K2B Cloud (local)"))
            .await?;
    }
    Ok(admin.id)
}
