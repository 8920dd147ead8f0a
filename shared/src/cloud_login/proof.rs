//! What the authenticator signs, and the check of its signatures.
//!
//! A signature is ECDSA P-256 with SHA-256 over the UTF-8 bytes of an exact JSON array (the
//! same bytes `JSON.stringify` gives in the app), as the 64-byte IEEE P1363 `r‖s`, unpadded
//! base64url. Keys are strict JWKs `{kty: "EC", crv: "P-256", x, y}`. Verification is
//! aws-lc-rs's; there is no curve arithmetic here.

use aws_lc_rs::signature::{ECDSA_P256_SHA256_FIXED, UnparsedPublicKey};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use uuid::Uuid;

use super::{CloudLoginError, NAME_MAX_CHARS, PROTOCOL};

/// Characters a 43-character base64url value of 32 bytes may end with (the two spare bits are
/// zero), so every value has exactly one spelling.
const LAST_OF_32_BYTES: &str = "AEIMQUYcgkosw048";
/// The same for an 86-character value of 64 bytes (four spare bits).
const LAST_OF_64_BYTES: &str = "AQgw";

/// `value` is the one canonical unpadded base64url spelling of `bytes` bytes.
fn canonical_base64url(value: &str, chars: usize, last: &str) -> bool {
    value.len() == chars
        && value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        && value.chars().last().is_some_and(|c| last.contains(c))
}

/// A 32-byte value (a secret, a challenge, a key coordinate).
pub fn is_secret(value: &str) -> bool {
    canonical_base64url(value, 43, LAST_OF_32_BYTES)
}

/// A 64-byte signature.
pub fn is_signature(value: &str) -> bool {
    canonical_base64url(value, 86, LAST_OF_64_BYTES)
}

/// A six-digit comparison code.
pub fn is_comparison(value: &str) -> bool {
    value.len() == 6 && value.bytes().all(|b| b.is_ascii_digit())
}

/// A device's public key: a strict JWK of a P-256 point.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = CloudLoginPublicKey)]
pub struct PublicKeyJwk {
    /// `EC`.
    #[schema(pattern = "^EC$", example = "EC")]
    pub kty: String,
    /// `P-256`.
    #[schema(pattern = "^P-256$", example = "P-256")]
    pub crv: String,
    /// The point's x coordinate: 32 bytes, unpadded base64url.
    #[schema(pattern = "^[A-Za-z0-9_-]{42}[AEIMQUYcgkosw048]$")]
    pub x: String,
    /// The point's y coordinate.
    #[schema(pattern = "^[A-Za-z0-9_-]{42}[AEIMQUYcgkosw048]$")]
    pub y: String,
}

impl PublicKeyJwk {
    /// The key from a request body: exactly the four members, `EC` / `P-256`, and coordinates of
    /// 32 bytes each.
    pub fn parse(value: &Value) -> Result<PublicKeyJwk, CloudLoginError> {
        let key: PublicKeyJwk =
            serde_json::from_value(value.clone()).map_err(|_| CloudLoginError::InvalidRequest)?;
        if key.kty != "EC" || key.crv != "P-256" || !is_secret(&key.x) || !is_secret(&key.y) {
            return Err(CloudLoginError::InvalidRequest);
        }
        Ok(key)
    }

    /// The stored form (the column is `jsonb`).
    pub fn to_json(&self) -> Value {
        json!({"kty": self.kty, "crv": self.crv, "x": self.x, "y": self.y})
    }

    /// The uncompressed SEC1 point `04 ‖ x ‖ y`.
    fn sec1(&self) -> Option<Vec<u8>> {
        let x = URL_SAFE_NO_PAD.decode(&self.x).ok()?;
        let y = URL_SAFE_NO_PAD.decode(&self.y).ok()?;
        if x.len() != 32 || y.len() != 32 {
            return None;
        }
        let mut point = Vec::with_capacity(65);
        point.push(4);
        point.extend_from_slice(&x);
        point.extend_from_slice(&y);
        Some(point)
    }
}

