#!/usr/bin/env bash
# Kafka 4.1.1's command-line tools with --command-config against one node whose client listener
# is SASL_PLAINTEXT (PLAIN, SCRAM-SHA-256 and OAUTHBEARER with Kafka's unsecured validator) with
# the StandardAuthorizer, from the same properties for KafkaIQ and Apache Kafka:
#
# - The admin (PLAIN, from the listener's JAAS config, a super user) creates SCRAM users with
#   kafka-configs (--entity-type users) and grants alice ALL on the topics and groups prefixed
#   `orders` / `readers` with kafka-acls (--add, --list).
# - alice (SCRAM-SHA-256) creates her topic with kafka-topics, produces with
#   kafka-console-producer and reads back with kafka-console-consumer in her group.
# - bob (SCRAM-SHA-256, no ACL) is refused: his produce fails with TopicAuthorizationException,
#   kafka-acls --list with ClusterAuthorizationException, his topics list is empty.
# - A wrong password fails to authenticate.
# - OAUTHBEARER with the Java client's unsecured token (unsecuredLoginStringClaim_sub): the
#   token's subject is the principal, so sub=alice has alice's ACLs and sub=bob is refused;
#   with connections.max.reauth.ms=3000 for the mechanism, a producer that sends for 8 s
#   re-authenticates on its connection (KIP-368) and every record arrives.
#
# BROKER_UNDER_TEST=apache-kafka runs the same checks against Apache Kafka 4.1.1.
set -euo pipefail

root="${KAFKAIQ_ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}"
KAFKAIQ_BIN="${KAFKAIQ_BIN:-$root/target/release/kafkaiq}"
name=38-cli-sasl
# shellcheck source=../lib/broker.sh
source "$root/integration/lib/broker.sh"
libs="$("$root/integration/kafka-libs.sh")"
# shellcheck source=../lib/java-cds.sh
source "$root/integration/lib/java-cds.sh"
kafka_cds_opts "$libs"
work="$(mktemp -d "${TMPDIR:-/tmp}/cli-sasl.XXXXXX")"
pid=""
cleanup() {
    local status=$?
    if [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null; then
        kill "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    fi
    rm -rf "$work"
    exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

step() { echo "$name: $*" >&2; }
fail() {
    echo "$name: FAIL: $*" >&2
    tail -n 40 "$work/broker.log" >&2 || true
    exit 1
}

port="$(free_port)"
cport="$(free_port)"
iport="$(free_port)"
hport="$(free_port)"
B="127.0.0.1:$port"
jaas='org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" password="admin-secret" user_admin="admin-secret";'
settings=(
    # Clients on SASL_PLAINTEXT; the inter-broker listener (INTERNAL) and the controller's are
    # PLAINTEXT (KafkaIQ's inter-node traffic is PLAINTEXT only).
    "listeners=SASL_PLAINTEXT://$B,INTERNAL://127.0.0.1:$iport,CONTROLLER://127.0.0.1:$cport"
    "advertised.listeners=SASL_PLAINTEXT://$B,INTERNAL://127.0.0.1:$iport"
    "listener.security.protocol.map=CONTROLLER:PLAINTEXT,INTERNAL:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT"
    "inter.broker.listener.name=INTERNAL"
    "sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256,OAUTHBEARER"
    "listener.name.sasl_plaintext.plain.sasl.jaas.config=$jaas"
    "listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;"
    "listener.name.sasl_plaintext.oauthbearer.sasl.jaas.config=org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;"
    "listener.name.sasl_plaintext.oauthbearer.connections.max.reauth.ms=3000"
    "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer"
    # The PLAINTEXT listeners' peers are User:ANONYMOUS.
    "super.users=User:admin;User:ANONYMOUS"
    "group.initial.rebalance.delay.ms=0"
)

case "${BROKER_UNDER_TEST:-kafkaiq}" in
    apache-kafka)
        "$root/integration/apache-kafka.sh" "$work/kafka" "$port" "$cport" "${settings[@]}" \
            >"$work/broker.log" 2>&1 &
        pid=$!
        ;;
    kafkaiq)
        args=(--override "process.roles=broker,controller" --override "node.id=1"
            --override "controller.quorum.voters=1@127.0.0.1:$cport"
            --override "controller.listener.names=CONTROLLER"
            --override "log.dirs=$work/data" --override "http.listener=127.0.0.1:$hport"
            --override "offsets.topic.replication.factor=1"
            --override "transaction.state.log.replication.factor=1")
        for kv in "${settings[@]}"; do args+=(--override "$kv"); done
        "$KAFKAIQ_BIN" "${args[@]}" >"$work/broker.log" 2>&1 &
        pid=$!
        ;;
    *) fail "unknown BROKER_UNDER_TEST=$BROKER_UNDER_TEST" ;;
