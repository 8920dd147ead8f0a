//! Compact JWS (RS256) encoding and the strict header parsing both token kinds share.
//!
//! The algorithm and key never come from the token: the header must be exactly
//! `{alg, kid, typ}` with `alg` = RS256, the key is looked up by `kid` in our own key set, and the
//! signature is checked with RS256 only.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use jsonwebtoken::{Algorithm, DecodingKey};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use super::constants::{ALGORITHM, MAX_COMPACT_TOKEN_BYTES};
use super::keys::SigningKey;

/// Why a token could not be produced.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EncodeError {
    #[error("token claims could not be serialised")]
    Serialize,
    #[error("signing failed")]
    Sign,
    #[error("generated token exceeds {MAX_COMPACT_TOKEN_BYTES} bytes")]
    TooLarge,
}

#[derive(Serialize)]
struct Header<'a> {
    alg: &'static str,
    kid: &'a str,
    typ: &'a str,
}

/// Signs `claims` as a compact JWS with the header `{alg: RS256, kid, typ}`.
pub fn encode<C: Serialize>(
    kid: &str,
    typ: &str,
    claims: &C,
    key: &SigningKey,
) -> Result<String, EncodeError> {
    let header = serde_json::to_vec(&Header {
        alg: ALGORITHM,
        kid,
        typ,
    })
    .map_err(|_| EncodeError::Serialize)?;
    let payload = serde_json::to_vec(claims).map_err(|_| EncodeError::Serialize)?;
    let signing_input = format!(
        "{}.{}",
        URL_SAFE_NO_PAD.encode(header),
        URL_SAFE_NO_PAD.encode(payload)
    );
    let signature = key
        .sign(signing_input.as_bytes())
        .map_err(|_| EncodeError::Sign)?;
    let token = format!("{signing_input}.{}", URL_SAFE_NO_PAD.encode(signature));
    if token.len() > MAX_COMPACT_TOKEN_BYTES {
        return Err(EncodeError::TooLarge);
    }
    Ok(token)
}

/// A token whose shape and header passed; its signature is not checked yet.
#[derive(Debug, Clone)]
pub struct Unverified<'a> {
    pub kid: String,
    pub typ: String,
    signing_input: &'a str,
    signature: &'a str,
    payload: Vec<u8>,
}

/// A token's decoded header object.
type HeaderMap = Map<String, Value>;

/// A compact token split into its decoded header object, signing input, signature and decoded
/// payload: at most 4096 bytes, three parts, base64url header and payload, a non-empty signature.
fn split(token: &str) -> Option<(HeaderMap, &str, &str, Vec<u8>)> {
    if token.len() > MAX_COMPACT_TOKEN_BYTES {
        return None;
    }
    let (signing_input, signature) = token.rsplit_once('.')?;
    let (header_b64, payload_b64) = signing_input.split_once('.')?;
    if signature.is_empty() || signature.contains('.') {
        return None;
    }
    let header: HeaderMap =
        serde_json::from_slice(&URL_SAFE_NO_PAD.decode(header_b64).ok()?).ok()?;
    let payload = URL_SAFE_NO_PAD.decode(payload_b64).ok()?;
    Some((header, signing_input, signature, payload))
}

/// Splits a compact token and checks its header: at most 4096 bytes, three parts, and a header
/// object with exactly `alg` (RS256), `kid` and `typ` (strings). Anything else is `None`.
pub fn parse(token: &str) -> Option<Unverified<'_>> {
    let (header, signing_input, signature, payload) = split(token)?;
    if header.len() != 3 || header.get("alg")?.as_str()? != ALGORITHM {
        return None;
    }
    Some(Unverified {
        kid: header.get("kid")?.as_str()?.to_string(),
        typ: header.get("typ")?.as_str()?.to_string(),
        signing_input,
        signature,
        payload,
    })
}

/// Largest `kid` an OAuth access token may name.
pub const MAX_ACCESS_KID_CHARS: usize = 200;

/// Splits an OAuth access token and checks its header: at most 4096 bytes, three parts, `alg`
/// RS256, a `kid` of 1 to 200 characters, an optional string `typ` that is not one of Core's
/// own token types, and no other member. Anything else is `None`.
pub fn parse_access(token: &str) -> Option<Unverified<'_>> {
    let (header, signing_input, signature, payload) = split(token)?;
    if header.get("alg")?.as_str()? != ALGORITHM
        || header
            .keys()
            .any(|name| !matches!(name.as_str(), "alg" | "kid" | "typ"))
    {
        return None;
    }
    let kid = header.get("kid")?.as_str()?.to_string();
    if kid.is_empty() || kid.chars().count() > MAX_ACCESS_KID_CHARS {
        return None;
    }
    let typ = match header.get("typ") {
        None => String::new(),
        Some(typ) => typ.as_str()?.to_string(),
    };
    if typ == super::constants::SESSION_TOKEN_TYPE || typ == super::constants::INVOCATION_TOKEN_TYPE
    {
        return None;
    }
    Some(Unverified {
        kid,
        typ,
        signing_input,
        signature,
        payload,
    })
}

