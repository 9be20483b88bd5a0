# Python packages at pinned versions in integration/.venv (git-ignored), installed from PyPI on
# first use. Source this file, then:
#   python_venv      creates the venv if need be (installing python3-venv where Debian splits
#                    it out); sets $venv and $python
#   python_clients   confluent-kafka and kafka-python at the versions below, in that venv
CONFLUENT_KAFKA_VERSION=2.16.1
KAFKA_PYTHON_VERSION=3.0.12

python_venv() {
    venv="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/.venv"
    python="$venv/bin/python"
    [[ -x "$python" ]] && return 0
    if ! python3 -m venv "$venv" >&2; then
        if [[ $(id -u) -eq 0 ]]; then
            DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
            DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >&2
        else
            sudo -n env DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
            sudo -n env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >&2
        fi
        python3 -m venv "$venv" >&2
    fi
}

python_clients() {
    python_venv
    if "$python" -c "import confluent_kafka, kafka, sys
sys.exit(confluent_kafka.__version__ != '$CONFLUENT_KAFKA_VERSION' or kafka.__version__ != '$KAFKA_PYTHON_VERSION')" 2>/dev/null; then
        return 0
    fi
    echo "installing confluent-kafka $CONFLUENT_KAFKA_VERSION and kafka-python $KAFKA_PYTHON_VERSION into $venv" >&2
    "$venv/bin/pip" install -q --disable-pip-version-check \
        "confluent-kafka==$CONFLUENT_KAFKA_VERSION" "kafka-python==$KAFKA_PYTHON_VERSION" >&2
}
