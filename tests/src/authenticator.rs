//! A test authenticator: a real P-256 key (aws-lc-rs) that builds and signs the messages of the
//! Cloud Login protocol the way the app does (`JSON.stringify` of the exact array, IEEE P1363
//! `r‖s`, unpadded base64url). It builds its messages itself, from the protocol's definition,
//! so a server that signs-checks anything else fails against it.

use aws_lc_rs::rand::SystemRandom;
use aws_lc_rs::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, KeyPair};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::{Value, json};

/// The protocol name of version 1.
pub const PROTOCOL: &str = "cloud-app-approval-v1";

/// A device key and, once enrolled, its id.
pub struct TestAuthenticator {
    pair: EcdsaKeyPair,
    /// The public key as a JWK `{kty, crv, x, y}`.
    pub jwk: Value,
    pub device_id: Option<String>,
}

impl Default for TestAuthenticator {
    fn default() -> Self {
        TestAuthenticator::new()
    }
}

impl TestAuthenticator {
    /// A new key pair.
    pub fn new() -> TestAuthenticator {
        let pair = EcdsaKeyPair::generate(&ECDSA_P256_SHA256_FIXED_SIGNING)
            .unwrap_or_else(|e| panic!("P-256 key: {e}"));
        let point = pair.public_key().as_ref().to_vec();
        let jwk = json!({
            "kty": "EC", "crv": "P-256",
            "x": URL_SAFE_NO_PAD.encode(&point[1..33]),
            "y": URL_SAFE_NO_PAD.encode(&point[33..65]),
        });
        TestAuthenticator {
            pair,
            jwk,
            device_id: None,
        }
    }

    /// The ES256 signature of `message`, as the protocol encodes it.
    pub fn sign(&self, message: &str) -> String {
        let signature = self
            .pair
            .sign(&SystemRandom::new(), message.as_bytes())
            .unwrap_or_else(|e| panic!("sign: {e}"));
        URL_SAFE_NO_PAD.encode(signature.as_ref())
    }

    /// The message of a pairing claim.
    pub fn pairing_message(
        &self,
        issuer: &str,
        pairing_id: &str,
        secret: &str,
        name: &str,
    ) -> String {
        json!([
            PROTOCOL,
            "pair",
            issuer,
            pairing_id,
            secret,
            self.jwk["kty"],
            self.jwk["crv"],
            self.jwk["x"],
            self.jwk["y"],
            name
        ])
        .to_string()
    }

    /// A signed claim body for `/pairings/claim`.
    pub fn claim_body(&self, issuer: &str, pairing_id: &str, secret: &str, name: &str) -> Value {
        json!({
            "pairingId": pairing_id,
            "secret": secret,
            "publicKey": self.jwk,
            "name": name,
            "signature": self.sign(&self.pairing_message(issuer, pairing_id, secret, name)),
        })
    }

    /// A proof `{issuer, deviceId, jti, issuedAt, expiresAt, command}` issued now, valid 60 s.
    pub fn proof(&self, issuer: &str, command: Value) -> Value {
        let now = chrono::Utc::now().timestamp();
        json!({
            "issuer": issuer,
            "deviceId": self.device_id.clone().unwrap_or_default(),
            "jti": uuid::Uuid::new_v4().to_string(),
            "issuedAt": now,
            "expiresAt": now + 60,
            "command": command,
        })
    }

    /// The message a proof signs.
    pub fn device_message(proof: &Value) -> String {
        let command = &proof["command"];
        let mut parts = vec![
            json!(PROTOCOL),
            json!("device"),
            proof["issuer"].clone(),
            proof["deviceId"].clone(),
            proof["jti"].clone(),
            proof["issuedAt"].clone(),
            proof["expiresAt"].clone(),
            command["operation"].clone(),
        ];
        if command["operation"] == "decide" {
            for field in ["requestId", "challenge", "comparison", "decision"] {
                parts.push(command[field].clone());
            }
        }
        Value::Array(parts).to_string()
    }

    /// A signed request body for `/device`.
    pub fn signed(&self, proof: Value) -> Value {
        let signature = self.sign(&TestAuthenticator::device_message(&proof));
        json!({"proof": proof, "signature": signature})
    }

    /// A signed command issued now.
    pub fn command(&self, issuer: &str, command: Value) -> Value {
        self.signed(self.proof(issuer, command))
    }
}
