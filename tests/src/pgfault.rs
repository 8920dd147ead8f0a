//! A TCP proxy in front of the test Postgres that breaks one connection at a chosen message: the
//! faults a network or a failing server causes (a reply to COMMIT that never arrives, a
//! connection that drops mid-statement), on a real server, so the code under test meets them
//! exactly as it would in production.
//!
//! The proxy reads the protocol's message frames (startup, then a type byte and a length), so
//! its URL asks for `sslmode=disable`.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};

/// What happens to a connection, and at which client message (a frame whose bytes contain a
/// pattern: SQL text, or a bound value such as a lock name or a key).
#[derive(Debug, Clone)]
pub struct Fault {
    kind: FaultKind,
    on: &'static [u8],
    after: Option<&'static [u8]>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FaultKind {
    LoseReply,
    Cut,
}

impl Fault {
    /// Forwards the message, lets the server answer, drops the answer and closes the
    /// connection: the statement ran, and the client never learns how it ended (a lost reply
    /// to `COMMIT`).
    pub fn lose_reply(on: &'static [u8]) -> Fault {
        Fault {
            kind: FaultKind::LoseReply,
            on,
            after: None,
        }
    }

    /// Closes the connection instead of forwarding the message: the statement never runs.
    pub fn cut(on: &'static [u8]) -> Fault {
        Fault {
            kind: FaultKind::Cut,
            on,
            after: None,
        }
    }

    /// Applies only on a connection that already sent a message containing `seen` (the
    /// `COMMIT` of the transaction that wrote a given row, say).
    pub fn after(self, seen: &'static [u8]) -> Fault {
        Fault {
            after: Some(seen),
            ..self
        }
    }
}

/// The proxy: connections to [`PgFaultProxy::url`] reach the test database through it.
pub struct PgFaultProxy {
    /// The database URL through the proxy.
    pub url: String,
    faults: Arc<Mutex<VecDeque<Fault>>>,
    fired: Arc<AtomicUsize>,
}

impl PgFaultProxy {
    /// Starts a proxy in front of the server of `database_url`.
    pub async fn start(database_url: &str) -> PgFaultProxy {
        let mut url = reqwest::Url::parse(database_url)
            .unwrap_or_else(|e| panic!("database URL {database_url}: {e}"));
        let target = format!(
            "{}:{}",
            url.host_str().unwrap_or("127.0.0.1"),
            url.port().unwrap_or(5432)
        );
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .unwrap_or_else(|e| panic!("bind: {e}"));
        let address = listener
            .local_addr()
            .unwrap_or_else(|e| panic!("address: {e}"));
        url.set_host(Some("127.0.0.1"))
            .unwrap_or_else(|e| panic!("host: {e}"));
        url.set_port(Some(address.port()))
            .unwrap_or_else(|()| panic!("port"));
        url.query_pairs_mut().append_pair("sslmode", "disable");
        let faults = Arc::new(Mutex::new(VecDeque::new()));
        let fired = Arc::new(AtomicUsize::new(0));
        let (shared_faults, shared_fired) = (faults.clone(), fired.clone());
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = TcpStream::connect(&target).await else {
                    continue;
                };
                client.set_nodelay(true).ok();
                server.set_nodelay(true).ok();
                tokio::spawn(relay(
                    client,
                    server,
                    shared_faults.clone(),
                    shared_fired.clone(),
                ));
            }
        });
        PgFaultProxy {
            url: url.to_string(),
            faults,
            fired,
        }
    }

    /// Arms `faults`: each applies once, in order, to whichever connection meets it first.
    pub fn arm(&self, faults: impl IntoIterator<Item = Fault>) {
        if let Ok(mut queue) = self.faults.lock() {
            queue.extend(faults);
        }
    }

    /// How many armed faults have happened.
    pub fn fired(&self) -> usize {
        self.fired.load(Ordering::SeqCst)
    }
}

/// One frame of the protocol: the type byte (none for the startup message) and the rest.
async fn read_frame(reader: &mut OwnedReadHalf, typed: bool) -> Option<Vec<u8>> {
    let mut frame = Vec::new();
    if typed {
        frame.push(reader.read_u8().await.ok()?);
    }
    let length = reader.read_u32().await.ok()?;
    frame.extend_from_slice(&length.to_be_bytes());
    let mut body = vec![0; (length as usize).checked_sub(4)?];
    reader.read_exact(&mut body).await.ok()?;
    frame.extend_from_slice(&body);
    Some(frame)
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    !needle.is_empty() && haystack.windows(needle.len()).any(|w| w == needle)
}

async fn relay(
    client: TcpStream,
    server: TcpStream,
    faults: Arc<Mutex<VecDeque<Fault>>>,
    fired: Arc<AtomicUsize>,
) {
    let (mut client_read, client_write) = client.into_split();
    let (server_read, mut server_write) = server.into_split();
    // Set when the server's answers are to be dropped and the connection closed after them.
    let losing = Arc::new(AtomicBool::new(false));
    let answers = tokio::spawn(answers(server_read, client_write, losing.clone()));
    let mut typed = false;
    // How many faults had fired when this connection met the current one's `after`.
    let mut primed: Option<usize> = None;
    while let Some(frame) = read_frame(&mut client_read, typed).await {
        typed = true;
        let kind = faults.lock().ok().and_then(|mut queue| {
            let fault = queue.front()?;
            let current = fired.load(Ordering::SeqCst);
            let ready = match fault.after {
                None => true,
                Some(_) if primed == Some(current) => true,
                Some(seen) => {
                    if contains(&frame, seen) {
                        primed = Some(current);
                    }
                    false
                }
            };
            if !(ready && contains(&frame, fault.on)) {
                return None;
            }
            let kind = fault.kind;
            queue.pop_front();
            fired.fetch_add(1, Ordering::SeqCst);
            Some(kind)
        });
        match kind {
            Some(FaultKind::Cut) => break,
            Some(FaultKind::LoseReply) => losing.store(true, Ordering::SeqCst),
            None => {}
        }
        if server_write.write_all(&frame).await.is_err() {
            break;
        }
    }
    // Dropping the halves closes both connections.
    answers.abort();
}

/// Relays the server's frames to the client; once `losing` is set, drops them until the server
/// is ready for the next query, then closes both sides.
async fn answers(mut server: OwnedReadHalf, mut client: OwnedWriteHalf, losing: Arc<AtomicBool>) {
    while let Some(frame) = read_frame(&mut server, true).await {
        if losing.load(Ordering::SeqCst) {
            if frame.first() == Some(&b'Z') {
                client.shutdown().await.ok();
                return;
            }
            continue;
        }
        if client.write_all(&frame).await.is_err() {
            return;
        }
    }
    client.shutdown().await.ok();
}
