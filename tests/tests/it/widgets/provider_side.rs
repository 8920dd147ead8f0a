//! The app side: the internal widget route an app serves for Core's invocations, and the
//! widget's public path (scenarios 32–33).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use futures::FutureExt;
use k2b_core::Core;
use k2b_core::auth::{Actor, AuthUser, OAuthUserActor, Role, SessionKind};
use k2b_core::identity::invocation::{InvocationAuthority, InvocationRequest, sign_invocation};
use k2b_core::identity::session::SessionRequest;
use k2b_core::identity::{IdentityError, IssueOptions, Purpose, workload};
use k2b_core::widgets::WidgetSize;
use k2b_core::widgets::compile_declarations;
use k2b_core::widgets::provider::{
    InvocationKeys, WidgetCall, WidgetHandler, WidgetProvider, WidgetReply,
};
use k2b_tests::{TestDb, core_for, create_user, serve};
use reqwest::StatusCode;
use serde_json::{Value, json};

struct App {
    _db: TestDb,
    core: Core,
    base: String,
    calls: Arc<Mutex<Vec<WidgetCall>>>,
    user: k2b_core::auth::UserRecord,
    client: reqwest::Client,
}

async fn app() -> App {
    let db = TestDb::new().await;
    let core = core_for(&db);
    let user = create_user(&core, "ada", false).await;
    let declarations = compile_declarations(Some(&[json!({
        "id": "stock", "path": "/api/inventory/widget/stock", "title": "Stock",
        "sizes": ["small", "medium"], "defaultSize": "small"
    })]))
    .expect("declarations")
    .expect("some");
    let calls = Arc::new(Mutex::new(Vec::new()));
    let record = calls.clone();
    let handler: WidgetHandler = Arc::new(move |call: WidgetCall| {
        let record = record.clone();
        async move {
            let size = call.size;
            record.lock().expect("calls").push(call);
            WidgetReply::Json(json!({"title": "Stock", "meta": size.as_str(), "blocks": []}))
        }
        .boxed()
    });
    let provider = WidgetProvider::new(
        core.clone(),
        "inventory",
        InvocationKeys::Local,
        &declarations,
        HashMap::from([("stock".to_string(), handler)]),
    )
    .expect("provider");
    let base = serve(provider.router()).await;
    App {
        _db: db,
        core,
        base,
        calls,
        user,
        client: reqwest::Client::new(),
    }
}

async fn invocation(
    core: &Core,
    target: &str,
    operation: &str,
    authority: &InvocationAuthority,
) -> String {
    core.identity
        .with_active_signer(
            Purpose::Invocation,
            IssueOptions::default(),
            |scope| async move {
                let token = sign_invocation(
                    &scope,
                    None,
                    &InvocationRequest {
                        target_app: target,
                        caller_app: "core",
                        operation,
                        schema_hash: None,
                        authority,
                        request_id: None,
                        issued_at: None,
                        jti: None,
                    },
                );
                (scope, token)
            },
        )
        .await
        .map_err(|e: IdentityError| e)
        .expect("invocation")
}

impl App {
    fn internal(&self, query: &str) -> reqwest::RequestBuilder {
        self.client.get(format!(
            "{}/api/_internal/widgets/v1/stock{query}",
            self.base
        ))
    }

    fn calls(&self) -> Vec<WidgetCall> {
        self.calls.lock().expect("calls").clone()
    }
}

