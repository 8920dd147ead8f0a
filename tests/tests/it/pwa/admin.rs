//! App sessions never administer, and administrators manage other people's devices: scenarios
//! 18, 21 and 22 of spec/approvals.md §6.

use http::{HeaderMap, Method};
use k2b_core::access::authenticate;
use k2b_core::approvals::{EligibilityError, require_recent_web_session};
use k2b_core::auth::{Actor, Role, SessionKind};
use k2b_core::identity::invocation::{
    InvocationAuthority, InvocationRequest, InvocationSessionKind, build_claims,
    resolve_invocation_actor,
};
use serde_json::Value;

use super::{Jar, Options, Pwa, token_sid};

fn headers_with(jar: &Jar, name: &str) -> HeaderMap {
    let mut headers = HeaderMap::new();
    let value = format!("{name}={}", jar.get(name).expect("cookie"));
    headers.insert("cookie", value.parse().expect("header"));
    headers
}

/// Scenario 18: an administrator's app session is of kind app and has no admin role (the web
/// session keeps it); web-only routes refuse it; it never counts as a recent sign-in; an
/// invocation made from it says `session_kind: "app"`.
#[tokio::test]
async fn scenario_18_app_sessions_never_administer() {
    let pwa = Pwa::new().await;
    let admin = pwa.user("Root", true).await;
    let mut browser = pwa.browser(&admin).await;
    let (phone, device) = pwa.pair(&mut browser, "android").await;

    let web = authenticate(&pwa.core, &headers_with(&browser, "session_token"))
        .await
        .expect("web");
    assert!(web.person().expect("person").has_role(Role::Admin));
    let app = authenticate(&pwa.core, &headers_with(&phone, "pwa_session"))
        .await
        .expect("app");
    let Actor::User(user) = &app else {
        panic!("a user")
    };
    assert_eq!(user.session, SessionKind::App { device_id: device });
    assert!(!user.user.has_role(Role::Admin));

    // Web-only routes: the app session alone is refused as FORBIDDEN.
    let mut app_only = Jar::default();
    app_only.set(
        "pwa_session",
        &phone.get("pwa_session").expect("session"),
        "/",
    );
    pwa.get("/api/auth/pwa/v1/devices", &mut app_only)
        .await
        .expect(403, Some("FORBIDDEN"));
    pwa.post("/api/auth/pwa/v1/pairings", &mut app_only, None)
        .await
        .expect(403, Some("FORBIDDEN"));
    // An app token presented as a web session is not a web session either.
    let mut disguised = Jar::default();
    disguised.set(
        "session_token",
        &phone.get("pwa_session").expect("session"),
        "/",
    );
    pwa.get("/api/auth/pwa/v1/devices", &mut disguised)
        .await
        .expect(403, Some("FORBIDDEN"));
    // The administrators' routes refuse it too.
    pwa.get(
        &format!("/api/accounts/users/{}/app-devices", admin.id),
        &mut app_only,
    )
    .await
    .expect(403, Some("FORBIDDEN"));

    let app_sid = token_sid(&phone.get("pwa_session").expect("session"));
    let mut conn = pwa.core.pool.acquire().await.expect("connection");
    let recent =
        require_recent_web_session(&mut conn, &pwa.core.settings, admin.id, app_sid, 600).await;
    assert!(matches!(recent, Err(EligibilityError::Reauthenticate)));
    let web_sid = token_sid(&browser.get("session_token").expect("token"));
    require_recent_web_session(&mut conn, &pwa.core.settings, admin.id, web_sid, 600)
        .await
        .expect("the web session counts");

    // An invocation from the app session carries session_kind "app" and resolves without admin.
    let authority = InvocationAuthority::from_actor(&app).expect("authority");
    assert_eq!(authority.session_kind, Some(InvocationSessionKind::App));
    let claims = build_claims(
        super::ORIGIN,
        &InvocationRequest {
            target_app: "weather",
            caller_app: "core",
            operation: "widget.read:current",
            schema_hash: None,
            authority: &authority,
            request_id: None,
            issued_at: None,
            jti: None,
        },
    )
    .expect("claims");
    assert_eq!(claims.session_kind, Some(InvocationSessionKind::App));
    let json = serde_json::to_value(&claims).expect("json");
    assert_eq!(json["session_kind"], "app");
    let resolved = resolve_invocation_actor(&mut conn, &pwa.core.settings, &claims)
        .await
        .expect("resolve")
        .expect("a user");
    let Actor::User(resolved) = resolved else {
        panic!("a user")
    };
    assert!(!resolved.user.has_role(Role::Admin));
    assert!(matches!(resolved.session, SessionKind::App { .. }));
}

