#!/usr/bin/env bash
# A three-node cluster started from config/cluster/node-{1,2,3}.properties (every node broker and
# controller; only log.dirs moved to a temporary folder), seen through stock tools:
#
# - kcat -L (librdkafka) lists 3 brokers with their racks.
# - TopicCommand --create of 6 partitions at replication factor 3: --describe shows each
#   partition on 3 brokers in 3 racks, led by its first replica, and each broker the preferred
#   leader of 2.
# - MetadataQuorumCommand describe --status (by --bootstrap-server and --bootstrap-controller):
#   3 voters, a leader among them; describe --replication: a row per voter, one Leader.
# - BrokerApiVersionsCommand (the Java AdminClient's node list): 3 unfenced brokers.
# - Static group members (KIP-345), 2 and 3 of them joining at the same moment, with librdkafka
#   (integration/python/check_static_members.py) and the Java consumer
#   (integration/programs/StaticMembers.java): each is assigned, every partition once, and a restarted member gets
#   its partitions back without a rebalance (the files set group.initial.rebalance.delay.ms=0).
# - A topic on replicas 3,1,2 with 500 records, deleted while node 3 is stopped (SIGTERM), node 3
#   restarted and the topic created again on 3,1,2 (integration/programs/PartitionRecords.java,
#   kcat): one record produced lands at offset 0, and the Java consumer and kcat read only it.
# - kill -9 of the node leading the most partitions: TopicCommand --describe shows none led by it
#   and every partition led by another replica; restarted, kcat -L lists 3 brokers again.
#
# BROKER_UNDER_TEST=apache-kafka runs the same checks against a three-node Apache Kafka 4.1.1
# cluster from the same files (integration/apache-kafka-cluster.sh formats and starts it).
# Uses the fixed ports of those files (9092-9094, 19092-19094).
set -euo pipefail

root="${KAFKAIQ_ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}"
KAFKAIQ_BIN="${KAFKAIQ_BIN:-$root/target/release/kafkaiq}"
name=37-cluster-cli
libs="$("$root/integration/kafka-libs.sh")"
# shellcheck source=../lib/java-cds.sh
source "$root/integration/lib/java-cds.sh"
kafka_cds_opts "$libs"
# shellcheck source=../lib/python-clients.sh
source "$root/integration/lib/python-clients.sh"
python_clients
work="$(mktemp -d "${TMPDIR:-/tmp}/cluster-cli.XXXXXX")"
B=127.0.0.1:9092
T=org.apache.kafka.tools

if ! command -v kcat >/dev/null; then
    echo "$name: installing kcat" >&2
    if [[ $(id -u) == 0 ]]; then
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq kcat >&2
    else
        sudo -n env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq kcat >&2
    fi
fi

mkdir -p "$work/conf"
for n in 1 2 3; do
    sed "s|^log.dirs=.*|log.dirs=$work/node-$n/data|" "$root/config/cluster/node-$n.properties" \
        >"$work/conf/node-$n.properties"
done

