//! Reading the mail log over HTTP: own rows, granted logs, searches and paging (scenarios 1–4,
//! 7–12 and 37).

use std::collections::HashSet;
use std::time::{Duration, Instant};

use k2b_core::db::{DbLimits, lazy_pool_with};
use k2b_tests::serve;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use sqlx::Connection;

use super::{Answer, MailSite, OTHER, READER, SENDER, SOURCE, message};

/// What a search answers once its budget is spent.
const TOO_LONG: &str =
    "This search took too long. Narrow it with a longer term, fewer apps, or a shorter time range.";
/// How long a search under a locked table may take to answer: the 5 s budget plus slack.
const SEARCH_ANSWER_LIMIT: Duration = Duration::from_secs(15);

/// Percent-encodes a query value (everything but RFC 3986's unreserved characters).
fn enc(value: &str) -> String {
    value
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The ids of a page's items, in order.
fn ids(page: &Value) -> Vec<String> {
    page["items"]
        .as_array()
        .unwrap_or_else(|| panic!("a page: {page}"))
        .iter()
        .map(|item| item["id"].as_str().expect("id").to_string())
        .collect()
}

/// The ids as a set, for order-free comparisons.
fn set<S: AsRef<str>>(ids: &[S]) -> HashSet<String> {
    ids.iter().map(|id| id.as_ref().to_string()).collect()
}

/// Sends `message` as `app` and answers its id.
async fn sent(site: &MailSite, app: &str, message: Value) -> String {
    let (status, record) = site.send(app, message).await;
    assert_eq!(status, StatusCode::OK, "{record}");
    record["id"].as_str().expect("id").to_string()
}

/// A listing that must succeed.
async fn listed(site: &MailSite, app: &str, query: &str) -> Value {
    let (status, page) = site.list(app, query).await;
    assert_eq!(status, StatusCode::OK, "{query}: {page}");
    page
}

/// `readable-apps` of `app`.
async fn readable(site: &MailSite, app: &str) -> Value {
    let (status, body) = site.app(app, Method::GET, "/readable-apps", None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body["apps"].clone()
}

/// Asserts a domain error's status, code and (when given) message.
fn assert_error(answer: &Answer, status: StatusCode, code: &str, text: Option<&str>) {
    let (got, body) = answer;
    assert_eq!(*got, status, "{body}");
    assert_eq!(body["code"], code, "{body}");
    if let Some(text) = text {
        assert_eq!(body["message"], text, "{body}");
    }
}

/// Moves a message to `at` (an RFC 3339 instant or any Postgres timestamptz text).
async fn set_created(site: &MailSite, id: &str, at: &str) {
    sqlx::query(
        "UPDATE outgoing_mail.messages SET created_at = $2::timestamptz WHERE id = $1::uuid",
    )
    .bind(id)
    .bind(at)
    .execute(&site.core.pool)
    .await
    .expect("set created_at");
}

/// A row of Core's own mail: Core sends in process, never over HTTP.
async fn core_row(site: &MailSite, subject: &str) -> String {
    let id = uuid::Uuid::new_v4();
    sqlx::query(
        "INSERT INTO outgoing_mail.messages (id, app_id, profile_key, lane, to_addresses,
             recipient_count, subject, text_body, message_id_header, status, deadline_at)
         VALUES ($1, 'core', 'alerts', 'immediate', ARRAY['admin@example.org'], 1, $2,
             'Core body', '<' || $1::text || '@example.org>', 'queued', now() + interval '24 hours')",
    )
    .bind(id)
    .bind(subject)
    .execute(&site.core.pool)
    .await
    .expect("core row");
    id.to_string()
}

/// Scenario 1.
#[tokio::test]
async fn a_reader_sees_its_own_text_and_granted_rows_without_content() {
    let site = MailSite::start().await;
    site.grant(READER, &[SOURCE]).await;
    let own = sent(&site, READER, message("r@example.org", "Reader note")).await;
    let mut from_source = message("s@example.org", "Source note");
    from_source["html"] = json!("<p>SecretHtmlMarker</p>");
    from_source["headers"] = json!({"X-App": "HeaderValueMarker"});
    let source = sent(&site, SOURCE, from_source).await;
    sent(&site, OTHER, message("o@example.org", "Other note")).await;
    core_row(&site, "Core note").await;

    let page = listed(&site, READER, "").await;
    assert_eq!((ids(&page), &page["total"]), (vec![own.clone()], &json!(1)));
    assert_eq!(page["items"][0]["text"], "Body of Reader note");
    assert_eq!(readable(&site, READER).await, json!([READER, SOURCE]));

    let page = listed(&site, READER, "apps=source").await;
    assert_eq!(ids(&page), [source.as_str()]);

    let page = listed(&site, READER, "apps=reader,source").await;
    assert_eq!(page["total"], 2);
    assert_eq!(set(&ids(&page)), set(&[&own, &source]));
    let items = page["items"].as_array().expect("items");
    let theirs = items
        .iter()
        .find(|i| i["id"] == json!(source))
        .expect("source row");
    let mine = items
        .iter()
        .find(|i| i["id"] == json!(own))
        .expect("own row");
    assert_eq!(theirs["appId"], SOURCE);
    assert_eq!(theirs["subject"], "Source note");
    assert_eq!(theirs["to"], json!(["s@example.org"]));
    assert!(theirs.get("text").is_none(), "{theirs}");
    assert_eq!(mine["text"], "Body of Reader note");
    let text = page.to_string();
    for hidden in [
        "SecretHtmlMarker",
        "HeaderValueMarker",
        "X-App",
        "html",
        "headers",
        "Body of Source",
    ] {
        assert!(!text.contains(hidden), "{hidden} listed: {text}");
    }
    // The source itself reads its own text.
    let page = listed(&site, SOURCE, "").await;
    assert_eq!(page["items"][0]["text"], "Body of Source note");
}

/// Scenario 2.
#[tokio::test]
async fn naming_an_ungranted_app_or_core_is_refused() {
    let site = MailSite::start().await;
    site.grant(READER, &[SOURCE]).await;
    sent(&site, OTHER, message("o@example.org", "Other note")).await;
    core_row(&site, "Core note").await;
    let answer = site.list(READER, "apps=source,other").await;
    assert_error(
        &answer,
        StatusCode::FORBIDDEN,
        "app_not_allowed",
        Some("This application may not read the mail log of \"other\"."),
    );
    assert_eq!(answer.1["status"], 403);
    let answer = site.list(READER, "apps=core").await;
    assert_error(
        &answer,
        StatusCode::FORBIDDEN,
        "app_not_allowed",
        Some("This application may not read the mail log of \"core\"."),
    );
}

/// Scenario 3: a grant does not count for an app that does not declare `mail:read`.
#[tokio::test]
async fn a_sender_without_mail_read_reads_only_its_own_log() {
    let site = MailSite::start().await;
    site.grant(SENDER, &[SOURCE]).await;
    sent(&site, SOURCE, message("s@example.org", "Source note")).await;
    let own = sent(&site, SENDER, message("i@example.org", "Own note")).await;
    let answer = site.list(SENDER, "apps=source").await;
    assert_error(&answer, StatusCode::FORBIDDEN, "mail_not_declared", None);
    let answer = site.list(SENDER, "apps=inventory,source").await;
    assert_error(&answer, StatusCode::FORBIDDEN, "mail_not_declared", None);
    assert_eq!(readable(&site, SENDER).await, json!([SENDER]));
    let page = listed(&site, SENDER, "apps=inventory").await;
    assert_eq!(ids(&page), [own]);
}

/// Scenario 4: revocation is immediate.
#[tokio::test]
async fn revoked_grants_stop_at_once() {
    let site = MailSite::start().await;
    site.grant(READER, &[SOURCE]).await;
    sent(&site, SOURCE, message("s@example.org", "Source note")).await;
    assert_eq!(listed(&site, READER, "apps=source").await["total"], 1);
    site.grant(READER, &[]).await;
    let answer = site.list(READER, "apps=source").await;
    assert_error(
        &answer,
        StatusCode::FORBIDDEN,
        "app_not_allowed",
        Some("This application may not read the mail log of \"source\"."),
    );
    assert_eq!(readable(&site, READER).await, json!([READER]));
}

/// Scenario 7.
#[tokio::test]
async fn a_reader_with_a_hundred_grants_lists_all_hundred_and_one_logs() {
    let site = MailSite::start().await;
    let mut granted: Vec<String> = (0..99).map(|i| format!("app-{i:03}")).collect();
    granted.push(SOURCE.to_string());
    let reversed: Vec<&str> = granted.iter().rev().map(String::as_str).collect();
    site.grant(READER, &reversed).await;
    let expected: Vec<&str> = std::iter::once(READER)
        .chain(granted.iter().map(String::as_str))
        .collect();
    assert_eq!(readable(&site, READER).await, json!(expected));

    let own = sent(&site, READER, message("r@example.org", "Reader note")).await;
    let source = sent(&site, SOURCE, message("s@example.org", "Source note")).await;
    sent(&site, OTHER, message("o@example.org", "Other note")).await;
    let page = listed(&site, READER, &format!("apps={}", expected.join(","))).await;
    assert_eq!(page["total"], 2);
    assert_eq!(set(&ids(&page)), set(&[&own, &source]));
}

/// Scenario 8: terms without three letters or digits in a row are refused.
#[tokio::test]
async fn searches_without_a_word_are_refused() {
    let site = MailSite::start().await;
    for term in ["...", "%_%"] {
        let answer = site.list(SENDER, &format!("q={}", enc(term))).await;
        assert_error(
            &answer,
            StatusCode::BAD_REQUEST,
            "bad_input",
            Some("Invalid outgoing mail filter or page."),
        );
    }
}

/// Holds `ACCESS EXCLUSIVE` on the messages table from another connection until dropped.
async fn lock_messages(site: &MailSite) -> sqlx::PgConnection {
    let mut holder = sqlx::PgConnection::connect(&site.db.url())
        .await
        .expect("connect");
    sqlx::raw_sql("BEGIN; LOCK TABLE outgoing_mail.messages IN ACCESS EXCLUSIVE MODE")
        .execute(&mut holder)
        .await
        .expect("lock");
    holder
}

/// A q search and a recipient search against `base` each answer "took too long" in time.
async fn searches_time_out(site: &MailSite, base: &str) {
    let token = site.tokens.get(SENDER).expect("token");
    for query in ["q=invoice", "recipient=ann%40example.org"] {
        let started = Instant::now();
        let response = site
            .client
            .get(format!("{base}/api/mail/v1/messages?{query}"))
            .bearer_auth(token)
            .send()
            .await
            .expect("request");
        let status = response.status();
        let body: Value = response.json().await.expect("json");
        let took = started.elapsed();
        assert!(took < SEARCH_ANSWER_LIMIT, "{query} took {took:?}");
        assert_error(
            &(status, body),
            StatusCode::BAD_REQUEST,
            "bad_input",
            Some(TOO_LONG),
        );
    }
}

/// Every connection of `pool` still has the session's own statement timeout.
async fn assert_statement_timeout(pool: &sqlx::PgPool, connections: usize, expected: &str) {
    let mut held = Vec::new();
    for _ in 0..connections {
        held.push(pool.acquire().await.expect("connection"));
    }
    for conn in &mut held {
        let timeout: String = sqlx::query_scalar("SHOW statement_timeout")
            .fetch_one(&mut **conn)
            .await
            .expect("show");
        assert_eq!(timeout, expected);
    }
}

/// Scenario 8: the budget ends a search stuck behind a lock, and stays inside its transaction.
#[tokio::test]
async fn a_search_behind_a_table_lock_answers_too_long_and_leaves_the_session_alone() {
    let site = MailSite::start().await;
    sent(&site, SENDER, message("ann@example.org", "Invoice 1")).await;
    let holder = lock_messages(&site).await;
    searches_time_out(&site, &site.base).await;
    holder.close().await.expect("release");
    let max = site.core.pool.options().get_max_connections() as usize;
    assert_statement_timeout(&site.core.pool, max, "0").await;
    assert_eq!(listed(&site, SENDER, "q=invoice").await["total"], 1);
}

/// Scenario 8 with the limits a deployed HTTP function's pool carries (statement 5 s, lock
/// 3 s): the lock wait ending first is still "took too long", not an outage.
#[tokio::test]
async fn a_search_behind_a_table_lock_answers_too_long_under_deployed_pool_limits() {
    let site = MailSite::start().await;
    sent(&site, SENDER, message("ann@example.org", "Invoice 1")).await;
    let pool = lazy_pool_with(&site.db.config(), DbLimits::HTTP).expect("pool");
    let base = serve(mail::router(k2b_core::Core::with_pool(
        site.db.config(),
        pool.clone(),
    )))
    .await;
    let holder = lock_messages(&site).await;
    searches_time_out(&site, &base).await;
    holder.close().await.expect("release");
    assert_statement_timeout(&pool, 2, "5s").await;
}

/// Scenario 9.
#[tokio::test]
async fn a_search_matches_subjects_and_addresses_literally_ignoring_case() {
    let site = MailSite::start().await;
    let subject_hit = sent(&site, SENDER, message("a@example.org", "Your INVOICE 42")).await;
    let address_hit = sent(&site, SENDER, message("invoice@example.org", "Other")).await;
    let percent = sent(&site, SENDER, message("b@example.org", "Sale 50%_off now")).await;
    sent(&site, SENDER, message("c@example.org", "50 percent off")).await;
    let backslash = sent(&site, SENDER, message("d@example.org", "Back\\sale items")).await;
    sent(&site, SENDER, message("e@example.org", "Big sale")).await;
    let bond = sent(&site, SENDER, message("bond@example.com", "Hello")).await;
    sent(
        &site,
        OTHER,
        message("invoice@example.org", "Invoice elsewhere"),
    )
    .await;

    let found = |page: Value| set(&ids(&page));
    let search = |term: &str| format!("q={}", enc(term));
    let page = listed(&site, SENDER, &search(" InVoIcE ")).await;
    assert_eq!(page["total"], 2);
    assert_eq!(found(page), set(&[&subject_hit, &address_hit]));
    assert_eq!(
        found(listed(&site, SENDER, &search("50%_off")).await),
        set(&[&percent])
    );
    assert_eq!(
        found(listed(&site, SENDER, &search("\\sale")).await),
        set(&[&backslash])
    );
    assert_eq!(
        found(listed(&site, SENDER, &search("ond@EXAMPLE")).await),
        set(&[&bond])
    );
    assert_eq!(
        found(listed(&site, SENDER, &search("Other")).await),
        set(&[&address_hit])
    );
    let page = listed(&site, SENDER, &search("OtherInvoice")).await;
    assert_eq!((page["total"].clone(), ids(&page).len()), (json!(0), 0));
}

/// Scenario 10.
#[tokio::test]
async fn a_recipient_matches_whole_addresses_for_apps_and_substrings_for_admins() {
    let site = MailSite::start().await;
    let exact = sent(&site, SENDER, message("user@example.org", "One")).await;
    let prefixed = sent(&site, SENDER, message("prefixuser@example.org", "Two")).await;
    let several = sent(
        &site,
        SENDER,
        json!({"to": ["x@example.net", "Ann@Example.ORG"], "subject": "Three", "text": "t"}),
    )
    .await;
    sent(&site, SENDER, message("someone@example.net", "Four")).await;

    let page = listed(
        &site,
        SENDER,
        &format!("recipient={}", enc("user@EXAMPLE.org")),
    )
    .await;
    assert_eq!(ids(&page), [exact.as_str()]);
    assert_eq!(page["total"], 1);
    let page = listed(&site, SENDER, "recipient=%20aNN%40example.org%20").await;
    assert_eq!(ids(&page), [several.as_str()]);

    let (status, page) = site
        .admin(
            Method::GET,
            &format!("/messages?recipient={}", enc("USER@example.org")),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{page}");
    assert_eq!(page["total"], 2, "{page}");
    assert_eq!(set(&ids(&page)), set(&[&exact, &prefixed]));
    for item in page["items"].as_array().expect("items") {
        assert!(item.get("text").is_none(), "{item}");
    }
}

/// Scenario 11.
#[tokio::test]
async fn since_is_inclusive_until_is_exclusive_and_newest_comes_first() {
    let site = MailSite::start().await;
    let mut at = Vec::new();
    for time in ["10:00", "11:00", "11:30", "12:00"] {
        let id = sent(&site, SENDER, message("a@example.org", time)).await;
        set_created(&site, &id, &format!("2024-05-01T{time}:00Z")).await;
        at.push(id);
    }
    let page = listed(&site, SENDER, "until=2024-05-01T12:00:00Z").await;
    assert_eq!(page["total"], 3);
    assert_eq!(ids(&page), [at[2].clone(), at[1].clone(), at[0].clone()]);
    let query = format!(
        "since={}&until={}",
        enc("2024-05-01T13:00:00+02:00"),
        "2024-05-01T12:00:00Z"
    );
    let page = listed(&site, SENDER, &query).await;
    assert_eq!(ids(&page), [at[2].clone(), at[1].clone()]);
    assert_eq!(page["total"], 2);
}

/// Follows `nextCursor` from the first page, checking each page; answers every id seen.
async fn walk(site: &MailSite, app: &str, query: &str, total: i64) -> Vec<String> {
    let mut seen = Vec::new();
    let mut page = listed(site, app, query).await;
    for number in 1.. {
        assert_eq!(page["total"], total, "page {number}: {page}");
        assert_eq!(page["page"], number, "{page}");
        seen.extend(ids(&page));
        if page["hasNext"] == false {
            assert!(page.get("nextCursor").is_none(), "{page}");
            break;
        }
        let cursor = page["nextCursor"].as_str().expect("a cursor").to_string();
        page = listed(site, app, &format!("{query}&cursor={}", enc(&cursor))).await;
    }
    seen
}

/// Scenario 12.
#[tokio::test]
async fn cursor_pages_over_ties_return_each_match_once_with_a_constant_total() {
    let site = MailSite::start().await;
    let batch: Vec<Value> = (0..23)
        .map(|i| message("a@example.org", &format!("Match {i}")))
        .chain((0..7).map(|i| message("a@example.org", &format!("Decoy {i}"))))
        .collect();
    let (status, enqueued) = site.enqueue(SENDER, json!(batch)).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{enqueued}");
    let all: Vec<String> = enqueued["ids"]
        .as_array()
        .expect("ids")
        .iter()
        .map(|id| id.as_str().expect("id").to_string())
        .collect();
    // Four rows per instant: matches and decoys share timestamps.
    for (index, id) in all.iter().enumerate() {
        let at = format!("2024-05-01T10:00:{:02}.123456Z", index % 8);
        set_created(&site, id, &at).await;
    }
    sent(&site, OTHER, message("a@example.org", "Match elsewhere")).await;

    let seen = walk(&site, SENDER, "q=match&perPage=4", 23).await;
    assert_eq!(seen.len(), 23);
    assert_eq!(set(&seen), set(&all[..23]));
    let ordered: Vec<String> = sqlx::query_scalar(
        "SELECT id::text FROM outgoing_mail.messages
         WHERE app_id = $1 AND subject LIKE 'Match %' ORDER BY created_at DESC, id",
    )
    .bind(SENDER)
    .fetch_all(&site.core.pool)
    .await
    .expect("order");
    assert_eq!(seen, ordered);
}

/// Scenario 37.
#[tokio::test]
async fn cursor_paging_survives_a_deleted_anchor_and_newer_rows() {
    let site = MailSite::start().await;
    let mut originals = Vec::new();
    for (index, at) in ["10:00:00", "10:00:00", "10:00:00", "09:00:00", "09:00:00"]
        .into_iter()
        .enumerate()
    {
        let id = sent(
            &site,
            SENDER,
            message("a@example.org", &format!("Row {index}")),
        )
        .await;
        set_created(&site, &id, &format!("2024-05-01T{at}Z")).await;
        originals.push(id);
    }
    let first = listed(&site, SENDER, "perPage=2").await;
    assert_eq!(first["total"], 5, "{first}");
    let mut seen = ids(&first);
    let anchor = seen.last().expect("an anchor").clone();
    sqlx::query("DELETE FROM outgoing_mail.messages WHERE id = $1::uuid")
        .bind(&anchor)
        .execute(&site.core.pool)
        .await
        .expect("delete anchor");
    sent(&site, SENDER, message("a@example.org", "Newer")).await;
    let mut cursor = first["nextCursor"].as_str().expect("cursor").to_string();
    loop {
        let page = listed(&site, SENDER, &format!("perPage=2&cursor={}", enc(&cursor))).await;
        seen.extend(ids(&page));
        match page["nextCursor"].as_str() {
            Some(next) => cursor = next.to_string(),
            None => break,
        }
    }
    assert_eq!(seen.len(), 5, "{seen:?}");
    assert_eq!(
        seen.into_iter().collect::<HashSet<_>>(),
        originals.iter().cloned().collect::<HashSet<_>>()
    );

    let foreign = sent(&site, OTHER, message("o@example.org", "Not yours")).await;
    let page = listed(&site, SENDER, &format!("ids={foreign}")).await;
    assert_eq!((page["total"].clone(), ids(&page).len()), (json!(0), 0));
    let answer = site.list(SENDER, "cursor=invalid").await;
    assert_error(
        &answer,
        StatusCode::BAD_REQUEST,
        "bad_input",
        Some("Invalid outgoing mail cursor."),
    );
}

/// `ref=scope[:id]` and `status` narrow the log.
#[tokio::test]
async fn reference_and_status_filters_narrow_the_log() {
    let site = MailSite::start().await;
    let with_ref = |to: &str, subject: &str, id: &str| {
        let mut value = message(to, subject);
        value["ref"] = json!({"scope": "order", "id": id});
        value
    };
    let order_42 = sent(&site, SENDER, with_ref("a@example.org", "Order 42", "42")).await;
    let order_43 = sent(&site, SENDER, with_ref("a@example.org", "Order 43", "43")).await;
    let plain = sent(&site, SENDER, message("a@example.org", "Plain")).await;
    sqlx::query(
        "UPDATE outgoing_mail.messages SET status = 'sent', sent_at = now() WHERE id = $1::uuid",
    )
    .bind(&order_43)
    .execute(&site.core.pool)
    .await
    .expect("mark sent");

    let page = listed(&site, SENDER, "ref=order:42").await;
    assert_eq!(ids(&page), [order_42.as_str()]);
    assert_eq!(
        page["items"][0]["ref"],
        json!({"scope": "order", "id": "42"})
    );
    let page = listed(&site, SENDER, "ref=order").await;
    assert_eq!(set(&ids(&page)), set(&[&order_42, &order_43]));
    assert_eq!(listed(&site, SENDER, "ref=invoice").await["total"], 0);
    let page = listed(&site, SENDER, "status=sent").await;
    assert_eq!(ids(&page), [order_43.as_str()]);
    assert_eq!(page["items"][0]["status"], "sent");
    let page = listed(&site, SENDER, "status=queued").await;
    assert_eq!(set(&ids(&page)), set(&[&order_42, &plain]));
    let page = listed(&site, SENDER, "status=queued&status=sent&ref=order").await;
    assert_eq!(page["total"], 2);
}

/// Scenario 4: Core reads its own log and nobody else's.
#[tokio::test]
async fn core_reads_only_its_own_log() {
    use k2b_core::mail::log;
    use k2b_core::mail::policy::Caller;
    use k2b_core::mail::validate::{parse_filter, parse_page};

    let site = MailSite::start().await;
    let own = core_row(&site, "Core notice").await;
    sent(&site, SOURCE, message("s@example.org", "Source note")).await;
    let core = Caller::core();
    assert_eq!(
        log::readable_apps(&site.core.pool, &core)
            .await
            .expect("readable apps"),
        vec!["core".to_string()]
    );
    let page = log::list(
        &site.core.pool,
        &core,
        parse_filter(&json!({})).expect("filter"),
        parse_page(&json!({})).expect("page"),
    )
    .await
    .expect("core's log");
    let listed: Vec<String> = page.rows.iter().map(|r| r.id.to_string()).collect();
    assert_eq!(listed, vec![own]);
    let refused = log::list(
        &site.core.pool,
        &core,
        parse_filter(&json!({"apps": [SOURCE]})).expect("filter"),
        parse_page(&json!({})).expect("page"),
    )
    .await
    .expect_err("core reads no other log");
    assert_eq!(
        refused.code(),
        Some(k2b_core::mail::MailCode::MailNotDeclared)
    );
}

/// Scenario 12 across granted logs, with every filter at once.
#[tokio::test]
async fn cursor_pages_across_granted_logs_with_every_filter_return_each_match_once() {
    let site = MailSite::start().await;
    site.grant(READER, &[SOURCE]).await;
    let mut matches = Vec::new();
    let mut decoys = Vec::new();
    for (index, app) in [READER, SOURCE].into_iter().cycle().take(14).enumerate() {
        let id = sent(
            &site,
            app,
            message("user@example.org", &format!("Invoice {index}")),
        )
        .await;
        set_created(&site, &id, &format!("2024-05-01T10:00:0{}Z", index % 3)).await;
        matches.push(id);
    }
    // One decoy per predicate: another recipient, another time, another status, another app,
    // another subject.
    let other_recipient = sent(&site, READER, message("else@example.org", "Invoice x")).await;
    set_created(&site, &other_recipient, "2024-05-01T10:00:01Z").await;
    let too_late = sent(&site, SOURCE, message("user@example.org", "Invoice y")).await;
    set_created(&site, &too_late, "2024-05-01T11:00:00Z").await;
    let cancelled = sent(&site, READER, message("user@example.org", "Invoice z")).await;
    set_created(&site, &cancelled, "2024-05-01T10:00:01Z").await;
    sqlx::query("UPDATE outgoing_mail.messages SET status = 'cancelled' WHERE id = $1::uuid")
        .bind(&cancelled)
        .execute(&site.core.pool)
        .await
        .expect("cancel");
    let elsewhere = sent(&site, OTHER, message("user@example.org", "Invoice o")).await;
    set_created(&site, &elsewhere, "2024-05-01T10:00:01Z").await;
    let unrelated = sent(&site, SOURCE, message("user@example.org", "Receipt")).await;
    set_created(&site, &unrelated, "2024-05-01T10:00:01Z").await;
    decoys.extend([other_recipient, too_late, cancelled, elsewhere, unrelated]);

    let query = format!(
        "apps={READER},{SOURCE}&q=invoice&recipient=USER%40example.org&status=queued\
         &since={}&until={}&perPage=3",
        enc("2024-05-01T10:00:00Z"),
        enc("2024-05-01T10:30:00+00:00"),
    );
    let seen = walk(&site, READER, &query, 14).await;
    assert_eq!(seen.len(), 14, "each match once");
    assert_eq!(set(&seen), set(&matches));
    assert!(set(&seen).is_disjoint(&set(&decoys)));
}

/// Scenario 14: a storage failure on a reading call is `mail_unavailable`, never its details.
#[tokio::test]
async fn a_storage_failure_while_reading_answers_mail_unavailable_without_details() {
    use k2b_tests::pgfault::Fault;

    let site = MailSite::start().await;
    site.grant(READER, &[SOURCE]).await;
    let (proxy, base) = site.behind_faults().await;
    for (path, statement) in [
        ("/profiles", &b"FROM outgoing_mail.profiles ORDER BY"[..]),
        ("/messages", &b"count(*) FROM outgoing_mail.messages"[..]),
        ("/readable-apps", &b"FROM outgoing_mail.app_log_access"[..]),
    ] {
        let fired = proxy.fired();
        proxy.arm([Fault::cut(statement)]);
        let (status, body) = site.app_at(&base, READER, Method::GET, path, None).await;
        assert_eq!(proxy.fired(), fired + 1, "{path}: the statement was cut");
        assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR, "{path}: {body}");
        assert_eq!(
            body,
            json!({
                "code": "mail_unavailable",
                "message": "Outgoing mail storage is unavailable.",
                "status": 500,
            }),
            "{path}"
        );
        // The next call finds the database again.
        let (status, body) = site.app_at(&base, READER, Method::GET, path, None).await;
        assert_eq!(status, StatusCode::OK, "{path}: {body}");
    }
}
