//! A drainer process for the crash-safety test: drains `inventory.stock_reports` with a short
//! claim period, recording every publish in `inventory.published` and pausing after each, so
//! the test can kill it mid-batch.

use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use futures::future::BoxFuture;
use k2b_core::outbox::{Outbox, OutboxConfig, OutboxRow, PublishError, Publisher};
use sqlx::Row;

struct Recording {
    pool: sqlx::PgPool,
    name: String,
}

impl Publisher for Recording {
    fn publish<'a>(&'a self, row: &'a OutboxRow) -> BoxFuture<'a, Result<(), PublishError>> {
        async move {
            let seq: i64 = row
                .row
                .try_get("seq")
                .map_err(|e| PublishError(e.to_string()))?;
            sqlx::query(
                "INSERT INTO inventory.published (seq, item_id, drainer) VALUES ($1, $2, $3)",
            )
            .bind(seq)
            .bind(&row.key)
            .bind(&self.name)
            .execute(&self.pool)
            .await
            .map_err(|e| PublishError(e.to_string()))?;
            tokio::time::sleep(Duration::from_millis(20)).await;
            Ok(())
        }
        .boxed()
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let url = std::env::var("DATABASE_URL")?;
    let claim_ms: u64 = std::env::var("CLAIM_MS")
        .unwrap_or_else(|_| "2000".into())
        .parse()?;
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(4)
        .connect(&url)
        .await?;
    let mut config = OutboxConfig::new(
        "inventory.stock_reports",
        "inventory:stock",
        "item_id",
        "seq",
    );
    config.claim = Duration::from_millis(claim_ms);
    let publisher = Arc::new(Recording {
        pool: pool.clone(),
        name: "victim".into(),
    });
    let outbox = Arc::new(Outbox::new(pool, config, publisher)?);
    println!("draining");
    outbox
        .reconcile()
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    println!("done");
    Ok(())
}
