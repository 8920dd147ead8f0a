//! The `migrate` binary as CloudFormation runs it for the `SchemaMigration` custom resource: the
//! template's environment, CloudFormation's request shapes (Create, Update with its previous
//! properties, Delete, the Update of a rollback), and the answer PUT to a pre-signed response
//! URL served here, which keeps what it received.

use std::time::{Duration, Instant};

use axum::http::Method;
use k2b_core::db::{self, MIGRATOR};
use k2b_tests::lambda::{FunctionProcess, Outcome, function_binary};
use migrate::request::{PHYSICAL_RESOURCE_ID, VERSION_PROPERTY};
use serde_json::{Value, json};
use sqlx::Connection;

use super::Stack;

mod fixtures;

use fixtures::{EmptyDatabase, Put, ResponseBucket};

const STACK_ID: &str = "arn:aws:cloudformation:eu-central-1:123456789012:stack/k2b/5b3f0c10-aa11-11ef-8000-0a1b2c3d4e5f";
const FUNCTION_ARN: &str =
    "arn:aws:lambda:eu-central-1:123456789012:function:k2b-MigrateFunction-Q1w2E3r4";
/// A password in the database URL: no log line may carry it.
const PASSWORD: &str = "never-in-a-log-7f3a";

/// The published version ARN of the migrate function, as `!Ref MigrateFunction.Version` gives it.
fn version_arn(version: u32) -> String {
    format!("{FUNCTION_ARN}:{version}")
}

/// The resource's properties as CloudFormation passes them: the template's, every value a
/// string, the version property naming `version`.
fn properties(stack: &Stack, version: u32) -> Value {
    let resource = &stack.deployment.custom_resources["SchemaMigration"];
    let mut properties = serde_json::Map::new();
    properties.insert("ServiceToken".into(), json!(FUNCTION_ARN));
    for (name, value) in &resource.properties {
        let value = match value {
            Value::String(text) => text.clone(),
            Value::Object(_) if name == VERSION_PROPERTY => version_arn(version),
            Value::Number(number) => number.to_string(),
            other => panic!("SchemaMigration.{name} = {other}: not resolved here"),
        };
        properties.insert(name.clone(), Value::String(value));
    }
    Value::Object(properties)
}

/// A custom-resource request: `Create`, `Update` (with the physical id and the previous
/// properties) or `Delete` (with the physical id).
fn request(
    stack: &Stack,
    bucket: &ResponseBucket,
    kind: &str,
    physical_id: Option<&str>,
    versions: (u32, Option<u32>),
) -> (Value, String) {
    let request_id = uuid::Uuid::new_v4().to_string();
    let mut event = json!({
        "RequestType": kind,
        "ServiceToken": FUNCTION_ARN,
        "ResponseURL": bucket.url(&request_id),
        "StackId": STACK_ID,
        "RequestId": request_id,
        "LogicalResourceId": "SchemaMigration",
        "ResourceType": "Custom::SchemaMigration",
        "ResourceProperties": properties(stack, versions.0),
    });
    if let Some(id) = physical_id {
        event["PhysicalResourceId"] = json!(id);
    }
    if let Some(previous) = versions.1 {
        event["OldResourceProperties"] = properties(stack, previous);
    }
    (event, request_id)
}

/// The template's environment of `migrate` with another database URL (`None`: without one).
fn environment(stack: &Stack, database_url: Option<&str>) -> Vec<(String, String)> {
    let mut environment: Vec<(String, String)> = stack
        .environment("migrate")
        .into_iter()
        .filter(|(name, _)| name != "DATABASE_URL")
        .collect();
    if let Some(url) = database_url {
        environment.push(("DATABASE_URL".into(), url.into()));
    }
    environment
}

/// `url` with a password (the test server trusts local connections, so any password passes).
fn with_password(url: &str) -> String {
    let mut url = reqwest::Url::parse(url).unwrap_or_else(|e| panic!("database URL: {e}"));
    if url.password().is_none() {
        url.set_password(Some(PASSWORD))
            .unwrap_or_else(|()| panic!("a password in the database URL"));
    }
    url.to_string()
}

