//! Publishing corpora and cleaning them up (store scenarios 1, 6–10).

use std::collections::HashSet;

use k2b_core::help::store::{self, Published};
use k2b_core::help::{CorpusDocument, compile_help, define_help, define_localized_help};

use super::{APP, HelpDb, advertise, corpora_rows, document_rows, entry, inventory_help, source};

#[tokio::test]
async fn scenario_1_concurrent_registrations_store_one_set_of_documents() {
    let t = HelpDb::new().await;
    // The schema's migration is safe to run again.
    k2b_core::db::migrate(&t.core.pool)
        .await
        .expect("migrate again");
    let help = inventory_help();
    let publishes = (0..8).map(|_| store::register(&t.core.pool, &help.corpus));
    let outcomes = futures::future::join_all(publishes).await;
    let inserted = outcomes
        .iter()
        .filter(|o| matches!(o, Ok(Published::Inserted { .. })))
        .count();
    let renewed = outcomes
        .iter()
        .filter(|o| matches!(o, Ok(Published::Renewed)))
        .count();
    assert_eq!((inserted, renewed), (1, 7), "{outcomes:?}");
    assert_eq!(
        document_rows(&t.core, APP, &help.corpus.manifest_hash).await,
        5
    );
    assert_eq!(corpora_rows(&t.core, APP).await, 1);

    let summary = serde_json::to_value(&help.summary).expect("summary");
    let mut keys: Vec<&String> = summary.as_object().expect("object").keys().collect();
    keys.sort();
    assert_eq!(keys, ["baseLocale", "manifestHash", "pageBase"]);
    assert_eq!(summary["pageBase"], "/app/inventory/help");

    advertise(&t.core, &entry(APP, "Inventory", Some(&help.summary), None)).await;
    let manifest = t
        .reader("en")
        .await
        .manifest(APP)
        .await
        .expect("manifest")
        .expect("advertised and stored");
    let ids: Vec<&str> = manifest.documents.iter().map(|d| d.id.as_str()).collect();
    assert_eq!(ids, ["permissions", "fallback", "technical", "long"]);
}

#[tokio::test]
async fn a_renewal_writes_no_documents_and_moves_the_lease() {
    let t = HelpDb::new().await;
    let help = inventory_help();
    store::register(&t.core.pool, &help.corpus)
        .await
        .expect("first");
    sqlx::query("UPDATE help.corpora SET last_seen_at = now() - interval '5 minutes'")
        .execute(&t.core.pool)
        .await
        .expect("age");
    let inserts_before = document_inserts(&t).await;
    assert_eq!(inserts_before.len(), 5);
    assert_eq!(
        store::register(&t.core.pool, &help.corpus)
            .await
            .expect("again"),
        Published::Renewed
    );
    assert!(
        store::renew(&t.core.pool, APP, &help.corpus.manifest_hash)
            .await
            .expect("renew")
    );
    assert_eq!(document_inserts(&t).await, inserts_before);
    let age: f64 = sqlx::query_scalar(
        "SELECT extract(epoch FROM now() - last_seen_at)::float8 FROM help.corpora",
    )
    .fetch_one(&t.core.pool)
    .await
    .expect("age");
    assert!(age < 60.0, "renewed {age} s ago");
    assert!(
        !store::renew(&t.core.pool, APP, &"0".repeat(64))
            .await
            .expect("renew unknown"),
        "an unknown corpus is not renewed"
    );
}

/// Moves the last renewal of the corpus `hash` back by `age` (an interval such as `1 day`).
async fn age_corpus(t: &HelpDb, hash: &str, age: &str) {
    sqlx::query(
        "UPDATE help.corpora SET last_seen_at = now() - $2::interval WHERE manifest_hash = $1",
    )
    .bind(hash)
    .bind(age)
    .execute(&t.core.pool)
    .await
    .expect("age");
}

/// The row versions of the stored documents: any write to a row changes its `xmin`.
async fn document_inserts(t: &HelpDb) -> Vec<String> {
    sqlx::query_scalar(
        "SELECT xmin::text || '/' || ctid::text FROM help.documents
         ORDER BY locale, document_id",
    )
    .fetch_all(&t.core.pool)
    .await
    .expect("row versions")
}

#[tokio::test]
async fn scenario_6_a_failing_corpus_leaves_nothing() {
    let t = HelpDb::new().await;
    let mut corpus = inventory_help().corpus;
    corpus.manifest_hash = "b".repeat(64);
    let duplicate = corpus.documents[0].clone();
    corpus.documents.push(duplicate);
    let error = store::register(&t.core.pool, &corpus)
        .await
        .expect_err("a duplicated document violates the key");
    assert!(error.to_string().contains("database"), "{error}");
    assert_eq!(corpora_rows(&t.core, APP).await, 0);
    assert_eq!(document_rows(&t.core, APP, &corpus.manifest_hash).await, 0);
}

