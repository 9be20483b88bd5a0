"""confluent-kafka (librdkafka) against a broker: AdminClient, idempotent producer, group
consumer, offsets_for_times and list_offsets, and the produce refusals of Kafka's LogValidator.

Usage: check_confluent_kafka.py BOOTSTRAP. Exits non-zero on the first wrong outcome.
"""
import sys
import time
import uuid

from confluent_kafka import (Consumer, ConsumerGroupTopicPartitions, KafkaException, Producer,
                             TopicCollection, TopicPartition)
from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource,
                                   ConfigSource, NewPartitions, NewTopic, OffsetSpec, ResourceType)

B = sys.argv[1]
N = 200


def check(cond, what):
    if not cond:
        print("confluent-kafka: FAIL:", what, file=sys.stderr)
        sys.exit(1)
    print("confluent-kafka: ok:", what)


def wait(futures):
    return {k: f.result() for k, f in futures.items()}


admin = AdminClient({"bootstrap.servers": B})
topic = "ck-" + uuid.uuid4().hex[:8]
group = "g-" + topic
wait(admin.create_topics([NewTopic(topic, 3, 1, config={"retention.ms": "3600000"})]))
md = admin.list_topics(timeout=10)
check(topic in md.topics and len(md.topics[topic].partitions) == 3, "create_topics, list_topics")
check(list(md.brokers) == [1] and md.controller_id == 1 and md.cluster_id, "metadata: broker 1")
check(all(p.leader == 1 and p.replicas == [1] and p.isrs == [1]
          for p in md.topics[topic].partitions.values()), "metadata: leader, replicas, ISR")
try:
    wait(admin.create_topics([NewTopic(topic, 3, 1)]))
    check(False, "creating an existing topic failed")
except KafkaException as e:
    check(e.args[0].name() == "TOPIC_ALREADY_EXISTS", "TOPIC_ALREADY_EXISTS")

res = ConfigResource(ResourceType.TOPIC, topic)
cfg = admin.describe_configs([res])[res].result()
check(cfg["retention.ms"].value == "3600000"
      and cfg["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value,
      "describe_configs: the topic override")
check(cfg["cleanup.policy"].value == "delete" and cfg["cleanup.policy"].is_default,
      "describe_configs: a default")
broker = ConfigResource(ResourceType.BROKER, "1")
bcfg = admin.describe_configs([broker])[broker].result()
check(bcfg["log.retention.hours"].value == "168", "describe_configs: broker")
alter = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
    ConfigEntry("retention.ms", "7200000", incremental_operation=AlterConfigOpType.SET)])
wait(admin.incremental_alter_configs([alter]))
check(admin.describe_configs([res])[res].result()["retention.ms"].value == "7200000",
      "incremental_alter_configs")
wait(admin.create_partitions([NewPartitions(topic, 4)]))
check(len(admin.list_topics(topic, timeout=10).topics[topic].partitions) == 4,
      "create_partitions: 3 -> 4")

# zstd batches of many records: the timestamp lookups below land inside compressed batches, where
# Kafka answers the exact record, not the batch.
producer = Producer({"bootstrap.servers": B, "enable.idempotence": True, "linger.ms": 20,
                     "compression.type": "zstd"})
ts0 = int(time.time() * 1000) - 1_000_000
reports = []
for i in range(N):
    producer.produce(topic, key=b"k%d" % i, value=b"v%d" % i, partition=i % 4,
                     headers=[("h", b"%d" % i)], timestamp=ts0 + i * 1000,
                     on_delivery=lambda err, m: reports.append((err, m.partition(), m.offset())))