/// What every answer carries from its request, and an answer the bucket accepts: PUT to the
/// very URL, an empty `Content-Type` (the URL is signed without one) and the body's length.
fn assert_answers(put: &Put, bucket: &ResponseBucket, request_id: &str) -> Value {
    assert_eq!(put.method, Method::PUT);
    let signed = reqwest::Url::parse(&bucket.url(request_id)).expect("url");
    assert_eq!(put.uri.path(), signed.path());
    assert_eq!(put.uri.query(), signed.query());
    assert_eq!(
        put.headers.get("content-type").map(|v| v.as_bytes()),
        Some(&b""[..]),
        "{:?}",
        put.headers
    );
    assert_eq!(
        put.headers
            .get("content-length")
            .and_then(|v| v.to_str().ok()),
        Some(put.body.len().to_string().as_str())
    );
    let document = put.json();
    assert_eq!(document["StackId"], STACK_ID);
    assert_eq!(document["RequestId"], request_id);
    assert_eq!(document["LogicalResourceId"], "SchemaMigration");
    document
}

/// The invocation's own result: it succeeds once the answer was delivered.
fn delivered(outcome: Outcome, function: &FunctionProcess) -> Value {
    match outcome {
        Outcome::Response(value) => value,
        other => panic!("the invocation failed: {other:?}\n{}", function.output()),
    }
}

async fn table_exists(pool: &sqlx::PgPool, table: &str) -> bool {
    sqlx::query_scalar::<_, Option<String>>("SELECT to_regclass($1)::text")
        .bind(table)
        .fetch_one(pool)
        .await
        .expect("to_regclass")
        .is_some()
}

fn latest() -> i64 {
    db::latest_known_migration().expect("the binary carries migrations")
}

/// Records a migration newer than any this build knows, as a later release would have.
async fn record_newer_migration(pool: &sqlx::PgPool) -> i64 {
    let newer = latest() + 1;
    sqlx::query(
        "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time)
         VALUES ($1, 'from a later release', true, '\\x00', 1)",
    )
    .bind(newer)
    .execute(pool)
    .await
    .expect("record a newer migration");
    newer
}

