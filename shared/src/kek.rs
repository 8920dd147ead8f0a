//! Key-encryption keys (KEKs) and the envelope that protects signing keys at rest.
//!
//! Envelope format (`auth.signing_keys.encrypted_private_jwk`): `v1.` followed by unpadded
//! base64url of `nonce (12 bytes) ‖ ciphertext ‖ GCM tag (16 bytes)`. The cipher is AES-256-GCM;
//! its key is derived from the 32-byte KEK with HKDF-SHA256 (salt `k2b-cloud identity`, info
//! `signing key private jwk v1`); the associated data is the key's `kid`, so a ciphertext moved
//! to another row does not decrypt. `encryption_key_id` names the KEK: the first 16 hex
//! characters of SHA-256 over the KEK's lowercase hex text.
//!
//! Rolling a KEK: (1) add `CLOUD_IDENTITY_NEXT_KEY=B` so every replica can read B; (2) set
//! `CLOUD_IDENTITY_KEY_ENCRYPTION_KEY=B` and `CLOUD_IDENTITY_PREVIOUS_KEY=A`: the next
//! initialisation rewraps every row under B; (3) remove the previous key.

use aes_gcm::aead::{Aead, KeyInit, Payload};
use aes_gcm::{Aes256Gcm, Key, Nonce};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hkdf::Hkdf;
use rand::RngCore;
use sha2::{Digest, Sha256};

use crate::secret::Secret;

pub const CURRENT_VARIABLE: &str = "CLOUD_IDENTITY_KEY_ENCRYPTION_KEY";
pub const PREVIOUS_VARIABLE: &str = "CLOUD_IDENTITY_PREVIOUS_KEY";
pub const NEXT_VARIABLE: &str = "CLOUD_IDENTITY_NEXT_KEY";

const ENVELOPE_PREFIX: &str = "v1.";
const NONCE_BYTES: usize = 12;
const TAG_BYTES: usize = 16;

/// Why a KEK configuration was refused (messages as operators see them).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KekError {
    #[error("{0} must be exactly 32 high-entropy bytes encoded as 64 hexadecimal characters")]
    Malformed(&'static str),
    #[error("Cloud identity key encryption keys must be distinct")]
    NotDistinct,
    #[error("Configure either {PREVIOUS_VARIABLE} or {NEXT_VARIABLE}, not both")]
    PreviousAndNext,
}

/// One key-encryption key.
#[derive(Clone)]
pub struct Kek {
    pub id: String,
    cipher: Aes256Gcm,
}

impl std::fmt::Debug for Kek {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Kek({})", self.id)
    }
}

impl Kek {
    fn parse(variable: &'static str, raw: &str) -> Result<Kek, KekError> {
        let hex_text = raw.trim().to_ascii_lowercase();
        if hex_text.len() != 64 || !hex_text.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(KekError::Malformed(variable));
        }
        let bytes = hex::decode(&hex_text).map_err(|_| KekError::Malformed(variable))?;
        let id = hex::encode(Sha256::digest(hex_text.as_bytes()))[..16].to_string();
        let hkdf = Hkdf::<Sha256>::new(Some(b"k2b-cloud identity"), &bytes);
        let mut key = [0u8; 32];
        hkdf.expand(b"signing key private jwk v1", &mut key)
            .map_err(|_| KekError::Malformed(variable))?;
        Ok(Kek {
            id,
            cipher: Aes256Gcm::new(Key::<Aes256Gcm>::from_slice(&key)),
        })
    }

    /// Seals a private JWK of the key `kid`.
    pub fn seal(&self, kid: &str, plaintext: &[u8]) -> String {
        let mut nonce = [0u8; NONCE_BYTES];
        rand::rngs::OsRng.fill_bytes(&mut nonce);
        let sealed = self
            .cipher
            .encrypt(
                Nonce::from_slice(&nonce),
                Payload {
                    msg: plaintext,
                    aad: kid.as_bytes(),
                },
            )
            .unwrap_or_else(|_| {
                unreachable!("AES-GCM encryption of an in-memory buffer cannot fail")
            });
        let mut envelope = nonce.to_vec();
        envelope.extend_from_slice(&sealed);
        format!("{ENVELOPE_PREFIX}{}", URL_SAFE_NO_PAD.encode(envelope))
    }

    /// Opens an envelope of the key `kid`; `None` when it was changed, moved or is not ours.
    pub fn open(&self, kid: &str, envelope: &str) -> Option<Vec<u8>> {
        let bytes = URL_SAFE_NO_PAD
            .decode(envelope.strip_prefix(ENVELOPE_PREFIX)?)
            .ok()?;
        if bytes.len() < NONCE_BYTES + TAG_BYTES {
            return None;
        }
        let (nonce, sealed) = bytes.split_at(NONCE_BYTES);
        self.cipher
            .decrypt(
                Nonce::from_slice(nonce),
                Payload {
                    msg: sealed,
                    aad: kid.as_bytes(),
                },
            )
            .ok()
    }
}

/// The configured KEKs: the current one (encrypts every new key) and optionally a previous one
/// (being rolled away from) or a next one (being rolled out).
#[derive(Debug, Clone)]
pub struct KekSet {
    pub current: Kek,
    pub previous: Option<Kek>,
    pub next: Option<Kek>,
}

