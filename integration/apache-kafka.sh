#!/usr/bin/env bash
# Runs Apache Kafka 4.1.1 as a single KRaft node (broker and controller in one process) in the
# foreground, as the reference to compare KafkaIQ against:
#   integration/apache-kafka.sh DATA_DIR PORT CONTROLLER_PORT [key=value ...]
# Listens on 127.0.0.1:PORT (PLAINTEXT) and 127.0.0.1:CONTROLLER_PORT (controller). Formats
# DATA_DIR on first use. Extra key=value arguments are appended to server.properties.
#
# Only what a single KRaft node needs is set here (internal topics at replication factor 1);
# everything else is Kafka's default, as it is for KafkaIQ, so a suite that gives both brokers
# the same key=value settings compares like with like. (group.initial.rebalance.delay.ms, for
# one, is 3000 on both unless the suite passes another value to both.)
# Heap is fixed with KAFKA_HEAP (default -Xmx1g) so runs are comparable.
set -euo pipefail

if [[ $# -lt 3 ]]; then
    echo "usage: $0 DATA_DIR PORT CONTROLLER_PORT [key=value ...]" >&2
    exit 2
fi
dir="$1" port="$2" cport="$3"
shift 3
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
libs="$("$here/kafka-libs.sh")"
mkdir -p "$dir"
dir="$(cd "$dir" && pwd)"
props="$dir/server.properties"
cat >"$props" <<PROPS
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$cport
listeners=PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$cport
advertised.listeners=PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$cport
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
log.dirs=$dir/data
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
PROPS
for kv in "$@"; do echo "$kv" >>"$props"; done

heap="${KAFKA_HEAP:--Xmx1g}"
if [[ ! -f "$dir/data/meta.properties" ]]; then
    cluster_id="$(java -cp "$libs/*" kafka.tools.StorageTool random-uuid 2>/dev/null | tail -1)"
    java $heap -cp "$libs/*" kafka.tools.StorageTool format -t "$cluster_id" -c "$props" >&2
fi
exec java $heap -cp "$libs/*" kafka.Kafka "$props"
