# Starting and stopping the broker under test from a suite script (source this file).
#
#   broker_start [key=value ...]   starts the broker, waits until its port accepts connections and
#                                  sets BROKER_BOOTSTRAP, BROKER_KIND, BROKER_DIR, BROKER_PID
#   broker_stop                    stops it (SIGTERM, SIGKILL after BROKER_SHUTDOWN_TIMEOUT_S) and
#                                  removes its temp dir; returns 1 (printing why and the tail of
#                                  its output) if the broker misbehaved: see below
#   broker_restart                 stops it as broker_stop does (failing the same way) and starts
#                                  it again on the same ports and data
#   broker_log_tail                prints the last lines of the broker's output
#   free_port                      prints a free 127.0.0.1 TCP port
#
# The broker listens on a free port, and Apache Kafka's controller on another; a suite that
# names its listeners in its settings (listeners=..., controller.quorum.voters=...) picks them
# first with free_port and passes them as BROKER_PORT and BROKER_CONTROLLER_PORT (the PLAINTEXT
# listener broker_start waits for, and the controller's).
#
# Which broker, like the Java suite: KAFKA_BOOTSTRAP=host:port uses a running one (nothing is
# started); BROKER_UNDER_TEST=apache-kafka runs Apache Kafka 4.1.1 (integration/apache-kafka.sh)
# to check the suite itself; otherwise $KAFKAIQ_BIN on a free port with a temp data dir. The
# key=value arguments become `--override key=value` for KafkaIQ and server.properties lines for
# Apache Kafka, so both brokers run with the same settings.
#
# A broker that misbehaves fails the suite that ran it even if every client check passed:
# broker_stop returns 1 when its output has a "panicked at" line (a panic in any thread or
# task), when it exited before it was stopped, when it exits with anything but a clean status
# after SIGTERM (0; Apache Kafka's JVM also 143), or when it does not exit within
# BROKER_SHUTDOWN_TIMEOUT_S of SIGTERM (it is then killed). Suites call it from their EXIT trap
# and exit non-zero when it fails:
#
#   cleanup() { local status=$?; broker_stop || status=1; ...; exit "$status"; }
#   trap cleanup EXIT
#
# (not in a subshell: only the shell that started the broker can wait for its exit status).

BROKER_STARTUP_TIMEOUT_S=${BROKER_STARTUP_TIMEOUT_S:-90}
BROKER_SHUTDOWN_TIMEOUT_S=${BROKER_SHUTDOWN_TIMEOUT_S:-30}
_broker_lib_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

free_port() {
    if command -v python3 >/dev/null; then
        python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
        return
    fi
    # Without python: a random high port nothing answers on.
    local port
    while :; do
        port=$((20000 + RANDOM % 40000))
        (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null || { echo "$port"; return; }
    done
}

broker_start() {
    BROKER_PID=""
    BROKER_DIR=""
    if [[ -n "${KAFKA_BOOTSTRAP:-}" ]]; then
        BROKER_KIND=external
        BROKER_BOOTSTRAP="$KAFKA_BOOTSTRAP"
        return 0
    fi
    BROKER_KIND="${BROKER_UNDER_TEST:-kafkaiq}"
    BROKER_DIR="$(mktemp -d "${TMPDIR:-/tmp}/broker-under-test.XXXXXX")"
    BROKER_BOOTSTRAP="127.0.0.1:${BROKER_PORT:-$(free_port)}"
    _broker_controller_port="${BROKER_CONTROLLER_PORT:-$(free_port)}"
    # KafkaIQ's HTTP listener (metrics, leadership page) on a free port, not the default 9644
    # another broker on this machine may hold.
    BROKER_HTTP_PORT="$(free_port)"
    _broker_settings=("$@")
    _broker_launch
}

# Starts the broker of the last broker_start on its ports and data; waits until it listens.
_broker_launch() {
    local port=${BROKER_BOOTSTRAP##*:}
    case "$BROKER_KIND" in
        apache-kafka)
            "$_broker_lib_dir/../apache-kafka.sh" "$BROKER_DIR/kafka" "$port" \
                "$_broker_controller_port" "${_broker_settings[@]}" >>"$BROKER_DIR/broker.log" 2>&1 &
            ;;
        kafkaiq)
            if [[ -z "${KAFKAIQ_BIN:-}" || ! -x "$KAFKAIQ_BIN" ]]; then
                echo "broker_start: KAFKAIQ_BIN='${KAFKAIQ_BIN:-}' is not an executable" >&2
                return 1
            fi
            local args=(--override "listeners=PLAINTEXT://$BROKER_BOOTSTRAP"
                --override "advertised.listeners=PLAINTEXT://$BROKER_BOOTSTRAP"
                --override "log.dirs=$BROKER_DIR/data"
                --override "http.listener=127.0.0.1:$BROKER_HTTP_PORT")
            local kv
            for kv in "${_broker_settings[@]}"; do args+=(--override "$kv"); done
            RUST_LOG="${RUST_LOG:-info}" "$KAFKAIQ_BIN" "${args[@]}" >>"$BROKER_DIR/broker.log" 2>&1 &
            ;;
        *)
            echo "broker_start: unknown BROKER_UNDER_TEST=$BROKER_KIND" >&2
            return 1
            ;;
    esac
    BROKER_PID=$!
    local deadline=$((SECONDS + BROKER_STARTUP_TIMEOUT_S))
    until (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; do
        if ! kill -0 "$BROKER_PID" 2>/dev/null; then
            echo "broker_start: $BROKER_KIND exited before listening on $BROKER_BOOTSTRAP" >&2
            broker_log_tail
            return 1
        fi
        if ((SECONDS > deadline)); then
            echo "broker_start: $BROKER_KIND did not listen on $BROKER_BOOTSTRAP in time" >&2
            broker_log_tail
            return 1
        fi
        sleep 0.2
    done
    echo "broker: $BROKER_KIND serving $BROKER_BOOTSTRAP (pid $BROKER_PID, dir $BROKER_DIR)" >&2
}

