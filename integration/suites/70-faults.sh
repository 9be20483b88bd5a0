#!/usr/bin/env bash
# The fault-injection short run (integration/faults/README.md): a three-node cluster under
# fourteen faults, one of each kind — kill -9 of a leader, a follower, the active controller and
# two nodes at once, SIGSTOP past replica.lag.time.max.ms and past the session timeout, cuts
# between nodes (a leader isolated, a follower cut from its leader, a one-way cut, a flapping
# link), slow links (latency added around a leader, between a follower and its leader), a full
# log-dir disk, a topic deleted and created again while a replica is down — with idempotent acks=all producers and consumers (librdkafka and the Java
# client) checked like Jepsen. Passes only if the checker's last line ends in "valid".
#
# BROKER_UNDER_TEST=apache-kafka runs the same schedule against Apache Kafka 4.1.1. The seed
# is fixed so every run injects the same faults in the same order; run
# integration/faults/run.sh --seed N by hand to try others.
set -euo pipefail

root="${KAFKAIQ_ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}"
broker=kafkaiq
if [[ "${BROKER_UNDER_TEST:-}" == apache-kafka ]]; then
    broker=kafka
fi
out="$(mktemp "${TMPDIR:-/tmp}/faults-short.XXXXXX")"
trap 'rm -f "$out"' EXIT
status=0
"$root/integration/faults/run.sh" --broker "$broker" --seed 1 | tee "$out" || status=$?
last="$(tail -1 "$out")"
if [[ $status != 0 || ! "$last" =~ ^faults:\ .*:\ valid$ ]]; then
    echo "70-faults: FAILED (exit $status): $last" >&2
    exit 1
fi