impl KekSet {
    /// Parses the three variables (blank counts as unset). Only Core holds them: the
    /// configuration refuses any other `APP_ID` before it reads them.
    pub fn parse(
        current: Option<&Secret>,
        previous: Option<&Secret>,
        next: Option<&Secret>,
    ) -> Result<KekSet, KekError> {
        let present = |s: Option<&Secret>| {
            s.map(|s| s.expose().trim().to_string())
                .filter(|s| !s.is_empty())
        };
        let current = Kek::parse(
            CURRENT_VARIABLE,
            &present(current).ok_or(KekError::Malformed(CURRENT_VARIABLE))?,
        )?;
        let previous = present(previous)
            .map(|v| Kek::parse(PREVIOUS_VARIABLE, &v))
            .transpose()?;
        let next = present(next)
            .map(|v| Kek::parse(NEXT_VARIABLE, &v))
            .transpose()?;
        let mut ids = vec![current.id.clone()];
        for kek in previous.iter().chain(next.iter()) {
            if ids.contains(&kek.id) {
                return Err(KekError::NotDistinct);
            }
            ids.push(kek.id.clone());
        }
        if previous.is_some() && next.is_some() {
            return Err(KekError::PreviousAndNext);
        }
        Ok(KekSet {
            current,
            previous,
            next,
        })
    }

    /// The KEK with id `id`, whichever role it has.
    pub fn by_id(&self, id: &str) -> Option<&Kek> {
        std::iter::once(&self.current)
            .chain(self.previous.iter())
            .chain(self.next.iter())
            .find(|kek| kek.id == id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret(value: &str) -> Secret {
        Secret::new(value)
    }

    const A: &str = "0101010101010101010101010101010101010101010101010101010101010101";
    const B: &str = "0202020202020202020202020202020202020202020202020202020202020202";
    const C: &str = "0303030303030303030303030303030303030303030303030303030303030303";

    /// Scenario 17: the KEK configuration rules and their messages (that only Core loads them
    /// is the configuration's `APP_ID` rule).
    #[test]
    fn scenario_17_kek_configuration() {
        let short = KekSet::parse(Some(&secret("short")), None, None).expect_err("short");
        assert!(short.to_string().contains("64 hexadecimal"));
        assert!(short.to_string().starts_with(CURRENT_VARIABLE));
        assert_eq!(
            KekSet::parse(Some(&secret(A)), Some(&secret(A)), None).expect_err("same"),
            KekError::NotDistinct
        );
        // Case does not make a key distinct.
        assert_eq!(
            KekSet::parse(Some(&secret(A)), None, Some(&secret(&A.to_uppercase())))
                .expect_err("same"),
            KekError::NotDistinct
        );
        let parsed = KekSet::parse(Some(&secret(A)), Some(&secret(B)), None).expect("ok");
        assert_ne!(
            parsed.current.id,
            parsed.previous.as_ref().expect("previous").id
        );
        assert_eq!(parsed.current.id.len(), 16);
        assert!(KekSet::parse(Some(&secret(A)), None, Some(&secret(B))).is_ok());
        assert_eq!(
            KekSet::parse(Some(&secret(A)), Some(&secret(B)), Some(&secret(C))).expect_err("both"),
            KekError::PreviousAndNext
        );
        // Blank optional keys are unset; a missing current key is refused.
        assert!(KekSet::parse(Some(&secret(A)), Some(&secret("  ")), None).is_ok());
        assert_eq!(
            KekSet::parse(None, None, None).expect_err("missing"),
            KekError::Malformed(CURRENT_VARIABLE)
        );
        let bad_next = KekSet::parse(Some(&secret(A)), None, Some(&secret("zz"))).expect_err("bad");
        assert_eq!(bad_next, KekError::Malformed(NEXT_VARIABLE));
    }

    #[test]
    fn kek_id_is_the_sha256_prefix_of_the_lowercase_hex() {
        let kek = Kek::parse(CURRENT_VARIABLE, &A.to_uppercase()).expect("kek");
        assert_eq!(
            kek.id,
            hex::encode(Sha256::digest(A.as_bytes()))[..16].to_string()
        );
    }

    #[test]
    fn envelopes_bind_the_kid_and_detect_changes() {
        let kek = Kek::parse(CURRENT_VARIABLE, A).expect("kek");
        let sealed = kek.seal("kid-1", b"{\"d\":\"secret\"}");
        assert!(!sealed.contains("secret"));
        assert_eq!(
            kek.open("kid-1", &sealed).as_deref(),
            Some(&b"{\"d\":\"secret\"}"[..])
        );
        assert_eq!(kek.open("kid-2", &sealed), None);
        let other = Kek::parse(CURRENT_VARIABLE, B).expect("kek");
        assert_eq!(other.open("kid-1", &sealed), None);
        let mut corrupt = sealed.clone();
        corrupt.pop();
        corrupt.push(if sealed.ends_with('A') { 'B' } else { 'A' });
        assert_eq!(kek.open("kid-1", &corrupt), None);
    }
}
