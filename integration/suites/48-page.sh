#!/usr/bin/env bash
# run-all: kafkaiq only: the leadership page is KafkaIQ's own
#
# The leadership page in a real browser: headless Chromium (Debian's package), driven by
# Playwright, loads `/` of node 1 of a three-node cluster from config/cluster/ and reads its
# tables while a node is killed and restarted (integration/python/check_page.py): the node shown
# fenced, its partition led by another replica with "broker fenced" as the reason, then the node
# alive and leading its partition again after the automatic rebalance, named in the history.
# The page must report no refresh error and the browser console no error.
#
# Chromium installs with apt when missing; Playwright (which drives the installed Chromium, no
# browser download) and confluent-kafka install from PyPI into integration/.venv at pinned
# versions. Uses the fixed ports of config/cluster/ (9092-9094, 19092-19094) and HTTP 9644-9646.
# KAFKAIQ_PAGE_SCREENSHOTS=DIR keeps the screenshots (fenced.png, balanced.png).
set -euo pipefail

root="${KAFKAIQ_ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}"
KAFKAIQ_BIN="${KAFKAIQ_BIN:-$root/target/release/kafkaiq}"
name=48-page
# shellcheck source=../lib/python-clients.sh
source "$root/integration/lib/python-clients.sh"

PLAYWRIGHT_VERSION=1.56.0
CHROMIUM=/usr/bin/chromium
step() { echo "$name: $*" >&2; }
as_root() {
    if [[ $(id -u) -eq 0 ]]; then "$@"; else sudo -n "$@"; fi
}

if [[ ! -x "$CHROMIUM" ]]; then
    step "installing chromium"
    as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >&2
fi
python_clients
if ! "$python" -c "import importlib.metadata as m, sys
sys.exit(m.version('playwright') != '$PLAYWRIGHT_VERSION')" 2>/dev/null; then
    step "installing playwright $PLAYWRIGHT_VERSION into $venv"
    "$venv/bin/pip" install -q --disable-pip-version-check "playwright==$PLAYWRIGHT_VERSION" >&2
fi

work="$(mktemp -d "${TMPDIR:-/tmp}/page.XXXXXX")"
trap 'rm -rf "$work"' EXIT
shots="${KAFKAIQ_PAGE_SCREENSHOTS:-$work/screenshots}"
step "the page against a three-node cluster, in headless Chromium"
timeout 300 "$python" "$root/integration/python/check_page.py" --bin "$KAFKAIQ_BIN" --root "$root" \
    --work "$work" --screenshots "$shots" --chromium "$CHROMIUM"
if grep -l 'panicked' "$work"/node-*.log >/dev/null 2>&1; then
    echo "$name: FAIL: a node panicked" >&2
    exit 1
fi
step "ok"
