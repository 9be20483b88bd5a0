#!/usr/bin/env bash
# franz-go's own consumer-group integration tests (pkg/kgo: TestGroupETL, TestGroupSimple,
# TestUnknownGroupOffsetFetchPinned, and the share-group tests, which skip themselves on a broker
# without share groups) against the broker, with KGO_SEEDS and KGO_TEST_RF=1 as franz-go's test
# docs describe. The module comes from the Go module proxy into the module cache; nothing of it
# is kept in this repository.
#
# FRANZ_GO_VERSION picks the release (default: the one this suite was last checked with);
# FRANZ_GO_RUN the -run pattern (default Group); KGO_TEST_RECORDS, if set, overrides
# TestGroupETL's record count (franz-go's default, 500,000, takes about 20 s here). Broker
# selection as in integration/lib/broker.sh.
#
# Outcomes are counted from `go test -json` events, tests and subtests: the suite fails if any
# failed, if the package failed (a panic, a timeout), if go test exited non-zero, if no test
# passed, or if TestGroupETL did not pass.
set -euo pipefail

root="${KAFKAIQ_ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}"
KAFKAIQ_BIN="${KAFKAIQ_BIN:-$root/target/release/kafkaiq}"
# shellcheck source=../lib/broker.sh
source "$root/integration/lib/broker.sh"

FRANZ_GO_VERSION="${FRANZ_GO_VERSION:-v1.22.3}"
TEST_TIMEOUT="${FRANZ_GO_TEST_TIMEOUT:-15m}"
RUN="${FRANZ_GO_RUN:-Group}"

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

echo "60-franz-go: go test -run $RUN ./pkg/kgo (franz-go $FRANZ_GO_VERSION, KGO_TEST_RECORDS=${KGO_TEST_RECORDS:-franz-go default})" >&2
# The module cache is read-only: build and test caches go elsewhere, flags keep go from trying
# to rewrite go.mod/go.sum there. -json: every test's outcome is an event, counted below.
cd "$moddir"
go_status=0
GOFLAGS=-mod=mod go test -json -count=1 -timeout "$TEST_TIMEOUT" -run "$RUN" -v ./pkg/kgo \
    >"$work/go-test.json" 2>"$work/go-test.err" || go_status=$?

# Count outcomes from the events: each test (and subtest) ends in exactly one of pass, fail,
# skip; a package-level fail (a panic, a timeout, a build error) has no Test field.
python3 - "$work/go-test.json" "$work/go-test.err" >"$work/counts" <<'PY' || fail "cannot read go test's output"
import json, sys
started, final, output, package_output, package_failed = set(), {}, {}, [], False
for line in open(sys.argv[1], encoding="utf-8", errors="replace"):
    try:
        e = json.loads(line)
    except ValueError:
        package_output.append(line)
        continue
    test, action = e.get("Test"), e.get("Action")
    if action == "output":
        (output.setdefault(test, []) if test else package_output).append(e.get("Output", ""))
    elif action == "run" and test:
        started.add(test)
    elif action in ("pass", "fail", "skip"):
        if test:
            final[test] = action
        elif action == "fail":
            package_failed = True
tops = {t: a for t, a in final.items() if "/" not in t}
subs = {t: a for t, a in final.items() if "/" in t}
def count(d, a): return sum(1 for v in d.values() if v == a)
for t, a in sorted(final.items()):
    print(f"result {a} {t}")
for t in sorted(started - set(final)):
    print(f"result unfinished {t}")
    for l in output.get(t, [])[-10:]:
        print(f"failout {t}: {l.rstrip()}")
for t, a in sorted(final.items()):
    if a == "fail":
        for l in output.get(t, [])[-40:]:
            print(f"failout {t}: {l.rstrip()}")
for l in (package_output + open(sys.argv[2], errors="replace").read().splitlines())[-20:]:
    print(f"stray {l.rstrip()}")
print(f"tests {count(tops, 'pass')} {count(tops, 'fail')} {count(tops, 'skip')}")
print(f"subtests {count(subs, 'pass')} {count(subs, 'fail')} {count(subs, 'skip')}")
print(f"unfinished {len(started - set(final))}")
print(f"package_failed {int(package_failed)}")
print(f"etl {tops.get('TestGroupETL', 'missing')}")
PY
sed -n 's/^result //p' "$work/counts" | sed 's/^/    /' >&2
read -r _ passed failed skipped < <(grep '^tests ' "$work/counts")
read -r _ sub_passed sub_failed sub_skipped < <(grep '^subtests ' "$work/counts")
package_failed=$(sed -n 's/^package_failed //p' "$work/counts")
unfinished=$(sed -n 's/^unfinished //p' "$work/counts")
etl=$(sed -n 's/^etl //p' "$work/counts")
summary="$passed passed, $failed failed, $skipped skipped (subtests: $sub_passed passed, $sub_failed failed, $sub_skipped skipped; $unfinished never finished)"
if [[ $failed -gt 0 || $sub_failed -gt 0 || $unfinished -gt 0 || $package_failed -ne 0 || $go_status -ne 0 ]]; then
    sed -n 's/^failout //p' "$work/counts" >&2
    sed -n 's/^stray //p' "$work/counts" >&2
    fail "franz-go group tests: $summary; go test exited $go_status"
fi
[[ $passed -gt 0 ]] || fail "no franz-go test passed: $summary"
[[ "$etl" == pass ]] || fail "TestGroupETL did not pass ($etl): $summary"
echo "60-franz-go: $summary" >&2
echo "60-franz-go: ok ($BROKER_KIND)" >&2