impl Unverified<'_> {
    /// Checks the RS256 signature with `key` and parses the claims as `C` (whose strict type
    /// rejects unknown claims).
    pub fn verify<C: DeserializeOwned>(&self, key: &DecodingKey) -> Option<C> {
        let valid = jsonwebtoken::crypto::verify(
            self.signature,
            self.signing_input.as_bytes(),
            key,
            Algorithm::RS256,
        )
        .unwrap_or(false);
        if !valid {
            return None;
        }
        serde_json::from_slice(&self.payload).ok()
    }
}

/// Whether a kid is shaped like ours (lowercase UUID characters, 36 long).
pub fn is_session_kid(kid: &str) -> bool {
    kid.len() == 36
        && kid
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b) || b == b'-')
}

/// Whether a kid is a strict UUID (version 1–5, variant 8/9/a/b, either case).
pub fn is_strict_uuid(value: &str) -> bool {
    let bytes = value.as_bytes();
    if bytes.len() != 36 {
        return false;
    }
    for (i, b) in bytes.iter().enumerate() {
        let ok = match i {
            8 | 13 | 18 | 23 => *b == b'-',
            14 => (b'1'..=b'5').contains(b),
            19 => matches!(b.to_ascii_lowercase(), b'8' | b'9' | b'a' | b'b'),
            _ => b.is_ascii_hexdigit(),
        };
        if !ok {
            return false;
        }
    }
    true
}

/// Tokens at the size limit, for tests that must show the limit is what refuses a token.
#[cfg(any(test, feature = "test-util"))]
pub mod testing {
    use super::*;

    /// Two tokens of `claims`, signed with `key` under the header `{alg: RS256, kid, typ}`, one
    /// exactly [`MAX_COMPACT_TOKEN_BYTES`] long and one a byte longer, identical otherwise.
    /// Both JSON objects carry insignificant spaces after their opening brace (the longer
    /// token's payload one more), so both hold exactly the members [`encode`] writes. The
    /// header may need spaces too: unpadded base64 is never 4k + 1 characters long, so under a
    /// fixed header some totals are out of reach (with a UUID `kid`, Core's token types and an
    /// RS256-2048 signature, 4096 is). `None` when the claims do not fit or signing fails.
    pub fn encode_size_twins<C: Serialize>(
        kid: &str,
        typ: &str,
        claims: &C,
        key: &SigningKey,
    ) -> Option<(String, String)> {
        let header = serde_json::to_string(&Header {
            alg: ALGORITHM,
            kid,
            typ,
        })
        .ok()?;
        let payload = serde_json::to_string(claims).ok()?;
        // An RSA signature is always as long as the modulus.
        let signature = key.sign(b"").ok()?.len();
        let encoded = |bytes: usize| (4 * bytes).div_ceil(3);
        for header_spaces in 0..4 {
            let fixed = encoded(header.len() + header_spaces) + 2 + encoded(signature);
            let Some(room) = MAX_COMPACT_TOKEN_BYTES.checked_sub(fixed) else {
                continue;
            };
            // A payload that fills the room exactly, and overflows it by one with a byte more.
            let Some(bytes) = (payload.len()..=room)
                .find(|bytes| encoded(*bytes) == room && encoded(bytes + 1) == room + 1)
            else {
                continue;
            };
            let token = |payload_spaces: usize| -> Option<String> {
                let input = format!(
                    "{}.{}",
                    URL_SAFE_NO_PAD.encode(spaced(&header, header_spaces)?),
                    URL_SAFE_NO_PAD.encode(spaced(&payload, payload_spaces)?)
                );
                let signature = key.sign(input.as_bytes()).ok()?;
                Some(format!("{input}.{}", URL_SAFE_NO_PAD.encode(signature)))
            };
            let spaces = bytes - payload.len();
            return Some((token(spaces)?, token(spaces + 1)?));
        }
        None
    }

