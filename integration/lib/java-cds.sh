# Class data sharing for the short-lived JVMs of Kafka's command-line tools. Sourced by the
# suites that start many of them (35-cli-tools, 36-cli-tools-newest, 37-cluster-cli,
# 38-cli-sasl): most of such a JVM's start is loading and verifying the same few thousand
# classes of Kafka's jars, which a class data archive maps ready-made instead (about 0.5-1 s
# less per tool run on a 2-core machine).
#
#   kafka_cds_opts LIBS    sets the array CDS_OPTS to the java options that use the archive of
#                          the jars in LIBS (integration/kafka-libs.sh), made on first use
#
# The archive (integration/.cache/cds/<libs folder>-<java -version checksum>.jsa, git-ignored
# with the rest of .cache) is dumped at the exit of one TopicCommand run against a closed port,
# which loads the admin client, the network layer and the protocol's message classes. It holds
# only a copy of classes from those jars: a tool run with it behaves as without it. A JVM that
# cannot use it (another JDK build, changed jars) starts as it would without one, only slower;
# the -Xlog options keep its warning about that out of the tool output the suites check. When
# no archive can be made, that is said on stderr and CDS_OPTS stays empty.
kafka_cds_opts() {
    local libs="$1" key archive tmp
    CDS_OPTS=()
    key="$(java -version 2>&1 | cksum | cut -d' ' -f1)"
    archive="$(dirname "$libs")/cds/$(basename "$libs")-$key.jsa"
    if [[ ! -f "$archive" ]]; then
        mkdir -p "$(dirname "$archive")"
        tmp="$archive.tmp.$$"
        printf 'request.timeout.ms=500\ndefault.api.timeout.ms=1000\n' >"$tmp.properties"
        # Exits 1 (nothing listens on port 1); what matters is the archive written at exit.
        java -XX:ArchiveClassesAtExit="$tmp" -Xmx256m -XX:TieredStopAtLevel=1 -cp "$libs/*" \
            org.apache.kafka.tools.TopicCommand --bootstrap-server 127.0.0.1:1 --list \
            --command-config "$tmp.properties" >"$tmp.log" 2>&1 || true
        if [[ -s "$tmp" ]]; then
            mv "$tmp" "$archive"
        else
            echo "java-cds: no class data archive for $libs (tools start without one):" >&2
            tail -5 "$tmp.log" >&2
        fi
        rm -f "$tmp" "$tmp.properties" "$tmp.log"
    fi
    if [[ -f "$archive" ]]; then
        CDS_OPTS=(-XX:SharedArchiveFile="$archive" -Xlog:cds=off -Xlog:cds+dynamic=off)
    fi
}
