//! The reader: locale precedence, search, list, the advertised hash and visibility (store
//! scenarios 2–5, access scenario 15).

use k2b_core::auth::{AuthUser, Profile, Provider};
use k2b_core::help::reader::HelpReader;
use k2b_core::help::store;
use k2b_tests::create_account;
use serde_json::{Value, json};

use super::{APP, HelpDb, advertise, entry, person};

fn hits(found: &[k2b_core::help::reader::SearchItem]) -> Vec<(String, String)> {
    found
        .iter()
        .map(|hit| (hit.document_id.clone(), hit.locale.clone()))
        .collect()
}

fn pair(id: &str, locale: &str) -> (String, String) {
    (id.to_string(), locale.to_string())
}

#[tokio::test]
async fn scenario_2_the_earliest_locale_of_the_chain_wins_before_matching() {
    let t = HelpDb::new().await;
    t.inventory().await;
    let reader = t.reader("de-CH").await;
    let found = reader
        .search("Formular bearbeiten", None, None)
        .await
        .expect("search");
    assert_eq!(hits(&found), [pair("permissions", "de")]);
    assert_eq!(found[0].app_name, "Inventory");
    assert_eq!(found[0].kind, "help");
    assert_eq!(found[0].title, "Berechtigungen");
    // The English version of a translated document does not exist for this reader.
    assert!(
        reader
            .search("Editors inventory", None, None)
            .await
            .expect("search")
            .is_empty()
    );
    let fallback = reader
        .read(APP, "fallback")
        .await
        .expect("read")
        .expect("untranslated documents are read in the base locale");
    assert_eq!(fallback.item.locale, "en");
    assert!(fallback.markdown.contains("narwhal"));
    let manifest = reader.manifest(APP).await.expect("manifest").expect("some");
    assert_eq!(manifest.locale, "de-CH");
    let locales: Vec<(&str, &str)> = manifest
        .documents
        .iter()
        .map(|d| (d.id.as_str(), d.locale.as_str()))
        .collect();
    assert_eq!(
        locales,
        [
            ("permissions", "de"),
            ("fallback", "en"),
            ("technical", "en"),
            ("long", "en")
        ]
    );
    let permissions = &manifest.documents[0];
    assert_eq!(permissions.title, "Berechtigungen");
    assert_eq!(permissions.order, 10, "translations keep the base order");
    assert_eq!(permissions.search_url, format!("/api/help/v1/{APP}/search"));
    assert_eq!(
        permissions.url,
        format!("/api/help/v1/{APP}/documents/permissions")
    );
}

#[tokio::test]
async fn scenario_3_exact_titles_stemming_and_queries_that_match_nothing() {
    let t = HelpDb::new().await;
    t.inventory().await;
    let reader = t.reader("en").await;
    let search = |q: &'static str| reader.search(q, None, None);
    assert_eq!(
        search("example.ui.modal.dialog").await.expect("search")[0].document_id,
        "technical"
    );
    assert_eq!(
        search("editor updates inventory").await.expect("search")[0].document_id,
        "permissions",
        "stemmed in the row's language"
    );
    for nothing in ["doesnotexist", "", "   ", "' & !!", "!(", "\"", "-"] {
        assert!(
            search(nothing).await.expect("search").is_empty(),
            "{nothing:?}"
        );
    }
    assert!(
        reader
            .search("inventory", Some("absent"), None)
            .await
            .expect("search")
            .is_empty()
    );
    // Exact id matches first, whatever the rank of others.
    assert_eq!(search("LONG").await.expect("search")[0].document_id, "long");
}

#[tokio::test]
async fn search_limits_and_cuts_the_query() {
    let t = HelpDb::new().await;
    let help = super::publishing::big_help(APP);
    store::register(&t.core.pool, &help.corpus)
        .await
        .expect("register");
    advertise(&t.core, &entry(APP, "Big", Some(&help.summary), None)).await;
    let reader = t.reader("en").await;
    let count = |limit: Option<i64>| {
        let reader = &reader;
        async move {
            reader
                .search("topic", None, limit)
                .await
                .expect("search")
                .len()
        }
    };
    assert_eq!(count(None).await, 10);
    assert_eq!(count(Some(0)).await, 1);
    assert_eq!(count(Some(-5)).await, 1);
    assert_eq!(count(Some(25)).await, 25);
    assert_eq!(count(Some(1000)).await, 25);
    // Only the first 200 characters count: a word after them matches nothing.
    let long_query = format!("{} topic", "x".repeat(200));
    assert!(
        reader
            .search(&long_query, None, None)
            .await
            .expect("search")
            .is_empty()
    );
}