#[test]
fn the_schema_migration_runs_first_and_every_other_function_waits_for_it() {
    let deployment = k2b_tests::lambda::Deployment::load();
    let (migrator, spec) = deployment
        .functions
        .iter()
        .find(|(_, f)| f.binary == "migrate")
        .expect("a function builds migrate");
    let resource = &deployment.custom_resources["SchemaMigration"];
    assert_eq!(resource.kind, "Custom::SchemaMigration");
    assert_eq!(resource.function.as_deref(), Some(migrator.as_str()));
    // The property that changes with every build of the function (its published version).
    let version = resource.properties[VERSION_PROPERTY]["Ref"]
        .as_str()
        .unwrap_or_default();
    assert!(
        version.starts_with(&format!("{migrator}Version")),
        "{VERSION_PROPERTY} = {version:?}"
    );
    assert_eq!(spec.timeout, 300);
    assert!(spec.depends_on.is_empty(), "{:?}", spec.depends_on);
    for (name, function) in &deployment.functions {
        if name != migrator {
            assert!(
                function.depends_on.iter().any(|d| d == "SchemaMigration"),
                "{name} does not wait for the schema: {:?}",
                function.depends_on
            );
        }
        for metric in ["Errors", "Throttles"] {
            assert!(
                function.alarms.iter().any(|a| a == metric),
                "{name} has no {metric} alarm"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_on_an_empty_database_migrates_it_and_answers_success() {
    let stack = Stack::new().await;
    let empty = EmptyDatabase::create(&stack.db).await;
    let pool = empty.pool().await;
    assert!(
        db::applied_versions(&pool)
            .await
            .expect("versions")
            .is_empty()
    );
    let bucket = ResponseBucket::start(&[]).await;
    let mut function = stack
        .start_with(
            "migrate",
            &environment(&stack, Some(&with_password(&empty.url))),
        )
        .await;

    let (event, request_id) = request(&stack, &bucket, "Create", None, (1, None));
    let result = delivered(function.invoke(event).await, &function);

    let document = assert_answers(&bucket.answer(), &bucket, &request_id);
    assert_eq!(document["Status"], "SUCCESS", "{document}");
    assert_eq!(document["PhysicalResourceId"], PHYSICAL_RESOURCE_ID);
    assert_eq!(
        document["Data"],
        json!({"Version": latest().to_string(), "Applied": MIGRATOR.iter().count().to_string()})
    );
    assert_eq!(
        result, document,
        "the invocation's result is the answer sent"
    );
    let known: Vec<i64> = MIGRATOR.iter().map(|m| m.version).collect();
    assert_eq!(db::applied_versions(&pool).await.expect("versions"), known);
    for table in ["auth.users", "settings.entries", "events.outbox"] {
        assert!(table_exists(&pool, table).await, "{table}");
    }
    let output = function.output();
    assert!(output.contains("schema migration answered"), "{output}");
    assert!(!output.contains(PASSWORD), "{output}");
    assert!(!output.contains("X-Amz-Signature"), "{output}");
    pool.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn update_on_a_migrated_database_is_idempotent_and_keeps_its_physical_id() {
    let stack = Stack::new().await;
    let before = db::applied_versions(&stack.db.pool)
        .await
        .expect("versions");
    let bucket = ResponseBucket::start(&[]).await;
    let mut function = stack.start("migrate").await;

    for (previous, requested) in [(3, 4), (4, 5)] {
        let (event, request_id) = request(
            &stack,
            &bucket,
            "Update",
            Some(PHYSICAL_RESOURCE_ID),
            (requested, Some(previous)),
        );
        delivered(function.invoke(event).await, &function);
        let put = bucket.received().pop().expect("an answer");
        let document = assert_answers(&put, &bucket, &request_id);
        assert_eq!(document["Status"], "SUCCESS", "{document}");
        assert_eq!(document["PhysicalResourceId"], PHYSICAL_RESOURCE_ID);
        assert_eq!(
            document["Data"],
            json!({"Version": latest().to_string(), "Applied": "0"})
        );
    }
    assert_eq!(bucket.received().len(), 2);
    assert_eq!(
        db::applied_versions(&stack.db.pool)
            .await
            .expect("versions"),
        before
    );
}

/// Two runs on one database at once (two stacks, or a retried invocation): they take turns on
/// the migrator's lock, both succeed, and every migration is applied once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_runs_at_once_take_turns_and_apply_each_migration_once() {
    let stack = Stack::new().await;
    let empty = EmptyDatabase::create(&stack.db).await;
    let bucket = ResponseBucket::start(&[]).await;
    let environment = environment(&stack, Some(&empty.url));
    let mut first = stack.start_with("migrate", &environment).await;
    let mut second = stack.start_with("migrate", &environment).await;
    let (one, _) = request(&stack, &bucket, "Create", None, (1, None));
    let (two, _) = request(&stack, &bucket, "Create", None, (1, None));
    let (a, b) = tokio::join!(first.invoke(one), second.invoke(two));
    delivered(a, &first);
    delivered(b, &second);

    // A second run applying a migration again would fail on the migration table's key.
    let answers: Vec<Value> = bucket.received().iter().map(Put::json).collect();
    assert_eq!(answers.len(), 2);
    for answer in &answers {
        assert_eq!(answer["Status"], "SUCCESS", "{answer}");
        assert_eq!(answer["Data"]["Version"], latest().to_string());
    }
    let pool = empty.pool().await;
    assert_eq!(
        db::applied_versions(&pool).await.expect("versions").len(),
        MIGRATOR.iter().count()
    );
    pool.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_answers_success_and_keeps_the_schema() {
    let stack = Stack::new().await;
    let before = db::applied_versions(&stack.db.pool)
        .await
        .expect("versions");
    let bucket = ResponseBucket::start(&[]).await;
    // The id given is the one answered, whatever it is.
    let physical_id = "k2b-schema-of-an-earlier-stack";
    let (event, request_id) = request(&stack, &bucket, "Delete", Some(physical_id), (5, None));
    let mut function = stack.start("migrate").await;
    delivered(function.invoke(event).await, &function);
    let document = assert_answers(&bucket.answer(), &bucket, &request_id);
    assert_eq!(document["Status"], "SUCCESS", "{document}");
    assert_eq!(document["PhysicalResourceId"], physical_id);
    assert!(document.get("Data").is_none(), "{document}");
    assert_eq!(
        db::applied_versions(&stack.db.pool)
            .await
            .expect("versions"),
        before
    );
    assert!(table_exists(&stack.db.pool, "auth.users").await);

    // Deleting never needs the database: a stack whose database is gone still deletes.
    let bucket = ResponseBucket::start(&[]).await;
    let (event, _) = request(&stack, &bucket, "Delete", Some(physical_id), (5, None));
    let mut without = stack
        .start_with("migrate", &environment(&stack, None))
        .await;
    delivered(without.invoke(event).await, &without);
    assert_eq!(bucket.answer().json()["Status"], "SUCCESS");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_database_answers_failed_naming_it() {
    let stack = Stack::new().await;
    // A port nothing listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("a free port")
        .port();
    let url = format!("postgres://postgres:{PASSWORD}@127.0.0.1:{port}/k2b");
    let bucket = ResponseBucket::start(&[]).await;
    let mut function = stack
        .start_with("migrate", &environment(&stack, Some(&url)))
        .await;
    let (event, request_id) = request(&stack, &bucket, "Create", None, (1, None));
    delivered(function.invoke(event).await, &function);

    let document = assert_answers(&bucket.answer(), &bucket, &request_id);
    assert_eq!(document["Status"], "FAILED", "{document}");
    assert_eq!(document["PhysicalResourceId"], PHYSICAL_RESOURCE_ID);
    let reason = document["Reason"].as_str().unwrap_or_default();
    assert!(
        reason.starts_with("cannot reach the database: "),
        "{reason}"
    );
    assert!(!reason.contains(PASSWORD), "{reason}");
    assert!(document.get("Data").is_none(), "{document}");
    // The answer can reach the bucket before the log line reaches the harness.
    let logged = function
        .wait_for_stdout(Duration::from_secs(10), |line| line.contains("FAILED"))
        .await;
    let output = function.output();
    assert!(logged.is_some(), "{output}");
    assert!(!output.contains(PASSWORD), "{output}");
}

/// A later release migrated the database: this build refuses to deploy onto it, and when
/// CloudFormation then rolls the deploy back (an Update back to the earlier version), the
/// rollback succeeds without touching the schema.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_newer_schema_fails_the_update_and_its_rollback_succeeds() {
    let stack = Stack::new().await;
    let newer = record_newer_migration(&stack.db.pool).await;
    let before = db::applied_versions(&stack.db.pool)
        .await
        .expect("versions");
    let bucket = ResponseBucket::start(&[]).await;
    let mut function = stack.start("migrate").await;

    let (event, request_id) = request(
        &stack,
        &bucket,
        "Update",
        Some(PHYSICAL_RESOURCE_ID),
        (8, Some(7)),
    );
    delivered(function.invoke(event).await, &function);
    let document = assert_answers(&bucket.answer(), &bucket, &request_id);
    assert_eq!(document["Status"], "FAILED", "{document}");
    assert_eq!(document["PhysicalResourceId"], PHYSICAL_RESOURCE_ID);
    let reason = document["Reason"].as_str().unwrap_or_default();
    assert!(
        reason.starts_with(&format!(
            "the database schema is at migration {newer}, newer than this release's latest migration {}",
            latest()
        )),
        "{reason}"
    );

    let bucket = ResponseBucket::start(&[]).await;
    let (rollback, request_id) = request(
        &stack,
        &bucket,
        "Update",
        Some(PHYSICAL_RESOURCE_ID),
        (7, Some(8)),
    );
    delivered(function.invoke(rollback).await, &function);
    let document = assert_answers(&bucket.answer(), &bucket, &request_id);
    assert_eq!(document["Status"], "SUCCESS", "{document}");
    assert_eq!(document["PhysicalResourceId"], PHYSICAL_RESOURCE_ID);
    assert!(
        document["Reason"]
            .as_str()
            .is_some_and(|r| r.starts_with("rollback")),
        "{document}"
    );
    assert_eq!(
        db::applied_versions(&stack.db.pool)
            .await
            .expect("versions"),
        before
    );
}

/// A migration the database refuses (here the first, against a table of the same name made
/// elsewhere) fails the deploy with Postgres's own words, and leaves nothing half applied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_migration_answers_failed_with_the_databases_error() {
    let stack = Stack::new().await;
    let empty = EmptyDatabase::create(&stack.db).await;
    let pool = empty.pool().await;
    sqlx::raw_sql("CREATE SCHEMA auth; CREATE TABLE auth.users (name text)")
        .execute(&pool)
        .await
        .expect("a conflicting table");
    let bucket = ResponseBucket::start(&[]).await;
    let mut function = stack
        .start_with("migrate", &environment(&stack, Some(&empty.url)))
        .await;
    let (event, request_id) = request(&stack, &bucket, "Create", None, (1, None));
    delivered(function.invoke(event).await, &function);

    let document = assert_answers(&bucket.answer(), &bucket, &request_id);
    assert_eq!(document["Status"], "FAILED", "{document}");
    let reason = document["Reason"].as_str().unwrap_or_default();
    assert!(
        reason.starts_with("migration failed: ")
            && reason.contains("column \"mail\" does not exist"),
        "{reason}"
    );
    assert!(
        db::applied_versions(&pool)
            .await
            .expect("versions")
            .is_empty()
    );
    assert!(!table_exists(&pool, "auth.group_managers").await);
    pool.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_database_url_create_and_update_answer_failed() {
    let stack = Stack::new().await;
    let bucket = ResponseBucket::start(&[]).await;
    let mut function = stack
        .start_with("migrate", &environment(&stack, None))
        .await;
    let (create, _) = request(&stack, &bucket, "Create", None, (1, None));
    let (update, _) = request(
        &stack,
        &bucket,
        "Update",
        Some(PHYSICAL_RESOURCE_ID),
        (2, Some(1)),
    );
    for event in [create, update] {
        let asked = Instant::now();
        delivered(function.invoke(event).await, &function);
        assert!(
            asked.elapsed() < Duration::from_secs(5),
            "{:?}",
            asked.elapsed()
        );
    }
    let answers: Vec<Value> = bucket.received().iter().map(Put::json).collect();
    assert_eq!(answers.len(), 2);
    for answer in answers {
        assert_eq!(answer["Status"], "FAILED", "{answer}");
        assert_eq!(answer["PhysicalResourceId"], PHYSICAL_RESOURCE_ID);
        let reason = answer["Reason"].as_str().unwrap_or_default();
        assert!(
            reason.starts_with("configuration error: DATABASE_URL is required"),
            "{reason}"
        );
    }
}

/// With the migrator's lock held elsewhere, the run cannot finish: it answers `FAILED` ("timed
/// out") 10 s before the invocation's deadline, and the server gives up its wait soon after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_that_cannot_finish_answers_failed_before_the_deadline() {
    use sqlx::migrate::Migrate;

    let stack = Stack::new().await;
    let mut holder = sqlx::PgConnection::connect(&stack.db.url())
        .await
        .expect("connection");
    holder.lock().await.expect("the migrator's lock");

    // A deployment whose migrate function has 15 s: 5 s to migrate, 10 s to answer.
    let mut deployment = stack.deployment.clone();
    for function in deployment.functions.values_mut() {
        if function.binary == "migrate" {
            function.timeout = 15;
        }
    }
    let mut function = FunctionProcess::start(
        &deployment,
        &function_binary("migrate"),
        "migrate",
        &stack.environment("migrate"),
    )
    .await;
    let bucket = ResponseBucket::start(&[]).await;
    let (event, request_id) = request(
        &stack,
        &bucket,
        "Update",
        Some(PHYSICAL_RESOURCE_ID),
        (2, Some(1)),
    );
    let asked = Instant::now();
    delivered(function.invoke(event).await, &function);
    let waited = asked.elapsed();
    assert!(
        waited >= Duration::from_secs(4) && waited < Duration::from_secs(9),
        "answered after {waited:?}"
    );
    let document = assert_answers(&bucket.answer(), &bucket, &request_id);
    assert_eq!(document["Status"], "FAILED", "{document}");
    let reason = document["Reason"].as_str().unwrap_or_default();
    assert!(reason.starts_with("timed out: "), "{reason}");

    // The abandoned wait for the lock ends on the server too.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let waiting: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_locks
             WHERE locktype = 'advisory' AND NOT granted
               AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
        )
        .fetch_one(&stack.db.pool)
        .await
        .expect("locks");
        if waiting == 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "a session still waits for the migrator's lock"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    holder.unlock().await.expect("unlock");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_the_bucket_fails_is_sent_again_and_one_it_refuses_fails_the_invocation() {
    let stack = Stack::new().await;
    let mut function = stack.start("migrate").await;

    // S3 having a bad moment: the same document again until it is taken.
    let bucket = ResponseBucket::start(&[503, 500]).await;
    let (event, _) = request(
        &stack,
        &bucket,
        "Delete",
        Some(PHYSICAL_RESOURCE_ID),
        (1, None),
    );
    delivered(function.invoke(event).await, &function);
    let received = bucket.received();
    assert_eq!(received.len(), 3, "{received:?}");
    assert!(received.iter().all(|put| put.body == received[0].body));

    // A refusal (an expired or altered URL) is final: the invocation fails, so Lambda's retry
    // of the asynchronous invocation answers again, and the URL is named nowhere.
    let bucket = ResponseBucket::start(&[403]).await;
    let (event, _) = request(
        &stack,
        &bucket,
        "Delete",
        Some(PHYSICAL_RESOURCE_ID),
        (1, None),
    );
    match function.invoke(event).await {
        Outcome::Error { body, .. } => {
            let message = body["errorMessage"].as_str().unwrap_or_default();
            assert!(
                message.starts_with("the response did not reach CloudFormation")
                    && message.contains("HTTP 403"),
                "{message}"
            );
            assert!(!message.contains("X-Amz"), "{message}");
        }
        other => panic!("expected a failed invocation, got {other:?}"),
    }
    assert_eq!(bucket.received().len(), 1);
    let output = function.output();
    assert!(!output.contains("X-Amz-Signature"), "{output}");
}

/// A request this function cannot read is still answered where it says, so CloudFormation is
/// not left waiting for the service timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_request_type_is_answered_failed() {
    let stack = Stack::new().await;
    let bucket = ResponseBucket::start(&[]).await;
    let (mut event, request_id) = request(&stack, &bucket, "Create", None, (1, None));
    event["RequestType"] = json!("Rotate");
    let mut function = stack.start("migrate").await;
    delivered(function.invoke(event).await, &function);
    let document = assert_answers(&bucket.answer(), &bucket, &request_id);
    assert_eq!(document["Status"], "FAILED", "{document}");
    assert_eq!(document["PhysicalResourceId"], PHYSICAL_RESOURCE_ID);
    let reason = document["Reason"].as_str().unwrap_or_default();
    assert!(
        reason.starts_with("not a custom-resource request") && reason.contains("Rotate"),
        "{reason}"
    );
}
