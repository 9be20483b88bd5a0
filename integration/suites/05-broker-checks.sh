#!/usr/bin/env bash
# The checks integration/lib/broker.sh makes when a suite stops its broker, tested on stand-in
# brokers that misbehave on purpose (a small Python program that listens where KafkaIQ would):
# a "panicked at" line in its output, an exit status of 3 after SIGTERM, SIGTERM ignored, an
# exit before it was stopped, and an exit with 143 (the default SIGTERM action, which KafkaIQ
# must not take) must each make broker_stop fail, and a suite whose broker misbehaved must exit
# non-zero through the EXIT trap pattern the suites use. A clean stand-in must pass. Without
# this, a detection that has gone blind would let every suite pass over a broker that panics.
#
# Needs only bash and Python 3; the same in every mode of run-all.sh (no real broker runs).
set -euo pipefail

root="${KAFKAIQ_ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}"
work="$(mktemp -d "${TMPDIR:-/tmp}/broker-checks.XXXXXX")"
trap 'rm -rf "$work"' EXIT

cat >"$work/stand-in" <<'PY'
#!/usr/bin/env python3
"""Listens like `kafkaiq --override listeners=PLAINTEXT://HOST:PORT` and misbehaves as
STAND_IN_MODE says: clean, panic, exit3, exit143, hang, die."""
import os, signal, socket, sys

mode = os.environ["STAND_IN_MODE"]
listen = [a.split("=", 1)[1] for a in sys.argv[1:] if a.startswith("listeners=")][0]
host, port = listen.split("//", 1)[1].rsplit(":", 1)
server = socket.socket()
server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
server.bind((host, int(port)))
server.listen(16)
print("stand-in listening", file=sys.stderr, flush=True)
if mode == "panic":
    print("thread 'kafkaiq' panicked at src/server/connection.rs:1:1:\ninjected",
          file=sys.stderr, flush=True)


def on_term(*_):
    if mode == "hang":
        return
    if mode == "exit143":
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)
    sys.exit(3 if mode == "exit3" else 0)


signal.signal(signal.SIGTERM, on_term)
while True:
    conn, _ = server.accept()
    conn.close()
    if mode == "die":
        sys.exit(0)
PY
chmod +x "$work/stand-in"

failures=0
check() { # MODE EXPECTED(ok|fail) WHAT [the reason broker_stop must give]
    local mode="$1" expected="$2" what="$3" reason="${4:-}" got
    if (
        unset KAFKA_BOOTSTRAP
        export BROKER_UNDER_TEST=kafkaiq KAFKAIQ_BIN="$work/stand-in" STAND_IN_MODE="$mode"
        export BROKER_SHUTDOWN_TIMEOUT_S=2 TMPDIR="$work"
        # shellcheck source=../lib/broker.sh
        source "$root/integration/lib/broker.sh"
        broker_start 2>/dev/null
        if [[ "$mode" == die ]]; then
            # The stand-in exits after its first connection (broker_start's probe).
            while kill -0 "$BROKER_PID" 2>/dev/null; do sleep 0.05; done
        fi
        broker_stop 2>"$work/$mode.err"
    ); then got=ok; else got=fail; fi
    if [[ "$got" == "$expected" ]] && { [[ -z "$reason" ]] || grep -qF -- "$reason" "$work/$mode.err"; }; then
        echo "05-broker-checks: $what: broker_stop says $got" >&2
    else
        echo "05-broker-checks: FAIL: $what: broker_stop says $got, expected $expected ($reason)" >&2
        cat "$work/$mode.err" >&2
        failures=$((failures + 1))
    fi
}

check clean ok "a clean exit after SIGTERM"
check panic fail "a panicked-at line in the broker's output" "kafkaiq panicked: thread"
check exit3 fail "exit status 3 after SIGTERM" "exited with status 3 after SIGTERM"
check exit143 fail "killed by its own SIGTERM (status 143)" "exited with status 143 after SIGTERM"
check hang fail "SIGTERM ignored for BROKER_SHUTDOWN_TIMEOUT_S" "did not stop within 2s of SIGTERM"
check die fail "an exit before it was stopped" "exited (status 0) before it was stopped"

# The EXIT trap pattern of the suites: a suite whose checks all passed exits 1 when its broker
# panicked, and 0 with a clean one.
for mode in panic clean; do
    status=0
    (
        unset KAFKA_BOOTSTRAP
        export BROKER_UNDER_TEST=kafkaiq KAFKAIQ_BIN="$work/stand-in" STAND_IN_MODE="$mode"
        export BROKER_SHUTDOWN_TIMEOUT_S=2 TMPDIR="$work"
        source "$root/integration/lib/broker.sh"
        cleanup() {
            local status=$?
            broker_stop 2>/dev/null || status=1
            exit "$status"
        }
        trap cleanup EXIT
        broker_start 2>/dev/null
        exit 0
    ) || status=$?
    expected=$([[ $mode == clean ]] && echo 0 || echo 1)
    if [[ $status -eq $expected ]]; then
        echo "05-broker-checks: a passing suite with a $mode broker exits $status" >&2
    else
        echo "05-broker-checks: FAIL: a passing suite with a $mode broker exits $status, not $expected" >&2
        failures=$((failures + 1))
    fi
done

if [[ $failures -gt 0 ]]; then
    echo "05-broker-checks: $failures check(s) failed" >&2
    exit 1
fi
echo "05-broker-checks: ok" >&2
