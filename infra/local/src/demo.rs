//! The demo installation the local runner seeds: an administrator, and a demo app in the
//! registry whose own server (on a port of its own, like a real app) answers Core's widget
//! invocations: one widget with content, one with nothing to show, one slow, one failing.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use futures::FutureExt;
use k2b_core::Core;
use k2b_core::auth::{self, NewUser, Profile, Provider};
use k2b_core::help::{CompiledHelp, compile_help, define_localized_help};
use k2b_core::identity::remote::RemoteVerifier;
use k2b_core::widgets::compile_declarations;
use k2b_core::widgets::provider::{
    InvocationKeys, WidgetCall, WidgetHandler, WidgetProvider, WidgetReply,
};
use serde_json::{Value, json};

/// The seeded administrator's uid.
pub const ADMIN_UID: &str = "admin";
/// The demo app's id.
pub const DEMO_APP_ID: &str = "demo";
/// How long the demo's slow widget takes.
pub const SLOW_WIDGET_DELAY: Duration = Duration::from_secs(2);

/// The demo app's widget declarations.
fn demo_widgets() -> Value {
    json!([
        {"id": "stock", "path": "/api/demo/widget/stock", "title": "Stock", "sizes": ["small", "medium"], "defaultSize": "small", "suggest": true},
        {"id": "empty", "path": "/api/demo/widget/empty", "title": "Nothing to show"},
        {"id": "slow", "path": "/api/demo/widget/slow", "title": "Slow"},
        {"id": "failing", "path": "/api/demo/widget/failing", "title": "Failing"}
    ])
}

