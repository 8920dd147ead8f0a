//! RSA key material: generation, JWK form, and the import check that a stored private key really
//! belongs to its published public key.

use aws_lc_rs::rand::SystemRandom;
use aws_lc_rs::signature::{RSA_PKCS1_SHA256, RsaKeyPair};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use jsonwebtoken::{Algorithm, DecodingKey};
use pkcs1::der::Encode;
use pkcs1::der::asn1::UintRef;
use rsa::pkcs1::EncodeRsaPrivateKey;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::constants::ALGORITHM;

/// RSA modulus size of every signing key.
pub const RSA_BITS: usize = 2048;
/// What the import check signs and verifies.
const PROBE_MESSAGE: &[u8] = b"k2b-cloud identity key pair check";

/// Why key material was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    #[error("Cloud identity key `{0}` is not a valid RS256 JWK")]
    Invalid(String),
    #[error("Cloud identity private key `{0}` does not match its public key")]
    Mismatch(String),
    #[error("Cloud identity key generation failed")]
    Generation,
}

/// The public half as published in a JWKS.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PublicJwk {
    pub kty: String,
    pub n: String,
    pub e: String,
    pub alg: String,
    pub kid: String,
    #[serde(rename = "use")]
    pub key_use: String,
}

/// The private JWK, stored only encrypted.
#[derive(Clone, Serialize, Deserialize)]
pub struct PrivateJwk {
    pub kty: String,
    pub n: String,
    pub e: String,
    pub d: String,
    pub p: String,
    pub q: String,
    pub dp: String,
    pub dq: String,
    pub qi: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alg: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kid: Option<String>,
    #[serde(default, rename = "use", skip_serializing_if = "Option::is_none")]
    pub key_use: Option<String>,
}

impl std::fmt::Debug for PrivateJwk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PrivateJwk({:?})", self.kid)
    }
}

/// A freshly generated key pair.
#[derive(Clone)]
pub struct GeneratedKey {
    pub kid: String,
    pub public: PublicJwk,
    pub private: PrivateJwk,
}

fn b64(bytes: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(bytes)
}

/// Generates an RSA 2048 key (exponent 65537) with a random UUID v4 kid. CPU-bound (tens to
/// hundreds of milliseconds): call it from a blocking task.
pub fn generate() -> Result<GeneratedKey, KeyError> {
    let mut rng = getrandom::rand_core::UnwrapErr(getrandom::SysRng);
    let key = rsa::PrivateKey::new(&mut rng, RSA_BITS).map_err(|_| KeyError::Generation)?;
    let der = key.to_pkcs1_der().map_err(|_| KeyError::Generation)?;
    let parts =
        pkcs1::RsaPrivateKeyRef::try_from(der.as_bytes()).map_err(|_| KeyError::Generation)?;
    let kid = uuid::Uuid::new_v4().to_string();
    let public = PublicJwk {
        kty: "RSA".into(),
        n: b64(parts.modulus.as_bytes()),
        e: b64(parts.public_exponent.as_bytes()),
        alg: ALGORITHM.into(),
        kid: kid.clone(),
        key_use: "sig".into(),
    };
    let private = PrivateJwk {
        kty: "RSA".into(),
        n: public.n.clone(),
        e: public.e.clone(),
        d: b64(parts.private_exponent.as_bytes()),
        p: b64(parts.prime1.as_bytes()),
        q: b64(parts.prime2.as_bytes()),
        dp: b64(parts.exponent1.as_bytes()),
        dq: b64(parts.exponent2.as_bytes()),
        qi: b64(parts.coefficient.as_bytes()),
        alg: Some(ALGORITHM.into()),
        kid: Some(kid.clone()),
        key_use: Some("sig".into()),
    };
    Ok(GeneratedKey {
        kid,
        public,
        private,
    })
}

/// The verification key of a published JWK (RS256 only).
pub fn decoding_key(public: &PublicJwk) -> Result<DecodingKey, KeyError> {
    if public.kty != "RSA" || public.alg != ALGORITHM {
        return Err(KeyError::Invalid(public.kid.clone()));
    }
    DecodingKey::from_rsa_components(&public.n, &public.e)
        .map_err(|_| KeyError::Invalid(public.kid.clone()))
}

/// A private key ready to sign RS256: parsed once (by aws-lc, the same backend jsonwebtoken's
/// `aws_lc_rs` feature uses) instead of on every signature.
pub struct SigningKey {
    pair: RsaKeyPair,
    rng: SystemRandom,
}

impl std::fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SigningKey([REDACTED])")
    }
}

