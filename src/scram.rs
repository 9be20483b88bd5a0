//! SCRAM's credential arithmetic (RFC 5802, RFC 7677): the salted password, the stored and
//! server keys a server keeps, and the HMAC and hash of SCRAM-SHA-256 and SCRAM-SHA-512. Below
//! both `config` (credentials from `kafkaiq.sasl.scram.users`) and `metadata` (credentials in
//! the metadata log).

use std::fmt;

use hmac::{KeyInit, Mac};

/// The hash of a SCRAM mechanism.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScramHash {
    Sha256,
    Sha512,
}

impl ScramHash {
    pub fn hmac(self, key: &[u8], data: &[u8]) -> Vec<u8> {
        match self {
            ScramHash::Sha256 => {
                let mut m =
                    hmac::Hmac::<sha2::Sha256>::new_from_slice(key).expect("any key length");
                m.update(data);
                m.finalize().into_bytes().to_vec()
            }
            ScramHash::Sha512 => {
                let mut m =
                    hmac::Hmac::<sha2::Sha512>::new_from_slice(key).expect("any key length");
                m.update(data);
                m.finalize().into_bytes().to_vec()
            }
        }
    }

    pub fn hash(self, data: &[u8]) -> Vec<u8> {
        use sha2::Digest;
        match self {
            ScramHash::Sha256 => sha2::Sha256::digest(data).to_vec(),
            ScramHash::Sha512 => sha2::Sha512::digest(data).to_vec(),
        }
    }

    pub fn salted_password(self, password: &[u8], salt: &[u8], iterations: u32) -> Vec<u8> {
        match self {
            ScramHash::Sha256 => {
                let mut out = vec![0u8; 32];
                pbkdf2::pbkdf2_hmac::<sha2::Sha256>(password, salt, iterations, &mut out);
                out
            }
            ScramHash::Sha512 => {
                let mut out = vec![0u8; 64];
                pbkdf2::pbkdf2_hmac::<sha2::Sha512>(password, salt, iterations, &mut out);
                out
            }
        }
    }
}

/// Kafka's minimum (and default) SCRAM iteration count.
pub const SCRAM_ITERATIONS: u32 = 4096;

/// One user's credential for one SCRAM mechanism: what the server keeps (RFC 5802), never the
/// password or the salted password.
#[derive(Clone, PartialEq, Eq)]
pub struct ScramCredential {
    pub salt: Vec<u8>,
    pub iterations: u32,
    pub stored_key: Vec<u8>,
    pub server_key: Vec<u8>,
}

impl ScramCredential {
    pub fn new(hash: ScramHash, password: &str, salt: Vec<u8>, iterations: u32) -> ScramCredential {
        let salted = hash.salted_password(password.as_bytes(), &salt, iterations);
        ScramCredential::from_salted_password(hash, &salted, salt, iterations)
    }

    /// The credential of a salted password (`Hi(password, salt, iterations)`), which is what
    /// AlterUserScramCredentials carries.
    pub fn from_salted_password(
        hash: ScramHash,
        salted: &[u8],
        salt: Vec<u8>,
        iterations: u32,
    ) -> ScramCredential {
        let client_key = hash.hmac(salted, b"Client Key");
        ScramCredential {
            stored_key: hash.hash(&client_key),
            server_key: hash.hmac(salted, b"Server Key"),
            salt,
            iterations,
        }
    }
}

impl fmt::Debug for ScramCredential {
    // The keys are secrets: a stored key lets anyone who also sees an exchange impersonate.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ScramCredential")
            .field("iterations", &self.iterations)
            .finish_non_exhaustive()
    }
}
