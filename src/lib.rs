//! # kafkaiq
//!
//! A Kafka wire-protocol compatible broker built around partition leadership.

pub mod protocol;
