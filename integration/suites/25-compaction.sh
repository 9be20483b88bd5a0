#!/usr/bin/env bash
# Log compaction as kcat (librdkafka) sees it, in the style of Kafka's LogCompactionTester.
#
# For each codec (none, gzip, snappy, lz4, zstd) a compacted topic (`segment.bytes=1048576`,
# `min.cleanable.dirty.ratio=0.01`, `delete.retention.ms=1000`, `segment.ms=1000`) receives
# 200,000 records over keys k0..k9, the last one a tombstone for k9. While a tick record is
# written each second (it rolls the active segment, so everything before it becomes
# cleanable), the topic is read from the beginning until exactly one record is left for each of
# k0..k8, holding the last value produced for it at the offset it was produced at, and k9 is
# gone (its tombstone outlived delete.retention.ms and a later cleaning removed it). A reader
# that starts at an offset the cleaner removed continues at the next record kept.
#
# Then `cleanup.policy` is changed from delete to compact with Kafka's ConfigCommand on a topic
# already holding 20,000 records: the change takes effect without a restart (the topic is
# compacted the same way). Last, Kafka 4.1.1's DumpLogSegments reads every segment the broker
# cleaned, and KafkaIQ's /metrics shows the cleanings.
# Broker selection as in integration/lib/broker.sh (BROKER_UNDER_TEST, KAFKA_BOOTSTRAP).
set -euo pipefail

root="${KAFKAIQ_ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}"
KAFKAIQ_BIN="${KAFKAIQ_BIN:-$root/target/release/kafkaiq}"
# shellcheck source=../lib/broker.sh
source "$root/integration/lib/broker.sh"

RECORDS=200000
KEYS=10
CODECS=(none gzip snappy lz4 zstd)
# How long one topic may take to be compacted (each tick is one second).
COMPACT_DEADLINE_S=90

command -v kcat >/dev/null || {
    echo "25-compaction: kcat is missing (10-kcat installs it)" >&2
    exit 1
}
libs="$("$root/integration/kafka-libs.sh")"

work="$(mktemp -d "${TMPDIR:-/tmp}/compaction-suite.XXXXXX")"
cleanup() {
    local status=$?
    broker_stop || status=1
    rm -rf "$work"
    exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

fail() {
    echo "25-compaction: FAIL: $*" >&2
    broker_log_tail
    exit 1
}

kafka_tool() {
    java -Xmx256m -XX:TieredStopAtLevel=1 -cp "$libs/*" "$@"
}

broker_start "log.cleaner.backoff.ms=200" "auto.create.topics.enable=false"
B="$BROKER_BOOTSTRAP"
deadline=$((SECONDS + 60))
until kcat -b "$B" -L -m 5 >"$work/L0" 2>&1 && grep -q ' at 127.0.0.1:' "$work/L0"; do
    ((SECONDS < deadline)) || { cat "$work/L0" >&2; fail "kcat -L never listed a broker"; }
    sleep 0.5
done

compact_configs=(--config cleanup.policy=compact --config segment.bytes=1048576
    --config min.cleanable.dirty.ratio=0.01 --config delete.retention.ms=1000
    --config segment.ms=1000)

create_topic() {
    local topic=$1
    shift
    kafka_tool org.apache.kafka.tools.TopicCommand --bootstrap-server "$B" --create \
        --topic "$topic" --partitions 1 --replication-factor 1 "$@" >"$work/create.out" 2>&1 ||
        { cat "$work/create.out" >&2; fail "TopicCommand --create $topic"; }
}

# produce_keyed TOPIC CODEC FIRST COUNT: records FIRST..FIRST+COUNT-1, record i keyed k(i % KEYS)
# with value "v-i-<padding>"; with FIRST=0 and a tombstone for the last key after them.
produce_keyed() {
    local topic=$1 codec=$2 first=$3 count=$4
    awk -v first="$first" -v n="$count" -v keys="$KEYS" -v tomb="$5" 'BEGIN {
        for (i = first; i < first + n; i++) printf "k%d:v-%d-%s\n", i % keys, i, substr("abcdefghijklmnopqrstuvwxyz0123456789", 1 + i % 17)
        if (tomb) printf "k%d:\n", keys - 1
    }' >"$work/$topic.in"
    kcat -b "$B" -P -t "$topic" -p 0 -z "$codec" -K: -Z -l "$work/$topic.in" \
        -X message.timeout.ms=60000 2>"$work/$topic.produce.err" ||
        { cat "$work/$topic.produce.err" >&2; fail "kcat -P to $topic ($codec)"; }
}