/// Whether `signature` (base64url `r‖s`) is `key`'s ES256 signature of `message`. A point off
/// the curve, `r` or `s` outside `1..n`, or any decoding failure is simply `false`.
pub fn verify(key: &PublicKeyJwk, message: &str, signature: &str) -> bool {
    let Some(point) = key.sec1() else {
        return false;
    };
    let Ok(signature) = URL_SAFE_NO_PAD.decode(signature) else {
        return false;
    };
    if signature.len() != 64 {
        return false;
    }
    UnparsedPublicKey::new(&ECDSA_P256_SHA256_FIXED, point)
        .verify(message.as_bytes(), &signature)
        .is_ok()
}

/// The claim of a pairing, as sent. Ids are kept as the device wrote them: the signature covers
/// those exact characters. The body is exactly these five members ([`parse_claim`]).
#[derive(Clone, PartialEq, Eq, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schema(as = CloudLoginPairingClaim)]
pub struct PairingClaim {
    /// The pairing's id, as the link carried it.
    #[schema(format = Uuid)]
    pub pairing_id: String,
    /// The link's secret.
    #[schema(pattern = "^[A-Za-z0-9_-]{42}[AEIMQUYcgkosw048]$")]
    pub secret: String,
    pub public_key: PublicKeyJwk,
    /// Trimmed, 1 to 80 characters.
    #[schema(min_length = 1, max_length = 80)]
    pub name: String,
    /// ES256 over `["cloud-app-approval-v1","pair",issuer,pairingId,secret,kty,crv,x,y,name]`:
    /// 64 bytes `r‖s`, unpadded base64url.
    #[schema(pattern = "^[A-Za-z0-9_-]{85}[AQgw]$")]
    pub signature: String,
}

impl std::fmt::Debug for PairingClaim {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PairingClaim({})", self.pairing_id)
    }
}

/// Trims like JavaScript's `String.prototype.trim` (white space, line terminators and the byte
/// order mark), which the app applies to the name it signs.
pub fn trim_like_js(value: &str) -> &str {
    value.trim_matches(|c: char| c.is_whitespace() || c == '\u{feff}')
}

/// The message a pairing claim signs.
pub fn pairing_message(issuer: &str, claim: &PairingClaim) -> String {
    json!([
        PROTOCOL,
        "pair",
        issuer,
        claim.pairing_id,
        claim.secret,
        claim.public_key.kty,
        claim.public_key.crv,
        claim.public_key.x,
        claim.public_key.y,
        claim.name,
    ])
    .to_string()
}

/// What a device command asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    Pending,
    Revoke,
    Decide {
        request_id: String,
        challenge: String,
        comparison: String,
        approve: bool,
    },
}

impl Command {
    pub fn operation(&self) -> &'static str {
        match self {
            Command::Pending => "pending",
            Command::Revoke => "revoke",
            Command::Decide { .. } => "decide",
        }
    }
}

/// A signed device command: `{proof: {issuer, deviceId, jti, issuedAt, expiresAt, command},
/// signature}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceRequest {
    pub issuer: String,
    pub device_id: String,
    pub jti: String,
    pub issued_at: i64,
    pub expires_at: i64,
    pub command: Command,
    pub signature: String,
}

/// The body of a device command as [`parse_device_request`] reads it (the API's document; the
/// parser keeps the values exactly as sent, since the signature covers them).
#[derive(utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = CloudLoginDeviceRequest)]
pub struct DeviceRequestBody {
    pub proof: DeviceProofBody,
    /// ES256 over `["cloud-app-approval-v1","device",issuer,deviceId,jti,issuedAt,expiresAt,
    /// operation]` (and for `decide` also `requestId, challenge, comparison, decision`).
    #[schema(pattern = "^[A-Za-z0-9_-]{85}[AQgw]$")]
    pub signature: String,
}

/// What a device command signs.
#[derive(utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schema(as = CloudLoginDeviceProof)]
pub struct DeviceProofBody {
    /// The installation's origin.
    #[schema(format = "uri")]
    pub issuer: String,
    #[schema(format = Uuid)]
    pub device_id: String,
    /// A command id the device never used before.
    #[schema(format = Uuid)]
    pub jti: String,
    /// Unix seconds: at most 60 s ago and 5 s ahead.
    #[schema(minimum = 0)]
    pub issued_at: i64,
    /// Unix seconds: after now, at most 60 s after `issuedAt`.
    #[schema(minimum = 1)]
    pub expires_at: i64,
    pub command: DeviceCommandBody,
}

