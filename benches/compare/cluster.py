"""Cluster mode of benches/compare/compare.py (`--cluster 3`): three-node clusters of each broker.

Each session starts a three-node cluster (every node broker and controller: KRaft combined mode
for Apache Kafka 4.1.1, the same server.properties keys for KafkaIQ, written from
config/cluster/node-N.properties with fresh loopback ports and data dirs), waits until node 1's
Metadata lists all three brokers, creates the plan's topics with kafka-topics (replication
factor 3, min.insync.replicas=2; not timed), runs the plan, and stops the nodes. Rounds alternate
(Kafka cluster, KafkaIQ cluster, Kafka cluster, ...), one cluster at a time.

The plan: ProducerPerformance (Java) and librdkafka's rdkafka_performance (C; built by
build-rdkafka-perf.sh) at full speed with acks=all and acks=1, ConsumerPerformance,
EndToEndLatency (acks=all) and a fixed-rate ProducerPerformance run (acks=all) for p50/p99/p99.9.
Around every tool run the CPU seconds of all three broker processes are sampled; peak RSS
(VmHWM) of each node is read before it is stopped.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import compare as c  # noqa: E402

ROOT = c.ROOT
MIB = c.MIB

# Kafka's defaults made explicit where the plan depends on them, the replication the issue asks
# for, and no initial rebalance delay (each ConsumerPerformance run is a fresh group of one).
CLUSTER_PROPS = [
    "num.partitions=3",
    "default.replication.factor=3",
    "min.insync.replicas=2",
    "auto.create.topics.enable=true",
    "group.initial.rebalance.delay.ms=0",
]


@dataclasses.dataclass(frozen=True)
class Topic:
    name: str
    partitions: int


ToolRun, RdkProduceRun = c.ToolRun, c.RdkProduceRun


class E2eRun(ToolRun):
    """org.apache.kafka.tools.EndToEndLatency: one record at a time, produce then consume it."""


def full_plan():
    P, C = c.ProduceRun, c.ConsumeRun
    return [
        P("warmup", "cl-warmup", 200_000, 100, "1", -1, measured=False),
        P("java-produce-acksall", "cl-java-acksall", 1_000_000, 100, "all", -1),
        P("java-produce-acks1", "cl-java-acks1", 1_000_000, 100, "1", -1),
        RdkProduceRun("rdk-produce-acksall", "cl-rdk-acksall", 3_000_000, 100, "all"),
        RdkProduceRun("rdk-produce-acks1", "cl-rdk-acks1", 3_000_000, 100, "1"),
        C("consume", "cl-java-acks1", 1_000_000, 100),
        E2eRun("e2e-latency", "cl-e2e", 10_000, 100, "all"),
        # 20 s at 10,000 records/s, acks=all.
        P("fixed-rate-10k", "cl-fixed-rate", 200_000, 100, "all", 10_000),
    ]


def latency_plan():
    """The latency runs of the full plan only (--latency-only), after a short warm-up."""
    P = c.ProduceRun
    return [
        P("warmup", "cl-warmup", 50_000, 100, "1", -1, measured=False),
        E2eRun("e2e-latency", "cl-e2e", 10_000, 100, "all"),
        P("fixed-rate-10k", "cl-fixed-rate", 200_000, 100, "all", 10_000),
    ]


def smoke_plan():
    P, C = c.ProduceRun, c.ConsumeRun
    return [
        P("java-produce-acksall", "cls-java-acksall", 2_000, 100, "all", -1),
        RdkProduceRun("rdk-produce-acks1", "cls-rdk-acks1", 5_000, 100, "1"),
        C("consume", "cls-java-acksall", 2_000, 100),
        E2eRun("e2e-latency", "cls-e2e", 100, 100, "all"),
        P("fixed-rate-1k", "cls-fixed-rate", 1_000, 100, "all", 1_000),
    ]


def topics_of(plan) -> list[Topic]:
    seen = {}
    for run in plan:
        # EndToEndLatency insists on a topic with one partition.
        seen.setdefault(run.topic, Topic(run.topic, 1 if isinstance(run, E2eRun) else 3))
    return list(seen.values())


# --------------------------------------------------------------------------------------------
# Clusters


class Ports:
    """Loopback ports: consecutive from --port-base when given, else free ephemeral ones."""

    def __init__(self, base: int | None):
        self.next = base

    def take(self) -> int:
        if self.next is None:
            return c.free_port()
        port = self.next
        self.next += 1
        return port


def node_props(n: int, ports: list[tuple[int, int]], data: Path) -> list[str]:
    """config/cluster/node-N.properties with this session's ports and data dir."""
    template = (ROOT / "config" / "cluster" / f"node-{n}.properties").read_text()
    voters = ",".join(f"{i + 1}@127.0.0.1:{cp}" for i, (_, cp) in enumerate(ports))
    port, cport = ports[n - 1]
    listeners = f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{cport}"
    out = []
    for line in template.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key = line.split("=", 1)[0]
        if key == "controller.quorum.voters":
            line = f"{key}={voters}"
        elif key in ("listeners", "advertised.listeners"):
            line = f"{key}={listeners}"
        elif key == "log.dirs":
            line = f"{key}={data}"
        out.append(line)
    keys = {line.split("=", 1)[0] for line in out}
    out += [p for p in CLUSTER_PROPS if p.split("=", 1)[0] not in keys]
    return out


