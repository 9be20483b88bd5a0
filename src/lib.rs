//! # kafkaiq
//!
//! A Kafka wire-protocol compatible broker built around partition leadership.

pub mod group;
pub mod protocol;
