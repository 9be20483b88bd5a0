//! Structural validation of request frames before `kafka-protocol` decodes them.
//!
//! Placeholder: accepts every frame. The schema-driven walker replaces this.

use kafka_protocol::messages::ApiKey;

/// Why a frame was rejected.
#[derive(Debug, thiserror::Error)]
pub enum GuardError {
    #[error("truncated at byte {at}")]
    Truncated { at: usize },
}

/// Checks that `frame` (request header and body, no size prefix) can be decoded without any
/// allocation larger than the frame itself.
pub fn check_request(
    _frame: &[u8],
    _api_key: ApiKey,
    _api_version: i16,
    _header_version: i16,
) -> Result<(), GuardError> {
    Ok(())
}
