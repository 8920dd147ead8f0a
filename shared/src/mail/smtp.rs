//! One SMTP conversation per attempt (spec mail §6, step 6–8): a new connection, implicit TLS or
//! STARTTLS when offered, authentication only with a user, the envelope one recipient at a time
//! so each rejection is recorded on its own, then the message. Every text kept from the server
//! passes [`redact`] first.

use std::time::Duration;

use base64::Engine;
use lettre::message::header::{ContentType, HeaderName, HeaderValue};
use lettre::message::{Attachment, Mailbox, MultiPart, SinglePart};
use lettre::transport::smtp::authentication::{Credentials, Mechanism};
use lettre::transport::smtp::client::{
    AsyncSmtpConnection, AsyncTokioStream, Certificate, TlsParameters,
};
use lettre::transport::smtp::commands::{Data, Mail, Rcpt};
use lettre::transport::smtp::extension::{ClientId, MailBodyParameter, MailParameter};
use lettre::{Address, Message};

/// Opening the TCP connection.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// The server's greeting and EHLO after the connection opened.
pub const GREETING_TIMEOUT: Duration = Duration::from_secs(10);
/// Any one command or the message upload waiting for its answer.
pub const SOCKET_TIMEOUT: Duration = Duration::from_secs(60);
/// The whole attempt, connection to the final answer.
pub const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(60);

/// Where and how to connect, with the credentials of the profile (never logged).
pub struct Server<'a> {
    pub host: &'a str,
    pub port: u16,
    /// Implicit TLS; otherwise STARTTLS when the server offers it.
    pub secure: bool,
    pub user: Option<&'a str>,
    pub password: Option<&'a str>,
    /// Roots trusted besides the public ones (a private relay's CA).
    pub extra_roots: &'a [Vec<u8>],
    /// The name this side gives in EHLO.
    pub hello: &'a str,
}

/// One attachment as it goes out.
pub struct OutgoingAttachment {
    pub filename: String,
    pub content_type: String,
    pub bytes: Vec<u8>,
}

/// Everything a message carries on the wire.
pub struct Outgoing<'a> {
    pub from_address: &'a str,
    pub display_name: &'a str,
    pub to: &'a [String],
    pub reply_to: Option<&'a str>,
    pub subject: &'a str,
    pub text: &'a str,
    pub html: Option<&'a str>,
    pub headers: &'a [(String, String)],
    pub message_id: &'a str,
    pub attachments: Vec<OutgoingAttachment>,
}

/// A recipient the server refused while the message went to others (or to none).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    pub recipient: String,
    pub code: Option<u16>,
    pub reason: String,
}

/// The server took the message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Accepted {
    /// The answer to the message (`250 …`), redacted.
    pub response: String,
    pub rejected: Vec<Rejection>,
}

/// The attempt failed: a negative answer (`code`), or none at all (connection, TLS, timeout).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    pub code: Option<u16>,
    /// Redacted.
    pub message: String,
    /// Every recipient was refused: these are the refusals.
    pub all_rejected: Option<Vec<Rejection>>,
}

impl Failure {
    fn new(code: Option<u16>, message: String) -> Failure {
        Failure {
            code,
            message,
            all_rejected: None,
        }
    }
}

/// Replaces the profile's user and password, the PLAIN token `\0user\0password` and the base64
/// forms of each (as a server may echo them) with `[REDACTED]`.
pub fn redact(text: &str, user: Option<&str>, password: Option<&str>) -> String {
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    let user = user.filter(|u| !u.is_empty());
    let password = password.filter(|p| !p.is_empty());
    let mut secrets = Vec::new();
    if let (Some(user), Some(password)) = (user, password) {
        let plain = format!("\0{user}\0{password}");
        secrets.push(b64(&plain));
        secrets.push(plain);
    }
    for secret in [password, user].into_iter().flatten() {
        secrets.push(b64(secret));
        secrets.push(secret.to_string());
    }
    // Longest first, so a secret inside another is not replaced half.
    secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
    let mut out = text.to_string();
    for secret in secrets {
        out = out.replace(&secret, "[REDACTED]");
    }
    out
}

/// The redacted text of an SMTP error: `<code> <server text>` for an answer, else a plain
/// description (never the server's raw bytes beyond its reply).
fn describe(error: &lettre::transport::smtp::Error, server: &Server<'_>) -> Failure {
    let code = error.status().map(u16::from);
    let text = match (code, std::error::Error::source(error)) {
        (Some(code), Some(source)) => format!("{code} {source}"),
        (Some(code), None) => code.to_string(),
        (None, _) => error.to_string(),
    };
    Failure::new(code, redact(&text, server.user, server.password))
}

