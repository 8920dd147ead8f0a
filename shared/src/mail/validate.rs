//! What apps hand outgoing mail, checked before anything touches Postgres or the object store:
//! messages and batches (spec mail §3), log filters, pages and cursors (§7).
//!
//! Every parser is strict (unknown fields are refused) and answers `bad_input` with one fixed
//! message, so a caller never learns which address or header tripped the check. A JSON `null`
//! counts as an absent optional field: it carries no value, and Rust clients often serialise
//! `None` that way.

use std::collections::HashSet;
use std::fmt;

use base64::Engine;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use bytes::Bytes;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use utoipa::{PartialSchema, ToSchema};
use uuid::Uuid;

use super::{MailCode, MailFault};

/// Recipients per message; more belongs in a batch.
pub const MAX_RECIPIENTS: usize = 50;
/// Characters of an address (RFC 5321 path limits: 64 local + 255 domain + `@`).
pub const MAX_ADDRESS_CHARS: usize = 320;
/// Characters of a subject, a display name, a filename or a content type: RFC 5322's line limit.
pub const MAX_SUBJECT_CHARS: usize = 998;
/// UTF-8 bytes of the text and of the HTML body.
pub const MAX_BODY_BYTES: usize = 512 * 1024;
/// Attachments per message.
pub const MAX_ATTACHMENTS: usize = 20;
/// Bytes of the custom header block, counted as `name: value\r\n` per header.
pub const MAX_HEADER_BLOCK_BYTES: usize = 8192;
/// Messages per batch.
pub const MAX_BATCH: usize = 1000;
/// Characters of an idempotency key, of each `ref` part and of an actor's id and name.
pub const MAX_KEY_CHARS: usize = 200;
/// Log records per page when the caller does not say.
pub const DEFAULT_PER_PAGE: i64 = 50;
/// Log records per page at most.
pub const MAX_PER_PAGE: i64 = 100;
/// The highest page number (JavaScript's largest safe integer): `(page − 1) × perPage` then
/// always fits an `i64` offset.
pub const MAX_PAGE: i64 = (1 << 53) - 1;
/// Characters of a page cursor.
pub const MAX_CURSOR_CHARS: usize = 1024;
/// Apps one listing may read: the caller plus the 100 grants an app may hold.
pub const MAX_FILTER_APPS: usize = 101;
/// Message ids one filter may name.
pub const MAX_FILTER_IDS: usize = 100;
/// Characters of a search term, after trimming.
pub const MAX_QUERY_CHARS: usize = 200;
/// Consecutive letters or digits a search term needs: the trigram index cannot narrow less.
pub const MIN_SEARCH_RUN: usize = 3;

/// The answer to any invalid message; which field failed stays unsaid.
pub const INVALID_MESSAGE: &str = "Invalid outgoing mail message.";
/// The answer to any invalid batch.
pub const INVALID_BATCH: &str = "Provide 1–1000 valid messages with distinct keys.";
/// The answer to any invalid log filter or page parameters.
pub const INVALID_FILTER: &str = "Invalid outgoing mail filter or page.";
/// The answer to a cursor [`encode_cursor`] did not make.
pub const INVALID_CURSOR: &str = "Invalid outgoing mail cursor.";

/// The custom headers an app may set besides `X-*`; everything else is Core's to write.
const ALLOWED_HEADERS: &[&str] = &[
    "list-id",
    "list-unsubscribe",
    "list-unsubscribe-post",
    "in-reply-to",
    "references",
    "auto-submitted",
    "precedence",
];

/// One message as an app handed it, validated; addresses and texts are kept exactly as given.
#[derive(Clone)]
pub struct MailMessage {
    pub to: Vec<String>,
    pub subject: String,
    pub text: String,
    /// Unsanitised; the store sanitises it on insert.
    pub html: Option<String>,
    pub from_name: Option<String>,
    pub reply_to: Option<String>,
    pub attachments: Vec<AttachmentInput>,
    /// In the order the JSON object iterates them; names are distinct ignoring case.
    pub headers: Vec<(String, String)>,
    pub profile: Option<String>,
    pub reference: Option<MailRef>,
    pub actor: Option<MailActor>,
    pub key: Option<String>,
}

impl MailMessage {
    /// The uploads this message names.
    pub fn uploads(&self) -> Vec<Uuid> {
        self.attachments
            .iter()
            .filter_map(|a| match a.source {
                AttachmentSource::Upload(id) => Some(id),
                AttachmentSource::Inline(_) => None,
            })
            .collect()
    }
}

/// The uploads a body names that may not be a valid message or batch (one message or an array
/// of them): every `attachments[].upload` that is a UUID, so a refused call can delete them.
pub fn named_uploads(body: &Value) -> Vec<Uuid> {
    let messages = match body {
        Value::Array(items) => items.iter().collect(),
        other => vec![other],
    };
    messages
        .into_iter()
        .filter_map(|m| m.get("attachments")?.as_array())
        .flatten()
        .filter_map(|a| a.get("upload")?.as_str()?.parse().ok())
        .collect()
}

// Logs must never see addresses, subjects, bodies or attachment bytes, so only shapes are printed.
impl fmt::Debug for MailMessage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MailMessage")
            .field("recipients", &self.to.len())
            .field("text_bytes", &self.text.len())
            .field("html_bytes", &self.html.as_ref().map(String::len))
            .field("attachments", &self.attachments.len())
            .field("headers", &self.headers.len())
            .field("profile", &self.profile)
            .field("keyed", &self.key.is_some())
            .finish_non_exhaustive()
    }
}

/// An attachment: its bytes inline, or an upload made earlier in the same call.
#[derive(Clone)]
pub struct AttachmentInput {
    pub filename: String,
    pub content_type: String,
    pub source: AttachmentSource,
}

impl fmt::Debug for AttachmentInput {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AttachmentInput")
            .field("content_type", &self.content_type)
            .field("source", &self.source)
            .finish_non_exhaustive()
    }
}

/// Where an attachment's bytes come from.
#[derive(Clone)]
pub enum AttachmentSource {
    /// Decoded from standard, padded base64 (`content`).
    Inline(Bytes),
    /// An upload id (`upload`).
    Upload(Uuid),
}

impl fmt::Debug for AttachmentSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AttachmentSource::Inline(bytes) => write!(f, "Inline({} bytes)", bytes.len()),
            AttachmentSource::Upload(id) => write!(f, "Upload({id})"),
        }
    }
}