#[tokio::test]
async fn scenario_4_list_carries_metadata_in_uri_order() {
    let t = HelpDb::new().await;
    t.inventory().await;
    let reader = t.reader("en").await;
    let items = reader.list("").await.expect("list");
    let ids: Vec<&str> = items.iter().map(|i| i.document_id.as_str()).collect();
    assert_eq!(ids, ["fallback", "long", "permissions", "technical"]);
    for item in &items {
        let json = serde_json::to_value(item).expect("json");
        assert!(json.get("markdown").is_none(), "{json}");
        assert_eq!(json["appName"], "Inventory");
    }
    assert!(
        reader
            .list(&format!("cloud://help/{APP}/technical"))
            .await
            .expect("list")
            .is_empty()
    );
    let raw: Vec<Value> = sqlx::query_scalar(
        "SELECT to_jsonb(d) - 'markdown' - 'search_text' - 'search_document'
         FROM help.documents d",
    )
    .fetch_all(&t.core.pool)
    .await
    .expect("raw");
    assert!(raw.iter().all(|row| row.get("markdown").is_none()));
}

#[tokio::test]
async fn list_orders_by_uri_when_one_app_id_prefixes_another() {
    let t = HelpDb::new().await;
    for (app, doc) in [("inv", "zeta"), ("inv-x", "alpha")] {
        let definition = k2b_core::help::define_help(&[&super::source(doc, "Doc", "", "Body.")])
            .expect("definition");
        let help = k2b_core::help::compile_help(app, None, &definition).expect("compile");
        store::register(&t.core.pool, &help.corpus)
            .await
            .expect("register");
        advertise(&t.core, &entry(app, app, Some(&help.summary), None)).await;
    }
    let reader = t.reader("en").await;
    let uris: Vec<String> = reader
        .list("")
        .await
        .expect("list")
        .iter()
        .map(|i| i.uri())
        .collect();
    // "inv-x/alpha" sorts before "inv/zeta" as a string ('-' < '/').
    assert_eq!(uris, ["cloud://help/inv-x/alpha", "cloud://help/inv/zeta"]);
    let after_first = reader.list(&uris[0]).await.expect("list");
    assert_eq!(after_first.len(), 1);
    assert_eq!(after_first[0].uri(), uris[1]);
}

#[tokio::test]
async fn scenario_5_only_the_advertised_hash_is_read() {
    let t = HelpDb::new().await;
    let help = t.inventory().await;
    let mut summary = help.summary.clone();
    summary.manifest_hash = "missing".into();
    advertise(&t.core, &entry(APP, "Inventory", Some(&summary), None)).await;
    let reader = t.reader("en").await;
    assert!(
        reader
            .read(APP, "permissions")
            .await
            .expect("read")
            .is_none()
    );
    assert!(reader.manifest(APP).await.expect("manifest").is_none());
    assert!(
        reader
            .search("inventory", None, None)
            .await
            .expect("search")
            .is_empty()
    );

    advertise(&t.core, &entry(APP, "Inventory", Some(&help.summary), None)).await;
    sqlx::query("DELETE FROM registry.apps")
        .execute(&t.core.pool)
        .await
        .expect("empty registry");
    let reader = t.reader("en").await;
    assert!(
        reader
            .search("inventory", None, None)
            .await
            .expect("search")
            .is_empty()
    );
    assert!(reader.list("").await.expect("list").is_empty());
}