check(producer.flush(30) == 0, "idempotent producer flushed")
check(all(err is None for err, _, _ in reports)
      and sorted((p, o) for _, p, o in reports) == sorted((i % 4, i // 4) for i in range(N)),
      "delivery reports: consecutive offsets per partition")

consumer = Consumer({"bootstrap.servers": B, "group.id": group, "auto.offset.reset": "earliest",
                     "enable.auto.commit": False})
consumer.subscribe([topic])
got = []
deadline = time.time() + 60
while len(got) < N and time.time() < deadline:
    m = consumer.poll(1.0)
    if m is None:
        continue
    if m.error() is not None:
        check(False, "poll without error (%s)" % m.error())
    got.append(m)
check(len(got) == N, "group consumer read %d records" % len(got))
check(all(m.value() == b"v" + m.key()[1:] and m.headers() == [("h", m.key()[1:])]
          and m.timestamp()[1] == ts0 + int(m.key()[1:]) * 1000 for m in got),
      "keys, values, headers and timestamps round-trip")
consumer.commit(asynchronous=False)
committed = consumer.committed([TopicPartition(topic, p) for p in range(4)], timeout=10)
check([tp.offset for tp in committed] == [N // 4] * 4, "commit, committed")
consumer.close()

# The first record at or after ts0 + 100 s in partition p is record 100 + p, at offset 25.
lookup = Consumer({"bootstrap.servers": B, "group.id": group + "-t"})
times = lookup.offsets_for_times([TopicPartition(topic, p, ts0 + 100_000) for p in range(4)],
                                 timeout=10)
lookup.close()
found = [(tp.partition, tp.offset) for tp in times]
check(found == [(p, 25) for p in range(4)], "offsets_for_times: %s" % found)
spec = {TopicPartition(topic, 0): OffsetSpec.earliest(), TopicPartition(topic, 1): OffsetSpec.latest(),
        TopicPartition(topic, 2): OffsetSpec.max_timestamp(),
        TopicPartition(topic, 3): OffsetSpec.for_timestamp(ts0 + 100_000)}
lo = {tp.partition: r.offset for tp, r in wait(admin.list_offsets(spec)).items()}
check(lo == {0: 0, 1: N // 4, 2: N // 4 - 1, 3: 25}, "list_offsets: %s" % lo)

listed = admin.list_consumer_groups().result()
check(group in [g.group_id for g in listed.valid], "list_consumer_groups")
desc = admin.describe_consumer_groups([group])[group].result()
check(desc.state.name == "EMPTY" and not desc.members, "describe_consumer_groups: EMPTY")
offs = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result()
check(sorted((tp.partition, tp.offset) for tp in offs.topic_partitions)
      == [(p, N // 4) for p in range(4)], "list_consumer_group_offsets")
dr = wait(admin.delete_records([TopicPartition(topic, 0, 10)]))
check([r.low_watermark for r in dr.values()] == [10], "delete_records")
cluster = admin.describe_cluster().result()
check(cluster.controller.id == 1 and [n.id for n in cluster.nodes] == [1], "describe_cluster")
td = admin.describe_topics(TopicCollection([topic]))[topic].result()
check(len(td.partitions) == 4 and all(p.leader.id == 1 and [n.id for n in p.isr] == [1]
                                      for p in td.partitions), "describe_topics")
# What Kafka's LogValidator refuses reaches librdkafka's delivery reports with Kafka's error:
# a timestamp past message.timestamp.after.max.ms (1 h), and a keyless record on a compacted topic.
compacted = topic + "-compacted"
wait(admin.create_topics([NewTopic(compacted, 1, 1, config={"cleanup.policy": "compact"})]))
refusals = []
plain = Producer({"bootstrap.servers": B, "linger.ms": 0})
now_ms = int(time.time() * 1000)
# One flush each: a refusal covers the whole batch, as in Kafka.
for t, key, ts in [(topic, b"late", now_ms + 2 * 3600_000), (compacted, None, now_ms),
                   (compacted, b"k", now_ms)]:
    plain.produce(t, key=key, value=b"v", partition=0, timestamp=ts,
                  on_delivery=lambda err, m: refusals.append((m.topic(), m.key(), err and err.name())))
    check(plain.flush(30) == 0, "refusals: flushed")
check(sorted(refusals, key=str) == sorted([(topic, b"late", "INVALID_TIMESTAMP"),
                                           (compacted, None, "INVALID_RECORD"),
                                           (compacted, b"k", None)], key=str),
      "delivery reports: INVALID_TIMESTAMP, INVALID_RECORD, then accepted (%s)" % refusals)
wait(admin.delete_topics([compacted]))

wait(admin.delete_consumer_groups([group]))
check(group not in [g.group_id for g in admin.list_consumer_groups().result().valid],
      "delete_consumer_groups")
wait(admin.delete_topics([topic]))
deadline = time.time() + 20
while topic in admin.list_topics(timeout=10).topics:
    check(time.time() < deadline, "delete_topics")
    time.sleep(0.5)
check(True, "delete_topics")
