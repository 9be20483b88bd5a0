#!/usr/bin/env bash
# The Java client suite (integration/java): Apache Kafka 4.1.1's KafkaProducer, KafkaConsumer,
# AdminClient, ProducerPerformance and BrokerApiVersionsCommand against the broker.
#
# By default each test class starts $KAFKAIQ_BIN on a free 127.0.0.1 port with a temp data dir.
# BROKER_UNDER_TEST=apache-kafka runs the same tests against Apache Kafka 4.1.1 instead (how the
# tests themselves are checked); KAFKA_BOOTSTRAP=host:port uses an already running broker.
# Needs Java 17 and Maven; Maven fetches its dependencies from Maven Central on first use.
set -euo pipefail

root="${KAFKAIQ_ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}"
export KAFKAIQ_ROOT="$root"
if [[ -z "${KAFKA_BOOTSTRAP:-}" && "${BROKER_UNDER_TEST:-kafkaiq}" == kafkaiq ]]; then
    export KAFKAIQ_BIN="${KAFKAIQ_BIN:-$root/target/release/kafkaiq}"
    if [[ ! -x "$KAFKAIQ_BIN" ]]; then
        echo "30-java: no broker binary at $KAFKAIQ_BIN (cargo build --release --bin kafkaiq)" >&2
        exit 1
    fi
fi
for tool in java mvn; do
    command -v "$tool" >/dev/null || { echo "30-java: $tool is required" >&2; exit 1; }
done
if [[ "${BROKER_UNDER_TEST:-}" == apache-kafka ]]; then
    "$root/integration/kafka-libs.sh" >/dev/null
fi

cd "$root/integration/java"
exec mvn -q -B test
