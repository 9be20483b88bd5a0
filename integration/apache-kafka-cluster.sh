#!/usr/bin/env bash
# Runs Apache Kafka 4.1.1 as a three-node KRaft cluster (each node broker and controller) with
# the very files KafkaIQ takes, config/cluster/node-{1,2,3}.properties by default:
#   integration/apache-kafka-cluster.sh [--check] [CONFIG_DIR]
# Formats every node's log.dirs with one shared cluster id when none is formatted yet
# (kafka-storage format), starts the three JVMs (heap KAFKA_HEAP, default -Xmx512m each), waits
# until the quorum has three voters and three unfenced brokers, and prints them. Without
# --check it then runs until SIGINT/SIGTERM; with --check it stops the nodes and exits 0.
# JVM output goes to NODE_LOG_DIR (default: a temporary folder, printed).
set -euo pipefail

check=0
if [[ "${1:-}" == "--check" ]]; then
    check=1
    shift
fi
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
conf="${1:-$here/../config/cluster}"
conf="$(cd "$conf" && pwd)"
libs="$("$here/kafka-libs.sh")"
heap="${KAFKA_HEAP:--Xmx512m}"
logs="${NODE_LOG_DIR:-$(mktemp -d -t apache-kafka-cluster-XXXXXX)}"
mkdir -p "$logs"
java_tool() { java -Xmx256m -cp "$libs/*" "$@"; }
prop() { sed -n "s/^$2=//p" "$1" | tail -1; }

files=("$conf"/node-1.properties "$conf"/node-2.properties "$conf"/node-3.properties)
formatted=0
for f in "${files[@]}"; do
    for d in $(prop "$f" log.dirs | tr ',' ' '); do
        [[ -f "$d/meta.properties" ]] && formatted=1
    done
done
if [[ $formatted == 0 ]]; then
    cluster_id="$(java_tool kafka.tools.StorageTool random-uuid 2>/dev/null | tail -1)"
    for f in "${files[@]}"; do
        java_tool kafka.tools.StorageTool format -t "$cluster_id" -c "$f" >&2
    done
fi

pids=()
stop() {
    for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
    for p in "${pids[@]}"; do
        for _ in $(seq 1 60); do kill -0 "$p" 2>/dev/null || break; sleep 1; done
        kill -KILL "$p" 2>/dev/null || true
    done
}
trap stop EXIT
n=0
for f in "${files[@]}"; do
    n=$((n + 1))
    java $heap -cp "$libs/*" kafka.Kafka "$f" >"$logs/node-$n.log" 2>&1 &
    pids+=($!)
done
bootstrap="$(prop "${files[0]}" listeners | sed 's/.*PLAINTEXT:\/\/\([^,]*\).*/\1/')"
echo "apache kafka: 3 nodes starting, bootstrap $bootstrap, JVM logs in $logs" >&2

deadline=$((SECONDS + 180))
while :; do
    status="$(java_tool org.apache.kafka.tools.MetadataQuorumCommand --bootstrap-server "$bootstrap" \
        describe --status 2>/dev/null || true)"
    brokers="$(java_tool org.apache.kafka.tools.BrokerApiVersionsCommand --bootstrap-server "$bootstrap" \
        2>/dev/null | grep -c 'isFenced: false' || true)"
    voters="$(grep -o '"id": [0-9]*' <<<"$status" | wc -l)"
    if [[ "$voters" == 3 && "$brokers" == 3 ]]; then
        break
    fi
    if (( SECONDS > deadline )); then
        echo "apache kafka: no cluster of 3 within 180 s (voters $voters, brokers $brokers)" >&2
        exit 1
    fi
    sleep 2
done
grep -E 'ClusterId|LeaderId|CurrentVoters' <<<"$status"
echo "unfenced brokers: $brokers"
if [[ $check == 1 ]]; then
    exit 0
fi
wait
