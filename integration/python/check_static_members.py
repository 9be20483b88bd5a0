"""Static group members (KIP-345) with librdkafka (confluent-kafka): N consumers with
group.instance.id subscribe to one regex at the same moment, on a broker with
group.initial.rebalance.delay.ms=0, each polling while the others wait.

- First assignment: every member is assigned, and together they hold every partition once. A
  member whose join reaches the coordinator after the first rebalance completed (the delay is 0)
  triggers a second one, as in Kafka; the check then reads each member's latest assignment.
- Restart: the last member closes (a static member sends no LeaveGroup) and comes back with the
  same group.instance.id within its session timeout: it gets the same partitions back, and the
  other members see no rebalance event.

Usage: check_static_members.py BOOTSTRAP N. Exits non-zero on the first wrong outcome.
"""
import sys
import time
import uuid

from confluent_kafka import Consumer
from confluent_kafka.admin import AdminClient, NewTopic

B, N = sys.argv[1], int(sys.argv[2])
PARTITIONS = 6


def check(cond, what):
    if not cond:
        print("static-members: FAIL:", what, file=sys.stderr)
        sys.exit(1)
    print("static-members: ok:", what)


topic = "static-" + uuid.uuid4().hex[:8]
admin = AdminClient({"bootstrap.servers": B})
admin.create_topics([NewTopic(topic, PARTITIONS, 3)])[topic].result()
deadline = time.time() + 30
while len(admin.list_topics(topic, timeout=10).topics[topic].partitions) != PARTITIONS:
    check(time.time() < deadline, "topic visible")
    time.sleep(0.2)

group = "g-" + topic
events = [[] for _ in range(N)]


def conf(i):
    return {"bootstrap.servers": B, "group.id": group, "group.instance.id": "member-%d" % i,
            "session.timeout.ms": 6000, "max.poll.interval.ms": 9000,
            "auto.offset.reset": "earliest", "topic.metadata.refresh.interval.ms": 2000}


def subscribe(c, i):
    def on_assign(_, parts):
        events[i].append(("assign", sorted(p.partition for p in parts)))

    def on_revoke(_, parts):
        events[i].append(("revoke", sorted(p.partition for p in parts)))
    c.subscribe(["^" + topic + ".*"], on_assign=on_assign, on_revoke=on_revoke)


def await_assign(i, members, timeout):
    """Polls member i (1 s polls) until it was assigned, polling the others meanwhile."""
    end = time.time() + timeout
    while not events[i] and time.time() < end:
        members[i].poll(1.0)
        for j, other in enumerate(members):
            if j != i:
                other.poll(0)


members = [Consumer(conf(i)) for i in range(N)]
for i, c in enumerate(members):
    subscribe(c, i)
for i in range(N):
    await_assign(i, members, 30)


def latest(e):
    """The partitions a member holds after its events (eager protocol: assign replaces)."""
    held = []
    for kind, parts in e:
        held = parts if kind == "assign" else []
    return held


deadline = time.time() + 30
while True:
    for c in members:
        c.poll(0.5)
    held = sorted(p for e in events for p in latest(e))
    if (held == list(range(PARTITIONS)) and all(latest(e) for e in events)) or time.time() > deadline:
        break
check(all(latest(e) for e in events), "%d members: each assigned (%s)" % (N, events))
check(held == list(range(PARTITIONS)), "every partition held once (%s)" % held)

last = N - 1
before = latest(events[last])
members[last].close()
for e in events:
    e.clear()
members[last] = Consumer(conf(last))
subscribe(members[last], last)
started = time.time()
await_assign(last, members, 20)
took = time.time() - started
for _ in range(4):
    for c in members:
        c.poll(0.5)
check(events[last] == [("assign", before)],
      "the restarted member got its partitions back (%s)" % events[last])
check(took < 6, "within the session timeout (%.1f s)" % took)
check(all(not e for e in events[:last]), "the others saw no rebalance (%s)" % events[:last])
for c in members:
    c.close()
admin.delete_topics([topic])
