#!/usr/bin/env python3
"""Partition-scale costs of a 3-node cluster, KafkaIQ beside Apache Kafka 4.1.1.

For each partition count (RF 3, topics of 100 partitions) and each broker, alternating, on
loopback, with every node broker and controller (KRaft combined mode, the keys of
config/cluster/):

  * creation: CreateTopics (1,000 partitions per request) until Metadata shows every partition
    with a leader and a full ISR; CPU seconds of each node over that window (the active
    controller's is reported apart, found afterwards with DescribeQuorum);
  * Metadata for all topics (v12, null topic list): response bytes and round-trip time;
  * RSS and open descriptors per node, before and after creation (RSS per partition replica);
  * failover: kill -9 of the node leading the most partitions, time until Metadata from a
    survivor shows each of those partitions led by another node; then that node started
    again, time until every ISR is full;
  * restart of all nodes (SIGTERM, then start): time until every partition has a leader and a
    full ISR again, from Metadata of each node.

A run exits 1 unless every node's Metadata shows every partition led with a full ISR.
--creation-only stops after creation, Metadata and RSS. --failover-leaders N... instead runs one
cluster per broker, signal (--failover-signals KILL STOP) and N, where a node that is not the
active controller is the first replica of exactly N partitions (explicit assignments), sends it
SIGKILL (its sockets close) or SIGSTOP (they stay open: detection needs the session timeout),
and times until a survivor's Metadata shows all N led elsewhere, and until an acks=all write
(Produce v3, written from a thread beside the Metadata polls, at each partition's current
leader) has been taken by each of the N and by every partition (--rounds: medians).

Data dirs are deleted when the run ends, not between sessions (ext4 is slow to allocate inodes
right after many were freed; see delete_at_end), so start a run a few minutes after the last
one ended. Standard library only; Kafka's jars come from integration/kafka-libs.sh. Each node's soft
RLIMIT_NOFILE is raised to the hard limit. Results: JSON (--json) and a Markdown table (--md).

    flock /tmp/kafkaiq-bench.lock python3 benches/scale/scale.py --partitions 1000 \
        --json out.json --md out.md
    python3 benches/scale/scale.py --smoke     # 200 partitions and a 20-leader failover, both
                                               # brokers, no files kept
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import signal
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CLK_TCK = os.sysconf("SC_CLK_TCK")
TOPIC_SIZE = 100
PER_REQUEST = 1000


def log(msg: str):
    print(f"[scale {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------
# /proc


def cpu_s(pid: int) -> float | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    f = stat[stat.rindex(")") + 2:].split()
    return (int(f[11]) + int(f[12])) / CLK_TCK


def rss_kib(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def fd_count(pid: int) -> int | None:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return None


# ---------------------------------------------------------------------------------------------
# Raw Kafka frames


def uvarint(n: int) -> bytes:
    out = b""
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out += bytes([b | 0x80])
        else:
            return out + bytes([b])


class Reader:
    def __init__(self, buf: bytes):
        self.b, self.o = buf, 0

    def take(self, n: int) -> bytes:
        v = self.b[self.o:self.o + n]
        self.o += n
        return v

    def i8(self):
        return self.take(1)[0]

    def i16(self):
        return struct.unpack(">h", self.take(2))[0]

    def i32(self):
        return struct.unpack(">i", self.take(4))[0]

    def uv(self):
        shift = v = 0
        while True:
            b = self.i8()
            v |= (b & 0x7F) << shift
            if not b & 0x80:
                return v
            shift += 7

    def cstr(self):
        n = self.uv()
        return None if n == 0 else self.take(n - 1).decode()

    def str16(self):
        n = self.i16()
        return None if n < 0 else self.take(n).decode()

    def tags(self):
        for _ in range(self.uv()):
            self.uv()
            self.take(self.uv())

    def carr_i32(self):
        n = self.uv()
        return [self.i32() for _ in range(max(n - 1, 0))]


class Conn:
    def __init__(self, port: int, timeout: float = 30.0):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.sock.settimeout(timeout)
        self.cid = 0

    def close(self):
        self.sock.close()

    def _read(self, n: int) -> bytes:
        chunks, got = [], 0
        while got < n:
            c = self.sock.recv(min(n - got, 1 << 20))
            if not c:
                raise ConnectionError("closed")
            chunks.append(c)
            got += len(c)
        return b"".join(chunks)

    def call(self, key: int, ver: int, body: bytes, flexible: bool) -> tuple[bytes, float, int]:
        """Sends one request; answers (body after the response header, seconds, frame bytes)."""
        self.cid += 1
        cid = b"kafkaiq-scale"
        hdr = struct.pack(">hhih", key, ver, self.cid, len(cid)) + cid
        if flexible:
            hdr += b"\x00"
        payload = hdr + body
        t0 = time.perf_counter()
        self.sock.sendall(struct.pack(">i", len(payload)) + payload)
        (size,) = struct.unpack(">i", self._read(4))
        resp = self._read(size)
        dt = time.perf_counter() - t0
        (rcid,) = struct.unpack(">i", resp[:4])
        if rcid != self.cid:
            raise ValueError(f"correlation {rcid} != {self.cid}")
        off = 4
        if flexible:
            r = Reader(resp[4:])
            r.tags()
            off += r.o
        return resp[off:], dt, size + 4


def metadata_all(conn: Conn):
    """Metadata v12, all topics: ({(topic, p): (leader, replicas, isr)}, brokers, secs, bytes)."""
    body = b"\x00" + b"\x00" + b"\x00" + b"\x00"  # null topics, no auto-create, no authz ops, tags
    raw, dt, size = conn.call(3, 12, body, True)
    r = Reader(raw)
    r.i32()
    brokers = []
    for _ in range(r.uv() - 1):
        brokers.append(r.i32())
        r.cstr()
        r.i32()
        r.cstr()
        r.tags()
    r.cstr()
    r.i32()
    parts = {}
    for _ in range(r.uv() - 1):
        r.i16()
        name = r.cstr()
        r.take(16)
        r.i8()
        for _ in range(r.uv() - 1):
            r.i16()
            idx = r.i32()
            leader = r.i32()
            r.i32()
            replicas = r.carr_i32()
            isr = r.carr_i32()
            r.carr_i32()
            r.tags()
            parts[(name, idx)] = (leader, replicas, isr)
        r.i32()
        r.tags()
    return parts, brokers, dt, size


def create_topics(conn: Conn, names: list[str], partitions: int, rf: int) -> list[tuple]:
    """CreateTopics v4 (not flexible): [(name, error_code, message)]."""
    body = struct.pack(">i", len(names))
    for n in names:
        nb = n.encode()
        body += struct.pack(">h", len(nb)) + nb + struct.pack(">ihii", partitions, rf, 0, 0)
    body += struct.pack(">ib", 120_000, 0)
    raw, _, _ = conn.call(19, 4, body, False)
    r = Reader(raw)
    r.i32()
    out = []
    for _ in range(r.i32()):
        out.append((r.str16(), r.i16(), r.str16()))
    return out


def create_topics_assigned(conn: Conn, topics: dict[str, list[list[int]]]) -> list[tuple]:
    """CreateTopics v4 with explicit replica assignments {name: [[broker, ...] per partition]}:
    [(name, error_code, message)]."""
    body = struct.pack(">i", len(topics))
    for n, parts in topics.items():
        nb = n.encode()
        body += struct.pack(">h", len(nb)) + nb + struct.pack(">ih", -1, -1)
        body += struct.pack(">i", len(parts))
        for idx, replicas in enumerate(parts):
            body += struct.pack(">ii", idx, len(replicas))
            body += b"".join(struct.pack(">i", b) for b in replicas)
        body += struct.pack(">i", 0)
    body += struct.pack(">ib", 120_000, 0)
    raw, _, _ = conn.call(19, 4, body, False)
    r = Reader(raw)
    r.i32()
    return [(r.str16(), r.i16(), r.str16()) for _ in range(r.i32())]


def _crc32c_table() -> list[int]:
    table = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


CRC32C = _crc32c_table()


def crc32c(data: bytes) -> int:
    c = 0xFFFFFFFF
    for b in data:
        c = CRC32C[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def svarint(n: int) -> bytes:
    return uvarint((n << 1) ^ (n >> 63))


def record_batch(value: bytes) -> bytes:
    """A v2 record batch of one record (no key, no headers, no producer id), uncompressed."""
    rec = b"\x00" + svarint(0) + svarint(0) + svarint(-1) + svarint(len(value)) + value + svarint(0)
    rec = svarint(len(rec)) + rec
    now = int(time.time() * 1000)
    after_crc = struct.pack(">hiqqqhii", 0, 0, now, now, -1, -1, -1, 1) + rec
    head = struct.pack(">ib", 0, 2) + struct.pack(">I", crc32c(after_crc))
    return struct.pack(">qi", 0, len(head) + len(after_crc)) + head + after_crc


def produce(conn: Conn, batches: dict[tuple[str, int], bytes], acks: int,
            timeout_ms: int) -> dict[tuple[str, int], int]:
    """Produce v3, one batch per partition: {(topic, partition): error_code}."""
    by_topic: dict[str, list[int]] = {}
    for t, p in batches:
        by_topic.setdefault(t, []).append(p)
    body = [struct.pack(">hhii", -1, acks, timeout_ms, len(by_topic))]
    for t, ps in by_topic.items():
        tb = t.encode()
        body.append(struct.pack(">h", len(tb)) + tb + struct.pack(">i", len(ps)))
        for p in ps:
            b = batches[(t, p)]
            body.append(struct.pack(">ii", p, len(b)) + b)
    raw, _, _ = conn.call(0, 3, b"".join(body), False)
    r = Reader(raw)
    out = {}
    for _ in range(r.i32()):
        t = r.str16()
        for _ in range(r.i32()):
            p, err = r.i32(), r.i16()
            r.take(16)
            out[(t, p)] = err
    return out


class WriteProbe:
    """Writes one acks=all record to each of a set of partitions, at their current leaders
    (from a survivor's Metadata), until each has taken one: the time a producer waits after a
    failover. Connections to `avoid` are never opened (a stopped node would hang them)."""

    def __init__(self, probe_port: int, ports: dict[int, int], avoid: int | None,
                 timeout_ms: int = 500):
        self.probe, self.ports, self.avoid, self.timeout_ms = probe_port, ports, avoid, timeout_ms
        self.conns: dict[int, Conn] = {}
        self.batch = record_batch(b"failover-probe")
        self.errors: dict[int, int] = {}

    def _conn(self, node: int) -> Conn:
        if node not in self.conns:
            self.conns[node] = Conn(self.ports[node], timeout=30)
        return self.conns[node]

    def write_once(self, pending: set) -> set:
        """One round: answers the partitions of `pending` that took a write."""
        m = try_metadata(self.probe)
        if not m:
            return set()
        by_leader: dict[int, dict] = {}
        for k in pending:
            leader = m[0].get(k, (-1,))[0]
            if leader >= 0 and leader != self.avoid:
                by_leader.setdefault(leader, {})[k] = self.batch
        done = set()
        for leader, batches in by_leader.items():
            try:
                res = produce(self._conn(leader), batches, -1, self.timeout_ms)
            except (OSError, ValueError, IndexError, struct.error):
                self.conns.pop(leader, None)
                continue
            for k, err in res.items():
                if err == 0:
                    done.add(k)
                else:
                    self.errors[err] = self.errors.get(err, 0) + 1
        return done

    def until_all(self, parts, timeout: float, t0: float | None = None,
                  interval: float = 0.05) -> dict:
        """Seconds from `t0` (default now) until each partition of `parts` took an acks=all
        write: {partition: seconds}; raises TimeoutError when some did not within `timeout`."""
        pending, done = set(parts), {}
        t0 = time.monotonic() if t0 is None else t0
        while pending:
            for k in self.write_once(pending):
                done[k] = time.monotonic() - t0
            pending -= done.keys()
            if not pending:
                break
            if time.monotonic() - t0 > timeout:
                raise TimeoutError(f"writes: {len(pending)} partitions not writable within "
                                   f"{timeout:.0f} s (errors {self.errors})")
            time.sleep(interval)
        return done

    def close(self):
        for c in self.conns.values():
            c.close()


# ---------------------------------------------------------------------------------------------
# Clusters


def raise_nofile():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


class Cluster:
    def __init__(self, kind: str, root: Path, base_port: int, libs: Path, binary: Path,
                 heap: str):
        self.kind, self.root, self.libs, self.binary, self.heap = kind, root, libs, binary, heap
        self.nodes = {}
        voters = ",".join(f"{i}@127.0.0.1:{base_port + 3 * (i - 1) + 1}" for i in (1, 2, 3))
        for i in (1, 2, 3):
            client, ctrl, http = (base_port + 3 * (i - 1) + k for k in range(3))
            d = root / f"node-{i}"
            (d / "data").mkdir(parents=True)
            lines = [
                "process.roles=broker,controller", f"node.id={i}",
                f"controller.quorum.voters={voters}",
                f"listeners=PLAINTEXT://127.0.0.1:{client},CONTROLLER://127.0.0.1:{ctrl}",
                f"advertised.listeners=PLAINTEXT://127.0.0.1:{client},CONTROLLER://127.0.0.1:{ctrl}",
                "controller.listener.names=CONTROLLER", "inter.broker.listener.name=PLAINTEXT",
                "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
                f"log.dirs={d / 'data'}", f"broker.rack=rack-{i}",
                "offsets.topic.replication.factor=3",
                "transaction.state.log.replication.factor=3", "transaction.state.log.min.isr=2",
                "share.coordinator.state.topic.replication.factor=3",
                "share.coordinator.state.topic.min.isr=2", "min.insync.replicas=2",
            ]
            (d / "server.properties").write_text("\n".join(lines) + "\n")
            self.nodes[i] = {"port": client, "http": http, "dir": d, "proc": None, "starts": 0}
        if kind == "kafka":
            self._format()

    def _java_tool(self, *args, timeout=120) -> str:
        out = subprocess.run(["java", "-Xmx256m", "-cp", f"{self.libs}/*", *args],
                             capture_output=True, text=True, timeout=timeout)
        return out.stdout

    def _format(self):
        cid = self._java_tool("kafka.tools.StorageTool", "random-uuid").strip().splitlines()[-1]
        for n in self.nodes.values():
            self._java_tool("kafka.tools.StorageTool", "format", "-t", cid, "-c",
                            str(n["dir"] / "server.properties"))

    def start(self, i: int):
        n = self.nodes[i]
        n["starts"] += 1
        conf = str(n["dir"] / "server.properties")
        if self.kind == "kafka":
            # Root logger at WARN, the controller's at INFO: its fencing decisions are logged.
            l4j = self.root / "log4j2.properties"
            if not l4j.exists():
                l4j.write_text(
                    "appender.out.type=Console\nappender.out.name=OUT\n"
                    "appender.out.layout.type=PatternLayout\n"
                    "appender.out.layout.pattern=[%d] %p %m (%c)%n\n"
                    "rootLogger.level=WARN\nrootLogger.appenderRef.out.ref=OUT\n"
                    "logger.ctrl.name=org.apache.kafka.controller\nlogger.ctrl.level=INFO\n")
            cmd = ["java", self.heap, f"-Dlog4j2.configurationFile={l4j}", "-cp",
                   f"{self.libs}/*", "kafka.Kafka", conf]
            env = dict(os.environ)
        else:
            cmd = [str(self.binary), "--config", conf, "--override",
                   f"http.listener=127.0.0.1:{n['http']}"]
            env = dict(os.environ, RUST_LOG=os.environ.get("RUST_LOG", "info"))
        out = open(n["dir"] / f"node.{n['starts']}.log", "wb")
        n["proc"] = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env,
                                     preexec_fn=raise_nofile, start_new_session=True)
        out.close()

    def pid(self, i: int) -> int:
        return self.nodes[i]["proc"].pid

    def running(self) -> list[int]:
        return [i for i, n in self.nodes.items() if n["proc"] and n["proc"].poll() is None]

    def kill9(self, i: int):
        p = self.nodes[i]["proc"]
        p.send_signal(signal.SIGKILL)
        p.wait()
        self.nodes[i]["proc"] = None

    def stop_all(self, timeout: float = 180) -> float:
        t0 = time.monotonic()
        procs = [n["proc"] for n in self.nodes.values() if n["proc"]]
        for p in procs:
            p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout=max(1.0, timeout - (time.monotonic() - t0)))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        for n in self.nodes.values():
            n["proc"] = None
        return time.monotonic() - t0

    def controller(self) -> int | None:
        out = self._java_tool("org.apache.kafka.tools.MetadataQuorumCommand", "--bootstrap-server",
                              f"127.0.0.1:{self.nodes[self.running()[0]]['port']}",
                              "describe", "--status", timeout=60)
        for line in out.splitlines():
            if line.startswith("LeaderId:"):
                return int(line.split()[1])
        return None

    def sample(self) -> dict:
        return {i: {"cpu_s": cpu_s(self.pid(i)), "rss_kib": rss_kib(self.pid(i)),
                    "fds": fd_count(self.pid(i))} for i in self.running()}


def try_metadata(port: int):
    try:
        c = Conn(port, timeout=10)
        try:
            return metadata_all(c)
        finally:
            c.close()
    except (OSError, ValueError, IndexError, struct.error):
        return None


def wait_until(what: str, timeout: float, check, interval: float = 0.2):
    t0 = time.monotonic()
    while True:
        v = check()
        if v:
            return time.monotonic() - t0, v
        if time.monotonic() - t0 > timeout:
            raise TimeoutError(f"{what}: not within {timeout:.0f} s")
        time.sleep(interval)


def complete(parts: dict, want: int, topics_prefix: str = "scale-") -> bool:
    ours = [v for k, v in parts.items() if k[0].startswith(topics_prefix)]
    return len(ours) == want and all(l >= 0 and len(isr) == 3 for l, _, isr in ours)


# ---------------------------------------------------------------------------------------------
# Data dirs, deleted when the run ends
#
# Not after each session: when ext4 allocates an inode it skips, one by one, inodes freed in the
# last 60 to 300 seconds (`recently_deleted` in fs/ext4/ialloc.c). A session that creates tens of
# thousands of partition files right after another session deleted as many spends most of its
# creation in the kernel (measured: a 10,000-partition creation of KafkaIQ took 5.6 s on a
# filesystem with no recent deletions and 30-34 s right after one, with 5x the CPU, nearly all
# of it system time in that scan), whichever broker it is.

_TO_DELETE: list[Path] = []


def delete_at_end(root: Path) -> None:
    _TO_DELETE.append(root)


def delete_data_dirs() -> None:
    for root in _TO_DELETE:
        shutil.rmtree(root, ignore_errors=True)
    _TO_DELETE.clear()


# ---------------------------------------------------------------------------------------------
# One session


def session(kind: str, partitions: int, args, libs: Path) -> dict:
    root = Path(tempfile.mkdtemp(prefix=f"kafkaiq-scale-{kind}-", dir=args.workdir))
    base = args.base_port + (0 if kind == "kafkaiq" else 10)
    c = Cluster(kind, root, base, libs, args.binary, args.kafka_heap)
    res = {"broker": kind, "partitions": partitions, "rf": 3, "topic_size": TOPIC_SIZE,
           "nofile_hard": resource.getrlimit(resource.RLIMIT_NOFILE)[1],
           "binary": args.binary_label or str(args.binary) if kind == "kafkaiq" else None}
    ports = {i: n["port"] for i, n in c.nodes.items()}
    try:
        t0 = time.monotonic()
        for i in (1, 2, 3):
            c.start(i)
        res["empty_startup_s"], _ = wait_until(
            "empty cluster", 180,
            lambda: all((m := try_metadata(ports[i])) and len(m[1]) == 3 for i in (1, 2, 3)))
        log(f"{kind}: 3 nodes up in {res['empty_startup_s']:.1f} s")
        time.sleep(2)
        res["before"] = c.sample()

        # Creation
        names = [f"scale-{t:05d}" for t in range(partitions // TOPIC_SIZE)]
        conn = Conn(ports[1], timeout=300)
        cpu0 = {i: cpu_s(c.pid(i)) for i in (1, 2, 3)}
        t0 = time.monotonic()
        errors = []
        per = max(1, PER_REQUEST // TOPIC_SIZE)
        for k in range(0, len(names), per):
            for name, code, msg in create_topics(conn, names[k:k + per], TOPIC_SIZE, 3):
                if code != 0:
                    errors.append((name, code, msg))
        res["create_ack_s"] = time.monotonic() - t0
        conn.close()
        res["create_errors"] = errors[:5]
        res["create_error_count"] = len(errors)
        if errors:
            log(f"{kind}: {len(errors)} CreateTopics errors, first {errors[0]}")
        try:
            _, _ = wait_until("creation", args.timeout,
                              lambda: complete(try_metadata(ports[1])[0] if try_metadata(ports[1])
                                               else {}, partitions), interval=0.5)
            res["create_s"] = time.monotonic() - t0
        except TimeoutError as e:
            res["create_s"] = None
            res["create_timeout"] = str(e)
            m = try_metadata(ports[1])
            if m:
                ours = [v for k, v in m[0].items() if k[0].startswith("scale-")]
                res["create_seen"] = {"partitions": len(ours),
                                      "led": sum(1 for v in ours if v[0] >= 0),
                                      "full_isr": sum(1 for v in ours if len(v[2]) == 3)}
            log(f"{kind}: {e}; seen {res.get('create_seen')}")
        res["create_cpu_s"] = {i: cpu_s(c.pid(i)) - cpu0[i] for i in (1, 2, 3)}
        log(f"{kind}: {partitions} partitions acked {res['create_ack_s']:.1f} s, "
            f"complete {res['create_s']} s, cpu {res['create_cpu_s']}")
        # Every node must show every partition led with a full ISR (checked, not assumed): a
        # node's Metadata may lag the first node's, so each gets until the deadline.
        res["verified"] = {}
        if res["create_s"] is not None:
            try:
                wait_until("creation seen by every node", args.timeout,
                           lambda: all((m := try_metadata(ports[i])) and complete(m[0], partitions)
                                       for i in (1, 2, 3)), interval=0.5)
                res["create_all_nodes_s"] = time.monotonic() - t0
            except TimeoutError:
                res["create_all_nodes_s"] = None
            for i in (1, 2, 3):
                m = try_metadata(ports[i])
                ours = [v for k, v in (m[0] if m else {}).items() if k[0].startswith("scale-")]
                res["verified"][i] = {"partitions": len(ours),
                                      "led": sum(1 for v in ours if v[0] >= 0),
                                      "full_isr": sum(1 for v in ours if len(v[2]) == 3)}
            if not all(v == {"partitions": partitions, "led": partitions, "full_isr": partitions}
                       for v in res["verified"].values()):
                log(f"{kind}: NOT COMPLETE on every node: {res['verified']}")
                res["create_s"] = None
                res["create_timeout"] = f"incomplete on some node: {res['verified']}"
        time.sleep(3)
        res["after"] = c.sample()
        res["controller"] = c.controller()

        # Metadata
        conn = Conn(ports[1], timeout=60)
        times, sizes = [], []
        for _ in range(args.metadata_rounds):
            _, _, dt, size = metadata_all(conn)
            times.append(dt)
            sizes.append(size)
        conn.close()
        res["metadata_bytes"] = sizes[-1]
        res["metadata_s"] = {"median": statistics.median(times), "min": min(times),
                             "max": max(times), "all": times}
        log(f"{kind}: metadata {sizes[-1]} bytes, median {statistics.median(times)*1e3:.1f} ms")
        if res["create_s"] is None or args.creation_only:
            return res

        # Failover: kill -9 of the node leading the most partitions.
        parts = try_metadata(ports[1])[0]
        counts = {i: sum(1 for k, v in parts.items() if k[0].startswith("scale-") and v[0] == i)
                  for i in (1, 2, 3)}
        victim = max(counts, key=counts.get)
        moved = [k for k, v in parts.items() if k[0].startswith("scale-") and v[0] == victim]
        probe = ports[1 if victim != 1 else 2]
        res["leaders_per_node"] = counts
        res["victim"] = victim
        res["victim_leaders"] = len(moved)
        t0 = time.monotonic()
        c.kill9(victim)

        polls = [0]

        def all_moved():
            polls[0] += 1
            m = try_metadata(probe)
            return m and all(m[0].get(k, (-1,))[0] not in (-1, victim) for k in moved)
        try:
            res["failover_s"], _ = wait_until("failover", args.timeout, all_moved, interval=0.1)
        except TimeoutError as e:
            res["failover_s"] = None
            res["failover_timeout"] = str(e)
        res["failover_polls"] = polls[0]
        log(f"{kind}: kill -9 node {victim} ({len(moved)} leaders): failover {res['failover_s']} s"
            f" ({polls[0]} Metadata polls)")
        # The killed node back: time until every partition has a full ISR again.
        t0 = time.monotonic()
        c.start(victim)
        try:
            res["rejoin_s"], _ = wait_until(
                "rejoin", args.timeout,
                lambda: (m := try_metadata(probe)) and complete(m[0], partitions), interval=0.5)
        except TimeoutError as e:
            res["rejoin_s"] = None
            res["rejoin_timeout"] = str(e)
            return res
        log(f"{kind}: node {victim} back, full ISR in {res['rejoin_s']:.1f} s")
        # Restart of all nodes
        res["stop_all_s"] = c.stop_all()
        t0 = time.monotonic()
        for i in (1, 2, 3):
            c.start(i)
        try:
            res["restart_s"], _ = wait_until(
                "restart", args.timeout,
                lambda: all((m := try_metadata(ports[i])) and complete(m[0], partitions)
                            for i in (1, 2, 3)), interval=0.5)
        except TimeoutError as e:
            res["restart_s"] = None
            res["restart_timeout"] = str(e)
            return res
        log(f"{kind}: stop {res['stop_all_s']:.1f} s, restart to full ISR {res['restart_s']:.1f} s")
        time.sleep(3)
        res["after_restart"] = c.sample()

        return res
    finally:
        c.stop_all(timeout=60)
        for i, n in c.nodes.items():
            for f in sorted(n["dir"].glob("node.*.log")):
                res.setdefault("logs", []).append(str(f))
        if args.keep:
            res["root"] = str(root)
        else:
            keep = Path(args.workdir) / f"logs-{kind}-{partitions}-{int(time.time())}"
            if not args.smoke:
                keep.mkdir(parents=True, exist_ok=True)
                for i, n in c.nodes.items():
                    for f in n["dir"].glob("node.*.log"):
                        shutil.copy(f, keep / f"{i}-{f.name}")
                res["logs"] = str(keep)
            delete_at_end(root)


# ---------------------------------------------------------------------------------------------
# Failover as a function of the leaders moved


def fencing_lines(c: Cluster, victim: int) -> list[str]:
    """The survivors' log lines about fencing the victim (how its death was seen)."""
    ansi = re.compile(r"\x1b\[[0-9;]*m")
    ident = re.compile(rf"(broker|id)[^0-9]{{0,4}}{victim}\b", re.I)
    out = []
    for i, n in c.nodes.items():
        if i == victim:
            continue
        for f in sorted(n["dir"].glob("node.*.log")):
            try:
                text = ansi.sub("", f.read_text(errors="replace"))
            except OSError:
                continue
            for line in text.splitlines():
                low = line.lower()
                if ("fencing" in low or "session expired" in low
                        or "session has timed out" in low) and ident.search(line):
                    out.append(f"node {i}: {line.strip()[:300]}")
    return out[:6]


def failover_session(kind: str, leaders: int, sig: str, args, libs: Path) -> dict:
    """One cluster; node V (not the active controller) is the first replica, so the preferred
    leader, of exactly `leaders` partitions; 200 more partitions are led by the two others. V is
    sent SIGKILL or SIGSTOP; the time is until a survivor's Metadata shows each of V's partitions
    led by another node."""
    root = Path(tempfile.mkdtemp(prefix=f"kafkaiq-scale-fo-{kind}-", dir=args.workdir))
    base = args.base_port + (0 if kind == "kafkaiq" else 10)
    c = Cluster(kind, root, base, libs, args.binary, args.kafka_heap)
    ports = {i: n["port"] for i, n in c.nodes.items()}
    res = {"mode": "failover", "broker": kind, "leaders": leaders, "signal": sig,
           "binary": args.binary_label or str(args.binary) if kind == "kafkaiq" else None}
    try:
        for i in (1, 2, 3):
            c.start(i)
        wait_until("empty cluster", 180,
                   lambda: all((m := try_metadata(ports[i])) and len(m[1]) == 3
                               for i in (1, 2, 3)))
        ctrl = c.controller()
        victim = 3 if ctrl != 3 else 2
        a, b = [i for i in (1, 2, 3) if i != victim]
        res["controller_before"], res["victim"] = ctrl, victim
        topics = {}
        for t in range(0, leaders, TOPIC_SIZE):
            n = min(TOPIC_SIZE, leaders - t)
            topics[f"scale-fo-{t // TOPIC_SIZE:05d}"] = [
                [victim, a, b] if p % 2 == 0 else [victim, b, a] for p in range(n)]
        topics["scale-other"] = [[a, b, victim] if p % 2 == 0 else [b, victim, a]
                                 for p in range(2 * TOPIC_SIZE)]
        total = leaders + 2 * TOPIC_SIZE
        conn = Conn(ports[a], timeout=300)
        names = list(topics)
        t0 = time.monotonic()
        errors = []
        for k in range(0, len(names), PER_REQUEST // TOPIC_SIZE):
            chunk = {n: topics[n] for n in names[k:k + PER_REQUEST // TOPIC_SIZE]}
            errors += [e for e in create_topics_assigned(conn, chunk) if e[1] != 0]
        conn.close()
        if errors:
            raise RuntimeError(f"{kind}: CreateTopics errors: {errors[:3]}")

        def ready():
            m = try_metadata(ports[a])
            if not m or not complete(m[0], total):
                return False
            mine = [k for k, v in m[0].items() if v[0] == victim and k[0].startswith("scale-")]
            return mine if len(mine) == leaders else False
        _, moved = wait_until("creation, preferred leaders", args.timeout, ready, interval=0.5)
        res["create_s"] = time.monotonic() - t0
        log(f"{kind}: node {victim} leads {len(moved)} (controller {ctrl}), "
            f"{total} partitions complete in {res['create_s']:.1f} s")
        probe = ports[a]
        writer = WriteProbe(probe, ports, avoid=None)
        every = [k for k in try_metadata(probe)[0] if k[0].startswith("scale-")]
        res["write_before_s"] = max(writer.until_all(every, 60).values())
        writer.close()
        time.sleep(2)
        proc = c.nodes[victim]["proc"]
        polls = [0]
        # Producers: from the signal on, an acks=all write to every partition at its current
        # leader, beside the Metadata polls (a thread, so neither delays the other).
        writer = WriteProbe(probe, ports, victim)
        written: dict = {}

        def write_all(t_sig: float):
            try:
                written.update(writer.until_all(every, args.timeout, t0=t_sig))
            except (TimeoutError, OSError) as e:
                written["error"] = str(e)

        def all_moved():
            polls[0] += 1
            m = try_metadata(probe)
            return m and all(m[0].get(k, (-1,))[0] not in (-1, victim) for k in moved)
        t0 = time.monotonic()
        proc.send_signal(signal.SIGKILL if sig == "KILL" else signal.SIGSTOP)
        thread = threading.Thread(target=write_all, args=(t0,))
        thread.start()
        try:
            res["failover_s"], _ = wait_until("failover", args.timeout, all_moved, interval=0.05)
        except TimeoutError as e:
            res["failover_s"] = None
            res["failover_timeout"] = str(e)
        res["failover_polls"] = polls[0]
        thread.join()
        writer.close()
        if "error" in written:
            res["write_error"] = written.pop("error")
        moved_set = set(moved)
        if written and len(written) == len(every):
            res["write_moved_s"] = max(v for k, v in written.items() if k in moved_set)
            res["write_all_s"] = max(written.values())
        res["write_errors"] = {str(k): v for k, v in writer.errors.items()}
        log(f"{kind}: acks=all writes again: moved partitions {res.get('write_moved_s')} s, "
            f"all {res.get('write_all_s')} s (errors seen {res['write_errors']})")
        m = try_metadata(probe)
        if m:
            res["new_leaders"] = {str(i): sum(1 for k in moved if m[0].get(k, (-1,))[0] == i)
                                  for i in (a, b)}
        log(f"{kind}: SIG{sig} node {victim} ({leaders} leaders): failover {res['failover_s']} s "
            f"({polls[0]} polls), new leaders {res.get('new_leaders')}")
        if sig == "STOP":
            proc.send_signal(signal.SIGCONT)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        c.nodes[victim]["proc"] = None
        res["detection_log"] = fencing_lines(c, victim)
        return res
    finally:
        c.stop_all(timeout=60)
        keep = Path(args.workdir) / f"logs-fo-{kind}-{leaders}-{sig}-{int(time.time())}"
        if not args.smoke:
            keep.mkdir(parents=True, exist_ok=True)
            for i, n in c.nodes.items():
                for f in n["dir"].glob("node.*.log"):
                    shutil.copy(f, keep / f"{i}-{f.name}")
            res["logs"] = str(keep)
        delete_at_end(root)


FAILOVER_MEASURES = [
    ("failover_s", "Metadata shows all N led elsewhere"),
    ("write_moved_s", "acks=all write taken by each of the N"),
    ("write_all_s", "acks=all write taken by every partition (N + 200)"),
]


def failover_markdown(results: list[dict]) -> str:
    runs = [r for r in results if r.get("mode") == "failover"]
    sizes = sorted({r["leaders"] for r in runs})
    sigs = [s for s in ("KILL", "STOP") if any(r["signal"] == s for r in runs)]

    def med(kind, n, sig, key="failover_s"):
        v = [r[key] for r in runs if (r["broker"], r["leaders"], r["signal"]) ==
             (kind, n, sig) and r.get(key) is not None]
        return (statistics.median(v), len(v)) if v else (None, 0)
    lines = ["| signal | leaders moved | time until | KafkaIQ, s | Kafka, s | ratio "
             "| rounds (KafkaIQ/Kafka) |", "|---|---:|---|---:|---:|---:|---:|"]
    for sig in sigs:
        for n in sizes:
            for key, what in FAILOVER_MEASURES:
                (a, na), (b, nb) = med("kafkaiq", n, sig, key), med("kafka", n, sig, key)
                if not na and not nb:
                    continue
                ratio = f"{a / b:.3f}×" if a is not None and b else "—"
                lines.append(f"| SIG{sig} | {n:,} | {what} | {fmt(a)} | {fmt(b)} | {ratio} "
                             f"| {na}/{nb} |")
    if len(sizes) > 1:
        lines += ["", f"| signal | KafkaIQ {sizes[-1]:,}/{sizes[0]:,} leaders | "
                      f"Kafka {sizes[-1]:,}/{sizes[0]:,} leaders |", "|---|---:|---:|"]
        for sig in sigs:
            g = []
            for kind in ("kafkaiq", "kafka"):
                lo, hi = med(kind, sizes[0], sig)[0], med(kind, sizes[-1], sig)[0]
                g.append(f"{hi / lo:.1f}×" if lo and hi is not None else "—")
            lines.append(f"| SIG{sig} | {g[0]} | {g[1]} |")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------------
# Report


def per_partition_rss(r: dict) -> float | None:
    try:
        deltas = [r["after"][i]["rss_kib"] - r["before"][i]["rss_kib"] for i in r["after"]
                  if i in r["before"]]
    except (KeyError, TypeError):
        return None
    return statistics.mean(deltas) / r["partitions"]  # each node hosts every partition (RF 3)


def row_values(r: dict) -> dict:
    v = {}
    if r.get("metadata_bytes"):
        v["Metadata response, bytes"] = r["metadata_bytes"]
        v["Metadata round trip, ms (median)"] = r["metadata_s"]["median"] * 1e3
    if r.get("create_s") is not None:
        v["Create partitions until all led, full ISR, s"] = r["create_s"]
    if r.get("create_all_nodes_s") is not None:
        v["Create until every node shows all led, full ISR, s"] = r["create_all_nodes_s"]
    v["CreateTopics answered, s"] = r.get("create_ack_s")
    if r.get("controller") and r.get("create_cpu_s"):
        cpu = {str(k): x for k, x in r["create_cpu_s"].items()}
        v["Active controller CPU during creation, s"] = cpu[str(r["controller"])]
    if r.get("create_cpu_s"):
        v["CPU of all 3 nodes during creation, s"] = sum(r["create_cpu_s"].values())
    if r.get("restart_s") is not None:
        v["Restart of all nodes until all led, full ISR, s"] = r["restart_s"]
    if r.get("rejoin_s") is not None:
        v["Killed node restarted until all full ISR, s"] = r["rejoin_s"]
    if r.get("stop_all_s") is not None:
        v["Clean stop of all nodes, s"] = r["stop_all_s"]
    if r.get("after"):
        v["RSS per node after creation, MiB (mean)"] = statistics.mean(
            s["rss_kib"] for s in r["after"].values()) / 1024
        v["Open descriptors per node after creation (max)"] = max(
            s["fds"] for s in r["after"].values())
    if r.get("after_restart"):
        v["RSS per node after restart of all, MiB (mean)"] = statistics.mean(
            s["rss_kib"] for s in r["after_restart"].values()) / 1024
        v["Open descriptors per node after restart of all (max)"] = max(
            s["fds"] for s in r["after_restart"].values())
    ppr = per_partition_rss(r)
    if ppr is not None:
        v["RSS growth per partition replica, KiB"] = ppr
    if r.get("failover_s") is not None:
        v[f"Failover (kill -9 leader of N), s"] = r["failover_s"]
        v["N = leaders on the killed node"] = r["victim_leaders"]
    return v


def fmt(x) -> str:
    if x is None:
        return "—"
    if isinstance(x, int) or (isinstance(x, float) and x >= 100):
        return f"{x:,.0f}"
    return f"{x:.2f}" if x >= 1 else f"{x:.3f}"


def markdown(results: list[dict]) -> str:
    sizes = sorted({r["partitions"] for r in results})
    by = {(r["broker"], r["partitions"]): row_values(r) for r in results}
    keys = []
    for r in results:
        for k in row_values(r):
            if k not in keys:
                keys.append(k)
    head = "| measure |"
    sep = "|---|"
    for s in sizes:
        head += f" KafkaIQ {s:,} | Kafka {s:,} | ratio |"
        sep += "---:|---:|---:|"
    if len(sizes) > 1:
        head += f" KafkaIQ {sizes[-1]:,}/{sizes[0]:,} | Kafka {sizes[-1]:,}/{sizes[0]:,} |"
        sep += "---:|---:|"
    lines = [head, sep]
    for k in keys:
        line = f"| {k} |"
        for s in sizes:
            a = by.get(("kafkaiq", s), {}).get(k)
            b = by.get(("kafka", s), {}).get(k)
            ratio = f"{a / b:.2f}×" if a is not None and b and "N =" not in k else "—"
            line += f" {fmt(a)} | {fmt(b)} | {ratio} |"
        if len(sizes) > 1:
            for broker in ("kafkaiq", "kafka"):
                a = by.get((broker, sizes[0]), {}).get(k)
                b = by.get((broker, sizes[-1]), {}).get(k)
                line += f" {b / a:.1f}× |" if a and b is not None else " — |"
        lines.append(line)
    return "\n".join(lines) + "\n"


def main_failover(args, libs: Path) -> int:
    results = []
    failed = False
    for rnd in range(args.rounds):
        for n in args.failover_leaders:
            for sig in args.failover_signals:
                order = list(args.brokers) if rnd % 2 == 0 else list(reversed(args.brokers))
                for kind in order:
                    log(f"--- round {rnd + 1}: {kind}, SIG{sig}, {n} leaders")
                    try:
                        r = failover_session(kind, n, sig, args, libs)
                    except (RuntimeError, TimeoutError, OSError) as e:
                        log(f"{kind}: FAILED: {e}")
                        r = {"mode": "failover", "broker": kind, "leaders": n, "signal": sig,
                             "error": str(e), "failover_s": None}
                    r["round"] = rnd + 1
                    failed |= r.get("failover_s") is None or r.get("write_all_s") is None
                    results.append(r)
                    if args.json:
                        args.json.write_text(json.dumps(results, indent=1, default=str))
    md = failover_markdown(results)
    print(md)
    if args.md:
        args.md.write_text(md)
    return 1 if failed else 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--partitions", type=int, nargs="+", default=[1000])
    p.add_argument("--brokers", nargs="+", default=["kafkaiq", "kafka"])
    p.add_argument("--binary", type=Path, default=ROOT / "target/release/kafkaiq")
    p.add_argument("--kafka-heap", default="-Xmx1g")
    p.add_argument("--base-port", "--port-base", dest="base_port", type=int, default=19500,
                   help="first of the fixed ports (each cluster uses 9, Kafka's from +10)")
    p.add_argument("--binary-label", default=None,
                   help="a name for --binary in the results (e.g. before/after a change)")
    p.add_argument("--creation-only", action="store_true",
                   help="creation, Metadata, RSS; no failover or restarts")
    p.add_argument("--failover-leaders", type=int, nargs="+",
                   help="no partition-scale session: failover sessions where one node (not the "
                        "active controller) is the preferred leader of exactly N partitions")
    p.add_argument("--failover-signals", nargs="+", default=["KILL", "STOP"],
                   choices=["KILL", "STOP"],
                   help="KILL: kill -9 (sockets close); STOP: SIGSTOP (sockets stay open)")
    p.add_argument("--rounds", type=int, default=1, help="failover rounds (median reported)")
    p.add_argument("--metadata-rounds", type=int, default=5)
    p.add_argument("--timeout", type=float, default=600)
    p.add_argument("--workdir", default=tempfile.gettempdir())
    p.add_argument("--json", type=Path)
    p.add_argument("--md", type=Path)
    p.add_argument("--keep", action="store_true", help="keep the data folders")
    p.add_argument("--smoke", action="store_true", help="200 partitions, both brokers")
    p.add_argument("--report", type=Path, nargs="+",
                   help="no run: the table of these JSON result files together")
    args = p.parse_args()
    if args.report:
        results = [r for f in args.report for r in json.loads(f.read_text())]
        scale = [r for r in results if r.get("mode") != "failover"]
        md = (markdown(scale) if scale else "") + (
            "\n" + failover_markdown(results) if len(scale) < len(results) else "")
        print(md)
        if args.md:
            args.md.write_text(md)
        return 0
    if args.smoke:
        args.partitions = [200]
        args.metadata_rounds = 2
        args.timeout = 180
    libs = Path(subprocess.run([str(ROOT / "integration/kafka-libs.sh")], capture_output=True,
                               text=True, check=True).stdout.strip())
    results = []
    if args.failover_leaders:
        return main_failover(args, libs)
    flip = False
    for n in args.partitions:
        order = list(args.brokers)
        if flip:
            order.reverse()
        flip = not flip
        for kind in order:
            log(f"--- {kind}, {n} partitions x RF 3")
            results.append(session(kind, n, args, libs))
            if args.json:
                args.json.write_text(json.dumps(results, indent=1, default=str))
    md = markdown(results)
    print(md)
    if args.md:
        args.md.write_text(md)
    # Loud failure when any cluster did not end with every partition led, full ISR everywhere.
    bad = [r for r in results if r.get("create_s") is None or r.get("create_error_count")
           or (not args.creation_only and r.get("failover_s") is None)]
    if bad:
        log(f"INCOMPLETE sessions: {[(r['broker'], r['partitions']) for r in bad]}")
        return 1
    if args.smoke:
        # The failover mode too: one node preferred leader of exactly 20 partitions, kill -9.
        args.failover_leaders, args.failover_signals, args.rounds = [20], ["KILL"], 1
        args.json = args.md = None
        return main_failover(args, libs)
    return 0


if __name__ == "__main__":
    try:
        status = main()
    finally:
        delete_data_dirs()
    sys.exit(status)
