//! Outgoing mail acceptance and log search (figures, no assertions), through real HTTP to the
//! `mail` router on loopback, against a real Postgres:
//! - `POST /api/mail/v1/enqueue` of 1,000 messages in one call (distinct keys, 1–3 recipients
//!   each, no attachments), time per call and rows/s, compared in the same run with the bare
//!   statement that stores them (one `INSERT … SELECT FROM jsonb_to_recordset($1)` of the same
//!   1,000 rows: no checks, no locks, no audit) — the ratio is what acceptance costs;
//! - `GET /api/mail/v1/messages?q=<term>` over 100,000 messages of the calling app (terms that
//!   match about 0.25–1% of them), compared with the bare `count(*)` and page query over the
//!   same rows (no credential, no registry, no transaction, no search budget); then one exact
//!   `recipient=` search. The plans of the bare `q` statements are printed, to show whether the
//!   trigram index carries them.
//!
//! Goals: `q` search p50 ≤ 50 ms over 100,000 rows; enqueue of 1,000 within a small multiple of
//! the bare insert.
//!
//! Run: `cargo bench -p k2b-tests --bench mail`.

use std::time::{Duration, Instant};

use k2b_core::identity::workload;
use k2b_core::mail::record::{MESSAGE_COLUMNS, MessageRow};
use k2b_core::registry::store;
use k2b_tests::figures::{ms, percentile};
use k2b_tests::{TestDb, core_for, create_user, serve};
use serde_json::{Value, json};
use uuid::Uuid;

/// The app that enqueues (its rows grow by 2,000 per round: the call's and the bare insert's).
const SENDER: &str = "bulk";
/// The app whose log is searched (exactly [`LOG_ROWS`] rows).
const READER: &str = "inventory";

/// Messages per `enqueue` call: the largest batch the API takes.
const BATCH: usize = 1000;
/// Measured `enqueue` calls (each with fresh keys), after one warm-up call.
const ENQUEUE_CALLS: usize = 10;
/// The profile's pace: its bulk backlog (a day at this pace) then holds every round's rows.
const PACE_PER_MINUTE: i32 = 6000;

/// Rows of the searched app's log.
const LOG_ROWS: i64 = 100_000;
/// Made-up subject words; two per subject, so each word is in about 0.5% of the rows.
const SUBJECT_WORDS: usize = 400;
/// Recipient domains; 1–3 recipients per message, so each domain is in about 1% of the rows.
const DOMAINS: usize = 200;
/// Recipient local parts (`user<n>`), so an exact address is in a handful of rows.
const MAILBOXES: i64 = 50_000;
/// Measured `q` searches per series, spread over [`TERMS`] terms.
const SEARCHES: usize = 200;
/// Distinct `q` terms: half subject words, half domains.
const TERMS: usize = 10;
/// Measured exact `recipient=` searches per series.
const RECIPIENT_SEARCHES: usize = 100;

/// The page a search returns without `perPage` (the route asks for one more, to tell `hasNext`).
const PAGE_LIMIT: i64 = 51;

const SEARCH_P50_GOAL_MS: f64 = 50.0;

/// A small deterministic generator (the same data every run).
struct Random(u64);

impl Random {
    fn next(&mut self, n: usize) -> usize {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        ((self.0 >> 33) as usize) % n
    }
}

/// `count` distinct made-up words of three syllables. Subject words are consonant–vowel
/// syllables and domains vowel–consonant ones, so a subject word never matches inside a domain
/// (and the other way round): a term's hits are the rows that carry it.
fn words(count: usize, consonant_first: bool, seed: u64) -> Vec<String> {
    const CONSONANTS: &[char] = &[
        'b', 'd', 'f', 'g', 'k', 'l', 'm', 'n', 'p', 'r', 's', 't', 'v', 'z',
    ];
    const VOWELS: &[char] = &['a', 'e', 'i', 'o', 'u'];
    let mut random = Random(seed);
    let mut seen = std::collections::HashSet::new();
    let mut out = Vec::with_capacity(count);
    while out.len() < count {
        let word: String = (0..3)
            .flat_map(|_| {
                let c = CONSONANTS[random.next(CONSONANTS.len())];
                let v = VOWELS[random.next(VOWELS.len())];
                if consonant_first { [c, v] } else { [v, c] }
            })
            .collect();
        if seen.insert(word.clone()) {
            out.push(word);
        }
    }
    out
}

struct Figures {
    p50: f64,
    p99: f64,
    best: f64,
    worst: f64,
}