class Node(c.Broker):
    """One node of a cluster; start() only launches it (the cluster waits for readiness)."""

    def __init__(self, workdir: Path, key: str, n: int, port: int, cmd, env, config_text: str):
        self.workdir = workdir
        self.proc = None
        self.port = port
        self.log = workdir / f"node-{n}.log"
        self.config_text = config_text
        self.apis = {}
        self.stopped = False
        self.problems = []
        self.key = key
        self.n = n
        self._cmd, self._env = cmd, env
        self.clean_exits = c.ApacheKafka.clean_exits if key == "kafka" else (0,)
        self.http_port = None
        # A cgroup directory (v1 `cpu` or v2) the process is placed in before it execs, so
        # every thread it starts is limited from the first instruction (balancer.py).
        self.cgroup: Path | None = None

    def launch(self):
        cgroup = self.cgroup

        def enter_cgroup():
            if cgroup is not None:
                (cgroup / "cgroup.procs").write_text(str(os.getpid()))

        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(self._cmd, stdout=log, stderr=subprocess.STDOUT,
                                         env=self._env, cwd=self.workdir, start_new_session=True,
                                         preexec_fn=enter_cgroup if cgroup else None)


class Cluster:
    def __init__(self, key: str, workdir: Path, size: int, ports: Ports, libs: Path,
                 binary: Path, extra_props: list[str] = ()):
        self.key = key
        self.label = c.LABELS[key]
        self.workdir = workdir
        self.libs = libs
        pairs = [(ports.take(), ports.take()) for _ in range(size)]
        self.bootstrap = f"127.0.0.1:{pairs[0][0]}"
        self.nodes: list[Node] = []
        cluster_id = None
        for n in range(1, size + 1):
            ndir = workdir / f"node-{n}"
            ndir.mkdir(parents=True)
            props = node_props(n, pairs, ndir / "data")
            # Extra keys (balancer.py's setups) replace the template's or are added.
            extra_keys = {p.split("=", 1)[0] for p in extra_props}
            props = [p for p in props if p.split("=", 1)[0] not in extra_keys] + list(extra_props)
            text = "\n".join(props) + "\n"
            cfg = ndir / "server.properties"
            cfg.write_text(text)
            if key == "kafka":
                if cluster_id is None:
                    cluster_id = subprocess.run(
                        ["java", "-Xmx256m", "-cp", f"{libs}/*", "kafka.tools.StorageTool",
                         "random-uuid"], capture_output=True, text=True, check=True
                    ).stdout.strip().splitlines()[-1]
                subprocess.run(["java", "-Xmx256m", "-cp", f"{libs}/*", "kafka.tools.StorageTool",
                                "format", "-t", cluster_id, "-c", str(cfg)],
                               capture_output=True, check=True)
                cmd = ["java", c.KAFKA_HEAP, "-cp", f"{libs}/*", "kafka.Kafka", str(cfg)]
                env = dict(os.environ)
            else:
                # KafkaIQ's own HTTP listener (metrics, status page) defaults to one fixed port;
                # three nodes on one host need one each. Kafka has no such listener.
                http_port = ports.take()
                text += f"http.listener=127.0.0.1:{http_port}\n"
                cfg.write_text(text)
                cmd = [str(binary), "--config", str(cfg)]
                env = dict(os.environ)
                env.setdefault("RUST_LOG", "warn")
            self.nodes.append(Node(ndir, key, n, pairs[n - 1][0], cmd, env, text))
            self.nodes[-1].http_port = http_port if key != "kafka" else None

    def start(self) -> dict:
        t0 = time.monotonic()
        for node in self.nodes:
            node.launch()
        deadline = t0 + c.STARTUP_TIMEOUT_S
        while time.monotonic() < deadline:
            for node in self.nodes:
                if node.proc.poll() is not None:
                    raise c.BrokerFailed(f"node {node.n} exited with code {node.proc.returncode}; "
                                         f"log: {c.tail(node.log)}")
            try:
                if all(c.metadata_broker_count(node.port) >= len(self.nodes)
                       for node in self.nodes):
                    self.nodes[0].apis = c.api_versions(self.nodes[0].port)
                    ready = (time.monotonic() - t0) * 1000
                    # startup_ms: what compare.strict_failures reads as "it started".
                    return {"ready_ms": ready, "startup_ms": ready}
            except (OSError, ValueError, c.struct.error):
                pass
            time.sleep(0.05)
        raise c.BrokerFailed(f"Metadata did not list {len(self.nodes)} brokers on every node "
                             f"within {c.STARTUP_TIMEOUT_S:.0f} s")

    def create_topics(self, topics: list[Topic], timeout_s: float):
        for t in topics:
            log = self.workdir / f"create-{t.name}.log"
            code, out = c.run_tool(
                self.libs, "org.apache.kafka.tools.TopicCommand",
                ["--bootstrap-server", self.bootstrap, "--create", "--topic", t.name,
                 "--partitions", str(t.partitions), "--replication-factor", "3",
                 "--config", "min.insync.replicas=2"], log, timeout_s)
            if code != 0:
                raise c.BrokerFailed(f"creating {t.name}: exit {code}: {c.tail(log)}")
        # Every partition led and its ISR full before the first measured byte.
        deadline = time.monotonic() + timeout_s
        log = self.workdir / "describe.log"
        while time.monotonic() < deadline:
            code, out = c.run_tool(
                self.libs, "org.apache.kafka.tools.TopicCommand",
                ["--bootstrap-server", self.bootstrap, "--describe",
                 "--under-replicated-partitions"], log, timeout_s)
            if code == 0 and "Partition:" not in out.split("\n", 1)[-1]:
                return
            time.sleep(1)
        raise c.BrokerFailed(f"partitions still under-replicated after {timeout_s:.0f} s")

    def alive(self) -> bool:
        return all(n.alive() for n in self.nodes)

    def cpu_s(self) -> list[float] | None:
        vals = [n.cpu_s() for n in self.nodes]
        return None if any(v is None for v in vals) else vals

    def stop(self) -> list[str]:
        problems = []
        # All nodes get SIGTERM together: stopping them one by one would leave the last one
        # waiting for a quorum that has gone.
        deadline = time.monotonic() + c.STOP_TIMEOUT_S
        for node in self.nodes:
            if node.proc is None:
                continue
            if node.proc.poll() is not None:
                node.problems.append(f"exited with code {node.proc.returncode} before it was "
                                     "stopped")
                node.proc = None
            else:
                node.proc.send_signal(c.signal.SIGTERM)
        for node in self.nodes:
            if node.proc is None:
                problems += [f"node {node.n}: {p}" for p in node.problems]
                continue
            try:
                node.proc.wait(max(0.0, deadline - time.monotonic()))
                if node.proc.returncode not in node.clean_exits:
                    node.problems.append(f"exited with code {node.proc.returncode} after SIGTERM")
            except subprocess.TimeoutExpired:
                os.killpg(node.proc.pid, c.signal.SIGKILL)
                node.proc.wait()
                node.problems.append(f"did not stop within {c.STOP_TIMEOUT_S:.0f} s of SIGTERM")
            try:
                panics = [line for line in node.log.read_text(errors="replace").splitlines()
                          if "panicked at" in line]
            except OSError:
                panics = []
            if panics:
                node.problems.append(f"panicked ({len(panics)} panic lines): {panics[0].strip()}")
            problems += [f"node {node.n}: {p}" for p in node.problems]
        return problems


