#!/usr/bin/env bash
# Consumer groups with stock tools against the broker:
#
# - kcat -G (librdkafka's balanced consumer): two members share a topic, every record produced
#   while both are in the group is read exactly once, and a later member of the same group resumes
#   from the committed offsets (reads only what is new).
# - Kafka 4.1.1's CLI: ConsumerGroupCommand --list / --describe (lag 0 after consuming) /
#   --reset-offsets --to-earliest --execute / --delete; ConsoleConsumer --group; and
#   ConsumerPerformance completes.
#
# Broker selection as in integration/lib/broker.sh (BROKER_UNDER_TEST=apache-kafka checks the
# suite itself against Apache Kafka).
set -euo pipefail

root="${KAFKAIQ_ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}"
KAFKAIQ_BIN="${KAFKAIQ_BIN:-$root/target/release/kafkaiq}"
# shellcheck source=../lib/broker.sh
source "$root/integration/lib/broker.sh"

TOPIC=groups-kcat
PARTITIONS=4
FIRST=1000
SECOND=100
GROUP=kcat-group
# Records on the topic once both rounds are in: FIRST, one marker per partition, SECOND.
TOTAL=$((FIRST + PARTITIONS + SECOND))

if ! command -v kcat >/dev/null; then
    echo "40-groups: installing kcat" >&2
    if [[ $(id -u) -eq 0 ]]; then
        DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq kcat >&2
    else
        sudo -n env DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
        sudo -n env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq kcat >&2
    fi
fi
libs="$("$root/integration/kafka-libs.sh")"

