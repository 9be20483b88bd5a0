//! franz-go's consumer group (`integration/programs/group-member-go`, one process per member)
//! with the KIP-848 consumer protocol on one node: members join, one leaves, one is killed
//! with SIGKILL, a topic gains partitions, a regex subscription picks up a topic created after
//! it joined, and a rolling upgrade takes the members from the classic protocol to the consumer
//! protocol and back. With manual commits every record is read exactly once and no partition
//! is owned by two members at once, by the members' own callbacks (`common::group_members`).
//! Records are produced with librdkafka.

use std::collections::BTreeSet;
use std::sync::Arc;

use rdkafka::admin::{AdminClient, AdminOptions, NewPartitions};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;

use crate::common::broker_process::{start_selected, SelectedBroker};
use crate::common::franz_members::{GoMember, Subscription};
use crate::common::group_members::{
    assert_owned_once_and_read_once, await_until, never_committed, Shared,
};
use crate::consumer_protocol::produce;

/// Both brokers' settings: auto-created topics of four partitions, no initial rebalance delay
/// for classic groups, and consumer-protocol heartbeats every 500 ms with a 6 s session (how
/// long a killed member keeps its partitions).
const SETTINGS: &[&str] = &[
    "num.partitions=4",
    "group.initial.rebalance.delay.ms=0",
    "group.consumer.min.heartbeat.interval.ms=500",
    "group.consumer.heartbeat.interval.ms=500",
    "group.consumer.min.session.timeout.ms=6000",
    "group.consumer.session.timeout.ms=6000",
];

/// Values `{prefix}-0..n`, added to `expected`.
fn values(expected: &mut BTreeSet<String>, prefix: &str, n: usize) -> Vec<String> {
    let v: Vec<String> = (0..n).map(|i| format!("{prefix}-{i}")).collect();
    expected.extend(v.iter().cloned());
    v
}

fn add_partitions(bootstrap: &str, topic: &str, total: usize) {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()
        .expect("admin client");
    let opts = AdminOptions::new().operation_timeout(Some(crate::CALL_TIMEOUT));
    let res = crate::runtime()
        .block_on(admin.create_partitions([&NewPartitions::new(topic, total)], &opts))
        .expect("CreatePartitions");
    assert_eq!(res, vec![Ok(topic.to_string())], "CreatePartitions {topic}");
    crate::drop_off_thread(admin);
}

/// The member's first group request is of `protocol` (it is checked again when it leaves).
fn await_protocol(member: &GoMember, protocol: &str) {
    await_until(
        &format!("{} sends its first group request", member.name),
        || !member.protocols().is_empty(),
    );
    let spoken = member.protocols();
    assert!(
        spoken.len() == 1 && spoken.contains(protocol),
        "{} asked for the {protocol} protocol and spoke {spoken:?}",
        member.name
    );
}

fn await_everything_read(shared: &Shared, expected: &BTreeSet<String>) {
    await_until("every record read", || {
        let seen = shared.seen.lock().unwrap();
        expected.iter().all(|v| seen.contains_key(v))
    });
}

fn check(shared: &Shared, expected: &BTreeSet<String>) {
    assert_owned_once_and_read_once(shared, expected);
    let uncommitted = never_committed(shared, expected);
    assert!(
        uncommitted.is_empty(),
        "{} of {} records never committed: {:?}",
        uncommitted.len(),
        expected.len(),
        &uncommitted[..uncommitted.len().min(10)]
    );
}