# --------------------------------------------------------------------------------------------
# Tools

E2E_AVG = re.compile(r"Avg latency: ([\d.]+) ms")
E2E_PCT = re.compile(r"Percentiles: 50th = ([\d.]+), 99th = ([\d.]+), 99\.9th = ([\d.]+)")


def e2e(libs: Path, bootstrap: str, run: E2eRun, log: Path, timeout_s: float):
    code, out = c.run_tool(libs, "org.apache.kafka.tools.EndToEndLatency",
                           [bootstrap, run.topic, str(run.records), run.acks, str(run.size)],
                           log, timeout_s)
    if code is None:
        return {"error": f"timed out after {timeout_s:.0f} s: {c.tail(log)}"}
    avg, pct = E2E_AVG.findall(out), E2E_PCT.findall(out)
    if code != 0 or not avg or not pct:
        errs = c.error_lines(out)
        return {"error": f"exit {code}: {errs[0] if errs else c.tail(log)}"}
    p50, p99, p999 = (float(x) for x in pct[-1])
    return {"avg_ms": float(avg[-1]), "p50_ms": p50, "p99_ms": p99, "p999_ms": p999}


# --------------------------------------------------------------------------------------------
# KafkaIQ's own histograms, scraped from each node's /metrics around a tool run

SCRAPED = ("kafkaiq_produce_stage_time_ms", "kafkaiq_runtime_wake_lateness_ms")
BUCKET = re.compile(r'^(\w+)_bucket\{([^}]*)\} (\d+)')