/// What the app's own records call this message (`ref`), for finding it again in the log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct MailRef {
    /// 1–200 characters, no NUL.
    #[schema(min_length = 1, max_length = 200, pattern = r"^[^\u0000]*$")]
    pub scope: String,
    /// 1–200 characters, no NUL.
    #[schema(min_length = 1, max_length = 200, pattern = r"^[^\u0000]*$")]
    pub id: String,
}

/// Who asked the app to send, snapshotted into the row and the audit.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct MailActor {
    #[serde(rename = "type")]
    pub kind: ActorKind,
    /// The user's or service account's id: 1–200 characters, no NUL.
    #[schema(min_length = 1, max_length = 200, pattern = r"^[^\u0000]*$")]
    pub id: String,
    /// A display name: at most 200 characters on one line (no CR, LF or NUL).
    #[schema(max_length = 200, pattern = r"^[^\r\n\u0000]*$")]
    pub name: Option<String>,
}

/// The kind of actor, as JSON and as stored: `user` or `service_account`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
#[schema(as = MailActorKind)]
pub enum ActorKind {
    User,
    ServiceAccount,
}

impl ActorKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ActorKind::User => "user",
            ActorKind::ServiceAccount => "service_account",
        }
    }
}

/// One message as an app hands it (`send`, and each item of `enqueue`). Strict: unknown fields
/// are refused, and `null` counts as an absent optional field. Any failure is `bad_input`
/// "Invalid outgoing mail message." without saying which field failed.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
#[schema(as = MailMessage)]
pub struct RawMessage {
    /// 1–50 recipients, each an HTML5 "valid e-mail address" of at most 320 characters.
    #[schema(
        min_items = 1,
        max_items = 50,
        max_length = 320,
        pattern = r"^[a-zA-Z0-9.!#$%&'*+/=?^_`{|}~-]+@[a-zA-Z0-9](?:[a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?(?:\.[a-zA-Z0-9](?:[a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?)*$"
    )]
    to: Vec<String>,
    /// At most 998 characters on one line (no CR, LF or NUL); may be empty.
    #[schema(max_length = 998, pattern = r"^[^\r\n\u0000]*$")]
    subject: String,
    /// The plain text: at most 512 KiB of UTF-8 (524288 bytes), no NUL.
    #[schema(max_length = 524288, pattern = r"^[^\u0000]*$")]
    text: String,
    /// An HTML alternative (sanitised when stored; never listed): at most 512 KiB of UTF-8
    /// (524288 bytes), no NUL.
    #[schema(max_length = 524288, pattern = r"^[^\u0000]*$")]
    html: Option<String>,
    /// The sender's display name (the address is the profile's): at most 998 characters on one
    /// line.
    #[schema(max_length = 998, pattern = r"^[^\r\n\u0000]*$")]
    from_name: Option<String>,
    /// One address, as for `to`.
    #[schema(
        max_length = 320,
        pattern = r"^[a-zA-Z0-9.!#$%&'*+/=?^_`{|}~-]+@[a-zA-Z0-9](?:[a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?(?:\.[a-zA-Z0-9](?:[a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?)*$"
    )]
    reply_to: Option<String>,
    /// At most 20 attachments; their total size is limited by the profile's
    /// `maxAttachmentBytes` (`attachments_too_large`).
    #[schema(max_items = 20)]
    attachments: Option<Vec<RawAttachment>>,
    /// Custom headers by name: `X-*` (not `X-Cloud-*`) and `List-Id`, `List-Unsubscribe`,
    /// `List-Unsubscribe-Post`, `In-Reply-To`, `References`, `Auto-Submitted`, `Precedence`,
    /// ignoring case, each name once ignoring case; values on one line. All of them together, as
    /// `name: value\r\n` each, hold at most 8192 bytes.
    #[schema(schema_with = custom_headers_schema)]
    headers: Option<Map<String, Value>>,
    /// The profile to send with (else the default): a profile key.
    #[schema(pattern = "^[a-z0-9][a-z0-9-]{0,62}$")]
    profile: Option<String>,
    #[serde(rename = "ref")]
    reference: Option<MailRef>,
    actor: Option<MailActor>,
    /// An idempotency key of the app (case-sensitive): a known key answers its message as it
    /// is. 1–200 characters, no NUL.
    #[schema(min_length = 1, max_length = 200, pattern = r"^[^\u0000]*$")]
    key: Option<String>,
}

/// The OpenAPI schema of a message's custom headers (see [`RawMessage`]).
fn custom_headers_schema() -> utoipa::openapi::schema::Object {
    use utoipa::openapi::schema::{ObjectBuilder, SchemaType, Type};
    ObjectBuilder::new()
        .schema_type(
            [Type::Object, Type::Null]
                .into_iter()
                .collect::<SchemaType>(),
        )
        .property_names(Some(
            ObjectBuilder::new()
                .schema_type(Type::String)
                .pattern(Some(HEADER_NAME_PATTERN)),
        ))
        .additional_properties(Some(
            ObjectBuilder::new()
                .schema_type(Type::String)
                .pattern(Some(ONE_LINE_PATTERN)),
        ))
        .description(Some(
            "Custom headers by name: `X-*` (not `X-Cloud-*`) and `List-Id`, `List-Unsubscribe`, \
             `List-Unsubscribe-Post`, `In-Reply-To`, `References`, `Auto-Submitted`, \
             `Precedence`, ignoring case, each name once ignoring case; values on one line. All of \
             them together, as `name: value\\r\\n` each, hold at most 8192 bytes.",
        ))
        .build()
}

/// A custom header name an app may set ([`is_header_name`], [`is_allowed_header`]).
const HEADER_NAME_PATTERN: &str = "^(?:[Xx]-(?![Cc][Ll][Oo][Uu][Dd]-)[!-9;-~]*|[Ll][Ii][Ss][Tt]-[Ii][Dd]|[Ll][Ii][Ss][Tt]-[Uu][Nn][Ss][Uu][Bb][Ss][Cc][Rr][Ii][Bb][Ee](?:-[Pp][Oo][Ss][Tt])?|[Ii][Nn]-[Rr][Ee][Pp][Ll][Yy]-[Tt][Oo]|[Rr][Ee][Ff][Ee][Rr][Ee][Nn][Cc][Ee][Ss]|[Aa][Uu][Tt][Oo]-[Ss][Uu][Bb][Mm][Ii][Tt][Tt][Ee][Dd]|[Pp][Rr][Ee][Cc][Ee][Dd][Ee][Nn][Cc][Ee])$";
/// Text on one line: no CR, LF or NUL ([`has_line_break_or_nul`]).
const ONE_LINE_PATTERN: &str = r"^[^\r\n\u0000]*$";

