#!/usr/bin/env bash
# Prints the path of kcat (Debian's, linked to librdkafka 2.0.2), installing it with apt-get
# first when it is missing, for cargo tests that run it (tests/clusters/follower_fetch_cluster.rs); the
# suites install it the same way. Everything except the final path goes to stderr.
set -euo pipefail

if ! command -v kcat >/dev/null; then
    echo "kcat.sh: installing kcat" >&2
    if [[ $(id -u) -eq 0 ]]; then
        DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq kcat >&2
    else
        sudo -n env DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
        sudo -n env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq kcat >&2
    fi
fi
command -v kcat
