//! Parsers under fire: every parser of untrusted input, fed random garbage and near-valid
//! mutations of valid input, never panics, refuses only in the way it documents, and accepts
//! what it documents as valid.

use std::sync::LazyLock;

use base64::Engine;
use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD};
use chrono::{DateTime, Utc};
use jsonwebtoken::DecodingKey;
use proptest::prelude::*;
use proptest::sample::Index;
use proptest::test_runner::TestCaseError;
use serde::Serialize;
use serde_json::{Map, Value, json};
use uuid::Uuid;

use k2b_core::branding::{
    APP_ICON_SOURCE_MAX_BYTES, CLOUD_LOGO_SVG, SVG_MIME, decode_base64_lenient, parse_icon_source,
};
use k2b_core::cloud_login::PROTOCOL;
use k2b_core::cloud_login::enroll::StartedPairing;
use k2b_core::help::{DEFAULT_ORDER, HelpError, define_help, is_valid_document_id};
use k2b_core::http::origin::canonical_origin;
use k2b_core::identity::jwt::{self, MAX_ACCESS_KID_CHARS};
use k2b_core::identity::keys;
use k2b_core::identity::oauth::{AccessClaims, AccessPrincipal, MAX_SCOPES, check_access_claims};
use k2b_core::identity::session::{SessionClaims, check_session_claims};
use k2b_core::identity::{
    ALGORITHM, IDENTITY_CLOCK_TOLERANCE_SECONDS, INVOCATION_TOKEN_TYPE, MAX_COMPACT_TOKEN_BYTES,
    SESSION_AUDIENCE, SESSION_TOKEN_TYPE,
};
use k2b_core::mail::MailCode;
use k2b_core::mail::validate::{
    AttachmentSource, Cursor, INVALID_CURSOR, INVALID_FILTER, INVALID_MESSAGE, MAX_ADDRESS_CHARS,
    MAX_CURSOR_CHARS, MAX_FILTER_APPS, MAX_FILTER_IDS, MAX_HEADER_BLOCK_BYTES, MAX_PAGE,
    MAX_PER_PAGE, MAX_QUERY_CHARS, MAX_RECIPIENTS, MAX_SUBJECT_CHARS, decode_cursor, encode_cursor,
    is_searchable, is_valid_address, parse_filter, parse_message, parse_page,
};
use k2b_core::pwa::link::{LinkRejection, MAX_LINK_CHARS, pairing_link, parse_pairing_link};
use k2b_core::registry::rules::{
    CORE_PATHS, MAX_HREF_CHARS, MAX_LINKS, MAX_ROUTES, MAX_WIDGETS_PER_ENTRY, check, is_safe_link,
    route_refusal,
};
use k2b_core::registry::{AppRegistryEntry, validate_entry};
use k2b_core::widgets::response::{SchemaViolation, parse_widget_response};

// Text: garbage and near-valid mutations.

/// One edit of a text, in characters: insert, delete, replace, truncate or duplicate.
#[derive(Debug, Clone)]
struct Edit {
    op: u8,
    at: Index,
    len: u8,
    ch: char,
}

fn edit(specials: &'static [char]) -> impl Strategy<Value = Edit> {
    (
        0u8..5,
        any::<Index>(),
        0u8..8,
        prop_oneof![3 => prop::sample::select(specials), 1 => any::<char>()],
    )
        .prop_map(|(op, at, len, ch)| Edit { op, at, len, ch })
}

fn apply_edits(text: &str, edits: &[Edit]) -> String {
    let mut chars: Vec<char> = text.chars().collect();
    for edit in edits {
        let at = edit.at.index(chars.len() + 1);
        let end = (at + usize::from(edit.len) + 1).min(chars.len());
        match edit.op {
            0 => chars.insert(at, edit.ch),
            1 => {
                chars.drain(at.min(end)..end);
            }
            2 if at < chars.len() => chars[at] = edit.ch,
            2 => chars.push(edit.ch),
            3 => chars.truncate(at),
            _ => {
                let copy: Vec<char> = chars[at.min(end)..end].to_vec();
                chars.splice(at..at, copy);
            }
        }
    }
    chars.into_iter().collect()
}

/// `valid` with up to four edits, each with a character from `specials` or any character.
fn near(
    valid: impl Strategy<Value = String>,
    specials: &'static [char],
) -> impl Strategy<Value = String> {
    (valid, prop::collection::vec(edit(specials), 0..4))
        .prop_map(|(text, edits)| apply_edits(&text, &edits))
}

/// Random text: any characters (controls and line breaks included), or bytes read as UTF-8.
fn garbage() -> impl Strategy<Value = String> {
    prop_oneof![
        "(?s).{0,48}",
        prop::collection::vec(any::<u8>(), 0..48)
            .prop_map(|bytes| String::from_utf8_lossy(&bytes).into_owned()),
    ]
}

/// `pattern` with `#` standing for one or more ASCII digits and `*` for any text.
fn matches_pattern(text: &str, pattern: &str) -> bool {
    let mut rest = pattern.chars();
    match rest.next() {
        None => text.is_empty(),
        Some('*') => text
            .char_indices()
            .map(|(at, _)| at)
            .chain([text.len()])
            .any(|at| matches_pattern(&text[at..], rest.as_str())),
        Some('#') => {
            let digits = text.bytes().take_while(u8::is_ascii_digit).count();
            (1..=digits).any(|n| matches_pattern(&text[n..], rest.as_str()))
        }
        Some(c) => text
            .strip_prefix(c)
            .is_some_and(|tail| matches_pattern(tail, rest.as_str())),
    }
}

// JSON: random values and near-valid mutations.

fn json_key(keys: &'static [&'static str]) -> impl Strategy<Value = String> {
    prop_oneof![
        4 => prop::sample::select(keys).prop_map(str::to_string),
        1 => "[a-zA-Z_$.\\[\\]]{0,8}",
    ]
}

fn json_leaf(keys: &'static [&'static str]) -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>().prop_map(Value::from),
        (-2_000_000_000i64..2_000_000_000).prop_map(Value::from),
        garbage().prop_map(Value::String),
        "[a-z0-9 /:.#?@-]{0,12}".prop_map(Value::String),
        prop::sample::select(keys).prop_map(Value::from),
    ]
}

/// Any JSON value up to three levels deep, its keys and strings mostly from `keys`.
fn arb_json(keys: &'static [&'static str]) -> BoxedStrategy<Value> {
    json_leaf(keys)
        .prop_recursive(3, 24, 4, move |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::vec((json_key(keys), inner), 0..4)
                    .prop_map(|fields| Value::Object(fields.into_iter().collect())),
            ]
        })
        .boxed()
}

/// One edit of a JSON value at the node `path` leads to.
#[derive(Debug, Clone)]
struct JsonEdit {
    path: Vec<Index>,
    op: u8,
    pick: Index,
    key: String,
    value: Value,
}

fn json_edit(keys: &'static [&'static str]) -> impl Strategy<Value = JsonEdit> {
    (
        prop::collection::vec(any::<Index>(), 0..5),
        0u8..9,
        any::<Index>(),
        json_key(keys),
        arb_json(keys),
    )
        .prop_map(|(path, op, pick, key, value)| JsonEdit {
            path,
            op,
            pick,
            key,
            value,
        })
}

fn apply_json_edit(node: &mut Value, path: &[Index], edit: &JsonEdit) {
    if let Some((first, rest)) = path.split_first() {
        match node {
            Value::Object(map) if !map.is_empty() => {
                let at = first.index(map.len());
                if let Some(child) = map.values_mut().nth(at) {
                    apply_json_edit(child, rest, edit);
                }
                return;
            }
            Value::Array(items) if !items.is_empty() => {
                let at = first.index(items.len());
                apply_json_edit(&mut items[at], rest, edit);
                return;
            }
            _ => {}
        }
    }
    match (edit.op, node) {
        (1, Value::Object(map)) => {
            map.insert(edit.key.clone(), edit.value.clone());
        }
        (2, Value::Object(map)) if !map.is_empty() => {
            let key = map.keys().nth(edit.pick.index(map.len())).cloned();
            if let Some(key) = key {
                map.remove(&key);
            }
        }
        (2, Value::Array(items)) if !items.is_empty() => {
            items.remove(edit.pick.index(items.len()));
        }
        (3, node) => *node = Value::Null,
        (4, Value::String(text)) => {
            let keep = edit.pick.index(text.chars().count() + 1);
            *text = text.chars().take(keep).chain(edit.key.chars()).collect();
        }
        (5, Value::Array(items)) if !items.is_empty() => {
            let copy = items[edit.pick.index(items.len())].clone();
            items.extend(std::iter::repeat_n(copy, 1 + edit.key.len() * 16));
        }
        (6, node) => *node = Value::String(node.to_string()),
        (7, node) => {
            let inner = node.take();
            *node = Value::Array(vec![inner]);
        }
        (_, node) => *node = edit.value.clone(),
    }
}

/// `valid` with one to three edits anywhere in it.
fn mutated(
    valid: impl Strategy<Value = Value>,
    keys: &'static [&'static str],
) -> impl Strategy<Value = Value> {
    (valid, prop::collection::vec(json_edit(keys), 1..4)).prop_map(|(mut value, edits)| {
        for edit in &edits {
            apply_json_edit(&mut value, &edit.path, edit);
        }
        value
    })
}

/// Valid values, near-valid mutations of them, and random JSON.
fn under_fire(
    valid: impl Strategy<Value = Value> + 'static,
    keys: &'static [&'static str],
) -> impl Strategy<Value = Value> {
    let valid = valid.boxed();
    prop_oneof![
        1 => valid.clone(),
        4 => mutated(valid, keys),
        1 => arb_json(keys),
    ]
}

/// An object of the fields that are present.
fn object(fields: Vec<(&str, Option<Value>)>) -> Value {
    Value::Object(
        fields
            .into_iter()
            .filter_map(|(key, value)| value.map(|value| (key.to_string(), value)))
            .collect(),
    )
}

fn to_json<T: Serialize>(value: &T) -> Result<Value, TestCaseError> {
    serde_json::to_value(value).map_err(|error| TestCaseError::fail(error.to_string()))
}

// The data-URI parser (branding).

const DATA_URI_SPECIALS: &[char] = &[
    ';', ',', ':', '\n', '\r', '\u{2028}', '\u{2029}', '=', ' ', 'A', '-', '_', '/', '+', 'é', '\0',
];

/// The documented shape: `data:<mime>;base64,<payload>`, a mime of one or more characters
/// other than `;` and `,`, a single-line payload decoding to 1 byte .. 10 MiB.
fn documented_icon(logo: &str) -> Option<(String, Vec<u8>)> {
    let rest = logo.strip_prefix("data:")?;
    let mime_len = rest.chars().take_while(|c| *c != ';' && *c != ',').count();
    let mime: String = rest.chars().take(mime_len).collect();
    let payload = rest[mime.len()..].strip_prefix(";base64,")?;
    let single_line = !payload.contains(['\n', '\r', '\u{2028}', '\u{2029}']);
    if mime.is_empty() || payload.is_empty() || !single_line {
        return None;
    }
    let data = decode_base64_lenient(payload);
    (!data.is_empty() && data.len() <= APP_ICON_SOURCE_MAX_BYTES).then_some((mime, data))
}

fn data_uri() -> impl Strategy<Value = String> {
    (
        "(image|text|application)/[a-z0-9.+-]{1,12}",
        prop::collection::vec(any::<u8>(), 1..48),
        0usize..4,
    )
        .prop_map(|(mime, bytes, engine)| {
            let payload = match engine {
                0 => STANDARD.encode(&bytes),
                1 => STANDARD_NO_PAD.encode(&bytes),
                2 => URL_SAFE.encode(&bytes),
                _ => URL_SAFE_NO_PAD.encode(&bytes),
            };
            format!("data:{mime};base64,{payload}")
        })
}

fn logo() -> impl Strategy<Value = String> {
    prop_oneof![
        1 => garbage(),
        1 => garbage().prop_map(|text| format!("data:{text}")),
        4 => near(data_uri(), DATA_URI_SPECIALS),
        1 => Just("https://logo.example.test/logo.png".to_string()),
    ]
}

