#!/usr/bin/env bash
# The two Python Kafka clients against the broker, each checking outcomes (offsets, records,
# configs, group state), not only that calls return:
#
# - confluent-kafka (librdkafka in a wheel): integration/python/check_confluent_kafka.py
#   (AdminClient topics/configs/partitions/groups/records/cluster, idempotent zstd producer with keys,
#   headers and timestamps, a subscribed consumer committing, offsets_for_times, list_offsets
#   earliest/latest/max-timestamp/by-time).
# - kafka-python (pure Python): integration/python/check_kafka_python.py (admin, gzip producer,
#   group consumer, committed/end/beginning offsets, group listing and deletion, delete_records).
#
# Both install from PyPI into integration/.venv (git-ignored) on first use, at pinned versions.
# Broker selection as in integration/lib/broker.sh (BROKER_UNDER_TEST=apache-kafka checks the
# suite itself against Apache Kafka).
set -euo pipefail

root="${KAFKAIQ_ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}"
KAFKAIQ_BIN="${KAFKAIQ_BIN:-$root/target/release/kafkaiq}"
# shellcheck source=../lib/broker.sh
source "$root/integration/lib/broker.sh"

# shellcheck source=../lib/python-clients.sh
source "$root/integration/lib/python-clients.sh"
step() { echo "45-python-clients: $*" >&2; }
fail() {
    echo "45-python-clients: FAIL: $*" >&2
    broker_log_tail 60
    exit 1
}
python_clients

cleanup() {
    local status=$?
    broker_stop || status=1
    exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
broker_start "group.initial.rebalance.delay.ms=0" "offsets.topic.num.partitions=10"
B="$BROKER_BOOTSTRAP"

step "confluent-kafka"
timeout 150 "$python" "$root/integration/python/check_confluent_kafka.py" "$B" ||
    fail "confluent-kafka"
step "kafka-python"
timeout 150 "$python" "$root/integration/python/check_kafka_python.py" "$B" || fail "kafka-python"
step "ok"
