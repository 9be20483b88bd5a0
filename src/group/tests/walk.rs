//! Seeded random walks over the whole machine.

use super::*;

/// A seeded random walk over joins, syncs, heartbeats, commits, leaves and clock advances by a
/// handful of members (static and dynamic, every JoinGroup version). Checks that nothing
/// panics, every response encodes at its version, no request is answered twice, generations
/// never go backwards, and replaying the records written rebuilds the same group.
#[test]
fn random_walks_keep_the_invariants() {
    let mut generations = Vec::new();
    let mut stable = 0;
    for seed in 1..=60u64 {
        let (generation, was_stable) = random_walk(seed, false);
        generations.push(generation);
        stable += usize::from(was_stable);
    }
    // The walks must actually get somewhere: groups that form, rebalance and settle.
    assert!(generations.iter().any(|g| *g >= 3), "{generations:?}");
    assert!(stable > 0, "no walk ever reached Stable");
}

/// The same walks over a log that fails one append in eight and holds its high watermark for
/// stretches. On top of the invariants above: what clients can read (offsets, generation)
/// always equals what a restart would rebuild from the records below the high watermark, and
/// a request answered by a failed write is never answered again.
#[test]
fn random_walks_over_a_faulty_log_never_show_what_is_not_durable() {
    let mut generations = Vec::new();
    for seed in 1..=60u64 {
        let (generation, _) = random_walk(seed, true);
        generations.push(generation);
    }
    assert!(generations.iter().any(|g| *g >= 3), "{generations:?}");
}

/// Offsets clients see for the partitions the walks commit to, now and after a restart.
fn assert_durable_view_is_the_durable_log(h: &mut H, seed: u64, step: i64) {
    let mut restarted = h.restart(1);
    for p in 0..3 {
        assert_eq!(
            h.fetch(8, G, "t", p).0,
            restarted.fetch(8, G, "t", p).0,
            "seed {seed} step {step}: partition {p}"
        );
    }
    if let Some(state) = h.c.group_state(G) {
        if matches!(state, GroupState::Stable | GroupState::Empty) {
            assert_eq!(
                h.c.generation(G),
                restarted.c.generation(G),
                "seed {seed} step {step}"
            );
        }
    }
}

/// Returns the final generation and whether the group was ever Stable.
fn random_walk(seed: u64, faults: bool) -> (i32, bool) {
    let mut rng = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut next = move |n: u64| {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng % n
    };
    let mut h = H::with(GroupConfig {
        initial_rebalance_delay_ms: 500,
        ..GroupConfig::default()
    });
    // Per client: (member id, instance id, last generation seen).
    let mut clients: Vec<(String, Option<String>, i32)> = (0..5)
        .map(|i| {
            let instance = (i % 2 == 0).then(|| format!("inst-{i}"));
            (String::new(), instance, -1)
        })
        .collect();
    let mut answered = std::collections::HashSet::new();
    let mut last_generation = 0;
    let mut ever_stable = false;
    for step in 0..400 {
        if faults {
            h.fail_appends = next(8) == 0;
            if next(12) == 0 {
                if h.hold_high_watermark {
                    h.release_high_watermark();
                } else {
                    h.hold_high_watermark = true;
                }
            }
            if step % 50 == 0 {
                let fail = std::mem::replace(&mut h.fail_appends, false);
                assert_durable_view_is_the_durable_log(&mut h, seed, step);
                h.fail_appends = fail;
            }
        }
        let c = next(clients.len() as u64) as usize;
        let (member, instance, generation) = clients[c].clone();
        let out = match next(8) {
            0 | 1 => {
                let v = next(10) as i16;
                let instance = if v >= 5 { instance.as_deref() } else { None };
                let (_, out) = h.join_v(v, &member, instance, &["t"]);
                out
            }
            2 => {
                let assign: Vec<(String, Vec<u8>)> = clients
                    .iter()
                    .filter(|c| !c.0.is_empty())
                    .map(|c| (c.0.clone(), c.0.as_bytes().to_vec()))
                    .collect();
                let refs: Vec<(&str, &[u8])> = assign
                    .iter()
                    .map(|(m, a)| (m.as_str(), a.as_slice()))
                    .collect();
                let (_, out) = h.sync(next(6) as i16, &member, generation, &refs);
                out
            }
            3 => {
                h.heartbeat(&member, generation, None);
                Outcome::default()
            }
            4 => {
                h.commit(8, G, generation, &member, &[("t", next(3) as i32, step)]);
                Outcome::default()
            }
            5 => {
                let req = LeaveGroupRequest::default()
                    .with_group_id(GroupId(s(G)))
                    .with_members(vec![MemberIdentity::default()
                        .with_member_id(s(&member))
                        .with_group_instance_id(instance.as_deref().map(s))]);
                let (_, out) = h.call(4, GroupRequest::LeaveGroup(req));
                clients[c].0.clear();
                out
            }
            _ => h.advance(next(8_000) as i64),
        };
        for (token, response) in &out.responses {
            assert!(
                answered.insert(*token),
                "seed {seed}: token {token} answered twice"
            );
            if let GroupResponse::JoinGroup(r) = response {
                // Whoever this answers, remember ids handed out so clients can use them.
                if r.error_code == 0 || r.error_code == E::MemberIdRequired.code() {
                    if let Some(cl) = clients
                        .iter_mut()
                        .find(|cl| cl.0 == r.member_id.as_str() || cl.0.is_empty())
                    {
                        cl.0 = r.member_id.to_string();
                        if r.error_code == 0 {
                            cl.2 = r.generation_id;
                        }
                    }
                }
            }
        }
        let g = h.c.generation(G).unwrap_or(last_generation);
        assert!(g >= last_generation, "seed {seed}: generation went back");
        last_generation = g;
        ever_stable |= h.c.group_state(G) == Some(GroupState::Stable);
    }
    h.fail_appends = false;
    if faults {
        assert_durable_view_is_the_durable_log(&mut h, seed, 400);
        h.release_high_watermark();
    }
    // Replay what was written: the group comes back with the same generation and state class.
    let c = h.restart(1).c;
    if let Some(state) = h.c.group_state(G) {
        if matches!(state, GroupState::Stable | GroupState::Empty) {
            assert_eq!(c.generation(G), h.c.generation(G), "seed {seed}");
        }
    }
    (last_generation, ever_stable)
}
