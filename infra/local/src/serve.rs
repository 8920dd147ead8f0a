//! The server: every function's routes on one port, schedules on timers, queue wake-ups in
//! process.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::serve::ListenerExt;
use axum::{Json, Router};
use k2b_core::Core;
use k2b_core::config::Config;
use k2b_core::db;
use k2b_core::db::reads::SharedReads;
use k2b_core::help::CompiledHelp;
use k2b_core::http::routes::Routes;
use k2b_core::registry::{APP_REGISTRY_TTL, store};
use k2b_core::smtp_sink::{Received, SmtpSink};
use serde_json::{Value, json};

use crate::{admin, demo, shell};

pub const DEFAULT_LISTEN: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 3000);
/// The maintenance schedule (the deployed function runs every minute too).
const MAINTENANCE_PERIOD: Duration = Duration::from_secs(60);
/// The outbox sweep (the deployed `outbox` function's schedule; it re-arms outgoing mail's
/// recovery scan half a minute later).
const OUTBOX_SWEEP_PERIOD: Duration = Duration::from_secs(60);

/// The local SMTP sink, when the runner started one.
static MAIL_SINK: std::sync::OnceLock<SmtpSink> = std::sync::OnceLock::new();
/// Identity key maintenance (the deployed `keys` function runs every minute).
const KEYS_PERIOD: Duration = Duration::from_secs(60);
/// Registry heartbeat of the demo apps: a third of the registry TTL, like a real app's.
const HEARTBEAT_PERIOD: Duration = Duration::from_secs(60);

pub async fn run(mut config: Config, listen: SocketAddr) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .with_context(|| format!("cannot listen on {listen}"))?;
    let address = listener.local_addr()?;
    let base_url = format!("http://{address}");
    // Locally the installation lives where the runner listens, unless APP_URL says otherwise;
    // the admin commands read it from the database, so their tokens name the same issuer.
    let app_url = config.app_url.clone().unwrap_or_else(|| base_url.clone());
    config.app_url = Some(app_url.clone());
    if let Some(notice) = config.local_mode_notice() {
        tracing::warn!("{notice}");
    }
    let (core, report) = admin::open(config).await?;
    match (report.applied.is_empty(), report.current) {
        (true, Some(version)) => println!("database is up to date (migration {version})"),
        (false, Some(version)) => println!(
            "applied {} migration(s), now at {version}",
            report.applied.len()
        ),
        _ => {}
    }
    core.settings
        .set("app.url", serde_json::Value::String(app_url))
        .await
        .context("cannot store app.url")?;
    demo::seed(&core).await?;
    start_mail_sink(&core).await;
    core.identity
        .initialize()
        .await
        .context("cannot prepare the identity signing keys")?;

    // The demo app runs as its own server on the next port (or any free one), like a real app.
    let demo_listener = match tokio::net::TcpListener::bind(SocketAddr::new(
        address.ip(),
        address
            .port()
            .checked_add(1)
            .filter(|_| address.port() != 0)
            .unwrap_or(0),
    ))
    .await
    {
        Ok(listener) => listener,
        Err(_) => tokio::net::TcpListener::bind(SocketAddr::new(address.ip(), 0))
            .await
            .context("cannot listen for the demo app")?,
    };
    // A listener on every interface is reached over loopback (an unspecified address is no
    // destination for Core's calls to the app).
    let demo_address = demo_listener.local_addr()?;
    let demo_url = if demo_address.ip().is_unspecified() {
        format!("http://127.0.0.1:{}", demo_address.port())
    } else {
        format!("http://{demo_address}")
    };
    let demo_app = demo::demo_router(&core).await?;
    tokio::spawn(async move {
        if let Err(error) = axum::serve(demo_listener.tap_io(no_delay), demo_app).await {
            tracing::warn!(error = %error, "demo app server stopped");
        }
    });
    // The demo apps are registered (Help first) before the runner answers its first request.
    let heartbeat = Heartbeat::new(&demo_url, &base_url)?;
    heartbeat.beat(&core).await;
    start_timers(&core, heartbeat);

    let app = router(core.clone(), address);
    println!("demo app listening on {demo_url}");
    println!("k2b-local listening on {base_url}");
    println!("  start page: {base_url}/   (sign in, the dashboard, pairing a phone)");
    println!(
        "  health: {base_url}/healthz    admin account: `{}`",
        demo::ADMIN_UID
    );
    println!(
        "  sign in: cargo run -p k2b-local -- session issue --user {}   (prints a cookie for curl -b)",
        demo::ADMIN_UID
    );
    // Small writes (stream lines) leave at once instead of waiting for the previous one's ACK.
    axum::serve(
        listener.tap_io(no_delay),
        app.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .with_graceful_shutdown(shutdown_signal())
    .await?;
    Ok(())
}

