//! A small SMTP server that keeps what it receives: the local runner's mail sink (so a newcomer
//! sees the mail arrive) and the tests' scriptable peer (per-recipient answers, a held DATA
//! answer, recorded credentials). Plain TCP; it offers `AUTH PLAIN LOGIN` and `8BITMIME`.
//! Not part of any deployed function.

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use base64::Engine;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, watch};

/// One SMTP answer: a code and its text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    pub code: u16,
    pub text: String,
}

impl Reply {
    pub fn new(code: u16, text: impl Into<String>) -> Reply {
        Reply {
            code,
            text: text.into(),
        }
    }
    fn ok() -> Reply {
        Reply::new(250, "OK")
    }
}

/// A message the sink received: envelope, the recipients it accepted, and the message itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Received {
    pub from: String,
    pub to: Vec<String>,
    pub data: String,
    /// The decoded `AUTH PLAIN` token (`\0user\0password`) or LOGIN pair, if any.
    pub auth: Option<String>,
}

impl Received {
    /// The value of a header of the message (first occurrence, unfolded).
    pub fn header(&self, name: &str) -> Option<String> {
        let head = self.data.split("\r\n\r\n").next()?;
        let mut value: Option<String> = None;
        for line in head.split("\r\n") {
            if let Some(current) = value.as_mut() {
                if line.starts_with([' ', '\t']) {
                    current.push_str(line.trim_start());
                    continue;
                }
                break;
            }
            if let Some((key, rest)) = line.split_once(':')
                && key.eq_ignore_ascii_case(name)
            {
                value = Some(rest.trim().to_string());
            }
        }
        value
    }
}

type OnMessage = Box<dyn Fn(&Received) + Send + Sync>;

#[derive(Default)]
struct State {
    rcpt: HashMap<String, VecDeque<Reply>>,
    data: VecDeque<Reply>,
    hold: bool,
    received: Vec<Received>,
    /// Every DATA upload seen, also those never answered.
    uploads: Vec<Received>,
    connections: usize,
    on_message: Option<OnMessage>,
}

/// The running sink; stops when dropped.
pub struct SmtpSink {
    pub addr: SocketAddr,
    state: Arc<Mutex<State>>,
    changed: Arc<Notify>,
    stop: watch::Sender<bool>,
}

