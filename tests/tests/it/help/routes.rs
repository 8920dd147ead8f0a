//! The `help` function over real HTTP: reading (scenarios 11, 16–21, 27–29), the manifest and
//! list routes, and publishing with an app's own credential.

use k2b_core::auth::{Actor, OAuthUserActor, SessionKind, UserActor};
use k2b_core::help::store;
use k2b_core::help::{CompiledHelp, compile_help, define_localized_help};
use k2b_core::identity::workload;
use k2b_tests::serve;
use reqwest::StatusCode;
use serde_json::{Value, json};

use super::{APP, HelpDb, advertise, corpora_rows, document_rows, entry, person, source};

/// The API fixture: app `inventory` with `start` (English, with raw script and a warning
/// callout) translated to German.
fn api_help() -> CompiledHelp {
    let en = source(
        "start",
        "Start",
        "order: 10\n",
        "Hello. Create your first record in the [example app](/app/example) or read the \
         [documentation](https://docs.example.org).\n\n\
         <script>danger()</script>\n\n\
         <p data-script-source=\"x\">Kept words</p>\n\n\
         :::warning\nMind the stock levels.\n:::",
    );
    let details = source(
        "details",
        "Details",
        "order: 20\n",
        "The documentation of every field.",
    );
    let de = source(
        "start",
        "Starten",
        "",
        "Hallo. Legen Sie Ihren ersten Datensatz an.\n\n:::warning\nAchten Sie auf den Bestand.\n:::",
    );
    let definition = define_localized_help("en", &[("en", vec![&en, &details]), ("de", vec![&de])])
        .expect("definition");
    compile_help("inventory", Some("/app/inventory"), &definition).expect("compile")
}

/// The actor an outer layer places on every request.
type ActorOf = fn(&HelpDb) -> Actor;

/// The `help` function on loopback, a signed-in user, and a client.
struct HelpSite {
    t: HelpDb,
    base: String,
    client: reqwest::Client,
    cookie: String,
}

impl HelpSite {
    /// Serves the function; `actor` (when given) is placed on every request the way an
    /// authentication layer in front of the routes would.
    async fn start(actor: Option<ActorOf>) -> HelpSite {
        let t = HelpDb::new().await;
        let mut router = help::router(t.core.clone());
        if let Some(actor) = actor {
            router = router.layer(axum::Extension(actor(&t)));
        }
        let base = serve(router).await;
        let cookie = t.cookie(&t.user).await;
        HelpSite {
            t,
            base,
            client: reqwest::Client::new(),
            cookie,
        }
    }

    /// Publishes and advertises the API fixture.
    async fn with_api_fixture() -> HelpSite {
        let site = HelpSite::start(None).await;
        site.publish_direct(&api_help(), None).await;
        site
    }

    async fn publish_direct(&self, help: &CompiledHelp, nav: Option<Value>) {
        store::register(&self.t.core.pool, &help.corpus)
            .await
            .expect("register");
        advertise(
            &self.t.core,
            &entry(&help.corpus.app_id, "Inventory", Some(&help.summary), nav),
        )
        .await;
    }

    /// `GET path` as the signed-in user, in `locale` when given.
    async fn get(&self, path: &str, locale: Option<&str>) -> (StatusCode, Value) {
        let mut request = self
            .client
            .get(format!("{}{path}", self.base))
            .header("cookie", &self.cookie);
        if let Some(locale) = locale {
            request = request.header("x-cloud-locale", locale);
        }
        read(request.send().await.expect("request")).await
    }

    /// `GET path` without credentials.
    async fn get_anonymous(&self, path: &str) -> (StatusCode, Value) {
        read(
            self.client
                .get(format!("{}{path}", self.base))
                .send()
                .await
                .expect("request"),
        )
        .await
    }

    /// `PUT /api/help/v1/{app}/corpus` with `credential` and a raw body.
    async fn put_corpus(
        &self,
        app: &str,
        credential: Option<&str>,
        body: Vec<u8>,
    ) -> (StatusCode, Value) {
        let mut request = self
            .client
            .put(format!("{}/api/help/v1/{app}/corpus", self.base))
            .header("content-type", "application/json")
            .body(body);
        if let Some(credential) = credential {
            request = request.bearer_auth(credential);
        }
        read(request.send().await.expect("request")).await
    }