static CLOUD_VERSION: LazyLock<String> = LazyLock::new(|| parse_icon_source("").version);

proptest! {
    #![proptest_config(ProptestConfig { cases: 10_000, ..ProptestConfig::default() })]

    /// Any `app.logo` value gives an icon source: the logo's own bytes exactly when it is a
    /// documented data URI, else the Cloud logo (with the Cloud logo's version).
    #[test]
    fn data_uris_parse_or_fall_back_to_the_cloud_logo(logo in logo()) {
        let source = parse_icon_source(&logo);
        prop_assert_eq!(source.version.len(), 12);
        prop_assert!(
            source.version.bytes().all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
        );
        match documented_icon(&logo) {
            Some((mime, data)) => {
                prop_assert_eq!(&source.mime, &mime);
                prop_assert_eq!(&source.data, &data);
                prop_assert_ne!(&source.version, &*CLOUD_VERSION);
            }
            None => {
                prop_assert!(source.is_cloud_logo());
                prop_assert_eq!(source.mime.as_str(), SVG_MIME);
                prop_assert_eq!(source.data.as_slice(), CLOUD_LOGO_SVG.as_bytes());
                prop_assert_eq!(&source.version, &*CLOUD_VERSION);
            }
        }
    }

    /// A base64 data URI of any bytes, in either alphabet, padded or not, gives back exactly its
    /// mime and bytes.
    #[test]
    fn encoded_bytes_round_trip_through_a_data_uri(
        mime in "image/[a-z0-9.+-]{1,12}",
        bytes in prop::collection::vec(any::<u8>(), 1..64),
        url_safe in any::<bool>(),
        padded in any::<bool>(),
    ) {
        let payload = match (url_safe, padded) {
            (false, true) => STANDARD.encode(&bytes),
            (false, false) => STANDARD_NO_PAD.encode(&bytes),
            (true, true) => URL_SAFE.encode(&bytes),
            (true, false) => URL_SAFE_NO_PAD.encode(&bytes),
        };
        let source = parse_icon_source(&format!("data:{mime};base64,{payload}"));
        prop_assert_eq!(source.mime, mime);
        prop_assert_eq!(source.data, bytes);
    }

    /// The lenient decoder reads any text without failing and never makes more than 3 bytes of 4
    /// characters.
    #[test]
    fn lenient_base64_reads_any_text(
        text in prop_oneof![garbage(), near("[A-Za-z0-9+/=_-]{0,40}", DATA_URI_SPECIALS)],
    ) {
        let decoded = decode_base64_lenient(&text);
        prop_assert!(decoded.len() <= text.len() * 3 / 4);
    }
}

// The JWT header parsers and the claim checkers.

const HEADER_KEYS: &[&str] = &["alg", "kid", "typ", "cty", "jku", "crit", "RS256", "none"];
const PAYLOAD_KEYS: &[&str] = &["sub", "exp", "iat", "iss"];
const TOKEN_SPECIALS: &[char] = &['.', '=', '+', '/', ' ', 'A', '_', '-', 'e', '0', '\n'];

fn kid_text() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-f0-9-]{36}",
        "[a-zA-Z0-9_-]{0,16}",
        "[é]{198,202}",
        "\\PC{0,8}",
    ]
}

fn typ_value() -> impl Strategy<Value = Value> {
    prop_oneof![
        2 => Just(json!(SESSION_TOKEN_TYPE)),
        1 => Just(json!(INVOCATION_TOKEN_TYPE)),
        2 => "[a-z+]{0,12}".prop_map(Value::from),
        1 => json_leaf(HEADER_KEYS),
    ]
}

fn jwt_header() -> impl Strategy<Value = Value> {
    let alg = prop_oneof![
        5 => Just(json!(ALGORITHM)),
        1 => Just(json!("none")),
        1 => Just(json!("HS256")),
        1 => Just(json!("rs256")),
        1 => json_leaf(HEADER_KEYS),
    ];
    let kid = prop_oneof![4 => kid_text().prop_map(Value::from), 1 => json_leaf(HEADER_KEYS)];
    let extra = prop::collection::vec((json_key(HEADER_KEYS), json_leaf(HEADER_KEYS)), 0..2);
    let shaped = (
        prop::option::weighted(0.9, alg),
        prop::option::weighted(0.9, kid),
        prop::option::weighted(0.8, typ_value()),
        prop::option::weighted(0.3, extra),
    )
        .prop_map(|(alg, kid, typ, extra)| {
            let mut header: Map<String, Value> = extra.into_iter().flatten().collect();
            for (name, value) in [("alg", alg), ("kid", kid), ("typ", typ)] {
                if let Some(value) = value {
                    header.insert(name.to_string(), value);
                }
            }
            Value::Object(header)
        });
    prop_oneof![6 => shaped, 1 => arb_json(HEADER_KEYS)]
}

fn token() -> impl Strategy<Value = String> {
    let header = prop_oneof![
        8 => jwt_header().prop_map(|header| URL_SAFE_NO_PAD.encode(header.to_string())),
        1 => garbage().prop_map(|text| URL_SAFE_NO_PAD.encode(text)),
        1 => "[A-Za-z0-9_=+/-]{0,12}",
    ];
    let payload = prop_oneof![
        4 => arb_json(PAYLOAD_KEYS).prop_map(|payload| URL_SAFE_NO_PAD.encode(payload.to_string())),
        1 => Just(String::new()),
        1 => "[A-Za-z0-9_=+/.-]{0,12}",
    ];
    let signature = prop_oneof![
        4 => "[A-Za-z0-9_-]{1,24}",
        1 => Just(String::new()),
        1 => "[A-Za-z0-9_.=+/-]{0,12}",
    ];
    let assembled = (header, payload, signature, 0usize..10).prop_map(|(h, p, s, size)| {
        let mut token = format!("{h}.{p}.{s}");
        // Now and then exactly at the size limit, or one byte over it.
        if size < 2 {
            let target = MAX_COMPACT_TOKEN_BYTES + size;
            token.push_str(&"A".repeat(target.saturating_sub(token.len())));
        }
        token
    });
    prop_oneof![6 => near(assembled, TOKEN_SPECIALS), 1 => garbage()]
}

/// The three parts of a compact token within the size limit, the signature non-empty.
fn token_parts(token: &str) -> Option<(&str, &str, &str)> {
    if token.len() > MAX_COMPACT_TOKEN_BYTES {
        return None;
    }
    let parts: Vec<&str> = token.split('.').collect();
    match parts.as_slice() {
        [header, payload, signature] if !signature.is_empty() => Some((header, payload, signature)),
        _ => None,
    }
}

fn header_object(header: &str) -> Option<Map<String, Value>> {
    serde_json::from_slice(&URL_SAFE_NO_PAD.decode(header).ok()?).ok()
}

/// `parse`'s documented rule: three base64url parts within 4096 bytes, and a header of exactly
/// `alg` (RS256), `kid` and `typ`, all strings. Gives the kid and typ.
fn documented_session_header(token: &str) -> Option<(String, String)> {
    let (header, payload, _) = token_parts(token)?;
    let header = header_object(header)?;
    URL_SAFE_NO_PAD.decode(payload).ok()?;
    let text = |name: &str| header.get(name).and_then(Value::as_str).map(str::to_string);
    if header.len() != 3 || text("alg").as_deref() != Some(ALGORITHM) {
        return None;
    }
    Some((text("kid")?, text("typ")?))
}

/// `parse_access`'s documented rule: three base64url parts within 4096 bytes, `alg` RS256, a
/// `kid` of 1 to 200 characters, an optional string `typ` other than Core's own token types, and
/// no other member. Gives the kid and typ (empty when absent).
fn documented_access_header(token: &str) -> Option<(String, String)> {
    let (header, payload, _) = token_parts(token)?;
    let header = header_object(header)?;
    URL_SAFE_NO_PAD.decode(payload).ok()?;
    if header.get("alg").and_then(Value::as_str) != Some(ALGORITHM)
        || header
            .keys()
            .any(|name| !["alg", "kid", "typ"].contains(&name.as_str()))
    {
        return None;
    }
    let kid = header.get("kid")?.as_str()?;
    if !(1..=MAX_ACCESS_KID_CHARS).contains(&kid.chars().count()) {
        return None;
    }
    let typ = match header.get("typ") {
        None => "",
        Some(typ) => typ.as_str()?,
    };
    if typ == SESSION_TOKEN_TYPE || typ == INVOCATION_TOKEN_TYPE {
        return None;
    }
    Some((kid.to_string(), typ.to_string()))
}

/// A token signed once with a fresh key, and the key that verifies it.
static SIGNED: LazyLock<(String, DecodingKey)> = LazyLock::new(|| {
    let key = keys::generate().expect("key");
    let signing = keys::import(&key.kid, &key.public, &key.private).expect("import");
    let decoding = keys::decoding_key(&key.public).expect("decoding key");
    let token =
        jwt::encode(&key.kid, SESSION_TOKEN_TYPE, &json!({"sub": "a"}), &signing).expect("token");
    (token, decoding)
});

const ISSUER: &str = "https://cloud.example";
const ISSUER_SPECIALS: &[char] = &['/', ':', '.', ' ', 'C', 'é', '\0'];

/// Any time a real clock reads, from 2001 to the year 9999.
fn realistic_now() -> impl Strategy<Value = i64> {
    1_000_000_000i64..=253_402_300_799
}

/// A claim time: near `now` (the offset), or any value.
#[derive(Debug, Clone)]
enum ClaimTime {
    Near(i64),
    Any(u64),
}

impl ClaimTime {
    fn at(&self, now: i64) -> u64 {
        match self {
            ClaimTime::Near(offset) => u64::try_from(now.saturating_add(*offset)).unwrap_or(0),
            ClaimTime::Any(value) => *value,
        }
    }
}

fn claim_time() -> impl Strategy<Value = ClaimTime> {
    prop_oneof![
        6 => (-120i64..7200).prop_map(ClaimTime::Near),
        1 => any::<u64>().prop_map(ClaimTime::Any),
        1 => prop::sample::select(vec![0, 1, i64::MAX as u64, i64::MAX as u64 + 1, u64::MAX])
            .prop_map(ClaimTime::Any),
    ]
}

fn claim_text(
    valid: &'static str,
    others: &'static [&'static str],
) -> impl Strategy<Value = String> {
    prop_oneof![
        10 => Just(valid.to_string()),
        1 => prop::sample::select(others).prop_map(str::to_string),
        1 => near(Just(valid.to_string()), ISSUER_SPECIALS),
    ]
}

const SESSION_CLAIM_KEYS: &[&str] = &[
    "iss",
    "aud",
    "token_use",
    "sub",
    "sid",
    "auth_epoch",
    "iat",
    "exp",
    "nbf",
    "roles",
];

fn session_claims_json() -> impl Strategy<Value = Value> {
    (any::<u128>(), any::<u128>(), any::<u64>(), realistic_now()).prop_map(
        |(sub, sid, epoch, now)| {
            json!({
                "iss": ISSUER, "aud": SESSION_AUDIENCE, "token_use": "session",
                "sub": Uuid::from_u128(sub), "sid": Uuid::from_u128(sid), "auth_epoch": epoch,
                "iat": now, "exp": now + 3600,
            })
        },
    )
}

const ACCESS_CLAIM_KEYS: &[&str] = &[
    "iss",
    "aud",
    "token_use",
    "client_id",
    "scope",
    "sub",
    "uid",
    "id",
    "service_account_id",
    "exp",
    "nbf",
    "iat",
    "cloud",
    "access",
];
const SCOPE_SPECIALS: &[char] = &[' ', '"', '\\', '\t', '\u{3000}', '!', '~', 'é', '\u{7f}'];

