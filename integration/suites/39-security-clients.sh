#!/usr/bin/env bash
# Stock clients over every secured listener kind, from the same settings for KafkaIQ and Apache
# Kafka: kcat (librdkafka), the Java producer, consumer and AdminClient (kafka-clients 4.1.1 and
# 4.4.0, the newest), kafka-python and franz-go. kcat runs on librdkafka 2.16 (the
# confluent-kafka wheel's) and on Debian's 2.0.2, the latter without SCRAM: librdkafka before
# 2.6.1 repeats its nonce in the SCRAM client-final-message, which Kafka 4 refuses.
#
# Certificates are made here with openssl: a CA, a server certificate for IP:127.0.0.1 and
# DNS:localhost, a client certificate; the brokers read PEM files (key store: the certificate
# and its unencrypted PKCS#8 key in one file, no ssl.key.password; trust store: the CA).
#
# 1. One node with four client listeners at once: SSL with ssl.client.auth=required (mTLS),
#    SASL_PLAINTEXT and SASL_SSL (PLAIN from the listeners' JAAS configs, SCRAM-SHA-256 and
#    SCRAM-SHA-512 users created with kafka-configs by the PLAIN admin), and PLAINTEXT, the
#    inter-broker listener. alice has another password for each mechanism. For each client and
#    each of the seven cases (SSL with a client certificate; SASL_PLAINTEXT and SASL_SSL with
#    PLAIN, SCRAM-SHA-256, SCRAM-SHA-512) five records with a payload of their own are produced
#    (acks=all) to the client's topic and read back from the start: exactly those, in order.
#    Each client is then refused with the case's wrong credentials: a wrong password, or no
#    client certificate on the mTLS listener. The Java AdminClient creates every topic.
# 2. Three nodes (each broker and controller) whose inter-broker and controller listeners are
#    SASL_SSL with PLAIN, and a SASL_SSL client listener (PLAIN, and SCRAM-SHA-512 from
#    kafka-configs): for each client but the Java 4.4 and Debian's kcat, a topic with three
#    replicas, all in sync, to which it produces with acks=all and reads back; a wrong password
#    is refused.
#
# One process per client runs all of its cases (the JVM, Python and Go start once per part).
# BROKER_UNDER_TEST=apache-kafka runs both parts against Apache Kafka 4.1.1 (the single node
# with integration/apache-kafka.sh, the three nodes from the same files KafkaIQ reads, after
# kafka-storage format). About 2 minutes against KafkaIQ, 3 against Apache Kafka (2 cores).
set -euo pipefail

root="${KAFKAIQ_ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}"
KAFKAIQ_BIN="${KAFKAIQ_BIN:-$root/target/release/kafkaiq}"
name=39-security-clients
# shellcheck source=../lib/broker.sh
source "$root/integration/lib/broker.sh"
# shellcheck source=../lib/python-clients.sh
source "$root/integration/lib/python-clients.sh"
kind="${BROKER_UNDER_TEST:-kafkaiq}"

