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

CONFLUENT_KAFKA_VERSION=2.16.1
KAFKA_PYTHON_VERSION=3.0.12

venv="$root/integration/.venv"
python="$venv/bin/python"
step() { echo "45-python-clients: $*" >&2; }
fail() {
    echo "45-python-clients: FAIL: $*" >&2
    broker_log_tail 60
    exit 1
}

if ! "$python" -c "import confluent_kafka, kafka, sys
sys.exit(confluent_kafka.__version__ != '$CONFLUENT_KAFKA_VERSION' or kafka.__version__ != '$KAFKA_PYTHON_VERSION')" 2>/dev/null; then
    step "installing confluent-kafka $CONFLUENT_KAFKA_VERSION and kafka-python $KAFKA_PYTHON_VERSION into $venv"
    if ! python3 -m venv "$venv" >&2; then
        # Debian's python3 splits venv support into python3-venv.
        if [[ $(id -u) -eq 0 ]]; then
            DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
            DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >&2
        else
            sudo -n env DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
            sudo -n env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >&2
        fi
        python3 -m venv "$venv" >&2
    fi
    "$venv/bin/pip" install -q --disable-pip-version-check \
        "confluent-kafka==$CONFLUENT_KAFKA_VERSION" "kafka-python==$KAFKA_PYTHON_VERSION" >&2
fi

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
