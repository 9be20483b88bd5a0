//! The metadata quorum: the controllers' Raft group, which replicates the metadata log.
//!
//! Built on the `raft` crate (TiKV's raft-rs, the core of TiKV and etcd's design), not on
//! consensus written here. Its synchronous `RawNode` + `Ready` loop is what makes the quorum a
//! plain engine ([`engine::QuorumEngine`]: ticks, messages and proposals in; durable writes,
//! messages and committed entries out) that the controller drives on its own thread and that a
//! seeded simulation drives many of at once.
//!
//! - [`engine`]: one voter.
//! - [`storage`]: the library's in-memory view of the log, mirroring what is durable.
//! - [`durable`]: the voter's files (`raft.log`, `quorum-state`, `snapshot`) or, in the
//!   simulation, memory that outlives a simulated crash.
//! - [`transport`], [`wire`], [`chunks`]: Raft messages between voters, in Kafka request
//!   frames on the controller listener; a large one (a snapshot) in bounded chunks.
//! - [`frames`]: the CRC32C-framed file format and its replay rules (only a torn tail is ever
//!   cut).
//!
//! An entry's data is one batch of encoded metadata records, so the Raft index is the metadata
//! offset. A snapshot's data is the image as records. This module knows nothing of what the
//! records mean; the controller does.

// The library's protobuf messages are built field by field, as its own code does.
#![allow(clippy::field_reassign_with_default)]

pub mod admit;
pub mod chunks;
pub mod durable;
pub mod engine;
pub mod frames;
pub mod storage;
pub mod transport;
pub mod wire;

pub use engine::{Apply, Committed, Output, Proposal, QuorumConfig, QuorumEngine, QuorumStatus};

#[cfg(test)]
mod tests;
