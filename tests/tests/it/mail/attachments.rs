//! Attachments over HTTP (scenarios 33–34): uploads the app performs itself (a presigned S3 PUT,
//! or the function's own route in front of the local folder store), inline content, the profile
//! and object limits, the installation's 2 GiB of attachment storage, cleanup of refused calls
//! and cancelled messages, and what never reaches an audit row or a log.

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use k2b_core::mail::attachments::MAX_TOTAL_BYTES;
use k2b_core::mail::objects::{MAX_OBJECT_BYTES, ObjectStore};
use k2b_tests::{LogCapture, core_for, serve};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::{Answer, MailSite, SENDER, message, profile_body};

const MIB: usize = 1024 * 1024;

/// Bytes that are not all alike, so a hash proves which bytes were kept.
fn pattern(len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i % 251) as u8 ^ (i / 251) as u8)
        .collect()
}

fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// An inline attachment (`content` in standard base64).
fn inline(filename: &str, bytes: &[u8]) -> Value {
    json!({
        "filename": filename,
        "contentType": "application/octet-stream",
        "content": BASE64.encode(bytes),
    })
}

/// An attachment naming an upload.
fn uploaded(filename: &str, upload: &str) -> Value {
    json!({"filename": filename, "contentType": "application/pdf", "upload": upload})
}

fn with_attachments(mut message: Value, attachments: Vec<Value>) -> Value {
    message["attachments"] = Value::Array(attachments);
    message
}

fn code(answer: &Answer) -> &str {
    answer.1["code"].as_str().unwrap_or_default()
}

/// Replaces the `alerts` profile with `changes` applied to its body, at its current revision.
async fn change_profile(site: &MailSite, changes: Value) {
    let (status, current) = site.admin(Method::GET, "/profiles/alerts", None).await;
    assert_eq!(status, StatusCode::OK, "{current}");
    let mut body = profile_body("alerts@example.org");
    body.as_object_mut().expect("object").remove("smtpPassword");
    for (name, value) in changes.as_object().expect("changes") {
        body[name] = value.clone();
    }
    body["revision"] = current["revision"].clone();
    let (status, changed) = site
        .admin(Method::PUT, "/profiles/alerts", Some(body))
        .await;
    assert_eq!(status, StatusCode::OK, "{changed}");
}

/// The accounting rows: (object key, bytes, upload not yet claimed), by key.
async fn accounting(site: &MailSite) -> Vec<(String, i64, bool)> {
    sqlx::query_as(
        "SELECT object_key, bytes, upload FROM outgoing_mail.attachment_objects ORDER BY object_key",
    )
    .fetch_all(&site.core.pool)
    .await
    .expect("accounting rows")
}

/// `attachment_refs` of a message.
async fn refs(site: &MailSite, id: &str) -> Option<Value> {
    sqlx::query_scalar("SELECT attachment_refs FROM outgoing_mail.messages WHERE id = $1::uuid")
        .bind(id)
        .fetch_one(&site.core.pool)
        .await
        .expect("message row")
}