    /// A workload credential of `app` with `scopes`.
    async fn credential(&self, app: &str, scopes: &[&str]) -> String {
        let mut conn = self.t.core.pool.acquire().await.expect("connection");
        workload::issue_app_credential(&mut conn, app, scopes)
            .await
            .expect("credential")
            .0
    }
}

async fn read(response: reqwest::Response) -> (StatusCode, Value) {
    let status = response.status();
    let text = response.text().await.expect("body");
    let body = if text.is_empty() {
        Value::Null
    } else {
        serde_json::from_str(&text).unwrap_or(Value::String(text))
    };
    (status, body)
}

fn ids(body: &Value) -> Vec<&str> {
    body["ids"]
        .as_array()
        .expect("ids")
        .iter()
        .map(|id| id.as_str().expect("id"))
        .collect()
}

#[tokio::test]
async fn scenario_11_the_request_locale_chooses_the_translation() {
    let site = HelpSite::start(None).await;
    site.t.inventory().await;
    let (status, body) = site
        .get(
            &format!("/api/help/v1/{APP}/search?q=Formular"),
            Some("de-CH"),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["locale"], "de-CH");
    assert_eq!(ids(&body), ["permissions"]);
    let (status, body) = site
        .get(
            &format!("/api/help/v1/{APP}/documents/permissions"),
            Some("de-CH"),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["locale"], "de");
    assert!(
        body["markdown"]
            .as_str()
            .expect("markdown")
            .contains("Datensätze")
    );
}

#[tokio::test]
async fn scenario_16_search_and_a_sanitised_document() {
    let site = HelpSite::with_api_fixture().await;
    let (status, body) = site
        .get("/api/help/v1/inventory/search?q=create", None)
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body, json!({"locale": "en", "ids": ["start"]}));
    let (status, body) = site
        .get("/api/help/v1/inventory/documents/start", None)
        .await;
    assert_eq!(status, StatusCode::OK);
    let html = body["html"].as_str().expect("html");
    assert!(!html.contains("<script"), "{html}");
    assert!(!html.contains("danger()"), "{html}");
    assert!(
        body["markdown"]
            .as_str()
            .expect("markdown")
            .contains("Hello")
    );
    assert_eq!(body["id"], "start");
    assert_eq!(body["title"], "Start");
}

#[tokio::test]
async fn scenario_17_locales_of_documents_and_the_missing_one() {
    let site = HelpSite::with_api_fixture().await;
    let path = "/api/help/v1/inventory/documents/start";
    let (_, german) = site.get(path, Some("de-CH")).await;
    assert_eq!(
        (&german["locale"], &german["title"]),
        (&json!("de"), &json!("Starten"))
    );
    let (_, english) = site.get(path, Some("en")).await;
    assert_eq!(
        (&english["locale"], &english["title"]),
        (&json!("en"), &json!("Start"))
    );
    let (status, body) = site
        .get("/api/help/v1/inventory/documents/absent", Some("en"))
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(
        body,
        json!({"code": "HELP_NOT_FOUND", "message": "Help document not found"})
    );
    let (status, body) = site
        .get("/api/help/v1/inventory/documents/absent", Some("de-AT"))
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(body["message"], "Hilfedokument nicht gefunden");
}

#[tokio::test]
async fn scenario_18_callout_labels_follow_the_document_locale() {
    let site = HelpSite::with_api_fixture().await;
    let path = "/api/help/v1/inventory/documents/start";
    let (_, german) = site.get(path, Some("de-AT")).await;
    assert!(
        german["html"]
            .as_str()
            .expect("html")
            .contains("<span class=\"k2b-sr-only\">Warnung: </span>"),
        "{german}"
    );
    let (_, english) = site.get(path, Some("en")).await;
    assert!(
        english["html"]
            .as_str()
            .expect("html")
            .contains("<span class=\"k2b-sr-only\">Warning: </span>"),
        "{english}"
    );
}

#[tokio::test]
async fn scenario_19_signed_in_people_read_and_nobody_else() {
    let site = HelpSite::with_api_fixture().await;
    for path in [
        "/api/help/v1/inventory/search?q=create",
        "/api/help/v1/inventory/documents/start",
        "/api/help/v1/inventory/documents/absent",
        "/api/help/v1/inventory/manifest",
        "/api/help/v1",
    ] {
        let (status, body) = site.get_anonymous(path).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{path}");
        assert_eq!(body["message"], "Authentication required", "{path}");
    }
    // The viewer is the signed-in user: an app only for users is visible to them.
    let help = api_help();
    site.publish_direct(
        &help,
        Some(json!({"href": "/app/inventory", "section": "more", "requiresRoles": ["user"]})),
    )
    .await;
    let (status, body) = site
        .get("/api/help/v1/inventory/search?q=create", None)
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(ids(&body), ["start"]);
}

