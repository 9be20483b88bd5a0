#!/usr/bin/env python3
"""KafkaIQ beside Apache Kafka: the same stock Kafka tools against each broker, one at a time.

What it does
  * Builds the release `kafkaiq` binary (or takes --kafkaiq-bin / $KAFKAIQ_BIN) and fetches Apache
    Kafka 4.1.1's jars with integration/kafka-libs.sh.
  * For each round, starts Apache Kafka (integration/apache-kafka.sh: KRaft single node, -Xmx1g)
    and then KafkaIQ, each on fresh loopback ports with a fresh data dir, one at a time
    (A B A B ...), and runs against each the same plan of stock tools from kafka-tools 4.1.1:
    ProducerPerformance at full speed (100 B and 1 KiB records, acks=1 and acks=all),
    ConsumerPerformance over the data written with acks=1, and ProducerPerformance at a fixed
    rate for latency percentiles.
  * Samples the broker process: CPU seconds (utime+stime of /proc/PID/stat) before and after every
    tool run, peak RSS (VmHWM of /proc/PID/status) before it is stopped, and the time from process
    start to the first answered ApiVersions request on a raw socket.
  * Writes a Markdown report: medians per broker, KafkaIQ/Kafka ratios against the milestone
    targets, every individual run, both brokers' configs and the machine's description.

What it is not: a test of correctness (the suites in integration/ are), or a tuned benchmark. Both
brokers get Kafka's defaults plus the few settings a single node needs; the tools get the same
arguments against both.

A tool run that fails is reported as failed in the table, never dropped. A ConsumerPerformance
failure against a broker that does not advertise the consumer-group APIs (FindCoordinator,
JoinGroup, SyncGroup, Heartbeat, OffsetCommit, OffsetFetch) in ApiVersions is reported as
"unsupported" instead, and only that case is tolerated by --smoke (see --strict-consumer).
A broker that exits before it is stopped, does not obey SIGTERM within STOP_TIMEOUT_S, exits
uncleanly after it (KafkaIQ: anything but 0), or prints a "panicked at" line fails --smoke too.

Python 3 standard library only. Usage:
  benches/compare/compare.py                # full run, >= 3 rounds, writes benches/results/<date>-<host>.md
  benches/compare/compare.py --smoke        # tiny plan, 1 round; exits non-zero if a required run fails
  benches/compare/compare.py --cluster 3    # 3-node clusters of each (cluster.py), RF 3, min ISR 2
  benches/compare/compare.py --cluster 3 --smoke
  benches/compare/compare.py --security sasl_ssl   # tools over SASL_SSL (SCRAM-SHA-256), and
                                                   # new connections per second
"""

from __future__ import annotations

import argparse
import base64
import dataclasses
import datetime
import hashlib
import hmac
import json
import multiprocessing
import os
import platform
import re
import resource
import shutil
import signal
import socket
import ssl
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

KAFKA_HEAP = "-Xmx1g"
# kafka-producer-perf-test.sh and kafka-consumer-perf-test.sh default to this heap.
TOOL_HEAP = "-Xmx512M"
MIB = 1024 * 1024

# Given to both brokers: Kafka's defaults made explicit, and no initial rebalance delay (each
# ConsumerPerformance run is a fresh group of one; the default 3 s delay would be timed).
COMMON_PROPS = [
    "num.partitions=1",
    "auto.create.topics.enable=true",
    "group.initial.rebalance.delay.ms=0",
]
# What a single node needs (internal topics at replication factor 1): integration/apache-kafka.sh
# writes these for Apache Kafka; KafkaIQ gets the same.
SINGLE_NODE_PROPS = [
    "offsets.topic.replication.factor=1",
    "transaction.state.log.replication.factor=1",
    "transaction.state.log.min.isr=1",
]

# APIs the Java consumer needs to consume as a member of a classic consumer group.
GROUP_API_KEYS = {
    8: "OffsetCommit",
    9: "OffsetFetch",
    10: "FindCoordinator",
    11: "JoinGroup",
    12: "Heartbeat",
    14: "SyncGroup",
}

API_VERSIONS_KEY = 18
METADATA_KEY = 3
PROBE_TIMEOUT_S = 0.5
STARTUP_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 60.0
# How long after the first answered request the broker may take to list itself in Metadata.
READY_TIMEOUT_S = 60.0


# --------------------------------------------------------------------------------------------
# The plan


@dataclasses.dataclass(frozen=True)
class ProduceRun:
    name: str
    topic: str
    records: int
    size: int
    acks: str
    throughput: int  # records/s, -1 = as fast as possible
    measured: bool = True
    # Topic configs: the topic is created with them (1 partition) before the run, instead of
    # being auto-created with the broker's defaults.
    topic_config: tuple[str, ...] = ()
    # > 0: a transactional producer (`--transactional-id`) committing every this many ms.
    transaction_ms: int = 0

    @property
    def mib(self) -> float:
        return self.records * self.size / MIB


@dataclasses.dataclass(frozen=True)
class ConsumeRun:
    name: str
    topic: str
    records: int
    size: int
    measured: bool = True
    # isolation.level=read_committed (records up to the last stable offset only).
    read_committed: bool = False

    @property
    def mib(self) -> float:
        return self.records * self.size / MIB


@dataclasses.dataclass(frozen=True)
class CommitRun:
    """`CommitLatency.java` (next to this file): a transactional producer sends
    `records_per_txn` records per transaction and times each `commitTransaction()`."""
    name: str
    topic: str
    transactions: int
    records_per_txn: int
    size: int
    measured: bool = True

    @property
    def mib(self) -> float:
        return self.transactions * self.records_per_txn * self.size / MIB


@dataclasses.dataclass(frozen=True)
class ConnectRun:
    """New connections per second: `workers` processes each open connections one after another
    for `seconds`. Each connection is a TLS handshake (the client verifies the broker's
    certificate), SaslHandshake v1 and two SaslAuthenticate v1 rounds of SCRAM-SHA-256 (the
    client checks the server's signature), then a close. See `scram_connect`."""
    name: str
    workers: int
    seconds: float
    measured: bool = True
    mib = 0.0


@dataclasses.dataclass(frozen=True)
class ToolRun:
    """A run of a tool that writes `records` values of `size` bytes with `acks`."""
    name: str
    topic: str
    records: int
    size: int
    acks: str
    measured: bool = True

    @property
    def mib(self) -> float:
        return self.records * self.size / MIB


class RdkProduceRun(ToolRun):
    """rdkafka_performance -P: the C producer, as fast as it can, with librdkafka's defaults."""


class RdkConsumeRun(ToolRun):
    """rdkafka_performance -C: the C consumer reads `records` from the start of partition 0 (no
    group), with librdkafka's defaults. `acks` is unused."""


def full_plan():
    return [
        # Not measured: lets each broker (and the JVM's JIT, for Kafka) reach steady state first.
        ProduceRun("warmup", "bench-warmup", 100_000, 100, "1", -1, measured=False),
        ProduceRun("produce-100B-acks1", "bench-100b-acks1", 1_000_000, 100, "1", -1),
        ProduceRun("produce-100B-acksall", "bench-100b-acksall", 1_000_000, 100, "all", -1),
        ProduceRun("produce-1KiB-acks1", "bench-1kib-acks1", 200_000, 1024, "1", -1),
        ProduceRun("produce-1KiB-acksall", "bench-1kib-acksall", 200_000, 1024, "all", -1),
        ConsumeRun("consume-100B", "bench-100b-acks1", 1_000_000, 100),
        ConsumeRun("consume-1KiB", "bench-1kib-acks1", 200_000, 1024),
        # 30 s at 20,000 records/s with the Java producer's default acks=all.
        ProduceRun("fixed-rate-20k", "bench-fixed-rate", 600_000, 100, "all", 20_000),
    ]


def latency_plan():
    """--latency-only on one node: the warm-up and the fixed-rate run of the full plan, and the
    same fixed rate into a topic of 1 MiB segments, so that segments roll about twice a second
    during the run (at the default 1 GiB none does)."""
    full = full_plan()
    return [full[0], next(r for r in full if r.name == "fixed-rate-20k"),
            ProduceRun("fixed-rate-20k-rolling", "bench-fixed-rate-rolling", 600_000, 100, "all",
                       20_000, topic_config=("segment.bytes=1048576",))]


def transactions_plan():
    """--transactions: ProducerPerformance with a transactional id committing every 100 ms (as
    fast as possible, and at a fixed rate for latency), then a read_committed
    ConsumerPerformance over the transactional topic."""
    full = full_plan()
    return [
        full[0],
        ProduceRun("txn-produce-100B", "bench-txn-100b", 1_000_000, 100, "all", -1,
                   transaction_ms=100),
        ProduceRun("txn-produce-1KiB", "bench-txn-1kib", 200_000, 1024, "all", -1,
                   transaction_ms=100),
        ConsumeRun("consume-read-committed-100B", "bench-txn-100b", 1_000_000, 100,
                   read_committed=True),
        ProduceRun("txn-fixed-rate-20k", "bench-txn-fixed-rate", 600_000, 100, "all", 20_000,
                   transaction_ms=100),
        CommitRun("txn-commit-10x100B", "bench-txn-commit", 3_000, 10, 100),
    ]


