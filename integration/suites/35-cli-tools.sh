#!/usr/bin/env bash
# Kafka 4.1.1's command-line tools against the broker, checking what they print:
#
# - TopicCommand: --create (with --config), --describe, --alter --partitions, --list,
#   --describe --under-replicated-partitions / --unavailable-partitions (nothing to report on one
#   node), a second --create of the same topic fails, --delete.
# - ConfigCommand (kafka-configs): topic --describe, --alter --add-config / --delete-config, an
#   invalid value refused, broker --describe --all; dynamic broker configs per broker
#   (--entity-name 1) and cluster default (--entity-default) added, described with their
#   sources and synonyms, deleted, and a key that cannot change at runtime refused. Users'
#   SCRAM credentials: added per mechanism, two in one command refused (DUPLICATE_RESOURCE, as
#   Kafka refuses), too few iterations refused, described, deleted, a missing one not deleted.
# - ConsoleProducer with keys and headers, ConsoleConsumer printing partition, offset, headers and
#   key.
# - GetOffsetShell: latest (-1), earliest (-2) and max timestamp (-3).
# - DeleteRecordsCommand: the new low watermark, then GetOffsetShell sees it; on a compact-only
#   topic the deletion is refused with POLICY_VIOLATION.
# - LeaderElectionCommand, preferred and unclean, with --all-topic-partitions (nothing to report:
#   partitions that need no election are left out), --topic/--partition and --path-to-json-file
#   (the only replica already leads; unknown topics and partitions fail with the controller's
#   messages). On one node no election can move a leader; the multi-broker outcomes ("Successfully
#   completed leader election", PREFERRED_LEADER_NOT_AVAILABLE) wait for a suite on a cluster.
# - ReassignPartitionsCommand --list (none in progress), --generate, --execute --throttle (to the
#   current replicas: accepted, nothing moves, the broker throttle rates set), --verify (which
#   clears broker and topic throttles), --cancel (nothing active) and an unknown broker refused
#   by the tool.
# - LogDirsCommand (DescribeLogDirs), FeatureCommand describe (ApiVersions features), ClusterTool
#   cluster-id, EndToEndLatency.
# - AclCommand --list, --add and --remove without an authorizer: SecurityDisabledException, as
#   Kafka answers without `authorizer.class.name`.
#
# Broker selection as in integration/lib/broker.sh (BROKER_UNDER_TEST=apache-kafka checks the
# suite itself against Apache Kafka).
set -euo pipefail

root="${KAFKAIQ_ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}"
KAFKAIQ_BIN="${KAFKAIQ_BIN:-$root/target/release/kafkaiq}"
# shellcheck source=../lib/broker.sh
source "$root/integration/lib/broker.sh"