fn access_claims_json(now: i64) -> impl Strategy<Value = Value> {
    let audience = prop_oneof![
        Just(json!(SESSION_AUDIENCE)),
        Just(json!([SESSION_AUDIENCE, "other"])),
        Just(json!(["other", SESSION_AUDIENCE])),
    ];
    let principal = prop_oneof![
        any::<u128>().prop_map(|id| ("service_account_id", json!(Uuid::from_u128(id)))),
        any::<u128>().prop_map(|id| ("id", json!(Uuid::from_u128(id)))),
        "[a-z][a-z0-9.]{0,20}".prop_map(|uid| ("uid", json!(uid))),
        "[a-z][a-z0-9.]{0,20}".prop_map(|uid| ("sub", json!(uid))),
    ];
    let scope = prop::collection::vec("[!#-\\[\\]-~]{1,12}", 0..6).prop_map(|s| s.join(" "));
    (
        audience,
        principal,
        "[a-z][a-z0-9-]{0,30}",
        prop::option::of(near(scope, SCOPE_SPECIALS)),
        -100i64..3600,
        prop::option::of(-100i64..100),
    )
        .prop_map(move |(aud, (principal, id), client_id, scope, exp, nbf)| {
            let mut claims = object(vec![
                ("iss", Some(json!(ISSUER))),
                ("aud", Some(aud)),
                ("token_use", Some(json!("access"))),
                ("client_id", Some(json!(client_id))),
                ("scope", scope.map(Value::from)),
                ("exp", Some(json!(now + exp))),
                ("nbf", nbf.map(|nbf| json!(now + nbf))),
                ("iat", Some(json!(now))),
            ]);
            claims[principal] = id;
            claims
        })
}

/// A NumericDate: an integer, or a finite number cut to whole seconds.
fn numeric_date(value: &Value) -> Option<i64> {
    value
        .as_i64()
        .or_else(|| value.as_f64().filter(|f| f.is_finite()).map(|f| f as i64))
}

fn is_scope_token(scope: &str) -> bool {
    (1..=200).contains(&scope.len())
        && scope
            .bytes()
            .all(|b| b == 0x21 || (0x23..=0x5b).contains(&b) || (0x5d..=0x7e).contains(&b))
}

/// The rules of `k2b_core::identity::oauth`'s documentation, one by one.
fn documented_access(claims: &Value, issuer: &str, now: i64) -> Option<AccessClaims> {
    let tolerance = IDENTITY_CLOCK_TOLERANCE_SECONDS;
    let text = |name: &str| claims.get(name).and_then(Value::as_str);
    let issuer_ok = text("iss") == Some(issuer);
    let use_ok = text("token_use") == Some("access");
    let audience_ok = match claims.get("aud") {
        Some(Value::String(aud)) => aud == SESSION_AUDIENCE,
        Some(Value::Array(auds)) => auds.iter().any(|a| a == SESSION_AUDIENCE),
        _ => false,
    };
    let exp_ok = claims
        .get("exp")
        .and_then(numeric_date)
        .is_some_and(|exp| exp > now - tolerance);
    let nbf_ok = match claims.get("nbf") {
        None | Some(Value::Null) => true,
        Some(nbf) => numeric_date(nbf).is_some_and(|nbf| nbf <= now + tolerance),
    };
    if !(issuer_ok && use_ok && audience_ok && exp_ok && nbf_ok) {
        return None;
    }
    let client_id = text("client_id")?.trim();
    if client_id.is_empty() || client_id.chars().count() > 200 {
        return None;
    }
    let scopes: Vec<String> = match claims.get("scope") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::String(scope)) => scope.split_whitespace().map(str::to_string).collect(),
        Some(_) => return None,
    };
    if scopes.len() > MAX_SCOPES || !scopes.iter().all(|s| is_scope_token(s)) {
        return None;
    }
    let uuid = |value: &Value| value.as_str().and_then(|id| Uuid::parse_str(id).ok());
    let principal = match (claims.get("service_account_id"), claims.get("id")) {
        (Some(id), _) => AccessPrincipal::ServiceAccount(uuid(id)?),
        (None, Some(id)) => AccessPrincipal::UserId(uuid(id)?),
        (None, None) => {
            let uid = text("uid").or_else(|| text("sub"))?.trim();
            if uid.is_empty() || uid.chars().count() > 64 {
                return None;
            }
            AccessPrincipal::Uid(uid.to_string())
        }
    };
    Some(AccessClaims {
        principal,
        client_id: client_id.to_string(),
        scopes,
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 10_000, ..ProptestConfig::default() })]

    /// `jwt::parse` reads any text; it gives a token exactly when the documented shape and header
    /// hold, with the header's kid and typ.
    #[test]
    fn session_headers_parse_only_when_exact(token in token()) {
        let parsed = jwt::parse(&token).map(|t| (t.kid, t.typ));
        prop_assert_eq!(parsed, documented_session_header(&token));
    }

    /// `jwt::parse_access` reads any text; it gives a token exactly when the documented shape and
    /// header hold, never for a token typed as one of Core's own.
    #[test]
    fn access_headers_parse_only_when_documented(token in token()) {
        let parsed = jwt::parse_access(&token).map(|t| (t.kid, t.typ));
        prop_assert_eq!(parsed, documented_access_header(&token));
    }

    /// An exact header with any kid and typ is accepted by `parse`, and by `parse_access` when
    /// the kid has 1 to 200 characters and the typ is not Core's.
    #[test]
    fn well_formed_headers_are_accepted(
        kid in kid_text(),
        typ in prop_oneof![Just(SESSION_TOKEN_TYPE.to_string()), "[a-z+]{0,12}"],
        claims in arb_json(PAYLOAD_KEYS),
        signature in "[A-Za-z0-9_-]{1,64}",
    ) {
        let header = json!({"alg": ALGORITHM, "kid": kid, "typ": typ});
        let header = URL_SAFE_NO_PAD.encode(header.to_string());
        let token = format!("{header}.{}.{signature}", URL_SAFE_NO_PAD.encode(claims.to_string()));
        prop_assume!(token.len() <= MAX_COMPACT_TOKEN_BYTES);
        let parsed = jwt::parse(&token).map(|t| (t.kid, t.typ));
        prop_assert_eq!(parsed, Some((kid.clone(), typ.clone())));
        let access_kid = (1..=MAX_ACCESS_KID_CHARS).contains(&kid.chars().count());
        let access_typ = typ != SESSION_TOKEN_TYPE && typ != INVOCATION_TOKEN_TYPE;
        let parsed = jwt::parse_access(&token).map(|t| (t.kid, t.typ));
        prop_assert_eq!(parsed.is_some(), access_kid && access_typ);
    }

    /// A signed token verifies; any change to it that still parses does not.
    #[test]
    fn changed_tokens_never_verify(edits in prop::collection::vec(edit(TOKEN_SPECIALS), 1..4)) {
        let (original, key) = &*SIGNED;
        let changed = apply_edits(original, &edits);
        let verified = jwt::parse(&changed).and_then(|t| t.verify::<Value>(key));
        if changed == *original {
            prop_assert_eq!(verified, Some(json!({"sub": "a"})));
        } else {
            prop_assert_eq!(verified, None);
        }
    }

    /// Session claims read strictly (exactly the eight claims, no other), and
    /// `check_session_claims` accepts only what the session rules allow: this issuer, audience
    /// `cloud`, use `session`, issued before expiry, not expired and not issued in the future
    /// beyond the 30 s skew.
    #[test]
    fn session_claims_follow_the_rules(
        claims_json in under_fire(session_claims_json(), SESSION_CLAIM_KEYS),
        issuer in claim_text(ISSUER, &["https://other.example", ""]),
        aud in claim_text(SESSION_AUDIENCE, &["Cloud", "app:mail", "cloud "]),
        token_use in claim_text("session", &["access", "Session", ""]),
        iat in claim_time(),
        exp in claim_time(),
        now in realistic_now(),
        any_now in DateTime::<Utc>::MIN_UTC.timestamp()..=DateTime::<Utc>::MAX_UTC.timestamp(),
    ) {
        let read = serde_json::from_value::<SessionClaims>(claims_json.clone());
        if let (Ok(read), Some(object)) = (&read, claims_json.as_object()) {
            let names: Vec<&str> = object.keys().map(String::as_str).collect();
            let claims = ["aud", "auth_epoch", "exp", "iat", "iss", "sid", "sub", "token_use"];
            prop_assert_eq!(names, claims);
            check_session_claims(read, ISSUER, any_now);
        }
        let claims = SessionClaims {
            iss: "https://cloud.example".into(),
            aud,
            token_use,
            sub: Uuid::nil(),
            sid: Uuid::nil(),
            auth_epoch: 0,
            iat: iat.at(now),
            exp: exp.at(now),
        };
        check_session_claims(&claims, &issuer, any_now);
        let accepted = check_session_claims(&claims, &issuer, now);
        let tolerance = i128::from(IDENTITY_CLOCK_TOLERANCE_SECONDS);
        let (iat, exp, now) = (i128::from(claims.iat), i128::from(claims.exp), i128::from(now));
        let allowed = claims.iss == issuer
            && claims.aud == SESSION_AUDIENCE
            && claims.token_use == "session"
            && exp > 0
            && exp > iat
            && exp > now - tolerance
            && iat <= now + tolerance;
        prop_assert!(!accepted || allowed, "accepted against the rules: {:?}", claims);
        if exp <= i128::from(i64::MAX) && iat <= i128::from(i64::MAX) {
            prop_assert_eq!(accepted, allowed);
        }
    }

    /// `check_access_claims` reads any JSON and accepts exactly what the access-token rules
    /// allow, with the principal, client and scopes those rules name.
    #[test]
    fn access_claims_follow_the_rules(
        (now, claims) in realistic_now().prop_flat_map(|now| {
            (Just(now), under_fire(access_claims_json(now), ACCESS_CLAIM_KEYS))
        }),
        issuer in claim_text(ISSUER, &["https://other.example", ""]),
        any_now in DateTime::<Utc>::MIN_UTC.timestamp()..=DateTime::<Utc>::MAX_UTC.timestamp(),
    ) {
        check_access_claims(&claims, &issuer, any_now);
        prop_assert_eq!(
            check_access_claims(&claims, &issuer, now),
            documented_access(&claims, &issuer, now)
        );
    }

    /// Claims that follow every access-token rule are accepted.
    #[test]
    fn valid_access_claims_are_accepted(
        (now, claims) in realistic_now().prop_flat_map(|now| (Just(now), access_claims_json(now))),
    ) {
        let accepted = check_access_claims(&claims, ISSUER, now);
        let scope_ok = claims.get("scope").and_then(Value::as_str).is_none_or(|scope| {
            scope.split_whitespace().all(is_scope_token)
        });
        let tolerance = IDENTITY_CLOCK_TOLERANCE_SECONDS;
        let nbf = claims.get("nbf").and_then(Value::as_i64);
        let exp = claims.get("exp").and_then(Value::as_i64);
        let nbf_ok = nbf.is_none_or(|nbf| nbf <= now + tolerance);
        let exp_ok = exp.is_some_and(|exp| exp > now - tolerance);
        prop_assert_eq!(accepted.is_some(), scope_ok && nbf_ok && exp_ok);
    }
}

// The widget response contract.

/// Every name a violation's path may use.
const WIDGET_FIELDS: &[&str] = &[
    "title",
    "icon",
    "href",
    "meta",
    "blocks",
    "kind",
    "value",
    "label",
    "sub",
    "valueClass",
    "accent",
    "tone",
    "text",
    "grow",
    "items",
    "iconTone",
    "emptyMessage",
    "message",
    "pills",
    "description",
    "subtitle",
];
const WIDGET_KEYS: &[&str] = &[
    "title",
    "icon",
    "href",
    "meta",
    "blocks",
    "kind",
    "value",
    "label",
    "sub",
    "valueClass",
    "accent",
    "tone",
    "text",
    "grow",
    "items",
    "iconTone",
    "emptyMessage",
    "message",
    "pills",
    "description",
    "subtitle",
    "stat",
    "list",
    "status",
    "placeholder",
    "hero",
    "emerald",
    "ok",
    "warn",
    "/app/x",
    "javascript:x",
];
const TONES: &[&str] = &["emerald", "amber", "red", "blue", "zinc"];
const STATUS_TONES: &[&str] = &["ok", "warn", "error", "info"];