/// The command of a device request.
#[derive(utoipa::ToSchema)]
#[serde(tag = "operation", rename_all = "lowercase", deny_unknown_fields)]
#[schema(as = CloudLoginDeviceCommand)]
pub enum DeviceCommandBody {
    /// The sign-ins waiting for this person.
    Pending,
    /// The device removes itself.
    Revoke,
    /// Approve or deny one sign-in.
    Decide {
        #[serde(rename = "requestId")]
        #[schema(format = Uuid)]
        request_id: String,
        #[schema(pattern = "^[A-Za-z0-9_-]{42}[AEIMQUYcgkosw048]$")]
        challenge: String,
        #[schema(pattern = "^[0-9]{6}$")]
        comparison: String,
        decision: Decision,
    },
}

/// A sign-in's decision.
#[derive(utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
#[schema(as = CloudLoginDecision)]
pub enum Decision {
    Approve,
    Deny,
}

/// The message a device command signs.
pub fn device_message(request: &DeviceRequest) -> String {
    let mut parts = vec![
        json!(PROTOCOL),
        json!("device"),
        json!(request.issuer),
        json!(request.device_id),
        json!(request.jti),
        json!(request.issued_at),
        json!(request.expires_at),
        json!(request.command.operation()),
    ];
    if let Command::Decide {
        request_id,
        challenge,
        comparison,
        approve,
    } = &request.command
    {
        parts.extend([
            json!(request_id),
            json!(challenge),
            json!(comparison),
            json!(if *approve { "approve" } else { "deny" }),
        ]);
    }
    Value::Array(parts).to_string()
}

/// A JSON object with exactly `keys` (every one present, nothing else).
fn object_with<'a>(value: &'a Value, keys: &[&str]) -> Option<&'a serde_json::Map<String, Value>> {
    let object = value.as_object()?;
    (object.len() == keys.len() && keys.iter().all(|k| object.contains_key(*k))).then_some(object)
}

fn string_of<'a>(object: &'a serde_json::Map<String, Value>, key: &str) -> Option<&'a str> {
    object.get(key)?.as_str()
}

/// A UUID as sent (any case), kept verbatim.
fn uuid_of(object: &serde_json::Map<String, Value>, key: &str) -> Option<String> {
    let raw = string_of(object, key)?;
    Uuid::parse_str(raw)
        .ok()
        .filter(|_| raw.len() == 36)
        .map(|_| raw.to_string())
}

/// Parses a pairing claim body `{pairingId, secret, publicKey, name, signature}`.
pub fn parse_claim(body: &Value) -> Result<PairingClaim, CloudLoginError> {
    let bad = || CloudLoginError::InvalidRequest;
    let object = object_with(
        body,
        &["pairingId", "secret", "publicKey", "name", "signature"],
    )
    .ok_or_else(bad)?;
    let pairing_id = uuid_of(object, "pairingId").ok_or_else(bad)?;
    let secret = string_of(object, "secret")
        .filter(|s| is_secret(s))
        .ok_or_else(bad)?;
    let public_key = PublicKeyJwk::parse(&object["publicKey"])?;
    let name = string_of(object, "name")
        .map(trim_like_js)
        .ok_or_else(bad)?;
    if name.is_empty() || name.chars().count() > NAME_MAX_CHARS {
        return Err(bad());
    }
    let signature = string_of(object, "signature")
        .filter(|s| is_signature(s))
        .ok_or_else(bad)?;
    Ok(PairingClaim {
        pairing_id,
        secret: secret.to_string(),
        public_key,
        name: name.to_string(),
        signature: signature.to_string(),
    })
}