fn timed_out(what: &str) -> Failure {
    Failure::new(None, format!("SMTP {what} timed out."))
}

/// The message as bytes: From with the display name, To, Reply-To, Subject, the fixed
/// Message-ID, the app's allowed headers, text (and HTML) and attachments.
pub fn build(message: &Outgoing<'_>, to: &[Address]) -> Result<Vec<u8>, Failure> {
    let invalid = |what: &str| Failure::new(None, format!("The message cannot be built: {what}."));
    let from_address: Address = message
        .from_address
        .parse()
        .map_err(|_| invalid("the profile's from address"))?;
    let mut builder = Message::builder()
        .from(Mailbox::new(
            Some(message.display_name.to_string()),
            from_address,
        ))
        .subject(message.subject)
        .message_id(Some(message.message_id.to_string()))
        .date_now();
    for address in to {
        builder = builder.to(Mailbox::new(None, address.clone()));
    }
    if let Some(reply_to) = message.reply_to {
        let address: Address = reply_to
            .parse()
            .map_err(|_| invalid("the reply-to address"))?;
        builder = builder.reply_to(Mailbox::new(None, address));
    }
    let plain = || SinglePart::plain(message.text.to_string());
    let alternative =
        |html: &str| MultiPart::alternative_plain_html(message.text.to_string(), html.to_string());
    let built = match (message.html, message.attachments.is_empty()) {
        (None, true) => builder.singlepart(plain()),
        (Some(html), true) => builder.multipart(alternative(html)),
        (html, false) => {
            let mut mixed = match html {
                Some(html) => MultiPart::mixed().multipart(alternative(html)),
                None => MultiPart::mixed().singlepart(plain()),
            };
            for attachment in &message.attachments {
                let content_type = ContentType::parse(&attachment.content_type)
                    .or_else(|_| ContentType::parse("application/octet-stream"))
                    .map_err(|_| invalid("an attachment's content type"))?;
                mixed = mixed.singlepart(
                    Attachment::new(attachment.filename.clone())
                        .body(attachment.bytes.clone(), content_type),
                );
            }
            builder.multipart(mixed)
        }
    };
    let mut email = built.map_err(|_| invalid("its headers"))?;
    for (name, value) in message.headers {
        let name =
            HeaderName::new_from_ascii(name.clone()).map_err(|_| invalid("a header name"))?;
        email
            .headers_mut()
            .insert_raw(HeaderValue::new(name, value.clone()));
    }
    Ok(email.formatted())
}

/// Sends one message in a new connection. `Ok` when the server took it (some recipients may
/// have been refused); the caller classifies a [`Failure`].
pub async fn send(server: &Server<'_>, message: &Outgoing<'_>) -> Result<Accepted, Failure> {
    match tokio::time::timeout(ATTEMPT_TIMEOUT, converse(server, message)).await {
        Ok(result) => result,
        Err(_) => Err(timed_out("attempt")),
    }
}

fn tls_parameters(server: &Server<'_>) -> Result<TlsParameters, Failure> {
    let mut builder = TlsParameters::builder(server.host.to_string());
    for pem in server.extra_roots {
        let certificate = Certificate::from_pem(pem)
            .map_err(|_| Failure::new(None, "A trusted SMTP certificate is unreadable.".into()))?;
        builder = builder.add_root_certificate(certificate);
    }
    builder
        .build_rustls()
        .map_err(|e| Failure::new(None, format!("SMTP TLS cannot be set up: {e}")))
}

async fn step<T>(
    what: &str,
    server: &Server<'_>,
    future: impl Future<Output = Result<T, lettre::transport::smtp::Error>>,
) -> Result<T, Failure> {
    match tokio::time::timeout(SOCKET_TIMEOUT, future).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(error)) => Err(describe(&error, server)),
        Err(_) => Err(timed_out(what)),
    }
}

