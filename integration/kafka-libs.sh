#!/usr/bin/env bash
# Prints the path of a folder holding Apache Kafka 4.1.1's jars (kafka_2.13 broker, kafka-tools,
# kafka-clients, log4j2 backend and all their runtime dependencies), for
# `java -cp "$(integration/kafka-libs.sh)/*" MAINCLASS ...`.
#
# The first call fetches them from Maven Central with integration/kafka-libs/pom.xml into
# integration/.cache/kafka-libs (git-ignored); later calls only print the path. Concurrent
# callers are serialised by a lock so a half-copied folder is never handed out.
# Everything except the final path goes to stderr.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cache="$here/.cache"
libs="$cache/kafka-libs"
done_marker="$libs/.complete"

mkdir -p "$cache"
if [[ ! -f "$done_marker" ]]; then
    exec 9>"$cache/kafka-libs.lock"
    flock 9
    if [[ ! -f "$done_marker" ]]; then
        command -v mvn >/dev/null || { echo "kafka-libs.sh: mvn (Maven) is required" >&2; exit 1; }
        rm -rf "$libs"
        echo "kafka-libs.sh: fetching Apache Kafka 4.1.1 jars into $libs" >&2
        mvn -q -B -f "$here/kafka-libs/pom.xml" dependency:copy-dependencies \
            -DoutputDirectory="$libs" -DincludeScope=runtime >&2
        ls "$libs"/kafka_2.13-4.1.1.jar "$libs"/kafka-tools-4.1.1.jar \
            "$libs"/kafka-clients-4.1.1.jar >/dev/null
        touch "$done_marker"
    fi
    exec 9>&-
fi
echo "$libs"