fn widget_label() -> impl Strategy<Value = Value> {
    prop_oneof![
        8 => "[A-Za-z0-9 ]{1,16}",
        2 => "[éü😀]{1,8}",
        1 => Just("x".repeat(500)),
        1 => Just("😀".repeat(250)),
    ]
    .prop_map(Value::from)
}

fn widget_icon() -> impl Strategy<Value = Value> {
    prop_oneof![8 => "ti ti-[a-z]{1,10}", 1 => Just("i".repeat(120))].prop_map(Value::from)
}

fn widget_href() -> impl Strategy<Value = Value> {
    prop_oneof![
        "/app/[a-z]{1,8}(/[a-z0-9]{1,6}){0,2}",
        "https://[a-z]{1,8}\\.example/[a-z]{0,6}",
        "http://[a-z]{1,8}\\.example:8080/",
        "\\?[a-z]=[0-9]{1,3}",
        "#[a-z]{1,6}",
        "\\.\\./[a-z]{1,5}",
    ]
    .prop_map(Value::from)
}

fn tone(tones: &'static [&'static str]) -> impl Strategy<Value = Value> {
    prop::sample::select(tones).prop_map(Value::from)
}

fn text_or_number() -> impl Strategy<Value = Value> {
    prop_oneof![
        widget_label(),
        any::<i64>().prop_map(Value::from),
        (-1e9f64..1e9).prop_map(Value::from),
    ]
}

fn widget_block() -> impl Strategy<Value = Value> {
    use prop::option::of;
    let stat = (
        text_or_number(),
        widget_label(),
        of(widget_label()),
        of(widget_label()),
        of((tone(TONES), widget_icon(), of(widget_label()))),
        of(any::<bool>()),
    )
        .prop_map(|(value, label, sub, class, accent, grow)| {
            let accent = accent.map(|(tone, icon, text)| {
                object(vec![
                    ("tone", Some(tone)),
                    ("icon", Some(icon)),
                    ("text", text),
                ])
            });
            object(vec![
                ("kind", Some(json!("stat"))),
                ("value", Some(value)),
                ("label", Some(label)),
                ("sub", sub),
                ("valueClass", class),
                ("accent", accent),
                ("grow", grow.map(Value::from)),
            ])
        });
    let item = (
        of(widget_icon()),
        of(tone(TONES)),
        widget_label(),
        of(widget_label()),
        of(widget_label()),
        of(widget_href()),
    )
        .prop_map(|(icon, icon_tone, label, sub, meta, href)| {
            object(vec![
                ("icon", icon),
                ("iconTone", icon_tone),
                ("label", Some(label)),
                ("sub", sub),
                ("meta", meta),
                ("href", href),
            ])
        });
    let list = (
        prop::collection::vec(item, 0..4),
        of(widget_label()),
        of(any::<bool>()),
    )
        .prop_map(|(items, empty, grow)| {
            object(vec![
                ("kind", Some(json!("list"))),
                ("items", Some(Value::Array(items))),
                ("emptyMessage", empty),
                ("grow", grow.map(Value::from)),
            ])
        });
    let status = (
        tone(STATUS_TONES),
        widget_label(),
        of(widget_label()),
        of(widget_icon()),
        of(any::<bool>()),
    )
        .prop_map(|(tone, title, message, icon, grow)| {
            object(vec![
                ("kind", Some(json!("status"))),
                ("tone", Some(tone)),
                ("title", Some(title)),
                ("message", message),
                ("icon", icon),
                ("grow", grow.map(Value::from)),
            ])
        });
    let pill = (
        widget_label(),
        text_or_number(),
        of(tone(TONES)),
        of(widget_href()),
    )
        .prop_map(|(label, value, tone, href)| {
            object(vec![
                ("label", Some(label)),
                ("value", Some(value)),
                ("tone", tone),
                ("href", href),
            ])
        });
    let pills = (prop::collection::vec(pill, 0..4), of(any::<bool>())).prop_map(|(pills, grow)| {
        object(vec![
            ("kind", Some(json!("pills"))),
            ("pills", Some(Value::Array(pills))),
            ("grow", grow.map(Value::from)),
        ])
    });
    let placeholder = (widget_label(), of(widget_label()), of(widget_icon())).prop_map(
        |(title, description, icon)| {
            object(vec![
                ("kind", Some(json!("placeholder"))),
                ("title", Some(title)),
                ("description", description),
                ("icon", icon),
            ])
        },
    );
    let hero = (
        widget_label(),
        of(widget_label()),
        of(widget_icon()),
        of(tone(TONES)),
    )
        .prop_map(|(title, subtitle, icon, tone)| {
            object(vec![
                ("kind", Some(json!("hero"))),
                ("title", Some(title)),
                ("subtitle", subtitle),
                ("icon", icon),
                ("tone", tone),
            ])
        });
    prop_oneof![stat, list, status, pills, placeholder, hero]
}

fn widget_response() -> impl Strategy<Value = Value> {
    use prop::option::of;
    (
        widget_label(),
        of(widget_icon()),
        of(widget_href()),
        of(widget_label()),
        prop::collection::vec(widget_block(), 0..4),
    )
        .prop_map(|(title, icon, href, meta, blocks)| {
            object(vec![
                ("title", Some(title)),
                ("icon", icon),
                ("href", href),
                ("meta", meta),
                ("blocks", Some(Value::Array(blocks))),
            ])
        })
}

/// Whether a violation's path names a place in `value`: every step exists, except that the last
/// may be a missing key of an object; and every name in it is a field of the contract.
fn names_a_place(value: &Value, path: &str) -> bool {
    let Some(mut rest) = path.strip_prefix('$') else {
        return false;
    };
    let mut node = Some(value);
    while !rest.is_empty() {
        let Some(current) = node else {
            return false;
        };
        if let Some(after) = rest.strip_prefix('.') {
            let end = after.find(['.', '[']).unwrap_or(after.len());
            let key = &after[..end];
            let Some(object) = current.as_object() else {
                return false;
            };
            if !WIDGET_FIELDS.contains(&key) {
                return false;
            }
            node = object.get(key);
            rest = &after[end..];
        } else if let Some(after) = rest.strip_prefix('[') {
            let Some(end) = after.find(']') else {
                return false;
            };
            let Ok(at) = after[..end].parse::<usize>() else {
                return false;
            };
            node = current.as_array().and_then(|items| items.get(at));
            if node.is_none() {
                return false;
            }
            rest = &after[end + 1..];
        } else {
            return false;
        }
    }
    true
}

/// Whether `output` only holds what `input` holds (objects may lose keys, nothing else changes).
fn contained(output: &Value, input: &Value) -> bool {
    match (output, input) {
        (Value::Object(out), Value::Object(inp)) => out
            .iter()
            .all(|(key, value)| inp.get(key).is_some_and(|i| contained(value, i))),
        (Value::Array(out), Value::Array(inp)) => {
            out.len() == inp.len() && out.iter().zip(inp).all(|(o, i)| contained(o, i))
        }
        (out, inp) => out == inp,
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 10_000, ..ProptestConfig::default() })]

    /// Any JSON is either a response stripped to the contract (nothing added, parsing it again
    /// gives the same response) or a `SchemaViolation` whose path names the offending place and
    /// never a value.
    #[test]
    fn widget_responses_are_stripped_or_refused_at_a_path(
        value in under_fire(widget_response(), WIDGET_KEYS),
    ) {
        match parse_widget_response(&value) {
            Ok(response) => {
                let out = to_json(&response)?;
                prop_assert!(contained(&out, &value), "{} not within {}", out, value);
                prop_assert_eq!(parse_widget_response(&out), Ok(response));
            }
            Err(SchemaViolation(path)) => {
                prop_assert!(names_a_place(&value, &path), "{:?} in {}", path, value);
                prop_assert_eq!(
                    SchemaViolation(path.clone()).to_string(),
                    format!("widget response is invalid at {path}")
                );
            }
        }
    }

    /// A response within the contract is accepted and written back exactly as given.
    #[test]
    fn valid_widget_responses_round_trip(value in widget_response()) {
        let response = parse_widget_response(&value);
        prop_assert!(response.is_ok(), "{:?} for {}", response, value);
        if let Ok(response) = response {
            prop_assert_eq!(to_json(&response)?, value);
        }
    }
}

// The registry entry validator and the publication rules.

const ENTRY_KEYS: &[&str] = &[
    "id",
    "name",
    "icon",
    "description",
    "baseUrl",
    "routes",
    "platformPermissions",
    "presentation",
    "baseLocale",
    "translations",
    "de",
    "runtime",
    "release",
    "syncVersion",
    "version",
    "startedAt",
    "nav",
    "href",
    "section",
    "requiresRoles",
    "adminHref",
    "badge",
    "adminNav",
    "label",
    "links",
    "legalLinks",
    "searchLinks",
    "keywords",
    "widgets",
    "path",
    "settingKeys",
    "capabilities",
    "protocolVersion",
    "manifestHash",
    "help",
    "pageBase",
    "openapi",
    "skills",
    "pwa",
    "primary",
    "mail:send",
    "/app/x",
    "http://app:3000",
    "adminGroups",
];

/// Every message of `validate_entry` that does not name a locale.
const ENTRY_MESSAGES: &[&str] = &[
    "entry must be an object",
    "id must be a non-empty string",
    "name must be a non-empty string",
    "icon must be a non-empty string",
    "description must be a non-empty string",
    "baseUrl must be a non-empty string",
    "baseUrl must be an HTTP(S) URL without embedded credentials",
    "routes must be an array of absolute paths",
    "platformPermissions must be an array of \"mail:send\" and \"mail:read\"",
    "startedAt must be a finite number",
    "runtime must be an object",
    "runtime.release must be a non-empty string",
    "runtime.syncVersion must be a non-empty string",
    "presentation must be a localized app-presentation catalog",
    "nav must be an object",
    "nav must be a valid navigation object",
    "nav.requiresRoles must be an array of strings",
    "adminNav must be an array of valid navigation groups",
    "legalLinks must be an array of valid links",
    "searchLinks must be an array of same-origin navigation links",
    "widgets must be an array of valid widgets",
    "settingKeys must be an array of strings",
    "capabilities must be a valid capability summary",
    "help must be a valid Help reference",
    "openapi must be a string",
];

/// Whether `message` is one of `validate_entry`'s `<field> must be <expectation>` messages and
/// names a field the entry has (or a required one).
fn is_documented_entry_error(entry: &Value, message: &str) -> bool {
    let Some((field, _)) = message.split_once(" must be ") else {
        return false;
    };
    let top = field.split('.').next().unwrap_or_default();
    let present = match top {
        "entry" => !entry.is_object(),
        "id" | "name" | "icon" | "description" | "baseUrl" | "routes" => true,
        other => entry.get(other).is_some(),
    };
    if !present {
        return false;
    }
    if ENTRY_MESSAGES.contains(&message) {
        return true;
    }
    let translations = entry
        .pointer("/presentation/translations")
        .and_then(Value::as_object);
    translations.is_some_and(|translations| {
        translations.keys().any(|locale| {
            let path = format!("presentation.translations.{locale}");
            message == format!("{path} must be an object")
                || ["name", "description"]
                    .iter()
                    .any(|f| message == format!("{path}.{f} must be a string"))
                || ["adminGroups", "adminLinks", "legalLinks", "searchLinks"]
                    .iter()
                    .any(|f| message == format!("{path}.{f} must be a string map"))
        })
    })
}

const ROUTE_SEGMENTS: &[&str] = &[
    "api",
    "auth",
    "pwa",
    "_auth",
    "branding",
    ".well-known",
    "registry",
    "widgets",
    "help",
    "mail",
    "admin",
    "core",
    "accounts",
    "users",
    "_internal",
    "healthz",
    "_local",
    "app",
    "reports",
    "inventory",
    ".",
    "..",
    "manifest.webmanifest",
    "sw.js",
    "API",
    "Auth",
    "PWA",
    "x%2f",
    "a?b",
    "a#b",
    " ",
    "\\",
    "",
    "jwks.json",
];
const ROUTE_SPECIALS: &[char] = &[
    '/', '\\', '.', '?', '#', '%', ' ', '\t', 'A', 'a', '-', '\u{a0}',
];
const APP_IDS: &[&str] = &["pwa", "reports", "inventory", "", "auth"];

