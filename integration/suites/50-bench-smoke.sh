#!/usr/bin/env bash
# Smoke run of the benchmark runner (benches/compare/compare.py --smoke) so it cannot rot: one
# round of a tiny plan against Apache Kafka 4.1.1 and then against $KAFKAIQ_BIN, with the same
# stock tools (ProducerPerformance at full speed and at a fixed rate, ConsumerPerformance).
#
# Fails when either broker does not start, or when any tool run fails against either broker,
# with one exception: ConsumerPerformance against a broker whose ApiVersions answer lacks the
# consumer-group APIs (FindCoordinator, JoinGroup, SyncGroup, Heartbeat, OffsetCommit,
# OffsetFetch) is reported as "NOT CHECKED (unsupported by the broker)" and tolerated. That
# exception ends by itself: as soon as KafkaIQ advertises those APIs its consumer run must pass.
# BENCH_STRICT_CONSUMER=1 removes the exception now.
#
# The figures of a smoke run mean nothing (a few thousand records); the full run is
# `benches/compare/compare.py`. Needs Java 17, Maven (Kafka's jars) and Python 3.
set -euo pipefail

root="${KAFKAIQ_ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}"
export KAFKAIQ_BIN="${KAFKAIQ_BIN:-$root/target/release/kafkaiq}"
if [[ ! -x "$KAFKAIQ_BIN" ]]; then
    echo "50-bench-smoke: no broker binary at $KAFKAIQ_BIN (cargo build --release --bin kafkaiq)" >&2
    exit 1
fi
for tool in java mvn python3; do
    command -v "$tool" >/dev/null || { echo "50-bench-smoke: $tool is required" >&2; exit 1; }
done

strict=()
if [[ "${BENCH_STRICT_CONSUMER:-0}" == 1 ]]; then
    strict=(--strict-consumer)
fi
exec python3 "$root/benches/compare/compare.py" --smoke "${strict[@]}"