/// Scenario 21: the administrator lists and revokes another person's devices.
#[tokio::test]
async fn scenario_21_administrator_devices() {
    let pwa = Pwa::new().await;
    let root = pwa.user("Root", true).await;
    let ada = pwa.user("Ada", false).await;
    let mut admin_browser = pwa.browser(&root).await;
    let mut browser = pwa.browser(&ada).await;
    let (mut phone, device) = pwa.pair(&mut browser, "ios").await;
    let (_, other) = pwa.pair(&mut browser, "android").await;
    pwa.send(
        Method::PATCH,
        "/pwa/_auth/session",
        &mut phone,
        Options {
            body: Some(serde_json::json!({"name": "Test phone"})),
            ..Options::default()
        },
    )
    .await
    .expect(204, None);

    let path = format!("/api/accounts/users/{}/app-devices", ada.id);
    let list = pwa.get(&path, &mut admin_browser).await;
    list.expect(200, None);
    let devices = list.body["devices"].as_array().expect("devices");
    let names: Vec<&str> = devices
        .iter()
        .map(|d| d["name"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(names, ["Test phone", "Android"]);
    assert!(devices.iter().all(|d| d["current"] == false));
    assert_eq!(list.headers["cache-control"], "no-store");

    let one = format!("{path}/{device}");
    let revoked = pwa
        .send(Method::DELETE, &one, &mut admin_browser, Options::default())
        .await;
    revoked.expect(200, None);
    assert_eq!(revoked.body, serde_json::json!({"revoked": true}));
    let again = pwa
        .send(Method::DELETE, &one, &mut admin_browser, Options::default())
        .await;
    assert_eq!(again.body, serde_json::json!({"revoked": false}));
    pwa.send(
        Method::DELETE,
        &format!("{path}/{other}"),
        &mut admin_browser,
        Options::default(),
    )
    .await
    .expect(200, None);
    let list = pwa.get(&path, &mut admin_browser).await;
    assert_eq!(list.body["devices"], serde_json::json!([]));
    pwa.send(
        Method::DELETE,
        &format!("{path}/{}", uuid::Uuid::new_v4()),
        &mut admin_browser,
        Options::default(),
    )
    .await
    .expect(404, Some("NOT_FOUND"));
    pwa.get(
        &format!("/api/accounts/users/{}/app-devices", uuid::Uuid::new_v4()),
        &mut admin_browser,
    )
    .await
    .expect(404, Some("NOT_FOUND"));

    assert!(pwa.probe(&phone).await.is_none());
    pwa.renew(&mut phone).await.expect(401, Some("UNPAIRED"));
    let rows = pwa.audit_rows().await;
    let revoke: &Value = rows
        .iter()
        .find(|r| r["action"] == "auth.pwa.device.revoke" && r["target_id"] == device.to_string())
        .expect("revoke audit");
    assert_eq!(revoke["actor_user_id"], root.id.to_string());
    assert_eq!(revoke["metadata"]["reason"], "admin");
    assert_eq!(revoke["metadata"]["targetUserId"], ada.id.to_string());

    // Anonymous and non-admin callers.
    pwa.get(&path, &mut Jar::default()).await.expect(401, None);
    pwa.get(&path, &mut browser)
        .await
        .expect(403, Some("FORBIDDEN"));
}

/// Scenario 22: an administrator's own app session can neither list nor revoke.
#[tokio::test]
async fn scenario_22_admin_app_session_is_refused() {
    let pwa = Pwa::new().await;
    let root = pwa.user("Root", true).await;
    let ada = pwa.user("Ada", false).await;
    let mut root_browser = pwa.browser(&root).await;
    let mut browser = pwa.browser(&ada).await;
    let (phone, device) = pwa.pair(&mut browser, "android").await;
    let (root_phone, _) = pwa.pair(&mut root_browser, "android").await;
    let mut app_only = Jar::default();
    app_only.set(
        "pwa_session",
        &root_phone.get("pwa_session").expect("session"),
        "/",
    );
    let path = format!("/api/accounts/users/{}/app-devices", ada.id);
    pwa.get(&path, &mut app_only)
        .await
        .expect(403, Some("FORBIDDEN"));
    pwa.send(
        Method::DELETE,
        &format!("{path}/{device}"),
        &mut app_only,
        Options::default(),
    )
    .await
    .expect(403, Some("FORBIDDEN"));
    assert!(pwa.probe(&phone).await.is_some(), "the device stays active");
}