fn lock(state: &Mutex<State>) -> MutexGuard<'_, State> {
    state
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl SmtpSink {
    /// Listens on `addr` (port 0: any free port).
    pub async fn start(addr: SocketAddr) -> std::io::Result<SmtpSink> {
        let listener = TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let state = Arc::new(Mutex::new(State::default()));
        let changed = Arc::new(Notify::new());
        let (stop, mut stopped) = watch::channel(false);
        let (loop_state, loop_changed) = (state.clone(), changed.clone());
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    accepted = listener.accept() => {
                        let Ok((stream, _)) = accepted else { continue };
                        let (state, changed, stop) =
                            (loop_state.clone(), loop_changed.clone(), stopped.clone());
                        tokio::spawn(async move {
                            let mut stop = stop;
                            tokio::select! {
                                _ = session(stream, state, changed) => {}
                                _ = stop.changed() => {}
                            }
                        });
                    }
                    _ = stopped.changed() => return,
                }
            }
        });
        Ok(SmtpSink {
            addr,
            state,
            changed,
            stop,
        })
    }

    /// Answers the next RCPT commands for `recipient` with `replies`, in order (then 250).
    pub fn reply_rcpt(&self, recipient: &str, replies: impl IntoIterator<Item = Reply>) {
        lock(&self.state)
            .rcpt
            .entry(recipient.to_ascii_lowercase())
            .or_default()
            .extend(replies);
    }

    /// Answers the next uploaded messages with `replies`, in order (then 250).
    pub fn reply_data(&self, replies: impl IntoIterator<Item = Reply>) {
        lock(&self.state).data.extend(replies);
    }

    /// While held, an uploaded message is recorded as an upload and never answered.
    pub fn hold_data(&self, hold: bool) {
        lock(&self.state).hold = hold;
    }

    /// Calls `f` with every message taken (the local runner prints and stores them).
    pub fn on_message(&self, f: impl Fn(&Received) + Send + Sync + 'static) {
        lock(&self.state).on_message = Some(Box::new(f));
    }

    /// The messages taken (answered 250), oldest first.
    pub fn received(&self) -> Vec<Received> {
        lock(&self.state).received.clone()
    }

    /// Every message uploaded, answered or not.
    pub fn uploads(&self) -> Vec<Received> {
        lock(&self.state).uploads.clone()
    }

    /// Connections opened so far.
    pub fn connections(&self) -> usize {
        lock(&self.state).connections
    }

    /// Waits until `n` messages were taken; `None` on timeout.
    pub async fn wait_for(&self, n: usize, timeout: Duration) -> Option<Vec<Received>> {
        self.wait_until(timeout, |s| s.received.len() >= n)
            .await
            .then(|| self.received())
    }

    /// Waits until `n` uploads were seen; false on timeout.
    pub async fn wait_for_uploads(&self, n: usize, timeout: Duration) -> bool {
        self.wait_until(timeout, |s| s.uploads.len() >= n).await
    }

    async fn wait_until(&self, timeout: Duration, done: impl Fn(&State) -> bool) -> bool {
        let until = tokio::time::Instant::now() + timeout;
        loop {
            let notified = self.changed.notified();
            if done(&lock(&self.state)) {
                return true;
            }
            if tokio::time::timeout_at(until, notified).await.is_err() {
                return done(&lock(&self.state));
            }
        }
    }
}

impl Drop for SmtpSink {
    fn drop(&mut self) {
        self.stop.send(true).ok();
    }
}

fn decode(b64: &str) -> String {
    base64::engine::general_purpose::STANDARD
        .decode(b64.trim())
        .map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
        .unwrap_or_default()
}

/// The address inside `FROM:<a>` / `TO:<a>`.
fn path_of(argument: &str) -> String {
    let start = argument.find('<').map_or(0, |i| i + 1);
    let end = argument[start..]
        .find('>')
        .map_or(argument.len(), |i| start + i);
    argument[start..end].to_string()
}