fn figures(mut times: Vec<f64>) -> Figures {
    times.sort_by(f64::total_cmp);
    Figures {
        p50: percentile(&times, 50.0),
        p99: percentile(&times, 99.0),
        best: times[0],
        worst: times[times.len() - 1],
    }
}

fn verdict(met: bool) -> &'static str {
    if met { "met" } else { "MISSED" }
}

/// One `enqueue` batch: `BATCH` messages with keys `{prefix}-{i}`, 1–3 recipients each.
fn batch(prefix: &str, domains: &[String], random: &mut Random) -> Vec<Value> {
    (0..BATCH)
        .map(|i| {
            let to: Vec<String> = (0..1 + random.next(3))
                .map(|_| {
                    format!(
                        "user{}@{}.example",
                        random.next(MAILBOXES as usize),
                        domains[random.next(domains.len())]
                    )
                })
                .collect();
            json!({
                "key": format!("{prefix}-{i}"),
                "to": to,
                "subject": format!("Your order {prefix}-{i} has shipped"),
                "text": format!("Hello,\n\nyour order {prefix}-{i} is on its way.\n"),
            })
        })
        .collect()
}

/// The rows the bare insert stores for `messages`: the shape acceptance builds.
fn bare_rows(messages: &[Value], profile_id: Uuid) -> Value {
    Value::Array(
        messages
            .iter()
            .map(|m| {
                let id = Uuid::new_v4();
                json!({
                    "id": id,
                    "profile_id": profile_id,
                    "profile_key": "alerts",
                    "idempotency_key": m["key"],
                    "ref_scope": null,
                    "ref_id": null,
                    "to_addresses": m["to"],
                    "subject": m["subject"],
                    "text_body": m["text"],
                    "html_body": null,
                    "headers": null,
                    "from_name": null,
                    "reply_to": null,
                    "message_id_header": format!("<{id}@example.org>"),
                    "attachments": null,
                    "attachment_refs": null,
                    "actor_type": null,
                    "actor_id": null,
                    "actor_name": null,
                })
            })
            .collect(),
    )
}

/// The statement acceptance stores a batch with, run alone.
const BARE_INSERT: &str = "INSERT INTO outgoing_mail.messages (
         id, app_id, profile_id, profile_key, batch_id, lane, idempotency_key, ref_scope,
         ref_id, to_addresses, recipient_count, subject, text_body, html_body, headers,
         from_name, reply_to, message_id_header, attachments, attachment_refs, status,
         deadline_at, actor_type, actor_id, actor_name)
     SELECT r.id, $1, r.profile_id, r.profile_key, $2, 'bulk', r.idempotency_key, r.ref_scope,
         r.ref_id, r.to_addresses, cardinality(r.to_addresses), r.subject, r.text_body,
         r.html_body, r.headers, r.from_name, r.reply_to, r.message_id_header,
         coalesce(r.attachments, '[]'), r.attachment_refs, 'queued',
         now() + interval '24 hours', r.actor_type, r.actor_id, r.actor_name
     FROM jsonb_to_recordset($3) AS r(
         id uuid, profile_id uuid, profile_key text, idempotency_key text, ref_scope text,
         ref_id text, to_addresses text[], subject text, text_body text, html_body text,
         headers jsonb, from_name text, reply_to text, message_id_header text,
         attachments jsonb, attachment_refs jsonb, actor_type text, actor_id text,
         actor_name text)
     ON CONFLICT (app_id, idempotency_key) DO NOTHING";

