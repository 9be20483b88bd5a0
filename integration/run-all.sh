#!/usr/bin/env bash
# Runs every test suite of KafkaIQ: the cargo tests of the workspace, then each stock-client
# suite in integration/suites/ (in name order) against the release broker binary.
#
# Prerequisites: a Rust toolchain, Java 17 with Maven (the suites fetch Kafka's jars from Maven
# Central), and root or sudo-free apt for kcat (installed when missing). Everything binds
# 127.0.0.1 and stops by itself.
set -uo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

jobs="${CARGO_BUILD_JOBS:-2}"
echo "==> cargo build --release (workspace, binaries and examples)"
cargo build --release --workspace --bins --examples -j "$jobs" || exit 1

passed=0
failed=0
failed_names=()
run_suite() {
  local name="$1"; shift
  echo "==> suite: $name"
  local start=$SECONDS
  if "$@"; then
    passed=$((passed + 1))
    echo "==> suite $name: ok ($((SECONDS - start)) s)"
  else
    failed=$((failed + 1))
    failed_names+=("$name")
    echo "==> suite $name: FAILED ($((SECONDS - start)) s)"
  fi
}

run_suite cargo-test cargo test --workspace --release --no-fail-fast -j "$jobs"

export KAFKAIQ_BIN="$root/target/release/kafkaiq"
export KAFKAIQ_ROOT="$root"
for suite in integration/suites/*.sh; do
  [ -e "$suite" ] || continue
  run_suite "$(basename "$suite" .sh)" bash "$suite"
done

echo
if [ "$failed" -gt 0 ]; then
  echo "failed suites: ${failed_names[*]}"
fi
echo "suites: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
