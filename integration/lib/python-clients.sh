# The Python Kafka clients at pinned versions, in integration/.venv (git-ignored), installed from
# PyPI on first use (source this file, then call python_clients; it sets $python).
CONFLUENT_KAFKA_VERSION=2.16.1
KAFKA_PYTHON_VERSION=3.0.12

python_clients() {
    local root venv
    root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
    venv="$root/integration/.venv"
    python="$venv/bin/python"
    if "$python" -c "import confluent_kafka, kafka, sys
sys.exit(confluent_kafka.__version__ != '$CONFLUENT_KAFKA_VERSION' or kafka.__version__ != '$KAFKA_PYTHON_VERSION')" 2>/dev/null; then
        return 0
    fi
    echo "installing confluent-kafka $CONFLUENT_KAFKA_VERSION and kafka-python $KAFKA_PYTHON_VERSION into $venv" >&2
    if ! python3 -m venv "$venv" >&2; then
        # Debian's python3 splits venv support into python3-venv.
        if [[ $(id -u) -eq 0 ]]; then
            DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
            DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >&2
        else
            sudo -n env DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
            sudo -n env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >&2
        fi
        python3 -m venv "$venv" >&2
    fi
    "$venv/bin/pip" install -q --disable-pip-version-check \
        "confluent-kafka==$CONFLUENT_KAFKA_VERSION" "kafka-python==$KAFKA_PYTHON_VERSION" >&2
}