/// Disables Nagle's algorithm on an accepted connection.
fn no_delay(stream: &mut tokio::net::TcpStream) {
    if let Err(error) = stream.set_nodelay(true) {
        tracing::debug!(error = %error, "TCP_NODELAY not set");
    }
}

/// Every function's routes plus the runner's own, behind the same front door as on Lambda. The
/// runner's `/_local/*` routes exist only on a loopback listener, and answer only requests that
/// arrive over loopback naming a loopback host (a page whose name rebinds to 127.0.0.1 still
/// sends its own name as `Host`).
pub fn router(core: Core, listen: SocketAddr) -> Router {
    let health = Arc::new(SharedReads::new());
    let mut own = Routes::new().get("/healthz", move |State(core): State<Core>| async move {
        healthz(&core, &health).await
    });
    own = own
        .merge(shell::routes())
        .get(crate::openapi::PATH, crate::openapi::serve);
    if listen.ip().is_loopback() {
        own = own.merge(
            Routes::new()
                .merge(shell::local_routes())
                .get("/_local/live-events", live_events)
                .post("/_local/outbox/sweep", sweep_now)
                .get("/_local/mail", sink_mail)
                .layer(axum::middleware::from_fn(loopback_only)),
        );
    }
    let own = own.with_state(core.clone());
    k2b_core::lambda::front_door(
        own.merge(registry::routes(core.clone()))
            .merge(icons::routes(core.clone()))
            .merge(manifest::routes(core.clone()))
            .merge(widgets::routes(core.clone()))
            .merge(help::routes(core.clone()))
            .merge(mail::routes(core.clone()))
            .merge(approvals::routes(core)),
    )
}