libs="$("$root/integration/kafka-libs.sh")"
# shellcheck source=../lib/java-cds.sh
source "$root/integration/lib/java-cds.sh"
kafka_cds_opts "$libs"
work="$(mktemp -d "${TMPDIR:-/tmp}/cli-suite.XXXXXX")"
cleanup() {
    local status=$?
    broker_stop || status=1
    rm -rf "$work"
    exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

fail() {
    echo "35-cli-tools: FAIL: $*" >&2
    broker_log_tail 60
    exit 1
}
step() { echo "35-cli-tools: $*" >&2; }

# Runs a Kafka tool's main class; its stdout and stderr (minus SLF4J noise) go to $work/out and
# its exit status to $rc. C1 JIT only, and classes mapped from the class data archive
# (lib/java-cds.sh): these are short-lived JVMs.
run() {
    rc=0
    java "${CDS_OPTS[@]}" -Xmx256m -XX:TieredStopAtLevel=1 -cp "$libs/*" "$@" >"$work/out" 2>&1 || rc=$?
    grep -v '^SLF4J' "$work/out" >"$work/out.clean" || true
    if [[ "${KAFKA_LIBS_VERSION:-4.1.1}" != 4.1.1 ]]; then
        # Newer ReassignPartitionsCommands print each current replica's real log dir where
        # 4.1.1 prints "any"; the checks below are written for 4.1.1's output.
        sed -i -E 's/"log_dirs":\["\/[^"]*"\]/"log_dirs":["any"]/g' "$work/out.clean"
    fi
    mv "$work/out.clean" "$work/out"
}
ok() {
    run "$@"
    [[ $rc -eq 0 ]] || { cat "$work/out" >&2; fail "exit $rc: ${*:1:4}"; }
}
expect_line() { grep -qxF -- "$1" "$work/out" || { cat "$work/out" >&2; fail "missing line: $1"; }; }
expect_text() { grep -qF -- "$1" "$work/out" || { cat "$work/out" >&2; fail "missing text: $1"; }; }
expect_no_text() { ! grep -qF -- "$1" "$work/out" || { cat "$work/out" >&2; fail "unexpected text: $1"; }; }

T=org.apache.kafka.tools
broker_start "auto.create.topics.enable=true"
B="$BROKER_BOOTSTRAP"

step "TopicCommand"
ok $T.TopicCommand --bootstrap-server "$B" --create --topic cli --partitions 2 \
    --replication-factor 1 --config retention.ms=3600000
expect_line "Created topic cli."
run $T.TopicCommand --bootstrap-server "$B" --create --topic cli --partitions 2
[[ $rc -ne 0 ]] || fail "creating an existing topic succeeded"
expect_text "already exists"
ok $T.TopicCommand --bootstrap-server "$B" --alter --topic cli --partitions 3
ok $T.TopicCommand --bootstrap-server "$B" --describe --topic cli
expect_text "PartitionCount: 3"
expect_text "ReplicationFactor: 1"
expect_text "retention.ms=3600000"
for p in 0 1 2; do
    grep -qP "^\tTopic: cli\tPartition: $p\tLeader: 1\tReplicas: 1\tIsr: 1" "$work/out" ||
        { cat "$work/out" >&2; fail "partition $p not led by 1 with ISR [1]"; }
done
ok $T.TopicCommand --bootstrap-server "$B" --create --topic cmp --partitions 1 \
    --config cleanup.policy=compact
ok $T.TopicCommand --bootstrap-server "$B" --list
expect_line cli
expect_line cmp
for flag in --under-replicated-partitions --unavailable-partitions; do
    ok $T.TopicCommand --bootstrap-server "$B" --describe "$flag"
    [[ ! -s "$work/out" ]] || { cat "$work/out" >&2; fail "$flag reported partitions"; }
done

step "ConfigCommand"
# ConfigCommand moved from the broker jar to kafka-tools after 4.1.
config_command=kafka.admin.ConfigCommand
if javap -cp "$libs/*" org.apache.kafka.tools.ConfigCommand >/dev/null 2>&1; then
    config_command=org.apache.kafka.tools.ConfigCommand
fi
C="$config_command --bootstrap-server $B"
ok $C --alter --entity-type topics --entity-name cli --add-config max.message.bytes=2000000
ok $C --alter --entity-type topics --entity-name cli --delete-config retention.ms
ok $C --describe --entity-type topics --entity-name cli
expect_text "Dynamic configs for topic cli are:"
expect_text "max.message.bytes=2000000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:max.message.bytes=2000000"
expect_no_text "retention.ms"
run $C --alter --entity-type topics --entity-name cli --add-config retention.ms=abc
[[ $rc -ne 0 ]] || fail "retention.ms=abc accepted"
expect_text "InvalidConfigurationException: Invalid value abc for configuration retention.ms"
ok $C --describe --entity-type topics --entity-name cli --all
expect_text "retention.ms=604800000 sensitive=false"
expect_text "cleanup.policy=delete sensitive=false"
expect_text "compression.zstd.level=3 sensitive=false"
expect_text "leader.replication.throttled.replicas= sensitive=false synonyms={}"
expect_text "local.retention.ms=-2 sensitive=false"
ok $C --describe --entity-type brokers --entity-name 1 --all
expect_text "log.retention.hours=168 sensitive=false"
expect_text "num.partitions=1 sensitive=false"
# Dynamic broker configs: per broker and the cluster default, then gone again.
ok $C --alter --entity-type brokers --entity-name 1 --add-config message.max.bytes=2000000
ok $C --alter --entity-type brokers --entity-default --add-config log.retention.ms=7200000
ok $C --describe --entity-type brokers --entity-name 1
expect_text "Dynamic configs for broker 1 are:"
expect_text "message.max.bytes=2000000 sensitive=false synonyms={DYNAMIC_BROKER_CONFIG:message.max.bytes=2000000, DEFAULT_CONFIG:message.max.bytes=1048588}"
ok $C --describe --entity-type brokers --entity-default
expect_text "Default configs for brokers in the cluster are:"
expect_text "log.retention.ms=7200000 sensitive=false synonyms={DYNAMIC_DEFAULT_BROKER_CONFIG:log.retention.ms=7200000"
expect_no_text "message.max.bytes"
run $C --alter --entity-type brokers --entity-name 1 --add-config log.dirs=/tmp/elsewhere
[[ $rc -ne 0 ]] || fail "log.dirs changed at runtime"
expect_text "Cannot update these configs dynamically"
ok $C --alter --entity-type brokers --entity-name 1 --delete-config message.max.bytes
ok $C --alter --entity-type brokers --entity-default --delete-config log.retention.ms
ok $C --describe --entity-type brokers --entity-name 1
expect_no_text "message.max.bytes="

step "ConfigCommand: users' SCRAM credentials"
# Kept in the metadata log (AlterUserScramCredentials through the controller); one alteration
# per user and request, so both mechanisms in one command are refused as Kafka refuses them.
ok $C --alter --entity-type users --entity-name alice --add-config 'SCRAM-SHA-256=[iterations=8192,password=alice-secret]'
expect_line "Completed updating config for user alice."
ok $C --alter --entity-type users --entity-name alice --add-config 'SCRAM-SHA-512=[password=alice-512]'
run $C --alter --entity-type users --entity-name bob --add-config 'SCRAM-SHA-256=[password=b],SCRAM-SHA-512=[password=b]'
[[ $rc -ne 0 ]] || fail "two alterations of one user in one request were accepted"
expect_text "DuplicateResourceException: A user credential cannot be altered twice in the same request"
run $C --alter --entity-type users --entity-name bob --add-config 'SCRAM-SHA-256=[iterations=100,password=b]'
[[ $rc -ne 0 ]] || fail "100 iterations were accepted"
ok $C --describe --entity-type users --entity-name alice
expect_line "SCRAM credential configs for user-principal 'alice' are SCRAM-SHA-256=iterations=8192, SCRAM-SHA-512=iterations=4096"
ok $C --describe --entity-type users
expect_line "SCRAM credential configs for user-principal 'alice' are SCRAM-SHA-256=iterations=8192, SCRAM-SHA-512=iterations=4096"
expect_no_text "'bob'"
ok $C --alter --entity-type users --entity-name alice --delete-config SCRAM-SHA-512
ok $C --describe --entity-type users --entity-name alice
expect_line "SCRAM credential configs for user-principal 'alice' are SCRAM-SHA-256=iterations=8192"
run $C --alter --entity-type users --entity-name alice --delete-config SCRAM-SHA-512
[[ $rc -ne 0 ]] || fail "deleting a missing credential succeeded"
expect_text "ResourceNotFoundException: Attempt to delete a user credential that does not exist"

step "ConsoleProducer / ConsoleConsumer with keys and headers"
printf 'k1\tv1\nk1\tv2\nk1\tv3\n' >"$work/plain"
ok $T.ConsoleProducer --bootstrap-server "$B" --topic cli --property parse.key=true \
    <"$work/plain"
printf 'h1:x,h2:y\tk1\tv4\n' >"$work/headers"
ok $T.ConsoleProducer --bootstrap-server "$B" --topic cli --property parse.key=true \
    --property parse.headers=true <"$work/headers"
ok $T.consumer.ConsoleConsumer --bootstrap-server "$B" --topic cli --from-beginning \
    --max-messages 4 --timeout-ms 20000 --property print.key=true --property print.headers=true \
    --property print.partition=true --property print.offset=true
expect_text "Processed a total of 4 messages"
# One key: one partition, in produce order.
p="$(grep -oP '^Partition:\K[0-9]+(?=\tOffset:0\t)' "$work/out")" || fail "no record at offset 0"
expect_line "Partition:$p	Offset:0	NO_HEADERS	k1	v1"
expect_line "Partition:$p	Offset:1	NO_HEADERS	k1	v2"
expect_line "Partition:$p	Offset:2	NO_HEADERS	k1	v3"
expect_line "Partition:$p	Offset:3	h1:x,h2:y	k1	v4"

step "GetOffsetShell"
ok $T.GetOffsetShell --bootstrap-server "$B" --topic cli
for q in 0 1 2; do
    if [[ $q -eq $p ]]; then expect_line "cli:$q:4"; else expect_line "cli:$q:0"; fi
done
ok $T.GetOffsetShell --bootstrap-server "$B" --topic cli --time -2
expect_line "cli:$p:0"
ok $T.GetOffsetShell --bootstrap-server "$B" --topic cli --time -3
expect_line "cli:$p:3"

step "DeleteRecordsCommand"
printf '{"partitions":[{"topic":"cli","partition":%d,"offset":2}],"version":1}\n' "$p" \
    >"$work/delete.json"
ok $T.DeleteRecordsCommand --bootstrap-server "$B" --offset-json-file "$work/delete.json"
expect_line "partition: cli-$p	low_watermark: 2"
ok $T.GetOffsetShell --bootstrap-server "$B" --topic cli --time -2
expect_line "cli:$p:2"
ok $T.ConsoleProducer --bootstrap-server "$B" --topic cmp --property parse.key=true <"$work/plain"
echo '{"partitions":[{"topic":"cmp","partition":0,"offset":1}],"version":1}' >"$work/delete.json"
run $T.DeleteRecordsCommand --bootstrap-server "$B" --offset-json-file "$work/delete.json"
expect_text "partition: cmp-0	error: org.apache.kafka.common.errors.PolicyViolationException"

step "LeaderElectionCommand"
L=$T.LeaderElectionCommand
for type in preferred unclean; do
    ok $L --bootstrap-server "$B" --election-type "$type" --all-topic-partitions
    [[ ! -s "$work/out" ]] || { cat "$work/out" >&2; fail "--all-topic-partitions ($type) printed something"; }
    ok $L --bootstrap-server "$B" --election-type "$type" --topic cli --partition 0
    expect_line "Valid replica already elected for partitions cli-0"
done
cat >"$work/elect.json" <<'JSON'
{"partitions": [{"topic": "cli", "partition": 1}, {"topic": "cli", "partition": 2}]}
JSON
ok $L --bootstrap-server "$B" --election-type preferred --path-to-json-file "$work/elect.json"
grep -qP '^Valid replica already elected for partitions cli-[12], cli-[12]$' "$work/out" ||
    { cat "$work/out" >&2; fail "--path-to-json-file: cli-1 and cli-2 need no election"; }
cat >"$work/elect.json" <<'JSON'
{"partitions": [{"topic": "cli", "partition": 0}, {"topic": "cli", "partition": 9},
                {"topic": "nosuch", "partition": 0}]}
JSON
for type in preferred unclean; do
    TYPE="${type^^}"
    run $L --bootstrap-server "$B" --election-type "$type" --path-to-json-file "$work/elect.json"
    [[ $rc -ne 0 ]] || { cat "$work/out" >&2; fail "unknown partitions ($type) succeeded"; }
    expect_line "Valid replica already elected for partitions cli-0"
    expect_line "Error completing leader election ($TYPE) for partition: cli-9: org.apache.kafka.common.errors.UnknownTopicOrPartitionException: No such partition as cli-9"
    expect_line "Error completing leader election ($TYPE) for partition: nosuch-0: org.apache.kafka.common.errors.UnknownTopicOrPartitionException: No such topic as nosuch"
    expect_text "2 replica(s) could not be elected"
done

step "ReassignPartitionsCommand"
R=$T.reassign.ReassignPartitionsCommand
ok $R --bootstrap-server "$B" --list
expect_line "No partition reassignments found."
echo '{"version":1,"topics":[{"topic":"cli"}]}' >"$work/move.json"
ok $R --bootstrap-server "$B" --generate --topics-to-move-json-file "$work/move.json" \
    --broker-list 1
current='{"version":1,"partitions":[{"topic":"cli","partition":0,"replicas":[1],"log_dirs":["any"]},{"topic":"cli","partition":1,"replicas":[1],"log_dirs":["any"]},{"topic":"cli","partition":2,"replicas":[1],"log_dirs":["any"]}]}'
expect_line "Current partition replica assignment"
expect_line "Proposed partition reassignment configuration"
[[ "$(grep -cxF "$current" "$work/out")" -eq 2 ]] ||
    { cat "$work/out" >&2; fail "--generate: current and proposed are not [1] for every partition"; }
echo '{"version":1,"partitions":[{"topic":"cli","partition":0,"replicas":[1]}]}' \
    >"$work/reassign.json"
ok $R --bootstrap-server "$B" --execute --reassignment-json-file "$work/reassign.json" \
    --throttle 10000000
expect_line '{"version":1,"partitions":[{"topic":"cli","partition":0,"replicas":[1],"log_dirs":["any"]}]}'
expect_text "The inter-broker throttle limit was set to 10000000 B/s"
expect_line "Save this to use as the --reassignment-json-file option during rollback"
expect_line "Successfully started partition reassignment for cli-0"
ok $R --bootstrap-server "$B" --list
expect_line "No partition reassignments found."
# --verify also clears replication throttles: broker and topic config deletes.
ok $R --bootstrap-server "$B" --verify --reassignment-json-file "$work/reassign.json"
expect_line "Reassignment of partition cli-0 is completed."
expect_line "Clearing broker-level throttles on broker 1"
expect_line "Clearing topic-level throttles on topic cli"
ok $C --describe --entity-type brokers --entity-name 1
expect_no_text "throttled.rate"
ok $R --bootstrap-server "$B" --cancel --reassignment-json-file "$work/reassign.json"
expect_line "None of the specified partition reassignments are active."
echo '{"version":1,"partitions":[{"topic":"cli","partition":0,"replicas":[2]}]}' \
    >"$work/unknown.json"
run $R --bootstrap-server "$B" --execute --reassignment-json-file "$work/unknown.json"
[[ $rc -ne 0 ]] || { cat "$work/out" >&2; fail "a reassignment to an unknown broker succeeded"; }
expect_text "Unknown broker id 2"

step "LogDirsCommand, FeatureCommand, ClusterTool"
ok $T.LogDirsCommand --bootstrap-server "$B" --describe --topic-list cli
grep -qP "\{\"partition\":\"cli-$p\",\"size\":[1-9][0-9]*,\"offsetLag\":0,\"isFuture\":false\}" \
    "$work/out" || { cat "$work/out" >&2; fail "LogDirsCommand: no size for cli-$p"; }
expect_text '"partition":"cli-0"'
ok $T.FeatureCommand --bootstrap-server "$B" describe
grep -qP '^Feature: metadata.version\s+SupportedMinVersion: \S+\s+SupportedMaxVersion: 4\.1-IV1\s+FinalizedVersionLevel: 4\.1-IV1\s' \
    "$work/out" || { cat "$work/out" >&2; fail "FeatureCommand: metadata.version not 4.1-IV1"; }
ok $T.ClusterTool cluster-id --bootstrap-server "$B"
grep -qP '^Cluster ID: [A-Za-z0-9_-]{22}$' "$work/out" || { cat "$work/out" >&2; fail "cluster id"; }

step "EndToEndLatency"
ok $T.EndToEndLatency "$B" latency 500 1 100
grep -qP '^Avg latency: [0-9.]+ ms$' "$work/out" || { cat "$work/out" >&2; fail "no average"; }
expect_text "Percentiles: 50th = "

step "AclCommand without an authorizer"
# No authorizer is configured: every ACL request is answered SECURITY_DISABLED, and the tool
# says so (rather than that the broker does not know the API).
A="$T.AclCommand --bootstrap-server $B"
run $A --list
[[ $rc -ne 0 ]] || fail "kafka-acls --list succeeded without an authorizer"
expect_text "Error while executing ACL command"
expect_text "SecurityDisabledException: No Authorizer is configured on the broker"
run $A --add --allow-principal User:alice --operation Read --topic cli
[[ $rc -ne 0 ]] || fail "kafka-acls --add succeeded without an authorizer"
# (the 4.4 tools print "... configured on the broker" here; 4.1.1 prints the broker's message)
expect_text "SecurityDisabledException: No Authorizer is configured"
run $A --remove --force --allow-principal User:alice --operation Read --topic cli
[[ $rc -ne 0 ]] || fail "kafka-acls --remove succeeded without an authorizer"
expect_text "SecurityDisabledException: No Authorizer is configured"

step "TopicCommand --delete"
ok $T.TopicCommand --bootstrap-server "$B" --delete --topic cli
deadline=$((SECONDS + 30))
while :; do
    ok $T.TopicCommand --bootstrap-server "$B" --list
    grep -qxF cli "$work/out" || break
    ((SECONDS < deadline)) || fail "cli still listed after --delete"
    sleep 1
done
expect_line cmp

step "ok"