def scrape(port: int | None) -> dict | None:
    """{series: {le: cumulative count}} of the SCRAPED histograms; series is the family plus
    its labels other than le, e.g. kafkaiq_produce_stage_time_ms{stage="total"}."""
    if port is None:
        return None
    import urllib.request
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
            text = r.read().decode()
    except OSError:
        return None
    out: dict = {}
    for line in text.splitlines():
        m = BUCKET.match(line)
        if not m or m.group(1) not in SCRAPED:
            continue
        labels = [l for l in m.group(2).split(",") if l and not l.startswith("le=")]
        le = next(l for l in m.group(2).split(",") if l.startswith("le="))[4:-1]
        series = m.group(1) + ("{" + ",".join(labels) + "}" if labels else "")
        out.setdefault(series, {})[le] = int(m.group(3))
    return out


def histogram_delta(before: dict | None, after: dict | None) -> dict:
    if not after:
        return {}
    before = before or {}
    return {series: {le: n - before.get(series, {}).get(le, 0) for le, n in buckets.items()}
            for series, buckets in after.items()}


def quantile_bound(buckets: dict, q: float) -> float | None:
    """The upper bound of the bucket holding quantile q (cumulative counts by le)."""
    pairs = sorted(((float("inf") if le == "+Inf" else float(le), n) for le, n in
                    buckets.items()), key=lambda p: p[0])
    total = pairs[-1][1] if pairs else 0
    if not total:
        return None
    for bound, n in pairs:
        if n >= q * total:
            return bound
    return None


def histogram_summary(delta: dict) -> dict:
    """{series: {count, p50, p99, p999, max}} as upper bucket bounds in ms."""
    out = {}
    for series, buckets in delta.items():
        pairs = sorted(((float("inf") if le == "+Inf" else float(le), n) for le, n in
                        buckets.items()), key=lambda p: p[0])
        total = pairs[-1][1] if pairs else 0
        if not total:
            continue
        top = next(b for b, n in pairs if n == total)
        out[series] = {"count": total, "p50": quantile_bound(buckets, 0.5),
                       "p99": quantile_bound(buckets, 0.99),
                       "p999": quantile_bound(buckets, 0.999), "max": top}
    return out


# --------------------------------------------------------------------------------------------
# A session


def run_session(cluster: Cluster, plan, args, round_no: int, rdk: Path | None) -> dict:
    session = {"broker": cluster.key, "round": round_no, "runs": {}, "error": None,
               "load_before": os.getloadavg()}
    try:
        session.update(cluster.start())
        log(f"  {cluster.label}: 3 brokers in Metadata after {session['ready_ms']:.0f} ms")
        t = time.monotonic()
        cluster.create_topics(topics_of(plan), args.tool_timeout)
        session["topics_s"] = time.monotonic() - t
    except (c.BrokerFailed, subprocess.CalledProcessError) as err:
        session["error"] = f"did not start: {err}"
        log(f"  {cluster.label}: {session['error']}")
        return session
    session["group_apis_missing"] = cluster.nodes[0].group_apis_missing()
    port = cluster.nodes[0].port
    for run in plan:
        if not cluster.alive():
            dead = [f"node {n.n} ({n.proc.returncode})" for n in cluster.nodes if not n.alive()]
            session["runs"][run.name] = {"error": f"broker exited before this run: {dead}"}
            continue
        tool_log = cluster.workdir / f"{run.name}.log"
        hist0 = [scrape(n.http_port) for n in cluster.nodes]
        cpu0, busy0, kids0, t0 = cluster.cpu_s(), c.system_busy_s(), c.children_cpu_s(), \
            time.monotonic()
        if isinstance(run, RdkProduceRun):
            result = c.rdk_produce(rdk, cluster.bootstrap, run, tool_log, args.tool_timeout) \
                if rdk else {"error": "no rdkafka_performance"}
        elif isinstance(run, E2eRun):
            result = e2e(cluster.libs, cluster.bootstrap, run, tool_log, args.tool_timeout)
        elif isinstance(run, c.ProduceRun):
            result = c.produce(cluster.libs, port, run, tool_log, args.tool_timeout)
        else:
            result = c.consume(cluster.libs, port, run, tool_log, args.tool_timeout,
                               group=f"bench-{run.name}-{round_no}",
                               idle_timeout_ms=args.consumer_idle_timeout_ms)
        cpu1, busy1, kids1, t1 = cluster.cpu_s(), c.system_busy_s(), c.children_cpu_s(), \
            time.monotonic()
        hist1 = [scrape(n.http_port) for n in cluster.nodes]
        summaries = [histogram_summary(histogram_delta(a, b)) for a, b in zip(hist0, hist1)]
        if any(summaries):
            result["histograms_per_node"] = summaries
        result["loadavg_1m"] = os.getloadavg()[0]
        wall = t1 - t0
        result["wall_s"] = wall
        if cpu0 is not None and cpu1 is not None:
            per_node = [b - a for a, b in zip(cpu0, cpu1)]
            broker_cpu = sum(per_node)
            tool_cpu = kids1 - kids0
            result["broker_cpu_s"] = broker_cpu
            result["broker_cpu_s_per_node"] = per_node
            result["broker_cpu_s_per_mib"] = broker_cpu / run.mib
            result["tool_cpu_s"] = tool_cpu
            result["other_cores"] = max(0.0, (busy1 - busy0) - broker_cpu - tool_cpu) / wall
        session["runs"][run.name] = result
        log(f"    {run.name}: {describe(run, result)}")
    session["peak_rss_kib_per_node"] = [n.peak_rss_kib() for n in cluster.nodes]
    session["config"] = cluster.nodes[0].config_text
    session["load_after"] = os.getloadavg()
    return session