/// `POST /uploads` as the sender; asserts 201.
async fn create_upload(site: &MailSite, size: u64) -> Value {
    let (status, upload) = site
        .app(
            SENDER,
            Method::POST,
            "/uploads",
            Some(json!({"size": size, "contentType": "application/pdf"})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{upload}");
    upload
}

/// PUTs `body` where the upload says, with its headers (all but `skip`).
async fn put_upload(
    client: &reqwest::Client,
    url: &str,
    upload: &Value,
    body: Vec<u8>,
    skip: &[&str],
) -> reqwest::Response {
    assert_eq!(upload["method"], "PUT");
    let mut request = client.put(url).body(body);
    for (name, value) in upload["headers"].as_object().expect("headers") {
        if !skip.contains(&name.as_str()) {
            request = request.header(name, value.as_str().expect("header value"));
        }
    }
    request.send().await.expect("upload request")
}

fn upload_id(upload: &Value) -> String {
    upload["upload"].as_str().expect("upload id").to_string()
}

fn object_key(upload: &str) -> String {
    format!("att/{SENDER}/{upload}")
}

#[tokio::test]
async fn a_20_mib_upload_is_attached_once_with_its_size_and_sha256() {
    let site = MailSite::start().await;
    change_profile(&site, json!({"maxAttachmentBytes": 26_214_400})).await;
    let bytes = pattern(20 * MIB);
    let upload = create_upload(&site, bytes.len() as u64).await;
    assert_eq!(upload["maxBytes"], json!(20 * MIB));
    let id = upload_id(&upload);
    let url = upload["url"].as_str().expect("url");
    assert!(url.starts_with("http"), "a presigned S3 URL: {url}");
    assert_eq!(upload["headers"]["content-length"], json!("20971520"));
    // Reserved against the installation's total before a byte is stored.
    assert_eq!(
        accounting(&site).await,
        vec![(object_key(&id), 20_971_520, true)]
    );

    let response = put_upload(&site.client, url, &upload, bytes.clone(), &[]).await;
    assert!(response.status().is_success(), "{}", response.status());

    let mail = with_attachments(
        message("ann@example.org", "Big report"),
        vec![uploaded("report.pdf", &id)],
    );
    let (status, record) = site.send(SENDER, mail).await;
    assert_eq!(status, StatusCode::OK, "{record}");
    assert_eq!(
        record["attachments"],
        json!([{
            "filename": "report.pdf",
            "contentType": "application/pdf",
            "size": 20_971_520,
            "sha256": sha256_hex(&bytes),
        }])
    );
    assert_eq!(site.objects().await, vec![object_key(&id)]);
    // The message took the upload: no longer an upload another message may name.
    assert_eq!(
        accounting(&site).await,
        vec![(object_key(&id), 20_971_520, false)]
    );
    let message_id = record["id"].as_str().expect("id");
    assert_eq!(
        refs(&site, message_id).await,
        Some(json!([object_key(&id)]))
    );

    // An upload serves one message.
    let again = with_attachments(
        message("bob@example.org", "Same report"),
        vec![uploaded("report.pdf", &id)],
    );
    let refused = site.send(SENDER, again).await;
    assert_eq!(refused.0, StatusCode::BAD_REQUEST, "{}", refused.1);
    assert_eq!(code(&refused), "bad_input");
    assert_eq!(site.message_count().await, 1);
    // The refusal took nothing from the first message.
    assert_eq!(site.objects().await, vec![object_key(&id)]);
    assert_eq!(
        accounting(&site).await,
        vec![(object_key(&id), 20_971_520, false)]
    );
    assert_eq!(
        refs(&site, message_id).await,
        Some(json!([object_key(&id)]))
    );
}

#[tokio::test]
async fn an_upload_over_25_mib_is_refused_at_creation_and_reserves_nothing() {
    let site = MailSite::start().await;
    change_profile(&site, json!({"maxAttachmentBytes": 26_214_400})).await;
    let refused = site
        .app(
            SENDER,
            Method::POST,
            "/uploads",
            Some(json!({"size": 26 * MIB, "contentType": "application/pdf"})),
        )
        .await;
    assert_eq!(refused.0, StatusCode::BAD_REQUEST, "{}", refused.1);
    assert_eq!(code(&refused), "attachments_too_large");
    assert!(site.objects().await.is_empty());
    assert!(accounting(&site).await.is_empty());
    // The largest object still fits.
    let upload = create_upload(&site, MAX_OBJECT_BYTES).await;
    assert_eq!(upload["maxBytes"], json!(MAX_OBJECT_BYTES));
}

#[tokio::test]
async fn an_inline_attachment_is_stored_with_its_size_and_sha256() {
    let site = MailSite::start().await;
    let bytes = pattern(3000);
    let mail = with_attachments(
        message("ann@example.org", "Invoice"),
        vec![inline("invoice.bin", &bytes)],
    );
    let (status, record) = site.send(SENDER, mail).await;
    assert_eq!(status, StatusCode::OK, "{record}");
    assert_eq!(
        record["attachments"],
        json!([{
            "filename": "invoice.bin",
            "contentType": "application/octet-stream",
            "size": 3000,
            "sha256": sha256_hex(&bytes),
        }])
    );
    let objects = site.objects().await;
    assert_eq!(objects.len(), 1);
    assert!(
        objects[0].starts_with(&format!("att/{SENDER}/")),
        "{objects:?}"
    );
    assert_eq!(
        accounting(&site).await,
        vec![(objects[0].clone(), 3000, false)]
    );
    let id = record["id"].as_str().expect("id");
    assert_eq!(refs(&site, id).await, Some(json!(objects)));
}

#[tokio::test]
async fn attachments_over_the_profile_limit_are_refused_and_leave_nothing() {
    let site = MailSite::start().await;
    change_profile(&site, json!({"maxAttachmentBytes": 1000})).await;
    let mail = with_attachments(
        message("ann@example.org", "Two parts"),
        vec![
            inline("a.bin", &pattern(600)),
            inline("b.bin", &pattern(600)),
        ],
    );
    let refused = site.send(SENDER, mail.clone()).await;
    assert_eq!(refused.0, StatusCode::BAD_REQUEST, "{}", refused.1);
    assert_eq!(code(&refused), "attachments_too_large");
    let refused = site.enqueue(SENDER, json!([mail])).await;
    assert_eq!(refused.0, StatusCode::BAD_REQUEST, "{}", refused.1);
    assert_eq!(code(&refused), "attachments_too_large");
    assert_eq!(site.message_count().await, 0);
    assert!(accounting(&site).await.is_empty());
    assert!(site.objects().await.is_empty());

    // Up to the limit is fine.
    let fits = with_attachments(
        message("ann@example.org", "Two parts"),
        vec![
            inline("a.bin", &pattern(600)),
            inline("b.bin", &pattern(400)),
        ],
    );
    let (status, record) = site.send(SENDER, fits).await;
    assert_eq!(status, StatusCode::OK, "{record}");
    assert_eq!(site.objects().await.len(), 2);
}

#[tokio::test]
async fn a_reserved_header_is_refused_before_any_attachment_is_stored() {
    let site = MailSite::start().await;
    let mut mail = with_attachments(
        message("ann@example.org", "Traced"),
        vec![inline("a.bin", &pattern(100))],
    );
    mail["headers"] = json!({"X-Cloud-Trace": "abc"});
    let refused = site.send(SENDER, mail).await;
    assert_eq!(refused.0, StatusCode::BAD_REQUEST, "{}", refused.1);
    assert_eq!(code(&refused), "bad_input");
    assert_eq!(site.message_count().await, 0);
    assert!(accounting(&site).await.is_empty());
    assert!(site.objects().await.is_empty());
}

#[tokio::test]
async fn an_uploaded_object_larger_than_its_reservation_is_never_attached() {
    let site = MailSite::start().await;
    let upload = create_upload(&site, 1000).await;
    let id = upload_id(&upload);
    let url = upload["url"].as_str().expect("url");
    let signed = reqwest::Url::parse(url)
        .expect("url")
        .query_pairs()
        .find(|(name, _)| name == "X-Amz-SignedHeaders")
        .map(|(_, value)| value.into_owned())
        .expect("signed headers");
    assert!(signed.split(';').any(|h| h == "content-length"), "{signed}");

    // A body of another size, with the length it really has: S3 refuses it, as the signature
    // covers the reserved length. A store that does not check signatures may keep it.
    let longer = pattern(2000);
    let response = put_upload(&site.client, url, &upload, longer, &["content-length"]).await;
    let stored = response.status().is_success();
    assert_eq!(site.objects().await.len(), usize::from(stored));

    // Either way, no message carries more than was reserved.
    let mail = with_attachments(
        message("ann@example.org", "Oversized upload"),
        vec![uploaded("report.pdf", &id)],
    );
    let refused = site.send(SENDER, mail).await;
    assert_eq!(refused.0, StatusCode::BAD_REQUEST, "{}", refused.1);
    let expected = if stored {
        "attachments_too_large"
    } else {
        "bad_input"
    };
    assert_eq!(code(&refused), expected, "{}", refused.1);
    assert_eq!(site.message_count().await, 0);
    assert!(site.objects().await.is_empty());
    if stored {
        // The failed call owned the upload: its reservation went with the object.
        assert!(accounting(&site).await.is_empty());
    }
}

#[tokio::test]
async fn a_full_attachment_storage_refuses_new_objects() {
    let site = MailSite::start().await;
    let filled = MAX_TOTAL_BYTES - 10;
    let object = MAX_OBJECT_BYTES as i64;
    sqlx::query(
        "INSERT INTO outgoing_mail.attachment_objects (object_key, app_id, bytes, expires_at)
         SELECT 'att/other/fill-' || n, 'other',
                CASE WHEN n < $1 / $2 THEN $2 ELSE $1 % $2 END, now() + interval '1 day'
         FROM generate_series(0, $1 / $2) AS n",
    )
    .bind(filled)
    .bind(object)
    .execute(&site.core.pool)
    .await
    .expect("fill the storage");
    let used: i64 =
        sqlx::query_scalar("SELECT sum(bytes)::bigint FROM outgoing_mail.attachment_objects")
            .fetch_one(&site.core.pool)
            .await
            .expect("used");
    assert_eq!(used, filled);
    let rows_before = accounting(&site).await.len();

    let mail = with_attachments(
        message("ann@example.org", "No room"),
        vec![inline("a.bin", &pattern(100))],
    );
    let refused = site.send(SENDER, mail).await;
    assert_eq!(refused.0, StatusCode::BAD_REQUEST, "{}", refused.1);
    assert_eq!(code(&refused), "attachment_storage_full");
    let refused = site
        .app(
            SENDER,
            Method::POST,
            "/uploads",
            Some(json!({"size": 100, "contentType": "application/pdf"})),
        )
        .await;
    assert_eq!(code(&refused), "attachment_storage_full", "{}", refused.1);
    assert_eq!(site.message_count().await, 0);
    assert!(site.objects().await.is_empty());
    assert_eq!(accounting(&site).await.len(), rows_before);

    // The last 10 bytes are still there to take.
    let fits = with_attachments(
        message("ann@example.org", "Just fits"),
        vec![inline("a.bin", &pattern(10))],
    );
    let (status, record) = site.send(SENDER, fits).await;
    assert_eq!(status, StatusCode::OK, "{record}");
    assert_eq!(site.objects().await.len(), 1);
}

#[tokio::test]
async fn quota_is_checked_before_any_attachment_is_stored() {
    let site = MailSite::start().await;
    change_profile(&site, json!({"dailyRecipientLimit": 1})).await;
    let (status, record) = site.send(SENDER, message("ann@example.org", "First")).await;
    assert_eq!(status, StatusCode::OK, "{record}");
    let mail = with_attachments(
        message("bob@example.org", "Second"),
        vec![inline("a.bin", &pattern(500))],
    );
    let refused = site.send(SENDER, mail).await;
    assert_eq!(refused.0, StatusCode::BAD_REQUEST, "{}", refused.1);
    assert_eq!(code(&refused), "quota_exceeded");
    assert_eq!(
        (
            &refused.1["limit"],
            &refused.1["used"],
            &refused.1["requested"]
        ),
        (&json!(1), &json!(1), &json!(1))
    );
    assert!(site.objects().await.is_empty());
    assert!(accounting(&site).await.is_empty());
    assert_eq!(site.message_count().await, 1);
}

#[tokio::test]
async fn cancelling_a_queued_message_deletes_its_attachments() {
    let site = MailSite::start().await;
    let mail = with_attachments(
        message("ann@example.org", "To cancel"),
        vec![
            inline("a.bin", &pattern(100)),
            inline("b.bin", &pattern(200)),
        ],
    );
    let (status, record) = site.send(SENDER, mail).await;
    assert_eq!(status, StatusCode::OK, "{record}");
    assert_eq!(record["status"], "queued");
    let id = record["id"].as_str().expect("id");
    assert_eq!(site.objects().await.len(), 2);
    assert_eq!(
        refs(&site, id)
            .await
            .expect("refs")
            .as_array()
            .map(Vec::len),
        Some(2)
    );

    let (status, body) = site
        .admin(Method::POST, &format!("/messages/{id}/cancel"), None)
        .await;
    assert!(status.is_success(), "{status} {body}");
    assert!(site.objects().await.is_empty());
    assert!(accounting(&site).await.is_empty());
    assert_eq!(refs(&site, id).await, None);
    let (status, cancelled) = site
        .admin(Method::GET, &format!("/messages/{id}"), None)
        .await;
    assert_eq!(status, StatusCode::OK, "{cancelled}");
    assert_eq!(cancelled["status"], "cancelled");
    assert_eq!(cancelled["errorCode"], "cancelled_by_admin");
    // What the message had attached is still on the record.
    assert_eq!(cancelled["attachments"], record["attachments"]);
}

#[tokio::test]
async fn cancelling_a_batch_deletes_the_attachments_of_its_messages() {
    let site = MailSite::start().await;
    let batch = json!([
        with_attachments(
            message("ann@example.org", "One"),
            vec![inline("a.bin", &pattern(10))]
        ),
        with_attachments(
            message("bob@example.org", "Two"),
            vec![inline("b.bin", &pattern(20))]
        ),
    ]);
    let (status, enqueued) = site.enqueue(SENDER, batch).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{enqueued}");
    assert_eq!(site.objects().await.len(), 2);
    let batch_id = enqueued["batchId"].as_str().expect("batch id");
    let (status, body) = site
        .admin(Method::POST, &format!("/batches/{batch_id}/cancel"), None)
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["cancelled"], 2);
    assert!(site.objects().await.is_empty());
    assert!(accounting(&site).await.is_empty());
    for id in enqueued["ids"].as_array().expect("ids") {
        assert_eq!(refs(&site, id.as_str().expect("id")).await, None);
    }
}

/// Recipient, subject and body of the privacy scan: distinctive enough that any appearance in
/// an audit row or a log line is theirs.
const PRIVATE_ADDRESS: &str = "zephyrine.quist@privacy-probe.example";
const PRIVATE_SUBJECT: &str = "Quarterly Marmalade Ledger";
const PRIVATE_BODY: &str = "Blueberry canticle of the night shift";

#[tokio::test]
async fn no_address_subject_or_body_reaches_an_audit_row_or_a_log() {
    let capture = LogCapture::start();
    let site = MailSite::start().await;
    change_profile(&site, json!({"maxAttachmentBytes": 1000})).await;
    let private = |key: &str, attachment: &[u8]| {
        json!({
            "to": [PRIVATE_ADDRESS],
            "subject": PRIVATE_SUBJECT,
            "text": PRIVATE_BODY,
            "html": format!("<p>{PRIVATE_BODY}</p>"),
            "key": key,
            "attachments": [inline("ledger.bin", attachment)],
        })
    };
    let (status, record) = site.send(SENDER, private("one", &pattern(500))).await;
    assert_eq!(status, StatusCode::OK, "{record}");
    let id = record["id"].as_str().expect("id").to_string();
    let (status, enqueued) = site
        .enqueue(SENDER, json!([private("two", &pattern(300))]))
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{enqueued}");
    let (status, page) = site.list(SENDER, "q=Marmalade").await;
    assert_eq!(status, StatusCode::OK, "{page}");
    assert_eq!(page["total"], 2);
    let (status, page) = site
        .list(SENDER, &format!("recipient={PRIVATE_ADDRESS}"))
        .await;
    assert_eq!(status, StatusCode::OK, "{page}");
    assert_eq!(page["total"], 2);
    let (status, page) = site
        .admin(Method::GET, "/messages?recipient=zephyrine", None)
        .await;
    assert_eq!(status, StatusCode::OK, "{page}");
    let (status, content) = site
        .admin(Method::GET, &format!("/messages/{id}/content"), None)
        .await;
    assert_eq!(status, StatusCode::OK, "{content}");
    assert_eq!(content["text"], PRIVATE_BODY);
    // Refused: attachments over the limit (a denied audit row).
    let refused = site.send(SENDER, private("three", &pattern(1001))).await;
    assert_eq!(code(&refused), "attachments_too_large", "{}", refused.1);
    // Refused with a failing audit store: the failure is logged.
    site.break_audit("outgoing_mail.send").await;
    let failed = site.send(SENDER, private("four", &pattern(10))).await;
    site.repair_audit().await;
    assert_eq!(failed.0, StatusCode::INTERNAL_SERVER_ERROR, "{}", failed.1);
    assert_eq!(code(&failed), "mail_unavailable");
    assert_eq!(
        site.objects().await.len(),
        2,
        "the failed call removed its upload"
    );

    let audit = site.all_audit_text().await.to_lowercase();
    assert!(audit.contains("outgoing_mail.send"), "{audit}");
    assert!(audit.contains("outgoing_mail.message.read"), "{audit}");
    assert!(audit.contains("attachments_too_large"), "{audit}");
    let own = capture.own_text().to_lowercase();
    assert!(own.contains("outgoing mail unavailable"), "{own}");
    let logs = capture.text().to_lowercase();
    for secret in [
        PRIVATE_ADDRESS,
        PRIVATE_SUBJECT,
        PRIVATE_BODY,
        "zephyrine",
        "marmalade",
    ] {
        let secret = secret.to_lowercase();
        assert!(!audit.contains(&secret), "audit holds {secret:?}: {audit}");
        assert!(!logs.contains(&secret), "logs hold {secret:?}");
    }
}

/// A request of `app` to a mail router at `base`.
async fn local_request(
    site: &MailSite,
    base: &str,
    method: Method,
    path: &str,
    body: Option<Value>,
) -> Answer {
    let mut request = site
        .client
        .request(method, format!("{base}{path}"))
        .bearer_auth(&site.tokens[SENDER])
        .header("prefer", "wait=0");
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await.expect("request");
    let status = response.status();
    let body = response.json().await.unwrap_or(Value::Null);
    (status, body)
}

/// Files under `dir`, as paths relative to it.
fn files_under(dir: &std::path::Path) -> Vec<String> {
    let mut found = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(next) = pending.pop() {
        for entry in std::fs::read_dir(&next).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                pending.push(path);
            } else if let Ok(relative) = path.strip_prefix(dir) {
                found.push(relative.to_string_lossy().into_owned());
            }
        }
    }
    found.sort();
    found
}