fn route() -> impl Strategy<Value = String> {
    let built = (
        prop::sample::select(&["/", "//", "/\\", "", "/ "][..]),
        prop::collection::vec(prop::sample::select(ROUTE_SEGMENTS), 0..4),
        prop::sample::select(&["", "/", "//"][..]),
        any::<u8>(),
    )
        .prop_map(|(lead, segments, trail, case)| {
            let joined = format!("{lead}{}{trail}", segments.join("/"));
            if case % 4 == 0 {
                joined.to_ascii_uppercase()
            } else {
                joined
            }
        });
    prop_oneof![
        6 => near(built, ROUTE_SPECIALS),
        1 => "/app/[a-z]{1,10}",
        1 => garbage(),
    ]
}

/// The route rules of `k2b_core::registry::rules`' documentation.
fn documented_route_allowed(app_id: &str, route: &str) -> bool {
    let mut chars = route.chars();
    let same_origin = chars.next() == Some('/')
        && !matches!(chars.next(), Some('/' | '\\'))
        && !route.contains(['\\', '?', '#', '%'])
        && !route.chars().any(char::is_whitespace);
    let dot_segments = route.split('/').any(|s| s == "." || s == "..");
    let trimmed = route.trim_end_matches('/');
    let normal = if trimmed.is_empty() { "/" } else { trimmed };
    let lower = normal.to_ascii_lowercase();
    let under =
        |path: &str, prefix: &str| path == prefix || path.starts_with(&format!("{prefix}/"));
    let whole = lower == "/" || lower == "/api";
    let core = CORE_PATHS.iter().any(|core| under(&lower, core));
    let pwa_ok =
        !under(&lower, "/pwa") || app_id == "pwa" || under(normal, &format!("/pwa/{app_id}"));
    same_origin && !dot_segments && !whole && !core && pwa_ok
}

const ROUTE_REFUSALS: &[&str] = &[
    "routes must be same-origin paths: *",
    "routes must not contain dot segments: *",
    "routes must not claim * as a whole",
    "routes must not claim Core's path *",
    "routes below /pwa must be the app's own /pwa/*",
];

const CHECK_MESSAGES: &[&str] = &[
    "routes must have at most # entries (# given)",
    "widgets must have at most # entries (# given)",
    "adminNav must have at most # entries (# given)",
    "adminNav[#].links must have at most # entries (# given)",
    "legalLinks must have at most # entries (# given)",
    "nav.href must be a same-origin path or an http(s) URL",
    "nav.adminHref must be a same-origin path or an http(s) URL",
    "adminNav[#].links[#].href must be a same-origin path or an http(s) URL",
    "legalLinks[#].href must be a same-origin path or an http(s) URL",
];

const LINK_PIECES: &[&str] = &[
    "/",
    "//",
    "/\\",
    "http://",
    "https://",
    "HTTPS://",
    "javascript:",
    "JaVaScRiPt:",
    "data:",
    "vbscript:",
    "mailto:",
    "ftp://",
    "user:pw@",
    "user@",
    "example.org",
    "docs.example",
    "/app",
    ":8080",
    "?x=1",
    "#y",
    " ",
    "\t",
    "\n",
    "\u{85}",
    "%0a",
    "..",
    "https:",
    "http:///",
    "[::1]",
    "127.0.0.1",
    "a",
    "é",
];
const LINK_SPECIALS: &[char] = &[
    '/', '\\', ':', '@', ' ', '\t', '\n', '\u{7f}', '\u{85}', '#', '?', 'a',
];

fn link() -> impl Strategy<Value = String> {
    let built = prop::collection::vec(prop::sample::select(LINK_PIECES), 1..5)
        .prop_map(|pieces| pieces.concat());
    prop_oneof![
        6 => near(built, LINK_SPECIALS),
        1 => garbage(),
        1 => Just(format!("/{}", "a".repeat(MAX_HREF_CHARS - 1))),
        1 => Just(format!("/{}", "a".repeat(MAX_HREF_CHARS))),
    ]
}

/// The link rule of `k2b_core::registry::rules`' documentation: a same-origin path or an
/// absolute http(s) URL with a host and no credentials, no control characters, at most 2000
/// characters.
fn documented_safe_link(href: &str) -> bool {
    if href.is_empty()
        || href.chars().count() > MAX_HREF_CHARS
        || href.chars().any(char::is_control)
    {
        return false;
    }
    if let Some(rest) = href.strip_prefix('/') {
        return !rest.starts_with(['/', '\\'])
            && !href.chars().any(|c| c == '\\' || c.is_whitespace());
    }
    url::Url::parse(href).is_ok_and(|url| {
        matches!(url.scheme(), "http" | "https")
            && url.host_str().is_some_and(|host| !host.is_empty())
            && url.username().is_empty()
            && url.password().is_none()
    })
}

fn array_of(value: Option<&Value>) -> &[Value] {
    value
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default()
}

/// The publication rules of `k2b_core::registry::rules`' documentation.
fn documented_publishable(entry: &Value) -> bool {
    let app_id = entry.get("id").and_then(Value::as_str).unwrap_or_default();
    let link_ok = |href: Option<&Value>| match href {
        None => true,
        Some(Value::String(href)) => href.is_empty() || is_safe_link(href),
        Some(_) => false,
    };
    let routes: Vec<&str> = array_of(entry.get("routes"))
        .iter()
        .filter_map(Value::as_str)
        .collect();
    let nav = entry.get("nav");
    let admin_nav = array_of(entry.get("adminNav"));
    let legal = array_of(entry.get("legalLinks"));
    routes.len() <= MAX_ROUTES
        && routes.iter().all(|r| route_refusal(app_id, r).is_none())
        && array_of(entry.get("widgets")).len() <= MAX_WIDGETS_PER_ENTRY
        && ["href", "adminHref"]
            .iter()
            .all(|field| link_ok(nav.and_then(|nav| nav.get(field))))
        && admin_nav.len() <= MAX_LINKS
        && admin_nav.iter().all(|group| {
            let links = array_of(group.get("links"));
            links.len() <= MAX_LINKS && links.iter().all(|l| link_ok(l.get("href")))
        })
        && legal.len() <= MAX_LINKS
        && legal.iter().all(|l| link_ok(l.get("href")))
}

fn registry_entry() -> impl Strategy<Value = Value> {
    use prop::option::of;
    let id = "[a-z][a-z0-9-]{0,12}";
    let base_url = (
        prop::sample::select(&["http", "https"][..]),
        "[a-wyz][a-z0-9-]{0,10}",
        of(1u16..),
        of("/[a-z]{1,8}"),
    )
        .prop_map(|(scheme, host, port, path)| {
            let port = port.map(|p| format!(":{p}")).unwrap_or_default();
            format!("{scheme}://{host}{port}{}", path.unwrap_or_default())
        });
    let safe_link = prop_oneof![
        "/[a-z]{1,8}(/[a-z0-9]{1,6}){0,2}",
        "https://[a-z]{1,8}\\.example/[a-z]{0,6}",
    ];
    let nav = (
        safe_link.clone(),
        prop::sample::select(&["primary", "more", "hidden"][..]),
        of(prop::collection::vec("[a-z]{1,8}", 0..3)),
        of(safe_link.clone()),
    )
        .prop_map(|(href, section, roles, admin)| {
            object(vec![
                ("href", Some(json!(href))),
                ("section", Some(json!(section))),
                ("requiresRoles", roles.map(Value::from)),
                ("adminHref", admin.map(Value::from)),
            ])
        });
    let admin_link = ("[A-Za-z ]{1,10}", safe_link.clone(), "ti ti-[a-z]{1,6}")
        .prop_map(|(label, href, icon)| json!({"label": label, "href": href, "icon": icon}));
    let admin_group = (
        "[A-Za-z ]{1,10}",
        of("[a-z]{1,8}"),
        of(Just("ai")),
        prop::collection::vec(admin_link, 0..3),
    )
        .prop_map(|(label, id, section, links)| {
            object(vec![
                ("label", Some(json!(label))),
                ("id", id.map(Value::from)),
                ("section", section.map(Value::from)),
                ("links", Some(Value::Array(links))),
            ])
        });
    let legal =
        ("[A-Za-z ]{1,10}", safe_link, of("ti ti-[a-z]{1,6}")).prop_map(|(label, href, icon)| {
            object(vec![
                ("label", Some(json!(label))),
                ("href", Some(json!(href))),
                ("icon", icon.map(Value::from)),
            ])
        });
    let search = (
        "[A-Za-z]{1,10}",
        "/[a-z]{1,8}(/[a-z]{1,6})?",
        of(prop::collection::vec("[a-z]{1,6}", 0..3)),
    )
        .prop_map(|(label, href, keywords)| {
            object(vec![
                ("label", Some(json!(label))),
                ("href", Some(json!(href))),
                ("keywords", keywords.map(Value::from)),
            ])
        });
    let widget =
        ("[a-z]{1,8}", "/api/[a-z]{1,8}", of(any::<bool>())).prop_map(|(id, path, suggest)| {
            object(vec![
                ("id", Some(json!(id))),
                ("path", Some(json!(path))),
                ("suggest", suggest.map(Value::from)),
            ])
        });
    let parts = (
        of(prop::sample::subsequence(
            vec!["mail:send", "mail:read"],
            0..=2,
        )),
        of(("[a-z]{2}", "[A-Za-z ]{1,10}")),
        of(("[0-9]\\.[0-9]", "[0-9]\\.[0-9]", of("[0-9]\\.[0-9]"))),
        of(0f64..2e12),
        of(nav),
        of(prop::collection::vec(admin_group, 0..3)),
        of(prop::collection::vec(legal, 0..3)),
        of(prop::collection::vec(search, 0..3)),
        of(prop::collection::vec(widget, 0..4)),
        of(prop::collection::vec("[a-z]{1,6}\\.[a-z]{1,6}", 0..3)),
        of(("[0-9a-f]{8}", "/[a-z]{1,8}/help")),
    );
    (
        id,
        "[A-Za-z ]{1,12}",
        "ti ti-[a-z]{1,8}",
        "[A-Za-z ]{1,20}",
        base_url,
        parts,
    )
        .prop_map(|(id, name, icon, description, base_url, parts)| {
            let (permissions, presentation, runtime, started, nav) =
                (parts.0, parts.1, parts.2, parts.3, parts.4);
            let (admin_nav, legal, search, widgets, setting_keys, help) =
                (parts.5, parts.6, parts.7, parts.8, parts.9, parts.10);
            let routes = json!([format!("/app/{id}"), format!("/app/{id}/api")]);
            object(vec![
                ("id", Some(json!(id))),
                ("name", Some(json!(name))),
                ("icon", Some(json!(icon))),
                ("description", Some(json!(description))),
                ("baseUrl", Some(json!(base_url))),
                ("routes", Some(routes)),
                ("platformPermissions", permissions.map(Value::from)),
                ("presentation", presentation.map(presentation_of)),
                ("runtime", runtime.map(runtime_of)),
                ("startedAt", started.map(Value::from)),
                ("nav", nav),
                ("adminNav", admin_nav.map(Value::Array)),
                ("legalLinks", legal.map(Value::Array)),
                ("searchLinks", search.map(Value::Array)),
                ("widgets", widgets.map(Value::Array)),
                ("settingKeys", setting_keys.map(Value::from)),
                (
                    "capabilities",
                    Some(json!({"protocolVersion": 1, "manifestHash": "abc"})),
                ),
                ("help", help.map(help_of)),
                ("skills", Some(json!({"manifestHash": "s"}))),
                ("pwa", Some(json!({"href": "/pwa/x"}))),
                ("openapi", Some(json!("/api/openapi.json"))),
            ])
        })
}

