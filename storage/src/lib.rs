//! # kafkaiq-storage
//!
//! Kafka-format segment logs for one broker's partitions. This crate knows nothing of brokers,
//! the wire protocol, ISR or consumer groups: it stores opaque v2 record batches in Apache
//! Kafka's on-disk layout so that Kafka's own tools can read what it writes.
pub mod checkpoint;
pub mod epoch;
pub mod producer_state;
