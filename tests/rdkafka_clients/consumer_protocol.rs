//! librdkafka with `group.protocol=consumer` (KIP-848): members join and leave a group whose
//! partitions the broker assigns; with manual commits every record is read exactly once and no
//! partition is owned by two members at once, by the members' own rebalance callbacks.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use rdkafka::config::ClientConfig;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};

use crate::common::broker_process::{start_selected, SelectedBroker};
use crate::common::group_members::{assert_owned_once_and_read_once, await_until, Running, Shared};

pub(crate) fn produce(bootstrap: &str, topic: &str, values: &[String]) {
    let p: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("linger.ms", "5")
        .create()
        .expect("producer");
    for v in values {
        loop {
            match p.send(BaseRecord::<str, str>::to(topic).key(v).payload(v)) {
                Ok(()) => break,
                Err(_) => {
                    p.poll(Duration::from_millis(10));
                }
            }
        }
    }
    p.flush(Duration::from_secs(30)).expect("flush");
}

#[test]
fn librdkafka_members_share_partitions_with_every_record_read_once() {
    let selected: SelectedBroker = start_selected(
        "rdkafka-consumer-protocol",
        &[
            "num.partitions=6",
            "group.consumer.min.heartbeat.interval.ms=500",
            "group.consumer.heartbeat.interval.ms=500",
            "group.consumer.min.session.timeout.ms=6000",
            "group.consumer.session.timeout.ms=6000",
        ],
    );
    let bootstrap = selected.bootstrap.clone();
    let topic = "rdk-kip848";
    let shared = Arc::new(Shared::default());
    let mut expected: BTreeSet<String> = BTreeSet::new();
    let mut batch = |round: &str| -> Vec<String> {
        let v: Vec<String> = (0..150).map(|i| format!("{round}-{i}")).collect();
        expected.extend(v.iter().cloned());
        v
    };
    // The topic is created by the first produce (num.partitions=6).
    produce(&bootstrap, topic, &batch("r0"));
    let a = Running::start(&bootstrap, "rdk-g", "a", topic, &shared);
    await_until("a owns 6", || a.size() == 6);
    let b = Running::start(&bootstrap, "rdk-g", "b", topic, &shared);
    await_until("a and b own 3 each", || a.size() == 3 && b.size() == 3);
    produce(&bootstrap, topic, &batch("r1"));
    b.close();
    await_until("a owns 6 again", || a.size() == 6);
    produce(&bootstrap, topic, &batch("r2"));
    await_until("every record read", || {
        let seen = shared.seen.lock().unwrap();
        expected.iter().all(|v| seen.contains_key(v))
    });
    a.close();
    assert_owned_once_and_read_once(&shared, &expected);
    drop(selected);
}

/// A rolling upgrade of librdkafka members from the classic protocol to the consumer protocol
/// and back: the group converts when the first consumer-protocol member joins and back when the
/// last one leaves, and every record produced along the way is read exactly once.
#[test]
fn librdkafka_members_roll_from_classic_to_consumer_and_back() {
    let selected: SelectedBroker = start_selected(
        "rdkafka-migration",
        &[
            "num.partitions=4",
            "group.initial.rebalance.delay.ms=0",
            "group.consumer.min.heartbeat.interval.ms=500",
            "group.consumer.heartbeat.interval.ms=500",
            "group.consumer.min.session.timeout.ms=6000",
            "group.consumer.session.timeout.ms=6000",
        ],
    );
    let bootstrap = selected.bootstrap.clone();
    let topic = "rdk-migrate";
    let group = "rdk-migrate-g";
    let shared = Arc::new(Shared::default());
    let mut expected: BTreeSet<String> = BTreeSet::new();
    let mut round = 0;
    let mut batch = || -> Vec<String> {
        round += 1;
        let v: Vec<String> = (0..100).map(|i| format!("m{round}-{i}")).collect();
        expected.extend(v.iter().cloned());
        v
    };
    produce(&bootstrap, topic, &batch());
    let start = |name: &str, protocol: &str| {
        Running::start_with(&bootstrap, group, name, topic, &shared, protocol)
    };
    let mut members = vec![start("classic-0", "classic"), start("classic-1", "classic")];
    let spread = |members: &[Running], step: &str| {
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
        produce(&bootstrap, topic, &batch());
    }
    await_until("every record read", || {
        let seen = shared.seen.lock().unwrap();
        expected.iter().all(|v| seen.contains_key(v))
    });
    for m in members {
        m.close();
    }
    assert_owned_once_and_read_once(&shared, &expected);
    drop(selected);
}