def describe(run, r: dict) -> str:
    if "error" in r:
        return "FAILED: " + r["error"]
    if isinstance(run, E2eRun):
        return (f"avg {r['avg_ms']:.2f} ms, p50 {r['p50_ms']:.0f}, p99 {r['p99_ms']:.0f}, "
                f"p99.9 {r['p999_ms']:.0f} ms")
    text = f"{r.get('records_per_s', 0):,.0f} rec/s, {r.get('mib_per_s', 0):.2f} MiB/s"
    if "p99_ms" in r:
        text += f", p50 {r['p50_ms']:.0f} / p99 {r['p99_ms']:.0f} / p99.9 {r['p999_ms']:.0f} ms"
    if isinstance(run, c.ConsumeRun) and "fetch_mib_per_s" in r:
        text = (f"fetch {r['fetch_records_per_s']:,.0f} rec/s, {r['fetch_mib_per_s']:.2f} MiB/s, "
                f"join {r['rebalance_ms']:.0f} ms")
    if "broker_cpu_s" in r:
        text += f"; broker CPU {r['broker_cpu_s']:.2f} s ({r['broker_cpu_s_per_mib']:.3f} s/MiB)"
    if "loadavg_1m" in r:
        text += f"; load {r['loadavg_1m']:.1f}"
    return text


# --------------------------------------------------------------------------------------------
# Report


@dataclasses.dataclass
class Row:
    label: str
    unit: str
    get: object  # session -> value or None
    fmt: str = "{:.2f}"
    target: float | None = None
    higher: bool = True


def run_value(name: str, key: str):
    def get(s):
        r = s["runs"].get(name)
        return None if r is None or "error" in r else r.get(key)
    return get


def rows_for(plan) -> list[Row]:
    names = {r.name for r in plan}
    rows = []
    for name, label in [("rdk-produce-acksall", "rdkafka_performance, acks=all"),
                        ("rdk-produce-acks1", "rdkafka_performance, acks=1"),
                        ("java-produce-acksall", "ProducerPerformance, acks=all"),
                        ("java-produce-acks1", "ProducerPerformance, acks=1")]:
        if name in names:
            target = 1.5 if name.startswith("rdk") else None
            rows.append(Row(f"Producer throughput, {label}", "MiB/s",
                            run_value(name, "mib_per_s"), target=target))
    if "consume" in names:
        rows.append(Row("Consumer throughput (ConsumerPerformance fetch)", "MiB/s",
                        run_value("consume", "fetch_mib_per_s")))
    for name in [n for n in ("rdk-produce-acksall", "java-produce-acksall", "java-produce-acks1",
                             "rdk-produce-acks1") if n in names]:
        target = 0.25 if name == "rdk-produce-acksall" else None
        rows.append(Row(f"Broker CPU per MiB (3 brokers), {name}", "CPU s/MiB",
                        run_value(name, "broker_cpu_s_per_mib"), "{:.3f}", target, False))
    fixed = [r for r in plan if isinstance(r, c.ProduceRun) and r.throughput > 0]
    for r in fixed:
        for key, label, target in [("p50_ms", "p50", None), ("p99_ms", "p99", 0.5),
                                   ("p999_ms", "p99.9", None)]:
            rows.append(Row(f"Fixed rate {r.throughput:,}/s acks=all, {label}", "ms",
                            run_value(r.name, key), "{:.0f}", target, False))
    e2es = [r for r in plan if isinstance(r, E2eRun)]
    for r in e2es:
        for key, label, target in [("avg_ms", "avg", None), ("p50_ms", "p50", None),
                                   ("p99_ms", "p99", 0.5), ("p999_ms", "p99.9", None)]:
            rows.append(Row(f"End-to-end latency acks=all, {label}", "ms",
                            run_value(r.name, key), "{:.2f}" if key == "avg_ms" else "{:.0f}",
                            target, False))

    def rss_sum(s):
        v = s.get("peak_rss_kib_per_node")
        return sum(v) / 1024 if v and all(v) else None

    def rss_max(s):
        v = s.get("peak_rss_kib_per_node")
        return max(v) / 1024 if v and all(v) else None

    rows.append(Row("Peak RSS, sum of 3 brokers", "MiB", rss_sum, "{:.0f}", None, False))
    rows.append(Row("Peak RSS per broker (largest node)", "MiB", rss_max, "{:.0f}", 0.1, False))
    rows.append(Row("Cluster ready (3 brokers in every node's Metadata)", "ms",
                    lambda s: s.get("ready_ms"), "{:.0f}", None, False))
    return rows


