//! The request-level parameters of a Fetch.

use kafka_protocol::messages::FetchRequest;

use crate::replica::{FetchIsolation, FetchParams};

/// The request-level part of every partition's [`FetchParams`].
pub(super) fn request_params(version: i16, request: &FetchRequest) -> FetchParams {
    // v15+ carries the replica id and broker epoch in replica_state.
    let (replica_id, replica_epoch) = if version >= 15 {
        (
            request.replica_state.replica_id.0,
            request.replica_state.replica_epoch,
        )
    } else {
        (request.replica_id.0, -1)
    };
    let isolation_level = if version >= 4 {
        request.isolation_level
    } else {
        0
    };
    FetchParams {
        replica_id,
        replica_epoch,
        isolation: FetchIsolation::of(replica_id, isolation_level),
        // Client metadata (the rack id, KIP-392) is in every v11+ request.
        fetch_only_leader: FetchParams::fetch_only_leader(replica_id, version >= 11),
        current_leader_epoch: None,
        last_fetched_epoch: None,
        max_bytes: 0,
        min_one_message: false,
    }
}
