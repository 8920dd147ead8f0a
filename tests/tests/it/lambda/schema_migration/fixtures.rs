//! What the schema migration tests stand on: the S3 side of CloudFormation's pre-signed response
//! URL, and a database with nothing in it.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use k2b_core::db;
use k2b_tests::TestDb;
use serde_json::Value;
use sqlx::Connection;

/// One request the response URL received.
#[derive(Debug, Clone)]
pub struct Put {
    pub method: Method,
    pub uri: Uri,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Put {
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("response document: {e}: {:?}", self.body))
    }
}

/// The S3 side of a pre-signed response URL: answers with the scripted statuses first, then 200,
/// and keeps every request.
pub struct ResponseBucket {
    base: String,
    received: Arc<Mutex<Vec<Put>>>,
}

impl ResponseBucket {
    pub async fn start(script: &[u16]) -> ResponseBucket {
        let received = Arc::new(Mutex::new(Vec::new()));
        let script = Arc::new(Mutex::new(
            script.iter().copied().collect::<VecDeque<u16>>(),
        ));
        let kept = received.clone();
        let router = axum::Router::new().fallback(
            move |method: Method, uri: Uri, headers: HeaderMap, body: Bytes| {
                let kept = kept.clone();
                let script = script.clone();
                async move {
                    if let Ok(mut kept) = kept.lock() {
                        kept.push(Put {
                            method,
                            uri,
                            headers,
                            body,
                        });
                    }
                    let status = script.lock().ok().and_then(|mut s| s.pop_front());
                    StatusCode::from_u16(status.unwrap_or(200)).unwrap_or(StatusCode::OK)
                }
            },
        );
        ResponseBucket {
            base: k2b_tests::serve(router).await,
            received,
        }
    }

    /// A pre-signed URL as CloudFormation hands it out (the object key names the stack, the
    /// resource and the request).
    pub fn url(&self, request_id: &str) -> String {
        format!(
            "{}/cloudformation-custom-resource-response-eucentral1/\
             arn%3Aaws%3Acloudformation%3Aeu-central-1%3A123456789012%3Astack/k2b/\
             5b3f0c10-aa11-11ef-8000-0a1b2c3d4e5f%7CSchemaMigration%7C{request_id}\
             ?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Date=20261201T120000Z\
             &X-Amz-SignedHeaders=host&X-Amz-Expires=7199\
             &X-Amz-Credential=AKIAEXAMPLE%2F20261201%2Feu-central-1%2Fs3%2Faws4_request\
             &X-Amz-Signature=3c5b2a0f9e8d7c6b5a4f3e2d1c0b9a8f7e6d5c4b3a2f1e0d9c8b7a6f5e4d3c2b",
            self.base
        )
    }

    pub fn received(&self) -> Vec<Put> {
        self.received.lock().map(|r| r.clone()).unwrap_or_default()
    }

    /// The one answer received, or a failed test.
    pub fn answer(&self) -> Put {
        let received = self.received();
        assert_eq!(received.len(), 1, "expected one answer, got {received:?}");
        received[0].clone()
    }
}

/// A database of its own with nothing in it (every stack database is cloned from a migrated
/// template), dropped with the value.
pub struct EmptyDatabase {
    pub url: String,
    admin_url: String,
    name: String,
}

impl EmptyDatabase {
    pub async fn create(db: &TestDb) -> EmptyDatabase {
        let name = format!("k2b_empty_{}", uuid::Uuid::new_v4().simple());
        let url = db.url_for(&name);
        assert!(db::ensure_database(&url).await.expect("create database"));
        EmptyDatabase {
            url,
            admin_url: db.url_for("postgres"),
            name,
        }
    }

    pub async fn pool(&self) -> sqlx::PgPool {
        sqlx::PgPool::connect(&self.url).await.expect("connect")
    }
}

impl Drop for EmptyDatabase {
    fn drop(&mut self) {
        let (admin_url, name) = (self.admin_url.clone(), self.name.clone());
        // Drop runs inside the test's runtime, which cannot be blocked on.
        std::thread::spawn(move || {
            let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            runtime.block_on(async move {
                if let Ok(mut admin) = sqlx::PgConnection::connect(&admin_url).await {
                    let statement = format!("DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)");
                    sqlx::query(sqlx::AssertSqlSafe(statement))
                        .execute(&mut admin)
                        .await
                        .ok();
                }
            });
        })
        .join()
        .ok();
    }
}
