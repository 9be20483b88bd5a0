//! AddOffsetsToTxn (key 25), v0-4: adds the group's `__consumer_offsets` partition to the
//! producer's transaction, so its offsets commit or abort with it.

use std::collections::BTreeSet;

use kafka_protocol::messages::{AddOffsetsToTxnRequest, AddOffsetsToTxnResponse, ResponseKind};

use crate::errors::code_of;
use crate::group::service::GroupService;
use crate::group::OFFSETS_TOPIC_NAME;
use crate::txn::TxnService;

pub async fn handle(
    txns: &TxnService,
    groups: &GroupService,
    _version: i16,
    request: AddOffsetsToTxnRequest,
) -> ResponseKind {
    let partition = groups.partition_for(&request.group_id.0);
    let partitions = BTreeSet::from([(OFFSETS_TOPIC_NAME.to_owned(), partition)]);
    let result = match groups.ensure_offsets_topic().await {
        Err(e) => Err(e),
        Ok(_) => {
            txns.add_partitions(
                &request.transactional_id.0,
                request.producer_id.0,
                request.producer_epoch,
                partitions,
                // A client of transaction version 2 sends no AddOffsetsToTxn.
                0,
            )
            .await
        }
    };
    ResponseKind::AddOffsetsToTxn(
        AddOffsetsToTxnResponse::default().with_error_code(code_of(&result)),
    )
}
