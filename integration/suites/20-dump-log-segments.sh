#!/usr/bin/env bash
# Compatibility of the on-disk format with Apache Kafka's own tool: writes a multi-segment log
# with the storage crate (storage/examples/write_sample_log.rs, through the public API, closed
# cleanly) and has Kafka 4.1.1's kafka.tools.DumpLogSegments read every file of it:
#   - every .log with --deep-iteration --print-data-log: every batch valid, offsets consecutive
#     across batches and segments, each segment named after its first offset, batch and record
#     counts, each record's value naming its own offset, partition leader epochs matching
#     leader-epoch-checkpoint, producer sequences consecutive;
#   - every .index/.timeindex with --index-sanity-check, --verify-index-only and a plain dump:
#     sane, no mismatch, trimmed to their entries (no preallocated zero tail), increasing, and the
#     last time index entry of each segment holding the segment's max timestamp (Kafka writes
#     it when a segment rolls or closes);
#   - the producer snapshot at the log end offset (written on close) and the per-dir checkpoint
#     files (the sample deletes records below offset 50, so the log start offset is checkpointed
#     and the first leader epoch entry moves up to it).
# Then a compacted log, cleaned twice by the storage crate's log cleaner
# (storage/examples/write_compacted_log.rs): every rewritten batch valid in every codec, one
# record left per key at its latest offset, tombstones kept with a delete horizon, indexes sane.
# Any error text in the tool's output or a non-zero exit fails the suite. Three negative
# controls (a flipped byte in a .log, a wrong .index position, a wrong .timeindex timestamp) must
# each be reported, so a checker that has gone blind fails too.
#
# Needs Java 17 and Maven (integration/kafka-libs.sh fetches the jars). Standalone:
#   integration/suites/20-dump-log-segments.sh
# run-all: kafkaiq only: no broker runs: it reads the storage crate's files with Kafka's DumpLogSegments, the same in every mode
set -euo pipefail

root="${KAFKAIQ_ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}"
cd "$root"

example="$root/target/release/examples/write_sample_log"
# Under run-all.sh (KAFKAIQ_BIN set) the workspace's examples are already built; by hand, build
# (a no-op when fresh) so a stale binary is never tested.
if [[ -z "${KAFKAIQ_BIN:-}" || ! -x "$example" ]]; then
    cargo build --release -p kafkaiq-storage --example write_sample_log -j "${CARGO_BUILD_JOBS:-2}" >&2
fi

libs="$(integration/kafka-libs.sh)"
work="$(mktemp -d /tmp/kafkaiq-dls.XXXXXX)"
trap 'rm -rf "$work"' EXIT

failures=0
fail() {
    echo "FAIL: $*" >&2
    failures=$((failures + 1))
}

dump_log_segments() {
    java -Xmx512m -cp "$libs/*" kafka.tools.DumpLogSegments "$@"
}

# Text DumpLogSegments prints when something is wrong (DumpLogSegments.scala: "isvalid: false",
# "Found N invalid bytes at the end", "Mismatches in"/"Index offset:", "Found timestamp mismatch",
# "Found out of order timestamp", "The following indexed offsets are not found in the log",
# "Non-consecutive offsets in"; CorruptIndexException "Corrupt index found"/"Corrupt time index
# found"; any stack trace).
error_pattern='isvalid: false|invalid bytes|Mismatches in|Index offset:|timestamp mismatch|out of order timestamp|not found in the log|Non-consecutive|Ignoring unknown file|exception|corrupt|error'

# run_dls NAME ARGS...: runs DumpLogSegments, keeps NAME.out/NAME.err, and returns non-zero if
# it exited non-zero or printed error text.
run_dls() {
    local name="$1"
    shift
    local status=0
    dump_log_segments "$@" >"$work/$name.out" 2>"$work/$name.err" || status=$?
    grep -E -i -n "$error_pattern" "$work/$name.out" "$work/$name.err" >"$work/$name.errors" || true
    if [[ $status -ne 0 ]]; then
        echo "exit status $status" >>"$work/$name.errors"
    fi
    if [[ -s "$work/$name.errors" ]]; then
        echo "DumpLogSegments ($name) reported problems:" >&2
        head -20 "$work/$name.errors" | sed 's/^/    /' >&2
        return 1
    fi
    return 0
}