    /// A JSON object's text with `spaces` spaces after its opening brace.
    fn spaced(object: &str, spaces: usize) -> Option<String> {
        let members = object.strip_prefix('{')?;
        Some(format!("{{{}{members}", " ".repeat(spaces)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::identity::keys;

    #[derive(Serialize, serde::Deserialize, Debug, PartialEq)]
    #[serde(deny_unknown_fields)]
    struct Claims {
        sub: String,
    }

    fn b64json(value: &Value) -> String {
        URL_SAFE_NO_PAD.encode(serde_json::to_vec(value).expect("json"))
    }

    #[test]
    fn encodes_and_verifies_with_an_exact_header() {
        let key = keys::generate().expect("key");
        let encoding = keys::import(&key.kid, &key.public, &key.private).expect("import");
        let decoding = keys::decoding_key(&key.public).expect("decoding");
        let token = encode(
            &key.kid,
            "cloud-session+jwt",
            &Claims { sub: "a".into() },
            &encoding,
        )
        .expect("encode");
        let parsed = parse(&token).expect("parse");
        assert_eq!(parsed.kid, key.kid);
        assert_eq!(parsed.typ, "cloud-session+jwt");
        assert_eq!(
            parsed.verify::<Claims>(&decoding),
            Some(Claims { sub: "a".into() })
        );
        let header: Value = serde_json::from_slice(
            &URL_SAFE_NO_PAD
                .decode(token.split('.').next().expect("header"))
                .expect("b64"),
        )
        .expect("json");
        assert_eq!(
            header,
            serde_json::json!({"alg": "RS256", "kid": key.kid, "typ": "cloud-session+jwt"})
        );
    }

    #[test]
    fn rejects_forged_headers_and_signatures() {
        let key = keys::generate().expect("key");
        let encoding = keys::import(&key.kid, &key.public, &key.private).expect("import");
        let decoding = keys::decoding_key(&key.public).expect("decoding");
        let token = encode(&key.kid, "t", &Claims { sub: "a".into() }, &encoding).expect("encode");
        let mut parts: Vec<String> = token.split('.').map(str::to_string).collect();

        // alg: none, without a signature and with the original one.
        parts[0] = b64json(&serde_json::json!({"alg": "none", "kid": key.kid, "typ": "t"}));
        assert!(parse(&format!("{}.{}.", parts[0], parts[1])).is_none());
        assert!(parse(&parts.join(".")).is_none());
        // An extra header member.
        parts[0] =
            b64json(&serde_json::json!({"alg": "RS256", "kid": key.kid, "typ": "t", "cty": "x"}));
        assert!(parse(&parts.join(".")).is_none());
        // HS256 "signed" with the public key as the HMAC secret.
        let hs_header = b64json(&serde_json::json!({"alg": "HS256", "kid": key.kid, "typ": "t"}));
        let input = format!("{hs_header}.{}", parts[1]);
        let secret =
            jsonwebtoken::EncodingKey::from_secret(key.public.n.as_bytes()).expect("secret");
        let mac =
            jsonwebtoken::crypto::sign(input.as_bytes(), &secret, Algorithm::HS256).expect("hmac");
        assert!(parse(&format!("{input}.{mac}")).is_none());
        // A tampered payload fails the signature.
        let original: Vec<&str> = token.split('.').collect();
        let forged_payload = b64json(&serde_json::json!({"sub": "b"}));
        let forged = format!("{}.{}.{}", original[0], forged_payload, original[2]);
        let parsed = parse(&forged).expect("shape is fine");
        assert_eq!(parsed.verify::<Claims>(&decoding), None);
        // Unknown claims fail the strict type.
        let extra = encode(
            &key.kid,
            "t",
            &serde_json::json!({"sub": "a", "roles": ["admin"]}),
            &encoding,
        )
        .expect("encode");
        assert_eq!(
            parse(&extra).expect("parse").verify::<Claims>(&decoding),
            None
        );
    }

    /// One byte over the limit refuses a token that is valid in every other way: its twin at
    /// the limit, the same claims under the same key, parses and verifies.
    #[test]
    fn the_size_limit_alone_refuses_a_valid_token() {
        let key = keys::generate().expect("key");
        let encoding = keys::import(&key.kid, &key.public, &key.private).expect("import");
        let decoding = keys::decoding_key(&key.public).expect("decoding");
        let claims = Claims { sub: "a".into() };
        let (at_limit, over) =
            testing::encode_size_twins(&key.kid, "t", &claims, &encoding).expect("twins");
        assert_eq!((at_limit.len(), over.len()), (4096, 4097));
        let decoded = |token: &str, part: usize| -> Value {
            let text = token.split('.').nth(part).expect("part");
            serde_json::from_slice(&URL_SAFE_NO_PAD.decode(text).expect("b64")).expect("json")
        };
        for token in [at_limit.as_str(), over.as_str()] {
            assert_eq!(
                decoded(token, 0),
                serde_json::json!({"alg": "RS256", "kid": key.kid, "typ": "t"})
            );
            assert_eq!(decoded(token, 1), serde_json::json!({"sub": "a"}));
        }
        let parsed = parse(&at_limit).expect("the token at the limit parses");
        assert_eq!(parsed.verify::<Claims>(&decoding), Some(claims));
        assert!(parse(&over).is_none());
        assert!(parse(&"a".repeat(4097)).is_none());
    }

    #[test]
    fn kid_shapes() {
        assert!(is_session_kid("0f3c5a52-7a4c-4b7e-9f43-1c2d3e4f5a6b"));
        assert!(!is_session_kid("0F3C5A52-7A4C-4B7E-9F43-1C2D3E4F5A6B"));
        assert!(!is_session_kid("not-a-uuid"));
        assert!(is_strict_uuid("0F3C5A52-7A4C-4B7E-9F43-1C2D3E4F5A6B"));
        assert!(
            !is_strict_uuid("0f3c5a52-7a4c-6b7e-9f43-1c2d3e4f5a6b"),
            "version 6"
        );
        assert!(
            !is_strict_uuid("0f3c5a52-7a4c-4b7e-cf43-1c2d3e4f5a6b"),
            "variant c"
        );
        assert!(!is_strict_uuid("not-a-uuid"));
    }
}