/// Opens the connection: TCP with `TCP_NODELAY` (a command and the message's end are small
/// writes that must not wait for the server's delayed ACK), implicit TLS for a secure profile,
/// then the greeting and EHLO.
async fn open(server: &Server<'_>, hello: &ClientId) -> Result<AsyncSmtpConnection, Failure> {
    let connect = async {
        let addresses = tokio::net::lookup_host((server.host, server.port))
            .await
            .map_err(|e| Failure::new(None, format!("SMTP host not resolved: {e}")))?;
        let mut last = None;
        for address in addresses {
            match tokio::net::TcpStream::connect(address).await {
                Ok(stream) => return Ok(stream),
                Err(error) => last = Some(error),
            }
        }
        Err(Failure::new(
            None,
            match last {
                Some(error) => format!("SMTP connection failed: {error}"),
                None => "SMTP host resolved to no address.".to_string(),
            },
        ))
    };
    let tcp = match tokio::time::timeout(CONNECT_TIMEOUT, connect).await {
        Ok(result) => result?,
        Err(_) => return Err(timed_out("connection")),
    };
    tcp.set_nodelay(true).ok();
    let greeted = async {
        let stream: Box<dyn AsyncTokioStream> = if server.secure {
            Box::new(implicit_tls(server, tcp).await?)
        } else {
            Box::new(tcp)
        };
        AsyncSmtpConnection::connect_with_transport(stream, hello)
            .await
            .map_err(|error| describe(&error, server))
    };
    match tokio::time::timeout(GREETING_TIMEOUT, greeted).await {
        Ok(result) => result,
        Err(_) => Err(timed_out("greeting")),
    }
}

/// A TLS stream from the first byte (SMTPS), verified against the public roots and the
/// profile's extra ones.
#[derive(Debug)]
struct TlsStream(tokio_rustls::client::TlsStream<tokio::net::TcpStream>);

impl tokio::io::AsyncRead for TlsStream {
    fn poll_read(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.get_mut().0).poll_read(cx, buf)
    }
}

impl tokio::io::AsyncWrite for TlsStream {
    fn poll_write(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.get_mut().0).poll_write(cx, buf)
    }
    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.get_mut().0).poll_flush(cx)
    }
    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.get_mut().0).poll_shutdown(cx)
    }
}

impl AsyncTokioStream for TlsStream {
    fn peer_addr(&self) -> std::io::Result<std::net::SocketAddr> {
        self.0.get_ref().0.peer_addr()
    }
}

async fn implicit_tls(
    server: &Server<'_>,
    tcp: tokio::net::TcpStream,
) -> Result<TlsStream, Failure> {
    use rustls::pki_types::pem::PemObject;
    let setup = |what: &str| Failure::new(None, format!("SMTP TLS cannot be set up: {what}."));
    let mut roots = rustls::RootCertStore {
        roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
    };
    for pem in server.extra_roots {
        for certificate in rustls::pki_types::CertificateDer::pem_slice_iter(pem) {
            let certificate =
                certificate.map_err(|_| setup("a trusted certificate is unreadable"))?;
            roots
                .add(certificate)
                .map_err(|_| setup("a trusted certificate is invalid"))?;
        }
    }
    let provider = std::sync::Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|_| setup("no protocol version"))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let name = rustls::pki_types::ServerName::try_from(server.host.to_string())
        .map_err(|_| setup("the host is not a valid server name"))?;
    let connector = tokio_rustls::TlsConnector::from(std::sync::Arc::new(config));
    connector
        .connect(name, tcp)
        .await
        .map(TlsStream)
        .map_err(|e| Failure::new(None, format!("SMTP TLS handshake failed: {e}")))
}