/// The demo app's Help: two articles in English, one of them translated to German.
const DEMO_HELP_EN: [&str; 2] = [
    "---
id: getting-started
title: Getting started
icon: ti ti-rocket
description: What the demo app shows and where to begin
order: 10
---
The demo app keeps a small **stock** of items and shows it on the dashboard.

:::note
Everything here is sample data of the local runner.
:::

## Your first look {icon=\"eye\"}
Open the dashboard and find the *Stock* widget: it counts the items in stock and lists
the latest ones.
",
    "---
id: widgets
title: Dashboard widgets
icon: ti ti-layout-dashboard
order: 20
---
The demo app offers four widgets: one with content, one with nothing to show, a slow one
and one that always fails, so that every state of a widget can be seen.
",
];
const DEMO_HELP_DE: [&str; 1] = ["---
id: getting-started
title: Erste Schritte
description: Was die Demo-App zeigt und wo man anfängt
---
Die Demo-App führt einen kleinen **Bestand** an Artikeln und zeigt ihn auf dem Dashboard.

:::note
Alles hier sind Beispieldaten des lokalen Runners.
:::

## Der erste Blick {icon=\"eye\"}
Öffnen Sie das Dashboard und suchen Sie das Widget *Bestand*: Es zählt die Artikel am Lager
und listet die neuesten.
"];

/// The demo app's Help, compiled: the corpus it publishes and the summary it advertises.
pub fn demo_help() -> anyhow::Result<CompiledHelp> {
    let definition = define_localized_help(
        "en",
        &[("en", DEMO_HELP_EN.to_vec()), ("de", DEMO_HELP_DE.to_vec())],
    )
    .context("demo help")?;
    compile_help(DEMO_APP_ID, Some("/app/demo"), &definition).context("demo help")
}

/// The demo app's registry entry advertising its Help; its server listens at `demo_url`.
pub fn demo_app_entry(demo_url: &str, help: &CompiledHelp) -> anyhow::Result<Value> {
    let mut entry = demo_entry(demo_url);
    entry["help"] = serde_json::to_value(&help.summary)?;
    Ok(entry)
}

fn demo_entry(demo_url: &str) -> Value {
    json!({
        "id": DEMO_APP_ID,
        "name": "Demo",
        "icon": "ti ti-flask",
        "description": "A demo app served by the local runner",
        "baseUrl": demo_url,
        "routes": ["/app/demo", "/api/demo"],
        "nav": {"href": "/app/demo", "section": "primary"},
        "presentation": {
            "baseLocale": "en",
            "translations": {"de": {
                "name": "Demo",
                "description": "Eine Demo-App des lokalen Runners",
                "widgets": {"stock": {"title": "Bestand"}}
            }}
        },
        "platformPermissions": ["mail:send"],
        "widgets": demo_widgets()
    })
}

fn stock(call: WidgetCall) -> WidgetReply {
    let german = call.locale.as_deref().is_some_and(|l| l.starts_with("de"));
    let who = call
        .actor
        .person()
        .and_then(|p| p.display_name.clone())
        .unwrap_or_else(|| "someone".into());
    WidgetReply::Json(json!({
        "title": if german { "Bestand" } else { "Stock" },
        "icon": "ti ti-box",
        "href": "/app/demo",
        "meta": format!("{} · {}", call.size, who),
        "blocks": [
            {"kind": "stat", "value": 42, "label": if german { "Artikel am Lager" } else { "Items in stock" },
             "accent": {"tone": "emerald", "icon": "ti ti-trending-up", "text": "+3"}},
            {"kind": "list", "items": [
                {"label": "Notebooks", "meta": "17", "href": "/app/demo/items/notebooks"},
                {"label": "Pens", "meta": "25", "href": "/app/demo/items/pens"}
            ]}
        ]
    }))
}

/// The demo app's server: its widget handlers behind the invocation check, verified against
/// the invocation keys Core publishes.
pub async fn demo_router(core: &Core) -> anyhow::Result<axum::Router> {
    let declarations =
        compile_declarations(demo_widgets().as_array().map(Vec::as_slice))?.unwrap_or_default();
    let runtime = core.identity.runtime_config().await?;
    let verifier = RemoteVerifier::new(
        runtime.invocation_jwks_url.clone(),
        runtime.issuer.clone(),
        Arc::new(k2b_core::identity::Metrics::default()),
    );
    let mut handlers: HashMap<String, WidgetHandler> = HashMap::new();
    handlers.insert(
        "stock".into(),
        Arc::new(|call| async move { stock(call) }.boxed()),
    );
    handlers.insert(
        "empty".into(),
        Arc::new(|_| async { WidgetReply::Empty }.boxed()),
    );
    handlers.insert(
        "slow".into(),
        Arc::new(|call| {
            async move {
                tokio::time::sleep(SLOW_WIDGET_DELAY).await;
                let mut reply = stock(call);
                if let WidgetReply::Json(body) = &mut reply {
                    body["title"] = json!("Slow");
                }
                reply
            }
            .boxed()
        }),
    );
    handlers.insert(
        "failing".into(),
        Arc::new(|_| async { WidgetReply::Failed }.boxed()),
    );
    let provider = WidgetProvider::new(
        core.clone(),
        DEMO_APP_ID,
        InvocationKeys::Remote(Arc::new(verifier)),
        &declarations,
        handlers,
    )
    .context("demo widgets")?;
    Ok(provider.router())
}

/// The installed web app's shell, registered so that pairing a phone can be walked locally
/// (start, claim, complete and renew need a live `pwa` app owning `/pwa`).
pub fn pwa_shell_entry(base_url: &str) -> Value {
    json!({
        "id": k2b_core::pwa::SHELL_APP_ID,
        "name": "Mobile app",
        "icon": "ti ti-device-mobile",
        "description": "The installed web app's shell",
        "baseUrl": base_url,
        "routes": [k2b_core::pwa::SHELL_ROUTE]
    })
}

/// The second demo app: it sends no mail and reads the demo app's mail log (`mail:read` and a
/// grant), so the two sides of log access can be tried locally.
pub const REPORTS_APP_ID: &str = "reports";
/// The local SMTP port the seeded mail profile delivers to (`K2B_LOCAL_SMTP_PORT`).
pub const DEFAULT_SMTP_PORT: u16 = 2525;

/// The second demo app's registry entry (no server of its own).
pub fn reports_entry(base_url: &str) -> Value {
    json!({
        "id": REPORTS_APP_ID,
        "name": "Reports",
        "icon": "ti ti-report",
        "description": "A demo app that reads the demo app's mail log",
        "baseUrl": base_url,
        "routes": ["/app/reports"],
        "platformPermissions": ["mail:read"]
    })
}

/// A default mail profile delivering to a local SMTP port, and the reports app's grant to read
/// the demo app's log; kept as they are once they exist.
async fn seed_mail(core: &Core, admin: uuid::Uuid) -> anyhow::Result<()> {
    use k2b_core::mail::{admin as mail_admin, policy, profiles};
    let actor = profiles::AdminActor {
        user_id: admin,
        uid: ADMIN_UID.into(),
        request_id: None,
    };
    if policy::all_profiles(&core.pool).await?.is_empty() {
        let port = std::env::var("K2B_LOCAL_SMTP_PORT")
            .ok()
            .and_then(|p| p.parse::<u16>().ok())
            .unwrap_or(DEFAULT_SMTP_PORT);
        let input = profiles::ProfileInput::parse(&json!({
            "name": "Local",
            "fromAddress": "noreply@k2b.localhost",
            "smtpHost": "127.0.0.1",
            "smtpPort": port,
            "smtpSecure": false
        }))?;
        profiles::put(&core.pool, &core.settings, "local", input, &actor).await?;
    }
    let reports = mail_admin::admin_app(&core.pool, REPORTS_APP_ID).await?;
    if reports["logApps"].as_array().is_none_or(Vec::is_empty) {
        mail_admin::set_log_access(&core.pool, REPORTS_APP_ID, vec![DEMO_APP_ID.into()], &actor)
            .await?;
    }
    Ok(())
}

/// Seeds what is missing, keeping whatever is already there. Returns the admin's id.
pub async fn seed(core: &Core) -> anyhow::Result<uuid::Uuid> {
    let mut conn = core.pool.acquire().await?;
    if let Some(existing) = auth::find_user_by_uid(&mut conn, ADMIN_UID).await? {
        k2b_core::approvals::accept_legal_terms(&mut conn, existing.id)
            .await
            .context("record the administrator's acceptance of the terms")?;
        seed_mail(core, existing.id)
            .await
            .context("seed the mail profile")?;
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
    k2b_core::approvals::accept_legal_terms(&mut conn, admin.id)
        .await
        .context("record the administrator's acceptance of the terms")?;
    if core.settings.get("app.name").await? == json!("My App") {
        core.settings
            .set("app.name", json!("K2B Cloud (local)"))
            .await?;
    }
    seed_mail(core, admin.id)
        .await
        .context("seed the mail profile")?;
    Ok(admin.id)
}
