#!/usr/bin/env bash
# The Java client suite (integration/java): Apache Kafka 4.1.1's KafkaProducer, KafkaConsumer,
# AdminClient, ProducerPerformance and BrokerApiVersionsCommand against the broker; then the
# client tests again with kafka-clients 4.4.0 (the newest served; the tool tests, which check
# 4.1.1's tool output, run with 4.1.1 only). JAVA_CLIENT_VERSIONS="4.1.1" runs one version.
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
status=0
for version in ${JAVA_CLIENT_VERSIONS:-4.1.1 4.4.0}; do
    args=(-Dkafka.version="$version")
    if [[ "$version" != 4.1.1 ]]; then
        args+=("-Dtest=!KafkaToolsTest,!KafkaCliTest")
    fi
    echo "30-java: kafka-clients $version" >&2
    rm -rf target/surefire-reports
    mvn -q -B test "${args[@]}" || status=1
    # What ran, from surefire's reports: a run in which no test ran is no pass.
    python3 - target/surefire-reports "$version" <<'PY' || status=1
import glob, sys
import xml.etree.ElementTree as ET
reports, version = sys.argv[1], sys.argv[2]
totals = dict(tests=0, failures=0, errors=0, skipped=0)
for path in sorted(glob.glob(f"{reports}/TEST-*.xml")):
    suite = ET.parse(path).getroot()
    counts = {k: int(suite.get(k, 0)) for k in totals}
    for k in totals:
        totals[k] += counts[k]
    print(f"30-java: {version}: {suite.get('name')}: {counts['tests']} tests, {counts['failures']} failures, "
          f"{counts['errors']} errors, {counts['skipped']} skipped", file=sys.stderr)
print(f"30-java: kafka-clients {version}: {totals['tests']} tests, {totals['failures']} failures, "
      f"{totals['errors']} errors, {totals['skipped']} skipped", file=sys.stderr)
sys.exit(0 if totals["tests"] > 0 and totals["failures"] == 0 and totals["errors"] == 0 else 1)
PY
done
exit "$status"