async fn session(stream: TcpStream, state: Arc<Mutex<State>>, changed: Arc<Notify>) {
    lock(&state).connections += 1;
    let (read, mut write) = stream.into_split();
    let mut reader = BufReader::new(read);
    let say = async |write: &mut tokio::net::tcp::OwnedWriteHalf, text: &str| {
        write.write_all(text.as_bytes()).await.is_ok()
    };
    if !say(&mut write, "220 k2b-sink ESMTP\r\n").await {
        return;
    }
    let mut from = String::new();
    let mut to: Vec<String> = Vec::new();
    let mut auth: Option<String> = None;
    let mut line = String::new();
    loop {
        line.clear();
        match reader.read_line(&mut line).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        let command = line.trim_end();
        let (verb, argument) = command.split_once(' ').unwrap_or((command, ""));
        let reply = match verb.to_ascii_uppercase().as_str() {
            "EHLO" => {
                "250-k2b-sink\r\n250-8BITMIME\r\n250-AUTH PLAIN LOGIN\r\n250 SMTPUTF8\r\n".into()
            }
            "HELO" => "250 k2b-sink\r\n".to_string(),
            "AUTH" => {
                let mut parts = argument.split_whitespace();
                match parts.next().map(str::to_ascii_uppercase).as_deref() {
                    Some("PLAIN") => {
                        auth = Some(decode(parts.next().unwrap_or("")));
                        "235 2.7.0 Authentication successful\r\n".to_string()
                    }
                    Some("LOGIN") => {
                        let mut pair = Vec::new();
                        for prompt in ["334 VXNlcm5hbWU6\r\n", "334 UGFzc3dvcmQ6\r\n"] {
                            if !say(&mut write, prompt).await {
                                return;
                            }
                            line.clear();
                            if reader.read_line(&mut line).await.unwrap_or(0) == 0 {
                                return;
                            }
                            pair.push(decode(&line));
                        }
                        auth = Some(format!("\0{}", pair.join("\0")));
                        "235 2.7.0 Authentication successful\r\n".to_string()
                    }
                    _ => "504 Unrecognized authentication type\r\n".to_string(),
                }
            }
            "MAIL" => {
                from = path_of(argument);
                to.clear();
                "250 OK\r\n".to_string()
            }
            "RCPT" => {
                let recipient = path_of(argument);
                let reply = lock(&state)
                    .rcpt
                    .get_mut(&recipient.to_ascii_lowercase())
                    .and_then(VecDeque::pop_front)
                    .unwrap_or_else(Reply::ok);
                if reply.code < 300 {
                    to.push(recipient);
                }
                format!("{} {}\r\n", reply.code, reply.text)
            }
            "DATA" => {
                if !say(&mut write, "354 End data with <CR><LF>.<CR><LF>\r\n").await {
                    return;
                }
                let mut data = Vec::new();
                loop {
                    let mut chunk = Vec::new();
                    match reader.read_until(b'\n', &mut chunk).await {
                        Ok(0) | Err(_) => return,
                        Ok(_) => {}
                    }
                    if chunk == b".\r\n" {
                        break;
                    }
                    let unstuffed = if chunk.starts_with(b"..") {
                        &chunk[1..]
                    } else {
                        &chunk[..]
                    };
                    data.extend_from_slice(unstuffed);
                }
                let message = Received {
                    from: from.clone(),
                    to: std::mem::take(&mut to),
                    data: String::from_utf8_lossy(&data).into_owned(),
                    auth: auth.clone(),
                };
                let (hold, reply) = {
                    let mut state = lock(&state);
                    state.uploads.push(message.clone());
                    let reply = if state.hold {
                        None
                    } else {
                        Some(state.data.pop_front().unwrap_or_else(Reply::ok))
                    };
                    (state.hold, reply)
                };
                changed.notify_waiters();
                let Some(reply) = reply.filter(|_| !hold) else {
                    // Held: never answer; the client gives up or dies.
                    let mut rest = Vec::new();
                    let _ = reader.read_to_end(&mut rest).await;
                    return;
                };
                if reply.code < 300 {
                    let mut state = lock(&state);
                    if let Some(f) = &state.on_message {
                        f(&message);
                    }
                    state.received.push(message);
                }
                changed.notify_waiters();
                format!("{} {}\r\n", reply.code, reply.text)
            }
            "RSET" => {
                to.clear();
                "250 OK\r\n".to_string()
            }
            "NOOP" => "250 OK\r\n".to_string(),
            "QUIT" => {
                say(&mut write, "221 Bye\r\n").await;
                return;
            }
            _ => "502 Command not implemented\r\n".to_string(),
        };
        if !say(&mut write, &reply).await {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_are_read_unfolded_and_case_insensitively() {
        let received = Received {
            from: "a@example.org".into(),
            to: vec![],
            data: "Subject: one\r\n two\r\nmessage-id: <x@y>\r\n\r\nSubject: body".into(),
            auth: None,
        };
        assert_eq!(received.header("subject").as_deref(), Some("onetwo"));
        assert_eq!(received.header("Message-ID").as_deref(), Some("<x@y>"));
        assert_eq!(received.header("X-None"), None);
    }

    #[test]
    fn envelope_paths_are_read_from_their_brackets() {
        assert_eq!(
            path_of("FROM:<a@example.org> BODY=8BITMIME"),
            "a@example.org"
        );
        assert_eq!(path_of("TO:<b@example.org>"), "b@example.org");
    }
}
