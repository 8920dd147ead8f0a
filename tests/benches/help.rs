//! Help search and publishing (figures, no assertions), through real HTTP to the `help` router
//! on loopback, against a real Postgres:
//! - search latency p50/p99 over 20 apps × 100 documents × 2 locales (en, de; about 240 words
//!   each, drawn skewed from a 3000-word vocabulary like the words of real text), for the search
//!   across every app and for one app's search (the route of the Help API), each compared in
//!   the same run with a bare `websearch_to_tsquery` query over the same rows (no session, no
//!   registry, no visibility, no locale precedence) — the ratio is the figure that counts;
//! - publish time of a 120-document corpus: first publish (stores every row) and an unchanged
//!   re-publish (renews the lease only; the document rows it wrote are counted).
//!
//! Goals: search p50 ≤ 10 ms, p99 ≤ 30 ms; unchanged re-publish ≤ 20 ms with no document writes.
//!
//! Run: `cargo bench -p k2b-tests --bench help`.

use std::time::Instant;

use k2b_core::help::{CompiledHelp, compile_help, define_localized_help};
use k2b_core::identity::workload;
use k2b_core::registry::{APP_REGISTRY_TTL, store};
use k2b_tests::figures::{ms, percentile};
use k2b_tests::{TestDb, core_for, create_user, serve};
use serde_json::json;

const APPS: usize = 20;
const DOCUMENTS: usize = 100;
const SEARCHES: usize = 400;
const PUBLISHES: usize = 10;
const REPUBLISHES: usize = 50;

const SEARCH_P50_GOAL_MS: f64 = 10.0;
const SEARCH_P99_GOAL_MS: f64 = 30.0;
const REPUBLISH_GOAL_MS: f64 = 20.0;

/// Words of the generated articles: English and German with shared product terms.
const EN_WORDS: &[&str] = &[
    "inventory",
    "record",
    "records",
    "editor",
    "editors",
    "update",
    "updates",
    "permission",
    "permissions",
    "report",
    "reports",
    "dashboard",
    "widget",
    "widgets",
    "export",
    "import",
    "invoice",
    "invoices",
    "customer",
    "customers",
    "order",
    "orders",
    "stock",
    "warehouse",
    "shipping",
    "delivery",
    "account",
    "accounts",
    "password",
    "security",
    "session",
    "device",
    "phone",
    "notification",
    "mail",
    "template",
    "templates",
    "workflow",
    "approval",
    "review",
    "archive",
    "search",
    "filter",
    "column",
    "table",
    "chart",
    "summary",
    "schedule",
    "calendar",
    "meeting",
    "project",
    "task",
    "tasks",
    "team",
    "member",
    "members",
    "group",
    "groups",
    "setting",
    "settings",
    "language",
    "theme",
    "logo",
    "upload",
    "download",
    "file",
    "files",
];
const DE_WORDS: &[&str] = &[
    "Bestand",
    "Datensatz",
    "Datensätze",
    "Redakteur",
    "Redakteure",
    "ändern",
    "Berechtigung",
    "Berechtigungen",
    "Bericht",
    "Berichte",
    "Übersicht",
    "Widget",
    "Export",
    "Import",
    "Rechnung",
    "Rechnungen",
    "Kunde",
    "Kunden",
    "Bestellung",
    "Bestellungen",
    "Lager",
    "Versand",
    "Lieferung",
    "Konto",
    "Konten",
    "Passwort",
    "Sicherheit",
    "Sitzung",
    "Gerät",
    "Telefon",
    "Benachrichtigung",
    "Vorlage",
    "Vorlagen",
    "Ablauf",
    "Freigabe",
    "Prüfung",
    "Archiv",
    "Suche",
    "Filter",
    "Spalte",
    "Tabelle",
    "Diagramm",
    "Zusammenfassung",
    "Termin",
    "Kalender",
    "Besprechung",
    "Projekt",
    "Aufgabe",
    "Aufgaben",
    "Mitglied",
    "Gruppe",
    "Einstellung",
    "Einstellungen",
    "Sprache",
    "Formular",
    "Formulare",
    "bearbeiten",
    "Datei",
];
const FILLER_EN: &[&str] = &[
    "the", "a", "to", "of", "and", "in", "with", "for", "your", "each",
];
const FILLER_DE: &[&str] = &[
    "der", "die", "das", "und", "mit", "für", "in", "zu", "ein", "jede",
];

/// Distinct words of each locale's text: the product words above, then made-up words.
const VOCABULARY: usize = 3000;