def security_plan():
    """--security sasl_ssl: the tools over a SASL_SSL listener with SCRAM-SHA-256 (each broker
    also has a PLAINTEXT listener, used only for its readiness probe and to create the user),
    then new connections per second."""
    full = {r.name: r for r in full_plan()}
    return [
        full["warmup"],
        full["produce-100B-acks1"],
        full["produce-100B-acksall"],
        full["produce-1KiB-acks1"],
        full["produce-1KiB-acksall"],
        full["consume-100B"],
        full["consume-1KiB"],
        full["fixed-rate-20k"],
        # The C client: on two cores the Java tools above use most of the CPU themselves at
        # 1 KiB, so how fast the broker goes shows in these.
        RdkProduceRun("rdk-produce-1KiB-acks1", "bench-rdk-1kib", 1_000_000, 1024, "1"),
        RdkProduceRun("rdk-produce-100B-acks1", "bench-rdk-100b", 3_000_000, 100, "1"),
        RdkConsumeRun("rdk-consume-1KiB", "bench-rdk-1kib", 1_000_000, 1024, "-"),
        RdkConsumeRun("rdk-consume-100B", "bench-rdk-100b", 3_000_000, 100, "-"),
        ConnectRun("connect-tls-scram", workers=4, seconds=10.0),
    ]


def security_smoke_plan():
    return [
        ProduceRun("produce-100B-acks1", "smoke-100b-acks1", 2_000, 100, "1", -1),
        ConsumeRun("consume-100B", "smoke-100b-acks1", 2_000, 100),
        RdkProduceRun("rdk-produce-1KiB-acks1", "smoke-rdk-1kib", 2_000, 1024, "1"),
        RdkConsumeRun("rdk-consume-1KiB", "smoke-rdk-1kib", 2_000, 1024, "-"),
        ConnectRun("connect-tls-scram", workers=2, seconds=2.0),
    ]


def smoke_plan():
    return [
        ProduceRun("produce-100B-acks1", "smoke-100b-acks1", 2_000, 100, "1", -1),
        ProduceRun("produce-1KiB-acksall", "smoke-1kib-acksall", 500, 1024, "all", -1),
        ConsumeRun("consume-100B", "smoke-100b-acks1", 2_000, 100),
        ProduceRun("fixed-rate-1k", "smoke-fixed-rate", 2_000, 100, "all", 1_000),
        ProduceRun("txn-produce-100B", "smoke-txn-100b", 2_000, 100, "all", -1,
                   transaction_ms=100),
        ConsumeRun("consume-read-committed-100B", "smoke-txn-100b", 2_000, 100,
                   read_committed=True),
        CommitRun("txn-commit-10x100B", "smoke-txn-commit", 50, 10, 100),
    ]


# --------------------------------------------------------------------------------------------
# /proc sampling

CLK_TCK = os.sysconf("SC_CLK_TCK")


