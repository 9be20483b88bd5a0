//! Producer ids for InitProducerId, handed out from blocks the controller allocates (Kafka's
//! `ProducerIdManager` asking `AllocateProducerIds`), so one metadata record covers many
//! idempotent producers and an id is never handed out twice, across restarts.

use tokio::sync::Mutex;

use crate::controller::{ControllerChannel, ProducerIdBlock};
use crate::errors::ApiError;

#[derive(Debug)]
pub struct ProducerIdManager {
    broker_id: i32,
    /// The current block, `next..end`; empty until the first request.
    block: Mutex<(i64, i64)>,
}

impl ProducerIdManager {
    pub fn new(broker_id: i32) -> ProducerIdManager {
        ProducerIdManager {
            broker_id,
            block: Mutex::new((0, 0)),
        }
    }

    /// The next producer id, asking the controller for a new block when the current one is used
    /// up. A tokio mutex: callers queue behind one block allocation instead of each asking.
    pub async fn next_id(&self, controller: &ControllerChannel) -> Result<i64, ApiError> {
        let mut block = self.block.lock().await;
        if block.0 >= block.1 {
            let ProducerIdBlock { first, size } =
                controller.allocate_producer_ids(self.broker_id).await?;
            *block = (first, first + size);
        }
        let id = block.0;
        block.0 += 1;
        Ok(id)
    }
}