/// A locale's vocabulary, most frequent first.
fn vocabulary(products: &[&str], seed: u64) -> Vec<String> {
    const SYLLABLES: &[&str] = &[
        "ka", "lo", "mi", "re", "su", "ta", "ne", "vo", "pi", "da", "ger", "ston", "ment", "ing",
        "er", "al", "ba", "ko", "li", "ma", "nu", "sa", "te", "wi", "ro", "fe",
    ];
    let mut words: Vec<String> = products.iter().map(|w| w.to_string()).collect();
    let mut random = Words(seed);
    let mut seen: std::collections::HashSet<String> = words.iter().cloned().collect();
    while words.len() < VOCABULARY {
        let length = 2 + random.next(3);
        let word: String = (0..length)
            .map(|_| SYLLABLES[random.next(SYLLABLES.len())])
            .collect();
        if seen.insert(word.clone()) {
            words.push(word);
        }
    }
    words
}

/// A small deterministic generator (the same corpus every run).
struct Words(u64);

impl Words {
    /// A word index skewed towards the frequent end, the way words of real text are.
    fn skewed(&mut self, n: usize) -> usize {
        let u = self.next(1 << 20) as f64 / (1u64 << 20) as f64;
        ((n as f64) * u.powi(3)) as usize
    }

    fn next(&mut self, n: usize) -> usize {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        ((self.0 >> 33) as usize) % n
    }

    fn sentence(&mut self, words: &[String], filler: &[&str], length: usize) -> String {
        let mut out: Vec<&str> = Vec::with_capacity(length);
        for i in 0..length {
            out.push(if i % 3 == 1 {
                filler[self.next(filler.len())]
            } else {
                &words[self.skewed(words.len())]
            });
        }
        let mut text = out.join(" ");
        if let Some(first) = text.get(..1) {
            text = first.to_uppercase() + &text[1..];
        }
        text + "."
    }