/// The searched app's log, in one statement: subjects of two words drawn from `$2`, 1–3
/// recipients `user<n>@<domain>.example` with domains drawn from `$3`, one message every
/// 3 seconds back from now, most sent, some failed.
const SEED_LOG: &str = "INSERT INTO outgoing_mail.messages (
         id, app_id, profile_id, profile_key, batch_id, lane, idempotency_key, to_addresses,
         recipient_count, subject, text_body, message_id_header, status, deadline_at,
         created_at, sent_at)
     SELECT id, $1, $4, 'alerts', NULL, 'bulk', 'log-' || i, addresses,
         cardinality(addresses), subject, 'Body of message ' || i,
         '<' || id || '@example.org>', CASE WHEN i % 50 = 0 THEN 'failed' ELSE 'sent' END,
         created + interval '24 hours', created, CASE WHEN i % 50 = 0 THEN NULL ELSE created END
     FROM (
         SELECT i, gen_random_uuid() AS id, now() - make_interval(secs => i * 3) AS created,
             initcap($2[1 + (i * 2654435761) % 4294967291 % cardinality($2)]) || ' '
                 || $2[1 + (i * 40503 + 7) % 65521 % cardinality($2)] || ' '
                 || (ARRAY['report', 'reminder', 'invoice', 'notice'])[1 + i % 4]
                 || ' #' || i AS subject,
             ARRAY(SELECT 'user' || ((i * 7919 + k * 104729) % $5) || '@'
                          || $3[1 + (i * 31 + k * 17 + i / 7) % cardinality($3)] || '.example'
                   FROM generate_series(1, 1 + (i * 48271) % 2147483647 % 3) AS k) AS addresses
         FROM generate_series(1::bigint, $6::bigint) AS i
     ) AS seed";

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    println!(
        "== mail: enqueue of {BATCH} × {ENQUEUE_CALLS} calls; q search over {LOG_ROWS} rows, {SEARCHES} searches; through HTTP on loopback =="
    );
    let db = TestDb::new().await;
    let core = core_for(&db);
    let mut tokens = Vec::new();
    {
        let mut conn = core.pool.acquire().await.expect("connection");
        for app in [SENDER, READER] {
            store::upsert(
                &mut conn,
                &json!({"id": app, "name": app, "icon": "ti ti-box", "description": "d",
                        "baseUrl": format!("https://{app}.internal"),
                        "routes": [format!("/app/{app}")],
                        "platformPermissions": ["mail:send"]}),
                Duration::from_secs(3600),
            )
            .await
            .expect("register");
            let (token, _) = workload::issue_app_credential(&mut conn, app, &["mail"])
                .await
                .expect("credential");
            tokens.push(token);
        }
    }
    let (sender_token, reader_token) = (tokens[0].clone(), tokens[1].clone());
    let admin = create_user(&core, "root", true).await;
    let admin_cookie = k2b_tests::session_cookie(&core, &admin).await;
    let origin = core.settings.public_origin().await.expect("origin");
    let base = serve(mail::router(core.clone())).await;
    let client = reqwest::Client::builder()
        .tcp_nodelay(true)
        .build()
        .expect("client");

    // The first profile, through the admin API: it becomes the default.
    let response = client
        .put(format!(
            "{base}/api/admin/core/outgoing-mail/profiles/alerts"
        ))
        .header("cookie", &admin_cookie)
        .header("origin", &origin)
        .json(&json!({
            "name": "Alerts", "fromAddress": "alerts@example.org", "smtpHost": "smtp.example.org",
            "smtpPort": 587, "smtpSecure": false, "smtpUser": "mailer",
            "smtpPassword": "s3cret-pass", "pacePerMinute": PACE_PER_MINUTE,
        }))
        .send()
        .await
        .expect("profile");
    assert_eq!(response.status(), 201, "profile");
    let profile_id: Uuid =
        sqlx::query_scalar("SELECT id FROM outgoing_mail.profiles WHERE key = 'alerts'")
            .fetch_one(&core.pool)
            .await
            .expect("profile id");

    let subject_words = words(SUBJECT_WORDS, true, 5);
    let domains = words(DOMAINS, false, 9);

    // 1. enqueue of 1,000, each call beside the bare insert of 1,000 rows of the same shape.
    let mut random = Random(17);
    let enqueue = |body: Vec<u8>| {
        let request = client
            .post(format!("{base}/api/mail/v1/enqueue"))
            .bearer_auth(&sender_token)
            .header("content-type", "application/json")
            .body(body);
        async move {
            let started = Instant::now();
            let response = request.send().await.expect("enqueue");
            let status = response.status();
            let body: Value = response.json().await.expect("json");
            let elapsed = ms(started.elapsed());
            assert_eq!(status, 202, "enqueue: {body}");
            assert_eq!(body["ids"].as_array().map_or(0, Vec::len), BATCH);
            elapsed
        }
    };
    let bare_insert = |rows: Value| {
        let pool = core.pool.clone();
        async move {
            let started = Instant::now();
            let inserted = sqlx::query(BARE_INSERT)
                .bind(SENDER)
                .bind(Uuid::new_v4())
                .bind(rows)
                .execute(&pool)
                .await
                .expect("bare insert")
                .rows_affected();
            let elapsed = ms(started.elapsed());
            assert_eq!(inserted, BATCH as u64);
            elapsed
        }
    };
    let body_bytes = serde_json::to_vec(&batch("warm", &domains, &mut random)).expect("json");
    println!(
        "enqueue body: {BATCH} messages, {:.0} KiB of JSON",
        body_bytes.len() as f64 / 1024.0
    );
    enqueue(body_bytes).await;
    bare_insert(bare_rows(
        &batch("bare-warm", &domains, &mut random),
        profile_id,
    ))
    .await;
    let (mut http_times, mut bare_times) = (Vec::new(), Vec::new());
    for call in 0..ENQUEUE_CALLS {
        let body = serde_json::to_vec(&batch(&format!("call{call}"), &domains, &mut random))
            .expect("json");
        http_times.push(enqueue(body).await);
        let rows = bare_rows(
            &batch(&format!("bare{call}"), &domains, &mut random),
            profile_id,
        );
        bare_times.push(bare_insert(rows).await);
    }
    let enqueue_http = figures(http_times);
    let enqueue_bare = figures(bare_times);

    // 2. The searched log: 100,000 rows of one app, then fresh statistics.
    let started = Instant::now();
    sqlx::query(SEED_LOG)
        .bind(READER)
        .bind(&subject_words)
        .bind(&domains)
        .bind(profile_id)
        .bind(MAILBOXES)
        .bind(LOG_ROWS)
        .execute(&core.pool)
        .await
        .expect("seed log");
    let seeded = started.elapsed();
    sqlx::raw_sql("VACUUM ANALYZE outgoing_mail.messages")
        .execute(&core.pool)
        .await
        .expect("analyze");
    let (rows, reader_rows): (i64, i64) = sqlx::query_as(
        "SELECT count(*), count(*) FILTER (WHERE app_id = $1) FROM outgoing_mail.messages",
    )
    .bind(READER)
    .fetch_one(&core.pool)
    .await
    .expect("count");
    println!(
        "seeded {LOG_ROWS} log rows in {:.1} s (one INSERT … generate_series, then VACUUM ANALYZE); table: {rows} rows, {reader_rows} of {READER}",
        seeded.as_secs_f64()
    );

    // Terms: every other one a subject word, the rest domains, drawn across the vocabularies.
    let mut draw = Random(23);
    let terms: Vec<String> = (0..TERMS)
        .map(|i| {
            if i % 2 == 0 {
                subject_words[draw.next(SUBJECT_WORDS)].clone()
            } else {
                domains[draw.next(DOMAINS)].clone()
            }
        })
        .collect();
    // Exact addresses that are in the log, from rows spread over it.
    let recipients: Vec<String> = sqlx::query_scalar(
        "SELECT to_addresses[1] FROM outgoing_mail.messages
         WHERE app_id = $1 AND idempotency_key = ANY($2)",
    )
    .bind(READER)
    .bind(
        (0..10)
            .map(|i| format!("log-{}", 1 + i * 9_973))
            .collect::<Vec<_>>(),
    )
    .fetch_all(&core.pool)
    .await
    .expect("recipients");

    let list = |query: String| {
        let request = client
            .get(format!("{base}/api/mail/v1/messages?{query}"))
            .bearer_auth(&reader_token);
        async move {
            let started = Instant::now();
            let response = request.send().await.expect("list");
            let status = response.status();
            let body: Value = response.json().await.expect("json");
            let elapsed = ms(started.elapsed());
            assert_eq!(status, 200, "list: {body}");
            (elapsed, body["total"].as_i64().unwrap_or(0))
        }
    };
    let apps = vec![READER.to_string()];
    let bare_search = |condition: &'static str, value: String| {
        let pool = core.pool.clone();
        let apps = apps.clone();
        async move {
            let started = Instant::now();
            let total: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
                "SELECT count(*) FROM outgoing_mail.messages m
                 WHERE m.app_id = ANY($1) AND {condition}"
            )))
            .bind(&apps)
            .bind(&value)
            .fetch_one(&pool)
            .await
            .expect("bare count");
            let page: Vec<MessageRow> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
                "SELECT {MESSAGE_COLUMNS} FROM outgoing_mail.messages m
                 WHERE m.app_id = ANY($1) AND {condition}
                 ORDER BY m.created_at DESC, m.id LIMIT {PAGE_LIMIT}"
            )))
            .bind(&apps)
            .bind(&value)
            .fetch_all(&pool)
            .await
            .expect("bare page");
            assert!(page.len() as i64 <= total.max(PAGE_LIMIT));
            (ms(started.elapsed()), total)
        }
    };
    const Q_CONDITION: &str = "outgoing_mail.search_text(m.subject, m.to_addresses) LIKE $2";
    const RECIPIENT_CONDITION: &str = "outgoing_mail.lower_addresses(m.to_addresses) @> ARRAY[$2]";

    // Warm-up: connections, plans, caches.
    for term in &terms {
        list(format!("q={term}")).await;
        bare_search(Q_CONDITION, format!("%{term}%")).await;
    }

    let (mut q_http, mut q_bare, mut hits) = (Vec::new(), Vec::new(), 0i64);
    for i in 0..SEARCHES {
        let term = &terms[i % TERMS];
        let (elapsed, _) = bare_search(Q_CONDITION, format!("%{term}%")).await;
        q_bare.push(elapsed);
        let (elapsed, total) = list(format!("q={term}")).await;
        q_http.push(elapsed);
        hits += total;
    }
    let q_http = figures(q_http);
    let q_bare = figures(q_bare);
    let mean_hits = hits as f64 / SEARCHES as f64;

    let (mut r_http, mut r_bare, mut r_hits) = (Vec::new(), Vec::new(), 0i64);
    for recipient in &recipients {
        list(format!("recipient={}", recipient.replace('@', "%40"))).await;
    }
    for i in 0..RECIPIENT_SEARCHES {
        let recipient = &recipients[i % recipients.len()];
        let (elapsed, _) = bare_search(RECIPIENT_CONDITION, recipient.to_lowercase()).await;
        r_bare.push(elapsed);
        let (elapsed, total) = list(format!("recipient={}", recipient.replace('@', "%40"))).await;
        r_http.push(elapsed);
        r_hits += total;
    }
    let r_http = figures(r_http);
    let r_bare = figures(r_bare);

    // The plans of the bare `q` statements for one term, as Postgres ran them.
    for (name, statement) in [
        (
            "count",
            format!(
                "SELECT count(*) FROM outgoing_mail.messages m WHERE m.app_id = ANY($1) AND {Q_CONDITION}"
            ),
        ),
        (
            "page",
            format!(
                "SELECT {MESSAGE_COLUMNS} FROM outgoing_mail.messages m WHERE m.app_id = ANY($1) AND {Q_CONDITION} ORDER BY m.created_at DESC, m.id LIMIT {PAGE_LIMIT}"
            ),
        ),
    ] {
        let plan: Vec<String> = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
            "EXPLAIN (ANALYZE, BUFFERS, COSTS OFF, SUMMARY ON) {statement}"
        )))
        .bind(&apps)
        .bind(format!("%{}%", terms[0]))
        .fetch_all(&core.pool)
        .await
        .expect("explain");
        println!("plan of the bare q {name} (term {:?}):", terms[0]);
        for line in plan {
            println!("    {line}");
        }
    }

    println!();
    println!("{:<46} {:>9} {:>9} {:>9}", "", "p50", "best", "worst");
    let enqueue_line = |name: &str, f: &Figures| {
        println!(
            "{name:<46} {:>6.1} ms {:>6.1} ms {:>6.1} ms   {:>6.0} rows/s (p50)",
            f.p50,
            f.best,
            f.worst,
            BATCH as f64 / (f.p50 / 1000.0)
        );
    };
    enqueue_line(
        "bare INSERT … jsonb_to_recordset (1,000 rows)",
        &enqueue_bare,
    );
    enqueue_line("HTTP POST /api/mail/v1/enqueue (1,000 msgs)", &enqueue_http);
    println!(
        "{:<46} ×{:.1} of the bare insert at p50, ×{:.1} best to best ({ENQUEUE_CALLS} calls each)",
        "",
        enqueue_http.p50 / enqueue_bare.p50,
        enqueue_http.best / enqueue_bare.best
    );
    println!();
    println!("{:<46} {:>9} {:>9}", "", "p50", "p99");
    let search_line = |name: &str, f: &Figures, extra: String| {
        println!("{name:<46} {:>6.2} ms {:>6.2} ms{extra}", f.p50, f.p99);
    };
    search_line(
        "bare SQL q: count(*) + page of 51",
        &q_bare,
        format!("   {SEARCHES} searches over {TERMS} terms"),
    );
    search_line(
        "HTTP GET /api/mail/v1/messages?q=",
        &q_http,
        format!(
            "   ×{:.1} of bare SQL p50; total/search {mean_hits:.0} ({:.2}% of {LOG_ROWS})",
            q_http.p50 / q_bare.p50,
            mean_hits * 100.0 / LOG_ROWS as f64
        ),
    );
    println!(
        "{:<46} goal p50 ≤ {SEARCH_P50_GOAL_MS} ms: {}",
        "",
        verdict(q_http.p50 <= SEARCH_P50_GOAL_MS)
    );
    search_line(
        "bare SQL recipient: count(*) + page of 51",
        &r_bare,
        format!(
            "   {RECIPIENT_SEARCHES} searches over {} addresses",
            recipients.len()
        ),
    );
    search_line(
        "HTTP GET /api/mail/v1/messages?recipient=",
        &r_http,
        format!(
            "   ×{:.1} of bare SQL p50; total/search {:.1}",
            r_http.p50 / r_bare.p50,
            r_hits as f64 / RECIPIENT_SEARCHES as f64
        ),
    );
}
