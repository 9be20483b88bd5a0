#!/usr/bin/env bash
# Consumer group rebalance times, KafkaIQ beside Apache Kafka 4.1.1 in one run: for each setup a
# fresh single node on free ports, then benches/compare/GroupRebalance.java (Java client 4.1.1)
# times joins and leaves of a 10-member group on a 60-partition topic, and (where marked) the
# rolling restart of the members under a 20,000 records/s producer.
#
#   benches/compare/rebalance.sh [--kafkaiq-bin PATH] [--rounds N] [--protocol consumer|classic]
#
# Setups: KafkaIQ with its defaults, KafkaIQ with Kafka's 5 s heartbeat interval and no shorter
# interval while a member reconciles (Kafka's behaviour, to separate the two), and Apache Kafka
# with its defaults. Prints each setup's REBALANCE / STEADY / ROLLING lines (see
# GroupRebalance.java) and a Markdown table at the end. Takes about 7 minutes.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
bin="$root/target/release/kafkaiq"
rounds=5
protocol=consumer
while [[ $# -gt 0 ]]; do
    case "$1" in
        --kafkaiq-bin) bin="$(cd "$(dirname "$2")" && pwd)/$(basename "$2")"; shift 2 ;;
        --rounds) rounds="$2"; shift 2 ;;
        --protocol) protocol="$2"; shift 2 ;;
        *) echo "rebalance.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done
[[ -x "$bin" ]] || { echo "rebalance.sh: no broker binary at $bin" >&2; exit 1; }
libs="$("$root/integration/kafka-libs.sh")"
work="$(mktemp -d "${TMPDIR:-/tmp}/kafkaiq-rebalance.XXXXXX")"
echo "==> work dir $work" >&2

free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}
broker_pid=""
stop_broker() {
    if [[ -n "$broker_pid" ]]; then
        kill -TERM "$broker_pid" 2>/dev/null || true
        for _ in $(seq 1 300); do kill -0 "$broker_pid" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$broker_pid" 2>/dev/null || true
        wait "$broker_pid" 2>/dev/null || true
        broker_pid=""
    fi
}
trap stop_broker EXIT
wait_port() {
    local port="$1"
    for _ in $(seq 1 600); do
        if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then return 0; fi
        kill -0 "$broker_pid" 2>/dev/null || { echo "rebalance.sh: the broker exited" >&2; return 1; }
        sleep 0.1
    done
    echo "rebalance.sh: nothing listens on $port" >&2
    return 1
}

# run_setup <name> <broker: kafkaiq|kafka> <rolling: 0|1> [key=value ...]
rows=()
run_setup() {
    local name="$1" kind="$2" rolling="$3"
    shift 3
    local port cport dir="$work/$name"
    port="$(free_port)"
    cport="$(free_port)"
    mkdir -p "$dir"
    if [[ "$kind" == kafka ]]; then
        "$root/integration/apache-kafka.sh" "$dir" "$port" "$cport" "$@" >"$dir/broker.log" 2>&1 &
    else
        local args=(--override "listeners=PLAINTEXT://127.0.0.1:$port" --override "log.dirs=$dir/data"
            --override "http.listener=none")
        for kv in "$@"; do args+=(--override "$kv"); done
        "$bin" "${args[@]}" >"$dir/broker.log" 2>&1 &
    fi
    broker_pid=$!
    wait_port "$port"
    echo "==> $name (127.0.0.1:$port)" >&2
    local out="$dir/out.txt"
    java -cp "$libs/*" "$root/benches/compare/GroupRebalance.java" "127.0.0.1:$port" rb-t 60 10 \
        "$rounds" "$protocol" | tee "$out" >&2
    local reb steady roll
    reb="$(awk '/^REBALANCE/ { print $2 " | " $3 " | " $4 " | " $5 }' "$out")"
    if [[ "$rolling" == 1 ]]; then
        java -cp "$libs/*" "$root/benches/compare/GroupRebalance.java" "127.0.0.1:$port" rb-roll 60 \
            10 1 "$protocol" 20000 | tee "$dir/roll.txt" >&2
        steady="$(awk '/^STEADY/ { printf "%.0f | %s / %s", $3, $4, $5 }' "$dir/roll.txt")"
        roll="$(awk '/^ROLLING/ { printf "%s s | %.0f | %s / %s", $2, $3, $4, $5 }' "$dir/roll.txt")"
    else
        steady="–"
        roll="– | – | –"
    fi
    rows+=("| $name | $reb | $steady | $roll |")
    stop_broker
}

run_setup "KafkaIQ (defaults)" kafkaiq 1
run_setup "KafkaIQ (Kafka's 5 s interval throughout)" kafkaiq 0 \
    group.consumer.heartbeat.interval.ms=5000 \
    kafkaiq.group.consumer.reconciling.heartbeat.interval.ms=5000
run_setup "Apache Kafka 4.1.1 (defaults)" kafka 1

echo
echo "Protocol: $protocol; $rounds rounds; times in ms (p50 | max)."
echo
echo "| Setup | join p50 | join max | leave p50 | leave max | steady rec/s | steady p99 / max | rolling restart | rolling rec/s | rolling p99 / max |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
printf '%s\n' "${rows[@]}"