#[tokio::test]
async fn scenario_7_large_documents_are_stored() {
    let t = HelpDb::new().await;
    let sources: Vec<String> = (0..8)
        .map(|i| {
            source(
                &format!("large-{i}"),
                &format!("Large {i}"),
                "",
                &format!("Paragraph {i} of a large guide. ").repeat(3500),
            )
        })
        .collect();
    let sources: Vec<&str> = sources.iter().map(String::as_str).collect();
    let definition = define_help(&sources).expect("definition");
    assert!(
        definition
            .documents()
            .iter()
            .all(|d| d.markdown.len() > 100_000)
    );
    let help = compile_help(APP, None, &definition).expect("compile");
    assert!(serde_json::to_vec(&help.corpus).expect("json").len() > 512 * 1024);
    assert_eq!(
        store::register(&t.core.pool, &help.corpus)
            .await
            .expect("register"),
        Published::Inserted { documents: 8 }
    );
    assert_eq!(
        document_rows(&t.core, APP, &help.corpus.manifest_hash).await,
        8
    );
}

/// 120 documents with long descriptions.
pub fn big_help(app: &str) -> k2b_core::help::CompiledHelp {
    let sources: Vec<String> = (0..120)
        .map(|i| {
            source(
                &format!("topic-{i:03}"),
                &format!("Topic {i:03}"),
                &format!(
                    "description: {}\norder: {i}\n",
                    format!("Describes topic {i} at length. ").repeat(20).trim()
                ),
                &format!("Everything about topic {i}."),
            )
        })
        .collect();
    let sources: Vec<&str> = sources.iter().map(String::as_str).collect();
    let definition = define_help(&sources).expect("definition");
    compile_help(app, Some("/app/big"), &definition).expect("compile")
}

#[tokio::test]
async fn scenario_8_a_large_catalogue_pages_by_uri() {
    let t = HelpDb::new().await;
    let help = big_help(APP);
    assert!(serde_json::to_vec(&help.corpus).expect("json").len() > 64 * 1024);
    assert!(serde_json::to_vec(&help.summary).expect("json").len() < 256);
    store::register(&t.core.pool, &help.corpus)
        .await
        .expect("register");
    advertise(&t.core, &entry(APP, "Big", Some(&help.summary), None)).await;
    let reader = t.reader("en").await;
    let manifest = reader.manifest(APP).await.expect("manifest").expect("some");
    assert_eq!(manifest.documents.len(), 120);

    let first = reader.list("").await.expect("list");
    assert_eq!(first.len(), 101, "a page and the look-ahead");
    let cursor = first[99].uri();
    let second = reader.list(&cursor).await.expect("list");
    assert_eq!(second.len(), 20);
    let ids: HashSet<String> = first[..100]
        .iter()
        .chain(&second)
        .map(|item| item.document_id.clone())
        .collect();
    assert_eq!(ids.len(), 120);
}

#[tokio::test]
async fn scenario_9_a_corpus_is_readable_when_it_is_advertised() {
    let t = HelpDb::new().await;
    let help = t.inventory().await;
    sqlx::query("DELETE FROM help.corpora")
        .execute(&t.core.pool)
        .await
        .expect("delete");
    assert!(
        t.reader("en")
            .await
            .read(APP, "permissions")
            .await
            .expect("read")
            .is_none(),
        "advertised but not stored: nothing"
    );
    // The heartbeat: publish, then advertise.
    store::register(&t.core.pool, &help.corpus)
        .await
        .expect("publish");
    let at_advertise_time = t
        .reader("en")
        .await
        .read(APP, "permissions")
        .await
        .expect("read");
    assert!(at_advertise_time.is_some());
    advertise(&t.core, &entry(APP, "Inventory", Some(&help.summary), None)).await;
    assert!(
        t.reader("en")
            .await
            .read(APP, "permissions")
            .await
            .expect("read")
            .is_some()
    );
}

#[tokio::test]
async fn scenario_10_cleanup_removes_old_corpora_and_spares_the_current_one() {
    let t = HelpDb::new().await;
    let help = t.inventory().await;
    let older = define_help(&[&source("permissions", "Permissions", "", "An older text.")])
        .expect("definition");
    let older = compile_help(APP, Some("/app/inventory"), &older).expect("compile");
    store::register(&t.core.pool, &older.corpus)
        .await
        .expect("older");
    age_corpus(&t, &older.corpus.manifest_hash, "1 day").await;

    assert_eq!(store::cleanup(&t.core.pool).await.expect("cleanup"), 1);
    assert_eq!(
        document_rows(&t.core, APP, &older.corpus.manifest_hash).await,
        0,
        "documents go with their corpus"
    );
    assert_eq!(store::cleanup(&t.core.pool).await.expect("cleanup"), 0);
    let read = t
        .reader("en")
        .await
        .read(APP, "permissions")
        .await
        .expect("read")
        .expect("current corpus readable");
    assert!(read.markdown.contains("Editors can update"));

    // A renewal racing the cleanup of its own expired corpus: readable afterwards either way.
    for _ in 0..8 {
        sqlx::query("UPDATE help.corpora SET last_seen_at = now() - interval '1 day'")
            .execute(&t.core.pool)
            .await
            .expect("age");
        let (registered, cleaned) = tokio::join!(
            store::register(&t.core.pool, &help.corpus),
            store::cleanup(&t.core.pool)
        );
        registered.expect("register");
        cleaned.expect("cleanup");
        assert!(
            t.reader("en")
                .await
                .read(APP, "permissions")
                .await
                .expect("read")
                .is_some()
        );
        assert_eq!(
            document_rows(&t.core, APP, &help.corpus.manifest_hash).await,
            5
        );
    }
}