def report(sessions, plan, args, binaries: dict, brokers: list[str], rdk_note: str) -> str:
    binary = binaries.get("kafkaiq") or Path("-")
    by = {k: [s for s in sessions if s["broker"] == k] for k in brokers}
    out = []
    mode = ("smoke run (tiny record counts, 1 round: the figures mean nothing)" if args.smoke
            else f"{args.rounds} rounds")
    out.append(f"# 3-broker clusters: KafkaIQ beside Apache Kafka 4.1.1 — {mode}\n")
    out.append("Produced by `benches/compare/compare.py --cluster 3"
               + (" --smoke" if args.smoke else "") + "`. Each round starts a three-node "
               "Apache Kafka cluster (KRaft combined: every node broker and controller), runs "
               "the plan, stops it, then does the same with a three-node KafkaIQ cluster from the "
               "same server.properties keys, on fresh loopback ports and data dirs. Topics: "
               "replication factor 3, min.insync.replicas=2, created before the plan and waited "
               "on until no partition is under-replicated. Cells are medians over the rounds "
               "(all rounds listed below); ratios are KafkaIQ / Kafka from the same run.\n")
    if "kafkaiq-before" in brokers:
        out.append("`--compare-bin`: every round also runs a three-node cluster of the earlier "
                   "binary, 'KafkaIQ (before)', first; the order in a round is "
                   + ", ".join(c.LABELS[k] for k in brokers) + ".\n")
    if args.latency_only:
        out.append("`--latency-only`: the plan is a short warm-up, EndToEndLatency and the "
                   "fixed-rate run of the full plan.\n")
    if args.note:
        out.append(f"**Conditions:** {args.note}\n")
    other = [r["other_cores"] for s in sessions for r in s["runs"].values() if "other_cores" in r]
    if other:
        out.append(f"Other processes on the machine used {statistics.median(other):.2f} cores "
                   f"(median over tool runs; max {max(other):.2f}) of {os.cpu_count()} while the "
                   "tools ran.\n")
    out.append("## Machine\n\n| | |\n|---|---|")
    for k, v in c.machine_description(args, binary):
        out.append(f"| {k} | {v.replace('|', '/')} |")
    if binaries.get("kafkaiq-before"):
        out.append(f"| KafkaIQ (before) binary | {binaries['kafkaiq-before']} |")
    out.append(f"| Load generator | {rdk_note} |")
    out.append("")
    out.append("## Results and targets (medians)\n")
    header, sep, both, before = c.results_header(brokers)
    out += [header, sep]
    for row in rows_for(plan):
        line = f"| {row.label} | {row.unit} |"
        med = {}
        for k in brokers:
            vals = [v for v in (row.get(s) for s in by[k]) if v is not None]
            med[k] = statistics.median(vals) if vals else None
            line += (f" {row.fmt.format(med[k])} ({len(vals)}/{len(by[k])}) |"
                     if vals else " failed |")
        if before:
            a, b = med.get("kafka"), med.get("kafkaiq-before")
            ratio = b / a if a and b is not None else None
            line += f" {c.format_ratio(ratio)}× |" if ratio is not None else " — |"
        if both:
            a, b = med.get("kafka"), med.get("kafkaiq")
            ratio = b / a if a and b is not None else None
            line += f" {c.format_ratio(ratio)}× |" if ratio is not None else " — |"
            if row.target is None:
                line += " | |"
            else:
                met = "—" if ratio is None else (
                    "yes" if (ratio >= row.target if row.higher else ratio <= row.target)
                    else "**no**")
                line += f" {'≥' if row.higher else '≤'} {row.target}× | {met} |"
        out.append(line)
    if both and not args.latency_only:
        out.append("| Failover time, 1,000 leaders moving | s | | | | ≤ 0.2× | not measured "
                   "here: the scale benchmark of issue 15 (item 4) |")
    out.append("")
    out.append("(n/m) after a median: n of m rounds completed that run. Broker CPU = utime+stime "
               "of the three broker processes summed over the tool run, divided by MiB of record "
               "values written by it (2^20 bytes; replication to the followers is part of the "
               "cost). The producer throughput target is read against the broker-bound "
               "generator, rdkafka_performance with acks=all; the CPU target against the same "
               "run. Peak RSS is VmHWM per node before it is stopped.\n")
    out.append("## Every run\n")
    out.append("| Round | Broker | Run | Result | Broker CPU s (per node) | Tool CPU s | "
               "Other cores | Wall s |")
    out.append("|---:|---|---|---|---|---:|---:|---:|")
    for s in sessions:
        rss = s.get("peak_rss_kib_per_node") or []
        sess = (f"ready in {s['ready_ms']:.0f} ms, topics created in {s.get('topics_s', 0):.1f} s"
                if s.get("ready_ms") is not None else "")
        if rss:
            sess += ", peak RSS " + " / ".join(f"{v / 1024:.0f}" if v else "?" for v in rss) \
                + " MiB"
        if s.get("port_in_use_restart"):
            sess += "; started a second time on new ports (a port of the first was in use)"
        if s.get("error"):
            sess += f"; {s['error']}"
        for p in s.get("stop_problems", []):
            sess += f"; {p}"
        out.append(f"| {s['round']} | {c.LABELS[s['broker']]} | session | "
                   f"{sess.replace('|', '/')[:400]} | | | | |")
        for run in plan:
            r = s["runs"].get(run.name)
            if r is None:
                continue
            per = r.get("broker_cpu_s_per_node")
            cpu = (f"{r['broker_cpu_s']:.2f} ({' / '.join(f'{x:.2f}' for x in per)})"
                   if per else "")
            num = lambda k, f="{:.2f}": f.format(r[k]) if k in r else ""
            out.append(f"| {s['round']} | {c.LABELS[s['broker']]} | {run.name} | "
                       f"{describe(run, r).replace('|', '/')[:300]} | {cpu} | "
                       f"{num('tool_cpu_s')} | {num('other_cores')} | {num('wall_s', '{:.1f}')} |")
    out.append("")
    hist = [(s, name, r) for s in sessions for name, r in s["runs"].items()
            if r.get("histograms_per_node")]
    if hist:
        out.append("## KafkaIQ's own histograms during each run\n")
        out.append("Scraped from every node's `/metrics` before and after the tool run; the "
                   "difference, as upper bucket bounds in ms (buckets from 0.01 ms, doubling). "
                   "`produce total` is the Produce requests' `kafkaiq_produce_stage_time_ms` "
                   "from frame read to response written, `acks_wait` the part parked until the "
                   "high watermark covered the records (the followers' round trips), `queue` the "
                   "wait behind earlier requests of the connection; `wake lateness` is "
                   "`kafkaiq_runtime_wake_lateness_ms` (absent from binaries without it). A node "
                   "that served no Produce has no produce cells.\n")
        out.append("| Round | Broker | Run | Node | Series | Count | p50 ≤ | p99 ≤ | p99.9 ≤ | "
                   "max ≤ |")
        out.append("|---:|---|---|---:|---|---:|---:|---:|---:|---:|")
        for s, name, r in hist:
            for n, summ in enumerate(r["histograms_per_node"], 1):
                for series in sorted(summ):
                    short = (series.replace("kafkaiq_produce_stage_time_ms", "produce")
                             .replace("kafkaiq_runtime_wake_lateness_ms", "wake lateness")
                             .replace('{stage="', " ").replace('"}', ""))
                    if not (short.startswith("wake") or short.split()[-1] in
                            ("total", "acks_wait", "queue", "append", "write")):
                        continue
                    h = summ[series]
                    fmt = lambda v: "∞" if v == float("inf") else f"{v:g}"
                    out.append(f"| {s['round']} | {c.LABELS[s['broker']]} | {name} | {n} | "
                               f"{short} | {h['count']} | {fmt(h['p50'])} | {fmt(h['p99'])} | "
                               f"{fmt(h['p999'])} | {fmt(h['max'])} |")
        out.append("")
    out.append("## Plan\n")
    for run in plan:
        if isinstance(run, RdkProduceRun):
            acks = "-1" if run.acks == "all" else run.acks
            out.append(f"- `{run.name}`: `rdkafka_performance -P -t {run.topic} -b <node 1> "
                       f"-s {run.size} -c {run.records} -X acks={acks} -q`")
        elif isinstance(run, E2eRun):
            out.append(f"- `{run.name}`: `EndToEndLatency <node 1> {run.topic} {run.records} "
                       f"{run.acks} {run.size}`")
        elif isinstance(run, c.ProduceRun):
            out.append(f"- `{run.name}`{'' if run.measured else ' (not measured)'}: "
                       f"`ProducerPerformance --topic {run.topic} --num-records {run.records} "
                       f"--record-size {run.size} --throughput {run.throughput} "
                       f"--producer-props bootstrap.servers=<node 1> acks={run.acks}`")
        else:
            out.append(f"- `{run.name}`: `ConsumerPerformance --bootstrap-server <node 1> "
                       f"--topic {run.topic} --messages {run.records} --group <fresh> "
                       f"--timeout {args.consumer_idle_timeout_ms}`")
    out.append("")
    out.append("Topics (`kafka-topics --create --replication-factor 3 --config "
               "min.insync.replicas=2`): " + ", ".join(
                   f"`{t.name}` ({t.partitions} partition{'s' if t.partitions > 1 else ''})"
                   for t in topics_of(plan)) + ". Java tools run with "
               f"`java {c.TOOL_HEAP}` (and the class data archive of integration/lib/java-cds.sh); "
               f"Apache Kafka nodes with `{c.KAFKA_HEAP}`.\n")
    out.append("## Broker configs (node 1; nodes 2 and 3 differ in node.id, ports, rack, "
               "log.dirs)\n")
    for k in [b for b in brokers if b != "kafkaiq-before"]:
        cfg = next((s.get("config") for s in by[k] if s.get("config")), None)
        if k == "kafka":
            out.append("Apache Kafka 4.1.1 (`kafka-storage format -t <one id> -c` per node, then "
                       f"`java {c.KAFKA_HEAP} kafka.Kafka server.properties`):\n")
        else:
            out.append("KafkaIQ (`kafkaiq --config server.properties`, RUST_LOG="
                       f"{os.environ.get('RUST_LOG', 'warn')}):\n")
        out.append("```properties\n" + (cfg or "(not started)\n").rstrip() + "\n```\n")
    return "\n".join(out)