joined() { local IFS=,; echo "$*"; }

# ---------------------------------------------------------------------------------------------
echo "writing the sample log"
summary="$("$example" "$work/logs")"
echo "  $summary"
declare -A written
for kv in $summary; do
    written["${kv%%=*}"]="${kv#*=}"
done
pdir="${written[partition_dir]}"
leo="${written[log_end_offset]}"

mapfile -t logs < <(ls "$pdir"/*.log)
mapfile -t indexes < <(ls "$pdir"/*.index)
mapfile -t timeindexes < <(ls "$pdir"/*.timeindex)
echo "  ${#logs[@]} segments, ${#indexes[@]} .index, ${#timeindexes[@]} .timeindex in $pdir"
[[ ${#logs[@]} -ge 3 ]] || fail "expected a multi-segment log (>= 3 segments), found ${#logs[@]}"
[[ ${#indexes[@]} -eq ${#logs[@]} && ${#timeindexes[@]} -eq ${#logs[@]} ]] ||
    fail "every segment needs a .index and a .timeindex"

# ---------------------------------------------------------------------------------------------
echo "DumpLogSegments --deep-iteration --print-data-log over ${#logs[@]} .log files"
run_dls deep --deep-iteration --print-data-log --files "$(joined "${logs[@]}")" ||
    fail "deep iteration of the .log files"

# Walk the dump: batches and records must be exactly what was written.
awk -v producer_id="${written[producer_id]}" '
    function field(name,   i) { for (i = 1; i < NF; i++) if ($i == name ":") return $(i + 1); return "" }
    function bad(msg) { print "error " msg; errors++ }
    BEGIN { last_epoch = "none" }
    /^Dumping / { file = $2; next }
    /^Log starting offset: / {
        if (segments > 0) printf "segment_max_ts %d %.0f\n", seg_base, seg_max_ts
        seg_base = $4; segments++; first_in_segment = 1; seg_max_ts = -1; next
    }
    /^baseOffset: / {
        bo = field("baseOffset") + 0; lo = field("lastOffset") + 0; count = field("count") + 0
        if (field("isvalid") != "true") bad("invalid batch at " bo " in " file)
        if (field("magic") != "2") bad("magic " field("magic") " at " bo)
        if (bo != next_offset) bad("batch at " bo ", expected " next_offset)
        if (first_in_segment && bo != seg_base) bad(file " starts with offset " bo)
        if (lo - bo + 1 != count) bad("batch at " bo ": count " count " vs offsets " bo ".." lo)
        first_in_segment = 0; next_offset = lo + 1
        batches++; records += count
        ts = field("CreateTime") + 0; if (ts > seg_max_ts) seg_max_ts = ts
        ple = field("partitionLeaderEpoch")
        if (ple != last_epoch) { print "epoch " ple " " bo; last_epoch = ple }
        if (field("producerId") == producer_id) {
            bs = field("baseSequence") + 0
            if (idempotent > 0 && bs != next_seq) bad("producer sequence " bs " at " bo ", expected " next_seq)
            next_seq = field("lastSequence") + 1; idempotent++; last_idem_offset = lo
        }
        expect_record = bo
        next
    }
    /^\| offset: / {
        off = $3 + 0
        if (off != expect_record) bad("record at " off ", expected " expect_record)
        if (index($0, " payload: value-" off "-") == 0) bad("record at " off " does not hold value-" off "-")
        expect_record = off + 1; record_lines++
        next
    }
    END {
        if (segments > 0) printf "segment_max_ts %d %.0f\n", seg_base, seg_max_ts
        print "count batches " batches + 0
        print "count records " records + 0
        print "count record_lines " record_lines + 0
        print "count next_offset " next_offset + 0
        print "count idempotent " idempotent + 0
        print "count last_sequence " next_seq - 1
        print "count last_idempotent_offset " last_idem_offset + 0
    }' "$work/deep.out" >"$work/deep.summary"

grep '^error ' "$work/deep.summary" | head -20 | sed 's/^error /FAIL: /' >&2 || true
grep -q '^error ' "$work/deep.summary" && fail "the dumped log differs from what was written"
declare -A read_back
while read -r _ key value; do read_back[$key]="$value"; done < <(grep '^count ' "$work/deep.summary")
expect_equal() { # what, dumped, written
    if [[ "$2" == "$3" ]]; then echo "  $1: $2"; else fail "$1: DumpLogSegments read $2, wrote $3"; fi
}
expect_equal "batches" "${read_back[batches]}" "${written[batches]}"
expect_equal "records (batch counts)" "${read_back[records]}" "${written[records]}"
expect_equal "records (deep iteration)" "${read_back[record_lines]}" "${written[records]}"
expect_equal "log end offset" "${read_back[next_offset]}" "$leo"
expect_equal "idempotent batches" "${read_back[idempotent]}" "${written[idempotent_batches]}"
expect_equal "last producer sequence" "${read_back[last_sequence]}" "${written[last_sequence]}"

# Leader epochs stamped in the batches vs leader-epoch-checkpoint (format 0, count, lines).
epoch_file="$pdir/leader-epoch-checkpoint"
if [[ -f "$epoch_file" ]]; then
    # The epochs the batches carry, after Kafka's truncate_from_start(log start offset): entries
    # starting at or below it collapse into the last of them, moved up to the log start.
    expected_epochs="$(grep '^epoch ' "$work/deep.summary" | cut -d' ' -f2- | awk -v ls="${written[log_start_offset]}" '
        $2 <= ls { held = $1; next }
        { if (held != "") { print held, ls; held = "" } print }
        END { if (held != "") print held, ls }')"
    {
        read -r version
        read -r count
        checkpoint_epochs="$(cat)"
    } <"$epoch_file"
    [[ "$version" == 0 ]] || fail "leader-epoch-checkpoint version $version"
    [[ "$count" == "$(printf '%s\n' "$checkpoint_epochs" | grep -c .)" ]] ||
        fail "leader-epoch-checkpoint count line $count does not match its entries"
    if [[ "$checkpoint_epochs" == "$expected_epochs" ]]; then
        echo "  leader epochs (epoch start_offset): $(echo $checkpoint_epochs)"
    else
        fail "leader-epoch-checkpoint holds [$(echo $checkpoint_epochs)], the batches say [$(echo $expected_epochs)]"
    fi
else
    fail "no leader-epoch-checkpoint in $pdir"
fi

# ---------------------------------------------------------------------------------------------
all_indexes=("${indexes[@]}" "${timeindexes[@]}")
echo "DumpLogSegments --index-sanity-check over ${#all_indexes[@]} index files"
run_dls sanity --index-sanity-check --files "$(joined "${all_indexes[@]}")" || fail "index sanity check"
checked="$(grep -c -E 'passed sanity check\.|is empty\.' "$work/sanity.out" || true)"
expect_equal "index files passing the sanity check" "$checked" "${#all_indexes[@]}"

echo "DumpLogSegments --verify-index-only over ${#all_indexes[@]} index files"
run_dls verify --verify-index-only --files "$(joined "${all_indexes[@]}")" || fail "index verification"

echo "DumpLogSegments (entries) over ${#all_indexes[@]} index files"
run_dls entries --files "$(joined "${all_indexes[@]}")" || fail "index dump"
# Per file: entry count (the tool stops at the first all-zero entry, so an untrimmed index shows
# fewer entries than its size implies), monotonic offsets/positions/timestamps, last timestamp.
awk '
    function flush() { if (file != "") print file, kind, n, last_ts, bad_order }
    /^Dumping / { flush(); file = $2; kind = (file ~ /\.timeindex$/) ? "time" : "offset"; n = 0; last_ts = -1; bad_order = 0; prev_a = -1; prev_b = -1; next }
    /^offset: .* position: / { n++; if ($2 + 0 <= prev_a || $4 + 0 <= prev_b) bad_order++; prev_a = $2 + 0; prev_b = $4 + 0; next }
    /^timestamp: .* offset: / { n++; if ($2 + 0 <= prev_a || $4 + 0 < prev_b) bad_order++; prev_a = $2 + 0; prev_b = $4 + 0; last_ts = $2; next }
    END { flush() }' "$work/entries.out" >"$work/entries.summary"

declare -A segment_max_ts
while read -r _ base ts; do segment_max_ts[$base]="$ts"; done < <(grep '^segment_max_ts ' "$work/deep.summary")
offset_entries=0
time_entries=0
while read -r file kind n last_ts bad_order; do
    size=$(stat -c %s "$file")
    entry_bytes=$([[ $kind == time ]] && echo 12 || echo 8)
    [[ $((size % entry_bytes)) -eq 0 && $((size / entry_bytes)) -eq $n ]] ||
        fail "$(basename "$file"): $size bytes but $n entries of $entry_bytes bytes (not trimmed?)"
    [[ $bad_order -eq 0 ]] || fail "$(basename "$file"): $bad_order entries out of order"
    if [[ $kind == time ]]; then
        time_entries=$((time_entries + n))
        base=$((10#$(basename "$file" .timeindex)))
        [[ $n -gt 0 && "$last_ts" == "${segment_max_ts[$base]:-missing}" ]] ||
            fail "$(basename "$file"): last entry timestamp ${last_ts} ($n entries), segment max timestamp ${segment_max_ts[$base]:-missing}"
    else
        offset_entries=$((offset_entries + n))
    fi
done <"$work/entries.summary"
echo "  offset index entries: $offset_entries, time index entries: $time_entries"
[[ $offset_entries -gt 0 ]] || fail "no offset index entries at all: the index checks checked nothing"
[[ $time_entries -gt 0 ]] || fail "no time index entries at all: the index checks checked nothing"

# ---------------------------------------------------------------------------------------------
snapshot="$pdir/$(printf '%020d' "$leo").snapshot"
if [[ -f "$snapshot" ]]; then
    run_dls snapshot --files "$snapshot" || fail "producer snapshot dump"
    line="$(grep "^producerId: ${written[producer_id]} " "$work/snapshot.out" || true)"
    want="producerEpoch: ${written[producer_epoch]} .* lastSequence: ${written[last_sequence]} lastOffset: ${read_back[last_idempotent_offset]} "
    if [[ "$line" =~ $want ]]; then
        echo "  producer snapshot at $leo: $line"
    else
        fail "producer snapshot $(basename "$snapshot"): '$line' does not match /$want/"
    fi
else
    fail "no producer snapshot at the log end offset ($(basename "$snapshot")) after a clean close"
fi

for cp in recovery-point-offset-checkpoint replication-offset-checkpoint log-start-offset-checkpoint; do
    # Kafka lists a log start offset only when it is above the first segment's base offset,
    # which DeleteRecords made it here.
    want_offset=$([[ $cp == log-start-offset-checkpoint ]] && echo "${written[log_start_offset]}" || echo "$leo")
    if [[ -f "$work/logs/$cp" ]] && grep -qx "sample 0 $want_offset" "$work/logs/$cp" &&
        [[ "$(head -1 "$work/logs/$cp")" == 0 ]]; then
        echo "  $cp: sample 0 $want_offset"
    else
        fail "$cp: expected version 0 and 'sample 0 $want_offset', found: $(tr '\n' '|' 2>/dev/null <"$work/logs/$cp")"
    fi
done

# ---------------------------------------------------------------------------------------------
# Negative controls: each corruption must be reported, or the checks above prove nothing.
echo "negative controls"
flip_byte() { # file position
    local b
    b=$(od -An -tu1 -j "$2" -N1 "$1" | tr -d ' ')
    printf "\\$(printf '%03o' $((b ^ 0xff)))" | dd of="$1" bs=1 seek="$2" conv=notrunc status=none
}
write_be() { # file position width value
    local hex i bytes=""
    hex=$(printf "%0$(($3 * 2))x" "$4")
    for ((i = 0; i < $3 * 2; i += 2)); do bytes+="\\x${hex:$i:2}"; done
    printf "$bytes" | dd of="$1" bs=1 seek="$2" conv=notrunc status=none
}
read_be() { # file position width
    echo $((16#$(od -An -tx1 -j "$2" -N"$3" "$1" | tr -d ' \n')))
}
# (Not named "corrupt": the error pattern would match the path itself.)
mutated="$work/mutated"

# The last byte of the first batch of the second segment (inside its records, which the CRC
# covers; the base offset and leader epoch fields are outside it).
rm -rf "$mutated" && cp -r "$pdir" "$mutated"
victim="$mutated/$(basename "${logs[1]}")"
read -r batch_position batch_size < <(awk '
    /^Dumping / { segment++ }
    segment == 2 && /^baseOffset: / {
        for (i = 1; i < NF; i++) { if ($i == "position:") p = $(i + 1); if ($i == "size:") s = $(i + 1) }
        print p, s; exit
    }' "$work/deep.out")
flip_byte "$victim" $((batch_position + batch_size - 1))
if run_dls control-log --deep-iteration --print-data-log --files "$victim" 2>/dev/null; then
    fail "a flipped byte in $(basename "$victim") went unnoticed"
else
    echo "  flipped byte in a .log: reported ($(grep -o -i -E "$error_pattern" "$work/control-log.out" "$work/control-log.err" | head -1 | sed "s|^$work/||"))"
fi

# The first entry of a non-empty offset index pointing at the segment's first batch instead.
rm -rf "$mutated" && cp -r "$pdir" "$mutated"
victim=""
for f in "$mutated"/*.index; do
    if [[ $(stat -c %s "$f") -ge 8 && $(read_be "$f" 4 4) -gt 0 ]]; then victim="$f"; break; fi
done
if [[ -z "$victim" ]]; then
    fail "no offset index entry with a non-zero position to corrupt"
else
    write_be "$victim" 4 4 0
    if run_dls control-index --verify-index-only --files "$victim" 2>/dev/null; then
        fail "a wrong position in $(basename "$victim") went unnoticed"
    else
        echo "  wrong .index position: reported ($(grep -o -i -E "$error_pattern" "$work/control-index.out" "$work/control-index.err" | head -1 | sed "s|^$work/||"))"
    fi
fi

# The first entry of a time index claiming a timestamp one millisecond later than the batch's.
rm -rf "$mutated" && cp -r "$pdir" "$mutated"
victim="$mutated/$(basename "${timeindexes[0]}")"
if [[ $(stat -c %s "$victim") -ge 12 ]]; then
    write_be "$victim" 0 8 $(($(read_be "$victim" 0 8) + 1))
    if run_dls control-timeindex --verify-index-only --files "$victim" 2>/dev/null; then
        fail "a wrong timestamp in $(basename "$victim") went unnoticed"
    else
        echo "  wrong .timeindex timestamp: reported ($(grep -o -i -E "$error_pattern" "$work/control-timeindex.out" "$work/control-timeindex.err" | head -1 | sed "s|^$work/||"))"
    fi
else
    fail "$(basename "$victim") has no entry to corrupt"
fi

# ---------------------------------------------------------------------------------------------
# A compacted log after two cleanings (storage/examples/write_compacted_log.rs: every codec,
# an idempotent producer, tombstones). Every batch must be valid (the rewritten compressed ones
# included) and offsets must only grow; gaps are what compaction leaves, and DumpLogSegments
# lists them as "Non-consecutive offsets", which is not an error here. Exactly the latest record
# of each key must be left, the tombstones' batches must carry a delete horizon, and the
# indexes of the rewritten segments must verify.
compacted_example="$root/target/release/examples/write_compacted_log"
if [[ -z "${KAFKAIQ_BIN:-}" || ! -x "$compacted_example" ]]; then
    cargo build --release -p kafkaiq-storage --example write_compacted_log -j "${CARGO_BUILD_JOBS:-2}" >&2
fi
echo "writing and cleaning a compacted log"
csummary="$("$compacted_example" "$work/compacted")"
echo "  $csummary"
declare -A cwritten
for kv in $csummary; do cwritten["${kv%%=*}"]="${kv#*=}"; done
cdir="${cwritten[partition_dir]}"
mapfile -t clogs < <(ls "$cdir"/*.log)
mapfile -t cindexes < <(ls "$cdir"/*.index "$cdir"/*.timeindex)
[[ "${cwritten[cleanings]}" -ge 2 ]] || fail "the compacted sample was cleaned ${cwritten[cleanings]} time(s), expected 2"
echo "DumpLogSegments --deep-iteration --print-data-log over ${#clogs[@]} cleaned .log files"
error_pattern="${error_pattern/|Non-consecutive/}" run_dls compacted --deep-iteration --print-data-log \
    --files "$(joined "${clogs[@]}")" || fail "deep iteration of the cleaned .log files"
awk '
    function field(name,   i) { for (i = 1; i < NF; i++) if ($i == name ":") return $(i + 1); return "" }
    function bad(msg) { print "error " msg; errors++ }
    BEGIN { last = -1 }
    /^baseOffset: / {
        if (field("isvalid") != "true") bad("invalid batch at " field("baseOffset"))
        if ($0 ~ /deleteHorizonMs: OptionalLong\[/) horizons++
        batches++; next
    }
    /^\| offset: / {
        off = $3 + 0
        if (off <= last) bad("record at " off " after " last)
        last = off
        key = ""; for (i = 1; i < NF; i++) if ($i == "key:") key = $(i + 1)
        if (key == "") bad("record at " off " has no key")
        if ($0 ~ / payload: /) { if (index($0, " payload: value-" off "-") == 0) bad("record at " off " does not hold value-" off "-") }
        else tombstones++
        if (key in seen) bad("key " key " at " seen[key] " and " off)
        seen[key] = off; records++
        next
    }
    END {
        for (k in seen) print "key " k " " seen[k]
        print "count batches " batches + 0
        print "count records " records + 0
        print "count tombstones " tombstones + 0
        print "count horizons " horizons + 0
    }' "$work/compacted.out" >"$work/compacted.summary"
grep '^error ' "$work/compacted.summary" | head -20 | sed 's/^error /FAIL: /' >&2 || true
grep -q '^error ' "$work/compacted.summary" && fail "the cleaned log is not what compaction must leave"
declare -A cread
while read -r _ key value; do cread[$key]="$value"; done < <(grep '^count ' "$work/compacted.summary")
expect_equal "records left after cleaning (one per key)" "${cread[records]}" "${cwritten[keys]}"
expect_equal "tombstones kept within delete.retention.ms" "${cread[tombstones]}" "${cwritten[tombstones]}"
[[ "${cread[horizons]}" -ge 1 ]] || fail "no batch carries a delete horizon, though tombstones were kept"
if diff <(grep '^key ' "$work/compacted.summary" | cut -d' ' -f2- | sort) <(sort "$work/compacted/expected") >"$work/compacted.diff"; then
    echo "  each key's latest record, at its offset: ${cwritten[keys]} keys"
else
    fail "keys and offsets left differ from each key's latest write: $(head -5 "$work/compacted.diff" | tr '\n' ' ')"
fi
echo "DumpLogSegments --verify-index-only over ${#cindexes[@]} index files of the cleaned log"
run_dls compacted-verify --verify-index-only --files "$(joined "${cindexes[@]}")" ||
    fail "index verification of the cleaned log"

if [[ $failures -gt 0 ]]; then
    echo "20-dump-log-segments: $failures check(s) failed" >&2
    exit 1
fi
echo "20-dump-log-segments: DumpLogSegments reads the crate's log with no error"