work="$(mktemp -d "${TMPDIR:-/tmp}/security-clients.XXXXXX")"
cluster_pids=()
stop_cluster() {
    local p status=0
    for p in "${cluster_pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
    for p in "${cluster_pids[@]}"; do
        local deadline=$((SECONDS + 30)) rc=0
        while kill -0 "$p" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.1; done
        if kill -0 "$p" 2>/dev/null; then
            echo "$name: FAIL: cluster node (pid $p) did not stop within 30 s of SIGTERM" >&2
            kill -KILL "$p" 2>/dev/null || true
            status=1
        fi
        wait "$p" 2>/dev/null || rc=$?
        if [[ $rc -ne 0 && ! ($kind == apache-kafka && $rc -eq 143) ]]; then
            echo "$name: FAIL: cluster node (pid $p) exited with status $rc" >&2
            status=1
        fi
    done
    cluster_pids=()
    if grep -l 'panicked at' "$work"/node-*.log 2>/dev/null; then
        echo "$name: FAIL: a cluster node panicked" >&2
        status=1
    fi
    return "$status"
}
cleanup() {
    local status=$?
    broker_stop || status=1
    stop_cluster || status=1
    if [[ $status -ne 0 ]]; then
        for log in "$work"/node-*.log; do
            [[ -f "$log" ]] && { echo "---- last lines of $log ----" >&2; tail -n 30 "$log" >&2; }
        done
    fi
    rm -rf "$work"
    exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

step() { echo "$name: [${SECONDS} s] $*" >&2; }
fail() {
    echo "$name: FAIL: $*" >&2
    broker_log_tail 40
    exit 1
}

step "clients: kafka-clients 4.1.1 and 4.4.0, kcat, kafka-python, franz-go"
libs="$("$root/integration/kafka-libs.sh")"
libs_newest="$(KAFKA_LIBS_VERSION=4.4.0 "$root/integration/kafka-libs.sh")"
kcat="$("$root/integration/kcat.sh")"
python_clients
command -v go >/dev/null || fail "go is required"
command -v openssl >/dev/null || fail "openssl is required"
(cd "$root/integration/programs/security-clients-go" &&
    GOFLAGS=-mod=mod go build -o "$work/security-clients-go" .) >"$work/go-build.log" 2>&1 ||
    { cat "$work/go-build.log" >&2; fail "cannot build integration/programs/security-clients-go"; }

step "certificates: a CA, the server's (IP:127.0.0.1, DNS:localhost), the client's"
certs="$work/certs"
mkdir -p "$certs"
(
    # Each step checked by hand: `set -e` does not apply inside a `( ... ) ||` list.
    cd "$certs" || exit 1
    openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=security-clients test CA" \
        -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
        -keyout ca.key -out ca.pem || exit 1
    issue() { # name subject extensions
        openssl req -newkey rsa:2048 -nodes -subj "$2" -keyout "$1.key" -out "$1.csr" || exit 1
        printf '%s\n' "$3" >"$1.ext"
        openssl x509 -req -in "$1.csr" -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 \
            -extfile "$1.ext" -out "$1.crt" || exit 1
        # openssl 3 writes unencrypted PKCS#8 keys (BEGIN PRIVATE KEY), which both brokers and
        # the Java clients read from a PEM key store without a key password.
        grep -q 'BEGIN PRIVATE KEY' "$1.key" || { echo "$1.key is not PKCS#8"; exit 1; }
        cat "$1.crt" "$1.key" >"$1.pem"
    }
    issue server "/CN=localhost/O=security-clients" \
        "subjectAltName=IP:127.0.0.1,DNS:localhost
extendedKeyUsage=serverAuth,clientAuth"
    issue client "/CN=alice/O=security-clients" "extendedKeyUsage=clientAuth"
    openssl verify -CAfile ca.pem server.crt client.crt
) >"$work/openssl.log" 2>&1 || { cat "$work/openssl.log" >&2; fail "openssl"; }
export SSL_CA="$certs/ca.pem" SSL_CERT="$certs/client.crt" SSL_KEY="$certs/client.key"

plain_module=org.apache.kafka.common.security.plain.PlainLoginModule
scram_module=org.apache.kafka.common.security.scram.ScramLoginModule
# alice has one password per mechanism, so a broker that checked one mechanism's credential
# for another would refuse her.
declare -A password=([PLAIN]=alice-plain-secret [SCRAM-SHA-256]=alice-256-secret
    [SCRAM-SHA-512]=alice-512-secret)
server_tls=("ssl.keystore.type=PEM" "ssl.keystore.location=$certs/server.pem"
    "ssl.truststore.type=PEM" "ssl.truststore.location=$certs/ca.pem")

# client_props FILE BOOTSTRAP PROTOCOL MECHANISM USER PASSWORD [nocert]: a Java client config.
client_props() {
    local file=$1 bootstrap=$2 protocol=$3 mechanism=$4 user=$5 pass=$6 cert=${7:-cert}
    {
        echo "bootstrap.servers=$bootstrap"
        echo "security.protocol=$protocol"
        if [[ $protocol == *SSL ]]; then
            echo "ssl.truststore.type=PEM"
            echo "ssl.truststore.location=$certs/ca.pem"
        fi
        if [[ $protocol == SSL && $cert == cert ]]; then
            echo "ssl.keystore.type=PEM"
            echo "ssl.keystore.location=$certs/client.pem"
        fi
        if [[ $protocol == SASL_* ]]; then
            local module=$scram_module
            [[ $mechanism == PLAIN ]] && module=$plain_module
            echo "sasl.mechanism=$mechanism"
            echo "sasl.jaas.config=$module required username=\"$user\" password=\"$pass\";"
        fi
    } >"$file"
}

# Cases: NAME,BOOTSTRAP,PROTOCOL,MECHANISM,USER,PASSWORD,BADPASSWORD (the Go and Python
# programs take them as they are); each also gets NAME.good/.bad.properties for Java.
cases=()
add_case() { # name bootstrap protocol mechanism
    local n=$1 b=$2 protocol=$3 mechanism=$4 pass=""
    [[ -n "$mechanism" ]] && pass=${password[$mechanism]}
    cases+=("$n,$b,$protocol,$mechanism,alice,$pass,not-$pass")
    client_props "$work/cases/$n.good.properties" "$b" "$protocol" "$mechanism" alice "$pass"
    client_props "$work/cases/$n.bad.properties" "$b" "$protocol" "$mechanism" alice "not-$pass" nocert
}
mkdir -p "$work/cases"

java_run() { # libs out-file main-args...
    local jars=$1 out=$2
    shift 2
    timeout 300 java -Xmx256m -XX:TieredStopAtLevel=1 -Dorg.slf4j.simpleLogger.defaultLogLevel=warn \
        -cp "$jars/*" "$@" >"$out" 2>&1
}
config_command=kafka.admin.ConfigCommand
if javap -cp "$libs/*" org.apache.kafka.tools.ConfigCommand >/dev/null 2>&1; then
    config_command=org.apache.kafka.tools.ConfigCommand
fi

# add_scram_users BOOTSTRAP ADMIN_PROPERTIES MECHANISM...: alice's SCRAM credentials, as the
# PLAIN admin (one mechanism per request: a request may alter a user once), then described.
add_scram_users() {
    local b=$1 admin=$2 m
    shift 2
    for m in "$@"; do
        java_run "$libs" "$work/configs.out" $config_command --bootstrap-server "$b" \
            --command-config "$admin" --alter --entity-type users --entity-name alice \
            --add-config "$m=[password=${password[$m]}]" ||
            { cat "$work/configs.out" >&2; fail "kafka-configs --alter ($m for alice)"; }
    done
    java_run "$libs" "$work/configs.out" $config_command --bootstrap-server "$b" \
        --command-config "$admin" --describe --entity-type users --entity-name alice ||
        { cat "$work/configs.out" >&2; fail "kafka-configs --describe (SCRAM users)"; }
    for m in "$@"; do
        grep -q "$m=iterations=4096" "$work/configs.out" ||
            { cat "$work/configs.out" >&2; fail "alice has no $m credential"; }
    done
}

# java_clients LIBS OWN_PREFIX RF CREATE_PREFIXES NAME...
java_clients() {
    local jars=$1 out="$work/java-$2.out"
    java_run "$jars" "$out" "$root/integration/programs/SecurityClients.java" "$2" "$3" "$4" \
        "$work/cases" "${@:5}" || { grep -v '^SLF4J' "$out" >&2; fail "Java clients ($jars)"; }
    grep "^$2 " "$out" >&2
}

# kcat runs on the librdkafka of the confluent-kafka wheel (python_clients installed it; the
# wheel names it librdkafka-HASH.so.1, kcat asks for librdkafka.so.1), topics kcat-NAME.
# Debian's own librdkafka 2.0.2 answers a SCRAM server-first-message with the client nonce
# appended to the combined nonce a second time (fixed in librdkafka 2.6.1), which Kafka 4
# refuses as RFC 5802 says: it runs the PLAIN and SSL cases only, topics kcat-debian-NAME.
mkdir -p "$work/librdkafka"
bundled=("$venv"/lib/python3*/site-packages/confluent_kafka.libs/librdkafka*.so.1)
[[ -f "${bundled[0]}" ]] || fail "no librdkafka in the confluent-kafka wheel"
ln -s "${bundled[0]}" "$work/librdkafka/librdkafka.so.1"
declare -A kcat_env=([kcat]="LD_LIBRARY_PATH=$work/librdkafka" [kcat-debian]="-u LD_LIBRARY_PATH")
declare -A rdkafka_version
for k in kcat kcat-debian; do
    # shellcheck disable=SC2086 # one or two words
    rdkafka_version[$k]="$(env ${kcat_env[$k]} "$kcat" -V 2>&1 | sed -n 's/.*librdkafka \([0-9.]*\).*/\1/p')"
done
[[ "$(printf '%s\n' 2.6.1 "${rdkafka_version[kcat]}" | sort -V | head -1)" == 2.6.1 ]] ||
    fail "kcat runs on librdkafka '${rdkafka_version[kcat]}', not 2.6.1 or newer"

# kcat_cases kcat|kcat-debian CASE...: produce, read back and a refused wrong credential.
kcat_cases() {
    local which=$1 c n b protocol mechanism user pass bad
    local -a kenv
    read -r -a kenv <<<"${kcat_env[$which]}"
    shift
    for c in "$@"; do
        IFS=, read -r n b protocol mechanism user pass bad <<<"$c"
        if [[ $which == kcat-debian && $mechanism == SCRAM-* ]]; then
            continue
        fi
        local topic="$which-$n" label="$which (librdkafka ${rdkafka_version[$which]}) $n"
        local common=(-b "$b" -X "security.protocol=$protocol")
        [[ $protocol == *SSL ]] && common+=(-X "ssl.ca.location=$certs/ca.pem")
        local good=("${common[@]}") wrong=("${common[@]}")
        if [[ $protocol == SSL ]]; then
            good+=(-X "ssl.certificate.location=$certs/client.crt" -X "ssl.key.location=$certs/client.key")
        else
            good+=(-X "sasl.mechanisms=$mechanism" -X "sasl.username=$user" -X "sasl.password=$pass")
            wrong+=(-X "sasl.mechanisms=$mechanism" -X "sasl.username=$user" -X "sasl.password=$bad")
        fi
        local payload
        payload="$topic-$(od -An -N8 -tx8 /dev/urandom | tr -d ' ')"
        for i in 0 1 2 3 4; do echo "$payload-$i"; done >"$work/kcat.sent"
        env "${kenv[@]}" timeout 60 "$kcat" "${good[@]}" -P -t "$topic" -p 0 \
            -X acks=all <"$work/kcat.sent" 2>"$work/kcat.err" ||
            { cat "$work/kcat.err" >&2; fail "$label: produce"; }
        env "${kenv[@]}" timeout 60 "$kcat" "${good[@]}" -C -t "$topic" -p 0 -o beginning \
            -c 5 -e -q >"$work/kcat.got" 2>"$work/kcat.err" ||
            { cat "$work/kcat.err" >&2; fail "$label: consume"; }
        cmp -s "$work/kcat.sent" "$work/kcat.got" ||
            { diff "$work/kcat.sent" "$work/kcat.got" >&2 || true; fail "$label: read back other records"; }
        local rc=0
        env "${kenv[@]}" timeout 60 "$kcat" "${wrong[@]}" -L -m 3 >"$work/kcat.out" 2>"$work/kcat.err" || rc=$?
        [[ $rc -ne 0 ]] || { cat "$work/kcat.out" >&2; fail "$label: the wrong credentials were accepted"; }
        local sign='Authentication failed|SASL authentication error'
        [[ $protocol == SSL ]] && sign='SSL|certificate|handshake|Disconnected'
        grep -qE "$sign" "$work/kcat.err" ||
            { cat "$work/kcat.err" >&2; fail "$label: refused, but not for its credentials"; }
        echo "$label: 5 records produced and read back; wrong credentials refused" >&2
    done
}

python_cases() {
    "$python" "$root/integration/python/check_security_clients.py" "$@" >"$work/python.out" 2>&1 ||
        { cat "$work/python.out" >&2; fail "kafka-python"; }
    cat "$work/python.out" >&2
}

go_cases() {
    timeout 300 "$work/security-clients-go" "$@" >"$work/go.out" 2>&1 ||
        { cat "$work/go.out" >&2; fail "franz-go"; }
    cat "$work/go.out" >&2
}

# ---------------------------------------------------------------------------------------------
step "part 1: one $kind node with SSL (mTLS), SASL_PLAINTEXT and SASL_SSL client listeners"
port="$(free_port)"
cport="$(free_port)"
ssl_port="$(free_port)"
sp_port="$(free_port)"
ss_port="$(free_port)"
jaas_plain="$plain_module required user_admin=\"admin-secret\" user_alice=\"${password[PLAIN]}\";"
settings=(
    "process.roles=broker,controller" "node.id=1" "controller.quorum.voters=1@127.0.0.1:$cport"
    "controller.listener.names=CONTROLLER"
    "listeners=PLAINTEXT://127.0.0.1:$port,SSL://127.0.0.1:$ssl_port,SASL_PLAINTEXT://127.0.0.1:$sp_port,SASL_SSL://127.0.0.1:$ss_port,CONTROLLER://127.0.0.1:$cport"
    "advertised.listeners=PLAINTEXT://127.0.0.1:$port,SSL://127.0.0.1:$ssl_port,SASL_PLAINTEXT://127.0.0.1:$sp_port,SASL_SSL://127.0.0.1:$ss_port"
    "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL"
    "inter.broker.listener.name=PLAINTEXT"
    "${server_tls[@]}"
    "listener.name.ssl.ssl.client.auth=required"
    "sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512"
    "group.initial.rebalance.delay.ms=0"
)
for l in sasl_plaintext sasl_ssl; do
    settings+=("listener.name.$l.plain.sasl.jaas.config=$jaas_plain"
        "listener.name.$l.scram-sha-256.sasl.jaas.config=$scram_module required;"
        "listener.name.$l.scram-sha-512.sasl.jaas.config=$scram_module required;")
done
BROKER_PORT=$port BROKER_CONTROLLER_PORT=$cport broker_start "${settings[@]}" ||
    fail "the broker did not start"
for p in $ssl_port $sp_port $ss_port; do
    (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null || fail "nothing listens on 127.0.0.1:$p"
done

client_props "$work/admin.properties" "127.0.0.1:$sp_port" SASL_PLAINTEXT PLAIN admin admin-secret
step "kafka-configs: alice's SCRAM-SHA-256 and SCRAM-SHA-512 credentials, as the PLAIN admin"
add_scram_users "127.0.0.1:$sp_port" "$work/admin.properties" SCRAM-SHA-256 SCRAM-SHA-512

add_case ssl-mtls "127.0.0.1:$ssl_port" SSL ""
for m in PLAIN SCRAM-SHA-256 SCRAM-SHA-512; do
    short=${m,,}
    short=${short//-/}
    add_case "sasl-plaintext-$short" "127.0.0.1:$sp_port" SASL_PLAINTEXT "$m"
    add_case "sasl-ssl-$short" "127.0.0.1:$ss_port" SASL_SSL "$m"
done
names=()
for c in "${cases[@]}"; do names+=("${c%%,*}"); done

step "Java clients 4.1.1 (the AdminClient creates every client's topics)"
java_clients "$libs" java 1 java,java-newest,kcat,kcat-debian,python,go "${names[@]}"
step "Java clients 4.4.0"
java_clients "$libs_newest" java-newest 1 java-newest "${names[@]}"
step "kcat"
kcat_cases kcat "${cases[@]}"
step "kcat on Debian's librdkafka (PLAIN and SSL)"
kcat_cases kcat-debian "${cases[@]}"
step "kafka-python"
python_cases "${cases[@]}"
step "franz-go"
go_cases "${cases[@]}"
broker_stop || fail "the broker misbehaved"

# ---------------------------------------------------------------------------------------------
step "part 2: three $kind nodes, inter-broker and controller listeners SASL_SSL (PLAIN)"
declare -a client_port internal_port controller_port
voters=""
for n in 1 2 3; do
    client_port[n]="$(free_port)"
    internal_port[n]="$(free_port)"
    controller_port[n]="$(free_port)"
    voters+="${voters:+,}$n@127.0.0.1:${controller_port[n]}"
done
for n in 1 2 3; do
    {
        echo "process.roles=broker,controller"
        echo "node.id=$n"
        echo "controller.quorum.voters=$voters"
        echo "listeners=CLIENT://127.0.0.1:${client_port[n]},INTERNAL://127.0.0.1:${internal_port[n]},CONTROLLER://127.0.0.1:${controller_port[n]}"
        echo "advertised.listeners=CLIENT://127.0.0.1:${client_port[n]},INTERNAL://127.0.0.1:${internal_port[n]},CONTROLLER://127.0.0.1:${controller_port[n]}"
        echo "listener.security.protocol.map=CLIENT:SASL_SSL,INTERNAL:SASL_SSL,CONTROLLER:SASL_SSL"
        echo "controller.listener.names=CONTROLLER"
        echo "inter.broker.listener.name=INTERNAL"
        printf '%s\n' "${server_tls[@]}"
        echo "sasl.enabled.mechanisms=PLAIN"
        echo "sasl.mechanism.inter.broker.protocol=PLAIN"
        echo "sasl.mechanism.controller.protocol=PLAIN"
        echo "listener.name.internal.plain.sasl.jaas.config=$plain_module required username=\"broker\" password=\"broker-secret\" user_broker=\"broker-secret\";"
        echo "listener.name.controller.plain.sasl.jaas.config=$plain_module required username=\"controller\" password=\"controller-secret\" user_controller=\"controller-secret\";"
        echo "listener.name.client.sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-512"
        echo "listener.name.client.plain.sasl.jaas.config=$jaas_plain"
        echo "listener.name.client.scram-sha-512.sasl.jaas.config=$scram_module required;"
        echo "log.dirs=$work/node-$n/data"
        echo "offsets.topic.replication.factor=3"
        echo "transaction.state.log.replication.factor=3"
        echo "transaction.state.log.min.isr=2"
        echo "share.coordinator.state.topic.replication.factor=3"
        echo "share.coordinator.state.topic.min.isr=2"
        echo "group.initial.rebalance.delay.ms=0"
    } >"$work/node-$n.properties"
done
case "$kind" in
    kafkaiq)
        for n in 1 2 3; do
            RUST_LOG="${RUST_LOG:-info}" "$KAFKAIQ_BIN" --config "$work/node-$n.properties" \
                --override "http.listener=127.0.0.1:$(free_port)" >"$work/node-$n.log" 2>&1 &
            cluster_pids+=($!)
        done
        ;;
    apache-kafka)
        cluster_id="$(java -cp "$libs/*" kafka.tools.StorageTool random-uuid 2>/dev/null | tail -1)"
        for n in 1 2 3; do
            java -Xmx256m -cp "$libs/*" kafka.tools.StorageTool format -t "$cluster_id" \
                -c "$work/node-$n.properties" >"$work/format-$n.log" 2>&1 ||
                { cat "$work/format-$n.log" >&2; fail "kafka-storage format (node $n)"; }
        done
        for n in 1 2 3; do
            java "${KAFKA_HEAP:--Xmx512m}" -cp "$libs/*" kafka.Kafka "$work/node-$n.properties" \
                >"$work/node-$n.log" 2>&1 &
            cluster_pids+=($!)
        done
        ;;
    *) fail "unknown BROKER_UNDER_TEST=$kind" ;;
esac
deadline=$((SECONDS + 120))
for n in 1 2 3; do
    until (exec 3<>"/dev/tcp/127.0.0.1/${client_port[n]}") 2>/dev/null; do
        for p in "${cluster_pids[@]}"; do kill -0 "$p" 2>/dev/null || fail "a cluster node exited"; done
        ((SECONDS < deadline)) || fail "node $n did not listen in time"
        sleep 0.2
    done
done
cluster_bootstrap="127.0.0.1:${client_port[1]},127.0.0.1:${client_port[2]}"

client_props "$work/cluster-admin.properties" "$cluster_bootstrap" SASL_SSL PLAIN admin admin-secret
step "kafka-configs over SASL_SSL: alice's SCRAM-SHA-512 credential"
# The first requests may come before the quorum has a leader: retried for a while.
for attempt in 1 2 3 4 5 6; do
    if (add_scram_users "$cluster_bootstrap" "$work/cluster-admin.properties" SCRAM-SHA-512) 2>"$work/scram.err"; then
        break
    fi
    ((attempt < 6)) || { cat "$work/scram.err" >&2; fail "SCRAM users on the cluster"; }
    sleep 5
done
# One seed per case (cases are comma-separated); the clients learn the other nodes from Metadata.
cases=()
add_case cluster-plain "127.0.0.1:${client_port[1]}" SASL_SSL PLAIN
add_case cluster-scramsha512 "127.0.0.1:${client_port[2]}" SASL_SSL SCRAM-SHA-512

step "Java clients: topics with three replicas in sync, acks=all, over SASL_SSL"
java_clients "$libs" java 3 java,kcat,python,go cluster-plain cluster-scramsha512
step "kcat"
kcat_cases kcat "${cases[@]}"
step "kafka-python"
python_cases "${cases[@]}"
step "franz-go"
go_cases "${cases[@]}"
stop_cluster || fail "the cluster misbehaved"
step "ok ($kind)"
