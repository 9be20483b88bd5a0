#!/usr/bin/env bash
# Builds the Kafka Streams word count (integration/streams-wordcount) and prints the folder that
# holds its jar and every runtime jar it needs (Kafka Streams 4.1.1, kafka-clients, RocksDB,
# a log4j2 backend), for `java -cp "$(integration/streams-wordcount/build.sh)/*"
# kafkaiq.streams.WordCount ...`. tests/cluster_failover/streams.rs calls it; run-all.sh runs
# it before the cargo tests.
#
# The first call fetches the jars from Maven Central and compiles the app into
# integration/.cache/streams-wordcount (git-ignored); later calls only print the path. The
# folder is rebuilt when pom.xml or a source file changes (their hash is kept in it). Concurrent
# callers are serialised by a lock so a half-built folder is never handed out. Needs no stdin
# (CI=true, batch mode). Everything except the final path goes to stderr.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cache="$here/../.cache"
out="$cache/streams-wordcount"
mkdir -p "$cache"
cache="$(cd "$cache" && pwd)"
out="$cache/streams-wordcount"

sources_hash() {
    (cd "$here" && find pom.xml src -type f | LC_ALL=C sort | xargs sha256sum) | sha256sum | cut -d' ' -f1
}
want="$(sources_hash)"
marker="$out/.complete"

if [[ "$(cat "$marker" 2>/dev/null)" != "$want" ]]; then
    exec 9>"$out.lock"
    flock 9
    if [[ "$(cat "$marker" 2>/dev/null)" != "$want" ]]; then
        command -v mvn >/dev/null || { echo "streams-wordcount: mvn (Maven) is required" >&2; exit 1; }
        rm -rf "$out" "$cache/streams-wordcount-build"
        echo "streams-wordcount: building into $out" >&2
        mvn -q -B -f "$here/pom.xml" -Dbuild.dir="$cache/streams-wordcount-build" \
            package dependency:copy-dependencies \
            -DoutputDirectory="$out" -DincludeScope=runtime </dev/null >&2
        cp "$cache/streams-wordcount-build/streams-wordcount-1.jar" "$out/"
        ls "$out"/kafka-streams-4.1.1.jar "$out"/kafka-clients-4.1.1.jar "$out"/rocksdbjni-*.jar >/dev/null
        echo "$want" >"$marker"
    fi
    exec 9>&-
fi
echo "$out"