#[test]
fn franz_go_members_join_leave_crash_and_follow_new_partitions_and_topics() {
    let selected: SelectedBroker = start_selected("franz-kip848", SETTINGS);
    let bootstrap = selected.bootstrap.clone();
    let shared = Arc::new(Shared::default());
    let mut expected = BTreeSet::new();
    let topic = "fgo-t";
    let group = "fgo-g";
    let start = |name: &str| {
        GoMember::start(
            &bootstrap,
            group,
            name,
            Subscription::Topics(&[topic]),
            "consumer",
            &shared,
        )
    };
    let total = |ms: &[&GoMember]| ms.iter().map(|m| m.size()).sum::<usize>();

    // The topic is created by the first produce (four partitions).
    produce(&bootstrap, topic, &values(&mut expected, "j0", 100));
    let a = start("a");
    await_protocol(&a, "consumer");
    await_until("a owns 4", || a.size() == 4);
    let b = start("b");
    await_until("a and b own 2 each", || a.size() == 2 && b.size() == 2);
    produce(&bootstrap, topic, &values(&mut expected, "j1", 100));
    // c takes half a second over each poll's records before committing them.
    let c = GoMember::start_processing(
        &bootstrap,
        group,
        "c",
        Subscription::Topics(&[topic]),
        "consumer",
        &shared,
        500,
    );
    await_protocol(&c, "consumer");
    await_until("a, b and c own the 4", || {
        total(&[&a, &b, &c]) == 4 && [&a, &b, &c].iter().all(|m| m.size() > 0)
    });
    // b leaves: its partitions go to a and c.
    b.close();
    await_until("a and c own 2 each", || a.size() == 2 && c.size() == 2);
    produce(&bootstrap, topic, &values(&mut expected, "j2", 100));
    // c dies holding records it read and did not commit: its partitions go to a once its
    // session expires, and a reads those records again.
    let c_pending = || {
        shared
            .pending
            .lock()
            .unwrap()
            .get("c")
            .is_some_and(|p| !p.is_empty())
    };
    await_until("c has read records it has not committed", c_pending);
    c.crash();
    assert!(
        !shared.uncommitted.lock().unwrap().is_empty(),
        "c committed before it was killed"
    );
    await_until("a owns 4 after c's session expired", || a.size() == 4);
    produce(&bootstrap, topic, &values(&mut expected, "j3", 100));
    // Two more partitions: the group assigns them.
    add_partitions(&bootstrap, topic, 6);
    await_until("a owns the 6 partitions", || a.size() == 6);
    produce(&bootstrap, topic, &values(&mut expected, "j4", 150));
    await_everything_read(&shared, &expected);
    a.close();

    // A regex subscription (resolved by the broker) picks up a topic created after it joined.
    let rx_group = "fgo-rx-g";
    produce(&bootstrap, "fgo-rx-1", &values(&mut expected, "x1", 100));
    let rx = |name: &str| {
        GoMember::start(
            &bootstrap,
            rx_group,
            name,
            Subscription::Regex(&["fgo-rx-.*"]),
            "consumer",
            &shared,
        )
    };
    let (d, e) = (rx("d"), rx("e"));
    await_protocol(&d, "consumer");
    await_until("d and e own fgo-rx-1's 4 partitions", || {
        d.size() + e.size() == 4 && d.size() > 0 && e.size() > 0
    });
    produce(&bootstrap, "fgo-rx-2", &values(&mut expected, "x2", 100));
    await_until("d and e own fgo-rx-1's and fgo-rx-2's 8 partitions", || {
        d.size() == 4 && e.size() == 4
    });
    let on_new_topic = |m: &GoMember| m.owned().iter().any(|(t, _)| t == "fgo-rx-2");
    assert!(on_new_topic(&d) || on_new_topic(&e));
    produce(&bootstrap, "fgo-rx-1", &values(&mut expected, "x3", 100));
    produce(&bootstrap, "fgo-rx-2", &values(&mut expected, "x4", 100));
    await_everything_read(&shared, &expected);
    d.close();
    e.close();
    check(&shared, &expected);
    drop(selected);
}

/// A rolling upgrade of franz-go members from the classic protocol (franz-go's default, with
/// its cooperative-sticky balancer) to the consumer protocol and back: the group converts when
/// the first consumer-protocol member joins and back when the last one leaves.
#[test]
fn franz_go_members_roll_from_classic_to_consumer_and_back() {
    let selected: SelectedBroker = start_selected("franz-migration", SETTINGS);
    let bootstrap = selected.bootstrap.clone();
    let topic = "fgo-migrate";
    let group = "fgo-migrate-g";
    let shared = Arc::new(Shared::default());
    let mut expected = BTreeSet::new();
    produce(&bootstrap, topic, &values(&mut expected, "m0", 100));
    let start = |name: &str, protocol: &str| {
        let m = GoMember::start(
            &bootstrap,
            group,
            name,
            Subscription::Topics(&[topic]),
            protocol,
            &shared,
        );
        await_protocol(&m, protocol);
        m
    };
    let mut members = vec![start("classic-0", "classic"), start("classic-1", "classic")];
    let spread = |members: &[GoMember], step: &str| {
        await_until(&format!("each member owns 2 of 4 ({step})"), || {
            members.iter().all(|m| m.size() == 2)
        })
    };
    spread(&members, "classic");
    for (step, (i, protocol)) in [
        (0, "consumer"),
        (1, "consumer"),
        (0, "classic"),
        (1, "classic"),
    ]
    .into_iter()
    .enumerate()
    {
        members.remove(i).close();
        members.insert(i, start(&format!("{protocol}-{i}-{step}"), protocol));
        spread(&members, &format!("member {i} now {protocol}"));
        produce(
            &bootstrap,
            topic,
            &values(&mut expected, &format!("m{}", step + 1), 100),
        );
    }
    await_everything_read(&shared, &expected);
    for m in members {
        m.close();
    }
    check(&shared, &expected);
    drop(selected);
}