/// An attachment of a message: its bytes inline (`content`) or an upload made before
/// (`upload`), exactly one of the two.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
#[schema(as = MailAttachmentInput)]
pub struct RawAttachment {
    /// 1–998 characters on one line (no CR, LF or NUL).
    #[schema(min_length = 1, max_length = 998, pattern = r"^[^\r\n\u0000]*$")]
    filename: String,
    /// 1–998 characters on one line (no CR, LF or NUL).
    #[schema(min_length = 1, max_length = 998, pattern = r"^[^\r\n\u0000]*$")]
    content_type: String,
    /// The bytes in standard, padded base64 (at most 25 MiB decoded; the request itself is at
    /// most 4 MiB: larger attachments go through an upload). Not together with `upload`.
    #[schema(
        content_encoding = "base64",
        pattern = "^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/][AQgw]==|[A-Za-z0-9+/]{2}[AEIMQUYcgkosw048]=)?$"
    )]
    content: Option<String>,
    /// The id of an upload of this app (`POST /api/mail/v1/uploads`) no message has used yet,
    /// created within the last hour, in its hyphenated form. Not together with `content`.
    #[schema(
        format = Uuid,
        pattern = "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$"
    )]
    upload: Option<String>,
}

/// A batch as an app hands it to `enqueue`: 1–1000 messages whose keys, where given, are
/// distinct (case-sensitively). Any failure is `bad_input` "Provide 1–1000 valid messages
/// with distinct keys.".
pub struct MailBatch;

impl utoipa::PartialSchema for MailBatch {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        use utoipa::openapi::schema::ArrayBuilder;
        ArrayBuilder::new()
            .items(utoipa::openapi::Ref::from_schema_name(RawMessage::name()))
            .min_items(Some(1))
            .max_items(Some(MAX_BATCH))
            .description(Some(
                "1–1000 messages whose keys, where given, are distinct (case-sensitively).",
            ))
            .into()
    }
}

impl ToSchema for MailBatch {
    fn schemas(
        schemas: &mut Vec<(
            String,
            utoipa::openapi::RefOr<utoipa::openapi::schema::Schema>,
        )>,
    ) {
        schemas.push((RawMessage::name().into_owned(), RawMessage::schema()));
        RawMessage::schemas(schemas);
    }
}

/// Parses one message (spec mail §3). Any failure is `bad_input` [`INVALID_MESSAGE`].
pub fn parse_message(value: &Value) -> Result<MailMessage, MailFault> {
    message(value).ok_or_else(|| MailFault::new(MailCode::BadInput, INVALID_MESSAGE))
}

/// Parses a batch: a JSON array of 1–1000 messages whose keys, where present, are distinct
/// (case-sensitively). Any failure is `bad_input` [`INVALID_BATCH`].
pub fn parse_batch(value: &Value) -> Result<Vec<MailMessage>, MailFault> {
    batch(value).ok_or_else(|| MailFault::new(MailCode::BadInput, INVALID_BATCH))
}

fn batch(value: &Value) -> Option<Vec<MailMessage>> {
    let items = value.as_array()?;
    if !(1..=MAX_BATCH).contains(&items.len()) {
        return None;
    }
    let mut keys = HashSet::new();
    items
        .iter()
        .map(|item| {
            let message = message(item)?;
            match &message.key {
                Some(key) if !keys.insert(key.clone()) => None,
                _ => Some(message),
            }
        })
        .collect()
}

fn message(value: &Value) -> Option<MailMessage> {
    let raw = RawMessage::deserialize(value).ok()?;
    let valid = (1..=MAX_RECIPIENTS).contains(&raw.to.len())
        && raw.to.iter().all(|to| is_valid_address(to))
        && is_header_text(&raw.subject, 0, MAX_SUBJECT_CHARS)
        && is_body(&raw.text)
        && raw.html.as_deref().is_none_or(is_body)
        && (raw.from_name.as_deref()).is_none_or(|name| is_header_text(name, 0, MAX_SUBJECT_CHARS))
        && raw.reply_to.as_deref().is_none_or(is_valid_address)
        && raw.profile.as_deref().is_none_or(is_valid_profile_key)
        && (raw.reference.as_ref()).is_none_or(|r| is_ref_text(&r.scope) && is_ref_text(&r.id))
        && raw.actor.as_ref().is_none_or(is_valid_actor)
        && raw.key.as_deref().is_none_or(is_ref_text);
    if !valid {
        return None;
    }
    let attachments = raw.attachments.unwrap_or_default();
    if attachments.len() > MAX_ATTACHMENTS {
        return None;
    }
    let attachments = attachments
        .into_iter()
        .map(attachment)
        .collect::<Option<Vec<_>>>()?;
    let headers = match raw.headers {
        Some(headers) => custom_headers(headers)?,
        None => Vec::new(),
    };
    Some(MailMessage {
        to: raw.to,
        subject: raw.subject,
        text: raw.text,
        html: raw.html,
        from_name: raw.from_name,
        reply_to: raw.reply_to,
        attachments,
        headers,
        profile: raw.profile,
        reference: raw.reference,
        actor: raw.actor,
        key: raw.key,
    })
}

fn attachment(raw: RawAttachment) -> Option<AttachmentInput> {
    if !is_header_text(&raw.filename, 1, MAX_SUBJECT_CHARS)
        || !is_header_text(&raw.content_type, 1, MAX_SUBJECT_CHARS)
    {
        return None;
    }
    let source = match (raw.content, raw.upload) {
        (Some(content), None) => AttachmentSource::Inline(STANDARD.decode(content).ok()?.into()),
        (None, Some(upload)) => AttachmentSource::Upload(parse_uuid(&upload)?),
        _ => return None,
    };
    Some(AttachmentInput {
        filename: raw.filename,
        content_type: raw.content_type,
        source,
    })
}

fn custom_headers(headers: Map<String, Value>) -> Option<Vec<(String, String)>> {
    let mut seen = HashSet::new();
    let mut block_bytes = 0;
    let mut accepted = Vec::with_capacity(headers.len());
    for (name, value) in headers {
        let Value::String(value) = value else {
            return None;
        };
        let lower = name.to_ascii_lowercase();
        if !is_header_name(&name) || !is_allowed_header(&lower) || has_line_break_or_nul(&value) {
            return None;
        }
        if !seen.insert(lower) {
            return None;
        }
        block_bytes += name.len() + ": ".len() + value.len() + "\r\n".len();
        if block_bytes > MAX_HEADER_BLOCK_BYTES {
            return None;
        }
        accepted.push((name, value));
    }
    Some(accepted)
}

fn is_header_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| (0x21..=0x7e).contains(&b) && b != b':')
}