/// The navigation rows of the visibility truth table, with who may see each: anonymous,
/// guest, user, admin.
fn truth_table() -> Vec<(Option<Value>, [bool; 4])> {
    vec![
        (None, [false, true, true, true]),
        (
            Some(json!({"href": "/app/x", "section": "more", "requiresAuth": true})),
            [false, true, true, true],
        ),
        (
            Some(json!({"href": "/app/x", "section": "more", "requiresRoles": ["user"]})),
            [false, false, true, true],
        ),
        (
            Some(json!({"href": "/app/x", "section": "more", "requiresRoles": ["user", "guest"]})),
            [false, true, true, true],
        ),
        (
            Some(json!({"href": "", "section": "hidden", "requiresRoles": ["admin"]})),
            [false, false, false, true],
        ),
        (
            Some(json!({"href": "", "section": "hidden", "adminHref": "/admin/x"})),
            [false, false, false, true],
        ),
    ]
}

#[tokio::test]
async fn scenario_15_visibility_follows_the_truth_table() {
    let t = HelpDb::new().await;
    let help = super::inventory_help();
    let rows = truth_table();
    for (i, (nav, _)) in rows.iter().enumerate() {
        let app = format!("app-{i}");
        let mut corpus = help.corpus.clone();
        corpus.app_id = app.clone();
        corpus.manifest_hash = format!("{:064x}", i + 1);
        store::register(&t.core.pool, &corpus)
            .await
            .expect("register");
        let mut summary = help.summary.clone();
        summary.manifest_hash = corpus.manifest_hash.clone();
        advertise(&t.core, &entry(&app, &app, Some(&summary), nav.clone())).await;
    }
    let guest = create_account(&t.core, "gus", Provider::Local, Profile::Guest, false).await;
    let admin = create_account(&t.core, "root", Provider::Local, Profile::User, true).await;
    let viewers: [Option<AuthUser>; 4] = [
        None,
        Some(person(&guest, false)),
        Some(person(&t.user, false)),
        Some(person(&admin, true)),
    ];
    for (column, viewer) in viewers.iter().enumerate() {
        let reader = HelpReader::new(&t.core.pool, "en", viewer.as_ref(), None)
            .await
            .expect("reader");
        let searched: Vec<String> = reader
            .search("editors", None, Some(25))
            .await
            .expect("search")
            .into_iter()
            .map(|hit| hit.app_id)
            .collect();
        let listed: Vec<String> = reader
            .list("")
            .await
            .expect("list")
            .into_iter()
            .map(|item| item.app_id)
            .collect();
        for (i, (nav, visible)) in rows.iter().enumerate() {
            let app = format!("app-{i}");
            let expected = visible[column];
            let context = format!("viewer column {column}, nav {nav:?}");
            assert_eq!(
                reader.manifest(&app).await.expect("manifest").is_some(),
                expected,
                "manifest: {context}"
            );
            assert_eq!(
                reader
                    .read(&app, "permissions")
                    .await
                    .expect("read")
                    .is_some(),
                expected,
                "read: {context}"
            );
            assert_eq!(searched.contains(&app), expected, "search: {context}");
            assert_eq!(listed.contains(&app), expected, "list: {context}");
        }
    }
}

#[tokio::test]
async fn search_tells_nothing_about_apps_the_viewer_may_not_see() {
    let t = HelpDb::new().await;
    let help = super::inventory_help();
    store::register(&t.core.pool, &help.corpus)
        .await
        .expect("register");
    advertise(
        &t.core,
        &entry(
            APP,
            "Inventory",
            Some(&help.summary),
            Some(json!({"href": "", "section": "hidden", "requiresRoles": ["admin"]})),
        ),
    )
    .await;
    let reader = t.reader("en").await;
    for app in [Some(APP), None] {
        let title = reader
            .search("example.ui.modal.dialog", app, None)
            .await
            .expect("search");
        let nonsense = reader.search("qwxzzyv", app, None).await.expect("search");
        assert_eq!(title, nonsense);
        assert!(title.is_empty());
        let id = reader
            .search("permissions", app, None)
            .await
            .expect("search");
        assert_eq!(id, nonsense);
    }
    assert_eq!(
        reader.read(APP, "permissions").await.expect("read"),
        reader.read(APP, "no-such-document").await.expect("read")
    );
    assert_eq!(
        reader.manifest(APP).await.expect("manifest"),
        reader.manifest("no-such-app").await.expect("manifest")
    );
}