fn presentation_of((locale, name): (String, String)) -> Value {
    let translation = json!({"name": name, "searchLinks": {"a": "b"}});
    json!({"baseLocale": "en", "translations": {locale: translation}})
}

fn runtime_of((release, sync, version): (String, String, Option<String>)) -> Value {
    object(vec![
        ("release", Some(json!(release))),
        ("syncVersion", Some(json!(sync))),
        ("version", version.map(Value::from)),
    ])
}

fn help_of((hash, page): (String, String)) -> Value {
    json!({"manifestHash": hash, "pageBase": page, "baseLocale": "en"})
}

fn publishable_entry() -> impl Strategy<Value = Value> {
    (
        prop::sample::select(APP_IDS),
        prop::collection::vec(route(), 0..4),
        prop::option::of(("[a-z]{0,2}", link(), link())),
        prop::collection::vec(prop::collection::vec(link(), 0..3), 0..3),
        prop::collection::vec(link(), 0..3),
        0usize..4,
    )
        .prop_map(|(id, routes, nav, admin_nav, legal, widgets)| {
            let admin_nav: Vec<Value> = admin_nav
                .into_iter()
                .map(|hrefs| {
                    let links: Vec<Value> = hrefs
                        .into_iter()
                        .map(|href| json!({"label": "l", "href": href, "icon": "i"}))
                        .collect();
                    json!({"label": "g", "links": links})
                })
                .collect();
            let nav = nav.map(|(section, href, admin)| {
                json!({"href": href, "section": section, "adminHref": admin})
            });
            let legal: Vec<Value> = legal
                .into_iter()
                .map(|href| json!({"label": "l", "href": href}))
                .collect();
            let widgets: Vec<Value> = (0..widgets)
                .map(|i| json!({"id": format!("w{i}"), "path": "/x"}))
                .collect();
            object(vec![
                ("id", Some(json!(id))),
                ("routes", Some(json!(routes))),
                ("nav", nav),
                ("adminNav", Some(Value::Array(admin_nav))),
                ("legalLinks", Some(Value::Array(legal))),
                ("widgets", Some(Value::Array(widgets))),
            ])
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 10_000, ..ProptestConfig::default() })]

    /// `validate_entry` reads any JSON; every refusal is one of its `<field> must be
    /// <expectation>` messages naming a field the entry has, and `AppRegistryEntry::parse`
    /// refuses with the same message (or `entry is malformed: …`). An accepted entry has what
    /// readers rely on and reads back the same after writing it out.
    #[test]
    fn registry_entries_are_read_or_refused_with_a_field_message(
        value in under_fire(registry_entry(), ENTRY_KEYS),
    ) {
        let validated = validate_entry(&value);
        if let Err(message) = &validated {
            let documented = is_documented_entry_error(&value, message);
            prop_assert!(documented, "{:?} for {}", message, value);
        }
        match AppRegistryEntry::parse(&value) {
            Err(message) => match &validated {
                Err(first) => prop_assert_eq!(&message, first),
                Ok(()) => {
                    prop_assert!(message.starts_with("entry is malformed: "), "{:?}", message);
                }
            },
            Ok(entry) => {
                prop_assert!(validated.is_ok());
                for field in [&entry.id, &entry.name, &entry.icon, &entry.description] {
                    prop_assert!(!field.is_empty());
                }
                let base = url::Url::parse(&entry.base_url);
                let base_ok = base.is_ok_and(|url| {
                    matches!(url.scheme(), "http" | "https")
                        && url.username().is_empty()
                        && url.password().is_none()
                        && url.host_str().is_some()
                });
                prop_assert!(base_ok);
                prop_assert!(entry.routes.iter().all(|r| r.starts_with('/')));
                let written = to_json(&entry)?;
                prop_assert_eq!(AppRegistryEntry::parse(&written), Ok(entry));
            }
        }
    }

    /// A generated entry of the documented shape is valid, readable and publishable.
    #[test]
    fn valid_registry_entries_are_accepted(value in registry_entry()) {
        prop_assert_eq!(validate_entry(&value), Ok(()));
        prop_assert!(AppRegistryEntry::parse(&value).is_ok());
        prop_assert_eq!(check(&value), Ok(()));
    }

    /// `route_refusal` accepts exactly the documented routes, and every refusal is a
    /// `routes must …` message.
    #[test]
    fn routes_are_refused_only_by_the_documented_rules(
        app_id in prop::sample::select(APP_IDS),
        route in route(),
    ) {
        let refusal = route_refusal(app_id, &route);
        let allowed = documented_route_allowed(app_id, &route);
        prop_assert_eq!(refusal.is_none(), allowed, "{:?} for {:?}", refusal, route);
        if let Some(message) = refusal {
            let documented = ROUTE_REFUSALS.iter().any(|p| matches_pattern(&message, p));
            prop_assert!(documented, "{:?}", message);
        }
    }

    /// `is_safe_link` accepts exactly the documented links: never a `javascript:`, `data:` or
    /// `vbscript:` link, never a control character.
    #[test]
    fn links_are_safe_only_by_the_documented_rules(href in link()) {
        let safe = is_safe_link(&href);
        prop_assert_eq!(safe, documented_safe_link(&href), "{:?}", href);
        if safe {
            let lower = href.trim_start().to_ascii_lowercase();
            let scripted = ["javascript:", "data:", "vbscript:"];
            prop_assert!(!scripted.iter().any(|s| lower.starts_with(s)));
            prop_assert!(!href.chars().any(char::is_control));
        }
    }

    /// `check` reads any JSON; it passes exactly the documented publishable entries and refuses
    /// with a `<field> must …` message.
    #[test]
    fn publication_rules_refuse_with_a_field_message(
        value in under_fire(publishable_entry(), ENTRY_KEYS),
    ) {
        let checked = check(&value);
        let publishable = documented_publishable(&value);
        prop_assert_eq!(checked.is_ok(), publishable, "{:?} for {}", checked, value);
        if let Err(message) = checked {
            let documented = ROUTE_REFUSALS
                .iter()
                .chain(CHECK_MESSAGES)
                .any(|p| matches_pattern(&message, p));
            prop_assert!(documented, "{:?}", message);
        }
    }
}

// The pairing link parser.

const LINK_ORIGIN: &str = "https://cloud.example.test";
const PAIRING_SPECIALS: &[char] = &[
    '#', '/', '?', '=', ':', '@', '.', ' ', '\n', '%', 'A', '_', '-', '\\', '\u{a0}',
];

fn secret() -> impl Strategy<Value = String> {
    "[A-Za-z0-9_-]{43}"
}

fn origin() -> impl Strategy<Value = String> {
    (
        prop::sample::select(&["http", "https", "HTTPS"][..]),
        prop_oneof![
            "[a-wyz][a-z0-9-]{0,10}(\\.[a-z]{2,6}){0,2}",
            "[A-Z]{1,8}\\.EXAMPLE",
            Just("localhost".to_string()),
            Just("127.0.0.1".to_string()),
            Just("[::1]".to_string()),
        ],
        prop::option::of(prop_oneof![Just(80u16), Just(443), 1u16..]),
        prop::sample::select(&["", "/", "//"][..]),
    )
        .prop_map(|(scheme, host, port, trail)| {
            let port = port.map(|p| format!(":{p}")).unwrap_or_default();
            format!("{scheme}://{host}{port}{trail}")
        })
}

fn scanned_link() -> impl Strategy<Value = String> {
    let valid = (
        prop_oneof![3 => Just(LINK_ORIGIN.to_string()), 1 => origin()],
        secret(),
    )
        .prop_map(|(origin, secret)| pairing_link(&origin, &secret));
    let cloud_login = (origin(), secret()).prop_map(|(origin, secret)| {
        format!(
            "{}/#pairing=%7B%22secret%22%3A%22{secret}%22%7D",
            origin.trim_end_matches('/')
        )
    });
    prop_oneof![
        6 => near(valid, PAIRING_SPECIALS),
        2 => near(cloud_login, PAIRING_SPECIALS),
        1 => garbage(),
        1 => (secret(), 0usize..3).prop_map(|(secret, extra)| {
            let link = pairing_link(LINK_ORIGIN, &secret);
            let pad = MAX_LINK_CHARS - link.chars().count() + extra;
            format!("{link}{}", "a".repeat(pad))
        }),
    ]
}

/// The secret of a well-formed pairing link of any installation: http(s), path `/pwa/`, no
/// query or credentials, fragment `pair=<43 base64url characters>`.
fn pairing_secret(url: &url::Url) -> Option<String> {
    let secret = url.fragment()?.strip_prefix("pair=")?;
    let shaped = secret.len() == 43
        && secret
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    (shaped
        && url.path() == "/pwa/"
        && url.query().is_none()
        && url.username().is_empty()
        && url.password().is_none())
    .then(|| secret.to_string())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 10_000, ..ProptestConfig::default() })]

    /// `parse_pairing_link` reads any text; each answer means what it documents: the secret of
    /// this installation's pairing link, `CloudLogin` for a `#pairing=` link, `OtherCloud` for a
    /// well-formed pairing link of another origin, `Invalid` for anything else (or too long).
    #[test]
    fn scanned_links_are_read_or_refused_with_their_reason(
        value in scanned_link(),
        own in prop_oneof![3 => Just(LINK_ORIGIN.to_string()), 1 => origin(), 1 => garbage()],
    ) {
        let trimmed = value.trim();
        let too_long = trimmed.chars().count() > MAX_LINK_CHARS;
        let url = url::Url::parse(trimmed)
            .ok()
            .filter(|u| matches!(u.scheme(), "http" | "https"));
        let cloud_login = url
            .as_ref()
            .is_some_and(|u| u.fragment().unwrap_or_default().starts_with("pairing="));
        let secret = url.as_ref().and_then(pairing_secret);
        let own_origin = canonical_origin(&own);
        let same_origin = url
            .as_ref()
            .is_some_and(|u| Some(u.origin().ascii_serialization()) == own_origin);
        match parse_pairing_link(&value, &own) {
            Ok(found) => {
                prop_assert!(!too_long && same_origin);
                prop_assert_eq!(Some(found), secret);
            }
            Err(LinkRejection::CloudLogin) => prop_assert!(!too_long && cloud_login),
            Err(LinkRejection::OtherCloud) => {
                prop_assert!(!too_long && secret.is_some() && !same_origin);
            }
            Err(LinkRejection::Invalid) => {
                prop_assert!(too_long || (!cloud_login && secret.is_none()), "{:?}", value);
            }
        }
    }

    /// The link made for a secret reads back as that secret, written with any form of the same
    /// origin and with surrounding whitespace.
    #[test]
    fn pairing_links_round_trip(origin in origin(), secret in secret(), pad in "[ \t\n]{0,3}") {
        let link = format!("{pad}{}{pad}", pairing_link(&origin, &secret));
        prop_assert_eq!(parse_pairing_link(&link, &origin), Ok(secret.clone()));
        if let Some(canonical) = canonical_origin(&origin) {
            prop_assert_eq!(parse_pairing_link(&link, &canonical), Ok(secret));
        }
    }

    /// A Cloud Login pairing link is always told apart as one, never taken for a PWA link.
    #[test]
    fn cloud_login_links_are_recognised(
        origin in origin(),
        secret in secret(),
        id in any::<u128>(),
        at in 0i64..4_000_000_000,
    ) {
        let started = StartedPairing {
            protocol: PROTOCOL,
            issuer: "https://cloud.example.test".into(),
            pairing_id: Uuid::from_u128(id),
            secret,
            expires_at: DateTime::from_timestamp(at, 0).unwrap_or_default(),
        };
        let link = started.link(origin.trim_end_matches('/'));
        prop_assert_eq!(parse_pairing_link(&link, &origin), Err(LinkRejection::CloudLogin));
    }
}

// The Help front matter parser.

const FRONT_MATTER_REQUIRED: &str =
    "Help documents require YAML frontmatter wrapped in --- markers";
const HELP_SPECIALS: &[char] = &[
    '-', '\n', '\r', ':', '"', '\'', ' ', '#', '&', '*', '!', '|', '>', '{', '[', ']', '}', '\t',
    '%', '@', '`', '?', ',', '0', '\u{feff}', '~',
];