async fn converse(server: &Server<'_>, message: &Outgoing<'_>) -> Result<Accepted, Failure> {
    let mut rejected = Vec::new();
    let mut to = Vec::new();
    for recipient in message.to {
        match recipient.parse::<Address>() {
            Ok(address) => to.push((recipient.clone(), address)),
            Err(_) => rejected.push(Rejection {
                recipient: recipient.clone(),
                code: None,
                reason: "Recipient rejected.".to_string(),
            }),
        }
    }
    let hello = ClientId::Domain(server.hello.to_string());
    let mut conn = open(server, &hello).await?;
    let result = async {
        if !server.secure && conn.can_starttls() {
            let parameters = tls_parameters(server)?;
            step("STARTTLS", server, conn.starttls(parameters, &hello)).await?;
        }
        if let Some(user) = server.user.filter(|u| !u.is_empty()) {
            let credentials =
                Credentials::new(user.to_string(), server.password.unwrap_or("").to_string());
            step(
                "authentication",
                server,
                conn.auth(&[Mechanism::Plain, Mechanism::Login], &credentials),
            )
            .await?;
        }
        let from: Address = message
            .from_address
            .parse()
            .map_err(|_| Failure::new(None, "The profile's from address is invalid.".into()))?;
        let wire = build(
            message,
            &to.iter().map(|(_, a)| a.clone()).collect::<Vec<_>>(),
        )?;
        let mut options = Vec::new();
        if !wire.is_ascii() {
            options.push(MailParameter::Body(MailBodyParameter::EightBitMime));
        }
        step(
            "MAIL FROM",
            server,
            conn.command(Mail::new(Some(from), options)),
        )
        .await?;
        let mut taken = 0usize;
        for (recipient, address) in &to {
            match tokio::time::timeout(
                SOCKET_TIMEOUT,
                conn.command(Rcpt::new(address.clone(), vec![])),
            )
            .await
            {
                Ok(Ok(_)) => taken += 1,
                Ok(Err(error)) if error.status().is_some() => {
                    let failure = describe(&error, server);
                    rejected.push(Rejection {
                        recipient: recipient.clone(),
                        code: failure.code,
                        reason: failure.message,
                    });
                }
                Ok(Err(error)) => return Err(describe(&error, server)),
                Err(_) => return Err(timed_out("RCPT TO")),
            }
        }
        if taken == 0 {
            let first = rejected.first();
            return Err(Failure {
                code: first.and_then(|r| r.code),
                message: first
                    .map(|r| r.reason.clone())
                    .unwrap_or_else(|| "Every recipient was rejected.".to_string()),
                all_rejected: Some(rejected.clone()),
            });
        }
        step("DATA", server, conn.command(Data)).await?;
        let response = step("message upload", server, conn.message(&wire)).await?;
        let text = response.message().collect::<Vec<_>>().join(" ");
        let line = format!("{} {}", u16::from(response.code()), text);
        Ok(Accepted {
            response: redact(line.trim_end(), server.user, server.password),
            rejected: std::mem::take(&mut rejected),
        })
    }
    .await;
    // The answer is what counts; a failed QUIT changes nothing. After a failure without an
    // SMTP answer (TLS, network, timeout) the stream may be gone: it is dropped, not spoken to.
    let session_intact = match &result {
        Ok(_) => true,
        Err(failure) => failure.code.is_some() && !conn.has_broken(),
    };
    if session_intact {
        let _ = tokio::time::timeout(Duration::from_secs(2), conn.quit()).await;
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redaction_covers_the_user_the_password_and_their_plain_and_base64_forms() {
        let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
        let text = format!(
            "535 bad auth for mailer pw s3cret ({}) ({}) ({})",
            b64("\0mailer\0s3cret"),
            b64("s3cret"),
            b64("mailer")
        );
        let redacted = redact(&text, Some("mailer"), Some("s3cret"));
        assert!(!redacted.contains("mailer"), "{redacted}");
        assert!(!redacted.contains("s3cret"), "{redacted}");
        assert!(!redacted.contains(&b64("s3cret")), "{redacted}");
        assert!(!redacted.contains(&b64("\0mailer\0s3cret")), "{redacted}");
        assert!(redacted.starts_with("535 bad auth for [REDACTED] pw [REDACTED]"));
    }

    #[test]
    fn redaction_without_credentials_keeps_the_text() {
        assert_eq!(redact("451 try later", None, None), "451 try later");
        assert_eq!(redact("451 try later", Some(""), Some("")), "451 try later");
    }

    #[test]
    fn a_built_message_carries_the_fixed_id_the_display_name_and_the_headers() {
        let to = vec!["user@example.org".to_string()];
        let headers = vec![("X-App".to_string(), "inventory".to_string())];
        let outgoing = Outgoing {
            from_address: "alerts@example.org",
            display_name: "Inventory",
            to: &to,
            reply_to: Some("help@example.org"),
            subject: "Stock low",
            text: "Only 3 left.",
            html: Some("<p>Only 3 left.</p>"),
            headers: &headers,
            message_id: "<abc@example.org>",
            attachments: vec![OutgoingAttachment {
                filename: "list.csv".into(),
                content_type: "text/csv".into(),
                bytes: b"a,b\n".to_vec(),
            }],
        };
        let address: Address = "user@example.org".parse().expect("address");
        let wire = String::from_utf8(build(&outgoing, &[address]).expect("built")).expect("utf8");
        assert!(
            wire.contains("From: Inventory <alerts@example.org>"),
            "{wire}"
        );
        assert!(wire.contains("Message-ID: <abc@example.org>"), "{wire}");
        assert!(wire.contains("X-App: inventory"), "{wire}");
        assert!(wire.contains("Reply-To: help@example.org"), "{wire}");
        assert!(wire.contains("filename=\"list.csv\""), "{wire}");
        assert!(wire.contains("text/html"), "{wire}");
    }
}