/// Whether a `Host` header names this machine: `localhost` or a loopback address, with or
/// without a port.
pub fn is_loopback_host(host: &str) -> bool {
    let name = match host.strip_prefix('[') {
        Some(rest) => match rest.split_once(']') {
            Some((v6, port)) if port.is_empty() || port.starts_with(':') => v6,
            _ => return false,
        },
        None => host.rsplit_once(':').map_or(host, |(name, _)| name),
    };
    name.eq_ignore_ascii_case("localhost")
        || name
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// The guard of the runner's own routes: a loopback peer and a loopback `Host`, else 403.
async fn loopback_only(request: axum::extract::Request, next: axum::middleware::Next) -> Response {
    let peer_is_local = request
        .extensions()
        .get::<axum::extract::ConnectInfo<SocketAddr>>()
        .is_some_and(|info| info.0.ip().is_loopback());
    let host_is_local = request
        .headers()
        .get(axum::http::header::HOST)
        .and_then(|h| h.to_str().ok())
        .is_some_and(is_loopback_host);
    if peer_is_local && host_is_local {
        next.run(request).await
    } else {
        k2b_core::http::ApiError::forbidden(
            "The runner's own routes answer only on loopback, to a loopback Host.",
        )
        .into_response()
    }
}

/// Starts the SMTP sink the seeded `local` mail profile delivers to (`K2B_LOCAL_SMTP_PORT`,
/// 2525 by default; `K2B_LOCAL_SMTP_SINK=off` leaves the port to a server of your own). Each
/// message is printed in one line and kept as an `.eml` file.
async fn start_mail_sink(core: &Core) {
    if std::env::var("K2B_LOCAL_SMTP_SINK").is_ok_and(|v| v.eq_ignore_ascii_case("off")) {
        return;
    }
    let port = std::env::var("K2B_LOCAL_SMTP_PORT")
        .ok()
        .and_then(|p| p.parse::<u16>().ok())
        .unwrap_or(demo::DEFAULT_SMTP_PORT);
    let address = SocketAddr::new(std::net::Ipv4Addr::LOCALHOST.into(), port);
    let sink = match SmtpSink::start(address).await {
        Ok(sink) => sink,
        Err(error) => {
            println!(
                "mail sink not started on {address} ({error}); mail goes to whatever listens there"
            );
            return;
        }
    };
    let dir = core
        .config
        .mail_dir
        .parent()
        .map(|data| data.join("mail-sink"))
        .unwrap_or_else(|| std::env::temp_dir().join("k2b-mail-sink"));
    println!(
        "mail sink listening on smtp://{address} (messages kept in {})",
        dir.display()
    );
    sink.on_message(move |message| keep_mail(&dir, message));
    MAIL_SINK.set(sink).ok();
}

fn keep_mail(dir: &std::path::Path, message: &Received) {
    let subject = message.header("Subject").unwrap_or_default();
    let id = message.header("Message-ID").unwrap_or_default();
    let name = format!(
        "{}-{}.eml",
        chrono::Utc::now().format("%Y%m%dT%H%M%S%.3f"),
        id.trim_matches(['<', '>'])
            .split('@')
            .next()
            .unwrap_or("message")
    );
    let path = dir.join(name);
    let kept = std::fs::create_dir_all(dir).and_then(|()| std::fs::write(&path, &message.data));
    match kept {
        Ok(()) => println!(
            "mail received: to {} subject {:?} -> {}",
            message.to.join(", "),
            subject,
            path.display()
        ),
        Err(error) => println!(
            "mail received: to {} subject {:?} (not kept: {error})",
            message.to.join(", "),
            subject
        ),
    }
}

/// Local only: what the mail sink received, oldest first.
async fn sink_mail() -> Response {
    let messages: Vec<Value> = MAIL_SINK
        .get()
        .map(SmtpSink::received)
        .unwrap_or_default()
        .iter()
        .map(|m| {
            json!({
                "from": m.from,
                "to": m.to,
                "subject": m.header("Subject"),
                "messageId": m.header("Message-ID"),
                "data": m.data,
            })
        })
        .collect();
    Json(json!({ "messages": messages })).into_response()
}

/// Local only: drain every outbox now (instead of waiting for the minute's sweep).
async fn sweep_now(State(core): State<Core>) -> Response {
    match outbox::sweep(&core.drainer(), None).await {
        Ok(report) => Json(report).into_response(),
        Err(error) => {
            tracing::warn!(error = %error, "outbox sweep failed");
            k2b_core::http::ApiError::unavailable("The outbox sweep failed.").into_response()
        }
    }
}

/// Local only: the live updates the in-memory publisher received, oldest first.
async fn live_events(State(core): State<Core>) -> Response {
    let events = core
        .memory_live
        .as_ref()
        .map(|memory| memory.events())
        .unwrap_or_default();
    Json(json!({ "events": events })).into_response()
}

/// `{status, database, migration}`: 200 when the database answers, 503 otherwise. Concurrent
/// checks share reads, each answered by a read that started after it arrived.
async fn healthz(core: &Core, health: &SharedReads<Option<i64>>) -> Response {
    let read = health.read(|| db::latest_applied_version(&core.pool)).await;
    match read {
        Ok(migration) => Json(json!({
            "status": "ok",
            "database": "ok",
            "migration": *migration,
        }))
        .into_response(),
        Err(error) => {
            tracing::warn!(error = %error, "health check: database unavailable");
            (
                axum::http::StatusCode::SERVICE_UNAVAILABLE,
                Json(
                    json!({"status": "unavailable", "database": "unavailable", "migration": null}),
                ),
            )
                .into_response()
        }
    }
}

/// What the demo apps publish on every heartbeat: the demo app's Help corpus, then the
/// registry entries (an entry is only advertised once its corpus is stored).
struct Heartbeat {
    help: CompiledHelp,
    demo: Value,
    others: Vec<Value>,
}

impl Heartbeat {
    fn new(demo_url: &str, base_url: &str) -> anyhow::Result<Heartbeat> {
        let help = demo::demo_help()?;
        Ok(Heartbeat {
            demo: demo::demo_app_entry(demo_url, &help)?,
            help,
            others: vec![
                demo::pwa_shell_entry(base_url),
                demo::reports_entry(base_url),
            ],
        })
    }

    async fn beat(&self, core: &Core) {
        let mut entries: Vec<&Value> = self.others.iter().collect();
        match k2b_core::help::store::register(&core.pool, &self.help.corpus).await {
            Ok(_) => entries.push(&self.demo),
            Err(error) => {
                tracing::warn!(error = %error, "demo help not published; the demo app is not advertised this time");
            }
        }
        let result = async {
            let mut conn = core.pool.acquire().await?;
            for entry in entries {
                store::upsert(&mut conn, entry, APP_REGISTRY_TTL).await?;
            }
            anyhow::Ok(())
        }
        .await;
        if let Err(error) = result {
            tracing::warn!(error = %error, "demo app heartbeat failed");
        }
    }
}

/// Starts the schedules: the demo apps' heartbeat (after the first beat, which ran before the
/// runner answered), key maintenance, the outbox and maintenance.
fn start_timers(core: &Core, heartbeat: Heartbeat) {
    let heartbeat_core = core.clone();
    tokio::spawn(async move {
        let mut ticks = tokio::time::interval_at(
            tokio::time::Instant::now() + HEARTBEAT_PERIOD,
            HEARTBEAT_PERIOD,
        );
        loop {
            ticks.tick().await;
            heartbeat.beat(&heartbeat_core).await;
        }
    });
    let keys_core = core.clone();
    tokio::spawn(async move {
        let initialized = tokio::sync::OnceCell::new();
        let mut ticks = tokio::time::interval(KEYS_PERIOD);
        loop {
            ticks.tick().await;
            if let Err(error) = keys::run(&keys_core, &initialized).await {
                tracing::warn!(error = %error, "key maintenance failed");
            }
        }
    });
    // Outbox wake-ups are delivered in process: each runs a pass of its outbox (a delayed one
    // after its delay); a follower hears live rows committed by any writer; a sweep every
    // minute catches retries that fell due.
    if let Some(local) = &core.local_wakeups {
        let mut wakeups = local.subscribe();
        let drainer = std::sync::Arc::new(core.drainer());
        let waker_drainer = drainer.clone();
        tokio::spawn(async move {
            while let Some(request) = wakeups.recv().await {
                let drainer = waker_drainer.clone();
                tokio::spawn(async move {
                    if !request.delay.is_zero() {
                        tokio::time::sleep(request.delay).await;
                    }
                    drainer.run([request.target], None).await;
                });
            }
        });
        // Live rows any writer commits (SQL alone included) are heard at once.
        let follow_core = core.clone();
        let follow_drainer = drainer.clone();
        tokio::spawn(async move {
            loop {
                match k2b_core::outbox::Follower::listen(&follow_core.pool).await {
                    Ok(follower) => {
                        // What was committed before the listener was up was not heard.
                        if let Err(error) = follow_drainer.sweep(None).await {
                            tracing::warn!(error = %error, "outbox sweep after listening failed");
                        }
                        follower.follow(&follow_drainer, None, None).await;
                    }
                    Err(error) => {
                        tracing::warn!(error = %error, "live outboxes not followed; retrying")
                    }
                }
                tokio::time::sleep(std::time::Duration::from_secs(5)).await;
            }
        });
        let sweep_core = core.clone();
        tokio::spawn(async move {
            let mut ticks = tokio::time::interval(OUTBOX_SWEEP_PERIOD);
            loop {
                ticks.tick().await;
                if let Err(error) = outbox::scheduled(&sweep_core, &drainer, None).await {
                    tracing::warn!(error = %error, "outbox sweep failed");
                }
            }
        });
    }
    let maintenance_core = core.clone();
    tokio::spawn(async move {
        let mut ticks = tokio::time::interval(MAINTENANCE_PERIOD);
        loop {
            ticks.tick().await;
            if let Err(error) = maintenance::run(&maintenance_core).await {
                tracing::warn!(error = %error, "maintenance run failed");
            }
        }
    });
}

async fn shutdown_signal() {
    let interrupt = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut terminate =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(signal) => signal,
                Err(_) => {
                    interrupt.await.ok();
                    return;
                }
            };
        tokio::select! {
            _ = interrupt => {}
            _ = terminate.recv() => {}
        }
    }
    #[cfg(not(unix))]
    interrupt.await.ok();
}
