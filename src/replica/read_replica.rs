//! The preferred read replica of a consumer's fetch (KIP-392, read from follower): which replica
//! a leader sends a consumer to instead of serving it, as a pure function of the partition's
//! replicas and the consumer's rack.
//!
//! Kafka's `ReplicaManager#findPreferredReadReplica` with its `RackAwareReplicaSelector`
//! (`leadership-semantics.md` §8). The leader asks this on every consumer fetch when
//! `replica.selector.class` is set; the Fetch handler gathers the candidates (the partition's
//! ISR and what the leader knows of each follower's log, the brokers' racks and whether they are
//! reachable on the client's listener) and answers `preferred_read_replica` with empty records
//! when this returns a follower. Because the choice is made afresh on every fetch to the leader,
//! an ISR or leadership change is reflected in the next answer; a consumer already reading from
//! a follower comes back when that follower answers an error (it left the partition, or the
//! fetch offset is past its log end) or its metadata refresh drops the follower.
//!
//! Rules (each one is a row of the table tests below):
//! - only ISR members whose log holds the fetch offset (`log start <= fetch offset <= log end`)
//!   are candidates, so a consumer is never sent to a replica that is catching up, or that left
//!   the ISR (KAFKA-14372: Kafka chose out-of-ISR replicas before 3.4 and consumers lagged);
//! - a replica not reachable on the client's listener (fenced, or without that listener) is
//!   never chosen (Kafka: `Node.noNode()` has no rack and no endpoint);
//! - an empty client rack, no candidate in the client's rack, or the leader in the client's rack
//!   all mean the leader serves (`None`);
//! - among same-rack candidates, the most caught up: highest log end offset, then the least
//!   time since it was last caught up, then the highest broker id (Kafka's
//!   `ReplicaView.comparator()` under `max`).

use crate::config::ReplicaSelector;

/// One follower of the partition as the leader sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadReplicaCandidate {
    pub broker_id: i32,
    /// `broker.rack` of its registration; `None` when unset or when the broker is unreachable.
    pub rack: Option<String>,
    /// Registered, unfenced and with an endpoint on the client's listener.
    pub reachable: bool,
    /// In the committed ISR.
    pub in_isr: bool,
    /// From the follower's last fetch (-1 before its first fetch under this leader).
    pub log_start_offset: i64,
    pub log_end_offset: i64,
    pub last_caught_up_time_ms: i64,
}

