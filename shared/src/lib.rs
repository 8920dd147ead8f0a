//! `k2b-core`: everything two or more K2B Cloud functions share.
//!
//! A function reads its [`config::Config`], builds a [`Core`] (pool, settings), and hands its
//! router or event handler to the Lambda runtime; the local runner builds the same `Core` and
//! mounts every function on one port.

/// The allocator of every binary built on the core (each function, the local runner, the icon
/// worker): mimalloc, whose per-thread free lists keep a request's many small allocations off
/// the shared heap locks.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

pub mod access;
pub mod approvals;
pub mod audit;
pub mod auth;
pub mod branding;
pub mod cloud_login;
pub mod config;
pub mod cpu;
pub mod db;
pub mod help;
pub mod http;
pub mod identity;
pub mod kek;
pub mod lambda;
pub mod mail;
#[cfg(feature = "test-util")]
pub mod moto;
pub mod operations;
pub mod outbox;
pub mod pwa;
pub mod registry;
pub mod sandbox;
pub mod secret;
pub mod settings;
#[cfg(feature = "smtp-sink")]
pub mod smtp_sink;
pub mod telemetry;
pub mod widgets;

use std::ops::Deref;
use std::sync::Arc;

use sqlx::PgPool;

use crate::config::Config;
use crate::db::DbError;
use crate::identity::Identity;
use crate::outbox::live::{LiveOutboxes, MemoryLivePublisher, NoLiveQueue, SqsLivePublisher};
use crate::outbox::{LocalWakeups, NoWakeupQueue, Publisher, SqsWakeups, Wakeups};
use crate::settings::Settings;

/// The shared state of one execution environment, cheap to clone into every handler.
#[derive(Clone)]
pub struct Core(Arc<CoreInner>);

pub struct CoreInner {
    pub config: Config,
    pub pool: PgPool,
    pub settings: Arc<Settings>,
    pub identity: Identity,
    /// Where outbox wake-ups go (SQS, or in process in local mode).
    pub wakeups: Arc<dyn Wakeups>,
    /// In-process wake-ups, in local mode without a wake-up queue (the local runner drains them).
    pub local_wakeups: Option<Arc<LocalWakeups>>,
    /// The live-update outboxes, one per app.
    pub live: Arc<LiveOutboxes>,
    /// Published live updates kept in memory, in local mode without a live queue.
    pub memory_live: Option<Arc<MemoryLivePublisher>>,
    /// The last installation logo parsed (the icons, the manifest and the worker script read it).
    pub icon_source: branding::IconSourceMemo,
    /// Postgres notifications this execution environment listens to (one connection per
    /// channel, shared by every waiting request).
    pub notifications: Arc<db::notify::Notifications>,
    /// Where outgoing mail attachments are kept (S3, or a local folder in local mode).
    pub mail_objects: Arc<mail::MailObjects>,
    /// Delivery of outgoing mail (the `outbox` function and the local runner run it).
    pub mail_delivery: Arc<mail::delivery::MailDelivery>,
}

impl Core {
    /// Builds the state without touching the network: the pool connects on first use.
    pub fn new(config: Config) -> Result<Core, DbError> {
        let pool = db::lazy_pool(&config)?;
        Ok(Core::with_pool(config, pool))
    }

    /// Builds the state around an existing pool (tests, the local runner).
    pub fn with_pool(config: Config, pool: PgPool) -> Core {
        let settings = Arc::new(Settings::new(
            pool.clone(),
            config.app_secret.as_ref().map(|secret| secret.expose()),
            config.settings_cache,
            config.app_url.clone(),
        ));
        let identity = Identity::new(
            pool.clone(),
            config.identity.keks.clone(),
            settings.clone(),
            !config.mode.is_local(),
            config.identity.jwks_origin.clone(),
            config.identity.oauth_jwks_origin.clone(),
        );
        // Without a queue, local mode delivers in process; a deployed function never falls back
        // silently (a function that sends refuses to start without its queue, see `Needs`).
        let local = config.mode.is_local();
        let (wakeups, local_wakeups): (Arc<dyn Wakeups>, _) = match &config.wakeup_queue_url {
            Some(url) => (Arc::new(SqsWakeups::new(url.clone())), None),
            None if local => {
                let local = Arc::new(LocalWakeups::default());
                (local.clone(), Some(local))
            }
            None => (Arc::new(NoWakeupQueue), None),
        };
        let (publisher, memory_live): (Arc<dyn Publisher>, _) = match &config.live_queue_url {
            Some(url) => (Arc::new(SqsLivePublisher::new(url.clone())), None),
            None if local => {
                let memory = Arc::new(MemoryLivePublisher::default());
                (memory.clone(), Some(memory))
            }
            None => (Arc::new(NoLiveQueue), None),
        };
        let live = Arc::new(LiveOutboxes::new(pool.clone(), publisher, wakeups.clone()));
        let mail_objects = Arc::new(mail::MailObjects::new(
            config.mail_bucket.clone(),
            config.mail_dir.clone(),
        ));
        let mail_delivery = Arc::new(mail::delivery::MailDelivery::new(
            pool.clone(),
            settings.clone(),
            mail_objects.clone(),
            wakeups.clone(),
            config.smtp_extra_roots.clone(),
        ));
        let notifications = Arc::new(db::notify::Notifications::new(pool.clone()));
        Core(Arc::new(CoreInner {
            notifications,
            mail_objects,
            mail_delivery,
            config,
            pool,
            settings,
            identity,
            wakeups,
            local_wakeups,
            live,
            memory_live,
            icon_source: branding::IconSourceMemo::default(),
        }))
    }
}

impl Core {
    /// The source of the app icons: the `app.logo` setting, parsed once per distinct value.
    pub async fn app_icon_source(
        &self,
    ) -> Result<Arc<branding::AppIconSource>, settings::SettingsError> {
        let logo = self.settings.app_logo().await?;
        Ok(self.icon_source.read(&logo))
    }

    /// The drainer of every outbox this bundle owns.
    pub fn drainer(&self) -> outbox::Drainer {
        outbox::Drainer::new(vec![self.live.clone(), self.mail_delivery.clone()])
    }
}

impl Deref for Core {
    type Target = CoreInner;
    fn deref(&self) -> &CoreInner {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Mode, Needs};

    fn core(mode: Mode) -> Core {
        let config = Config::from_lookup_for(mode, Needs::DATABASE, |name| {
            (name == "DATABASE_URL").then(|| "postgres://nobody@127.0.0.1:1/none".to_string())
        })
        .expect("config");
        Core::new(config).expect("core")
    }

    #[tokio::test]
    async fn only_local_mode_keeps_queues_in_process() {
        let deployed = core(Mode::Production);
        assert!(deployed.memory_live.is_none());
        assert!(deployed.local_wakeups.is_none());
        let local = core(Mode::Local);
        assert!(local.memory_live.is_some());
        assert!(local.local_wakeups.is_some());
    }
}
