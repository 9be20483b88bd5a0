"""kafka-python (pure-Python client) against a broker: admin, produce, group consume, offsets.

Usage: check_kafka_python.py BOOTSTRAP. Exits non-zero on the first wrong outcome.
"""
import sys
import time
import uuid

from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient, NewPartitions, NewTopic

B = sys.argv[1]
N = 200


def check(cond, what):
    if not cond:
        print("kafka-python: FAIL:", what, file=sys.stderr)
        sys.exit(1)
    print("kafka-python: ok:", what)


admin = KafkaAdminClient(bootstrap_servers=B, request_timeout_ms=30000)
topic = "kp-" + uuid.uuid4().hex[:8]
group = "g-" + topic
admin.create_topics([NewTopic(topic, 3, 1, topic_configs={"retention.ms": "3600000"})])
check(topic in admin.list_topics(), "create_topics, list_topics")
desc = admin.describe_topics([topic])
check(len(desc) == 1 and desc[0]["error_code"] == 0 and len(desc[0]["partitions"]) == 3,
      "describe_topics: 3 partitions")
check(all(p["leader_id"] == 1 and p["replica_nodes"] == [1] and p["isr_nodes"] == [1] for p in desc[0]["partitions"]),
      "describe_topics: node 1 leads every partition")

cfg = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])["topic"][topic]
check(cfg["retention.ms"]["value"] == "3600000"
      and cfg["retention.ms"]["config_source"] == "DYNAMIC_TOPIC_CONFIG",
      "describe_configs: the topic override")
cfg = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)],
                             config_filter="all")["topic"][topic]
check(cfg["cleanup.policy"]["value"] == "delete" and cfg["max.message.bytes"]["value"] == "1048588",
      "describe_configs: defaults")
admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, topic,
                                    configs={"retention.ms": "7200000"})])
cfg = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])["topic"][topic]
check(cfg["retention.ms"]["value"] == "7200000", "alter_configs")
admin.create_partitions({topic: NewPartitions(4)})
check(len(admin.describe_topics([topic])[0]["partitions"]) == 4, "create_partitions: 3 -> 4")

producer = KafkaProducer(bootstrap_servers=B, acks="all", compression_type="gzip", linger_ms=5)
futures = [producer.send(topic, key=b"k%d" % i, value=b"v%d" % i, partition=i % 4,
                         headers=[("h", b"%d" % i)]) for i in range(N)]
producer.flush(30)
meta = [f.get(30) for f in futures]
check(sorted((m.partition, m.offset) for m in meta)
      == sorted((i % 4, i // 4) for i in range(N)), "produce: consecutive offsets per partition")
producer.close()

consumer = KafkaConsumer(topic, bootstrap_servers=B, group_id=group, auto_offset_reset="earliest",
                         enable_auto_commit=False, consumer_timeout_ms=30000)
got = []
for m in consumer:
    got.append(m)
    if len(got) == N:
        break
check(len(got) == N, "group consumer read %d records" % len(got))
check(all(m.value == b"v" + m.key[1:] and m.headers == [("h", m.key[1:])] for m in got),
      "keys, values and headers round-trip")
check(all(m.partition == int(m.key[1:]) % 4 and m.offset == int(m.key[1:]) // 4 for m in got),
      "partitions and offsets")
consumer.commit()
parts = [TopicPartition(topic, p) for p in range(4)]
check([consumer.committed(tp) for tp in parts] == [N // 4] * 4, "commit, committed")
check(consumer.end_offsets(parts) == {tp: N // 4 for tp in parts}, "end_offsets")
check(consumer.beginning_offsets(parts) == {tp: 0 for tp in parts}, "beginning_offsets")
consumer.close()

groups = [g for g in admin.list_groups() if g["group_id"] == group]
check(len(groups) == 1 and groups[0]["protocol_type"] == "consumer", "list_groups")
d = admin.describe_groups([group])[group]
check(d["error"] is None and d["group_state"] == "Empty" and d["protocol_type"] == "consumer"
      and d["members"] == [], "describe_groups: Empty after close")
offsets = admin.list_group_offsets({group: None})[group]
check({tp.partition: o.offset for tp, o in offsets.items()} == {p: N // 4 for p in range(4)},
      "list_group_offsets")
admin.delete_records({TopicPartition(topic, 0): 10})
c2 = KafkaConsumer(bootstrap_servers=B)
check(c2.beginning_offsets([TopicPartition(topic, 0)]) == {TopicPartition(topic, 0): 10},
      "delete_records moves the log start offset")
c2.close()
admin.delete_groups([group])
check(not [g for g in admin.list_groups() if g["group_id"] == group], "delete_groups")
cluster = admin.describe_cluster()
check(cluster["controller_id"] == 1 and len(cluster["brokers"]) == 1, "describe_cluster")
admin.delete_topics([topic])
deadline = time.time() + 20
while topic in admin.list_topics():
    check(time.time() < deadline, "delete_topics")
    time.sleep(0.5)
check(True, "delete_topics")
admin.close()