fn oauth(scopes: &'static [&'static str]) -> impl Fn(&HelpDb) -> Actor {
    move |t| {
        Actor::OAuthUser(OAuthUserActor {
            user: t.viewer(),
            client_id: "reports-cli".into(),
            scopes: scopes.iter().map(|s| s.to_string()).collect(),
        })
    }
}

#[tokio::test]
async fn scenario_20_oauth_callers_need_read_or_admin() {
    fn profile_only(t: &HelpDb) -> Actor {
        oauth(&["openid", "profile"])(t)
    }
    fn read_scope(t: &HelpDb) -> Actor {
        oauth(&["read"])(t)
    }
    fn admin_scope(t: &HelpDb) -> Actor {
        oauth(&["admin"])(t)
    }
    fn session(t: &HelpDb) -> Actor {
        Actor::User(UserActor {
            user: t.viewer(),
            sid: uuid::Uuid::new_v4(),
            session: SessionKind::Web,
        })
    }
    let cases: [(ActorOf, StatusCode); 4] = [
        (profile_only, StatusCode::FORBIDDEN),
        (read_scope, StatusCode::OK),
        (admin_scope, StatusCode::OK),
        (session, StatusCode::OK),
    ];
    for (actor, expected) in cases {
        let site = HelpSite::start(Some(actor)).await;
        site.publish_direct(&api_help(), None).await;
        let (status, body) = site
            .get("/api/help/v1/inventory/search?q=create", None)
            .await;
        assert_eq!(status, expected, "{body}");
        if expected == StatusCode::FORBIDDEN {
            assert_eq!(
                body,
                json!({"code": "FORBIDDEN", "message": "OAuth scope read or admin is required"})
            );
            let (status, _) = site
                .get("/api/help/v1/inventory/documents/start", None)
                .await;
            assert_eq!(status, StatusCode::FORBIDDEN);
        } else {
            assert_eq!(ids(&body), ["start"]);
        }
    }
}

#[tokio::test]
async fn scenario_21_a_rejected_credential_is_401_and_a_failing_store_500() {
    let site = HelpSite::with_api_fixture().await;
    let (status, _) = read(
        site.client
            .get(format!(
                "{}/api/help/v1/inventory/search?q=create",
                site.base
            ))
            .header("cookie", "session_token=not.a.token")
            .send()
            .await
            .expect("request"),
    )
    .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);

    sqlx::query("ALTER TABLE help.documents RENAME TO documents_gone")
        .execute(&site.t.core.pool)
        .await
        .expect("break the store");
    for path in [
        "/api/help/v1/inventory/search?q=create",
        "/api/help/v1/inventory/documents/start",
        "/api/help/v1/inventory/manifest",
        "/api/help/v1",
    ] {
        let (status, body) = site.get(path, None).await;
        assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR, "{path}");
        assert_eq!(body["code"], "INTERNAL", "{path}");
        assert!(!body.to_string().contains("documents"), "{body}");
    }
}

#[tokio::test]
async fn scenario_28_manifest_is_metadata_and_links_stay_in_place() {
    let site = HelpSite::with_api_fixture().await;
    let (status, manifest) = site.get("/api/help/v1/inventory/manifest", None).await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        !manifest.to_string().contains("Hello"),
        "no bodies: {manifest}"
    );
    assert_eq!(manifest["pageBase"], "/app/inventory/help");
    assert_eq!(manifest["baseLocale"], "en");
    let documents = manifest["documents"].as_array().expect("documents");
    assert_eq!(documents.len(), 2);
    assert_eq!(
        documents[0],
        json!({"id": "start", "title": "Start", "order": 10, "locale": "en",
               "searchUrl": "/api/help/v1/inventory/search",
               "url": "/api/help/v1/inventory/documents/start"})
    );
    let (_, found) = site
        .get("/api/help/v1/inventory/search?q=documentation", None)
        .await;
    // Equal ranks fall back to the documents' order.
    assert_eq!(ids(&found), ["start", "details"], "body text is searched");
    let (_, document) = site
        .get("/api/help/v1/inventory/documents/start", None)
        .await;
    let html = document["html"].as_str().expect("html");
    let local_link = html
        .split("<a ")
        .find(|a| a.contains("href=\"/app/example\""))
        .expect("the in-app link");
    let local_link = &local_link[..local_link.find('>').expect("tag end")];
    assert!(!local_link.contains("target"), "{local_link}");
    assert!(html.contains("href=\"https://docs.example.org\""), "{html}");
    assert!(html.contains("target=\"_blank\""), "{html}");
    assert!(!html.contains("data-script-source"), "{html}");
    assert!(html.contains("Kept words"), "{html}");
}

