//! SCRAM credentials in the metadata log (Kafka's `UserScramCredentialRecord` and
//! `RemoveUserScramCredentialRecord`, its `ScramImage`): one credential per user and mechanism,
//! set by AlterUserScramCredentials through the active controller, so that every node
//! authenticates the same users and a restart keeps them.

use std::collections::BTreeMap;

use crate::scram::{ScramCredential, ScramHash};

/// Kafka's `ScramMechanism` codes as the wire and its records carry them (0 is UNKNOWN).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ScramMechanism {
    Sha256,
    Sha512,
}

impl ScramMechanism {
    pub const ALL: [ScramMechanism; 2] = [ScramMechanism::Sha256, ScramMechanism::Sha512];

    /// `None` for UNKNOWN (0) and any code Kafka does not define.
    pub fn from_code(code: i8) -> Option<ScramMechanism> {
        match code {
            1 => Some(ScramMechanism::Sha256),
            2 => Some(ScramMechanism::Sha512),
            _ => None,
        }
    }

    pub fn code(self) -> i8 {
        match self {
            ScramMechanism::Sha256 => 1,
            ScramMechanism::Sha512 => 2,
        }
    }

    /// The SASL mechanism's name, as `sasl.enabled.mechanisms` writes it.
    pub fn sasl_name(self) -> &'static str {
        match self {
            ScramMechanism::Sha256 => "SCRAM-SHA-256",
            ScramMechanism::Sha512 => "SCRAM-SHA-512",
        }
    }

    pub fn hash(self) -> ScramHash {
        match self {
            ScramMechanism::Sha256 => ScramHash::Sha256,
            ScramMechanism::Sha512 => ScramHash::Sha512,
        }
    }
}

/// The fewest iterations a credential may have: Kafka's `minIterations` of both mechanisms.
pub const SCRAM_ITERATIONS_MIN: i32 = 4096;
/// The most iterations a credential may have (Kafka's `ScramControlManager.MAX_ITERATIONS`).
pub const SCRAM_ITERATIONS_MAX: i32 = 16384;

/// Every credential of the cluster, by user and then mechanism (so one user's are adjacent).
pub type ScramCredentials = BTreeMap<(String, ScramMechanism), ScramCredential>;
