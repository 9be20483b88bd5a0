#!/usr/bin/env bash
# Prints the path of a folder holding Apache Kafka's jars (kafka_2.13 broker, kafka-tools,
# kafka-clients, log4j2 backend and all their runtime dependencies), for
# `java -cp "$(integration/kafka-libs.sh)/*" MAINCLASS ...`. The version is 4.1.1, the release
# the suites compare against, unless KAFKA_LIBS_VERSION names another (4.4.0: the newest tools).
#
# The first call fetches them from Maven Central with integration/kafka-libs/pom.xml into
# integration/.cache/kafka-libs (4.1.1) or kafka-libs-VERSION (git-ignored); later calls only
# print the path. Concurrent
# callers are serialised by a lock so a half-copied folder is never handed out.
# Everything except the final path goes to stderr.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cache="$here/.cache"
version="${KAFKA_LIBS_VERSION:-4.1.1}"
libs="$cache/kafka-libs"
if [[ "$version" != 4.1.1 ]]; then
    libs="$cache/kafka-libs-$version"
fi
done_marker="$libs/.complete"

mkdir -p "$cache"
if [[ ! -f "$done_marker" ]]; then
    exec 9>"$libs.lock"
    flock 9
    if [[ ! -f "$done_marker" ]]; then
        command -v mvn >/dev/null || { echo "kafka-libs.sh: mvn (Maven) is required" >&2; exit 1; }
        rm -rf "$libs"
        echo "kafka-libs.sh: fetching Apache Kafka $version jars into $libs" >&2
        mvn -q -B -f "$here/kafka-libs/pom.xml" dependency:copy-dependencies \
            -Dkafka.version="$version" -DoutputDirectory="$libs" -DincludeScope=runtime >&2
        ls "$libs/kafka_2.13-$version.jar" "$libs/kafka-tools-$version.jar" \
            "$libs/kafka-clients-$version.jar" >/dev/null
        touch "$done_marker"
    fi
    exec 9>&-
fi
echo "$libs"
