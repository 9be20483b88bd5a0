#!/usr/bin/env bash
# Smoke run of the benchmark runner (benches/compare/compare.py --smoke) so it cannot rot: one
# round of a tiny plan against Apache Kafka 4.1.1 and then against $KAFKAIQ_BIN, with the same
# stock tools (ProducerPerformance at full speed and at a fixed rate, ConsumerPerformance), the
# same over a SASL_SSL listener with new connections per second (--security sasl_ssl --smoke),
# then the same for 3-node clusters of each (--cluster 3 --smoke). Needs a C compiler and make for
# rdkafka_performance.
#
# Fails when either broker does not start, when any tool run fails against either broker,
# ConsumerPerformance included (--strict-consumer), or when a broker misbehaves around it: an
# exit before it is stopped, SIGTERM not obeyed in time, an unclean exit status, a "panicked at"
# line in its output. The runner itself reports a consumer run
# against a broker that does not advertise the consumer-group APIs as "unsupported"; this suite
# tolerated that only until KafkaIQ's consumer groups landed, and no longer does.
#
# The figures of a smoke run mean nothing (a few thousand records); the full run is
# `benches/compare/compare.py`. Needs Java 17, Maven (Kafka's jars) and Python 3.
# run-all: kafkaiq only: it runs Apache Kafka and KafkaIQ side by side itself
set -euo pipefail

root="${KAFKAIQ_ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}"
export KAFKAIQ_BIN="${KAFKAIQ_BIN:-$root/target/release/kafkaiq}"
if [[ ! -x "$KAFKAIQ_BIN" ]]; then
    echo "50-bench-smoke: no broker binary at $KAFKAIQ_BIN (cargo build --release --bin kafkaiq)" >&2
    exit 1
fi
for tool in java mvn python3 cc make; do
    command -v "$tool" >/dev/null || { echo "50-bench-smoke: $tool is required" >&2; exit 1; }
done

python3 "$root/benches/compare/compare.py" --smoke --strict-consumer
# The security path: both brokers with a SASL_SSL listener (SCRAM-SHA-256, a PEM key store made
# with openssl), the tools over it, and new connections per second by a TLS + SCRAM client.
python3 "$root/benches/compare/compare.py" --security sasl_ssl --smoke --strict-consumer
# The cluster path: a three-node cluster of each (RF 3, min.insync.replicas=2), a tiny plan of
# ProducerPerformance, rdkafka_performance (built once into target/rdkafka-perf-tls/ from the
# librdkafka source of the rdkafka-sys crate), ConsumerPerformance, EndToEndLatency and a
# fixed-rate run. KAFKAIQ_BENCH_PORT_BASE pins its ports (default: free ephemeral ones).
exec python3 "$root/benches/compare/compare.py" --cluster 3 --smoke --strict-consumer \
    ${KAFKAIQ_BENCH_PORT_BASE:+--port-base "$KAFKAIQ_BENCH_PORT_BASE"}