declare -A pids=()
kafka_pid=""
stop_all() {
    local status=0 p
    if [[ -n "$kafka_pid" ]]; then
        kill -TERM "$kafka_pid" 2>/dev/null || true
        wait "$kafka_pid" 2>/dev/null || true
    fi
    for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
    for n in "${!pids[@]}"; do
        if ! wait "${pids[$n]}"; then
            echo "$name: node $n did not exit cleanly" >&2
            status=1
        fi
    done
    pids=()
    return $status
}
cleanup() {
    local status=$?
    stop_all || status=1
    if grep -l 'panicked' "$work"/node-*.log >/dev/null 2>&1; then
        echo "$name: a node panicked" >&2
        status=1
    fi
    rm -rf "$work"
    exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

fail() {
    echo "$name: FAIL: $*" >&2
    for f in "$work"/node-*.log; do
        [[ -e "$f" ]] && { echo "--- $f" >&2; tail -20 "$f" >&2; }
    done
    exit 1
}
step() { echo "$name: $*" >&2; }

run() {
    rc=0
    java "${CDS_OPTS[@]}" -Xmx256m -XX:TieredStopAtLevel=1 -cp "$libs/*" "$@" >"$work/out" 2>&1 || rc=$?
    grep -v '^SLF4J' "$work/out" >"$work/out.clean" || true
    mv "$work/out.clean" "$work/out"
}
ok() {
    run "$@"
    [[ $rc -eq 0 ]] || { cat "$work/out" >&2; fail "exit $rc: ${*:1:4}"; }
}

start_node() {
    local n=$1
    # The files alone, as Apache Kafka takes them: no KafkaIQ key (so no HTTP listener).
    RUST_LOG=info "$KAFKAIQ_BIN" --config "$work/conf/node-$n.properties" \
        >>"$work/node-$n.log" 2>&1 &
    pids[$n]=$!
}

# Polls a check (a shell function) until it succeeds, for at most $1 seconds.
wait_for() {
    local limit=$1 what=$2
    shift 2
    local deadline=$((SECONDS + limit))
    until "$@"; do
        ((SECONDS < deadline)) || fail "not within ${limit}s: $what"
        sleep 0.5
    done
}

brokers_listed() {
    kcat -L -b "$B" -m 5 >"$work/kcat" 2>/dev/null && grep -q '^ 3 brokers:' "$work/kcat"
}

if [[ "${BROKER_UNDER_TEST:-kafkaiq}" == apache-kafka ]]; then
    step "starting Apache Kafka 4.1.1 x3 from the same files"
    NODE_LOG_DIR="$work" bash "$root/integration/apache-kafka-cluster.sh" "$work/conf" >&2 &
    kafka_pid=$!
    wait_for 240 "three Apache Kafka nodes" brokers_listed
else
    for n in 1 2 3; do start_node "$n"; done
    wait_for 60 "three KafkaIQ nodes" brokers_listed
fi

step "kcat -L"
for n in 1 2 3; do
    grep -qE "broker $n at 127\.0\.0\.1:909$((n + 1))" "$work/kcat" ||
        { cat "$work/kcat" >&2; fail "kcat -L does not list broker $n"; }
done

step "BrokerApiVersionsCommand"
unfenced() {
    run $T.BrokerApiVersionsCommand --bootstrap-server "$B"
    [[ $rc -eq 0 && $(grep -c 'isFenced: false' "$work/out") == 3 ]]
}
wait_for 60 "3 unfenced brokers in BrokerApiVersionsCommand" unfenced
for n in 1 2 3; do
    grep -qE "\(id: $n rack: rack-$n isFenced: false\)" "$work/out" ||
        { cat "$work/out" >&2; fail "broker $n with rack-$n not listed"; }
done

step "MetadataQuorumCommand describe --status / --replication"
for flag in --bootstrap-server --bootstrap-controller; do
    if [[ $flag == --bootstrap-server ]]; then addr=$B; else addr=127.0.0.1:19092; fi
    ok $T.MetadataQuorumCommand "$flag" "$addr" describe --status
    voters="$(sed -n 's/^CurrentVoters:[[:space:]]*//p' "$work/out")"
    [[ $(grep -o '"id": *[0-9]' <<<"$voters" | wc -l) == 3 ]] ||
        { cat "$work/out" >&2; fail "$flag: CurrentVoters does not list 3 voters"; }
    leader="$(sed -n 's/^LeaderId:[[:space:]]*//p' "$work/out")"
    [[ $flag == --bootstrap-server ]] && grep -E '^(LeaderId|LeaderEpoch|HighWatermark|CurrentVoters)' "$work/out" >&2
    [[ "$leader" =~ ^[123]$ ]] || { cat "$work/out" >&2; fail "$flag: LeaderId '$leader'"; }
done
ok $T.MetadataQuorumCommand --bootstrap-server "$B" describe --replication
[[ $(grep -cE '^[123][[:space:]]' "$work/out") -ge 3 && $(grep -cw 'Leader' "$work/out") -ge 1 ]] ||
    { cat "$work/out" >&2; fail "describe --replication: a row per voter and a Leader"; }

step "TopicCommand: 6 partitions, replication factor 3"
ok $T.TopicCommand --bootstrap-server "$B" --create --topic placed --partitions 6 --replication-factor 3
describe_placed() {
    run $T.TopicCommand --bootstrap-server "$B" --describe --topic placed
    [[ $rc -eq 0 && $(grep -c 'Partition: ' "$work/out") == 6 ]]
}
wait_for 30 "6 partitions described" describe_placed
declare -A preferred=()
while read -r line; do
    leader="$(sed -n 's/.*Leader: \([-0-9]*\).*/\1/p' <<<"$line")"
    replicas="$(sed -n 's/.*Replicas: \([0-9,]*\).*/\1/p' <<<"$line")"
    IFS=, read -ra r <<<"$replicas"
    [[ ${#r[@]} == 3 && $(printf '%s\n' "${r[@]}" | sort -u | wc -l) == 3 ]] ||
        fail "not 3 distinct replicas (racks rack-1..3): $line"
    [[ "$leader" == "${r[0]}" ]] || fail "not led by its preferred replica: $line"
    preferred[${r[0]}]=$((${preferred[${r[0]}]:-0} + 1))
done < <(grep 'Partition: ' "$work/out")
grep 'Partition: ' "$work/out" >&2
for n in 1 2 3; do
    [[ ${preferred[$n]:-0} == 2 ]] || { cat "$work/out" >&2; fail "broker $n preferred leader of ${preferred[$n]:-0}, not 2"; }
done

step "static members: librdkafka and the Java consumer, 2 and 3 members"
ok $T.TopicCommand --bootstrap-server "$B" --create --topic static-java --partitions 6 --replication-factor 3
for n in 2 3; do
    timeout 120 "$python" "$root/integration/python/check_static_members.py" "$B" "$n" >&2 ||
        fail "librdkafka static members ($n)"
    run "$root/integration/programs/StaticMembers.java" "$B" static-java 6 "$n"
    cat "$work/out" >&2
    [[ $rc -eq 0 ]] || fail "Java static members ($n)"
done

if [[ "${BROKER_UNDER_TEST:-kafkaiq}" != apache-kafka ]]; then
    # A topic deleted while one of its replicas is down, then created again on the same
    # replicas: the returning node still has the old partition in its log dir, and must delete
    # it rather than serve it (Apache Kafka 4.1.1 serves only the new record, at offset 0).
    program=("$root/integration/programs/PartitionRecords.java")
    step "delete and create again while node 3 is down"
    started=$SECONDS
    ok $T.TopicCommand --bootstrap-server "$B" --create --topic recreated --replica-assignment 3:1:2
    led_by_3() {
        run $T.TopicCommand --bootstrap-server "$B" --describe --topic recreated
        [[ $rc -eq 0 ]] && grep -q 'Leader: 3.*Isr: [123],[123],[123]' "$work/out"
    }
    wait_for 30 "recreated-0 led by node 3 with 3 in sync" led_by_3
    seq 1 500 | sed 's/^/old-/' | kcat -P -b "$B" -t recreated -p 0 -X acks=all 2>"$work/kcat.err" ||
        { cat "$work/kcat.err" >&2; fail "kcat -P of 500 records"; }
    ok "${program[@]}" read "$B" recreated 30000
    [[ $(wc -l <"$work/out") == 500 ]] || { tail "$work/out" >&2; fail "500 records before the delete"; }
    kill -TERM "${pids[3]}"
    wait "${pids[3]}" || fail "node 3 did not exit cleanly on SIGTERM"
    unset "pids[3]"
    ok $T.TopicCommand --bootstrap-server "$B" --delete --topic recreated
    gone() {
        run $T.TopicCommand --bootstrap-server "$B" --list
        [[ $rc -eq 0 ]] && ! grep -qx recreated "$work/out"
    }
    wait_for 30 "recreated deleted" gone
    [[ -d "$work/node-3/data/recreated-0" ]] || fail "node 3 does not hold the deleted topic's log"
    start_node 3
    wait_for 60 "node 3 back and unfenced" unfenced
    ok $T.TopicCommand --bootstrap-server "$B" --create --topic recreated --replica-assignment 3:1:2
    wait_for 30 "the new recreated-0 led by node 3 with 3 in sync" led_by_3
    ok "${program[@]}" produce "$B" recreated new
    [[ "$(cat "$work/out")" == "offset 0" ]] || { cat "$work/out" >&2; fail "the new record not at offset 0"; }
    ok "${program[@]}" read "$B" recreated 30000
    [[ "$(cat "$work/out")" == "0 new" ]] ||
        { head -3 "$work/out" >&2; fail "Java consumer: not only the new record at offset 0"; }
    timeout 60 kcat -C -b "$B" -t recreated -o beginning -e -q -f '%o %s\n' >"$work/kcat" 2>"$work/kcat.err" ||
        { cat "$work/kcat.err" >&2; fail "kcat -C of recreated"; }
    [[ "$(cat "$work/kcat")" == "0 new" ]] ||
        { head -3 "$work/kcat" >&2; fail "kcat: not only the new record at offset 0"; }
    step "created again: the Java consumer and kcat read only the new record ($((SECONDS - started)) s)"
fi

if [[ "${BROKER_UNDER_TEST:-kafkaiq}" != apache-kafka ]]; then
    # The Apache Kafka nodes are children of apache-kafka-cluster.sh; this part kills a
    # KafkaIQ node, which the failover cargo test does for both brokers.
    victim=1
    step "kill -9 of node $victim"
    kill -KILL "${pids[$victim]}"
    wait "${pids[$victim]}" 2>/dev/null || true
    unset "pids[$victim]"
    B=127.0.0.1:9093
    moved() {
        run $T.TopicCommand --bootstrap-server "$B" --describe --topic placed
        [[ $rc -eq 0 && $(grep -c 'Partition: ' "$work/out") == 6 ]] || return 1
        ! grep -q "Leader: $victim\b" "$work/out" && ! grep -q 'Leader: -1\|Leader: none' "$work/out"
    }
    wait_for 30 "every partition led by another replica after the kill" moved
    grep 'Partition: ' "$work/out" >&2
    start_node "$victim"
    B=127.0.0.1:9092
    wait_for 60 "node $victim back in kcat -L" brokers_listed
fi

step "ok"
