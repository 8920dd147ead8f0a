//! Encryption of stored setting values.
//!
//! Envelope: `v1.` followed by unpadded base64url of `nonce (12 bytes) ‖ ciphertext ‖ tag (16)`.
//! The cipher is AES-256-GCM under a key derived from `APP_SECRET` with HKDF-SHA256; the row's key
//! (`app.logo`, …) is the associated data, so a value copied onto another key fails to decrypt
//! just like a tampered one.

use aes_gcm::aead::{Aead, KeyInit, Payload};
use aes_gcm::{Aes256Gcm, Key, Nonce};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hkdf::Hkdf;
use rand::RngCore;
use sha2::Sha256;

const ENVELOPE_PREFIX: &str = "v1.";
const NONCE_BYTES: usize = 12;
const TAG_BYTES: usize = 16;
const HKDF_SALT: &[u8] = b"k2b-cloud settings";
const HKDF_INFO: &[u8] = b"settings.entries aes-256-gcm v1";

/// Encrypts and decrypts setting values with the installation's key.
#[derive(Clone)]
pub struct SettingsCipher {
    cipher: Aes256Gcm,
}

/// A stored value that does not decrypt: tampered, truncated, written under another `APP_SECRET`,
/// or copied from another key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("stored value does not decrypt with this APP_SECRET")]
pub struct DecryptError;

impl SettingsCipher {
    pub fn new(app_secret: &str) -> SettingsCipher {
        let hkdf = Hkdf::<Sha256>::new(Some(HKDF_SALT), app_secret.as_bytes());
        let mut key = [0u8; 32];
        // 32 bytes is far below HKDF-SHA256's 8160-byte output limit, so expansion cannot fail.
        hkdf.expand(HKDF_INFO, &mut key)
            .unwrap_or_else(|_| unreachable!("HKDF output length is fixed and valid"));
        SettingsCipher {
            cipher: Aes256Gcm::new(Key::<Aes256Gcm>::from_slice(&key)),
        }
    }

    /// Encrypts `plaintext` for the setting `key`.
    pub fn encrypt(&self, key: &str, plaintext: &[u8]) -> String {
        let mut nonce = [0u8; NONCE_BYTES];
        rand::rngs::OsRng.fill_bytes(&mut nonce);
        let sealed = self
            .cipher
            .encrypt(
                Nonce::from_slice(&nonce),
                Payload {
                    msg: plaintext,
                    aad: key.as_bytes(),
                },
            )
            .unwrap_or_else(|_| {
                unreachable!("AES-GCM encryption of an in-memory buffer cannot fail")
            });
        let mut envelope = Vec::with_capacity(NONCE_BYTES + sealed.len());
        envelope.extend_from_slice(&nonce);
        envelope.extend_from_slice(&sealed);
        format!("{ENVELOPE_PREFIX}{}", URL_SAFE_NO_PAD.encode(envelope))
    }

    /// Decrypts a stored value of the setting `key`; any change to it is detected.
    pub fn decrypt(&self, key: &str, stored: &str) -> Result<Vec<u8>, DecryptError> {
        let encoded = stored.strip_prefix(ENVELOPE_PREFIX).ok_or(DecryptError)?;
        let envelope = URL_SAFE_NO_PAD.decode(encoded).map_err(|_| DecryptError)?;
        if envelope.len() < NONCE_BYTES + TAG_BYTES {
            return Err(DecryptError);
        }
        let (nonce, sealed) = envelope.split_at(NONCE_BYTES);
        self.cipher
            .decrypt(
                Nonce::from_slice(nonce),
                Payload {
                    msg: sealed,
                    aad: key.as_bytes(),
                },
            )
            .map_err(|_| DecryptError)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const SECRET: &str = "0123456789abcdef0123456789abcdef";

    #[test]
    fn round_trips_and_never_stores_plaintext() {
        let cipher = SettingsCipher::new(SECRET);
        let stored = cipher.encrypt("app.name", br#""Example Cloud""#);
        assert!(stored.starts_with("v1."));
        assert!(!stored.contains("Example"));
        assert_eq!(
            cipher.decrypt("app.name", &stored).expect("decrypts"),
            br#""Example Cloud""#
        );
        // A fresh nonce each time: equal plaintexts give different ciphertexts.
        assert_ne!(stored, cipher.encrypt("app.name", br#""Example Cloud""#));
    }

    #[test]
    fn detects_tampering_truncation_other_keys_and_other_secrets() {
        let cipher = SettingsCipher::new(SECRET);
        let stored = cipher.encrypt("app.name", b"\"x\"");
        let mut bytes = URL_SAFE_NO_PAD.decode(&stored[3..]).expect("base64");
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        let flipped = format!("v1.{}", URL_SAFE_NO_PAD.encode(&bytes));
        assert_eq!(cipher.decrypt("app.name", &flipped), Err(DecryptError));
        assert_eq!(
            cipher.decrypt("app.name", &stored[..stored.len() - 4]),
            Err(DecryptError)
        );
        assert_eq!(cipher.decrypt("app.url", &stored), Err(DecryptError));
        assert_eq!(cipher.decrypt("app.name", "\"x\""), Err(DecryptError));
        assert_eq!(cipher.decrypt("app.name", "v1."), Err(DecryptError));
        let other = SettingsCipher::new("another secret of at least 32 characters");
        assert_eq!(other.decrypt("app.name", &stored), Err(DecryptError));
    }

    proptest! {
        #[test]
        fn any_value_round_trips(key in "[a-z]{1,8}\\.[a-z_]{1,12}", value in proptest::collection::vec(any::<u8>(), 0..512)) {
            let cipher = SettingsCipher::new(SECRET);
            let stored = cipher.encrypt(&key, &value);
            prop_assert_eq!(cipher.decrypt(&key, &stored).expect("round trip"), value);
        }
    }
}
