#!/usr/bin/env bash
# run-all: kafkaiq only: the HTTP listener (metrics, leadership page, JSON API) is KafkaIQ's own
#
# KafkaIQ's /metrics through a real Prometheus text parser: prometheus_client's strict
# OpenMetrics parser (integration/python/check_metrics.py), after traffic, plus the JSON API and
# the page; then `cargo test --release --test in_process http_listener::` runs its own checks
# with the parser installed (under run-all.sh, its cargo-test suite does, after this one).
# prometheus_client installs from PyPI into integration/.venv (git-ignored) on first use, at a
# pinned version.
set -euo pipefail

root="${KAFKAIQ_ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}"
KAFKAIQ_BIN="${KAFKAIQ_BIN:-$root/target/release/kafkaiq}"
# shellcheck source=../lib/broker.sh
source "$root/integration/lib/broker.sh"

# shellcheck source=../lib/python-clients.sh
source "$root/integration/lib/python-clients.sh"

PROMETHEUS_CLIENT_VERSION=0.26.0
step() { echo "47-metrics: $*" >&2; }
fail() {
    echo "47-metrics: FAIL: $*" >&2
    broker_log_tail 60
    exit 1
}

python_venv
if ! "$python" -c "import importlib.metadata, sys
sys.exit(importlib.metadata.version('prometheus_client') != '$PROMETHEUS_CLIENT_VERSION')" 2>/dev/null; then
    step "installing prometheus_client $PROMETHEUS_CLIENT_VERSION into $venv"
    "$venv/bin/pip" install -q --disable-pip-version-check \
        "prometheus_client==$PROMETHEUS_CLIENT_VERSION" >&2
fi

cleanup() {
    local status=$?
    broker_stop || status=1
    exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
broker_start
step "scrape and API of a running broker"
timeout 60 "$python" "$root/integration/python/check_metrics.py" "http://127.0.0.1:$BROKER_HTTP_PORT" ||
    fail "check_metrics.py"
if [[ -n "${KAFKAIQ_RUN_ALL:-}" ]]; then
    # run-all's cargo-test suite comes after this one and runs them, the parser installed.
    step "http_listener tests with the parser: in run-all's cargo-test suite"
else
    step "http_listener tests with the parser"
    (cd "$root" && cargo test --release -q --test in_process -- http_listener::) ||
        fail "cargo test --test in_process http_listener::"
fi
step "ok"
