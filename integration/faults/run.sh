#!/usr/bin/env bash
# Fault injection against a cluster, checked like Jepsen (see README.md here):
#
#   integration/faults/run.sh [--broker kafkaiq|kafka] [--full] [--seed N] [driver options]
#
# Builds the driver and the broker (release), fetches Apache Kafka 4.1.1's jars (the broker, and
# the Java client for its producer and consumer workloads), and starts `faults`: a 3-node (or
# `--nodes 5`) cluster (broker and controller each), librdkafka and Java workloads, the nemesis
# on the seed's schedule, the checker. The last line is the checker's:
#   faults: F injected, A acknowledged, L lost, D duplicates, I inconsistent offsets,
#   S skipped polls, U unseen, seed N: valid
# and the exit status is 0 only then.
#
# Without --full: the short run (13 faults, one of each kind, on one broker, a few minutes).
# With --full: the benchmark (100 faults per kind by default, KafkaIQ and Apache Kafka
# alternating in blocks of the same schedule), written to benches/results/faults-DATE.md.
# --seed defaults to a fresh one, printed in the last line so a failing run can be replayed.
#
# Needs root: cuts are nftables rules and added latency iptables rules feeding an NFQUEUE (both
# tools installed with apt-get when missing); the disk faults mount a tmpfs per log dir. Binds
# 127.0.0.1 only.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
cd "$root"

broker=kafkaiq
full=0
seed=""
rest=()
while [[ $# -gt 0 ]]; do
    case "$1" in
        --broker) broker="${2:?--broker takes kafkaiq or kafka}"; shift 2 ;;
        --full) full=1; shift ;;
        --seed) seed="${2:?--seed takes a number}"; shift 2 ;;
        -h | --help) awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "${BASH_SOURCE[0]}"; exit 0 ;;
        *) rest+=("$1"); shift ;;
    esac
done
case "$broker" in kafkaiq | kafka) ;; *) echo "run.sh: --broker takes kafkaiq or kafka" >&2; exit 2 ;; esac
seed="${seed:-$(( (RANDOM << 15) | RANDOM ))}"

if [[ $(id -u) != 0 ]]; then
    echo "run.sh: needs root (nftables rules for network faults, a tmpfs per log dir for disk faults)" >&2
    exit 1
fi
for tool in nft:nftables iptables:iptables; do
    if ! command -v "${tool%%:*}" >/dev/null; then
        echo "run.sh: installing ${tool#*:}" >&2
        (apt-get install -y "${tool#*:}" >/dev/null 2>&1 ||
            { apt-get update >/dev/null && apt-get install -y "${tool#*:}" >/dev/null; })
    fi
done

jobs="${CARGO_BUILD_JOBS:-2}"
# The same build as run-all.sh's (the whole workspace: a narrower one resolves other
# features and compiles again), so after it this is a no-op.
cargo build --release -j "$jobs" --workspace --bins --examples >&2
target_dir="$(cargo metadata --format-version 1 --no-deps |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')"
# Apache Kafka's jars: the broker when it runs, and the Java client's workloads for both.
args=(--kafkaiq-bin "$target_dir/release/kafkaiq" --seed "$seed"
    --kafka-libs "$("$root/integration/kafka-libs.sh")")
if [[ $full == 1 ]]; then
    mkdir -p benches/results
    args+=(--full --broker both --results "benches/results/faults-$(date -u +%Y-%m-%d).md")
else
    args+=(--broker "$broker")
fi
exec "$target_dir/release/faults" "${args[@]}" "${rest[@]}"