/// Scenario 32: the internal route runs the handler with the invocation's actor, the locale and
/// the fitted size; the public path with the session's actor and `large`; OAuth-derived
/// invocations need `read` or `admin`.
#[tokio::test]
async fn scenario_32_internal_and_public_routes_give_the_same_context() {
    let app = app().await;
    let authority = InvocationAuthority::for_session(app.user.id, SessionKind::Web);
    let token = invocation(&app.core, "inventory", "widget.read:stock", &authority).await;

    let response = app
        .internal("")
        .bearer_auth(&token)
        .header("x-cloud-locale", "de-CH")
        .send()
        .await
        .expect("get");
    assert_eq!(response.status(), StatusCode::OK);
    let body: Value = response.json().await.expect("json");
    assert_eq!(body["meta"], "small");

    let session = app
        .core
        .identity
        .issue_session(
            &app.core.settings,
            SessionRequest::web(app.user.id),
            IssueOptions::default(),
        )
        .await
        .expect("session")
        .token;
    let response = app
        .client
        .get(format!("{}/api/inventory/widget/stock", app.base))
        .header("cookie", format!("session_token={session}"))
        .header("x-cloud-locale", "de-CH")
        .send()
        .await
        .expect("get");
    assert_eq!(response.status(), StatusCode::OK);

    let calls = app.calls();
    assert_eq!(calls.len(), 2);
    let (internal, public) = (&calls[0], &calls[1]);
    assert_eq!(internal.size, WidgetSize::Small);
    assert_eq!(public.size, WidgetSize::Large);
    for call in [internal, public] {
        assert_eq!(call.widget_id, "stock");
        assert_eq!(call.locale.as_deref(), Some("de-CH"));
        assert_eq!(call.actor.person().map(|p| p.id), Some(app.user.id));
    }
    assert!(internal.invocation.is_some());
    assert!(public.invocation.is_none());

    for (query, expected) in [
        ("?size=medium", WidgetSize::Medium),
        ("?size=large", WidgetSize::Small),
        ("?size=huge", WidgetSize::Small),
    ] {
        let response = app
            .internal(query)
            .bearer_auth(&token)
            .send()
            .await
            .expect("get");
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(
            app.calls().last().map(|c| c.size),
            Some(expected),
            "{query}"
        );
    }

    let person = AuthUser::from_record(&app.user, vec![Role::User]);
    for (scopes, allowed) in [
        (vec![], false),
        (vec!["openid", "profile"], false),
        (vec!["write"], false),
        (vec!["read"], true),
        (vec!["admin"], true),
    ] {
        let actor = Actor::OAuthUser(OAuthUserActor {
            user: person.clone(),
            client_id: "cli".into(),
            scopes: scopes.iter().map(|s| s.to_string()).collect(),
        });
        let authority = InvocationAuthority::from_actor(&actor).expect("authority");
        let token = invocation(&app.core, "inventory", "widget.read:stock", &authority).await;
        let before = app.calls().len();
        let response = app
            .internal("")
            .bearer_auth(&token)
            .send()
            .await
            .expect("get");
        if allowed {
            assert_eq!(response.status(), StatusCode::OK, "{scopes:?}");
            assert_eq!(app.calls().len(), before + 1);
        } else {
            assert_eq!(response.status(), StatusCode::FORBIDDEN, "{scopes:?}");
            assert_eq!(app.calls().len(), before, "handler not run");
        }
    }
}

/// Invocations for another app, another widget, or none at all are 401.
#[tokio::test]
async fn invalid_invocations_are_unauthorized() {
    let app = app().await;
    let authority = InvocationAuthority::for_session(app.user.id, SessionKind::Web);
    let other_app = invocation(&app.core, "weather", "widget.read:stock", &authority).await;
    let other_widget = invocation(&app.core, "inventory", "widget.read:other", &authority).await;
    for request in [
        app.internal(""),
        app.internal("").bearer_auth(&other_app),
        app.internal("").bearer_auth(&other_widget),
        app.internal("").bearer_auth("not-a-token"),
        app.client
            .get(format!("{}/api/_internal/widgets/v1/other", app.base))
            .bearer_auth(&other_widget),
    ] {
        let response = request.send().await.expect("get");
        assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
        let body: Value = response.json().await.expect("json");
        assert_eq!(
            body,
            json!({"code": "UNAUTHORIZED", "message": "A valid Cloud invocation is required"})
        );
    }
    assert!(app.calls().is_empty());
}

/// Scenario 33: an app workload credential is refused on the internal route before anything
/// else; an ordinary resource-bound key passes that check (and then needs an invocation).
#[tokio::test]
async fn scenario_33_workload_credentials_are_refused_on_the_internal_route() {
    let app = app().await;
    let mut conn = app.core.pool.acquire().await.expect("conn");
    let (reserved, _) =
        workload::issue_app_credential(&mut conn, "inventory", &["identity:invoke"])
            .await
            .expect("credential");
    // An ordinary resource-bound key: a service account for a resource that is not an app.
    let account = k2b_tests::service_account(&app.core.pool, None).await;
    let ordinary = k2b_tests::api_key(&app.core.pool, account, &["read"]).await;
    drop(conn);
    let response = app
        .internal("")
        .bearer_auth(&reserved)
        .send()
        .await
        .expect("get");
    assert_eq!(response.status(), StatusCode::FORBIDDEN);
    let body: Value = response.json().await.expect("json");
    assert_eq!(
        body["message"],
        "App workload credentials require a dedicated Core authority route"
    );
    let response = app
        .internal("")
        .bearer_auth(&ordinary)
        .send()
        .await
        .expect("get");
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
    let body: Value = response.json().await.expect("json");
    assert_eq!(body["message"], "A valid Cloud invocation is required");
    assert!(app.calls().is_empty());
}
