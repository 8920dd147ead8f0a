//! The `mail` function over real HTTP, against a real Postgres and moto's S3 API: apps with
//! their own credentials and declared permissions, and administrators with web sessions.

mod accept;
mod admin;
mod aiosmtpd;
mod attachments;
mod commit;
mod delivery;
mod log;
mod retention;

use std::collections::HashMap;
use std::time::Duration;

use k2b_core::Core;
use k2b_core::identity::workload;
use k2b_core::mail::objects::ObjectStore;
use k2b_core::outbox::WakeRequest;
use k2b_tests::pgfault::PgFaultProxy;
use k2b_tests::{Moto, TestDb, core_for, create_user, serve, session_cookie};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use tokio::sync::mpsc::UnboundedReceiver;

/// The app that sends (`mail:send`).
pub const SENDER: &str = "inventory";
/// The app that reads other apps' logs (`mail:read` and `mail:send`).
pub const READER: &str = "reader";
/// An app that declares nothing.
pub const SILENT: &str = "silent";
/// A registered app that sends too (a grant's source).
pub const SOURCE: &str = "source";
/// A third sender nobody granted.
pub const OTHER: &str = "other";

/// An answer: status and JSON body (`Null` when there is none).
pub type Answer = (StatusCode, Value);

/// The mail function on loopback with two or more registered apps, a default profile, an
/// administrator, and moto's S3 as the attachment store.
pub struct MailSite {
    pub db: TestDb,
    pub core: Core,
    pub base: String,
    pub client: reqwest::Client,
    pub admin_cookie: String,
    pub user_cookie: String,
    pub origin: String,
    pub tokens: HashMap<String, String>,
    pub bucket: String,
    pub s3: aws_sdk_s3::Client,
    pub wakeups: UnboundedReceiver<WakeRequest>,
    _moto: Moto,
}

/// A registry entry declaring `permissions`.
pub fn entry(app: &str, permissions: &[&str]) -> Value {
    json!({
        "id": app,
        "name": format!("{}{}", app[..1].to_uppercase(), &app[1..]),
        "icon": "ti ti-box",
        "description": "test app",
        "baseUrl": format!("https://{app}.internal"),
        "routes": [format!("/app/{app}")],
        "platformPermissions": permissions,
    })
}

/// A profile body for the admin API.
pub fn profile_body(from: &str) -> Value {
    json!({
        "name": "Alerts",
        "fromAddress": from,
        "smtpHost": "smtp.example.org",
        "smtpPort": 587,
        "smtpSecure": false,
        "smtpUser": "mailer",
        "smtpPassword": "s3cret-pass",
    })
}

/// A valid message to `to`.
pub fn message(to: &str, subject: &str) -> Value {
    json!({"to": [to], "subject": subject, "text": format!("Body of {subject}")})
}

impl MailSite {
    /// Apps: `inventory` (send), `reader` (send + read), `source` and `other` (send),
    /// `silent` (nothing); profile `alerts` (default, `alerts@example.org`).
    pub async fn start() -> MailSite {
        let db = TestDb::new().await;
        let core = core_for(&db);
        let moto = Moto::start();
        let s3 = moto.s3();
        let bucket = format!("mail-{}", uuid::Uuid::new_v4().simple());
        s3.create_bucket()
            .bucket(&bucket)
            .send()
            .await
            .unwrap_or_else(|e| panic!("bucket: {e:?}"));
        assert!(
            core.mail_objects
                .install(ObjectStore::s3(s3.clone(), bucket.clone()))
        );
        let wakeups = core
            .local_wakeups
            .as_ref()
            .expect("local wake-ups in tests")
            .subscribe();
        let apps: [(&str, &[&str]); 5] = [
            (SENDER, &["mail:send"]),
            (READER, &["mail:send", "mail:read"]),
            (SOURCE, &["mail:send"]),
            (OTHER, &["mail:send"]),
            (SILENT, &[]),
        ];
        let mut tokens = HashMap::new();
        {
            let mut conn = core.pool.acquire().await.expect("connection");
            for (app, permissions) in apps {
                k2b_core::registry::store::upsert(
                    &mut conn,
                    &entry(app, permissions),
                    Duration::from_secs(3600),
                )
                .await
                .unwrap_or_else(|e| panic!("register {app}: {e}"));
                let (token, _) = workload::issue_app_credential(&mut conn, app, &["mail"])
                    .await
                    .expect("credential");
                tokens.insert(app.to_string(), token);
            }
        }
        let admin = create_user(&core, "root", true).await;
        let user = create_user(&core, "plain", false).await;
        let admin_cookie = session_cookie(&core, &admin).await;
        let user_cookie = session_cookie(&core, &user).await;
        let origin = core.settings.public_origin().await.expect("origin");
        let base = serve(mail::router(core.clone())).await;
        let site = MailSite {
            db,
            core,
            base,
            client: reqwest::Client::new(),
            admin_cookie,
            user_cookie,
            origin,
            tokens,
            bucket,
            s3,
            wakeups,
            _moto: moto,
        };
        let (status, body) = site
            .admin(
                Method::PUT,
                "/profiles/alerts",
                Some(profile_body("alerts@example.org")),
            )
            .await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        site
    }