#[tokio::test]
async fn cleanup_takes_one_corpus_per_run_oldest_first() {
    let t = HelpDb::new().await;
    let mut hashes = Vec::new();
    for (i, age) in ["3 days", "1 day", "2 days"].iter().enumerate() {
        let definition = define_help(&[&source("page", "Page", "", &format!("Version {i}"))])
            .expect("definition");
        let help = compile_help(APP, None, &definition).expect("compile");
        store::register(&t.core.pool, &help.corpus)
            .await
            .expect("register");
        age_corpus(&t, &help.corpus.manifest_hash, age).await;
        hashes.push(help.corpus.manifest_hash);
    }
    // Five minutes old: within the six-minute retention.
    let fresh = inventory_help();
    store::register(&t.core.pool, &fresh.corpus)
        .await
        .expect("register");
    age_corpus(&t, &fresh.corpus.manifest_hash, "5 minutes").await;

    let remaining = |t: &HelpDb| {
        let pool = t.core.pool.clone();
        async move {
            sqlx::query_scalar::<_, String>(
                "SELECT manifest_hash FROM help.corpora ORDER BY last_seen_at",
            )
            .fetch_all(&pool)
            .await
            .expect("rows")
        }
    };
    assert_eq!(store::cleanup(&t.core.pool).await.expect("cleanup"), 1);
    assert!(!remaining(&t).await.contains(&hashes[0]), "oldest first");
    assert_eq!(store::cleanup(&t.core.pool).await.expect("cleanup"), 1);
    assert!(!remaining(&t).await.contains(&hashes[2]));
    assert_eq!(store::cleanup(&t.core.pool).await.expect("cleanup"), 1);
    assert_eq!(store::cleanup(&t.core.pool).await.expect("cleanup"), 0);
    assert_eq!(remaining(&t).await, [fresh.corpus.manifest_hash]);
}

#[tokio::test]
async fn the_schema_enforces_the_document_rules() {
    let t = HelpDb::new().await;
    let help = inventory_help();
    let good = &help.corpus.documents[0];
    let bad_rows: Vec<(&str, CorpusDocument)> = vec![
        (
            "id",
            CorpusDocument {
                id: "Not Kebab".into(),
                ..good.clone()
            },
        ),
        (
            "title",
            CorpusDocument {
                title: "  ".into(),
                ..good.clone()
            },
        ),
        (
            "markdown",
            CorpusDocument {
                markdown: "x".repeat(131_073),
                ..good.clone()
            },
        ),
    ];
    for (field, document) in bad_rows {
        let mut corpus = help.corpus.clone();
        corpus.documents = vec![document];
        corpus.documents_by_locale = Default::default();
        assert!(
            store::register(&t.core.pool, &corpus).await.is_err(),
            "the database refuses a bad {field}"
        );
        assert_eq!(corpora_rows(&t.core, APP).await, 0);
    }
    let bad_hash = sqlx::query(
        "INSERT INTO help.corpora (app_id, manifest_hash, base_locale) VALUES ('x', $1, 'en')",
    )
    .bind("not-a-hash")
    .execute(&t.core.pool)
    .await;
    assert!(bad_hash.is_err(), "hashes are hex SHA-256");
}

#[tokio::test]
async fn translations_are_stored_in_their_own_language() {
    let t = HelpDb::new().await;
    let definition = define_localized_help(
        "en",
        &[
            ("en", vec![&source("start", "Start", "", "Start here.")]),
            (
                "de-CH",
                vec![&source("start", "Start", "", "Hier beginnen.")],
            ),
            ("fr", vec![&source("start", "Début", "", "Commencez ici.")]),
        ],
    )
    .expect("definition");
    let help = compile_help(APP, None, &definition).expect("compile");
    store::register(&t.core.pool, &help.corpus)
        .await
        .expect("register");
    let configs: Vec<(String, String)> =
        sqlx::query_as("SELECT locale, search_config FROM help.documents ORDER BY locale")
            .fetch_all(&t.core.pool)
            .await
            .expect("rows");
    assert_eq!(
        configs,
        [
            ("de-CH".to_string(), "german".to_string()),
            ("en".into(), "english".into()),
            ("fr".into(), "simple".into())
        ]
    );
}
