//! Fuzzes the controller port's Raft frames: no sequence of frames may panic a voter (raft-rs
//! panics on a commit index beyond the log, on entries that conflict with committed ones, ...).
//! Each input is a run of messages stepped into one voter (node 1 of 1, 2, 3) that holds a log
//! of four entries, two committed, in term 3, with a poll after each and a tick now and then.
//!
//! Inputs whose first byte is even are raw frames (`u16` length, then a frame without its size
//! prefix, as the controller listener hands it to `quorum::wire::decode_request`, or to
//! `quorum::chunks::decode_chunk` and the voter's `Reassembly` for a chunk frame). Otherwise
//! each message is built field by field from the bytes — type, sender, addressee, terms and
//! indexes near the voter's, entries — and travels through the frame encoding first, so
//! mutations spend their time in the voter rather than in protobuf.

#![no_main]

use kafkaiq::metadata::MetadataRecord;
use kafkaiq::quorum::durable::{Durable, MemState};
use kafkaiq::quorum::chunks::{self, Reassembly};
use kafkaiq::quorum::{wire, QuorumConfig, QuorumEngine};
use libfuzzer_sys::fuzz_target;
use protobuf::ProtobufEnum;
use raft::eraftpb::{Entry, HardState, Message, MessageType};

fn metadata(data: &[u8]) -> Result<(), String> {
    MetadataRecord::decode_all(data)
        .map(|_| ())
        .map_err(|e| e.to_string())
}

fn voter() -> QuorumEngine {
    let mut durable = MemState::new();
    let entries: Vec<Entry> = (1..=4)
        .map(|index| Entry {
            index,
            term: if index < 3 { 2 } else { 3 },
            ..Default::default()
        })
        .collect();
    durable.append(&entries).expect("memory");
    let mut hs = HardState::default();
    hs.term = 3;
    hs.commit = 2;
    durable.set_hard_state(&hs).expect("memory");
    let config = QuorumConfig {
        node_id: 1,
        voters: vec![1, 2, 3],
        election_ticks: 4,
        heartbeat_ticks: 1,
        fixed_election_ticks: Some(4),
    };
    let mut engine = QuorumEngine::open(&config, durable.recover().expect("memory"));
    engine.set_entry_check(metadata);
    engine
}

/// Reads the input a byte (or a few) at a time; zeros once it is used up.
struct Bytes<'a>(&'a [u8]);

impl Bytes<'_> {
    fn u8(&mut self) -> u8 {
        let (first, rest) = self.0.split_first().map_or((0, &[][..]), |(f, r)| (*f, r));
        self.0 = rest;
        first
    }

    /// Near `base` most of the time, anything now and then.
    fn near(&mut self, base: u64) -> u64 {
        match self.u8() {
            0xff => u64::MAX,
            0xfe => 1 << 40,
            b => base.saturating_add(u64::from(b % 16)).saturating_sub(8),
        }
    }
}

fn message(b: &mut Bytes<'_>, term: u64) -> Message {
    let mut m = Message::default();
    m.set_msg_type(MessageType::from_i32(i32::from(b.u8() % 20)).unwrap_or_default());
    m.from = u64::from(b.u8() % 5);
    m.to = if b.u8() % 8 == 0 { 2 } else { 1 };
    m.term = b.near(term);
    m.index = b.near(4);
    m.log_term = b.near(term);
    m.commit = b.near(4);
    m.reject = b.u8() % 2 == 1;
    m.reject_hint = b.near(4);
    let entries = usize::from(b.u8() % 4);
    m.entries = (0..entries)
        .map(|i| Entry {
            index: if b.u8() % 4 == 0 {
                b.near(4)
            } else {
                m.index.saturating_add(1 + i as u64)
            },
            term: b.near(m.term),
            data: (0..usize::from(b.u8() % 8))
                .map(|_| b.u8())
                .collect::<Vec<u8>>()
                .into(),
            ..Default::default()
        })
        .collect::<Vec<_>>()
        .into();
    if m.get_msg_type() == MessageType::MsgSnapshot {
        let meta = m.mut_snapshot().mut_metadata();
        meta.index = b.near(4);
        meta.term = b.near(term);
        meta.mut_conf_state().voters = (1..=u64::from(b.u8() % 4)).collect();
    }
    m
}

fuzz_target!(|data: &[u8]| {
    let mut engine = voter();
    let _ = engine.poll();
    let mut frames: Vec<Vec<u8>> = Vec::new();
    match data {
        [mode, rest @ ..] if mode % 2 == 0 => {
            let mut rest = rest;
            while rest.len() >= 2 {
                let n = usize::from(u16::from_be_bytes([rest[0], rest[1]])).min(rest.len() - 2);
                frames.push(rest[2..2 + n].to_vec());
                rest = &rest[2 + n..];
            }
        }
        [_, rest @ ..] => {
            let mut b = Bytes(rest);
            while !b.0.is_empty() && frames.len() < 64 {
                let m = message(&mut b, engine.term());
                frames.push(wire::encode_request(1, "fuzz", &m)[4..].to_vec());
            }
        }
        [] => {}
    }
    let mut reassembly = Reassembly::new(vec![2, 3]);
    for (i, frame) in frames.iter().enumerate() {
        let message = if chunks::is_chunk_frame(frame) {
            chunks::decode_chunk(&frame.clone().into())
                .ok()
                .and_then(|c| reassembly.accept(1, None, c).ok().flatten())
                .and_then(|body| wire::decode_message(&body).ok())
        } else {
            wire::decode_request(frame).ok().map(|(_, m)| m)
        };
        if let Some(m) = message {
            let _ = engine.step(m);
        }
        let _ = engine.poll();
        if i % 3 == 2 {
            engine.tick();
            let _ = engine.poll();
        }
    }
});