def log(msg: str):
    print(msg, file=sys.stderr, flush=True)


def main(args, libs: Path, binary: Path, brokers: list[str]) -> int:
    plan = smoke_plan() if args.smoke else latency_plan() if args.latency_only else full_plan()
    rdk, rdk_note = c.build_rdk()
    binaries = {"kafkaiq": binary, "kafkaiq-before": Path(args.compare_bin).resolve()
                if args.compare_bin else None}
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="kafkaiq-cluster-bench-"))
    workdir.mkdir(parents=True, exist_ok=True)
    log(f"==> cluster mode, {args.cluster} nodes, work dir {workdir}")
    ports = Ports(args.port_base)
    sessions = []
    try:
        for round_no in range(1, args.rounds + 1):
            log(f"==> round {round_no}/{args.rounds}")
            for key in brokers:
                # Fixed ports (--port-base) may lie in the kernel's ephemeral range, where a
                # client connection can hold one: a cluster that could not bind starts again
                # once on the next ports, and the report says so.
                for attempt in (1, 2):
                    sdir = workdir / f"round{round_no}-{key}" / f"attempt{attempt}"
                    sdir.mkdir(parents=True)
                    cluster = Cluster(key, sdir, args.cluster, ports, libs, binaries.get(key))
                    try:
                        s = run_session(cluster, plan, args, round_no, rdk)
                    finally:
                        problems = cluster.stop()
                        for node in cluster.nodes:
                            shutil.rmtree(node.workdir / "data", ignore_errors=True)
                    s["stop_problems"] = problems
                    in_use = any("Address already in use" in n.log.read_text(errors="replace")
                                 for n in cluster.nodes if n.log.exists())
                    if attempt == 1 and s.get("error") and in_use:
                        log(f"  {cluster.label}: a port was in use; starting again on new ports")
                        time.sleep(2)
                        continue
                    s["port_in_use_restart"] = attempt == 2
                    break
                sessions.append(s)
                time.sleep(2)
    finally:
        text = report(sessions, plan, args, binaries, brokers, rdk_note)
        if args.out:
            out = Path(args.out)
        elif args.smoke:
            out = workdir / "cluster-report.md"
        else:
            date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
            out = ROOT / "benches" / "results" / f"cluster-{date}.md"
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text)
        out.with_suffix(".json").write_text(json.dumps(sessions, indent=1, default=str) + "\n")
        log(f"==> report written to {out}")
        if args.smoke:
            print(text)
    failures = c.strict_failures(sessions, args)
    if not rdk:
        failures.append(rdk_note)
    if not args.keep and not args.workdir and not failures:
        shutil.rmtree(workdir, ignore_errors=True)
    else:
        log(f"==> logs kept in {workdir}")
    for f in failures:
        log(f"FAILED: {f}")
    return 1 if (failures and args.smoke) else 0