# Stops the broker (as broker_stop does, failing on the same misbehaviour) and starts it again
# on the same ports and data. Not possible for an external broker.
broker_restart() {
    if [[ -z "${BROKER_PID:-}" ]]; then
        echo "broker_restart: no broker was started here" >&2
        return 1
    fi
    local dir=$BROKER_DIR
    KEEP_BROKER_DIR=1 broker_stop || return 1
    BROKER_DIR=$dir
    _broker_launch
}

broker_log_tail() {
    if [[ -n "${BROKER_DIR:-}" && -f "$BROKER_DIR/broker.log" ]]; then
        echo "---- last lines of $BROKER_KIND output ----" >&2
        tail -n "${1:-40}" "$BROKER_DIR/broker.log" >&2
        echo "----" >&2
    fi
}

broker_stop() {
    local problems=()
    if [[ -n "${BROKER_PID:-}" ]]; then
        local rc=0
        if kill -0 "$BROKER_PID" 2>/dev/null; then
            kill -TERM "$BROKER_PID" 2>/dev/null
            local deadline=$((SECONDS + BROKER_SHUTDOWN_TIMEOUT_S))
            while kill -0 "$BROKER_PID" 2>/dev/null && ((SECONDS < deadline)); do
                sleep 0.1
            done
            if kill -0 "$BROKER_PID" 2>/dev/null; then
                problems+=("did not stop within ${BROKER_SHUTDOWN_TIMEOUT_S}s of SIGTERM (killed)")
                kill -KILL "$BROKER_PID" 2>/dev/null
            fi
            wait "$BROKER_PID" 2>/dev/null || rc=$?
        else
            wait "$BROKER_PID" 2>/dev/null || rc=$?
            problems+=("exited (status $rc) before it was stopped")
        fi
        if [[ ${#problems[@]} -eq 0 ]] && ! _broker_clean_exit "$rc"; then
            problems+=("exited with status $rc after SIGTERM")
        fi
        if [[ -f "$BROKER_DIR/broker.log" ]] && grep -q 'panicked at' "$BROKER_DIR/broker.log"; then
            problems+=("panicked: $(grep -m1 'panicked at' "$BROKER_DIR/broker.log")")
        fi
    fi
    BROKER_PID=""
    local keep="${KEEP_BROKER_DIR:-}"
    if [[ ${#problems[@]} -gt 0 ]]; then
        local why
        for why in "${problems[@]}"; do
            echo "broker_stop: FAIL: $BROKER_KIND $why" >&2
        done
        broker_log_tail 60
        if [[ -n "${BROKER_DIR:-}" ]]; then
            echo "broker_stop: its data and log are kept in $BROKER_DIR" >&2
            keep=1
        fi
    fi
    if [[ -n "${BROKER_DIR:-}" && -z "$keep" ]]; then
        rm -rf "$BROKER_DIR"
    fi
    BROKER_DIR=""
    [[ ${#problems[@]} -eq 0 ]]
}

# A clean exit status after SIGTERM: 0, and for Apache Kafka also 143 (the JVM's status after it
# ran its shutdown hooks on SIGTERM). KafkaIQ handles SIGTERM itself, so 143 means it did not.
_broker_clean_exit() {
    [[ "$1" -eq 0 ]] && return 0
    [[ "$BROKER_KIND" == apache-kafka && "$1" -eq 143 ]]
}
