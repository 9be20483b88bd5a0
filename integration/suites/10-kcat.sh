#!/usr/bin/env bash
# kcat (Debian's, linked to librdkafka 2.0.2) against the broker: `kcat -L` shows the broker and
# the topics, and for each compression codec 100,000 distinct keyed messages produced with
# `-z CODEC` are consumed back (`-C -e -o beginning`) as exactly the same multiset.
#
# Old librdkafka enables MsgVer2, zstd, lz4, idempotence and offsets-for-times only when the
# broker advertises particular exact versions (see shared client-compat notes), so this suite
# also checks that the broker's ApiVersions ranges suit old clients. Last, a topic deleted
# (TopicCommand), the broker restarted and the topic created again by kcat's producer: kcat reads
# only the new record, at offset 0.
# Broker selection as in integration/lib/broker.sh (BROKER_UNDER_TEST, KAFKA_BOOTSTRAP).
set -euo pipefail

root="${KAFKAIQ_ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}"
KAFKAIQ_BIN="${KAFKAIQ_BIN:-$root/target/release/kafkaiq}"
# shellcheck source=../lib/broker.sh
source "$root/integration/lib/broker.sh"

MESSAGES=100000
PARTITIONS=3
CODECS=(none gzip snappy lz4 zstd)

if ! command -v kcat >/dev/null; then
    echo "10-kcat: installing kcat" >&2
    if [[ $(id -u) -eq 0 ]]; then
        DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq kcat >&2
    else
        sudo -n env DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
        sudo -n env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq kcat >&2
    fi
fi
echo "10-kcat: $(kcat -V 2>&1 | grep -i 'librdkafka' | head -1)" >&2

work="$(mktemp -d "${TMPDIR:-/tmp}/kcat-suite.XXXXXX")"
cleanup() {
    local status=$?
    broker_stop || status=1
    rm -rf "$work"
    exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

fail() {
    echo "10-kcat: FAIL: $*" >&2
    broker_log_tail
    exit 1
}

broker_start "num.partitions=$PARTITIONS" "auto.create.topics.enable=true"
B="$BROKER_BOOTSTRAP"

# Listening is not serving yet (Apache Kafka loads its metadata after binding): wait for -L.
deadline=$((SECONDS + 60))
until kcat -b "$B" -L -m 5 >"$work/L0" 2>&1 && grep -q ' at 127.0.0.1:' "$work/L0"; do
    ((SECONDS < deadline)) || { cat "$work/L0" >&2; fail "kcat -L never listed a broker"; }
    sleep 0.5
done

kcat -b "$B" -L -m 10 >"$work/L0" 2>&1 || { cat "$work/L0" >&2; fail "kcat -L"; }
grep -Eq '^ 1 brokers:$' "$work/L0" || { cat "$work/L0" >&2; fail "kcat -L: not one broker"; }
grep -Eq "^  broker [0-9]+ at ${B}( \(controller\))?$" "$work/L0" ||
    { cat "$work/L0" >&2; fail "kcat -L does not show the broker at $B"; }
echo "10-kcat: kcat -L shows the broker at $B" >&2

for codec in "${CODECS[@]}"; do
    topic="kcat-$codec"
    start=$SECONDS
    # Distinct keys and values; values vary in length and content so each codec has work to do.
    awk -v n="$MESSAGES" -v c="$codec" 'BEGIN {
        for (i = 0; i < n; i++) {
            pad = ""
            for (j = 0; j < i % 37; j++) pad = pad sprintf("%c", 97 + (i * 7 + j) % 26)
            printf "key-%d:%s-value-%d-%s-%08x\n", i, c, i, pad, (i * 2654435761) % 4294967296
        }
    }' >"$work/$codec.in"

    if ! kcat -b "$B" -P -t "$topic" -z "$codec" -K: -l "$work/$codec.in" \
        -X message.timeout.ms=60000 2>"$work/$codec.produce.err"; then
        cat "$work/$codec.produce.err" >&2
        fail "-z $codec: kcat producer exited with an error"
    fi
    if grep -Eq 'ERROR|FATAL|[Dd]elivery failed' "$work/$codec.produce.err"; then
        cat "$work/$codec.produce.err" >&2
        fail "-z $codec: kcat producer reported delivery errors"
    fi

    if ! timeout 120 kcat -b "$B" -C -t "$topic" -e -o beginning -q -f '%k:%s\n' \
        >"$work/$codec.out" 2>"$work/$codec.consume.err"; then
        cat "$work/$codec.consume.err" >&2
        fail "-z $codec: kcat consumer exited with an error"
    fi

    sort "$work/$codec.in" >"$work/$codec.in.sorted"
    sort "$work/$codec.out" >"$work/$codec.out.sorted"
    got=$(wc -l <"$work/$codec.out")
    if ! cmp -s "$work/$codec.in.sorted" "$work/$codec.out.sorted"; then
        echo "first differences (< produced, > consumed):" >&2
        diff "$work/$codec.in.sorted" "$work/$codec.out.sorted" | head -20 >&2 || true
        fail "-z $codec: consumed $got messages, not the $MESSAGES produced"
    fi
    echo "10-kcat: -z $codec: $MESSAGES messages produced and consumed back identical ($((SECONDS - start)) s)" >&2
    rm -f "$work/$codec".*
done

# Idempotent producing and consuming from a timestamp, the two features old librdkafka enables
# only when the broker advertises InitProducerId 0 and ListOffsets 1 exactly.
topic=idempotent-by-time
seq 1 5000 | sed 's/^/early-/' >"$work/early.in"
seq 1 5000 | sed 's/^/late-/' >"$work/late.in"
kcat -b "$B" -P -t "$topic" -X enable.idempotence=true -l "$work/early.in" 2>"$work/idem.err" ||
    { cat "$work/idem.err" >&2; fail "idempotent kcat producer"; }
