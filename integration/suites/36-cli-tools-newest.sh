#!/usr/bin/env bash
# The command-line tools suite (35-cli-tools.sh) again with Apache Kafka 4.4.0's tools, the
# newest release: clients and tools up to it must work unchanged. The checks are 4.1.1's; where
# the newer tools print differently (ConfigCommand's new home, the real log dirs of a current
# assignment, FeatureCommand's spacing) 35-cli-tools.sh accepts both.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
KAFKA_LIBS_VERSION=4.4.0 exec bash "$here/35-cli-tools.sh"
