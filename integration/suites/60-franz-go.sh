#!/usr/bin/env bash
# franz-go's own consumer-group integration tests (pkg/kgo: TestGroupETL, TestGroupSimple,
# TestUnknownGroupOffsetFetchPinned, and the share-group tests, which skip themselves on a broker
# without share groups) against the broker, with KGO_SEEDS and KGO_TEST_RF=1 as franz-go's test
# docs describe. The module comes from the Go module proxy into the module cache; nothing of it
# is kept in this repository.
#
# FRANZ_GO_VERSION picks the release (default: the one this suite was last checked with);
# KGO_TEST_RECORDS, if set, overrides TestGroupETL's record count (franz-go's default, 500,000,
# takes about 20 s here). Broker selection as in integration/lib/broker.sh.
set -euo pipefail

root="${KAFKAIQ_ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}"
KAFKAIQ_BIN="${KAFKAIQ_BIN:-$root/target/release/kafkaiq}"
# shellcheck source=../lib/broker.sh
source "$root/integration/lib/broker.sh"

FRANZ_GO_VERSION="${FRANZ_GO_VERSION:-v1.22.3}"
TEST_TIMEOUT="${FRANZ_GO_TEST_TIMEOUT:-15m}"

command -v go >/dev/null || { echo "60-franz-go: go is required" >&2; exit 1; }

work="$(mktemp -d "${TMPDIR:-/tmp}/franz-go-suite.XXXXXX")"
cleanup() {
    local status=$?
    broker_stop || status=1
    rm -rf "$work"
    exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

fail() {
    echo "60-franz-go: FAIL: $*" >&2
    broker_log_tail 60
    exit 1
}

# Download into the module cache (go mod download needs a module to run in).
(cd "$work" && go mod init franz-go-suite >/dev/null 2>&1 &&
    go mod download -json "github.com/twmb/franz-go@$FRANZ_GO_VERSION" >"$work/dl.json") ||
    fail "cannot download github.com/twmb/franz-go@$FRANZ_GO_VERSION"
moddir="$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["Dir"])' "$work/dl.json")"
[[ -d "$moddir/pkg/kgo" ]] || fail "no pkg/kgo in $moddir"

broker_start "group.initial.rebalance.delay.ms=0" "auto.create.topics.enable=true"
export KGO_SEEDS="$BROKER_BOOTSTRAP"
export KGO_TEST_RF=1

echo "60-franz-go: go test -run Group ./pkg/kgo (franz-go $FRANZ_GO_VERSION, KGO_TEST_RECORDS=${KGO_TEST_RECORDS:-franz-go default})" >&2
# The module cache is read-only: build and test caches go elsewhere, flags keep go from trying
# to rewrite go.mod/go.sum there.
cd "$moddir"
if ! GOFLAGS=-mod=mod go test -count=1 -timeout "$TEST_TIMEOUT" -run 'Group' -v ./pkg/kgo \
    >"$work/go-test.out" 2>&1; then
    grep -E '^(=== RUN|--- |FAIL|ok|PASS|panic)|_test.go:[0-9]+:' "$work/go-test.out" | tail -80 >&2
    fail "franz-go group tests failed"
fi
grep -E '^\s*--- (PASS|SKIP|FAIL)' "$work/go-test.out" >&2
passed=$(grep -cE '^\s*--- PASS' "$work/go-test.out" || true)
skipped=$(grep -cE '^\s*--- SKIP' "$work/go-test.out" || true)
grep -qE '^--- PASS: TestGroupETL' "$work/go-test.out" || fail "TestGroupETL did not pass"
echo "60-franz-go: $passed passed, 0 failed, $skipped skipped"