def proc_cpu_split_s(pid: int) -> tuple[float, float] | None:
    """(utime, stime) of a process (all its threads), in seconds: user and kernel CPU."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()
    # fields[0] is field 3 (state); utime and stime are fields 14 and 15.
    return int(fields[11]) / CLK_TCK, int(fields[12]) / CLK_TCK


def proc_cpu_s(pid: int) -> float | None:
    """utime + stime of a process (all its threads), in seconds."""
    split = proc_cpu_split_s(pid)
    return None if split is None else split[0] + split[1]


def proc_status_kib(pid: int, key: str) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def system_busy_s() -> float:
    """CPU seconds spent busy on all cores since boot (everything except idle and iowait)."""
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in fields[:8])
    return (user + nice + system + irq + softirq + steal) / CLK_TCK


def children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


# --------------------------------------------------------------------------------------------
# Raw Kafka requests for the startup probe


def _frame(api_key: int, version: int, correlation_id: int, body: bytes) -> bytes:
    client_id = b"kafkaiq-bench"
    # Request header v1: api key, api version, correlation id, nullable client id.
    header = struct.pack(">hhih", api_key, version, correlation_id, len(client_id)) + client_id
    payload = header + body
    return struct.pack(">i", len(payload)) + payload


def _read_exact(sock: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("connection closed")
        buf += chunk
    return buf


def _roundtrip(port: int, frame: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=PROBE_TIMEOUT_S) as sock:
        sock.settimeout(PROBE_TIMEOUT_S)
        sock.sendall(frame)
        (size,) = struct.unpack(">i", _read_exact(sock, 4))
        return _read_exact(sock, size)


def api_versions(port: int) -> dict[int, tuple[int, int]]:
    """ApiVersions v0 (the version every broker answers): {api_key: (min, max)}."""
    resp = _roundtrip(port, _frame(API_VERSIONS_KEY, 0, 1, b""))
    correlation_id, error_code, count = struct.unpack(">ihi", resp[:10])
    if correlation_id != 1 or error_code != 0:
        raise ValueError(f"ApiVersions answer: correlation {correlation_id}, error {error_code}")
    apis = {}
    for i in range(count):
        key, lo, hi = struct.unpack(">hhh", resp[10 + 6 * i : 16 + 6 * i])
        apis[key] = (lo, hi)
    return apis


def metadata_broker_count(port: int) -> int:
    """Metadata v4 for no topics: how many brokers the node lists (0 until it is serving)."""
    body = struct.pack(">ib", 0, 0)  # empty topic array, allow_auto_topic_creation=false
    resp = _roundtrip(port, _frame(METADATA_KEY, 4, 2, body))
    correlation_id, _throttle, brokers = struct.unpack(">iii", resp[:12])
    if correlation_id != 2:
        raise ValueError(f"Metadata answer: correlation {correlation_id}")
    return brokers


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --------------------------------------------------------------------------------------------
# Security (--security sasl_ssl)

SCRAM_USER = "bench"
SCRAM_PASSWORD = "bench-secret"
SCRAM_ITERATIONS = 4096
SECURE_LISTENER = "SECURE"


@dataclasses.dataclass
class Security:
    """What both brokers and every client of one run share: a CA, the brokers' certificate
    (RSA 2048, SAN IP:127.0.0.1), and the clients' properties."""
    dir: Path
    ca: Path
    keystore: Path  # PEM: the broker's unencrypted PKCS#8 key and its certificate
    client_properties: Path

    @staticmethod
    def create(workdir: Path) -> "Security":
        d = workdir / "pki"
        d.mkdir(parents=True, exist_ok=True)

        def openssl(*args):
            subprocess.run(["openssl", *args], cwd=d, check=True, capture_output=True)

        openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out",
                "ca.pem", "-days", "30", "-subj", "/CN=bench-ca")
        openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "broker.key", "-out",
                "broker.csr", "-subj", "/CN=localhost")
        (d / "san.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
        openssl("x509", "-req", "-in", "broker.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
                "-CAcreateserial", "-out", "broker.crt", "-days", "30", "-extfile", "san.ext")
        openssl("pkcs8", "-topk8", "-nocrypt", "-in", "broker.key", "-out", "broker.pk8")
        keystore = d / "broker-keystore.pem"
        keystore.write_text((d / "broker.pk8").read_text() + (d / "broker.crt").read_text())
        props = d / "client.properties"
        props.write_text("\n".join([
            "security.protocol=SASL_SSL",
            "sasl.mechanism=SCRAM-SHA-256",
            "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
            f'username="{SCRAM_USER}" password="{SCRAM_PASSWORD}";',
            "ssl.truststore.type=PEM",
            f"ssl.truststore.location={d / 'ca.pem'}",
        ]) + "\n")
        return Security(d, d / "ca.pem", keystore, props)

    def broker_props(self, plain_port: int, secure_port: int,
                     controller: str | None) -> list[str]:
        """The same keys for both brokers: a PLAINTEXT listener (inter-broker, probes, admin)
        and a SASL_SSL one for the tools. `controller` is Kafka's controller listener, if any."""
        listeners = [f"PLAINTEXT://127.0.0.1:{plain_port}",
                     f"{SECURE_LISTENER}://127.0.0.1:{secure_port}"]
        protocols = ["PLAINTEXT:PLAINTEXT", f"{SECURE_LISTENER}:SASL_SSL"]
        if controller:
            protocols.append("CONTROLLER:PLAINTEXT")
        prefix = f"listener.name.{SECURE_LISTENER.lower()}."
        return [
            "listeners=" + ",".join(listeners + ([controller] if controller else [])),
            "advertised.listeners=" + ",".join(listeners),
            "listener.security.protocol.map=" + ",".join(protocols),
            "inter.broker.listener.name=PLAINTEXT",
            f"{prefix}sasl.enabled.mechanisms=SCRAM-SHA-256",
            f"{prefix}scram-sha-256.sasl.jaas.config="
            "org.apache.kafka.common.security.scram.ScramLoginModule required;",
            f"{prefix}ssl.keystore.type=PEM",
            f"{prefix}ssl.keystore.location={self.keystore}",
        ]

    def add_user(self, libs: Path, plain_port: int, log: Path, timeout_s: float):
        """Creates the SCRAM user with kafka-configs over the PLAINTEXT listener."""
        args = ["--bootstrap-server", f"127.0.0.1:{plain_port}", "--alter", "--add-config",
                f"SCRAM-SHA-256=[iterations={SCRAM_ITERATIONS},password={SCRAM_PASSWORD}]",
                "--entity-type", "users", "--entity-name", SCRAM_USER]
        # kafka-configs' class: kafka.admin.ConfigCommand in 4.1, moved to tools later.
        for main in ("kafka.admin.ConfigCommand", "org.apache.kafka.tools.ConfigCommand"):
            code, out = run_tool(libs, main, args, log, timeout_s)
            if "ClassNotFoundException" not in out:
                break
        if code != 0:
            raise BrokerFailed(f"kafka-configs could not add the SCRAM user: {tail(log)}")

    def rdk_args(self) -> tuple[str, ...]:
        """rdkafka_performance's settings for the SASL_SSL listener (librdkafka's keys)."""
        return ("-X", "security.protocol=SASL_SSL", "-X", "sasl.mechanism=SCRAM-SHA-256",
                "-X", f"sasl.username={SCRAM_USER}", "-X", f"sasl.password={SCRAM_PASSWORD}",
                "-X", f"ssl.ca.location={self.ca}")

    def client_context(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=str(self.ca))
        ctx.check_hostname = False  # the certificate names IP:127.0.0.1; verified below
        return ctx


def _scram_salted(password: str, salt: bytes, iterations: int) -> bytes:
    return hashlib.pbkdf2_hmac("sha256", password.encode(), salt, iterations)


def scram_connect(port: int, ctx: ssl.SSLContext, salted_cache: dict) -> None:
    """One new connection: TLS, SaslHandshake v1 (SCRAM-SHA-256), SaslAuthenticate v1 with the
    client-first and client-final messages, the server's signature checked; then closed. Raises
    on any failure. The salted password is cached per salt, as clients may (RFC 5802 §5.1):
    the broker's work per connection is what is measured."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        with ctx.wrap_socket(raw, server_hostname="127.0.0.1") as sock:
            if sock.getpeercert() is None:
                raise ValueError("no broker certificate")

            def call(api_key: int, version: int, cid: int, body: bytes) -> bytes:
                sock.sendall(_frame(api_key, version, cid, body))
                size = struct.unpack(">i", _read_exact(sock, 4))[0]
                answer = _read_exact(sock, size)
                if struct.unpack(">i", answer[:4])[0] != cid:
                    raise ValueError("correlation id mismatch")
                return answer[4:]

            def string(text: str) -> bytes:
                data = text.encode()
                return struct.pack(">h", len(data)) + data

            answer = call(17, 1, 1, string("SCRAM-SHA-256"))
            if struct.unpack(">h", answer[:2])[0] != 0:
                raise ValueError(f"SaslHandshake error {struct.unpack('>h', answer[:2])[0]}")

            def authenticate(cid: int, token: bytes) -> bytes:
                body = call(36, 1, cid, struct.pack(">i", len(token)) + token)
                error = struct.unpack(">h", body[:2])[0]
                if error != 0:
                    raise ValueError(f"SaslAuthenticate error {error}")
                msg_len = struct.unpack(">h", body[2:4])[0]
                at = 4 + max(msg_len, 0)
                n = struct.unpack(">i", body[at:at + 4])[0]
                return body[at + 4:at + 4 + n]

            nonce = base64.b64encode(os.urandom(18)).decode()
            first_bare = f"n={SCRAM_USER},r={nonce}"
            server_first = authenticate(2, ("n,," + first_bare).encode()).decode()
            fields = dict(part.split("=", 1) for part in server_first.split(","))
            if not fields["r"].startswith(nonce):
                raise ValueError("server nonce does not extend the client's")
            salt, iterations = base64.b64decode(fields["s"]), int(fields["i"])
            key = (fields["s"], iterations)
            salted = salted_cache.get(key)
            if salted is None:
                salted = salted_cache[key] = _scram_salted(SCRAM_PASSWORD, salt, iterations)
            without_proof = f"c=biws,r={fields['r']}"
            auth_message = f"{first_bare},{server_first},{without_proof}".encode()
            client_key = hmac.digest(salted, b"Client Key", "sha256")
            stored_key = hashlib.sha256(client_key).digest()
            signature = hmac.digest(stored_key, auth_message, "sha256")
            proof = bytes(a ^ b for a, b in zip(client_key, signature))
            final = f"{without_proof},p={base64.b64encode(proof).decode()}"
            server_final = authenticate(3, final.encode()).decode()
            server_key = hmac.digest(salted, b"Server Key", "sha256")
            expected = base64.b64encode(hmac.digest(server_key, auth_message, "sha256")).decode()
            if server_final != f"v={expected}":
                raise ValueError(f"server signature mismatch: {server_final}")


def _connect_worker(port: int, ca: str, seconds: float, out) -> None:
    ctx = ssl.create_default_context(cafile=ca)
    ctx.check_hostname = False
    cache: dict = {}
    done, failed, first_error = 0, 0, None
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            scram_connect(port, ctx, cache)
            done += 1
        except (OSError, ValueError, KeyError, struct.error) as err:
            failed += 1
            first_error = first_error or f"{type(err).__name__}: {err}"
    out.put((done, failed, first_error))


def connection_rate(port: int, security: Security, run: ConnectRun) -> dict:
    # One connection first, so that a broker that cannot authenticate fails fast and clearly.
    try:
        scram_connect(port, security.client_context(), {})
    except (OSError, ValueError, KeyError, struct.error) as err:
        return {"error": f"{type(err).__name__}: {err}"}
    mp = multiprocessing.get_context("fork")
    queue = mp.Queue()
    t0 = time.monotonic()
    procs = [mp.Process(target=_connect_worker,
                        args=(port, str(security.ca), run.seconds, queue))
             for _ in range(run.workers)]
    for proc in procs:
        proc.start()
    results = [queue.get(timeout=run.seconds + 60) for _ in procs]
    for proc in procs:
        proc.join()
    wall = time.monotonic() - t0
    done = sum(r[0] for r in results)
    failed = sum(r[1] for r in results)
    errors = [r[2] for r in results if r[2]]
    if failed:
        return {"error": f"{failed} of {done + failed} connections failed: {errors[0]}"}
    return {"connections": done, "connections_per_s": done / wall}


# --------------------------------------------------------------------------------------------
# Brokers


class BrokerFailed(Exception):
    pass


class Broker:
    """One broker process for one session: start, sample, stop."""

    label = ""
    key = ""

    def __init__(self, workdir: Path, security: Security | None = None):
        self.workdir = workdir
        self.proc: subprocess.Popen | None = None
        self.port = free_port()
        # --security: the tools' SASL_SSL listener; `port` stays PLAINTEXT for the probes.
        self.security = security
        self.secure_port = free_port() if security else None
        self.log = workdir / "broker.log"
        self.config_text = ""
        self.apis: dict[int, tuple[int, int]] = {}
        self.stopped = False
        self.problems: list[str] = []

    def command(self) -> tuple[list[str], dict[str, str]]:
        raise NotImplementedError

    def is_broker_image(self, pid: int) -> bool:
        """True once `pid` runs the broker itself (not a launcher script still preparing)."""
        return True

    def start(self) -> dict:
        cmd, env = self.command()
        with open(self.log, "wb") as log:
            launched = time.monotonic()
            self.proc = subprocess.Popen(
                cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=self.workdir,
                start_new_session=True,
            )
        pid = self.proc.pid
        started = None
        answered = None
        deadline = launched + STARTUP_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise BrokerFailed(f"exited with code {self.proc.returncode} before answering; "
                                   f"log: {tail(self.log)}")
            if started is None:
                if self.is_broker_image(pid):
                    started = time.monotonic()
                else:
                    time.sleep(0.001)
                    continue
            try:
                self.apis = api_versions(self.port)
                answered = time.monotonic()
                break
            except (OSError, ValueError, struct.error):
                time.sleep(0.002)
        if answered is None:
            raise BrokerFailed(f"no ApiVersions answer within {STARTUP_TIMEOUT_S:.0f} s; "
                               f"log: {tail(self.log)}")
        ready = None
        deadline = answered + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            try:
                if metadata_broker_count(self.port) >= 1:
                    ready = time.monotonic()
                    break
            except (OSError, ValueError, struct.error):
                pass
            if self.proc.poll() is not None:
                raise BrokerFailed(f"exited with code {self.proc.returncode}; log: {tail(self.log)}")
            time.sleep(0.01)
        if ready is None:
            raise BrokerFailed(f"Metadata listed no broker within {READY_TIMEOUT_S:.0f} s")
        return {
            "startup_ms": (answered - started) * 1000,
            "ready_ms": (ready - started) * 1000,
        }

    @property
    def client_port(self) -> int:
        """The port the tools use."""
        return self.secure_port or self.port

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def cpu_s(self) -> float | None:
        return proc_cpu_s(self.proc.pid) if self.alive() else None

    def kernel_cpu_s(self) -> float | None:
        split = proc_cpu_split_s(self.proc.pid) if self.alive() else None
        return None if split is None else split[1]

    def peak_rss_kib(self) -> int | None:
        return proc_status_kib(self.proc.pid, "VmHWM") if self.alive() else None

    def group_apis_missing(self) -> list[str]:
        return [name for key, name in sorted(GROUP_API_KEYS.items()) if key not in self.apis]

    # Exit statuses that mean a clean stop after SIGTERM (Popen gives -N for death by signal N).
    clean_exits = (0,)

    def stop(self) -> float | None:
        """SIGTERM, then SIGKILL after STOP_TIMEOUT_S. Returns seconds to exit after SIGTERM.
        Notes in self.problems what a clean stop would not show: an exit before the stop, a
        SIGTERM not obeyed in time, an unclean exit status, a panic in the broker's output."""
        if self.proc is None or self.stopped:
            return None
        self.stopped = True
        elapsed = None
        if self.proc.poll() is not None:
            self.problems.append(f"exited with code {self.proc.returncode} before it was stopped")
        else:
            t = time.monotonic()
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(STOP_TIMEOUT_S)
                elapsed = time.monotonic() - t
                if self.proc.returncode not in self.clean_exits:
                    self.problems.append(f"exited with code {self.proc.returncode} after SIGTERM")
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
                self.problems.append(f"did not stop within {STOP_TIMEOUT_S:.0f} s of SIGTERM")
        try:
            panics = [line for line in self.log.read_text(errors="replace").splitlines()
                      if "panicked at" in line]
        except OSError:
            panics = []
        if panics:
            self.problems.append(f"panicked ({len(panics)} panic lines): {panics[0].strip()}")
        return elapsed


class ApacheKafka(Broker):
    label = "Apache Kafka 4.1.1"
    key = "kafka"
    # The JVM exits 143 after running its shutdown hooks on SIGTERM.
    clean_exits = (0, 143, -signal.SIGTERM)

    def __init__(self, workdir: Path, security: Security | None = None):
        super().__init__(workdir, security)
        self.controller_port = free_port()
        self.data = workdir / "kafka"

    def command(self):
        env = dict(os.environ, KAFKA_HEAP=KAFKA_HEAP)
        secure = self.security.broker_props(
            self.port, self.secure_port, f"CONTROLLER://127.0.0.1:{self.controller_port}"
        ) if self.security else []
        # Appended to apache-kafka.sh's server.properties: a later key wins.
        cmd = [str(ROOT / "integration" / "apache-kafka.sh"), str(self.data), str(self.port),
               str(self.controller_port), *COMMON_PROPS, *secure]
        return cmd, env

    def is_broker_image(self, pid: int) -> bool:
        # apache-kafka.sh formats the data dir with a separate JVM, then execs kafka.Kafka in its
        # own process: startup is counted from that exec, so formatting is not charged to it.
        try:
            return b"kafka.Kafka\0" in Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            return False

    def start(self):
        result = super().start()
        self.config_text = (self.data / "server.properties").read_text()
        return result


class KafkaIQ(Broker):
    label = "KafkaIQ"
    key = "kafkaiq"

    def __init__(self, workdir: Path, binary: Path, key: str = "kafkaiq", label: str = "KafkaIQ",
                 security: Security | None = None):
        super().__init__(workdir, security)
        self.binary = binary
        self.key, self.label = key, label

    def command(self):
        # Kafka's names for the same settings Apache Kafka gets, minus the KRaft controller
        # listener: the KafkaIQ node is its own controller without a separate port.
        listener = f"PLAINTEXT://127.0.0.1:{self.port}"
        listeners = (self.security.broker_props(self.port, self.secure_port, None)
                     if self.security else
                     [f"listeners={listener}", f"advertised.listeners={listener}"])
        props = [
            "node.id=1",
            *listeners,
            f"log.dirs={self.workdir / 'kafkaiq' / 'data'}",
            *SINGLE_NODE_PROPS,
            *COMMON_PROPS,
        ]
        self.config_text = "\n".join(props) + "\n"
        config = self.workdir / "server.properties"
        config.write_text(self.config_text)
        env = dict(os.environ)
        env.setdefault("RUST_LOG", "warn")
        return [str(self.binary), "--config", str(config)], env


# --------------------------------------------------------------------------------------------
# Tools

PRODUCE_FINAL = re.compile(
    r"(\d+) records sent, ([\d.]+) records/sec \(([\d.]+) MB/sec\), ([\d.]+) ms avg latency, "
    r"([\d.]+) ms max latency, ([\d.]+) ms 50th, ([\d.]+) ms 95th, ([\d.]+) ms 99th, "
    r"([\d.]+) ms 99\.9th"
)
CONSUME_HEADER = "start.time, end.time, data.consumed.in.MB"


def tail(path: Path, lines: int = 6) -> str:
    try:
        text = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return "(no output)"
    return " | ".join(line.strip() for line in text[-lines:]) or "(no output)"


def error_lines(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines()
            if "Exception" in line or line.startswith("ERROR") or " ERROR " in line]


_CDS_OPTS: dict[Path, list[str]] = {}


def cds_opts(libs: Path) -> list[str]:
    """The java options that map the class data archive of the jars in `libs`
    (integration/lib/java-cds.sh, made on first use): each tool JVM starts sooner and behaves
    as without it. Empty when no archive could be made (said on stderr)."""
    if libs not in _CDS_OPTS:
        helper = ROOT / "integration" / "lib" / "java-cds.sh"
        out = subprocess.run(
            ["bash", "-c", 'source "$1" && kafka_cds_opts "$2" && printf "%s\\n" "${CDS_OPTS[@]}"',
             "java-cds", str(helper), str(libs)], check=True, capture_output=True, text=True)
        sys.stderr.write(out.stderr)
        _CDS_OPTS[libs] = [o for o in out.stdout.splitlines() if o]
    return _CDS_OPTS[libs]


def run_tool(libs: Path, main_class: str, args: list[str], log: Path, timeout_s: float):
    cmd = ["java", *cds_opts(libs), TOOL_HEAP, "-cp", f"{libs}/*", main_class, *args]
    return run_logged(cmd, log, timeout_s)


def run_logged(cmd: list[str], log: Path, timeout_s: float) -> tuple[int | None, str]:
    """Runs `cmd` (its own process group) with its output and the command line in `log`;
    (exit code, or None when it was killed after `timeout_s`; its output)."""
    with open(log, "wb") as out:
        out.write((" ".join(cmd) + "\n").encode())
        out.flush()
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
        try:
            code = proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            code = None
    return code, log.read_text(errors="replace")


def produce(libs: Path, port: int, run: ProduceRun, log: Path, timeout_s: float,
            client_props: Path | None = None) -> dict:
    if run.topic_config:
        create_log = log.with_name(f"create-{run.topic}.log")
        configs = [a for kv in run.topic_config for a in ("--config", kv)]
        secure = ["--command-config", str(client_props)] if client_props else []
        code, _ = run_tool(
            libs, "org.apache.kafka.tools.TopicCommand",
            ["--bootstrap-server", f"127.0.0.1:{port}", "--create", "--topic", run.topic,
             "--partitions", "1", "--replication-factor", "1", *configs, *secure], create_log,
            timeout_s)
        if code != 0:
            return {"error": f"creating {run.topic}: exit {code}: {tail(create_log)}"}
    txn = (["--transactional-id", f"bench-{run.name}", "--transaction-duration-ms",
            str(run.transaction_ms)] if run.transaction_ms > 0 else [])
    code, out = run_tool(
        libs, "org.apache.kafka.tools.ProducerPerformance",
        ["--topic", run.topic, "--num-records", str(run.records), "--record-size", str(run.size),
         "--throughput", str(run.throughput), *txn,
         *(["--producer.config", str(client_props)] if client_props else []), "--producer-props",
         f"bootstrap.servers=127.0.0.1:{port}", f"acks={run.acks}"],
        log, timeout_s)
    if code is None:
        return {"error": f"timed out after {timeout_s:.0f} s: {tail(log)}"}
    finals = PRODUCE_FINAL.findall(out)
    errors = error_lines(out)
    if code != 0 or not finals or errors:
        why = errors[0] if errors else tail(log)
        return {"error": f"exit {code}: {why}"}
    sent, rate, mbps, avg, mx, p50, p95, p99, p999 = finals[-1]
    if int(sent) != run.records:
        return {"error": f"sent {sent} of {run.records} records"}
    return {
        "records_per_s": float(rate), "mib_per_s": float(mbps), "avg_ms": float(avg),
        "max_ms": float(mx), "p50_ms": float(p50), "p95_ms": float(p95), "p99_ms": float(p99),
        "p999_ms": float(p999),
    }


COMMIT_LATENCY_SOURCE = Path(__file__).resolve().parent / "CommitLatency.java"


def commit_latency(libs: Path, port: int, run: CommitRun, log: Path, timeout_s: float) -> dict:
    # The source launcher takes the .java file where a main class would go.
    code, text = run_tool(
        libs, str(COMMIT_LATENCY_SOURCE),
        [f"127.0.0.1:{port}", run.topic, str(run.transactions), str(run.records_per_txn),
         str(run.size)], log, timeout_s)
    if code is None:
        return {"error": f"timed out after {timeout_s:.0f} s: {tail(log)}"}
    found = re.findall(r"^COMMITS (\d+) ([\d.]+) ([\d.]+) ([\d.]+) ([\d.]+) ([\d.]+) ([\d.]+)$",
                       text, re.M)
    errors = error_lines(text)
    if code != 0 or not found or errors:
        why = errors[0] if errors else tail(log)
        return {"error": f"exit {code}: {why}"}
    count, avg, p50, p99, p999, mx, rate = found[-1]
    if int(count) != run.transactions:
        return {"error": f"committed {count} of {run.transactions} transactions"}
    return {"commit_avg_ms": float(avg), "commit_p50_ms": float(p50),
            "commit_p99_ms": float(p99), "commit_p999_ms": float(p999),
            "commit_max_ms": float(mx), "transactions_per_s": float(rate)}


def consume(libs: Path, port: int, run: ConsumeRun, log: Path, timeout_s: float,
            group: str, idle_timeout_ms: int, client_props: Path | None = None) -> dict:
    extra = []
    if run.read_committed or client_props:
        props = log.with_name(f"{run.name}.properties")
        props.write_text((client_props.read_text() if client_props else "")
                         + ("isolation.level=read_committed\n" if run.read_committed else ""))
        extra = ["--consumer.config", str(props)]
    code, out = run_tool(
        libs, "org.apache.kafka.tools.ConsumerPerformance",
        ["--bootstrap-server", f"127.0.0.1:{port}", "--topic", run.topic,
         "--messages", str(run.records), "--group", group, "--timeout", str(idle_timeout_ms),
         *extra],
        log, timeout_s)
    if code is None:
        return {"error": f"timed out after {timeout_s:.0f} s: {tail(log)}"}
    lines = out.splitlines()
    row = None
    for i, line in enumerate(lines):
        if line.startswith(CONSUME_HEADER) and i + 1 < len(lines):
            row = [f.strip() for f in lines[i + 1].split(",")]
    errors = error_lines(out)
    if code != 0 or row is None or len(row) < 10 or errors:
        why = errors[0] if errors else tail(log)
        return {"error": f"exit {code}: {why}"}
    consumed = int(row[4])
    if consumed < run.records:
        return {"error": f"consumed {consumed} of {run.records} records: {tail(log, 3)}"}
    return {
        "mib_per_s": float(row[3]), "records_per_s": float(row[5]),
        "rebalance_ms": float(row[6]), "fetch_ms": float(row[7]),
        "fetch_mib_per_s": float(row[8]), "fetch_records_per_s": float(row[9]),
    }


# --------------------------------------------------------------------------------------------
# rdkafka_performance (C): a load generator that is not the bottleneck on a small machine

RDK_FINAL = re.compile(
    r"(\d+) messages produced \((\d+) bytes\), (\d+) delivered \(offset -?\d+, (\d+) failed\) in "
    r"(\d+)ms: (\d+) msgs/s and ([\d.]+) MB/s, (\d+) produce failures"
)
RDK_CONSUMED = re.compile(r"(\d+) messages \((\d+) bytes\) consumed in (\d+)ms")


def build_rdk() -> tuple[Path | None, str]:
    """rdkafka_performance (with OpenSSL), built once by build-rdkafka-perf.sh; (path or None,
    a line for the report saying what it is or why it is missing)."""
    script = ROOT / "benches" / "compare" / "build-rdkafka-perf.sh"
    proc = subprocess.run([str(script)], capture_output=True, text=True)
    if proc.returncode != 0:
        log(proc.stderr)
        return None, "rdkafka_performance did not build: " + proc.stderr.strip()[-200:]
    path = Path(proc.stdout.strip().splitlines()[-1])
    return path, (f"`rdkafka_performance` from librdkafka (rdkafka-sys crate source), built by "
                  "`benches/compare/build-rdkafka-perf.sh` with librdkafka's defaults")


def rdk_produce(rdk: Path, bootstrap: str, run: RdkProduceRun, log: Path, timeout_s: float,
                extra: tuple[str, ...] = ()):
    """`extra`: more `-X key=value` arguments (the security settings)."""
    acks = "-1" if run.acks == "all" else run.acks
    cmd = [str(rdk), "-P", "-t", run.topic, "-b", bootstrap, "-s", str(run.size),
           "-c", str(run.records), "-X", f"acks={acks}", "-q", *extra]
    code, text = run_logged(cmd, log, timeout_s)
    if code is None:
        return {"error": f"timed out after {timeout_s:.0f} s: {tail(log)}"}
    finals = RDK_FINAL.findall(text)
    if code != 0 or not finals:
        return {"error": f"exit {code}: {tail(log)}"}
    return rdk_result(finals[-1], run)


def rdk_result(final: tuple, run: RdkProduceRun) -> dict:
    """A run's figures from rdkafka_performance's final line. Its "produce failures" count
    every time the local queue was full (the tool polls and sends again: backpressure, not a
    lost record); any other produce error stops it short of its count, so every record
    delivered and none failed is success."""
    produced, nbytes, delivered, failed, ms, rate, mbps, pfail = final
    if int(delivered) != run.records or int(failed):
        return {"error": f"delivered {delivered} of {run.records} ({failed} failed, "
                         f"{pfail} produce failures)"}
    secs = int(ms) / 1000
    return {"records_per_s": int(delivered) / secs if secs else float(rate),
            "mib_per_s": int(delivered) * run.size / MIB / secs if secs else float(mbps),
            "queue_full_retries": int(pfail)}


def rdk_consume(rdk: Path, bootstrap: str, run: RdkConsumeRun, log: Path, timeout_s: float,
                extra: tuple[str, ...] = ()):
    """Reads `run.records` from offset 0 of partition 0; the tool times from its first record
    to its last, so connecting and authenticating are not in the figure."""
    cmd = [str(rdk), "-C", "-t", run.topic, "-p", "0", "-o", "beginning", "-b", bootstrap,
           "-c", str(run.records), "-q", *extra]
    code, text = run_logged(cmd, log, timeout_s)
    if code is None:
        return {"error": f"timed out after {timeout_s:.0f} s: {tail(log)}"}
    finals = RDK_CONSUMED.findall(text)
    if code != 0 or not finals:
        return {"error": f"exit {code}: {tail(log)}"}
    consumed, nbytes, ms = (int(x) for x in finals[-1])
    if consumed != run.records:
        return {"error": f"consumed {consumed} of {run.records} records"}
    secs = ms / 1000
    return {"records_per_s": consumed / secs if secs else 0.0,
            "fetch_mib_per_s": nbytes / MIB / secs if secs else 0.0}


# --------------------------------------------------------------------------------------------
# A session: one broker, fresh data dir, the whole plan


def run_session(broker: Broker, libs: Path, plan, args, round_no: int) -> dict:
    session = {"broker": broker.key, "round": round_no, "runs": {}, "error": None}
    session["load_before"] = os.getloadavg()
    try:
        session.update(broker.start())
    except BrokerFailed as err:
        broker.stop()
        session["error"] = f"did not start: {err}"
        log(f"  {broker.label}: {session['error']}")
        return session
    log(f"  {broker.label} answered ApiVersions after {session['startup_ms']:.0f} ms "
        f"(listed in Metadata after {session['ready_ms']:.0f} ms)")
    client_props = broker.security.client_properties if broker.security else None
    if broker.security:
        try:
            secure_ready(broker, libs, args.tool_timeout)
        except BrokerFailed as err:
            broker.stop()
            session["error"] = f"SASL_SSL listener not ready: {err}"
            session["startup_ms"] = None
            log(f"  {broker.label}: {session['error']}")
            return session
    session["group_apis_missing"] = broker.group_apis_missing()
    tool_timeout = args.tool_timeout
    for run in plan:
        if not broker.alive():
            session["runs"][run.name] = {"error": f"broker exited ({broker.proc.returncode}) "
                                                  f"before this run; log: {tail(broker.log)}"}
            continue
        tool_log = broker.workdir / f"{run.name}.log"
        cpu0, busy0, kids0, t0 = broker.cpu_s(), system_busy_s(), children_cpu_s(), time.monotonic()
        sys0 = broker.kernel_cpu_s()
        port = broker.client_port
        if isinstance(run, (RdkProduceRun, RdkConsumeRun)):
            rdk = getattr(args, "rdk", None)
            extra = broker.security.rdk_args() if broker.security else ()
            tool = rdk_produce if isinstance(run, RdkProduceRun) else rdk_consume
            result = (tool(rdk, f"127.0.0.1:{port}", run, tool_log, tool_timeout, extra) if rdk
                      else {"error": getattr(args, "rdk_note", "no rdkafka_performance")})
        elif isinstance(run, ProduceRun):
            result = produce(libs, port, run, tool_log, tool_timeout, client_props)
        elif isinstance(run, CommitRun):
            result = commit_latency(libs, port, run, tool_log, tool_timeout)
        elif isinstance(run, ConnectRun):
            result = connection_rate(port, broker.security, run)
        else:
            result = consume(libs, port, run, tool_log, tool_timeout,
                             group=f"bench-{run.name}-{round_no}",
                             idle_timeout_ms=args.consumer_idle_timeout_ms,
                             client_props=client_props)
        cpu1, busy1, kids1, t1 = broker.cpu_s(), system_busy_s(), children_cpu_s(), time.monotonic()
        sys1 = broker.kernel_cpu_s()
        wall = t1 - t0
        if cpu0 is not None and cpu1 is not None:
            broker_cpu = cpu1 - cpu0
            tool_cpu = kids1 - kids0
            result["broker_cpu_s"] = broker_cpu
            if isinstance(run, ConnectRun):
                if result.get("connections"):
                    result["broker_cpu_ms_per_connection"] = (
                        broker_cpu * 1000 / result["connections"])
            else:
                result["broker_cpu_s_per_mib"] = broker_cpu / run.mib
                if sys0 is not None and sys1 is not None:
                    # The part spent in the kernel for the broker (system time): receiving,
                    # writing to the page cache, sending, waiting for events.
                    result["broker_sys_s"] = sys1 - sys0
                    result["broker_sys_s_per_mib"] = (sys1 - sys0) / run.mib
                result["tool_cpu_s_per_mib"] = tool_cpu / run.mib
            result["tool_cpu_s"] = tool_cpu
            # CPU used by everything else on the machine (other users' work) during this run.
            result["other_cores"] = max(0.0, busy1 - busy0 - broker_cpu - tool_cpu) / wall
        result["wall_s"] = wall
        if "error" in result and isinstance(run, ConsumeRun) and session["group_apis_missing"]:
            result["unsupported"] = ("broker does not advertise "
                                     + ", ".join(session["group_apis_missing"]))
        session["runs"][run.name] = result
        log(f"  {broker.label} {run.name}: {describe_result(run, result)}")
    session["peak_rss_kib"] = broker.peak_rss_kib()
    session["load_after"] = os.getloadavg()
    if not broker.alive():
        session["error"] = f"exited with code {broker.proc.returncode} during the runs"
    session["stop_s"] = broker.stop()
    session["stop_problems"] = broker.problems
    for problem in broker.problems:
        log(f"  {broker.label}: {problem}")
    session["config"] = broker.config_text
    return session


def secure_ready(broker: Broker, libs: Path, timeout_s: float):
    """Creates the SCRAM user, then waits until a connection authenticates with it on the
    SASL_SSL listener (the credential reaches the broker's cache through its metadata log)."""
    broker.security.add_user(libs, broker.port, broker.workdir / "add-user.log", timeout_s)
    deadline = time.monotonic() + READY_TIMEOUT_S
    ctx = broker.security.client_context()
    while True:
        try:
            scram_connect(broker.secure_port, ctx, {})
            return
        except (OSError, ValueError, KeyError, struct.error) as err:
            if time.monotonic() > deadline:
                raise BrokerFailed(f"no SCRAM authentication within {READY_TIMEOUT_S:.0f} s: "
                                   f"{type(err).__name__}: {err}")
            time.sleep(0.1)


def describe_result(run, result: dict) -> str:
    if "error" in result:
        kind = "unsupported" if "unsupported" in result else "FAILED"
        return f"{kind}: {result['error']}"
    if isinstance(run, ConnectRun):
        return (f"{result['connections_per_s']:.0f} connections/s ({result['connections']} in "
                f"{run.seconds:.0f} s, {run.workers} workers), broker "
                f"{result.get('broker_cpu_ms_per_connection', 0):.2f} CPU ms per connection")
    if isinstance(run, CommitRun):
        return (f"commit p50 {result['commit_p50_ms']:.2f} ms, p99 "
                f"{result['commit_p99_ms']:.2f} ms, {result['transactions_per_s']:.0f} "
                f"transactions/s")
    if isinstance(run, RdkConsumeRun):
        return (f"{result['fetch_mib_per_s']:.1f} MiB/s, broker "
                f"{result.get('broker_cpu_s_per_mib', 0):.4f} CPU s/MiB")
    if isinstance(run, RdkProduceRun):
        return (f"{result['records_per_s']:.0f} rec/s, {result['mib_per_s']:.2f} MiB/s, broker "
                f"{result.get('broker_cpu_s_per_mib', 0):.4f} CPU s/MiB")
    if isinstance(run, ConsumeRun):
        return (f"{result['fetch_mib_per_s']:.1f} MiB/s fetching, "
                f"{result['rebalance_ms']:.0f} ms joining the group")
    return (f"{result['records_per_s']:.0f} rec/s, {result['mib_per_s']:.2f} MiB/s, "
            f"p99 {result['p99_ms']:.0f} ms, broker {result.get('broker_cpu_s_per_mib', 0):.4f} "
            f"CPU s/MiB")


# --------------------------------------------------------------------------------------------
# Report


@dataclasses.dataclass
class Row:
    label: str
    run: str | None  # plan entry, None for session-level figures
    field: str
    unit: str
    fmt: str
    target: float | None = None
    higher_is_better: bool = True


def cost_rows(desc: str, run: str) -> list[Row]:
    """Where a producer run's CPU went: the broker's kernel (system) time per MiB, which both
    brokers spend on the same work (receiving, writing to the page cache, sending, waiting for
    events), and the producer tool's own CPU per MiB, which bounds how fast it can go on this
    machine's cores whatever the broker."""
    return [
        Row(f"… of which in the kernel (system time), {desc}", run, "broker_sys_s_per_mib",
            "CPU s/MiB", "{:.4f}", None, False),
        Row(f"Producer tool CPU per MiB, {desc}", run, "tool_cpu_s_per_mib", "CPU s/MiB",
            "{:.4f}", None, False),
    ]


def rows_for(plan, secure: bool = False) -> list[Row]:
    """The results table's rows. `secure` (--security): the tools ran over SASL_SSL, and the
    security issue's targets apply (throughput ≥ 1.5×, broker CPU per MiB ≤ 0.3×)."""
    throughput_target, cpu_target = (1.5, 0.3) if secure else (1.0, 0.5)
    over = " over SASL_SSL (SCRAM-SHA-256)" if secure else ""
    rows = []
    for run in plan:
        if not run.measured:
            continue
        if isinstance(run, ConnectRun):
            desc = (f"TLS handshake + SCRAM-SHA-256, {run.workers} clients opening connections "
                    f"one after another for {run.seconds:.0f} s")
            rows.append(Row(f"New connections per second, {desc}", run.name,
                            "connections_per_s", "connections/s", "{:,.0f}", 1.0))
            rows.append(Row(f"Broker CPU per new connection, {desc}", run.name,
                            "broker_cpu_ms_per_connection", "CPU ms", "{:.2f}", None, False))
            continue
        if isinstance(run, (RdkProduceRun, RdkConsumeRun)):
            tool = "rdkafka_performance (C)"
            if isinstance(run, RdkProduceRun):
                desc = f"{tool}, {run.records:,} × {run.size} B, acks={run.acks}{over}"
                rows.append(Row(f"Producer throughput, {desc}", run.name, "mib_per_s", "MiB/s",
                                "{:.2f}", throughput_target))
                rows.append(Row(f"Broker CPU per MiB ingested, {desc}", run.name,
                                "broker_cpu_s_per_mib", "CPU s/MiB", "{:.4f}", cpu_target,
                                False))
                if secure:
                    rows.extend(cost_rows(desc, run.name))
            else:
                desc = f"{tool}, {run.records:,} × {run.size} B{over}"
                rows.append(Row(f"Consumer throughput, {desc}", run.name, "fetch_mib_per_s",
                                "MiB/s", "{:.2f}", throughput_target))
                rows.append(Row(f"Broker CPU per MiB consumed, {desc}", run.name,
                                "broker_cpu_s_per_mib", "CPU s/MiB", "{:.4f}", cpu_target,
                                False))
            continue
        txn = (f", transactional (commit every {run.transaction_ms} ms)"
               if isinstance(run, ProduceRun) and run.transaction_ms > 0 else "")
        if isinstance(run, CommitRun):
            desc = f"{run.transactions:,} transactions of {run.records_per_txn} × {run.size} B"
            for field, name, target in (("commit_p50_ms", "p50", None),
                                        ("commit_p99_ms", "p99", 0.5),
                                        ("commit_p999_ms", "p99.9", None)):
                rows.append(Row(f"Commit latency {name} (commitTransaction), {desc}", run.name,
                                field, "ms", "{:.2f}", target, False))
            rows.append(Row(f"Transactions per second, one producer, {desc}", run.name,
                            "transactions_per_s", "transactions/s", "{:,.0f}"))
        elif isinstance(run, ProduceRun) and run.throughput < 0:
            desc = f"{run.records:,} × {run.size} B, acks={run.acks}{txn}{over}"
            rows.append(Row(f"Producer throughput, {desc}", run.name, "records_per_s",
                            "records/s", "{:,.0f}", throughput_target))
            rows.append(Row(f"Producer throughput, {desc}", run.name, "mib_per_s", "MiB/s",
                            "{:.2f}", throughput_target))
            rows.append(Row(f"Broker CPU per MiB ingested, {desc}", run.name,
                            "broker_cpu_s_per_mib", "CPU s/MiB", "{:.4f}", cpu_target, False))
            if secure:
                rows.extend(cost_rows(desc, run.name))
        elif isinstance(run, ProduceRun):
            desc = f"{run.throughput:,} records/s × {run.size} B, acks={run.acks}{txn}{over}"
            if run.topic_config:
                desc += ", " + ", ".join(run.topic_config)
            for field, name in (("p50_ms", "p50"), ("p99_ms", "p99"), ("p999_ms", "p99.9")):
                rows.append(Row(f"Latency {name}, {desc}", run.name, field, "ms", "{:.0f}",
                                0.5 if field == "p99_ms" else None, False))
            rows.append(Row(f"Achieved rate, {desc}", run.name, "records_per_s", "records/s",
                            "{:,.0f}"))
            rows.append(Row(f"Broker CPU per MiB ingested, {desc}", run.name,
                            "broker_cpu_s_per_mib", "CPU s/MiB", "{:.4f}", None, False))
        else:
            desc = f"{run.records:,} × {run.size} B{over}"
            if run.read_committed:
                desc += ", read_committed"
            rows.append(Row(f"Consumer fetch throughput, {desc}", run.name, "fetch_mib_per_s",
                            "MiB/s", "{:.2f}", throughput_target if secure else None))
            rows.append(Row(f"Consumer group join (rebalance), {desc}", run.name,
                            "rebalance_ms", "ms", "{:.0f}", None, False))
            rows.append(Row(f"Broker CPU per MiB consumed, {desc}", run.name,
                            "broker_cpu_s_per_mib", "CPU s/MiB", "{:.4f}",
                            cpu_target if secure else None, False))
    rows.append(Row("Peak RSS (VmHWM)", None, "peak_rss_mib", "MiB", "{:.1f}", 0.2, False))
    rows.append(Row("Startup: process start → first ApiVersions answer", None, "startup_ms",
                    "ms", "{:.0f}", 0.1, False))
    rows.append(Row("Startup: process start → listed in Metadata", None, "ready_ms", "ms",
                    "{:.0f}", None, False))
    return rows


def values(sessions: list[dict], row: Row):
    """(values, failure notes) of one row across the sessions of one broker."""
    vals, notes = [], []
    for s in sessions:
        if s.get("startup_ms") is None:
            notes.append("did not start, see the per-run table")
            continue
        if row.run is None:
            if row.field == "peak_rss_mib":
                if s.get("peak_rss_kib") is not None:
                    vals.append(s["peak_rss_kib"] / 1024)
                else:
                    notes.append(s.get("error") or "not sampled")
            else:
                vals.append(s[row.field])
            continue
        result = s["runs"].get(row.run, {})
        if "error" in result:
            notes.append(("unsupported: " + result["unsupported"]) if "unsupported" in result
                         else "failed: " + result["error"])
        elif row.field in result:
            vals.append(result[row.field])
        else:
            notes.append("not measured")
    return vals, notes


def cell(vals, notes, fmt: str, total: int) -> str:
    if not vals:
        note = notes[0] if notes else "no data"
        if len(note) > 90:
            note = note[:87] + "…"
        return f"— ({note})".replace("|", "\\|")
    text = fmt.format(statistics.median(vals))
    if len(vals) < total:
        text += f" ({len(vals)}/{total} runs)"
    return text


def machine_description(args, binary: Path) -> list[tuple[str, str]]:
    def sh(cmd):
        try:
            return subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT,
                                  timeout=60).stdout.strip()
        except (OSError, subprocess.TimeoutExpired):
            return "?"
    cpu_model = "?"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            cpu_model = line.split(":", 1)[1].strip()
            break
    mem_kib = proc_meminfo("MemTotal")
    java = subprocess.run(["java", "-version"], capture_output=True, text=True).stderr
    commit = sh(["git", "rev-parse", "HEAD"])
    dirty = sh(["git", "status", "--porcelain", "--untracked-files=no"])
    return [
        ("Date (UTC)", datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M")),
        ("Host", platform.node()),
        ("CPUs (nproc)", str(os.cpu_count())),
        ("CPU model", cpu_model),
        ("Memory", f"{mem_kib / 1024 / 1024:.1f} GiB" if mem_kib else "?"),
        ("Kernel", platform.release()),
        ("JVM", " / ".join(l.strip() for l in java.strip().splitlines())),
        ("Commit", commit + (" (with uncommitted changes)" if dirty else "")),
        ("KafkaIQ binary", str(binary)),
        *([("KafkaIQ (before) binary", str(Path(args.compare_bin).resolve()))]
          if getattr(args, "compare_bin", None) else []),
        ("Broker JVM heap", f"Apache Kafka: `{KAFKA_HEAP}`; tools: `{TOOL_HEAP}`"),
    ]


def proc_meminfo(key: str) -> int | None:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    return None


def report(sessions: list[dict], plan, args, binary: Path, brokers: list[str]) -> str:
    by = {k: [s for s in sessions if s["broker"] == k] for k in brokers}
    out = []
    mode = "smoke run (tiny record counts, 1 round: the figures mean nothing)" if args.smoke \
        else f"{args.rounds} rounds"
    if args.security:
        mode += ", SASL_SSL"
    out.append(f"# KafkaIQ beside Apache Kafka 4.1.1 — {mode}\n")
    out.append("Produced by `benches/compare/compare.py`"
               + (" --smoke" if args.smoke else "") + ". Each round starts Apache Kafka, runs the "
               "plan, stops it, then does the same with KafkaIQ (A B A B …), each on fresh "
               "loopback ports with a fresh data dir. Cells are medians over the rounds; a cell "
               "says why when a broker could not do a run. Ratios are KafkaIQ / Kafka.\n")
    if args.note:
        out.append(f"**Conditions:** {args.note}\n")
    other = [r["other_cores"] for s in sessions for r in s["runs"].values() if "other_cores" in r]
    if other:
        out.append(f"Other processes on the machine used {statistics.median(other):.2f} cores "
                   f"(median over tool runs; max {max(other):.2f}) of "
                   f"{os.cpu_count()} while the tools ran (machine busy time minus the broker's "
                   f"and the tool's CPU, so it includes kernel writeback of the broker's data); "
                   f"see the per-run table.\n")
    out.append("## Machine\n")
    out.append("| | |\n|---|---|")
    for k, v in machine_description(args, binary):
        out.append(f"| {k} | {v.replace('|', '/')} |")
    out.append("")

    out.append("## Results (medians)\n")
    header, sep, both, with_before = results_header(brokers)
    out.append(header)
    out.append(sep)
    for row in rows_for(plan, bool(args.security)):
        line = f"| {row.label} | {row.unit} |"
        medians = {}
        for k in brokers:
            vals, notes = values(by[k], row)
            line += f" {cell(vals, notes, row.fmt, len(by[k]))} |"
            medians[k] = statistics.median(vals) if vals else None
        if with_before:
            a, b = medians.get("kafka"), medians.get("kafkaiq-before")
            ratio = b / a if a and b is not None else None
            line += f" {format_ratio(ratio)}× |" if ratio is not None else " — |"
        if both:
            a, b = medians.get("kafka"), medians.get("kafkaiq")
            ratio = b / a if a and b is not None else None
            line += f" {format_ratio(ratio)}× |" if ratio is not None else " — |"
            if row.target is None:
                line += " | |"
            else:
                sign = "≥" if row.higher_is_better else "≤"
                met = "" if ratio is None else (
                    "yes" if (ratio >= row.target if row.higher_is_better else ratio <= row.target)
                    else "no")
                line += f" {sign} {row.target}× | {met or '—'} |"
        out.append(line)
    out.append("")
    if args.security:
        out.append("Security targets (KafkaIQ / Kafka, from the security issue): producer and "
                   "consumer throughput ≥ 1.5× and broker CPU per MiB ≤ 0.3× at SASL_SSL; new "
                   "connections per second is reported beside Kafka's (≥ 1.0× marks it not "
                   "slower). The tools reach each broker on a SASL_SSL listener with "
                   "SCRAM-SHA-256 (RSA 2048 certificate, TLS 1.3 as both negotiate it); the "
                   "same PEM key store and client properties serve both brokers. The Java tools "
                   "and librdkafka's rdkafka_performance (C, OpenSSL) both run: on two cores the "
                   "Java tools take most of the CPU themselves (the Tool CPU column), so their "
                   "throughput says more about the client than the broker. rdkafka_performance "
                   "costs far less per MiB: its consumer shows how fast each broker serves; "
                   "its producer still spends about a core of its own (TLS and sending in one "
                   "thread), so its throughput is bounded by it and its broker CPU per MiB is "
                   "the figure to read. "
                   + (getattr(args, "rdk_note", "") or "") + "\n")
    out.append("Targets (KafkaIQ / Kafka, from the benchmark issue): producer throughput ≥ 1.0× "
               "for both record sizes; broker CPU per MB ingested ≤ 0.5×; p99 at the fixed rate "
               "≤ 0.5×; peak RSS ≤ 0.2×; startup ≤ 0.1×. MiB = 2^20 bytes of record values, as "
               "ProducerPerformance counts them. Broker CPU = utime+stime of the broker process "
               "during the tool run. Consumer throughput is ConsumerPerformance's fetch.MB.sec "
               "(time after the group join); the join time is its own row.\n")

    out.append("## Every run\n")
    out.append("| Round | Broker | Run | Result | Broker CPU s | Tool CPU s | Other cores | "
               "Wall s |")
    out.append("|---:|---|---|---|---:|---:|---:|---:|")
    for s in sessions:
        if s.get("startup_ms") is None:
            out.append(f"| {s['round']} | {LABELS[s['broker']]} | start | "
                       f"{(s['error'] or '').replace('|', '/')[:300]} | | | | |")
            continue
        rss = s.get("peak_rss_kib")
        out.append(f"| {s['round']} | {LABELS[s['broker']]} | session | startup "
                   f"{s['startup_ms']:.0f} ms, in Metadata {s['ready_ms']:.0f} ms, peak RSS "
                   + (f"{rss / 1024:.1f} MiB" if rss else "?")
                   + (f", stopped in {s['stop_s']:.1f} s" if s.get("stop_s") is not None else
                      ", did not stop on SIGTERM" if s.get("error") is None else "")
                   + f", load avg {s['load_before'][0]:.1f} → {s['load_after'][0]:.1f}"
                   + (f"; {s['error']}" if s.get("error") else "") + " | | | | |")
        for run in plan:
            r = s["runs"].get(run.name)
            if r is None:
                continue
            text = describe_result(run, r).replace("|", "/")[:300]
            num = lambda k, f="{:.2f}": f.format(r[k]) if k in r else ""
            out.append(f"| {s['round']} | {LABELS[s['broker']]} | {run.name} | {text} | "
                       f"{num('broker_cpu_s')} | {num('tool_cpu_s')} | {num('other_cores')} | "
                       f"{num('wall_s', '{:.1f}')} |")
    out.append("")

    out.append("## Plan\n")
    out.append("Stock tools from `org.apache.kafka:kafka-tools:4.1.1`, run with "
               f"`java {TOOL_HEAP} -cp <kafka jars>/*` (and the class data archive of "
               "integration/lib/java-cds.sh, for a shorter JVM start):\n")
    for run in plan:
        if isinstance(run, ConnectRun):
            out.append(f"- `{run.name}`: {run.workers} Python processes (`scram_connect` in "
                       f"benches/compare/compare.py) each opening connections one after another "
                       f"for {run.seconds:.0f} s: TLS handshake verifying the broker's "
                       "certificate, SaslHandshake v1, SaslAuthenticate v1 client-first and "
                       "client-final, the server signature checked, close. The client caches "
                       "the salted password per salt; every failed connection fails the run.")
        elif isinstance(run, CommitRun):
            out.append(f"- `{run.name}`: `java -cp <kafka jars>/* benches/compare/CommitLatency.java "
                       f"… {run.topic} {run.transactions} {run.records_per_txn} {run.size}` "
                       "(a transactional KafkaProducer timing each commitTransaction())")
        elif isinstance(run, RdkProduceRun):
            out.append(f"- `{run.name}`: `rdkafka_performance -P -t {run.topic} -b … -s "
                       f"{run.size} -c {run.records} -X acks={run.acks} -q` "
                       "(plus the SASL_SSL settings with --security)")
        elif isinstance(run, RdkConsumeRun):
            out.append(f"- `{run.name}`: `rdkafka_performance -C -t {run.topic} -p 0 -o "
                       f"beginning -b … -c {run.records} -q` (no group; timed by the tool from "
                       "its first record to its last)")
        elif isinstance(run, ProduceRun):
            rate = "-1" if run.throughput < 0 else str(run.throughput)
            if run.topic_config:
                out.append(f"- `{run.name}`: topic created first, `TopicCommand --create --topic "
                           f"{run.topic} --partitions 1 --replication-factor 1 "
                           + " ".join(f"--config {kv}" for kv in run.topic_config) + "`")
            out.append(f"- `{run.name}`{'' if run.measured else ' (not measured)'}: "
                       f"`ProducerPerformance --topic {run.topic} --num-records {run.records} "
                       f"--record-size {run.size} --throughput {rate} --producer-props "
                       f"bootstrap.servers=… acks={run.acks}`")
        else:
            out.append(f"- `{run.name}`: `ConsumerPerformance --bootstrap-server … --topic "
                       f"{run.topic} --messages {run.records} --group <fresh> --timeout "
                       f"{args.consumer_idle_timeout_ms}`")
    out.append("")
    out.append("Topics are auto-created (1 partition) by the first producer. A run fails on a "
               "non-zero exit, a missing final line, fewer records than asked, or any exception "
               "or ERROR line in the tool's output.\n")
    out.append("## Broker configs\n")
    for k in brokers:
        cfg = next((s.get("config") for s in by[k] if s.get("config")), None)
        if k == "kafka":
            out.append(f"Apache Kafka (`integration/apache-kafka.sh`, `KAFKA_HEAP={KAFKA_HEAP}`, "
                       "data dir formatted before the process whose startup is timed):\n")
        else:
            out.append("KafkaIQ (`kafkaiq --config server.properties`, `RUST_LOG="
                       f"{os.environ.get('RUST_LOG', 'warn')}`):\n")
        out.append("```properties\n" + (cfg or "(not started)\n").rstrip() + "\n```\n")
    return "\n".join(out)


def results_header(brokers: list[str]) -> tuple[str, str, bool, bool]:
    """The results table's header and separator rows: a column per broker, then the ratios to
    Kafka (before / Kafka when an earlier binary ran too) and the target. Also whether both
    brokers ran, and whether the earlier binary did beside them."""
    header = "| Metric | Unit |" + "".join(f" {LABELS[k]} |" for k in brokers)
    sep = "|---|---|" + "---:|" * len(brokers)
    both = "kafka" in brokers and "kafkaiq" in brokers
    with_before = both and "kafkaiq-before" in brokers
    if with_before:
        header += " before / Kafka |"
        sep += "---:|"
    if both:
        header += " KafkaIQ / Kafka | Target | Met |"
        sep += "---:|---:|:---:|"
    return header, sep, both, with_before


LABELS = {"kafka": "Apache Kafka", "kafkaiq": "KafkaIQ", "kafkaiq-before": "KafkaIQ (before)"}


def format_ratio(ratio: float) -> str:
    # Two decimals, except for ratios so small that two decimals would print 0.00.
    return f"{ratio:.2f}" if ratio >= 0.1 or ratio == 0 else f"{ratio:.2g}"


def log(msg: str):
    print(msg, file=sys.stderr, flush=True)


# --------------------------------------------------------------------------------------------


def build_kafkaiq(args) -> Path:
    if args.kafkaiq_bin:
        return Path(args.kafkaiq_bin).resolve()
    if os.environ.get("KAFKAIQ_BIN"):
        return Path(os.environ["KAFKAIQ_BIN"]).resolve()
    log("==> cargo build --release --bin kafkaiq")
    jobs = os.environ.get("CARGO_BUILD_JOBS", "2")
    subprocess.run(["cargo", "build", "--release", "--bin", "kafkaiq", "-j", jobs], cwd=ROOT,
                   check=True)
    target = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
    return (target / "release" / "kafkaiq").resolve()


def strict_failures(sessions: list[dict], args) -> list[str]:
    """The failures --smoke exits non-zero for: everything except ConsumerPerformance against a
    broker that says (in ApiVersions) it has no consumer groups, unless --strict-consumer."""
    failures = []
    for s in sessions:
        who = f"{LABELS[s['broker']]} round {s['round']}"
        if s.get("startup_ms") is None or s.get("error"):
            failures.append(f"{who}: {s['error']}")
        for problem in s.get("stop_problems", []):
            failures.append(f"{who}: {problem}")
        for name, r in s["runs"].items():
            if "error" not in r:
                continue
            if "unsupported" in r and not args.strict_consumer:
                continue
            failures.append(f"{who} {name}: {r['error']}")
    return failures


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--smoke", action="store_true",
                   help="tiny plan, 1 round, exit non-zero when a required run fails")
    p.add_argument("--rounds", type=int, default=None, help="rounds (default 3; smoke 1)")
    p.add_argument("--brokers", default="kafka,kafkaiq",
                   help="comma-separated subset of kafka,kafkaiq (default both)")
    p.add_argument("--kafkaiq-bin", help="use this binary instead of building (also $KAFKAIQ_BIN)")
    p.add_argument("--out", help="report path (default benches/results/<date>-<host>.md; "
                                 "smoke: inside the work dir)")
    p.add_argument("--workdir", help="where data dirs and logs go (default a fresh temp dir)")
    p.add_argument("--keep", action="store_true", help="keep the work dir (logs, not data)")
    p.add_argument("--note", default="", help="conditions to state in the report, e.g. other "
                                              "work running on the machine")
    p.add_argument("--strict-consumer", action="store_true",
                   help="treat ConsumerPerformance against a broker without consumer-group APIs "
                        "as a failure too")
    p.add_argument("--tool-timeout", type=float, default=None,
                   help="seconds one tool run may take (default 600; smoke 120)")
    p.add_argument("--consumer-idle-timeout-ms", type=int, default=None,
                   help="ConsumerPerformance --timeout (default 30000; smoke 10000)")
    p.add_argument("--cluster", type=int, default=None, metavar="N",
                   help="N-node clusters of each broker instead of one node (N=3: "
                        "benches/compare/cluster.py); with --smoke, a tiny cluster plan")
    p.add_argument("--compare-bin", metavar="PATH",
                   help="also run this (earlier) kafkaiq binary as a third broker, "
                        "'KafkaIQ (before)', in every round, before the current one")
    p.add_argument("--transactions", action="store_true",
                   help="the transactions plan: transactional ProducerPerformance and a "
                        "read_committed ConsumerPerformance")
    p.add_argument("--latency-only", action="store_true",
                   help="only a small warm-up and the fixed-rate run (cluster mode: and "
                        "EndToEndLatency)")
    p.add_argument("--security", choices=["sasl_ssl"], default=None,
                   help="the tools over a SASL_SSL listener (SCRAM-SHA-256) on both brokers, "
                        "and new connections per second; with --smoke, a tiny plan")
    p.add_argument("--port-base", type=int, default=None,
                   help="cluster mode: consecutive loopback ports from here (default: free "
                        "ephemeral ports)")
    args = p.parse_args()
    args.rounds = args.rounds or (1 if args.smoke else 3)
    args.tool_timeout = args.tool_timeout or (120.0 if args.smoke else 600.0)
    args.consumer_idle_timeout_ms = args.consumer_idle_timeout_ms or (
        10_000 if args.smoke else 30_000)
    brokers = [b.strip() for b in args.brokers.split(",") if b.strip()]
    if args.compare_bin:
        brokers = ["kafkaiq-before"] + brokers
    if not brokers or any(b not in LABELS for b in brokers):
        p.error("--brokers takes kafka, kafkaiq or both")
    if not args.smoke and args.rounds < 3 and "kafka" in brokers and "kafkaiq" in brokers:
        log(f"note: {args.rounds} rounds; the issue asks for at least 3")

    if args.cluster is not None:
        if args.cluster != 3:
            p.error("--cluster takes 3 (config/cluster/ has three nodes)")
        binary = build_kafkaiq(args) if "kafkaiq" in brokers else Path("-")
        libs = Path(subprocess.run([str(ROOT / "integration" / "kafka-libs.sh")], check=True,
                                   capture_output=True, text=True).stdout.strip())
        import cluster

        return cluster.main(args, libs, binary, brokers)

    if args.security and (args.cluster is not None or args.transactions or args.latency_only):
        p.error("--security runs its own plan on one node")
    plan = (security_smoke_plan() if args.smoke and args.security
            else security_plan() if args.security
            else smoke_plan() if args.smoke else latency_plan() if args.latency_only
            else transactions_plan() if args.transactions else full_plan())
    binary = build_kafkaiq(args) if "kafkaiq" in brokers else Path("-")
    before = Path(args.compare_bin).resolve() if args.compare_bin else None
    if before is not None and not os.access(before, os.X_OK):
        log(f"no kafkaiq binary at {before}")
        return 1
    if "kafkaiq" in brokers and not os.access(binary, os.X_OK):
        log(f"no kafkaiq binary at {binary}")
        return 1
    libs = Path(subprocess.run([str(ROOT / "integration" / "kafka-libs.sh")], check=True,
                               capture_output=True, text=True).stdout.strip())
    if any(isinstance(r, (RdkProduceRun, RdkConsumeRun)) for r in plan):
        args.rdk, args.rdk_note = build_rdk()

    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="kafkaiq-bench-"))
    workdir.mkdir(parents=True, exist_ok=True)
    log(f"==> work dir {workdir}")
    security = Security.create(workdir) if args.security else None
    sessions = []
    try:
        for round_no in range(1, args.rounds + 1):
            log(f"==> round {round_no}/{args.rounds}")
            for key in brokers:
                sdir = workdir / f"round{round_no}-{key}"
                sdir.mkdir()
                if key == "kafka":
                    broker = ApacheKafka(sdir, security)
                elif key == "kafkaiq-before":
                    broker = KafkaIQ(sdir, before, key, LABELS[key], security)
                else:
                    broker = KafkaIQ(sdir, binary, security=security)
                try:
                    sessions.append(run_session(broker, libs, plan, args, round_no))
                finally:
                    broker.stop()
                    # Fresh data dirs every session; keep only the logs.
                    for data in (sdir / "kafka" / "data", sdir / "kafkaiq"):
                        shutil.rmtree(data, ignore_errors=True)
                time.sleep(1)
    finally:
        text = report(sessions, plan, args, binary, brokers)
        if args.out:
            out = Path(args.out)
        elif args.smoke:
            out = workdir / "report.md"
        else:
            date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
            out = ROOT / "benches" / "results" / f"{date}-{platform.node()}.md"
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text)
        # Every measured value, for anyone re-reading or re-rendering the run.
        out.with_suffix(".json").write_text(json.dumps(sessions, indent=1, default=str) + "\n")
        log(f"==> report written to {out}")
        if args.smoke:
            print(text)

    failures = strict_failures(sessions, args)
    # Keep the logs when something failed (the report names the runs); else only on request.
    if not args.keep and not args.workdir and not failures:
        shutil.rmtree(workdir, ignore_errors=True)
    else:
        log(f"==> logs kept in {workdir}")
    if args.smoke:
        unsupported = [f"{LABELS[s['broker']]} {n}: {r['unsupported']}" for s in sessions
                       for n, r in s["runs"].items() if "unsupported" in r]
        for u in unsupported:
            log(f"NOT CHECKED (unsupported by the broker): {u}"
                + (" — counted as a failure (--strict-consumer)" if args.strict_consumer else ""))
        for f in failures:
            log(f"FAILED: {f}")
        return 1 if failures else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