/// The preferred read replica for a consumer fetching `fetch_offset` from rack `client_rack`,
/// `None` when the leader should serve it. `leader_rack` is the leader's `broker.rack`.
pub fn preferred_read_replica(
    selector: ReplicaSelector,
    client_rack: &str,
    fetch_offset: i64,
    leader_rack: Option<&str>,
    followers: &[ReadReplicaCandidate],
    now_ms: i64,
) -> Option<i32> {
    match selector {
        ReplicaSelector::Leader => None,
        ReplicaSelector::RackAware => {
            if client_rack.is_empty() || leader_rack == Some(client_rack) {
                return None;
            }
            followers
                .iter()
                .filter(|f| {
                    f.reachable
                        && f.in_isr
                        && f.log_start_offset >= 0
                        && f.log_start_offset <= fetch_offset
                        && fetch_offset <= f.log_end_offset
                        && f.rack.as_deref() == Some(client_rack)
                })
                .max_by_key(|f| {
                    (
                        f.log_end_offset,
                        std::cmp::Reverse(now_ms.saturating_sub(f.last_caught_up_time_ms)),
                        f.broker_id,
                    )
                })
                .map(|f| f.broker_id)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 10_000;

    fn follower(id: i32, rack: &str, log_end_offset: i64) -> ReadReplicaCandidate {
        ReadReplicaCandidate {
            broker_id: id,
            rack: (!rack.is_empty()).then(|| rack.to_owned()),
            reachable: true,
            in_isr: true,
            log_start_offset: 0,
            log_end_offset,
            last_caught_up_time_ms: NOW,
        }
    }

    fn select(
        client_rack: &str,
        fetch_offset: i64,
        leader_rack: &str,
        f: &[ReadReplicaCandidate],
    ) -> Option<i32> {
        preferred_read_replica(
            ReplicaSelector::RackAware,
            client_rack,
            fetch_offset,
            Some(leader_rack),
            f,
            NOW,
        )
    }

    #[test]
    fn leader_serves_unless_a_same_rack_follower_exists_and_the_leader_is_elsewhere() {
        let two = [follower(2, "rack-2", 100), follower(3, "rack-3", 100)];
        // (client rack, leader rack, expected)
        let cases = [
            ("", "rack-1", None),       // empty client rack
            ("rack-9", "rack-1", None), // no replica in the client's rack
            ("rack-1", "rack-1", None), // the leader is in the client's rack
            ("rack-2", "rack-1", Some(2)),
            ("rack-3", "rack-1", Some(3)),
            ("rack-2", "rack-2", None), // leader and follower both in rack-2: the leader
        ];
        for (client, leader, expected) in cases {
            assert_eq!(
                select(client, 50, leader, &two),
                expected,
                "client {client:?} leader {leader:?}"
            );
        }
        // No selector configured: always the leader.
        assert_eq!(
            preferred_read_replica(
                ReplicaSelector::Leader,
                "rack-2",
                50,
                Some("rack-1"),
                &two,
                NOW
            ),
            None
        );
        // A leader without a rack is in no client's rack.
        assert_eq!(
            preferred_read_replica(ReplicaSelector::RackAware, "rack-2", 50, None, &two, NOW),
            Some(2)
        );
    }

    #[test]
    fn only_in_sync_reachable_replicas_holding_the_offset_are_chosen() {
        let base = follower(2, "rack-2", 100);
        let cases = [
            (
                ReadReplicaCandidate {
                    in_isr: false,
                    ..base.clone()
                },
                50,
                None,
            ), // catching up / left the ISR
            (
                ReadReplicaCandidate {
                    reachable: false,
                    ..base.clone()
                },
                50,
                None,
            ), // fenced
            (base.clone(), 101, None),    // past its log end
            (base.clone(), 100, Some(2)), // at its log end
            (
                ReadReplicaCandidate {
                    log_start_offset: 60,
                    ..base.clone()
                },
                50,
                None,
            ), // below its log start
            (
                ReadReplicaCandidate {
                    log_start_offset: 60,
                    ..base.clone()
                },
                60,
                Some(2),
            ),
            (
                ReadReplicaCandidate {
                    log_start_offset: -1,
                    log_end_offset: -1,
                    ..base.clone()
                },
                0,
                None,
            ), // never fetched
        ];
        for (candidate, fetch_offset, expected) in cases {
            assert_eq!(
                select(
                    "rack-2",
                    fetch_offset,
                    "rack-1",
                    std::slice::from_ref(&candidate)
                ),
                expected,
                "{candidate:?} at {fetch_offset}"
            );
        }
    }

    #[test]
    fn ties_go_to_the_most_caught_up_then_the_highest_id() {
        // Higher log end offset wins.
        let f = [
            follower(2, "r", 90),
            follower(4, "r", 100),
            follower(3, "r", 95),
        ];
        assert_eq!(select("r", 50, "x", &f), Some(4));
        // Equal log end offsets: the one caught up most recently.
        let mut a = follower(2, "r", 100);
        a.last_caught_up_time_ms = NOW - 10;
        let mut b = follower(3, "r", 100);
        b.last_caught_up_time_ms = NOW - 500;
        assert_eq!(select("r", 50, "x", &[a.clone(), b.clone()]), Some(2));
        // Everything equal: the highest broker id, whatever the order given.
        let f = [
            follower(3, "r", 100),
            follower(5, "r", 100),
            follower(2, "r", 100),
        ];
        assert_eq!(select("r", 50, "x", &f), Some(5));
        // The most caught up replica in another rack does not count.
        let f = [follower(2, "r", 90), follower(3, "other", 100)];
        assert_eq!(select("r", 50, "x", &f), Some(2));
    }
}