/// Parses a device request body.
pub fn parse_device_request(body: &Value) -> Result<DeviceRequest, CloudLoginError> {
    let bad = || CloudLoginError::InvalidRequest;
    let outer = object_with(body, &["proof", "signature"]).ok_or_else(bad)?;
    let signature = string_of(outer, "signature")
        .filter(|s| is_signature(s))
        .ok_or_else(bad)?;
    let proof = object_with(
        &outer["proof"],
        &[
            "issuer",
            "deviceId",
            "jti",
            "issuedAt",
            "expiresAt",
            "command",
        ],
    )
    .ok_or_else(bad)?;
    let issuer = string_of(proof, "issuer")
        .filter(|s| url::Url::parse(s).is_ok())
        .ok_or_else(bad)?;
    let device_id = uuid_of(proof, "deviceId").ok_or_else(bad)?;
    let jti = uuid_of(proof, "jti").ok_or_else(bad)?;
    let issued_at = proof["issuedAt"]
        .as_i64()
        .filter(|t| *t >= 0)
        .ok_or_else(bad)?;
    let expires_at = proof["expiresAt"]
        .as_i64()
        .filter(|t| *t > 0)
        .ok_or_else(bad)?;
    let command = parse_command(&proof["command"])?;
    Ok(DeviceRequest {
        issuer: issuer.to_string(),
        device_id,
        jti,
        issued_at,
        expires_at,
        command,
        signature: signature.to_string(),
    })
}