esac
deadline=$((SECONDS + 90))
until (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; do
    kill -0 "$pid" 2>/dev/null || fail "the broker exited before listening"
    ((SECONDS < deadline)) || fail "the broker did not listen in time"
    sleep 0.2
done
step "${BROKER_UNDER_TEST:-kafkaiq} serving SASL_PLAINTEXT on $B"

client_config() { # file mechanism module user password
    cat >"$1" <<EOF
security.protocol=SASL_PLAINTEXT
sasl.mechanism=$2
sasl.jaas.config=$3 required username="$4" password="$5";
EOF
}
client_config "$work/admin.properties" PLAIN org.apache.kafka.common.security.plain.PlainLoginModule admin admin-secret
scram=org.apache.kafka.common.security.scram.ScramLoginModule
client_config "$work/alice.properties" SCRAM-SHA-256 "$scram" alice alice-secret
client_config "$work/bob.properties" SCRAM-SHA-256 "$scram" bob bob-secret
client_config "$work/wrong.properties" SCRAM-SHA-256 "$scram" alice not-her-password
oauth_config() { # file subject
    cat >"$1" <<EOF
security.protocol=SASL_PLAINTEXT
sasl.mechanism=OAUTHBEARER
sasl.jaas.config=org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required unsecuredLoginStringClaim_sub="$2";
EOF
}
oauth_config "$work/alice-oauth.properties" alice
oauth_config "$work/bob-oauth.properties" bob

run() {
    rc=0
    timeout 120 java "${CDS_OPTS[@]}" -Xmx256m -XX:TieredStopAtLevel=1 -cp "$libs/*" "$@" >"$work/out" 2>&1 || rc=$?
    grep -v '^SLF4J' "$work/out" >"$work/out.clean" || true
    mv "$work/out.clean" "$work/out"
}
ok() {
    run "$@"
    [[ $rc -eq 0 ]] || { cat "$work/out" >&2; fail "exit $rc: ${*:1:5}"; }
}
refused() {
    run "$@"
    [[ $rc -ne 0 ]] || { cat "$work/out" >&2; fail "succeeded: ${*:1:5}"; }
}
expect_text() { grep -qF -- "$1" "$work/out" || { cat "$work/out" >&2; fail "missing text: $1"; }; }
expect_no_text() { ! grep -qF -- "$1" "$work/out" || { cat "$work/out" >&2; fail "unexpected text: $1"; }; }

config_command=kafka.admin.ConfigCommand
if javap -cp "$libs/*" org.apache.kafka.tools.ConfigCommand >/dev/null 2>&1; then
    config_command=org.apache.kafka.tools.ConfigCommand
fi
T=org.apache.kafka.tools
admin=(--bootstrap-server "$B" --command-config "$work/admin.properties")

step "kafka-configs: SCRAM users, as the PLAIN admin"
ok $config_command "${admin[@]}" --alter --entity-type users --entity-name alice \
    --add-config 'SCRAM-SHA-256=[iterations=8192,password=alice-secret]'
ok $config_command "${admin[@]}" --alter --entity-type users --entity-name bob \
    --add-config 'SCRAM-SHA-256=[password=bob-secret]'
ok $config_command "${admin[@]}" --describe --entity-type users
expect_text "SCRAM credential configs for user-principal 'alice' are SCRAM-SHA-256=iterations=8192"
expect_text "SCRAM credential configs for user-principal 'bob' are SCRAM-SHA-256=iterations=4096"

step "kafka-acls: alice may use her topic and group"
ok $T.AclCommand "${admin[@]}" --add --allow-principal User:alice --operation All \
    --topic orders --group readers --resource-pattern-type prefixed
ok $T.AclCommand "${admin[@]}" --list --topic orders --resource-pattern-type prefixed
expect_text "(principal=User:alice, host=*, operation=ALL, permissionType=ALLOW)"
expect_text "name=orders, patternType=PREFIXED"

step "alice (SCRAM): kafka-topics, console producer and consumer"
alice=(--bootstrap-server "$B" --command-config "$work/alice.properties")
ok $T.TopicCommand "${alice[@]}" --create --topic orders --partitions 1 --replication-factor 1
ok $T.TopicCommand "${alice[@]}" --list
expect_text "orders"
printf 'first\nsecond\n' >"$work/records"
ok $T.ConsoleProducer --bootstrap-server "$B" --producer.config "$work/alice.properties" \
    --topic orders --producer-property acks=all <"$work/records"
ok $T.consumer.ConsoleConsumer --bootstrap-server "$B" --consumer.config "$work/alice.properties" \
    --topic orders --group readers --from-beginning --max-messages 2 --timeout-ms 60000
expect_text "first"
expect_text "second"

step "bob (SCRAM, no ACL) is refused; a wrong password does not authenticate"
bob=(--bootstrap-server "$B" --command-config "$work/bob.properties")
ok $T.TopicCommand "${bob[@]}" --list
expect_no_text "orders"
printf 'sneaky\n' >"$work/sneaky"
run $T.ConsoleProducer --bootstrap-server "$B" --producer.config "$work/bob.properties" \
    --topic orders --producer-property acks=all --producer-property max.block.ms=15000 \
    --producer-property delivery.timeout.ms=15000 --producer-property request.timeout.ms=10000 <"$work/sneaky"
expect_text "TopicAuthorizationException"
refused $T.AclCommand "${bob[@]}" --list
expect_text "ClusterAuthorizationException"
refused $T.TopicCommand --bootstrap-server "$B" --command-config "$work/wrong.properties" --list
expect_text "Authentication failed"

step "OAUTHBEARER: the unsecured token's subject is the principal; re-authentication every 3 s"
bob_oauth=(--bootstrap-server "$B" --command-config "$work/bob-oauth.properties")
ok $T.TopicCommand "${bob_oauth[@]}" --list
expect_no_text "orders"
run $T.ConsoleProducer --bootstrap-server "$B" --producer.config "$work/bob-oauth.properties" \
    --topic orders --producer-property acks=all --producer-property max.block.ms=15000 \
    --producer-property delivery.timeout.ms=15000 --producer-property request.timeout.ms=10000 <"$work/sneaky"
expect_text "TopicAuthorizationException"
# Sessions of the OAUTHBEARER listener last 3 s: a producer sending for 8 s on one connection
# re-authenticates (a broker closes a connection whose session expired at its next request).
rc=0
for i in 1 2 3 4 5 6 7 8; do echo "token-$i"; sleep 1; done |
    timeout 120 java "${CDS_OPTS[@]}" -Xmx256m -XX:TieredStopAtLevel=1 -cp "$libs/*" $T.ConsoleProducer \
        --bootstrap-server "$B" --producer.config "$work/alice-oauth.properties" \
        --topic orders --producer-property acks=all --producer-property linger.ms=0 \
        >"$work/out" 2>&1 || rc=$?
[[ $rc -eq 0 ]] || { cat "$work/out" >&2; fail "exit $rc: the OAUTHBEARER producer"; }
ok $T.consumer.ConsoleConsumer --bootstrap-server "$B" --consumer.config "$work/alice-oauth.properties" \
    --topic orders --group readers-oauth --from-beginning --max-messages 10 --timeout-ms 60000
expect_text "first"
expect_text "token-1"
expect_text "token-8"
if [[ "${BROKER_UNDER_TEST:-kafkaiq}" == kafkaiq ]]; then
    # Kafka's successful-reauthentication-total: the producer re-authenticated rather than
    # reconnecting after its session was closed.
    metrics="$(curl -sf "http://127.0.0.1:$hport/metrics")" || fail "no /metrics"
    reauth="$(grep -E '^kafka_server_socket_server_metrics_successful_reauthentication_total\{.*mechanism="OAUTHBEARER"' <<<"$metrics" | awk '{print $2}')"
    [[ -n "$reauth" && "${reauth%.*}" -ge 1 ]] || fail "no OAUTHBEARER re-authentication counted: '$reauth'"
    expired="$(grep -E '^kafka_server_socket_server_metrics_expired_connections_killed_total ' <<<"$metrics" | awk '{print $2}')"
    step "re-authentications: $reauth, connections closed at session expiry: ${expired:-0}"
fi

# Everything in the topic, read by a new group: alice's ten records, nothing of bob's.
run $T.consumer.ConsoleConsumer --bootstrap-server "$B" --consumer.config "$work/alice.properties" \
    --topic orders --group readers-check --from-beginning --max-messages 11 --timeout-ms 15000
expect_text "Processed a total of 10 messages"
expect_no_text "sneaky"

step "ok"