/// A valid document's parts: id, title, icon, description, order, body, and CRLF line ends.
type HelpParts = (
    String,
    String,
    Option<String>,
    Option<String>,
    Option<i32>,
    String,
    bool,
);

fn help_parts() -> impl Strategy<Value = HelpParts> {
    (
        "[a-z0-9]{1,6}(-[a-z0-9]{1,4}){0,2}",
        "[A-Za-z][A-Za-z0-9 ]{0,16}[A-Za-z0-9]",
        prop::option::of("ti ti-[a-z]{1,8}"),
        prop::option::of("[A-Za-z][A-Za-z ,.]{0,20}[a-z.]"),
        prop::option::of(any::<i32>()),
        "[A-Za-z0-9#*_ .\n-]{0,40}[A-Za-z0-9]",
        any::<bool>(),
    )
}

fn help_source((id, title, icon, description, order, body, crlf): &HelpParts) -> String {
    let mut front = format!("id: \"{id}\"\ntitle: \"{title}\"\n");
    if let Some(icon) = icon {
        front.push_str(&format!("icon: \"{icon}\"\n"));
    }
    if let Some(description) = description {
        front.push_str(&format!("description: \"{description}\"\n"));
    }
    if let Some(order) = order {
        front.push_str(&format!("order: {order}\n"));
    }
    let source = format!("---\n{front}---\n{body}\n");
    if *crlf {
        source.replace('\n', "\r\n")
    } else {
        source
    }
}

fn help_input() -> impl Strategy<Value = String> {
    prop_oneof![
        1 => garbage(),
        1 => garbage().prop_map(|text| format!("---\n{text}\n---\nBody")),
        5 => near(help_parts().prop_map(|parts| help_source(&parts)), HELP_SPECIALS),
    ]
}

/// Whether `message` is one of the documented front matter messages of a single source.
fn is_documented_help_error(message: &str) -> bool {
    if message == FRONT_MATTER_REQUIRED
        || message == "Help document requires an id"
        || message.starts_with("Help document front matter is not valid YAML: ")
    {
        return true;
    }
    if let Some(rest) = message.strip_prefix("Help document id \"")
        && let Some(id) =
            rest.strip_suffix("\" must be lowercase kebab-case (a-z, 0-9 and single hyphens)")
    {
        return !is_valid_document_id(id);
    }
    let Some(rest) = message.strip_prefix("Help document \"") else {
        return false;
    };
    [
        "\" requires a title",
        "\" icon must be a non-empty string",
        "\" description must be a non-empty string",
        "\" order must be an integer",
        "\" has no body",
    ]
    .iter()
    .any(|suffix| rest.strip_suffix(suffix).is_some_and(is_valid_document_id))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 10_000, ..ProptestConfig::default() })]

    /// `define_help` reads any source; it refuses only with `HelpError::Invalid` and one of the
    /// documented front matter messages, and an accepted document has a valid id, a trimmed
    /// title and a trimmed, non-empty body.
    #[test]
    fn help_sources_are_read_or_refused_with_a_documented_message(source in help_input()) {
        match define_help(&[&source]) {
            Ok(definition) => {
                prop_assert_eq!(definition.documents().len(), 1);
                for document in definition.documents() {
                    prop_assert!(is_valid_document_id(&document.id));
                    let (title, markdown) = (&document.title, &document.markdown);
                    prop_assert!(!title.is_empty() && title.trim() == title);
                    prop_assert!(!markdown.is_empty() && markdown.trim() == markdown);
                }
            }
            Err(HelpError::Invalid(message)) => {
                prop_assert!(is_documented_help_error(&message), "{:?} for {:?}", message, source);
            }
            Err(other) => {
                return Err(TestCaseError::fail(format!("not a definition error: {other}")));
            }
        }
    }

    /// A document with valid front matter reads back with its id, title, icon, description,
    /// order (100 by default) and trimmed body, with LF or CRLF line ends.
    #[test]
    fn valid_help_sources_round_trip(parts in help_parts()) {
        let source = help_source(&parts);
        let (id, title, icon, description, order, body, crlf) = parts;
        let definition = define_help(&[&source])
            .map_err(|error| TestCaseError::fail(format!("{error} for {source:?}")))?;
        let documents = definition.documents();
        prop_assert_eq!(documents.len(), 1);
        let document = &documents[0];
        let body = if crlf { body.replace('\n', "\r\n") } else { body };
        prop_assert_eq!(&document.id, &id);
        prop_assert_eq!(&document.title, &title);
        prop_assert_eq!(&document.icon, &icon);
        prop_assert_eq!(&document.description, &description);
        prop_assert_eq!(document.order, order.unwrap_or(DEFAULT_ORDER));
        prop_assert_eq!(document.markdown.as_str(), body.trim());
    }
}

// Outgoing mail: messages, headers, addresses, filters, pages and cursors.

const MESSAGE_KEYS: &[&str] = &[
    "to",
    "subject",
    "text",
    "html",
    "fromName",
    "replyTo",
    "attachments",
    "headers",
    "profile",
    "ref",
    "actor",
    "key",
    "filename",
    "contentType",
    "content",
    "upload",
    "scope",
    "id",
    "type",
    "name",
    "X-App",
    "List-Id",
    "Bcc",
    "X-Cloud-Trace",
    "user",
    "service_account",
    "reader@example.org",
];
const ADDRESS_SPECIALS: &[char] = &['@', '.', '-', ' ', '"', 'ä', '\0', '\n', '_', '(', '[', 'a'];
const HEADER_VALUE_SPECIALS: &[char] = &['\r', '\n', '\0', ' ', ':', 'é', '\t'];
const ALLOWED_HEADERS: &[&str] = &[
    "list-id",
    "list-unsubscribe",
    "list-unsubscribe-post",
    "in-reply-to",
    "references",
    "auto-submitted",
    "precedence",
];

fn address() -> impl Strategy<Value = String> {
    (
        r"[A-Za-z0-9.!#$%&'*+/=?^_`{|}~-]{1,12}",
        prop::collection::vec("[A-Za-z0-9]([A-Za-z0-9-]{0,8}[A-Za-z0-9])?", 1..4),
    )
        .prop_map(|(local, labels)| format!("{local}@{}", labels.join(".")))
}

fn long_address() -> impl Strategy<Value = String> {
    ("[a-z]{1,64}", prop::collection::vec("[a-z]{1,10}", 20..40))
        .prop_map(|(local, labels)| format!("{local}@{}", labels.join(".")))
}

fn address_input() -> impl Strategy<Value = String> {
    prop_oneof![
        2 => address(),
        4 => near(address(), ADDRESS_SPECIALS),
        1 => long_address(),
        1 => garbage(),
    ]
}

/// HTML5's "valid e-mail address", at most 320 characters.
fn html5_address(s: &str) -> bool {
    let parts: Vec<&str> = s.split('@').collect();
    let [local, domain] = parts.as_slice() else {
        return false;
    };
    let label_ok = |label: &str| {
        let bytes = label.as_bytes();
        (1..=63).contains(&bytes.len())
            && bytes[0].is_ascii_alphanumeric()
            && bytes[bytes.len() - 1].is_ascii_alphanumeric()
            && bytes
                .iter()
                .all(|b| b.is_ascii_alphanumeric() || *b == b'-')
    };
    s.chars().count() <= MAX_ADDRESS_CHARS
        && !local.is_empty()
        && local
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b".!#$%&'*+/=?^_`{|}~-".contains(&b))
        && domain.split('.').all(label_ok)
}

fn header_name() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => "X-[abd-zABD-Z0-9][A-Za-z0-9_.-]{0,8}",
        2 => prop::sample::select(ALLOWED_HEADERS).prop_map(str::to_string),
        1 => "(X-Cloud-|x-CLOUD-|From|To|Bcc|Subject|Content-Type|X-Ä|X-A B|X-A:B|)[a-z]{0,3}",
        1 => "[!-~]{1,10}",
    ]
}

fn header_value() -> impl Strategy<Value = Value> {
    prop_oneof![
        8 => near("[ -~]{0,40}", HEADER_VALUE_SPECIALS).prop_map(Value::from),
        1 => (2000usize..4200).prop_map(|n| Value::from("x".repeat(n))),
        1 => json_leaf(MESSAGE_KEYS),
    ]
}

fn headers() -> impl Strategy<Value = Map<String, Value>> {
    prop::collection::vec((header_name(), header_value()), 0..5)
        .prop_map(|pairs| pairs.into_iter().collect())
}

/// The documented header rules: `X-*` (not `X-Cloud-*`) or an allow-listed name, printable
/// ASCII without `:`, distinct ignoring case, single-line string values, a block (each
/// `name: value\r\n`) of at most 8192 bytes.
fn documented_headers(headers: &Map<String, Value>) -> bool {
    let mut seen = std::collections::HashSet::new();
    let mut block = 0;
    headers.iter().all(|(name, value)| {
        let lower = name.to_ascii_lowercase();
        let name_ok = !name.is_empty()
            && name
                .bytes()
                .all(|b| (0x21..=0x7e).contains(&b) && b != b':');
        let allowed = (lower.starts_with("x-") && !lower.starts_with("x-cloud-"))
            || ALLOWED_HEADERS.contains(&lower.as_str());
        let Some(value) = value.as_str() else {
            return false;
        };
        block += name.len() + value.len() + 4;
        name_ok && allowed && !value.contains(['\r', '\n', '\0']) && seen.insert(lower)
    }) && block <= MAX_HEADER_BLOCK_BYTES
}

#[derive(Debug, Clone)]
struct ValidMessage {
    json: Value,
    to: Vec<String>,
    subject: String,
    text: String,
    headers: Map<String, Value>,
    attachments: Vec<Vec<u8>>,
}

fn valid_message() -> impl Strategy<Value = ValidMessage> {
    use prop::option::of;
    let allowed_headers = prop::collection::vec(
        (
            prop_oneof![
                "X-[abd-zABD-Z0-9][A-Za-z0-9-]{0,8}",
                prop::sample::select(ALLOWED_HEADERS).prop_map(str::to_string),
            ],
            "[ -~]{0,40}",
        ),
        0..4,
    )
    .prop_map(|pairs| {
        let mut seen = std::collections::HashSet::new();
        pairs
            .into_iter()
            .filter(|(name, _)| seen.insert(name.to_ascii_lowercase()))
            .map(|(name, value)| (name, Value::from(value)))
            .collect::<Map<String, Value>>()
    });
    (
        prop::collection::vec(address(), 1..4),
        "[ -~é]{0,40}",
        r"(?s)[^\x00]{0,60}",
        allowed_headers,
        prop::collection::vec(prop::collection::vec(any::<u8>(), 0..24), 0..3),
        (
            of(r"[^\x00]{0,20}"),
            of("[A-Za-z ]{0,20}"),
            of(address()),
            of("[a-z0-9][a-z0-9-]{0,10}"),
            of(("[a-z]{1,10}", "[0-9]{1,6}")),
            of((
                prop::sample::select(&["user", "service_account"][..]),
                "[a-z0-9-]{1,12}",
                of("[A-Za-z ]{0,12}"),
            )),
            of("[a-z0-9-]{1,20}"),
        ),
    )
        .prop_map(|(to, subject, text, headers, attachments, optional)| {
            let (html, from_name, reply_to, profile, reference, actor, key) = optional;
            let files: Vec<Value> = attachments
                .iter()
                .enumerate()
                .map(|(i, bytes)| {
                    json!({
                        "filename": format!("file-{i}.bin"),
                        "contentType": "application/octet-stream",
                        "content": STANDARD.encode(bytes),
                    })
                })
                .collect();
            let json = object(vec![
                ("to", Some(json!(to))),
                ("subject", Some(json!(subject))),
                ("text", Some(json!(text))),
                ("html", html.map(Value::from)),
                ("fromName", from_name.map(Value::from)),
                ("replyTo", reply_to.map(Value::from)),
                ("attachments", Some(Value::Array(files))),
                ("headers", Some(Value::Object(headers.clone()))),
                ("profile", profile.map(Value::from)),
                (
                    "ref",
                    reference.map(|(scope, id)| json!({"scope": scope, "id": id})),
                ),
                ("actor", actor.map(actor_of)),
                ("key", key.map(Value::from)),
            ]);
            ValidMessage {
                json,
                to,
                subject,
                text,
                headers,
                attachments,
            }
        })
}