impl SigningKey {
    /// The RS256 (RSASSA-PKCS1-v1_5 with SHA-256) signature of `message`.
    pub fn sign(&self, message: &[u8]) -> Result<Vec<u8>, KeyError> {
        let mut signature = vec![0u8; self.pair.public_modulus_len()];
        self.pair
            .sign(&RSA_PKCS1_SHA256, &self.rng, message, &mut signature)
            .map_err(|_| KeyError::Generation)?;
        Ok(signature)
    }
}

/// Reads a stored public JWK.
pub fn parse_public(value: &Value) -> Option<PublicJwk> {
    serde_json::from_value(value.clone()).ok()
}

fn decode_component(kid: &str, value: &str) -> Result<Vec<u8>, KeyError> {
    URL_SAFE_NO_PAD
        .decode(value)
        .ok()
        .filter(|bytes| !bytes.is_empty())
        .ok_or_else(|| KeyError::Invalid(kid.to_string()))
}

/// Checks that `private` belongs to `public` and returns the signing key: both RSA with `n` and
/// `e`, any `alg` RS256, equal `n` and `e`, and a probe signature that verifies.
pub fn import(kid: &str, public: &PublicJwk, private: &PrivateJwk) -> Result<SigningKey, KeyError> {
    let invalid = || KeyError::Invalid(kid.to_string());
    if public.kty != "RSA" || private.kty != "RSA" || public.alg != ALGORITHM {
        return Err(invalid());
    }
    if private.alg.as_deref().is_some_and(|alg| alg != ALGORITHM) {
        return Err(invalid());
    }
    if public.n != private.n || public.e != private.e {
        return Err(KeyError::Mismatch(kid.to_string()));
    }
    let components = [
        &private.n,
        &private.e,
        &private.d,
        &private.p,
        &private.q,
        &private.dp,
        &private.dq,
        &private.qi,
    ]
    .map(|c| decode_component(kid, c));
    let [n, e, d, p, q, dp, dq, qi] = components;
    let (n, e, d, p, q, dp, dq, qi) = (n?, e?, d?, p?, q?, dp?, dq?, qi?);
    fn uint<'a>(kid: &str, bytes: &'a [u8]) -> Result<UintRef<'a>, KeyError> {
        UintRef::new(bytes).map_err(|_| KeyError::Invalid(kid.to_string()))
    }
    let der = pkcs1::RsaPrivateKeyRef {
        modulus: uint(kid, &n)?,
        public_exponent: uint(kid, &e)?,
        private_exponent: uint(kid, &d)?,
        prime1: uint(kid, &p)?,
        prime2: uint(kid, &q)?,
        exponent1: uint(kid, &dp)?,
        exponent2: uint(kid, &dq)?,
        coefficient: uint(kid, &qi)?,
        other_prime_infos: None,
    }
    .to_der()
    .map_err(|_| invalid())?;
    let key = SigningKey {
        pair: RsaKeyPair::from_der(&der).map_err(|_| invalid())?,
        rng: SystemRandom::new(),
    };
    let signature = URL_SAFE_NO_PAD.encode(key.sign(PROBE_MESSAGE).map_err(|_| invalid())?);
    let verified = jsonwebtoken::crypto::verify(
        &signature,
        PROBE_MESSAGE,
        &decoding_key(public)?,
        Algorithm::RS256,
    )
    .unwrap_or(false);
    if !verified {
        return Err(KeyError::Mismatch(kid.to_string()));
    }
    Ok(key)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_keys_import_and_foreign_halves_do_not() {
        let a = generate().expect("generate");
        let b = generate().expect("generate");
        assert_eq!(a.public.e, "AQAB");
        assert_eq!(a.public.alg, "RS256");
        assert_eq!(a.public.key_use, "sig");
        assert!(uuid::Uuid::parse_str(&a.kid).is_ok());
        assert!(import(&a.kid, &a.public, &a.private).is_ok());
        // A private key presented with another key's public half.
        let err = import(&a.kid, &b.public, &a.private).expect_err("mismatch");
        assert!(err.to_string().contains("does not match"));
        // Same n and e but a corrupted private exponent: the probe fails.
        let mut broken = a.private.clone();
        broken.d = b.private.d.clone();
        assert!(import(&a.kid, &a.public, &broken).is_err());
        let mut wrong_alg = a.private.clone();
        wrong_alg.alg = Some("PS256".into());
        assert!(matches!(
            import(&a.kid, &a.public, &wrong_alg),
            Err(KeyError::Invalid(_))
        ));
    }

    #[test]
    fn public_jwk_has_exactly_the_published_members() {
        let key = generate().expect("generate");
        let value = serde_json::to_value(&key.public).expect("json");
        let mut members: Vec<&String> = value.as_object().expect("object").keys().collect();
        members.sort();
        assert_eq!(members, ["alg", "e", "kid", "kty", "n", "use"]);
    }
}