fn is_allowed_header(lower: &str) -> bool {
    (lower.starts_with("x-") && !lower.starts_with("x-cloud-")) || ALLOWED_HEADERS.contains(&lower)
}

fn is_valid_actor(actor: &MailActor) -> bool {
    is_ref_text(&actor.id)
        && (actor.name.as_deref()).is_none_or(|name| is_header_text(name, 0, MAX_KEY_CHARS))
}

fn has_line_break_or_nul(s: &str) -> bool {
    s.contains(['\r', '\n', '\0'])
}

/// Text that ends up in a header line: no way to start another line.
fn is_header_text(s: &str, min_chars: usize, max_chars: usize) -> bool {
    !has_line_break_or_nul(s) && (min_chars..=max_chars).contains(&s.chars().count())
}

/// Postgres `text` refuses NUL, so it is refused here rather than failing the insert.
fn is_body(s: &str) -> bool {
    s.len() <= MAX_BODY_BYTES && !s.contains('\0')
}

fn is_ref_text(s: &str) -> bool {
    !s.contains('\0') && (1..=MAX_KEY_CHARS).contains(&s.chars().count())
}

/// Only the hyphenated form: the other forms `Uuid` accepts are not what a JSON id looks like.
fn parse_uuid(s: &str) -> Option<Uuid> {
    (s.len() == 36).then(|| Uuid::try_parse(s).ok()).flatten()
}

/// Whether `s` is an HTML5 "valid e-mail address" of at most [`MAX_ADDRESS_CHARS`] characters.
pub fn is_valid_address(s: &str) -> bool {
    let Some((local, domain)) = s.split_once('@') else {
        return false;
    };
    s.len() <= MAX_ADDRESS_CHARS
        && !local.is_empty()
        && local.bytes().all(is_local_part_byte)
        && domain.split('.').all(is_domain_label)
}

fn is_local_part_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b".!#$%&'*+/=?^_`{|}~-".contains(&b)
}

fn is_domain_label(label: &str) -> bool {
    let bytes = label.as_bytes();
    (1..=63).contains(&bytes.len())
        && bytes.first().is_some_and(u8::is_ascii_alphanumeric)
        && bytes.last().is_some_and(u8::is_ascii_alphanumeric)
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || *b == b'-')
}

/// Whether `s` is a profile key: `^[a-z0-9][a-z0-9-]{0,62}$`.
pub fn is_valid_profile_key(s: &str) -> bool {
    let lower_or_digit = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    s.len() <= 63
        && s.as_bytes().first().is_some_and(lower_or_digit)
        && s.bytes().all(|b| lower_or_digit(&b) || b == b'-')
}

/// Whether `q` has [`MIN_SEARCH_RUN`] consecutive Unicode letters or digits.
pub fn is_searchable(q: &str) -> bool {
    let mut run = 0;
    q.chars().any(|c| {
        run = if c.is_alphanumeric() { run + 1 } else { 0 };
        run >= MIN_SEARCH_RUN
    })
}

/// A message's delivery state (`outgoing_mail.messages.status`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum MailStatus {
    Queued,
    Sending,
    Sent,
    Failed,
    Bounced,
    Cancelled,
}

impl MailStatus {
    /// Every status, in lifecycle order.
    pub const ALL: [MailStatus; 6] = [
        MailStatus::Queued,
        MailStatus::Sending,
        MailStatus::Sent,
        MailStatus::Failed,
        MailStatus::Bounced,
        MailStatus::Cancelled,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            MailStatus::Queued => "queued",
            MailStatus::Sending => "sending",
            MailStatus::Sent => "sent",
            MailStatus::Failed => "failed",
            MailStatus::Bounced => "bounced",
            MailStatus::Cancelled => "cancelled",
        }
    }

    /// The status named exactly (lowercase) `s`.
    pub fn parse(s: &str) -> Option<MailStatus> {
        MailStatus::ALL
            .into_iter()
            .find(|status| status.as_str() == s)
    }
}

/// What an app's log listing asks for; every present part narrows the result (AND).
#[derive(Clone, Default)]
pub struct MailFilter {
    pub ref_scope: Option<String>,
    /// Only with `ref_scope`.
    pub ref_id: Option<String>,
    /// Empty means any message; an explicit `[]` is refused rather than widened to everything.
    pub ids: Vec<Uuid>,
    pub batch_id: Option<Uuid>,
    /// Empty means any status; an explicit `[]` is refused like `ids`.
    pub status: Vec<MailStatus>,
    /// Inclusive.
    pub since: Option<DateTime<Utc>>,
    /// Exclusive.
    pub until: Option<DateTime<Utc>>,
    /// `None` means the caller's own log only.
    pub apps: Option<Vec<String>>,
    /// Trimmed search term, matched literally as a substring of subject or addresses.
    pub q: Option<String>,
    /// Trimmed exact recipient, matched ignoring case.
    pub recipient: Option<String>,
}