work="$(mktemp -d "${TMPDIR:-/tmp}/groups-suite.XXXXXX")"
members=()
cleanup() {
    local status=$?
    local pid
    for pid in "${members[@]}"; do
        kill "$pid" 2>/dev/null || true
    done
    broker_stop || status=1
    rm -rf "$work"
    exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

fail() {
    echo "40-groups: FAIL: $*" >&2
    broker_log_tail 60
    exit 1
}
step() { echo "40-groups: $*" >&2; }

CGC=org.apache.kafka.tools.consumer.group.ConsumerGroupCommand
# A Kafka tool's main class on Apache Kafka's jars.
tool() {
    java -Xmx512m -cp "$libs/*" "$@"
}

# Waits (up to $1 seconds) until the command in the remaining arguments succeeds.
wait_for() {
    local limit=$1
    shift
    local deadline=$((SECONDS + limit))
    until "$@"; do
        ((SECONDS < deadline)) || return 1
        sleep 0.5
    done
}

# The initial rebalance delay only slows a test down; both brokers get the same settings.
broker_start "num.partitions=$PARTITIONS" "auto.create.topics.enable=true" \
    "group.initial.rebalance.delay.ms=0" "offsets.topic.num.partitions=10"
B="$BROKER_BOOTSTRAP"
wait_for 60 kcat -b "$B" -L -m 5 >/dev/null 2>&1 || fail "kcat -L never answered"
kcat -b "$B" -L -t "$TOPIC" -m 10 >/dev/null 2>&1 # auto-creates the topic
wait_for 30 bash -c "kcat -b '$B' -L -t '$TOPIC' -m 5 2>/dev/null | grep -q 'with $PARTITIONS partitions'" ||
    fail "topic $TOPIC was not created with $PARTITIONS partitions"

# ---- kcat -G: two members share the topic --------------------------------------------------
assigned_count() { # partitions in the last assignment a member logged
    grep -a 'rebalanced' "$1" 2>/dev/null | tail -1 | grep -o "$TOPIC \[[0-9]*\]" | wc -l
}
for m in 1 2; do
    kcat -b "$B" -G "$GROUP" -X auto.offset.reset=earliest -X topic.auto.offset.reset=earliest \
        -u -f '%s\n' "$TOPIC" >"$work/member$m.out" 2>"$work/member$m.err" &
    members+=($!)
done
# kcat logs every rebalance as "% Group G rebalanced (memberid M): assigned: T [0], T [1]" (or
# "revoked: ..."); both members' latest line must be an assignment of 2 partitions.
two_each() {
    local m last
    for m in 1 2; do
        last="$(grep -a 'rebalanced' "$work/member$m.err" | tail -1)"
        [[ "$last" == *"assigned:"* ]] || return 1
        [[ $(grep -o "$TOPIC \[" <<<"$last" | wc -l) -eq 2 ]] || return 1
    done
}
wait_for 60 two_each ||
    { cat "$work"/member*.err >&2; fail "two kcat members did not get 2 of $PARTITIONS partitions each"; }
step "kcat -G: two members own $(assigned_count "$work/member1.err") + $(assigned_count "$work/member2.err") partitions"

# Keyed, so the default partitioner spreads them (keyless records stick to one partition per
# batch in librdkafka, and one member could then own all of them).
seq 1 "$FIRST" | awk '{ print $1 ":" $1 }' | kcat -b "$B" -P -K: -t "$TOPIC" ||
    fail "producing $FIRST records"
wait_for 60 bash -c "[[ \$(cat '$work/member1.out' '$work/member2.out' | wc -l) -ge $FIRST ]]" ||
    fail "the members read $(cat "$work"/member*.out | wc -l) of $FIRST records"
# A marker after the records on every partition: partitions are read in offset order, so once
# the members have read every marker, a record read twice would have shown up.
for ((p = 0; p < PARTITIONS; p++)); do
    echo "marker-$p" | kcat -b "$B" -P -t "$TOPIC" -p "$p" || fail "producing marker $p"
done
wait_for 60 bash -c "[[ \$(cat '$work/member1.out' '$work/member2.out' | grep '^marker-' | sort -u | wc -l) -eq $PARTITIONS ]]" ||
    fail "the members did not read the $PARTITIONS markers"
# Auto-commit (every 5 s) stores what they read: wait until the group's committed offsets are
# the log end offsets on every partition (ConsumerGroupCommand's view), then stop them.
committed_at_end() {
    tool "$CGC" --bootstrap-server "$B" --describe --group "$GROUP" >"$work/committed" 2>/dev/null || return 1
    # GROUP TOPIC PARTITION CURRENT-OFFSET LOG-END-OFFSET LAG ...
    [[ $(awk -v t="$TOPIC" '$2 == t && $4 == $5 && $6 == 0' "$work/committed" | wc -l) -eq $PARTITIONS ]]
}
wait_for 90 committed_at_end || { cat "$work/committed" >&2; fail "the members' offsets were never committed"; }
for pid in "${members[@]}"; do
    kill -TERM "$pid"
    wait "$pid" 2>/dev/null || true
done
members=()
total=$(cat "$work/member1.out" "$work/member2.out" | grep -vc '^marker-' || true)
distinct=$(cat "$work/member1.out" "$work/member2.out" | grep -v '^marker-' | sort -u | wc -l)
[[ $total -eq $FIRST && $distinct -eq $FIRST ]] ||
    fail "expected $FIRST distinct records read once, got $total lines, $distinct distinct"
read1=$(grep -vc '^marker-' "$work/member1.out" || true)
read2=$(grep -vc '^marker-' "$work/member2.out" || true)
[[ $read1 -gt 0 && $read2 -gt 0 ]] ||
    { cat "$work"/member*.err >&2; fail "one member read nothing"; }
step "kcat -G: $FIRST records read exactly once across two members ($read1 + $read2)"

seq $((FIRST + 1)) $((FIRST + SECOND)) | awk '{ print $1 ":" $1 }' | kcat -b "$B" -P -K: -t "$TOPIC" ||
    fail "producing $SECOND more"
timeout 60 kcat -b "$B" -G "$GROUP" -X auto.offset.reset=earliest -e -f '%s\n' "$TOPIC" \
    >"$work/resume.out" 2>"$work/resume.err" || { cat "$work/resume.err" >&2; fail "resuming member"; }
expected="$(seq $((FIRST + 1)) $((FIRST + SECOND)) | sort)"
[[ "$(sort "$work/resume.out")" == "$expected" ]] ||
    fail "resumed member read $(wc -l <"$work/resume.out") records, not exactly the $SECOND new ones"
step "kcat -G: a new member resumed from the committed offsets ($SECOND new records only)"

# ---- ConsumerGroupCommand ----------------------------------------------------------------
tool "$CGC" --bootstrap-server "$B" --list >"$work/list" 2>"$work/list.err" ||
    { cat "$work/list.err" >&2; fail "--list"; }
grep -qx "$GROUP" "$work/list" || { cat "$work/list" >&2; fail "--list does not show $GROUP"; }

tool "$CGC" --bootstrap-server "$B" --describe --group "$GROUP" >"$work/describe" 2>"$work/describe.err" ||
    { cat "$work/describe.err" "$work/describe" >&2; fail "--describe"; }
# GROUP TOPIC PARTITION CURRENT-OFFSET LOG-END-OFFSET LAG CONSUMER-ID HOST CLIENT-ID
rows=$(awk -v t="$TOPIC" '$2 == t' "$work/describe" | wc -l)
lagging=$(awk -v t="$TOPIC" '$2 == t && ($4 != $5 || $6 != 0)' "$work/describe" | wc -l)
committed=$(awk -v t="$TOPIC" '$2 == t { s += $4 } END { print s + 0 }' "$work/describe")
[[ $rows -eq $PARTITIONS && $lagging -eq 0 && $committed -eq $TOTAL ]] ||
    { cat "$work/describe" >&2; fail "--describe: expected $PARTITIONS partitions at lag 0 summing to $TOTAL"; }
step "ConsumerGroupCommand --list and --describe: $PARTITIONS partitions, lag 0"

tool "$CGC" --bootstrap-server "$B" --reset-offsets --to-earliest --execute --group "$GROUP" \
    --topic "$TOPIC" >"$work/reset" 2>"$work/reset.err" || { cat "$work/reset.err" "$work/reset" >&2; fail "--reset-offsets"; }
timeout 60 kcat -b "$B" -G "$GROUP" -e -f '%s\n' "$TOPIC" >"$work/reread.out" 2>"$work/reread.err" ||
    { cat "$work/reread.err" >&2; fail "reading after reset"; }
[[ $(sort -u "$work/reread.out" | wc -l) -eq $TOTAL ]] ||
    fail "after --reset-offsets --to-earliest the group read $(wc -l <"$work/reread.out") records, not $TOTAL"
step "ConsumerGroupCommand --reset-offsets --to-earliest --execute: the group reads everything again"

# ---- ConsoleConsumer --group ---------------------------------------------------------------
timeout 120 java -Xmx512m -cp "$libs/*" org.apache.kafka.tools.consumer.ConsoleConsumer \
    --bootstrap-server "$B" --topic "$TOPIC" --group console-group --from-beginning \
    --max-messages $TOTAL --timeout-ms 60000 >"$work/console.out" 2>"$work/console.err" ||
    { tail -20 "$work/console.err" >&2; fail "ConsoleConsumer --group"; }
[[ $(sort -u "$work/console.out" | wc -l) -eq $TOTAL ]] ||
    fail "ConsoleConsumer read $(wc -l <"$work/console.out") records"
tool "$CGC" --bootstrap-server "$B" --describe --group console-group >"$work/describe2" 2>/dev/null ||
    fail "--describe console-group"
committed=$(awk -v t="$TOPIC" '$2 == t { s += $4 } END { print s + 0 }' "$work/describe2")
[[ $committed -eq $TOTAL ]] ||
    { cat "$work/describe2" >&2; fail "ConsoleConsumer committed $committed, not $TOTAL"; }
step "ConsoleConsumer --group read $TOTAL records and committed them"

# ---- ConsumerPerformance -----------------------------------------------------------------
timeout 180 java -Xmx512m -cp "$libs/*" org.apache.kafka.tools.ConsumerPerformance \
    --bootstrap-server "$B" --topic "$TOPIC" --messages $TOTAL --group perf-group \
    --timeout 60000 >"$work/perf.out" 2>"$work/perf.err" ||
    { tail -20 "$work/perf.err" "$work/perf.out" >&2; fail "ConsumerPerformance"; }
# start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, ...
perf_msgs=$(awk -F', *' 'NR > 1 && NF >= 6 { print $5 }' "$work/perf.out" | tail -1)
[[ "$perf_msgs" == $TOTAL ]] || { cat "$work/perf.out" >&2; fail "ConsumerPerformance consumed '$perf_msgs'"; }
step "ConsumerPerformance: $(tail -1 "$work/perf.out")"

# ---- --delete ------------------------------------------------------------------------------
tool "$CGC" --bootstrap-server "$B" --delete --group "$GROUP" >"$work/delete" 2>"$work/delete.err" ||
    { cat "$work/delete.err" "$work/delete" >&2; fail "--delete"; }
grep -q "successful" "$work/delete" || { cat "$work/delete" >&2; fail "--delete did not succeed"; }
tool "$CGC" --bootstrap-server "$B" --list >"$work/list2" 2>/dev/null || fail "--list after delete"
if grep -qx "$GROUP" "$work/list2"; then
    fail "$GROUP is still listed after --delete"
fi
grep -qx console-group "$work/list2" || fail "--list lost console-group"
step "ConsumerGroupCommand --delete removed $GROUP"

# ---- Kafka's own decoder reads __consumer_offsets ------------------------------------------
# Only KafkaIQ's data dir layout is known here; Apache Kafka writes these records itself.
checks=7
if [[ "$BROKER_KIND" == kafkaiq ]]; then
    kept="$BROKER_DIR"
    KEEP_BROKER_DIR=1 broker_stop || fail "the broker misbehaved (above)"
    trap 'status=$?; rm -rf "$kept"; (exit "$status"); cleanup' EXIT
    : >"$work/dump"
    for seg in "$kept"/data/__consumer_offsets-*/*.log; do
        [[ -s "$seg" ]] || continue
        java -Xmx512m -cp "$libs/*" kafka.tools.DumpLogSegments --files "$seg" \
            --offsets-decoder --print-data-log >>"$work/dump" 2>&1 || fail "DumpLogSegments $seg"
    done
    if grep -Eq 'isvalid: false|Exception|Could not|unknown' "$work/dump"; then
        grep -E 'isvalid: false|Exception|Could not|unknown' "$work/dump" | head >&2
        fail "DumpLogSegments --offsets-decoder found bad records"
    fi
    grep -q '"type":"1","data":{"group":"console-group","topic":"'"$TOPIC"'"' "$work/dump" ||
        fail "no offset commit record of console-group decoded"
    grep -q '"type":"2","data":{"group":"console-group"}} payload: {"version":"3","data":{"protocolType":"consumer"' "$work/dump" ||
        fail "no group metadata record of console-group decoded"
    grep -q '"type":"2","data":{"group":"'"$GROUP"'"}} payload: <DELETE>' "$work/dump" ||
        fail "no group tombstone for the deleted $GROUP"
    step "DumpLogSegments --offsets-decoder reads every __consumer_offsets record ($(grep -c '| offset:' "$work/dump") records)"
    checks=8
fi
echo "40-groups: $checks passed, 0 failed"