fn actor_of((kind, id, name): (&str, String, Option<String>)) -> Value {
    object(vec![
        ("type", Some(json!(kind))),
        ("id", Some(json!(id))),
        ("name", name.map(Value::from)),
    ])
}

fn header_pairs(headers: &Map<String, Value>) -> Vec<(String, String)> {
    headers
        .iter()
        .map(|(name, value)| (name.clone(), value.as_str().unwrap_or_default().to_string()))
        .collect()
}

fn is_mail_fault(fault: &k2b_core::mail::MailFault, message: &str) -> bool {
    fault.code == MailCode::BadInput && fault.message == message && fault.extra.is_empty()
}

fn header_line_ok(text: &str, min: usize, max: usize) -> bool {
    !text.contains(['\r', '\n', '\0']) && (min..=max).contains(&text.chars().count())
}

const FILTER_KEYS: &[&str] = &[
    "ref",
    "scope",
    "id",
    "ids",
    "batchId",
    "status",
    "since",
    "until",
    "apps",
    "q",
    "recipient",
    "page",
    "perPage",
    "cursor",
    "queued",
    "sent",
    "2024-05-01T10:00:00Z",
    "invoice",
    "a@example.org",
];

fn filter_value() -> impl Strategy<Value = Value> {
    use prop::option::of;
    (
        of(("[a-z]{1,8}", of("[0-9]{1,4}"))),
        of(prop::collection::vec(
            any::<u128>().prop_map(|id| Uuid::from_u128(id).to_string()),
            1..3,
        )),
        of(prop::sample::subsequence(
            vec![
                "queued",
                "sending",
                "sent",
                "failed",
                "bounced",
                "cancelled",
            ],
            1..=6,
        )),
        of(Just("2024-05-01T11:00:00+02:00")),
        of(prop::collection::vec("[a-z]{1,8}", 1..3)),
        of(" ?[a-z0-9]{3,10} ?"),
        of(address()),
    )
        .prop_map(|(reference, ids, status, since, apps, q, recipient)| {
            object(vec![
                (
                    "ref",
                    reference.map(|(scope, id)| {
                        object(vec![
                            ("scope", Some(json!(scope))),
                            ("id", id.map(Value::from)),
                        ])
                    }),
                ),
                ("ids", ids.map(Value::from)),
                ("status", status.map(Value::from)),
                ("since", since.map(Value::from)),
                ("apps", apps.map(Value::from)),
                ("q", q.map(Value::from)),
                ("recipient", recipient.map(Value::from)),
            ])
        })
}

fn page_value() -> impl Strategy<Value = Value> {
    use prop::option::of;
    (of(1i64..1000), of(1i64..=100), of("[A-Za-z0-9_-]{0,40}")).prop_map(
        |(page, per_page, cursor)| {
            object(vec![
                ("page", page.map(Value::from)),
                ("perPage", per_page.map(Value::from)),
                ("cursor", cursor.map(Value::from)),
            ])
        },
    )
}

fn cursor() -> impl Strategy<Value = Cursor> {
    (
        1970i32..2100,
        1u32..=12,
        1u32..=28,
        0u32..24,
        0u32..60,
        0u32..60,
        prop::option::of(0u32..1_000_000),
        prop_oneof![
            Just("+00".to_string()),
            "[+-](0[0-9]|1[0-2])(:[0-5][0-9])?",
            Just("Z".to_string())
        ],
        any::<bool>(),
        any::<u128>(),
        1i64..=MAX_PAGE,
    )
        .prop_map(|(y, mo, d, h, mi, s, micros, offset, rfc, id, page)| {
            let fraction = micros.map(|m| format!(".{m:06}")).unwrap_or_default();
            let created_at = if rfc {
                let offset = if offset == "+00" {
                    "Z".to_string()
                } else if offset.len() == 3 {
                    format!("{offset}:00")
                } else {
                    offset
                };
                format!("{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}{fraction}{offset}")
            } else {
                let offset = if offset == "Z" {
                    "+00".to_string()
                } else {
                    offset
                };
                format!("{y:04}-{mo:02}-{d:02} {h:02}:{mi:02}:{s:02}{fraction}{offset}")
            };
            Cursor {
                created_at,
                id: Uuid::from_u128(id),
                page,
            }
        })
}

const CURSOR_KEYS: &[&str] = &["createdAt", "id", "page", "x"];

fn cursor_input() -> impl Strategy<Value = String> {
    let raw = cursor()
        .prop_map(|c| json!({"createdAt": c.created_at, "id": c.id.to_string(), "page": c.page}));
    prop_oneof![
        2 => near(cursor().prop_map(|c| encode_cursor(&c)), TOKEN_SPECIALS),
        3 => mutated(raw, CURSOR_KEYS).prop_map(|value| URL_SAFE_NO_PAD.encode(value.to_string())),
        1 => garbage(),
        1 => Just("A".repeat(MAX_CURSOR_CHARS + 1)),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 10_000, ..ProptestConfig::default() })]

    /// `is_valid_address` accepts exactly HTML5's valid e-mail addresses of at most 320
    /// characters.
    #[test]
    fn addresses_follow_html5(address in address_input()) {
        prop_assert_eq!(is_valid_address(&address), html5_address(&address), "{:?}", address);
    }

    /// A generated HTML5 address is accepted.
    #[test]
    fn valid_addresses_are_accepted(address in address()) {
        prop_assert!(is_valid_address(&address), "{:?}", address);
    }

    /// The custom headers of a message are accepted exactly when the documented header rules
    /// hold, and an accepted block keeps every header as given.
    #[test]
    fn mail_headers_follow_the_documented_rules(headers in headers()) {
        let message = json!({
            "to": ["reader@example.org"], "subject": "Hello", "text": "Hi", "headers": headers,
        });
        match parse_message(&message) {
            Ok(parsed) => {
                prop_assert!(documented_headers(&headers));
                prop_assert_eq!(parsed.headers, header_pairs(&headers));
            }
            Err(fault) => {
                prop_assert!(is_mail_fault(&fault, INVALID_MESSAGE));
                prop_assert!(!documented_headers(&headers));
            }
        }
    }

    /// `parse_message` reads any JSON; it refuses only with `bad_input` and the one fixed
    /// message, and whatever it accepts is safe to hand to SMTP.
    #[test]
    fn mail_messages_are_parsed_or_refused_with_the_fixed_message(
        value in under_fire(valid_message().prop_map(|m| m.json), MESSAGE_KEYS),
    ) {
        match parse_message(&value) {
            Err(fault) => prop_assert!(is_mail_fault(&fault, INVALID_MESSAGE), "{:?}", fault),
            Ok(message) => {
                prop_assert!((1..=MAX_RECIPIENTS).contains(&message.to.len()));
                prop_assert!(message.to.iter().all(|to| html5_address(to)));
                prop_assert!(message.reply_to.as_deref().is_none_or(html5_address));
                prop_assert!(header_line_ok(&message.subject, 0, MAX_SUBJECT_CHARS));
                let from_name = message.from_name.as_deref();
                prop_assert!(from_name.is_none_or(|n| header_line_ok(n, 0, MAX_SUBJECT_CHARS)));
                prop_assert!(!message.text.contains('\0'));
                for attachment in &message.attachments {
                    prop_assert!(header_line_ok(&attachment.filename, 1, MAX_SUBJECT_CHARS));
                    prop_assert!(header_line_ok(&attachment.content_type, 1, MAX_SUBJECT_CHARS));
                }
                let block: usize = message.headers.iter().map(|(n, v)| n.len() + v.len() + 4).sum();
                prop_assert!(block <= MAX_HEADER_BLOCK_BYTES);
                let headers: Map<String, Value> = message
                    .headers
                    .iter()
                    .map(|(name, value)| (name.clone(), Value::from(value.as_str())))
                    .collect();
                prop_assert!(documented_headers(&headers));
                let key = message.key.as_deref();
                let key_ok =
                    key.is_none_or(|k| !k.contains('\0') && (1..=200).contains(&k.chars().count()));
                prop_assert!(key_ok);
            }
        }
    }

    /// A message within every limit is accepted and kept exactly as given.
    #[test]
    fn valid_mail_messages_are_kept_as_given(valid in valid_message()) {
        let message = parse_message(&valid.json)
            .map_err(|fault| TestCaseError::fail(format!("{fault:?} for {}", valid.json)))?;
        prop_assert_eq!(message.to, valid.to);
        prop_assert_eq!(message.subject, valid.subject);
        prop_assert_eq!(message.text, valid.text);
        prop_assert_eq!(message.headers, header_pairs(&valid.headers));
        let inline: Vec<Vec<u8>> = message.attachments.iter().filter_map(|a| match &a.source {
            AttachmentSource::Inline(bytes) => Some(bytes.to_vec()),
            AttachmentSource::Upload(_) => None,
        }).collect();
        prop_assert_eq!(inline, valid.attachments);
    }

    /// Log filters and page parameters read any JSON; they refuse only with `bad_input` and the
    /// fixed filter message, and what they accept stays within the documented bounds.
    #[test]
    fn mail_filters_and_pages_are_parsed_or_refused_with_the_fixed_message(
        filter in under_fire(filter_value(), FILTER_KEYS),
        page in under_fire(page_value(), FILTER_KEYS),
    ) {
        match parse_filter(&filter) {
            Err(fault) => prop_assert!(is_mail_fault(&fault, INVALID_FILTER), "{:?}", fault),
            Ok(parsed) => {
                prop_assert!(parsed.ids.len() <= MAX_FILTER_IDS && parsed.status.len() <= 6);
                prop_assert!(parsed.ref_id.is_none() || parsed.ref_scope.is_some());
                let apps_ok = parsed.apps.as_ref().is_none_or(|apps| {
                    (1..=MAX_FILTER_APPS).contains(&apps.len())
                        && apps.iter().all(|a| !a.is_empty())
                });
                let q_ok = parsed.q.as_deref().is_none_or(|q| {
                    q.trim() == q
                        && q.chars().count() <= MAX_QUERY_CHARS
                        && is_searchable(q)
                        && !q.chars().any(char::is_control)
                });
                prop_assert!(apps_ok && q_ok);
                prop_assert!(parsed.recipient.as_deref().is_none_or(html5_address));
            }
        }
        match parse_page(&page) {
            Err(fault) => prop_assert!(is_mail_fault(&fault, INVALID_FILTER), "{:?}", fault),
            Ok(parsed) => {
                prop_assert!((1..=MAX_PAGE).contains(&parsed.page));
                prop_assert!((1..=MAX_PER_PAGE).contains(&parsed.per_page));
                let cursor = parsed.cursor.as_deref();
                prop_assert!(cursor.is_none_or(|c| c.chars().count() <= MAX_CURSOR_CHARS));
            }
        }
    }

    /// A cursor reads back exactly as it was encoded.
    #[test]
    fn mail_cursors_round_trip(cursor in cursor()) {
        prop_assert_eq!(decode_cursor(&encode_cursor(&cursor)), Ok(cursor));
    }

    /// `decode_cursor` reads any text; it refuses only with `bad_input` and the fixed cursor
    /// message, and what it accepts encodes back to a cursor that reads the same.
    #[test]
    fn mail_cursors_are_read_or_refused_with_the_fixed_message(text in cursor_input()) {
        match decode_cursor(&text) {
            Err(fault) => prop_assert!(is_mail_fault(&fault, INVALID_CURSOR), "{:?}", fault),
            Ok(cursor) => {
                prop_assert!((1..=MAX_PAGE).contains(&cursor.page));
                prop_assert_eq!(decode_cursor(&encode_cursor(&cursor)), Ok(cursor));
            }
        }
    }
}