    fn body(&mut self, words: &[String], filler: &[&str]) -> String {
        (0..4)
            .map(|section| {
                let paragraph: Vec<String> =
                    (0..5).map(|_| self.sentence(words, filler, 12)).collect();
                format!("## Part {section}\n\n{}\n", paragraph.join(" "))
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}

fn article(id: &str, title: &str, extra: &str, body: &str) -> String {
    format!("---\nid: {id}\ntitle: {title}\n{extra}---\n{body}\n")
}

/// An app's Help: `documents` articles in English, each translated to German.
fn corpus(
    app: &str,
    documents: usize,
    seed: u64,
    en_words: &[String],
    de_words: &[String],
) -> CompiledHelp {
    let mut words = Words(seed);
    let mut en = Vec::new();
    let mut de = Vec::new();
    for i in 0..documents {
        let id = format!("article-{i:03}");
        let en_title = words.sentence(en_words, FILLER_EN, 3);
        let de_title = words.sentence(de_words, FILLER_DE, 3);
        let description = words.sentence(en_words, FILLER_EN, 10);
        en.push(article(
            &id,
            en_title.trim_end_matches('.'),
            &format!("description: {description}\norder: {i}\n"),
            &words.body(en_words, FILLER_EN),
        ));
        de.push(article(
            &id,
            de_title.trim_end_matches('.'),
            "",
            &words.body(de_words, FILLER_DE),
        ));
    }
    let en: Vec<&str> = en.iter().map(String::as_str).collect();
    let de: Vec<&str> = de.iter().map(String::as_str).collect();
    let definition = define_localized_help("en", &[("en", en), ("de", de)]).expect("definition");
    compile_help(app, Some(&format!("/app/{app}")), &definition).expect("compile")
}

struct Figures {
    p50: f64,
    p99: f64,
    mean_hits: f64,
}

fn figures(mut times: Vec<f64>, hits: usize) -> Figures {
    times.sort_by(f64::total_cmp);
    Figures {
        p50: percentile(&times, 50.0),
        p99: percentile(&times, 99.0),
        mean_hits: hits as f64 / times.len() as f64,
    }
}

fn line(name: &str, figures: &Figures, baseline: Option<&Figures>) {
    let ratio = baseline
        .map(|b| format!("  ×{:.1} of bare SQL p50", figures.p50 / b.p50))
        .unwrap_or_default();
    println!(
        "{name:<44} p50 {:>6.2} ms  p99 {:>6.2} ms  hits/query {:>5.1}{ratio}",
        figures.p50, figures.p99, figures.mean_hits
    );
}

/// The queries, per locale: words drawn like the words of the text (frequent ones often),
/// half single words, a quarter two words, a quarter a word no document has.
fn queries(locale: &str, vocabulary: &[String]) -> Vec<String> {
    let mut words = Words(if locale == "de" { 7 } else { 3 });
    let mut out = Vec::new();
    for i in 0..SEARCHES {
        let query = match i % 4 {
            0 | 1 => vocabulary[words.skewed(vocabulary.len())].clone(),
            2 => format!(
                "{} {}",
                vocabulary[words.skewed(vocabulary.len())],
                vocabulary[words.skewed(vocabulary.len())]
            ),
            _ => format!("qwxzzyv{i}"),
        };
        out.push(query);
    }
    out
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    println!(
        "== help: {APPS} apps × {DOCUMENTS} documents × 2 locales, {SEARCHES} searches per series, through HTTP on loopback =="
    );
    let db = TestDb::new().await;
    let core = core_for(&db);
    let user = create_user(&core, "reader", false).await;
    let cookie = k2b_tests::session_cookie(&core, &user).await;
    let base = serve(help::router(core.clone())).await;
    let client = reqwest::Client::builder()
        .tcp_nodelay(true)
        .build()
        .expect("client");

    let en_words = vocabulary(EN_WORDS, 11);
    let de_words = vocabulary(DE_WORDS, 13);
    // The corpora, published the way apps publish them, then advertised.
    let started = Instant::now();
    for a in 0..APPS {
        let app = format!("app-{a:02}");
        let help = corpus(&app, DOCUMENTS, a as u64 + 1, &en_words, &de_words);
        k2b_core::help::store::register(&core.pool, &help.corpus)
            .await
            .expect("register");
        let mut conn = core.pool.acquire().await.expect("connection");
        store::upsert(
            &mut conn,
            &json!({"id": app, "name": app, "icon": "ti ti-box", "description": "d",
                    "baseUrl": format!("http://{app}:3000"), "routes": [format!("/app/{app}")],
                    "help": help.summary}),
            APP_REGISTRY_TTL,
        )
        .await
        .expect("advertise");
    }
    sqlx::query("ANALYZE help.documents")
        .execute(&core.pool)
        .await
        .expect("analyze");
    let rows: i64 = sqlx::query_scalar("SELECT count(*) FROM help.documents")
        .fetch_one(&core.pool)
        .await
        .expect("count");
    println!(
        "stored {rows} document rows in {:.1} s",
        started.elapsed().as_secs_f64()
    );

    let search = |path: String, locale: &'static str| {
        let request = client
            .get(format!("{base}{path}"))
            .header("cookie", &cookie)
            .header("x-cloud-locale", locale);
        async move {
            let started = Instant::now();
            let response = request.send().await.expect("search");
            assert_eq!(response.status(), 200);
            let body: serde_json::Value = response.json().await.expect("json");
            let hits = body["ids"]
                .as_array()
                .or_else(|| body["documents"].as_array())
                .map_or(0, Vec::len);
            (ms(started.elapsed()), hits)
        }
    };
    // Warm-up: connections, plans, caches.
    for query in queries("en", &en_words).iter().take(50) {
        search(format!("/api/help/v1/search?q={query}"), "en").await;
    }

    for locale in ["en", "de"] {
        let config = if locale == "de" { "german" } else { "english" };
        let queries = queries(locale, if locale == "de" { &de_words } else { &en_words });

        // The bare query over the same rows of this locale.
        let (mut times, mut hits) = (Vec::new(), 0);
        for query in &queries {
            let started = Instant::now();
            let found: Vec<String> = sqlx::query_scalar(
                "SELECT document_id FROM help.documents
                 WHERE locale = $3 AND search_document @@ websearch_to_tsquery($1::regconfig, $2)
                 ORDER BY ts_rank_cd(search_document, websearch_to_tsquery($1::regconfig, $2)) DESC
                 LIMIT 10",
            )
            .bind(config)
            .bind(query)
            .bind(locale)
            .fetch_all(&core.pool)
            .await
            .expect("bare search");
            times.push(ms(started.elapsed()));
            hits += found.len();
        }
        let bare = figures(times, hits);
        line(
            &format!("[{locale}] bare websearch_to_tsquery SQL"),
            &bare,
            None,
        );

        let (mut times, mut hits) = (Vec::new(), 0);
        for query in &queries {
            let (elapsed, found) = search(format!("/api/help/v1/search?q={query}"), locale).await;
            times.push(elapsed);
            hits += found;
        }
        let across = figures(times, hits);
        line(
            &format!("[{locale}] HTTP GET /api/help/v1/search"),
            &across,
            Some(&bare),
        );
        println!(
            "{:<44} goal p50 ≤ {SEARCH_P50_GOAL_MS} ms: {}, p99 ≤ {SEARCH_P99_GOAL_MS} ms: {}",
            "",
            if across.p50 <= SEARCH_P50_GOAL_MS {
                "met"
            } else {
                "MISSED"
            },
            if across.p99 <= SEARCH_P99_GOAL_MS {
                "met"
            } else {
                "MISSED"
            },
        );

        // One app's search, and the bare query over the same app's rows of this locale.
        let (mut times, mut hits) = (Vec::new(), 0);
        for (i, query) in queries.iter().enumerate() {
            let app = format!("app-{:02}", i % APPS);
            let started = Instant::now();
            let found: Vec<String> = sqlx::query_scalar(
                "SELECT document_id FROM help.documents
                 WHERE app_id = $4 AND locale = $3
                   AND search_document @@ websearch_to_tsquery($1::regconfig, $2)
                 ORDER BY ts_rank_cd(search_document, websearch_to_tsquery($1::regconfig, $2)) DESC
                 LIMIT 25",
            )
            .bind(config)
            .bind(query)
            .bind(locale)
            .bind(&app)
            .fetch_all(&core.pool)
            .await
            .expect("bare search");
            times.push(ms(started.elapsed()));
            hits += found.len();
        }
        let bare_app = figures(times, hits);
        line(
            &format!("[{locale}] bare SQL over one app's rows"),
            &bare_app,
            None,
        );
        let (mut times, mut hits) = (Vec::new(), 0);
        for (i, query) in queries.iter().enumerate() {
            let app = format!("app-{:02}", i % APPS);
            let (elapsed, found) =
                search(format!("/api/help/v1/{app}/search?q={query}"), locale).await;
            times.push(elapsed);
            hits += found;
        }
        let one_app = figures(times, hits);
        line(
            &format!("[{locale}] HTTP GET /api/help/v1/{{appId}}/search"),
            &one_app,
            Some(&bare_app),
        );
        println!(
            "{:<44} goal p50 ≤ {SEARCH_P50_GOAL_MS} ms: {}, p99 ≤ {SEARCH_P99_GOAL_MS} ms: {}",
            "",
            if one_app.p50 <= SEARCH_P50_GOAL_MS {
                "met"
            } else {
                "MISSED"
            },
            if one_app.p99 <= SEARCH_P99_GOAL_MS {
                "met"
            } else {
                "MISSED"
            },
        );
    }

    // Publishing a 120-document corpus over HTTP with the app's own credential.
    let mut first = Vec::new();
    let mut again = Vec::new();
    let mut rows_written = 0usize;
    for p in 0..PUBLISHES {
        let app = format!("publisher-{p:02}");
        let help = corpus(&app, 120, 1000 + p as u64, &en_words, &de_words);
        let body = serde_json::to_vec(&help.corpus).expect("json");
        let credential = {
            let mut conn = core.pool.acquire().await.expect("connection");
            workload::issue_app_credential(&mut conn, &app, &["registry:publish"])
                .await
                .expect("credential")
                .0
        };
        let put = || {
            client
                .put(format!("{base}/api/help/v1/{app}/corpus"))
                .bearer_auth(&credential)
                .header("content-type", "application/json")
                .body(body.clone())
        };
        let started = Instant::now();
        let response = put().send().await.expect("publish");
        first.push(ms(started.elapsed()));
        assert_eq!(response.status(), 201);
        if p == 0 {
            println!(
                "publish corpus: {} documents in 2 locales, {:.0} KiB of JSON",
                help.corpus.row_count(),
                body.len() as f64 / 1024.0
            );
        }
        let versions = |app: String| {
            let pool = core.pool.clone();
            async move {
                sqlx::query_scalar::<_, String>(
                    "SELECT xmin::text || ctid::text FROM help.documents WHERE app_id = $1
                     ORDER BY locale, document_id",
                )
                .bind(app)
                .fetch_all(&pool)
                .await
                .expect("versions")
            }
        };
        let before = versions(app.clone()).await;
        for _ in 0..REPUBLISHES / PUBLISHES {
            let started = Instant::now();
            let response = put().send().await.expect("republish");
            again.push(ms(started.elapsed()));
            assert_eq!(response.status(), 200);
        }
        let after = versions(app.clone()).await;
        rows_written += before.iter().zip(&after).filter(|(a, b)| a != b).count()
            + before.len().abs_diff(after.len());
    }
    let first = figures(first, 0);
    let again = figures(again, 0);
    println!(
        "{:<44} p50 {:>6.2} ms  p99 {:>6.2} ms  ({PUBLISHES} apps)",
        "first publish (201)", first.p50, first.p99
    );
    println!(
        "{:<44} p50 {:>6.2} ms  p99 {:>6.2} ms  ({REPUBLISHES} calls), document rows written: {rows_written}; goal ≤ {REPUBLISH_GOAL_MS} ms: {}",
        "unchanged re-publish (200)",
        again.p50,
        again.p99,
        if again.p50 <= REPUBLISH_GOAL_MS && rows_written == 0 {
            "met"
        } else {
            "MISSED"
        }
    );
}