# expected_latest TOPIC: "key offset value" of each key's last record in TOPIC.in (offset = line
# number - 1: one partition, written once), tombstones included with value NULL.
expected_latest() {
    awk -F: '{ k = $1; v = substr($0, length(k) + 2); last[k] = (NR - 1) " " (v == "" ? "NULL" : v) }
        END { for (k in last) print k, last[k] }' "$work/$1.in" | sort
}

# wait_compacted TOPIC KEPT: writes a tick each second until the records other than ticks read
# from the beginning are exactly the lines of file KEPT ("key offset value", sorted).
wait_compacted() {
    local topic=$1 kept=$2 tick=0 start=$SECONDS
    while :; do
        timeout 60 kcat -b "$B" -C -t "$topic" -p 0 -o beginning -e -q -f '%k %o %S %s\n' \
            >"$work/$topic.read" 2>"$work/$topic.read.err" ||
            { cat "$work/$topic.read.err" >&2; fail "kcat -C of $topic"; }
        # %S is -1 for a null value (a tombstone).
        awk '$1 != "tick" { print $1, $2, ($3 == -1 ? "NULL" : $4) }' "$work/$topic.read" |
            sort >"$work/$topic.got"
        if cmp -s "$work/$topic.got" "$kept"; then
            echo "25-compaction: $topic compacted to $(wc -l <"$kept") records after $tick ticks ($((SECONDS - start)) s); $(wc -l <"$work/$topic.read") read in all" >&2
            return 0
        fi
        if ((SECONDS - start > COMPACT_DEADLINE_S)); then
            echo "expected:" >&2
            head -12 "$kept" >&2
            echo "read ($(wc -l <"$work/$topic.got") records besides ticks):" >&2
            head -12 "$work/$topic.got" >&2
            fail "$topic not compacted within $COMPACT_DEADLINE_S s"
        fi
        tick=$((tick + 1))
        echo "tick:$tick" | kcat -b "$B" -P -t "$topic" -p 0 -K: 2>/dev/null ||
            fail "kcat -P of a tick to $topic"
        sleep 1
    done
}

for codec in "${CODECS[@]}"; do
    topic="compact-$codec"
    create_topic "$topic" "${compact_configs[@]}"
    produce_keyed "$topic" "$codec" 0 "$RECORDS" 1
    # Every key but the deleted one keeps its last value; the deleted key goes entirely.
    expected_latest "$topic" | awk '$3 != "NULL"' >"$work/$topic.kept"
    [[ "$(wc -l <"$work/$topic.kept")" -eq $((KEYS - 1)) ]] || fail "test data: $(wc -l <"$work/$topic.kept") keys"
    wait_compacted "$topic" "$work/$topic.kept"
done

# A reader positioned inside a removed range continues at the next offset kept.
topic=compact-none
first_kept="$(awk '$1 != "tick" && $2 >= 1000 { print $2; exit }' \
    <(sort -k2,2n "$work/$topic.read"))"
got="$(timeout 30 kcat -b "$B" -C -t "$topic" -p 0 -o 1000 -c 1 -q -f '%o\n' 2>"$work/seek.err")" ||
    { cat "$work/seek.err" >&2; fail "kcat -C -o 1000 of $topic"; }