# The producer stamped every early record (CreateTime) before it exited, so all of them are
# before split_ms; the late ones are produced once the clock has passed it.
now_ms() { echo $(($(date +%s%N) / 1000000)); }
split_ms=$(($(now_ms) + 1))
while (($(now_ms) <= split_ms)); do sleep 0.001; done
kcat -b "$B" -P -t "$topic" -X enable.idempotence=true -l "$work/late.in" 2>>"$work/idem.err" ||
    { cat "$work/idem.err" >&2; fail "idempotent kcat producer"; }
if grep -Eq 'ERROR|FATAL|[Dd]elivery failed' "$work/idem.err"; then
    cat "$work/idem.err" >&2
    fail "idempotent kcat producer reported errors"
fi
timeout 120 kcat -b "$B" -C -t "$topic" -e -o beginning -q >"$work/all.out" 2>"$work/c.err" ||
    { cat "$work/c.err" >&2; fail "consuming $topic"; }
cmp -s <(sort "$work/early.in" "$work/late.in") <(sort "$work/all.out") ||
    fail "idempotent producer: consumed $(wc -l <"$work/all.out") messages, not the 10000 produced exactly once"
timeout 120 kcat -b "$B" -C -t "$topic" -e -o "s@$split_ms" -q >"$work/late.out" 2>"$work/c.err" ||
    { cat "$work/c.err" >&2; fail "consuming $topic from timestamp $split_ms"; }
cmp -s <(sort "$work/late.in") <(sort "$work/late.out") ||
    fail "-o s@$split_ms: consumed $(wc -l <"$work/late.out") messages, not exactly the 5000 produced after it"
echo "10-kcat: idempotent producer exactly once; -o s@TIMESTAMP starts at the first later message" >&2

kcat -b "$B" -L -m 10 >"$work/L1" 2>&1 || { cat "$work/L1" >&2; fail "kcat -L after producing"; }
for codec in "${CODECS[@]}"; do
    grep -Eq "^  topic \"kcat-$codec\" with $PARTITIONS partitions:$" "$work/L1" ||
        { cat "$work/L1" >&2; fail "kcat -L does not show topic kcat-$codec with $PARTITIONS partitions"; }
done
broker_id="$(sed -nE "s/^  broker ([0-9]+) at ${B}( \(controller\))?$/\1/p" "$work/L0")"
[[ -n "$broker_id" ]] || fail "no broker id in kcat -L"
grep -E '^  topic "kcat-' -A"$PARTITIONS" "$work/L1" | grep -E '^    partition ' >"$work/partitions" || true
total=$(wc -l <"$work/partitions")
led=$(grep -cE "^    partition [0-9]+, leader $broker_id, replicas: $broker_id, isrs: $broker_id$" "$work/partitions" || true)
if [[ $total -ne $((PARTITIONS * ${#CODECS[@]})) || $led -ne $total ]]; then
    cat "$work/L1" >&2
    fail "kcat -L: $led of $total partitions led by broker $broker_id with replicas and ISR [$broker_id]"
fi
if grep -Eq 'err: ' "$work/L1"; then
    cat "$work/L1" >&2
    fail "kcat -L shows partition errors"
fi
echo "10-kcat: kcat -L shows all ${#CODECS[@]} topics with $PARTITIONS partitions, each led by broker $broker_id" >&2

# A topic deleted (Kafka's TopicCommand), the broker restarted, and the topic created again by
# the producer (auto-creation): only the new record is read, at offset 0; the deleted log is
# never loaded again.
if [[ "$BROKER_KIND" != external ]]; then
    libs="$("$root/integration/kafka-libs.sh")"
    topic=recreated
    seq 1 500 | sed 's/^/old-/' | kcat -b "$B" -P -t "$topic" -p 0 2>"$work/re.err" ||
        { cat "$work/re.err" >&2; fail "kcat -P to $topic"; }
    java -Xmx256m -XX:TieredStopAtLevel=1 -cp "$libs/*" org.apache.kafka.tools.TopicCommand \
        --bootstrap-server "$B" --delete --topic "$topic" >"$work/re.out" 2>&1 ||
        { cat "$work/re.out" >&2; fail "TopicCommand --delete --topic $topic"; }
    deadline=$((SECONDS + 30))
    while kcat -b "$B" -L -m 5 2>/dev/null | grep -q "topic \"$topic\""; do
        ((SECONDS < deadline)) || fail "$topic still listed 30 s after its deletion"
        sleep 0.2
    done
    broker_restart || fail "restarting the broker"
    echo new | kcat -b "$B" -P -t "$topic" -p 0 -X message.timeout.ms=60000 2>"$work/re.err" ||
        { cat "$work/re.err" >&2; fail "kcat -P to $topic created again"; }
    timeout 60 kcat -b "$B" -C -t "$topic" -o beginning -e -q -f '%p %o %s\n' >"$work/re.out" 2>"$work/re.err" ||
        { cat "$work/re.err" >&2; fail "kcat -C of $topic created again"; }
    [[ "$(cat "$work/re.out")" == "0 0 new" ]] ||
        { head -3 "$work/re.out" >&2; fail "$topic created again: not only the new record at offset 0 ($(wc -l <"$work/re.out") records)"; }
    echo "10-kcat: a topic deleted, the broker restarted, created again: only its new record, at offset 0" >&2
fi
echo "10-kcat: ok ($BROKER_KIND)" >&2