// The search term and recipient can be addresses, which never reach a log.
impl fmt::Debug for MailFilter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MailFilter")
            .field("ref_scope", &self.ref_scope)
            .field("ref_id", &self.ref_id)
            .field("ids", &self.ids.len())
            .field("batch_id", &self.batch_id)
            .field("status", &self.status)
            .field("since", &self.since)
            .field("until", &self.until)
            .field("apps", &self.apps)
            .field("q", &self.q.is_some())
            .field("recipient", &self.recipient.is_some())
            .finish()
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawFilter {
    #[serde(rename = "ref")]
    reference: Option<RawFilterRef>,
    ids: Option<Vec<String>>,
    batch_id: Option<String>,
    status: Option<Vec<MailStatus>>,
    since: Option<String>,
    until: Option<String>,
    apps: Option<Vec<String>>,
    q: Option<String>,
    recipient: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFilterRef {
    scope: String,
    id: Option<String>,
}

/// Parses a log filter (spec mail §3); `null` is the empty filter. Any failure is `bad_input`
/// [`INVALID_FILTER`].
pub fn parse_filter(value: &Value) -> Result<MailFilter, MailFault> {
    filter(value).ok_or_else(|| MailFault::new(MailCode::BadInput, INVALID_FILTER))
}

fn filter(value: &Value) -> Option<MailFilter> {
    if value.is_null() {
        return Some(MailFilter::default());
    }
    let raw = RawFilter::deserialize(value).ok()?;
    let (ref_scope, ref_id) = match raw.reference {
        Some(r) if is_ref_text(&r.scope) && r.id.as_deref().is_none_or(is_ref_text) => {
            (Some(r.scope), r.id)
        }
        Some(_) => return None,
        None => (None, None),
    };
    let ids = match raw.ids {
        Some(ids) if (1..=MAX_FILTER_IDS).contains(&ids.len()) => {
            ids.iter().map(|id| parse_uuid(id)).collect::<Option<_>>()?
        }
        Some(_) => return None,
        None => Vec::new(),
    };
    let status = match raw.status {
        Some(status) if (1..=MailStatus::ALL.len()).contains(&status.len()) => status,
        Some(_) => return None,
        None => Vec::new(),
    };
    let apps = match raw.apps {
        Some(apps) if is_app_list(&apps) => Some(apps),
        Some(_) => return None,
        None => None,
    };
    Some(MailFilter {
        ref_scope,
        ref_id,
        ids,
        batch_id: optional(raw.batch_id, parse_uuid)?,
        status,
        since: optional(raw.since, parse_instant)?,
        until: optional(raw.until, parse_instant)?,
        apps,
        q: optional(raw.q, search_term)?,
        recipient: optional(raw.recipient, recipient)?,
    })
}

/// An optional field: absent stays `None`, present must parse.
fn optional<T>(raw: Option<String>, parse: impl FnOnce(&str) -> Option<T>) -> Option<Option<T>> {
    match raw {
        Some(s) => parse(&s).map(Some),
        None => Some(None),
    }
}

fn is_app_list(apps: &[String]) -> bool {
    let mut seen = HashSet::new();
    (1..=MAX_FILTER_APPS).contains(&apps.len())
        && apps
            .iter()
            .all(|app| !app.is_empty() && !app.contains('\0') && seen.insert(app.as_str()))
}

fn recipient(s: &str) -> Option<String> {
    let s = s.trim();
    is_valid_address(s).then(|| s.to_owned())
}

fn search_term(q: &str) -> Option<String> {
    // Control characters are refused where they stand, before trimming could hide them.
    if q.chars().any(char::is_control) {
        return None;
    }
    let q = q.trim();
    let valid = q.chars().count() <= MAX_QUERY_CHARS && is_searchable(q);
    valid.then(|| q.to_owned())
}

/// RFC 3339 with an explicit offset; a local time would mean something different per server.
fn parse_instant(s: &str) -> Option<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(s)
        .ok()
        .map(|instant| instant.with_timezone(&Utc))
}

/// Which page of a listing to read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PageParams {
    /// 1-based; ignored when a cursor is given (the cursor carries its page).
    pub page: i64,
    pub per_page: i64,
    /// Still encoded; see [`decode_cursor`].
    pub cursor: Option<String>,
}