[[ "$got" == "$first_kept" ]] ||
    fail "a read from offset 1000 (removed) began at $got; the next offset kept is $first_kept"
echo "25-compaction: a read from removed offset 1000 continues at $got" >&2

# cleanup.policy changed from delete to compact while the broker runs.
topic=altered-policy
create_topic "$topic" --config cleanup.policy=delete --config segment.bytes=1048576 \
    --config segment.ms=1000
produce_keyed "$topic" lz4 0 20000 0
kafka_tool kafka.admin.ConfigCommand --bootstrap-server "$B" --alter \
    --entity-type topics --entity-name "$topic" \
    --add-config "cleanup.policy=compact,min.cleanable.dirty.ratio=0.01,delete.retention.ms=1000" \
    >"$work/alter.out" 2>&1 || { cat "$work/alter.out" >&2; fail "ConfigCommand --alter $topic"; }
expected_latest "$topic" >"$work/$topic.kept"
wait_compacted "$topic" "$work/$topic.kept"
echo "25-compaction: cleanup.policy delete -> compact took effect without a restart" >&2

# Kafka's own DumpLogSegments over every segment the broker cleaned.
if [[ "$BROKER_KIND" != external ]]; then
    error_pattern='isvalid: false|invalid bytes|Mismatches in|Index offset:|timestamp mismatch|out of order timestamp|not found in the log|exception|corrupt|error'
    mapfile -t logs < <(find "$BROKER_DIR" -path '*compact-*-0/*.log' -o -path '*altered-policy-0/*.log' | sort)
    ((${#logs[@]} >= ${#CODECS[@]})) || fail "found ${#logs[@]} segment files of the compacted topics"
    kafka_tool kafka.tools.DumpLogSegments --deep-iteration --files "$(
        IFS=,
        echo "${logs[*]}"
    )" >"$work/dls.out" 2>&1 || { tail -20 "$work/dls.out" >&2; fail "DumpLogSegments exited non-zero"; }
    if grep -Eiq "$error_pattern" "$work/dls.out"; then
        grep -Ei "$error_pattern" "$work/dls.out" | head -10 >&2
        fail "DumpLogSegments reported problems in the cleaned segments"
    fi
    batches="$(grep -c 'baseOffset' "$work/dls.out" || true)"
    ((batches > 0)) || fail "DumpLogSegments printed no batch"
    echo "25-compaction: DumpLogSegments read ${#logs[@]} segments of the compacted topics ($batches batches), no error" >&2
fi

if [[ "$BROKER_KIND" == kafkaiq ]]; then
    curl -sf "http://127.0.0.1:$BROKER_HTTP_PORT/metrics" >"$work/metrics" || fail "GET /metrics"
    cleanings="$(awk '$1 == "kafkaiq_log_cleaner_cleanings" { print $2 }' "$work/metrics")"
    ((${cleanings:-0} >= ${#CODECS[@]})) || fail "kafkaiq_log_cleaner_cleanings is '${cleanings:-}'"
    for gauge in kafka_log_logcleaner_max_dirty_percent kafka_log_logcleaner_cleaner_recopy_percent \
        kafka_log_logcleaner_max_clean_time_secs kafka_log_logcleanermanager_uncleanable_partitions_count; do
        grep -q "^$gauge " "$work/metrics" || fail "/metrics lacks $gauge"
    done
    grep -q '^kafka_log_logcleanermanager_uncleanable_partitions_count 0$' "$work/metrics" ||
        fail "a partition became uncleanable"
    grep -q 'log cleaner pass.*mb_per_sec_read' "$BROKER_DIR/broker.log" ||
        fail "no per-pass cleaner line with MB/s in the broker's log"
    echo "25-compaction: /metrics shows $cleanings cleanings, no uncleanable partition" >&2
fi
echo "25-compaction: ok ($BROKER_KIND)" >&2