    async fn answer(request: reqwest::RequestBuilder) -> Answer {
        let response = request.send().await.expect("request");
        let status = response.status();
        let text = response.text().await.expect("body");
        let body = if text.is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&text).unwrap_or(Value::String(text))
        };
        (status, body)
    }

    /// A request of `app` with its credential.
    pub async fn app(&self, app: &str, method: Method, path: &str, body: Option<Value>) -> Answer {
        self.app_at(&self.base, app, method, path, body).await
    }

    /// A request of `app` to the mail function at `base` (see [`MailSite::behind_faults`]).
    pub async fn app_at(
        &self,
        base: &str,
        app: &str,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> Answer {
        let token = self.tokens.get(app).expect("a known app");
        let mut request = self
            .client
            .request(method, format!("{base}/api/mail/v1{path}"))
            .bearer_auth(token)
            .header("prefer", "wait=0");
        if let Some(body) = body {
            request = request.json(&body);
        }
        Self::answer(request).await
    }

    /// The mail function once more, on the same database and attachment store, whose database
    /// connections pass a [`PgFaultProxy`]: returns the proxy and the function's base URL.
    pub async fn behind_faults(&self) -> (PgFaultProxy, String) {
        let proxy = PgFaultProxy::start(&self.db.url()).await;
        let pool = sqlx::postgres::PgPoolOptions::new()
            .max_connections(4)
            .acquire_timeout(Duration::from_secs(10))
            .connect(&proxy.url)
            .await
            .unwrap_or_else(|e| panic!("pool through the proxy: {e}"));
        let core = Core::with_pool(self.db.config(), pool);
        assert!(
            core.mail_objects
                .install(ObjectStore::s3(self.s3.clone(), self.bucket.clone()))
        );
        let base = serve(mail::router(core)).await;
        (proxy, base)
    }

    /// `send` of one message as `app`.
    pub async fn send(&self, app: &str, message: Value) -> Answer {
        self.app(app, Method::POST, "/send", Some(message)).await
    }

    /// `enqueue` of a batch as `app`.
    pub async fn enqueue(&self, app: &str, messages: Value) -> Answer {
        self.app(app, Method::POST, "/enqueue", Some(messages))
            .await
    }

    /// `GET /messages?query` as `app`.
    pub async fn list(&self, app: &str, query: &str) -> Answer {
        self.app(app, Method::GET, &format!("/messages?{query}"), None)
            .await
    }

    /// An administrator's request under `/api/admin/core/outgoing-mail`.
    pub async fn admin(&self, method: Method, path: &str, body: Option<Value>) -> Answer {
        self.as_cookie(&self.admin_cookie.clone(), method, path, body)
            .await
    }

    /// A request under the admin API with any cookie (or none: empty).
    pub async fn as_cookie(
        &self,
        cookie: &str,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> Answer {
        let mut request = self
            .client
            .request(
                method,
                format!("{}/api/admin/core/outgoing-mail{path}", self.base),
            )
            .header("origin", &self.origin);
        if !cookie.is_empty() {
            request = request.header("cookie", cookie);
        }
        if let Some(body) = body {
            request = request.json(&body);
        }
        Self::answer(request).await
    }

    /// Sets `reader`'s log grants through the admin API.
    pub async fn grant(&self, reader: &str, apps: &[&str]) {
        let (status, body) = self
            .admin(
                Method::PUT,
                &format!("/apps/{reader}/log-access"),
                Some(json!({ "apps": apps })),
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{body}");
    }

    /// Audit rows of `action`, as JSON text (for scans of what they hold).
    pub async fn audit_rows(&self, action: &str) -> Vec<Value> {
        sqlx::query_scalar(
            "SELECT to_jsonb(e) FROM audit.events e WHERE action = $1 ORDER BY created_at",
        )
        .bind(action)
        .fetch_all(&self.core.pool)
        .await
        .expect("audit rows")
    }

    /// Every audit row written so far, as one text.
    pub async fn all_audit_text(&self) -> String {
        let rows: Vec<Value> = sqlx::query_scalar("SELECT to_jsonb(e) FROM audit.events e")
            .fetch_all(&self.core.pool)
            .await
            .expect("audit rows");
        serde_json::to_string(&rows).expect("text")
    }

    /// Message rows in the table.
    pub async fn message_count(&self) -> i64 {
        sqlx::query_scalar("SELECT count(*) FROM outgoing_mail.messages")
            .fetch_one(&self.core.pool)
            .await
            .expect("count")
    }

    /// Keys of every object in the bucket.
    pub async fn objects(&self) -> Vec<String> {
        let listed = self
            .s3
            .list_objects_v2()
            .bucket(&self.bucket)
            .send()
            .await
            .expect("list objects");
        listed
            .contents()
            .iter()
            .filter_map(|o| o.key().map(str::to_string))
            .collect()
    }

    /// Makes every message look `hours` older.
    pub async fn age_messages(&self, hours: i64) {
        sqlx::query(
            "UPDATE outgoing_mail.messages SET created_at = created_at - make_interval(hours => $1)",
        )
        .bind(hours as i32)
        .execute(&self.core.pool)
        .await
        .expect("age");
    }

    /// Makes the next audit write of `action` fail (a trigger), as a broken audit store would.
    pub async fn break_audit(&self, action: &str) {
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
            "CREATE FUNCTION audit.refuse() RETURNS trigger LANGUAGE plpgsql AS $$
             BEGIN IF NEW.action = '{action}' THEN RAISE EXCEPTION 'audit store down'; END IF;
             RETURN NEW; END $$;
             CREATE TRIGGER refuse BEFORE INSERT ON audit.events
             FOR EACH ROW EXECUTE FUNCTION audit.refuse();"
        )))
        .execute(&self.core.pool)
        .await
        .expect("break audit");
    }

    pub async fn repair_audit(&self) {
        sqlx::raw_sql("DROP TRIGGER refuse ON audit.events; DROP FUNCTION audit.refuse();")
            .execute(&self.core.pool)
            .await
            .expect("repair audit");
    }

    /// Replaces profile `key` through the admin API at its current revision: its current
    /// settings with `changes` laid over them (the password is kept). Returns the new profile.
    pub async fn update_profile(&self, key: &str, changes: Value) -> Value {
        let path = format!("/profiles/{key}");
        let (status, current) = self.admin(Method::GET, &path, None).await;
        assert_eq!(status, StatusCode::OK, "{current}");
        let mut body = json!({});
        for field in [
            "name",
            "fromAddress",
            "fromName",
            "smtpHost",
            "smtpPort",
            "smtpSecure",
            "smtpUser",
            "pacePerMinute",
            "dailyRecipientLimit",
            "maxAttachmentBytes",
            "revision",
        ] {
            body[field] = current[field].clone();
        }
        for (field, value) in changes.as_object().expect("an object of changes") {
            body[field.as_str()] = value.clone();
        }
        let (status, updated) = self.admin(Method::PUT, &path, Some(body)).await;
        assert_eq!(status, StatusCode::OK, "{updated}");
        updated
    }

    /// The id of profile `key`.
    pub async fn profile_id(&self, key: &str) -> uuid::Uuid {
        sqlx::query_scalar("SELECT id FROM outgoing_mail.profiles WHERE key = $1")
            .bind(key)
            .fetch_one(&self.core.pool)
            .await
            .expect("profile id")
    }

    /// Inserts `count` queued bulk messages of `app` on profile `key` straight into the table:
    /// a full backlog in one statement instead of thousands of calls.
    pub async fn queue_bulk_rows(&self, app: &str, key: &str, count: i32) {
        sqlx::query(
            "INSERT INTO outgoing_mail.messages (id, app_id, profile_id, profile_key, lane,
                 to_addresses, recipient_count, subject, text_body, message_id_header, status,
                 deadline_at)
             SELECT gen_random_uuid(), $1, p.id, p.key, 'bulk', ARRAY['queued@example.org'], 1,
                 'Queued', 'Queued', '<' || gen_random_uuid() || '@example.org>', 'queued',
                 now() + interval '24 hours'
             FROM outgoing_mail.profiles p, generate_series(1, $3) WHERE p.key = $2",
        )
        .bind(app)
        .bind(key)
        .bind(count)
        .execute(&self.core.pool)
        .await
        .expect("queued bulk rows");
    }
}