#[tokio::test]
async fn scenario_29_unknown_documents_and_apps_are_404() {
    let site = HelpSite::with_api_fixture().await;
    for path in [
        "/api/help/v1/inventory/documents/unknown",
        "/api/help/v1/nowhere/documents/start",
        "/api/help/v1/nowhere/manifest",
    ] {
        let (status, body) = site.get(path, None).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{path}");
        assert_eq!(body["code"], "HELP_NOT_FOUND", "{path}");
    }
    let (status, body) = site.get("/api/help/v1/nowhere/search?q=create", None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(ids(&body), Vec::<&str>::new());
}

#[tokio::test]
async fn an_invisible_app_looks_exactly_like_a_missing_one() {
    let site = HelpSite::start(None).await;
    site.publish_direct(
        &api_help(),
        Some(json!({"href": "", "section": "hidden", "requiresRoles": ["admin"]})),
    )
    .await;
    let pairs = [
        (
            "/api/help/v1/inventory/documents/start",
            "/api/help/v1/nowhere/documents/start",
        ),
        (
            "/api/help/v1/inventory/manifest",
            "/api/help/v1/nowhere/manifest",
        ),
        (
            "/api/help/v1/inventory/search?q=Start",
            "/api/help/v1/nowhere/search?q=Start",
        ),
        (
            "/api/help/v1/inventory/search?q=Start",
            "/api/help/v1/inventory/search?q=qwxzzyv",
        ),
    ];
    for (hidden, missing) in pairs {
        assert_eq!(site.get(hidden, None).await, site.get(missing, None).await);
    }
    let (status, list) = site.get("/api/help/v1", None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(list["items"], json!([]));
}

#[tokio::test]
async fn documents_carry_an_etag_and_answer_304() {
    let site = HelpSite::with_api_fixture().await;
    let url = format!("{}/api/help/v1/inventory/documents/start", site.base);
    let first = site
        .client
        .get(&url)
        .header("cookie", &site.cookie)
        .send()
        .await
        .expect("get");
    assert_eq!(first.status(), StatusCode::OK);
    assert_eq!(first.headers()["cache-control"], "private, no-cache");
    let etag = first.headers()["etag"].to_str().expect("etag").to_string();
    let again = site
        .client
        .get(&url)
        .header("cookie", &site.cookie)
        .header("if-none-match", &etag)
        .send()
        .await
        .expect("get");
    assert_eq!(again.status(), StatusCode::NOT_MODIFIED);
    assert_eq!(again.headers()["etag"], etag.as_str());
    assert!(again.bytes().await.expect("body").is_empty());
    // Another locale is another representation.
    let german = site
        .client
        .get(&url)
        .header("cookie", &site.cookie)
        .header("x-cloud-locale", "de")
        .header("if-none-match", &etag)
        .send()
        .await
        .expect("get");
    assert_eq!(german.status(), StatusCode::OK);
    assert_ne!(german.headers()["etag"], etag.as_str());
}

#[tokio::test]
async fn the_catalogue_pages_with_its_cursor() {
    let site = HelpSite::start(None).await;
    let help = super::publishing::big_help(APP);
    site.publish_direct(&help, None).await;
    let (status, first) = site.get("/api/help/v1", None).await;
    assert_eq!(status, StatusCode::OK);
    let items = first["items"].as_array().expect("items");
    assert_eq!(items.len(), 100);
    assert!(items.iter().all(|item| item.get("markdown").is_none()));
    let cursor = first["nextCursor"].as_str().expect("a next page");
    assert_eq!(cursor, format!("cloud://help/{APP}/topic-099"));
    let (_, second) = site
        .get(
            &format!("/api/help/v1?cursor={}", percent_encode(cursor)),
            None,
        )
        .await;
    assert_eq!(second["items"].as_array().expect("items").len(), 20);
    assert_eq!(second["nextCursor"], Value::Null);
}

fn percent_encode(text: &str) -> String {
    text.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

#[tokio::test]
async fn apps_publish_their_own_corpus_once() {
    let site = HelpSite::start(None).await;
    let help = api_help();
    let body = serde_json::to_vec(&help.corpus).expect("json");
    let own = site.credential("inventory", &["registry:publish"]).await;

    let (status, answer) = site.put_corpus("inventory", None, body.clone()).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{answer}");
    let (status, answer) = site
        .put_corpus(
            "inventory",
            Some(&site.cookie.replace("session_token=", "")),
            body.clone(),
        )
        .await;
    assert_eq!(
        status,
        StatusCode::UNAUTHORIZED,
        "a session is no app credential: {answer}"
    );
    let other = site.credential("reports", &["registry:publish"]).await;
    let (status, answer) = site
        .put_corpus("inventory", Some(&other), body.clone())
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{answer}");
    let unscoped = site.credential("inventory", &["identity:invoke"]).await;
    let (status, _) = site
        .put_corpus("inventory", Some(&unscoped), body.clone())
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert_eq!(corpora_rows(&site.t.core, "inventory").await, 0);

    // Eight concurrent first publishes: one stores the documents, the others renew.
    let publishes = (0..8).map(|_| site.put_corpus("inventory", Some(&own), body.clone()));
    let answers = futures::future::join_all(publishes).await;
    let created: Vec<&Value> = answers
        .iter()
        .filter(|(status, _)| *status == StatusCode::CREATED)
        .map(|(_, body)| body)
        .collect();
    let renewed = answers
        .iter()
        .filter(|(status, body)| *status == StatusCode::OK && body["published"] == false)
        .count();
    assert_eq!((created.len(), renewed), (1, 7), "{answers:?}");
    assert_eq!(
        created[0],
        &json!({"appId": "inventory", "manifestHash": help.corpus.manifest_hash,
                "published": true, "documents": 3})
    );
    assert_eq!(
        document_rows(&site.t.core, "inventory", &help.corpus.manifest_hash).await,
        3
    );
    assert_eq!(corpora_rows(&site.t.core, "inventory").await, 1);

    // Published, then advertised: readable.
    advertise(
        &site.t.core,
        &entry("inventory", "Inventory", Some(&help.summary), None),
    )
    .await;
    let (status, body) = site
        .get("/api/help/v1/inventory/search?q=create", None)
        .await;
    assert_eq!((status, ids(&body)), (StatusCode::OK, vec!["start"]));
}

#[tokio::test]
async fn malformed_and_oversized_corpora_are_refused_with_their_reason() {
    let site = HelpSite::start(None).await;
    let own = site.credential("inventory", &["registry:publish"]).await;
    let good = serde_json::to_value(&api_help().corpus).expect("json");

    let mut missing_title = good.clone();
    missing_title["documents"][1]
        .as_object_mut()
        .expect("document")
        .remove("title");
    let mut bad_id = good.clone();
    bad_id["documentsByLocale"]["de"][0]["id"] = json!("Not Kebab");
    let mut wrong_hash = good.clone();
    wrong_hash["manifestHash"] = json!("0".repeat(64));
    let mut other_app = good.clone();
    other_app["appId"] = json!("reports");
    let mut huge_document = good.clone();
    huge_document["documents"][0]["markdown"] = json!("x".repeat(131_073));
    let cases: Vec<(Vec<u8>, &[&str])> = vec![
        (b"{not json".to_vec(), &["not valid JSON"]),
        (b"[]".to_vec(), &["JSON object"]),
        (
            to_bytes(&missing_title),
            &["documents[1]", "\"details\"", "title"],
        ),
        (to_bytes(&bad_id), &["documentsByLocale.de[0]", "id"]),
        (to_bytes(&wrong_hash), &["manifestHash"]),
        (to_bytes(&other_app), &["appId"]),
        (
            to_bytes(&huge_document),
            &["documents[0]", "\"start\"", "131072"],
        ),
    ];
    for (body, mentions) in cases {
        let (status, answer) = site.put_corpus("inventory", Some(&own), body).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
        assert_eq!(answer["code"], "INVALID_CORPUS", "{answer}");
        let message = answer["message"].as_str().expect("message");
        for mention in mentions {
            assert!(message.contains(mention), "{mention} in {message}");
        }
    }
    assert_eq!(corpora_rows(&site.t.core, "inventory").await, 0);

    let oversized = vec![b' '; help::MAX_CORPUS_BYTES + 1];
    let (status, answer) = site.put_corpus("inventory", Some(&own), oversized).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(answer["code"], "PAYLOAD_TOO_LARGE");
    assert!(
        answer["message"]
            .as_str()
            .expect("message")
            .contains(&help::MAX_CORPUS_BYTES.to_string())
    );
}

fn to_bytes(value: &Value) -> Vec<u8> {
    serde_json::to_vec(value).expect("json")
}

#[tokio::test]
async fn a_service_account_reads_as_the_person_it_acts_for() {
    fn delegated(t: &HelpDb) -> Actor {
        Actor::ServiceAccount(k2b_core::auth::ServiceAccountActor {
            id: uuid::Uuid::new_v4(),
            kind: k2b_core::auth::ServiceAccountKind::UserDelegated,
            delegated_user: Some(person(&t.user, false)),
            credential_kind: k2b_core::auth::CredentialKind::ApiKey,
            credential_id: "key".into(),
            scopes: vec!["read".into()],
            app_id: None,
        })
    }
    fn resource_bound(_: &HelpDb) -> Actor {
        Actor::ServiceAccount(k2b_core::auth::ServiceAccountActor {
            id: uuid::Uuid::new_v4(),
            kind: k2b_core::auth::ServiceAccountKind::ResourceBound,
            delegated_user: None,
            credential_kind: k2b_core::auth::CredentialKind::ApiKey,
            credential_id: "key".into(),
            scopes: vec!["read".into()],
            app_id: None,
        })
    }
    let site = HelpSite::start(Some(delegated)).await;
    site.publish_direct(&api_help(), None).await;
    let (status, body) = site
        .get("/api/help/v1/inventory/search?q=create", None)
        .await;
    assert_eq!((status, ids(&body)), (StatusCode::OK, vec!["start"]));

    let site = HelpSite::start(Some(resource_bound)).await;
    site.publish_direct(&api_help(), None).await;
    let (status, body) = site
        .get("/api/help/v1/inventory/search?q=create", None)
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(ids(&body), Vec::<&str>::new(), "no person, no Help");
    let (status, _) = site
        .get("/api/help/v1/inventory/documents/start", None)
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn search_across_apps_finds_only_what_the_viewer_may_see() {
    let site = HelpSite::start(None).await;
    site.publish_direct(&api_help(), None).await;
    let mut hidden = api_help();
    hidden.corpus.app_id = "secret".into();
    hidden.corpus.manifest_hash = "c".repeat(64);
    hidden.summary.manifest_hash = hidden.corpus.manifest_hash.clone();
    store::register(&site.t.core.pool, &hidden.corpus)
        .await
        .expect("register");
    advertise(
        &site.t.core,
        &entry(
            "secret",
            "Secret",
            Some(&hidden.summary),
            Some(json!({"href": "", "section": "hidden", "adminHref": "/admin/secret"})),
        ),
    )
    .await;

    let (status, body) = site
        .get("/api/help/v1/search?q=create", Some("en-GB"))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        body,
        json!({"locale": "en-GB", "documents": [{
            "kind": "help", "appId": "inventory", "appName": "Inventory", "locale": "en",
            "documentId": "start", "title": "Start"
        }]}),
        "the hidden app's copy is never found"
    );
    let (_, german) = site
        .get("/api/help/v1/search?q=create", Some("de-CH"))
        .await;
    assert_eq!(
        german["documents"],
        json!([]),
        "the German version is the only one"
    );
    let (_, german) = site
        .get("/api/help/v1/search?q=Datensatz", Some("de"))
        .await;
    assert_eq!(german["documents"][0]["title"], "Starten");
    assert_eq!(german["documents"].as_array().map(Vec::len), Some(1));
    let (_, limited) = site
        .get("/api/help/v1/search?q=documentation&limit=1", None)
        .await;
    assert_eq!(limited["documents"].as_array().map(Vec::len), Some(1));
    let (status, body) = site
        .get("/api/help/v1/search?q=start&limit=many", None)
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let (status, _) = site.get_anonymous("/api/help/v1/search?q=start").await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
}