fn parse_command(value: &Value) -> Result<Command, CloudLoginError> {
    let bad = || CloudLoginError::InvalidRequest;
    let operation = value.get("operation").and_then(Value::as_str);
    match operation {
        Some("pending") => object_with(value, &["operation"]).map(|_| Command::Pending),
        Some("revoke") => object_with(value, &["operation"]).map(|_| Command::Revoke),
        Some("decide") => {
            let object = object_with(
                value,
                &[
                    "operation",
                    "requestId",
                    "challenge",
                    "comparison",
                    "decision",
                ],
            )
            .ok_or_else(bad)?;
            let request_id = uuid_of(object, "requestId").ok_or_else(bad)?;
            let challenge = string_of(object, "challenge")
                .filter(|s| is_secret(s))
                .ok_or_else(bad)?;
            let comparison = string_of(object, "comparison")
                .filter(|s| is_comparison(s))
                .ok_or_else(bad)?;
            let approve = match string_of(object, "decision") {
                Some("approve") => true,
                Some("deny") => false,
                _ => return Err(bad()),
            };
            Some(Command::Decide {
                request_id,
                challenge: challenge.to_string(),
                comparison: comparison.to_string(),
                approve,
            })
        }
        _ => None,
    }
    .ok_or_else(bad)
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_lc_rs::rand::SystemRandom;
    use aws_lc_rs::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, KeyPair};

    fn device() -> (EcdsaKeyPair, PublicKeyJwk) {
        let pair = EcdsaKeyPair::generate(&ECDSA_P256_SHA256_FIXED_SIGNING).expect("key");
        let point = pair.public_key().as_ref().to_vec();
        let key = PublicKeyJwk {
            kty: "EC".into(),
            crv: "P-256".into(),
            x: URL_SAFE_NO_PAD.encode(&point[1..33]),
            y: URL_SAFE_NO_PAD.encode(&point[33..65]),
        };
        (pair, key)
    }

    fn sign(pair: &EcdsaKeyPair, message: &str) -> String {
        let signature = pair
            .sign(&SystemRandom::new(), message.as_bytes())
            .expect("sign");
        URL_SAFE_NO_PAD.encode(signature.as_ref())
    }

    #[test]
    fn the_pairing_message_is_the_exact_json_array() {
        let (_, key) = device();
        let claim = PairingClaim {
            pairing_id: "6b1f8e7a-0000-4000-8000-000000000001".into(),
            secret: "s".repeat(43),
            public_key: key.clone(),
            name: "Ada's \"phone\" ☎\n".into(),
            signature: String::new(),
        };
        let message = pairing_message("https://cloud.example.test", &claim);
        assert_eq!(
            message,
            format!(
                "[\"cloud-app-approval-v1\",\"pair\",\"https://cloud.example.test\",\
                 \"6b1f8e7a-0000-4000-8000-000000000001\",\"{}\",\"EC\",\"P-256\",\"{}\",\"{}\",\
                 \"Ada's \\\"phone\\\" ☎\\n\"]",
                "s".repeat(43),
                key.x,
                key.y
            )
        );
    }

    #[test]
    fn the_device_message_appends_the_decision_fields() {
        let mut request = DeviceRequest {
            issuer: "https://cloud.example.test".into(),
            device_id: "d".into(),
            jti: "j".into(),
            issued_at: 1700000000,
            expires_at: 1700000060,
            command: Command::Pending,
            signature: String::new(),
        };
        assert_eq!(
            device_message(&request),
            r#"["cloud-app-approval-v1","device","https://cloud.example.test","d","j",1700000000,1700000060,"pending"]"#
        );
        request.command = Command::Decide {
            request_id: "r".into(),
            challenge: "c".into(),
            comparison: "012345".into(),
            approve: false,
        };
        assert_eq!(
            device_message(&request),
            r#"["cloud-app-approval-v1","device","https://cloud.example.test","d","j",1700000000,1700000060,"decide","r","c","012345","deny"]"#
        );
    }

    #[test]
    fn a_signature_verifies_only_for_its_key_and_message() {
        let (pair, key) = device();
        let (_, other) = device();
        let signature = sign(&pair, "hello");
        assert!(is_signature(&signature));
        assert!(verify(&key, "hello", &signature));
        assert!(!verify(&key, "hello!", &signature));
        assert!(!verify(&other, "hello", &signature));
        assert!(!verify(&key, "hello", &"A".repeat(86)), "r = s = 0");
    }

    #[test]
    fn a_point_off_the_curve_never_verifies() {
        let (pair, mut key) = device();
        let signature = sign(&pair, "hello");
        key.y = key.x.clone();
        assert!(!verify(&key, "hello", &signature));
    }

    #[test]
    fn keys_and_values_must_have_their_canonical_shape() {
        let (_, key) = device();
        assert!(PublicKeyJwk::parse(&key.to_json()).is_ok());
        let mut extra = key.to_json();
        extra["d"] = json!("private");
        assert!(PublicKeyJwk::parse(&extra).is_err(), "unknown member");
        let mut curve = key.to_json();
        curve["crv"] = json!("P-384");
        assert!(PublicKeyJwk::parse(&curve).is_err());
        let mut short = key.to_json();
        short["x"] = json!("A".repeat(42));
        assert!(PublicKeyJwk::parse(&short).is_err());
        // The last character of a 32-byte value carries two zero bits: 'B' would set one.
        assert!(is_secret(&format!("{}A", "a".repeat(42))));
        assert!(!is_secret(&format!("{}B", "a".repeat(42))));
        assert!(!is_signature(&format!("{}B", "a".repeat(85))));
        assert!(is_signature(&format!("{}Q", "a".repeat(85))));
        assert!(!is_secret(&format!("{}=", "a".repeat(42))));
    }

    #[test]
    fn device_requests_are_strict() {
        let good = json!({
            "proof": {
                "issuer": "https://cloud.example.test",
                "deviceId": "6b1f8e7a-0000-4000-8000-000000000001",
                "jti": "6b1f8e7a-0000-4000-8000-000000000002",
                "issuedAt": 1700000000,
                "expiresAt": 1700000060,
                "command": {"operation": "pending"}
            },
            "signature": format!("{}A", "a".repeat(85)),
        });
        let parsed = parse_device_request(&good).expect("valid");
        assert_eq!(parsed.command, Command::Pending);
        let mut extra = good.clone();
        extra["proof"]["command"]["requestId"] = json!("x");
        assert!(parse_device_request(&extra).is_err());
        let mut float = good.clone();
        float["proof"]["issuedAt"] = json!(1.5);
        assert!(parse_device_request(&float).is_err());
        let mut unknown = good.clone();
        unknown["proof"]["command"] = json!({"operation": "approve"});
        assert!(parse_device_request(&unknown).is_err());
        let mut more = good;
        more["extra"] = json!(1);
        assert!(parse_device_request(&more).is_err());
    }
}