#[tokio::test]
async fn the_local_folder_store_takes_uploads_through_the_function() {
    let site = MailSite::start().await;
    let folder = tempfile::tempdir().expect("folder");
    let core = core_for(&site.db);
    assert!(core.mail_objects.install(ObjectStore::local(folder.path())));
    let base = serve(mail::router(core)).await;

    let bytes = pattern(300_000);
    let create = json!({"size": bytes.len(), "contentType": "application/pdf"});
    let (status, upload) = local_request(
        &site,
        &base,
        Method::POST,
        "/api/mail/v1/uploads",
        Some(create),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{upload}");
    let id = upload_id(&upload);
    let url = upload["url"].as_str().expect("url");
    assert_eq!(url, format!("/api/mail/v1/uploads/{id}"));
    let put = site
        .client
        .put(format!("{base}{url}"))
        .bearer_auth(&site.tokens[SENDER]);
    let mut put = put.body(bytes.clone());
    for (name, value) in upload["headers"].as_object().expect("headers") {
        put = put.header(name, value.as_str().expect("value"));
    }
    let response = put.send().await.expect("upload");
    assert_eq!(response.status(), StatusCode::OK);
    let stored: Value = response.json().await.expect("json");
    assert_eq!(
        stored,
        json!({"size": 300_000, "sha256": sha256_hex(&bytes)})
    );

    let mail = with_attachments(
        message("ann@example.org", "Local report"),
        vec![uploaded("report.pdf", &id)],
    );
    let (status, record) =
        local_request(&site, &base, Method::POST, "/api/mail/v1/send", Some(mail)).await;
    assert_eq!(status, StatusCode::OK, "{record}");
    assert_eq!(record["attachments"][0]["size"], 300_000);
    assert_eq!(record["attachments"][0]["sha256"], sha256_hex(&bytes));
    assert_eq!(files_under(folder.path()), vec![object_key(&id)]);
    assert_eq!(
        accounting(&site).await,
        vec![(object_key(&id), 300_000, false)]
    );
    assert!(site.objects().await.is_empty(), "nothing went to S3");

    // A claimed upload takes no new body.
    let overwrite = site
        .client
        .put(format!("{base}{url}"))
        .bearer_auth(&site.tokens[SENDER])
        .body(pattern(10))
        .send()
        .await
        .expect("overwrite");
    assert_eq!(overwrite.status(), StatusCode::BAD_REQUEST);

    // A body longer than the reservation is refused and leaves no file.
    let create = json!({"size": 1000, "contentType": "application/pdf"});
    let (status, small) = local_request(
        &site,
        &base,
        Method::POST,
        "/api/mail/v1/uploads",
        Some(create),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{small}");
    let small_id = upload_id(&small);
    let response = site
        .client
        .put(format!("{base}/api/mail/v1/uploads/{small_id}"))
        .bearer_auth(&site.tokens[SENDER])
        .body(pattern(1001))
        .send()
        .await
        .expect("upload");
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    let body: Value = response.json().await.expect("json");
    assert_eq!(body["code"], "attachments_too_large");
    assert_eq!(files_under(folder.path()), vec![object_key(&id)]);
    // Nothing was stored, so no message may name it.
    let mail = with_attachments(
        message("ann@example.org", "Never stored"),
        vec![uploaded("small.pdf", &small_id)],
    );
    let refused = local_request(&site, &base, Method::POST, "/api/mail/v1/send", Some(mail)).await;
    assert_eq!(refused.0, StatusCode::BAD_REQUEST, "{}", refused.1);
    assert_eq!(code(&refused), "bad_input");
    assert_eq!(site.message_count().await, 1);
}

/// An upload of `bytes`, made as the app would: reserved, then PUT to its presigned URL.
async fn uploaded_object(site: &MailSite, bytes: &[u8]) -> String {
    let upload = create_upload(site, bytes.len() as u64).await;
    let url = upload["url"].as_str().expect("url").to_string();
    let response = put_upload(&site.client, &url, &upload, bytes.to_vec(), &[]).await;
    assert!(response.status().is_success(), "{}", response.status());
    upload_id(&upload)
}

#[tokio::test]
async fn every_refused_call_deletes_the_uploads_it_named() {
    let site = MailSite::start().await;
    // Refused by validation: the body never became a message.
    let first = uploaded_object(&site, &pattern(300)).await;
    let mut invalid = with_attachments(
        message("ann@example.org", "Invalid"),
        vec![uploaded("a.pdf", &first)],
    );
    invalid["headers"] = json!({"Bcc": "someone@example.org"});
    let refused = site.send(SENDER, invalid).await;
    assert_eq!(code(&refused), "bad_input", "{}", refused.1);
    // Refused by the quota, before anything was read back.
    change_profile(&site, json!({"dailyRecipientLimit": 1})).await;
    let (status, record) = site.send(SENDER, message("ann@example.org", "Quota")).await;
    assert_eq!(status, StatusCode::OK, "{record}");
    let second = uploaded_object(&site, &pattern(400)).await;
    let over = with_attachments(
        message("bob@example.org", "Over"),
        vec![uploaded("b.pdf", &second)],
    );
    let refused = site.enqueue(SENDER, json!([over])).await;
    assert_eq!(code(&refused), "quota_exceeded", "{}", refused.1);
    assert!(
        site.objects().await.is_empty(),
        "{:?}",
        site.objects().await
    );
    assert!(
        accounting(&site).await.is_empty(),
        "{:?}",
        accounting(&site).await
    );
}

#[tokio::test]
async fn a_known_key_keeps_its_own_attachment_and_deletes_the_new_upload() {
    let site = MailSite::start().await;
    let mut first = with_attachments(
        message("ann@example.org", "Once"),
        vec![inline("a.bin", &pattern(100))],
    );
    first["key"] = json!("once");
    let (status, record) = site.send(SENDER, first).await;
    assert_eq!(status, StatusCode::OK, "{record}");
    let kept = site.objects().await;
    assert_eq!(kept.len(), 1);
    let upload = uploaded_object(&site, &pattern(200)).await;
    let mut again = with_attachments(
        message("ann@example.org", "Once"),
        vec![uploaded("b.pdf", &upload)],
    );
    again["key"] = json!("once");
    let (status, repeated) = site.send(SENDER, again).await;
    assert_eq!(status, StatusCode::OK, "{repeated}");
    assert_eq!(repeated["id"], record["id"]);
    assert_eq!(repeated["attachments"], record["attachments"]);
    assert_eq!(site.objects().await, kept);
    assert_eq!(accounting(&site).await.len(), 1);
}

#[tokio::test]
async fn an_upload_not_named_within_an_hour_cannot_be_attached() {
    let site = MailSite::start().await;
    let upload = uploaded_object(&site, &pattern(500)).await;
    sqlx::query(
        "UPDATE outgoing_mail.attachment_objects SET created_at = created_at - interval '61 minutes'",
    )
    .execute(&site.core.pool)
    .await
    .expect("age the upload");
    let late = with_attachments(
        message("ann@example.org", "Late"),
        vec![uploaded("late.pdf", &upload)],
    );
    let refused = site.send(SENDER, late).await;
    assert_eq!(refused.0, StatusCode::BAD_REQUEST, "{}", refused.1);
    assert_eq!(code(&refused), "bad_input");
    assert_eq!(site.message_count().await, 0);
    // It belongs to nobody now, so it goes.
    assert!(
        site.objects().await.is_empty(),
        "{:?}",
        site.objects().await
    );
}
