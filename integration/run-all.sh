#!/usr/bin/env bash
# Runs every test suite of KafkaIQ: each stock-client suite in integration/suites/ (in name
# order) against the release broker binary, then the cargo tests of the workspace and the
# criterion benches once each (built meanwhile in the background), then a short run of the fuzz
# targets.
#
#   ./integration/run-all.sh                      KafkaIQ (the test command; CI runs this)
#   ./integration/run-all.sh --against kafka      the same suites against Apache Kafka 4.1.1,
#                                                 which they start themselves: checks the tests
#   ./integration/run-all.sh --bootstrap H:P      the same suites against a running broker
#
# Which broker a suite tests is decided here and nowhere else: KAFKA_BOOTSTRAP,
# BROKER_UNDER_TEST and the other variables the suites read (see `scrubbed` below) are cleared
# from the environment unless a flag asks for them, so a variable left in a shell cannot make
# a run quietly test another broker or test less. Suites that only make sense against KafkaIQ
# (in-process broker tests, the benches, the fuzz target, ...) are skipped in the other modes,
# each with a line saying so.
#
# Prerequisites: a Rust toolchain, Java 17 with Maven (the suites fetch Kafka's jars from Maven
# Central), Go, Python 3, and root (apt for kcat and nftables, installed when missing; the
# fault-injection suite's nftables rules and tmpfs log dirs). Everything binds 127.0.0.1 and
# stops by itself.
set -uo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

usage() {
    awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "${BASH_SOURCE[0]}" >&2
    exit 2
}

mode=kafkaiq
bootstrap=""
while [[ $# -gt 0 ]]; do
    case "$1" in
        --against)
            [[ "${2:-}" == kafka ]] || { echo "run-all: --against takes 'kafka'" >&2; usage; }
            mode=apache-kafka
            shift 2
            ;;
        --bootstrap)
            [[ "${2:-}" =~ ^[^:]+:[0-9]+$ ]] || { echo "run-all: --bootstrap takes HOST:PORT" >&2; usage; }
            mode=external
            bootstrap="$2"
            shift 2
            ;;
        -h | --help) usage ;;
        *)
            echo "run-all: unknown argument $1" >&2
            usage
            ;;
    esac
done

# Variables that select the broker, or change what the suites check or how long they wait.
# RUST_LOG, RDKAFKA_DEBUG and KEEP_BROKER_DIR only change what is printed or kept, and stay.
for var in $(compgen -e); do
    case "$var" in
        KAFKA_BOOTSTRAP | BROKER_UNDER_TEST | KAFKAIQ_* | KGO_* | FRANZ_GO_* | PROPTEST_* | \
            BROKER_STARTUP_TIMEOUT_S | BROKER_SHUTDOWN_TIMEOUT_S | KAFKA_HEAP | FUZZ_SMOKE_RUNS)
            echo "run-all: ignoring $var=${!var} from the environment" >&2
            unset "$var"
            ;;
    esac
done
case "$mode" in
    apache-kafka) export BROKER_UNDER_TEST=apache-kafka ;;
    external) export KAFKA_BOOTSTRAP="$bootstrap" ;;
esac

jobs="${CARGO_BUILD_JOBS:-2}"
run_start=$SECONDS
results=()
passed=0
failed=0
skipped=0
run_suite() {
    local name="$1"
    shift
    echo "==> suite: $name"
    local start=$SECONDS
    if "$@"; then
        passed=$((passed + 1))
        results+=("ok       $name ($((SECONDS - start)) s)")
        echo "==> suite $name: ok ($((SECONDS - start)) s)"
    else
        failed=$((failed + 1))
        results+=("FAILED   $name ($((SECONDS - start)) s)")
        echo "==> suite $name: FAILED ($((SECONDS - start)) s)"
    fi
}
skip_suite() {
    local name="$1" why="$2"
    skipped=$((skipped + 1))
    results+=("skipped  $name: $why")
    echo "==> suite $name: skipped against $mode: $why"
}

case "$mode" in
    kafkaiq) echo "==> broker under test: KafkaIQ (this build's release binary)" ;;
    apache-kafka) echo "==> broker under test: Apache Kafka 4.1.1, started by each suite (integration/apache-kafka.sh)" ;;
    external) echo "==> broker under test: the running broker at $bootstrap" ;;
esac

# The cargo tests that talk to a broker over the network and can be pointed at another one
# (BROKER_UNDER_TEST / KAFKA_BOOTSTRAP); every other cargo test needs KafkaIQ itself.
portable_tests=(rdkafka_clients cluster_failover)