impl Default for PageParams {
    fn default() -> PageParams {
        PageParams {
            page: 1,
            per_page: DEFAULT_PER_PAGE,
            cursor: None,
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawPage {
    page: Option<i64>,
    per_page: Option<i64>,
    cursor: Option<String>,
}

/// Parses page parameters `{page?, perPage?, cursor?}`; `null` is the first page. Any failure is
/// `bad_input` [`INVALID_FILTER`].
pub fn parse_page(value: &Value) -> Result<PageParams, MailFault> {
    page(value).ok_or_else(|| MailFault::new(MailCode::BadInput, INVALID_FILTER))
}

fn page(value: &Value) -> Option<PageParams> {
    if value.is_null() {
        return Some(PageParams::default());
    }
    let raw = RawPage::deserialize(value).ok()?;
    let page = raw.page.unwrap_or(1);
    let per_page = raw.per_page.unwrap_or(DEFAULT_PER_PAGE);
    let valid = (1..=MAX_PAGE).contains(&page)
        && (1..=MAX_PER_PAGE).contains(&per_page)
        && (raw.cursor.as_deref()).is_none_or(|c| c.chars().count() <= MAX_CURSOR_CHARS);
    valid.then_some(PageParams {
        page,
        per_page,
        cursor: raw.cursor,
    })
}

/// Where the next page starts: the last row shown and the page number it opens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cursor {
    /// Postgres' text of the row's `created_at` (microseconds): a JavaScript-style millisecond
    /// instant would skip or repeat rows created within the same millisecond.
    pub created_at: String,
    pub id: Uuid,
    pub page: i64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawCursor {
    created_at: String,
    id: String,
    page: i64,
}

/// Base64url (unpadded) of the JSON `{"createdAt", "id", "page"}`.
pub fn encode_cursor(cursor: &Cursor) -> String {
    let body = json!({
        "createdAt": cursor.created_at,
        "id": cursor.id.to_string(),
        "page": cursor.page,
    });
    URL_SAFE_NO_PAD.encode(body.to_string())
}

/// Reads a cursor made by [`encode_cursor`]. Anything else is `bad_input` [`INVALID_CURSOR`].
pub fn decode_cursor(s: &str) -> Result<Cursor, MailFault> {
    cursor(s).ok_or_else(|| MailFault::new(MailCode::BadInput, INVALID_CURSOR))
}

fn cursor(s: &str) -> Option<Cursor> {
    if s.len() > MAX_CURSOR_CHARS {
        return None;
    }
    let json = URL_SAFE_NO_PAD.decode(s).ok()?;
    let raw: RawCursor = serde_json::from_slice(&json).ok()?;
    let id = parse_uuid(&raw.id)?;
    let valid = is_timestamp(&raw.created_at) && (1..=MAX_PAGE).contains(&raw.page);
    valid.then_some(Cursor {
        created_at: raw.created_at,
        id,
        page: raw.page,
    })
}

/// Whether Postgres reads `s` as the same instant everywhere: its own `timestamptz` output
/// (`2024-05-01 10:00:00.123456+00`) or RFC 3339, always with an offset.
fn is_timestamp(s: &str) -> bool {
    DateTime::parse_from_rfc3339(s).is_ok()
        || DateTime::parse_from_str(s, "%Y-%m-%d %H:%M:%S%.f%#z").is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn message() -> Value {
        json!({"to": ["reader@example.org"], "subject": "Hello", "text": "Plain text"})
    }

    fn message_with(change: Value) -> Value {
        let mut value = message();
        if let (Some(base), Value::Object(change)) = (value.as_object_mut(), change) {
            base.extend(change);
        }
        value
    }

    fn accepts(change: Value) -> bool {
        parse_message(&message_with(change)).is_ok()
    }

    fn headers(name: &str, value: &str) -> Value {
        json!({ "headers": { name: value } })
    }

    fn attachments(count: usize) -> Value {
        let one = json!({"filename": "empty.txt", "contentType": "text/plain", "content": ""});
        json!({ "attachments": vec![one; count] })
    }

    fn filter(value: Value) -> Result<MailFilter, MailFault> {
        parse_filter(&value)
    }

    #[test]
    fn a_minimal_message_is_kept_as_given() {
        let parsed = parse_message(&message()).expect("valid");
        assert_eq!(parsed.to, ["reader@example.org"]);
        assert_eq!(parsed.subject, "Hello");
        assert_eq!(parsed.text, "Plain text");
        assert!(
            parsed.html.is_none() && parsed.attachments.is_empty() && parsed.headers.is_empty()
        );
    }

    #[test]
    fn a_full_message_is_parsed_field_by_field() {
        let upload = Uuid::new_v4();
        let parsed = parse_message(&message_with(json!({
            "html": "<p>Hi</p>",
            "fromName": "Inventory",
            "replyTo": "desk@example.org",
            "attachments": [
                {"filename": "a.txt", "contentType": "text/plain", "content": "aGk="},
                {"filename": "b.pdf", "contentType": "application/pdf", "upload": upload.to_string()},
            ],
            "headers": {"X-App": "inventory", "List-Id": "<stock.example.org>"},
            "profile": "alerts",
            "ref": {"scope": "order", "id": "42"},
            "actor": {"type": "service_account", "id": "sa-1", "name": "Importer"},
            "key": "order-42",
        })))
        .expect("valid");
        assert_eq!(parsed.html.as_deref(), Some("<p>Hi</p>"));
        assert!(
            matches!(&parsed.attachments[0].source, AttachmentSource::Inline(b) if b.as_ref() == b"hi")
        );
        assert!(
            matches!(parsed.attachments[1].source, AttachmentSource::Upload(id) if id == upload)
        );
        assert_eq!(parsed.headers.len(), 2);
        assert_eq!(
            parsed.reference,
            Some(MailRef {
                scope: "order".into(),
                id: "42".into()
            })
        );
        let actor = parsed.actor.expect("actor");
        assert_eq!(
            (actor.kind.as_str(), actor.id.as_str()),
            ("service_account", "sa-1")
        );
        assert_eq!(parsed.key.as_deref(), Some("order-42"));
    }

    #[test]
    fn null_optional_fields_count_as_absent() {
        assert!(accepts(json!({"html": null, "headers": null, "key": null})));
        assert!(!accepts(json!({"text": null})));
    }

    #[test]
    fn unknown_fields_are_refused_at_every_level() {
        assert!(!accepts(json!({"bcc": ["spy@example.org"]})));
        assert!(!accepts(json!({"ref": {"scope": "a", "id": "b", "x": 1}})));
        assert!(!accepts(
            json!({"actor": {"type": "user", "id": "u", "role": "admin"}})
        ));
        let attachment = json!({"filename": "a", "contentType": "b", "content": "", "size": 0});
        assert!(!accepts(json!({"attachments": [attachment]})));
    }

    #[test]
    fn a_message_failure_is_a_bad_input_with_the_fixed_message() {
        let fault = parse_message(&json!({"to": "reader@example.org"})).expect_err("invalid");
        assert_eq!(fault.code, MailCode::BadInput);
        assert_eq!(fault.message, INVALID_MESSAGE);
    }

    /// Scenario 19.
    #[test]
    fn invalid_messages_are_refused() {
        let cases = [
            json!({"to": []}),
            json!({"to": vec!["reader@example.org"; 51]}),
            json!({"to": ["invalid"]}),
            json!({"subject": "x".repeat(999)}),
            json!({"subject": "Hello\r\nBcc: spy@example.org"}),
            json!({"text": "é".repeat(262_145)}),
            json!({"html": "x".repeat(524_289)}),
            json!({"fromName": "Sender\nBcc: spy@example.org"}),
            json!({"replyTo": "invalid"}),
            json!({"key": "x".repeat(201)}),
            headers("X-Foo", "bar\r\nbaz"),
            json!({"text": "nul\0"}),
            json!({"html": "nul\0"}),
            json!({"key": "nul\0"}),
            json!({"ref": {"scope": "order", "id": "nul\0"}}),
            json!({"headers": {"X-App": "one", "x-app": "two"}}),
            attachments(21),
            headers("X-A", &"x".repeat(8186)),
            headers("X-A", &"é".repeat(4096)),
        ];
        for (index, case) in cases.into_iter().enumerate() {
            assert!(!accepts(case), "case {index} was accepted");
        }
    }

    /// Scenario 19.
    #[test]
    fn messages_at_every_limit_are_accepted() {
        let full = json!({"to": vec!["reader@example.org"; 50], "text": "x".repeat(524_288)});
        assert!(accepts(full));
        assert!(accepts(
            json!({"html": "é".repeat(262_144), "subject": "x".repeat(998)})
        ));
        assert!(accepts(json!({"subject": ""})));
        assert!(accepts(attachments(20)));
        assert!(accepts(headers("X-A", &"x".repeat(8185))));
        let reference = json!({"ref": {"scope": "x".repeat(200), "id": "x".repeat(200)}});
        assert!(accepts(reference));
    }

    #[test]
    fn the_header_block_counts_names_separators_and_line_ends() {
        let mut names = serde_json::Map::new();
        // 4 × (5 + 2 + 2036 + 2) = 8180 bytes, plus `X-E: 12345\r\n` = 8192.
        for name in ["X-A00", "X-B00", "X-C00", "X-D00"] {
            names.insert(name.into(), "x".repeat(2036).into());
        }
        names.insert("X-E".into(), "12345".into());
        assert!(accepts(json!({ "headers": names.clone() })));
        names.insert("X-E".into(), "123456".into());
        assert!(!accepts(json!({ "headers": names })));
    }

    /// Scenario 20.
    #[test]
    fn only_allow_listed_header_names_are_accepted_ignoring_case() {
        for name in [
            "X-App",
            "X-App_ID",
            "X-App.Id",
            "x-app",
            "List-Id",
            "List-Unsubscribe",
            "List-Unsubscribe-Post",
            "In-Reply-To",
            "References",
            "Auto-Submitted",
            "Precedence",
            "PRECEDENCE",
        ] {
            assert!(accepts(headers(name, "value")), "{name} was refused");
        }
        for name in [
            "X-Cloud-Trace",
            "x-CLOUD-secret",
            "From",
            "To",
            "Bcc",
            "Subject",
            "Message-ID",
            "Content-Type",
            "X-A\nB",
            "X-A:B",
            "X-A B",
            "X-Ä",
            "",
        ] {
            assert!(!accepts(headers(name, "value")), "{name:?} was accepted");
        }
        assert!(!accepts(json!({"headers": {"X-App": 1}})));
    }

    #[test]
    fn an_attachment_names_exactly_one_valid_source() {
        let upload = Uuid::new_v4().to_string();
        let attachment = |source: Value| {
            let mut value = json!({"filename": "a.txt", "contentType": "text/plain"});
            if let (Some(base), Value::Object(source)) = (value.as_object_mut(), source) {
                base.extend(source);
            }
            json!({ "attachments": [value] })
        };
        assert!(accepts(attachment(json!({"content": "YQ=="}))));
        assert!(accepts(attachment(json!({"upload": upload}))));
        assert!(!accepts(attachment(
            json!({"content": "YQ==", "upload": upload})
        )));
        assert!(!accepts(attachment(json!({}))));
        assert!(!accepts(attachment(json!({"content": "YQ"}))));
        assert!(!accepts(attachment(json!({"content": "YQ_-"}))));
        assert!(!accepts(attachment(json!({"upload": "not-a-uuid"}))));
        assert!(!accepts(attachment(
            json!({"upload": upload.replace('-', "")})
        )));
        let unnamed = json!({"filename": "", "contentType": "text/plain", "content": ""});
        assert!(!accepts(json!({ "attachments": [unnamed] })));
        let injected = json!({"filename": "a", "contentType": "text/plain\r\nX: y", "content": ""});
        assert!(!accepts(json!({ "attachments": [injected] })));
    }

    #[test]
    fn profiles_and_actors_follow_their_shapes() {
        assert!(accepts(json!({"profile": "bulk-2"})));
        for profile in ["", "-bulk", "Bulk", "bulk_2", &"a".repeat(64)] {
            assert!(!accepts(json!({ "profile": profile })), "{profile}");
        }
        assert!(accepts(json!({"actor": {"type": "user", "id": "u-1"}})));
        assert!(!accepts(json!({"actor": {"type": "robot", "id": "u-1"}})));
        assert!(!accepts(json!({"actor": {"type": "user", "id": ""}})));
        assert!(!accepts(
            json!({"actor": {"type": "user", "id": "u", "name": "A\nB"}})
        ));
        assert!(!accepts(
            json!({"actor": {"type": "user", "id": "u", "name": "x".repeat(201)}})
        ));
    }

    #[test]
    fn debug_output_never_shows_addresses_or_content() {
        let parsed = parse_message(&message_with(json!({
            "replyTo": "desk@example.org",
            "attachments": [{"filename": "secret.pdf", "contentType": "application/pdf", "content": "aGk="}],
            "headers": {"X-Token": "hidden"},
        })))
        .expect("valid");
        let debug = format!("{parsed:?}");
        for secret in [
            "reader@",
            "desk@",
            "Hello",
            "Plain",
            "secret.pdf",
            "hidden",
            "aGk",
        ] {
            assert!(!debug.contains(secret), "{secret} leaked: {debug}");
        }
        let filter = filter(json!({"q": "invoice", "recipient": "a@example.org"})).expect("valid");
        assert!(!format!("{filter:?}").contains("example.org"));
    }

    #[test]
    fn addresses_follow_the_html5_syntax() {
        for address in [
            "reader@example.org",
            "a.b+c@sub.example.co",
            "user@localhost",
            "!#$%&'*+/=?^_`{|}~-@x1-y.example",
        ] {
            assert!(is_valid_address(address), "{address}");
        }
        let long_label = format!("a@{}.org", "b".repeat(64));
        let too_long = format!("{}@{}.org", "a".repeat(64), "b.".repeat(126) + "cc");
        for address in [
            "",
            "invalid",
            "@example.org",
            "a@",
            "a@@example.org",
            "a@b@example.org",
            "a@-example.org",
            "a@example-.org",
            "a@example..org",
            "a@example.org.",
            "\"a b\"@example.org",
            "ä@example.org",
            " a@example.org",
            &long_label,
            &too_long,
        ] {
            assert!(!is_valid_address(address), "{address}");
        }
    }

    /// Scenario 15.
    #[test]
    fn batches_hold_one_to_a_thousand_valid_messages_with_distinct_keys() {
        let keyed = |key: &str| message_with(json!({ "key": key }));
        let invalid = [
            json!([]),
            Value::Array(vec![message(); 1001]),
            json!([keyed("same"), keyed("same")]),
            json!([message(), message_with(json!({"to": []}))]),
            message(),
        ];
        for (index, batch) in invalid.into_iter().enumerate() {
            let fault = parse_batch(&batch).expect_err("invalid");
            assert_eq!(
                (fault.code, fault.message.as_ref()),
                (MailCode::BadInput, INVALID_BATCH),
                "{index}"
            );
        }
        assert_eq!(
            parse_batch(&Value::Array(vec![message(); 1000])).map(|b| b.len()),
            Ok(1000)
        );
        assert!(parse_batch(&json!([keyed("a"), keyed("A"), message(), message()])).is_ok());
    }

    /// Scenario 8.
    #[test]
    fn searches_need_three_letters_or_digits_in_a_row() {
        assert!(filter(json!({"q": "..."})).is_err());
        assert!(filter(json!({"q": "%_%"})).is_err());
        assert!(filter(json!({"q": "a b c"})).is_err());
        assert!(filter(json!({"q": "in\u{7}voice"})).is_err());
        assert!(filter(json!({"q": "x".repeat(201)})).is_err());
        assert!(is_searchable("50%_off") && is_searchable("日本語") && is_searchable("ab12"));
    }

    /// Scenario 9.
    #[test]
    fn search_terms_and_recipients_are_trimmed() {
        let parsed =
            filter(json!({"q": " InVoIcE ", "recipient": " user@EXAMPLE.org "})).expect("valid");
        assert_eq!(parsed.q.as_deref(), Some("InVoIcE"));
        // Trimming never hides a control character.
        for q in ["\tinvoice", "invoice\n", "in\u{7f}voice"] {
            assert!(filter(json!({ "q": q })).is_err(), "{q:?}");
        }
        assert_eq!(parsed.recipient.as_deref(), Some("user@EXAMPLE.org"));
        assert!(filter(json!({"recipient": "not an address"})).is_err());
    }

    #[test]
    fn a_full_filter_is_parsed_field_by_field() {
        let id = Uuid::new_v4();
        let parsed = filter(json!({
            "ref": {"scope": "order"},
            "ids": [id.to_string()],
            "batchId": id.to_string(),
            "status": ["queued", "failed"],
            "since": "2024-05-01T11:00:00+02:00",
            "until": "2024-05-01T12:00:00Z",
            "apps": ["reader", "source"],
        }))
        .expect("valid");
        assert_eq!(
            (parsed.ref_scope.as_deref(), parsed.ref_id),
            (Some("order"), None)
        );
        assert_eq!((parsed.ids, parsed.batch_id), (vec![id], Some(id)));
        assert_eq!(parsed.status, [MailStatus::Queued, MailStatus::Failed]);
        assert_eq!(
            parsed.since.map(|t| t.to_rfc3339()).as_deref(),
            Some("2024-05-01T09:00:00+00:00")
        );
        assert!(parsed.until.is_some());
        assert_eq!(parsed.apps.map(|a| a.len()), Some(2));
        assert!(filter(Value::Null).is_ok() && filter(json!({})).is_ok());
    }

    #[test]
    fn invalid_filters_are_refused() {
        let cases = [
            json!({"extra": true}),
            json!({"ref": {"scope": "order", "id": "1", "x": 1}}),
            json!({"ref": {"id": "1"}}),
            json!({"ref": {"scope": "x".repeat(201)}}),
            json!({"ids": []}),
            json!({"ids": vec![Uuid::new_v4().to_string(); 101]}),
            json!({"ids": ["nope"]}),
            json!({"batchId": "nope"}),
            json!({"status": []}),
            json!({"status": ["lost"]}),
            json!({"status": vec!["sent"; 7]}),
            json!({"since": "yesterday"}),
            json!({"since": "2024-05-01T10:00:00"}),
            json!({"until": 1_714_557_600}),
            json!({"apps": []}),
            json!({"apps": ["a", "a"]}),
            json!({"apps": [""]}),
            json!({"apps": ["a\u{0}b"]}),
            json!({"apps": (0..102).map(|i| format!("app-{i}")).collect::<Vec<_>>()}),
            json!([]),
        ];
        for (index, case) in cases.into_iter().enumerate() {
            let fault = filter(case).expect_err("invalid");
            assert_eq!(fault.message, INVALID_FILTER, "case {index}");
        }
        let apps: Vec<String> = (0..101).map(|i| format!("app-{i}")).collect();
        assert!(filter(json!({ "apps": apps })).is_ok());
    }

    /// Scenario 14.
    #[test]
    fn pages_default_to_the_first_fifty_and_stay_within_bounds() {
        assert_eq!(parse_page(&json!({})), Ok(PageParams::default()));
        assert_eq!(
            parse_page(&Value::Null).map(|p| (p.page, p.per_page)),
            Ok((1, 50))
        );
        let page = parse_page(&json!({"page": 3, "perPage": 100, "cursor": "abc"})).expect("valid");
        assert_eq!(
            (page.page, page.per_page, page.cursor.as_deref()),
            (3, 100, Some("abc"))
        );
        for case in [
            json!({"perPage": 101}),
            json!({"perPage": 0}),
            json!({"page": 0}),
            json!({"page": 1.5}),
            json!({"page": "2"}),
            json!({"page": MAX_PAGE + 1}),
            json!({"cursor": "x".repeat(1025)}),
            json!({"limit": 10}),
        ] {
            assert_eq!(
                parse_page(&case).map_err(|f| f.message),
                Err(INVALID_FILTER.into())
            );
        }
    }

    /// Scenarios 12 and 37.
    #[test]
    fn cursors_round_trip_and_refuse_anything_else() {
        let cursor = Cursor {
            created_at: "2024-05-01 10:00:00.123456+00".into(),
            id: Uuid::new_v4(),
            page: 2,
        };
        let encoded = encode_cursor(&cursor);
        assert!(!encoded.contains(['=', '+', '/']));
        assert_eq!(decode_cursor(&encoded), Ok(cursor.clone()));
        let offset = Cursor {
            created_at: "2024-05-01 12:00:00+05:30".into(),
            ..cursor.clone()
        };
        assert_eq!(decode_cursor(&encode_cursor(&offset)), Ok(offset));

        let encode = |value: Value| URL_SAFE_NO_PAD.encode(value.to_string());
        let id = cursor.id.to_string();
        for invalid in [
            "invalid".to_owned(),
            String::new(),
            encode(json!({"createdAt": "2024-05-01 10:00:00+00", "id": id, "page": 2, "x": 1})),
            encode(json!({"createdAt": "2024-05-01 10:00:00+00", "id": id, "page": 0})),
            encode(json!({"createdAt": "2024-05-01 10:00:00", "id": id, "page": 2})),
            encode(json!({"createdAt": "yesterday", "id": id, "page": 2})),
            encode(json!({"createdAt": "2024-05-01 10:00:00+00", "id": "nope", "page": 2})),
            encode(json!({"createdAt": "2024-05-01 10:00:00+00", "id": id})),
        ] {
            let fault = decode_cursor(&invalid).expect_err("invalid");
            assert_eq!(
                (fault.code, fault.message.as_ref()),
                (MailCode::BadInput, INVALID_CURSOR)
            );
        }
    }

    #[test]
    fn statuses_read_and_write_their_lowercase_names() {
        for status in MailStatus::ALL {
            assert_eq!(MailStatus::parse(status.as_str()), Some(status));
            assert_eq!(
                serde_json::to_value(status).ok(),
                Some(json!(status.as_str()))
            );
        }
        assert_eq!(MailStatus::parse("Sent"), None);
    }

    proptest! {
        /// Every accepted address can be handed to SMTP as one path.
        #[test]
        fn accepted_addresses_have_one_at_and_fit_the_limit(address in "[a-z.@!-]{0,12}|\\PC{0,330}") {
            if is_valid_address(&address) {
                prop_assert_eq!(address.matches('@').count(), 1);
                prop_assert!(address.chars().count() <= MAX_ADDRESS_CHARS);
                prop_assert!(address.is_ascii());
            }
        }

        /// No accepted header block can smuggle a line break or outgrow its limit.
        #[test]
        fn accepted_header_blocks_stay_single_lines_within_the_limit(
            pairs in prop::collection::vec(("(X-|x-|List-Id|Bcc|X-Cloud-)[!-~]{0,6}", "[a-z ]{0,3000}|[a-z\r\n\0]{1,4}"), 0..6)
        ) {
            let names: serde_json::Map<String, Value> =
                pairs.into_iter().map(|(name, value)| (name, Value::String(value))).collect();
            if let Ok(parsed) = parse_message(&message_with(json!({ "headers": names }))) {
                let block: String =
                    parsed.headers.iter().map(|(name, value)| format!("{name}: {value}\r\n")).collect();
                prop_assert!(block.len() <= MAX_HEADER_BLOCK_BYTES);
                prop_assert_eq!(block.matches('\r').count(), parsed.headers.len());
                prop_assert_eq!(block.matches('\n').count(), parsed.headers.len());
                prop_assert!(!block.contains('\0'));
            }
        }
    }
}