# The Kafka Streams word count that cluster_failover's streams test runs (Maven, cached in
# integration/.cache): built here, before the cargo tests, so a failed build is reported as such
# rather than as that test's failure. The test calls the same script, which then only prints.
run_suite streams-wordcount-build bash integration/streams-wordcount/build.sh

if [[ "$mode" == kafkaiq ]]; then
    echo "==> cargo build --release (workspace, binaries and examples)"
    cargo build --release --workspace --bins --examples -j "$jobs" || exit 1
    target_dir="$(cargo metadata --format-version 1 --no-deps |
        python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')"
    export KAFKAIQ_BIN="$target_dir/release/kafkaiq"
    # Everything else the suites need from a compiler is built in the background at the lowest
    # CPU priority, on the time the stock-client suites leave idle (they spend much of it
    # waiting on brokers and JVMs): rdkafka_performance for the bench smoke run (its suite
    # builds it itself if it comes first; the build script serializes the two), the test
    # binaries and the benches (run after the stock-client suites: `cargo test` waits for the
    # background build's lock and then has nothing left to build), and the fuzz targets (a
    # build of their own, run last). A failure here is reported by the suite that builds the
    # same again. The log is printed with the fuzz-smoke suite.
    background_log="$(mktemp "${TMPDIR:-/tmp}/background-build.XXXXXX")"
    nice -n 19 bash -c '
        bash benches/compare/build-rdkafka-perf.sh
        cargo test --workspace --release --no-run -j "$1"
        cargo test --workspace --release --bench "*" --no-run -j "$1"
        bash fuzz/smoke.sh --build-only
    ' background-build "$jobs" >"$background_log" 2>&1 &
    background_build=$!
    # Tells the suites they run under this script (see 47-metrics).
    export KAFKAIQ_RUN_ALL=1
fi

export KAFKAIQ_ROOT="$root"
for suite in integration/suites/*.sh; do
    [ -e "$suite" ] || continue
    name="$(basename "$suite" .sh)"
    # A suite that only means something against KafkaIQ says why in a line
    # "# run-all: kafkaiq only: REASON".
    only="$(sed -n 's/^# run-all: kafkaiq only: //p' "$suite" | head -1)"
    if [[ "$mode" != kafkaiq && -n "$only" ]]; then
        skip_suite "$name" "$only"
        continue
    fi
    run_suite "$name" bash "$suite"
done

if [[ "$mode" == kafkaiq ]]; then
    # Six tests at a time in each test binary: most of a cluster test's time is spent waiting
    # (elections, sessions, processes starting), so on two cores six share the CPU without
    # starving each other, and the run takes about half the time it takes with two.
    RUST_TEST_THREADS=6 run_suite cargo-test cargo test --workspace --release --no-fail-fast -j "$jobs"
    # Criterion benches run without --bench are in test mode: each benchmark once, checked to
    # run, no measurement. Builds them as `cargo bench` would.
    run_suite benches cargo test --workspace --release --bench '*' -j "$jobs"
    fuzz_smoke() {
        local status=0
        wait "$background_build" || status=$?
        echo "fuzz-smoke: background build exited with $status:"
        tail -5 "$background_log"
        rm -f "$background_log"
        bash fuzz/smoke.sh
    }
    run_suite fuzz-smoke fuzz_smoke
else
    args=()
    for t in "${portable_tests[@]}"; do args+=(--test "$t"); done
    # One broker at a time: an Apache Kafka JVM per test.
    run_suite cargo-test cargo test --release --no-fail-fast -j "$jobs" "${args[@]}" -- --test-threads=1
    echo "==> cargo tests skipped against $mode: every test but ${portable_tests[*]} runs KafkaIQ" \
        "itself (in-process brokers: broker_raw, group_raw, rdkafka_groups," \
        "broker_failure_detection; the kafkaiq binary's own behaviour: cli, kill9_restart;" \
        "the decoder, storage and unit tests: no broker at all)"
    results+=("skipped  cargo tests other than ${portable_tests[*]}: they need KafkaIQ itself")
    skipped=$((skipped + 1))
    skip_suite benches "KafkaIQ's own code paths, no broker to compare"
    skip_suite fuzz-smoke "KafkaIQ's own decoder, no broker to compare"
fi

echo
echo "==> summary ($mode, $((SECONDS - run_start)) s):"
printf '    %s\n' "${results[@]}"
echo "suites: $passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
