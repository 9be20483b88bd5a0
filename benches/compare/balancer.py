#!/usr/bin/env python3
"""Leadership balanced by load, measured (issue 33): three brokers, each in its own CPU cgroup.

    benches/compare/balancer.py [--quick] [--setups count,load,kafka] [--out PATH]

Three setups, one after the other, each a three-node cluster started by cluster.py's `Cluster`
from the same config/cluster/ properties (every node broker and controller):

- `count`: KafkaIQ, `kafkaiq.leader.balancer=count` (the default: Kafka's preferred leaders);
- `load`: KafkaIQ, `kafkaiq.leader.balancer=load` (the balancer's other keys at their defaults);
- `kafka`: Apache Kafka 4.1.1.

All setups also get `leader.imbalance.check.interval.seconds` (10; Kafka's default is 300), the
interval of both the count-based rebalance and KafkaIQ's load pass, so that the load balancer
acts within the warm-up.

Each broker process is placed (before it execs) in its own CPU cgroup with the same quota
(cgroup v1: `/sys/fs/cgroup/cpu/<name>/cpu.cfs_quota_us` over `cpu.cfs_period_us` 100000; v2:
`cpu.max`), so each behaves like its own small machine; the load generator gets a cgroup of its
own too, so the four fit the machine's two cores. The cgroups are removed at the end.

The load: `ZipfProducer.java` (JDK source launcher, Kafka's client jars), acks=all, idempotent,
records of `--record-size` bytes, the partition of each record drawn by Zipf weight 1/r^s over
ranks r = 1..12, each rank mapped to a partition:

- `layout` mapping: the three hottest ranks go to three partitions led by one broker (the broker
  leading the most partitions after creation, the lowest id on a tie; its fourth partition gets
  the coldest rank), ranks 4..11 are dealt to the other two brokers' partitions alternately, so
  leadership is count-balanced (4/4/4) while one broker carries about two thirds of the load
  (s = 1.1): the issue's example;
- `random` mapping: a permutation of the partitions from `--seed`;
- `uniform`: s = 0.

Per setup, three workloads, each on a fresh cluster with one topic of 12 partitions (RF 3,
min.insync.replicas=2, created before anything is measured and waited on until no partition is
under-replicated), so that no workload's decaying load rates are left for the next one's
balancer passes:

1. uniform load, saturated: warm-up, then records acknowledged per second over the window;
2. skewed load (layout mapping), saturated, likewise; then on the same cluster, leadership as
   that left it, the skewed load at a fixed rate: p50/p99/p99.9 latency from each record's due
   time to its acknowledgement;
3. skewed load (random mapping), saturated.

Every setup gets the same warm-up before each saturated window (`--balance-warmup`), long enough
for the load balancer to measure the load and move leadership; the leadership moves of every phase are
recorded (leaders before and after from `kafka-topics --describe`, and for KafkaIQ the
`load_balance` changes of `/api/history`, and each move's reason from the controller's log).
The fixed rate is `--rate`, or half the first setup's skewed (layout) saturated rate (Apache
Kafka's by default, the lowest); the report says whether it was under each setup's saturation.
Around every run the brokers' CPU seconds (`/proc/PID/stat`), each cgroup's throttled time and,
after it, the under-replicated partitions are read.

Broker keys added for every setup: short retention (the data dirs are in tmpfs, `/dev/shm`: on
one shared disk the three brokers would share the page cache's writeback, a fourth resource;
this benchmark is about CPU). Producer: 512 KiB batches (ZipfProducer.java says why).

Writes `benches/results/balancer-<date>.md` (and the `.json` beside it).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import compare as c  # noqa: E402
import cluster as cl  # noqa: E402

ROOT = c.ROOT
MIB = c.MIB
ZIPF_SOURCE = Path(__file__).resolve().parent / "ZipfProducer.java"
PARTITIONS = 12
CHECK_INTERVAL_S = 10
PERIOD_US = 100_000
# The producer's batch.size (ZipfProducer.java says why it is not the default 16 KiB).
BATCH_SIZE = 524288
MAX_REQUEST_SIZE = 4194304
# Every setup, broker keys: short retention so that the data dirs fit in tmpfs (/dev/shm). On
# one shared disk the three "machines" would share a fourth resource, the page cache's
# writeback; the benchmark is about CPU.
DATA_PROPS = ["log.segment.bytes=16777216", "log.retention.bytes=67108864",
              "log.retention.check.interval.ms=5000"]

SETUPS = {
    "count": ("kafkaiq", ["kafkaiq.leader.balancer=count"]),
    "load": ("kafkaiq", ["kafkaiq.leader.balancer=load"]),
    "kafka": ("kafka", []),
}
LABELS = {"count": "KafkaIQ, count balancer (default)", "load": "KafkaIQ, load balancer",
          "kafka": "Apache Kafka 4.1.1"}
TOPICS = {"uniform": "bal-uniform", "layout": "bal-skew-layout", "random": "bal-skew-random"}


def log(msg: str):
    print(msg, file=sys.stderr, flush=True)


# --------------------------------------------------------------------------------------------
# CPU cgroups


class CpuGroups:
    """One CPU cgroup per name, each limited to quota_us per 100 ms period."""

    def __init__(self, prefix: str, quota_us: dict[str, int]):
        v1 = Path("/sys/fs/cgroup/cpu")
        if (v1 / "cpu.cfs_quota_us").exists():
            self.version, base = 1, v1
        elif Path("/sys/fs/cgroup/cgroup.controllers").exists():
            self.version, base = 2, Path("/sys/fs/cgroup")
            # The cpu controller must be enabled for children of the root.
            try:
                (base / "cgroup.subtree_control").write_text("+cpu")
            except OSError:
                pass
        else:
            raise SystemExit("no cgroup v1 cpu hierarchy at /sys/fs/cgroup/cpu and no cgroup v2")
        self.paths: dict[str, Path] = {}
        self.quota_us = quota_us
        for name, quota in quota_us.items():
            path = base / f"{prefix}-{name}"
            if path.exists():
                self._remove(path)
            path.mkdir()
            if self.version == 1:
                (path / "cpu.cfs_period_us").write_text(str(PERIOD_US))
                (path / "cpu.cfs_quota_us").write_text(str(quota))
            else:
                (path / "cpu.max").write_text(f"{quota} {PERIOD_US}")
            self.paths[name] = path

    def describe(self) -> str:
        files = ("`cpu.cfs_period_us` 100000, `cpu.cfs_quota_us` " if self.version == 1
                 else "`cpu.max` \"<quota> 100000\", quota ")
        per = ", ".join(f"{n}: {q} µs ({q / PERIOD_US:.2f} CPU)" for n, q in self.quota_us.items())
        return f"cgroup v{self.version} ({files}per group) — {per}"

    def throttled_s(self, name: str) -> float | None:
        """Seconds the group's tasks were throttled (quota used up), cumulative."""
        try:
            text = (self.paths[name] / "cpu.stat").read_text()
        except OSError:
            return None
        for line in text.splitlines():
            k, _, v = line.partition(" ")
            if self.version == 1 and k == "throttled_time":
                return int(v) / 1e9
            if self.version == 2 and k == "throttled_usec":
                return int(v) / 1e6
        return None

    @staticmethod
    def _remove(path: Path):
        # Move any leftover task out first, then rmdir (a cgroup with tasks cannot go).
        root = path.parent
        try:
            for pid in (path / "cgroup.procs").read_text().split():
                try:
                    (root / "cgroup.procs").write_text(pid)
                except OSError:
                    pass
        except OSError:
            pass
        for _ in range(50):
            try:
                path.rmdir()
                return
            except OSError:
                time.sleep(0.1)

    def remove(self):
        for path in self.paths.values():
            self._remove(path)


# --------------------------------------------------------------------------------------------
# Load


def zipf_weights(s: float, n: int = PARTITIONS) -> list[float]:
    w = [1.0 / (r ** s) for r in range(1, n + 1)]
    total = sum(w)
    return [x / total for x in w]


def layout_mapping(leaders: dict[int, int]) -> list[int]:
    """Ranks 1..3 to three partitions of the broker leading the most; ranks 4.. dealt to the
    other brokers' partitions alternately; what is left (the hot broker's fourth) gets the
    coldest ranks."""
    by_broker: dict[int, list[int]] = {}
    for p in sorted(leaders):
        by_broker.setdefault(leaders[p], []).append(p)
    hot = min(by_broker, key=lambda b: (-len(by_broker[b]), b))
    others = [by_broker[b] for b in sorted(by_broker) if b != hot]
    mapping = by_broker[hot][:3]
    rest_hot = by_broker[hot][3:]
    queues = [list(o) for o in others]
    i = 0
    while any(queues):
        q = queues[i % len(queues)]
        if q:
            mapping.append(q.pop(0))
        i += 1
    mapping += rest_hot
    return mapping


def random_mapping(seed: int) -> list[int]:
    ps = list(range(PARTITIONS))
    random.Random(seed).shuffle(ps)
    return ps


def broker_shares(mapping: list[int], leaders: dict[int, int], s: float) -> dict[int, float]:
    """Each broker's share of the records, with these leaders."""
    shares: dict[int, float] = {}
    for w, p in zip(zipf_weights(s), mapping):
        shares[leaders.get(p, -1)] = shares.get(leaders.get(p, -1), 0.0) + w
    return dict(sorted(shares.items()))


RESULT = re.compile(r"^RESULT (.*)$", re.M)


def zipf_produce(libs: Path, bootstrap: str, topic: str, s: float, mapping: list[int],
                 size: int, rate: float, warmup_s: float, measure_s: float, seed: int,
                 log_path: Path, cgroup: Path | None) -> dict:
    cmd = ["java", c.TOOL_HEAP, "-cp", f"{libs}/*", str(ZIPF_SOURCE), bootstrap, topic, str(s),
           ",".join(map(str, mapping)), str(size), str(rate), str(warmup_s), str(measure_s),
           str(seed), str(BATCH_SIZE), str(MAX_REQUEST_SIZE)]

    def enter():
        if cgroup is not None:
            (cgroup / "cgroup.procs").write_text(str(os.getpid()))

    with open(log_path, "wb") as out:
        out.write((" ".join(cmd) + "\n").encode())
        out.flush()
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True, preexec_fn=enter)
        try:
            code = proc.wait(warmup_s + measure_s + 180)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, c.signal.SIGKILL)
            proc.wait()
            return {"error": f"timed out: {c.tail(log_path)}"}
    text = log_path.read_text(errors="replace")
    m = RESULT.findall(text)
    if code != 0 or not m:
        return {"error": f"exit {code}: {c.tail(log_path)}"}
    r: dict = {}
    for kv in m[-1].split():
        k, _, v = kv.partition("=")
        r[k] = [int(x) for x in v.split(",")] if k == "per_partition" else float(v)
    r["mib_per_s"] = r["records_per_s"] * size / MIB
    if r.get("errors"):
        r["error"] = f"{int(r['errors'])} records failed"
    return r


# --------------------------------------------------------------------------------------------
# Leadership


DESCRIBE = re.compile(r"Partition:\s*(\d+)\s+Leader:\s*(-?\d+)\s+Replicas:\s*([\d,]+)\s+"
                      r"Isr:\s*([\d,]*)")


def leaders_of(cluster: cl.Cluster, topic: str) -> dict[int, int]:
    logp = cluster.workdir / "describe-leaders.log"
    for _ in range(5):
        code, out = c.run_tool(cluster.libs, "org.apache.kafka.tools.TopicCommand",
                               ["--bootstrap-server", cluster.bootstrap, "--describe", "--topic",
                                topic], logp, 60)
        rows = DESCRIBE.findall(out)
        found = {int(p): int(l) for p, l, _, _ in rows}
        # Partitions whose ISR is not the full replica set, as of this describe.
        cluster.under_replicated = sorted(int(p) for p, _, reps, isr in rows
                                          if len(isr.split(",")) < len(reps.split(",")))
        if code == 0 and len(found) == PARTITIONS:
            return found
        time.sleep(1)
    raise c.BrokerFailed(f"could not describe {topic}: {c.tail(logp)}")


def history(cluster: cl.Cluster) -> list[dict]:
    """KafkaIQ's leadership changes with cause load_balance (any node's view: the image)."""
    for node in cluster.nodes:
        if node.http_port is None:
            return []
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{node.http_port}/api/history",
                                        timeout=5) as r:
                data = json.loads(r.read())
            return [ch for ch in data.get("changes", []) if ch.get("cause") == "load_balance"]
        except (OSError, ValueError):
            continue
    return []


def wait_no_under_replicated(cluster: cl.Cluster, timeout_s: float) -> float:
    t0 = time.monotonic()
    logp = cluster.workdir / "describe-urp.log"
    while time.monotonic() - t0 < timeout_s:
        code, out = c.run_tool(cluster.libs, "org.apache.kafka.tools.TopicCommand",
                               ["--bootstrap-server", cluster.bootstrap, "--describe",
                                "--under-replicated-partitions"], logp, 60)
        if code == 0 and "Partition:" not in out:
            return time.monotonic() - t0
        time.sleep(1)
    return time.monotonic() - t0


# --------------------------------------------------------------------------------------------
# A setup


def measured(cluster: cl.Cluster, groups: CpuGroups, fn) -> dict:
    """Runs fn() and adds the brokers' CPU and throttling over it."""
    cpu0 = cluster.cpu_s()
    thr0 = {n: groups.throttled_s(n) for n in groups.paths}
    t0 = time.monotonic()
    result = fn()
    t1 = time.monotonic()
    cpu1 = cluster.cpu_s()
    thr1 = {n: groups.throttled_s(n) for n in groups.paths}
    if cpu0 and cpu1:
        result["broker_cpu_s_per_node"] = [b - a for a, b in zip(cpu0, cpu1)]
    result["throttled_s"] = {n: (thr1[n] - thr0[n]) if thr0[n] is not None and thr1[n]
                             is not None else None for n in groups.paths}
    result["wall_s"] = t1 - t0
    return result


def start_cluster(name: str, sdir: Path, args, libs: Path, binary: Path, ports: cl.Ports,
                  groups: CpuGroups, topic: str) -> cl.Cluster:
    key, extra = SETUPS[name]
    props = [f"leader.imbalance.check.interval.seconds={CHECK_INTERVAL_S}"] + DATA_PROPS + extra
    sdir.mkdir(parents=True)
    cluster = cl.Cluster(key, sdir, 3, ports, libs, binary, extra_props=props)
    for i, node in enumerate(cluster.nodes, 1):
        node.cgroup = groups.paths[f"broker{i}"]
        if key == "kafkaiq":
            # Each move's full reason ("load: broker N at R× the mean ...") is logged at info.
            node._env["RUST_LOG"] = "warn,kafkaiq::controller::request=info"
    return cluster


def run_phase(cluster: cl.Cluster, groups: CpuGroups, args, libs: Path, phase: str, topic: str,
              s: float, mapping: list[int], rate: float, warm: float, window: float,
              log_path: Path) -> dict:
    before = leaders_of(cluster, topic)
    t_wall = time.time() * 1000
    log(f"    {phase}: {'saturated' if rate < 0 else f'{rate:.0f} records/s'}, warm-up "
        f"{warm:.0f} s, window {window:.0f} s")
    r = measured(cluster, groups, lambda: zipf_produce(
        libs, cluster.bootstrap, topic, s, mapping, args.record_size, rate, warm, window,
        args.seed, log_path, groups.paths["generator"]))
    after = leaders_of(cluster, topic)
    r["under_replicated_after"] = cluster.under_replicated
    r["leaders_before"], r["leaders_after"] = before, after
    r["moved"] = {p: [before[p], after[p]] for p in before if before[p] != after[p]}
    r["shares_before"] = broker_shares(mapping, before, s)
    r["shares_after"] = broker_shares(mapping, after, s)
    r["history"] = [h for h in history(cluster) if h.get("time_ms", 0) >= t_wall - 1000]
    r["window_s"], r["warmup_s"] = window, warm
    if rate > 0:
        r["rate"] = rate
    log(f"    {phase}: {describe(r)}")
    return r


def run_setup(name: str, args, libs: Path, binary: Path, workdir: Path, ports: cl.Ports,
              groups: CpuGroups, rate_for: dict) -> dict:
    """One cluster per workload (uniform; skewed layout then the fixed rate; skewed random),
    each fresh, so that no workload's decaying load rates are left for the next one's
    balancer passes."""
    out: dict = {"setup": name, "label": LABELS[name], "phases": {}, "error": None,
                 "mappings": {}, "move_reasons": [], "stop_problems": []}
    q = args.quick
    warm = 5 if q else 20
    window = 10 if q else 25
    # Every setup gets the same warm-up before its saturated windows, long enough for the load
    # balancer to measure and move: a longer run is not the same run (retention, the JIT of the
    # generator), and the windows are only comparable when they start at the same time.
    bal_warm = args.balance_warmup
    for workload in ("uniform", "layout", "random"):
        topic = TOPICS[workload]
        cluster = start_cluster(name, workdir / name / workload, args, libs, binary, ports,
                                groups, topic)
        out.setdefault("config", cluster.nodes[0].config_text)
        try:
            ready = cluster.start()
            log(f"  {LABELS[name]} ({workload}): 3 brokers in Metadata after "
                f"{ready['ready_ms']:.0f} ms")
            cluster.create_topics([cl.Topic(topic, PARTITIONS)], args.tool_timeout)
            leaders0 = leaders_of(cluster, topic)
            if workload == "uniform":
                mapping, s = list(range(PARTITIONS)), 0.0
            elif workload == "layout":
                mapping, s = layout_mapping(leaders0), args.s
            else:
                mapping, s = random_mapping(args.seed), args.s
            out["mappings"][workload] = mapping
            phase = "uniform" if workload == "uniform" else f"skew-{workload}"
            out["phases"][phase] = run_phase(cluster, groups, args, libs, phase, topic, s,
                                             mapping, -1, bal_warm, window,
                                             cluster.workdir / f"{phase}.log")
            if workload == "layout":
                # Fixed rate on the same cluster, leadership as the saturated phase left it.
                rate = args.rate or rate_for.get("rate")
                if rate is None:
                    sat = out["phases"][phase].get("records_per_s")
                    rate = round(sat * 0.5, -2) if sat else 1000
                    rate_for["rate"] = rate
                out["phases"]["fixed-rate"] = run_phase(
                    cluster, groups, args, libs, "fixed-rate", topic, s, mapping, rate, warm,
                    window, cluster.workdir / "fixed-rate.log")
        except (c.BrokerFailed, subprocess.CalledProcessError) as err:
            out["error"] = (out["error"] or "") + f"{workload}: {err}; "
            log(f"  {LABELS[name]} ({workload}): {err}")
        finally:
            out["stop_problems"] += [f"{workload}: {p}" for p in cluster.stop()]
            out["move_reasons"] += [f"[{workload}] {line}" for line in move_reasons(cluster)]
            for node in cluster.nodes:
                shutil.rmtree(node.workdir / "data", ignore_errors=True)
        time.sleep(1)
    return out


MOVE_LOG = re.compile(r"leadership moved by load.*")
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def move_reasons(cluster: cl.Cluster) -> list[str]:
    """The controller's "leadership moved by load" lines (KafkaIQ), each with its reason."""
    out = []
    for node in cluster.nodes:
        try:
            text = ANSI.sub("", node.log.read_text(errors="replace"))
        except OSError:
            continue
        for line in text.splitlines():
            if "leadership moved by load" in line:
                out.append(line.strip())
    return out


def describe(r: dict) -> str:
    if r.get("error"):
        return "error: " + r["error"]
    cpu = r.get("broker_cpu_s_per_node")
    cores = "/".join(f"{x / r['wall_s']:.2f}" for x in cpu) if cpu else "?"
    s = (f"{r['records_per_s']:.0f} rec/s ({r['mib_per_s']:.1f} MiB/s), p99 {r['p99_ms']:.1f} ms,"
         f" broker cores {cores}, moved {len(r.get('moved', {}))}")
    return s


# --------------------------------------------------------------------------------------------
# Report


def cores(r: dict) -> list[float] | None:
    cpu = r.get("broker_cpu_s_per_node")
    return [x / r["wall_s"] for x in cpu] if cpu else None


def fmt_shares(sh: dict) -> str:
    return " / ".join(f"{b}: {v * 100:.0f}%" for b, v in sh.items())


def report(results: list[dict], args, groups_desc: str, binary: Path) -> str:
    by = {r["setup"]: r for r in results}
    o = []
    mode = "quick mode (short windows)" if args.quick else "full mode"
    o.append(f"# Leadership balanced by load: 3 brokers under CPU quotas, Zipf-skewed producer "
             f"({mode})\n")
    o.append(
        "Produced by `benches/compare/balancer.py" + (" --quick" if args.quick else "") + "`. "
        "Three setups, one after the other; each workload on a fresh three-node cluster (every "
        "node broker and controller) from the same `config/cluster/` properties plus "
        f"`leader.imbalance.check.interval.seconds={CHECK_INTERVAL_S}`: KafkaIQ with "
        "`kafkaiq.leader.balancer=count` (the default, Kafka's way), KafkaIQ with "
        "`kafkaiq.leader.balancer=load` (threshold, dwell, moves per interval and minimum "
        "measured span at their defaults: 1.10, 300 s, 5, 30 s), and Apache Kafka 4.1.1. "
        "Each broker process runs in its "
        "own CPU cgroup with the same quota, the load generator in one of its own.\n")
    o.append(f"**CPU limits:** {groups_desc}.\n")
    o.append(
        f"**Load:** `benches/compare/ZipfProducer.java`, one Java producer (acks=all, "
        f"idempotent, client defaults otherwise), {args.record_size} B records, partition "
        f"drawn per record with Zipf weight 1/r^s, s = {args.s}, over 12 partitions (RF 3, "
        "min.insync.replicas=2). Zipf shares by rank: "
        + ", ".join(f"{w * 100:.1f}%" for w in zipf_weights(args.s)) + ". "
        "`layout`: ranks 1–3 on three partitions led by one broker, its fourth partition the "
        "coldest rank, ranks 4–11 alternately on the other two brokers' partitions (4/4/4 "
        f"leaders, one broker with about two thirds of the records); `random`: a permutation "
        f"of the partitions from seed {args.seed}. Saturated: records acknowledged per second "
        "over the window after a warm-up. Fixed rate: latency from each record's due time to "
        "its acknowledgement, for the records due in the window (layout mapping).\n")
    warm_q = 5 if args.quick else 20
    o.append(f"Warm-up before each saturated window: {args.balance_warmup} s in every setup (the "
             f"load balancer's passes run every {CHECK_INTERVAL_S} s and read decaying rates with "
             f"a 1-minute time constant); before the fixed-rate window {warm_q} s. Windows: "
             f"{10 if args.quick else 25} s.\n")
    o.append("## Results\n")
    o.append("| Setup | Skewed (layout) saturated | Skewed (random map) saturated | Uniform "
             "saturated | Fixed-rate p99 (p50) | Leadership moves (uniform / layout / random / "
             "fixed) | Broker cores during skewed (layout) window, node 1/2/3 | Leader share of "
             "records at the end (layout) |")
    o.append("|---|---:|---:|---:|---:|---|---|---|")

    def sat(r):
        if not r or r.get("error"):
            return "failed" if r else "—"
        return f"{r['records_per_s']:,.0f} rec/s ({r['mib_per_s']:.1f} MiB/s)"

    for name in args.setups:
        res = by.get(name)
        if not res:
            continue
        ph = res["phases"]
        fr = ph.get("fixed-rate")
        frs = (f"{fr['p99_ms']:.1f} ms ({fr['p50_ms']:.1f} ms)"
               if fr and not fr.get("error") else "failed" if fr else "—")
        moves = " / ".join(str(len(ph[p].get("moved", {}))) if p in ph else "—"
                           for p in ("uniform", "skew-layout", "skew-random", "fixed-rate"))
        lay = ph.get("skew-layout") or {}
        cs = cores(lay) if lay else None
        o.append(f"| {res['label']} | {sat(lay)} | {sat(ph.get('skew-random'))} | "
                 f"{sat(ph.get('uniform'))} | {frs} | {moves} | "
                 f"{' / '.join(f'{x:.2f}' for x in cs) if cs else '?'} | "
                 f"{fmt_shares(lay.get('shares_after', {})) if lay else '?'} |")
    o.append("")

    def ratio(a, b, phase):
        ra = (by.get(a) or {}).get("phases", {}).get(phase) or {}
        rb = (by.get(b) or {}).get("phases", {}).get(phase) or {}
        if ra.get("records_per_s") and rb.get("records_per_s"):
            return ra["records_per_s"] / rb["records_per_s"]
        return None

    lines = []
    for phase, label, goal in (("skew-layout", "skewed (layout)", "goal ≥ 1.3×"),
                               ("skew-random", "skewed (random map)", "goal ≥ 1.3×"),
                               ("uniform", "uniform", "goal ≈ 1.0×")):
        rr = ratio("load", "count", phase)
        if rr is not None:
            lines.append(f"- load / count, {label}: **{rr:.2f}×** ({goal})")
        rk = ratio("load", "kafka", phase)
        if rk is not None:
            lines.append(f"- load / Apache Kafka, {label}: {rk:.2f}×")
    if lines:
        o.append("\n".join(lines) + "\n")
    rate = next((r["phases"]["fixed-rate"]["rate"] for r in results
                 if "fixed-rate" in r.get("phases", {})), None)
    if rate:
        under = []
        for r in results:
            sat_r = (r["phases"].get("skew-layout") or {}).get("records_per_s")
            if sat_r:
                under.append(f"{LABELS[r['setup']]}: {'under' if rate < sat_r else '**not under**'}"
                             f" its saturation ({rate / sat_r * 100:.0f}%)")
        o.append(f"Fixed rate: {rate:,.0f} records/s "
                 f"({'`--rate`' if args.rate else 'half the skewed (layout) saturated rate of the first setup run, ' + LABELS[args.setups[0]]}"
                 f"); " + "; ".join(under) + ".\n")
    o.append("## Leadership moves\n")
    for r in results:
        o.append(f"**{LABELS[r['setup']]}**\n")
        for phase, pr in r.get("phases", {}).items():
            mv = pr.get("moved", {})
            hist = pr.get("history", [])
            line = f"- {phase}: {len(mv)} leaders changed"
            if pr.get("under_replicated_after"):
                line += (f" (under-replicated right after the run: partitions "
                         f"{pr['under_replicated_after']})")
            if mv:
                line += " (" + ", ".join(f"p{p}: {a}→{b}" for p, (a, b) in sorted(
                    mv.items(), key=lambda kv: int(kv[0]))) + ")"
            if "shares_before" in pr:
                line += (f"; leader share of records before {fmt_shares(pr['shares_before'])}, "
                         f"after {fmt_shares(pr['shares_after'])}")
            o.append(line)
            for h in sorted(hist, key=lambda h: h.get("time_ms", 0)):
                o.append(f"  - {h.get('topic')}-{h.get('partition')}: {h.get('description')}")
        if r.get("move_reasons"):
            o.append("- the active controller's log, every move with its reason:")
            for line in r["move_reasons"]:
                o.append(f"  - `{line[:400]}`")
        if r.get("error"):
            o.append(f"- error: {r['error']}")
        for p in r.get("stop_problems", []):
            o.append(f"- at stop: {p}")
        o.append("")
    o.append("## Every window\n")
    o.append("| Setup | Phase | Records/s | MiB/s | p50 / p99 / p99.9 ms | Broker cores per node "
             "| Throttled s per cgroup (broker1/2/3/generator) | Wall s |")
    o.append("|---|---|---:|---:|---|---|---|---:|")
    for r in results:
        for phase, pr in r.get("phases", {}).items():
            if pr.get("error"):
                o.append(f"| {r['setup']} | {phase} | failed: {pr['error'][:200]} | | | | | |")
                continue
            cs = cores(pr)
            thr = pr.get("throttled_s", {})
            o.append(f"| {r['setup']} | {phase} | {pr['records_per_s']:,.0f} | "
                     f"{pr['mib_per_s']:.1f} | {pr['p50_ms']:.1f} / {pr['p99_ms']:.1f} / "
                     f"{pr['p999_ms']:.1f} | "
                     f"{' / '.join(f'{x:.2f}' for x in cs) if cs else '?'} | "
                     + " / ".join(f"{thr.get(n):.1f}" if thr.get(n) is not None else "?"
                                  for n in ("broker1", "broker2", "broker3", "generator"))
                     + f" | {pr['wall_s']:.0f} |")
    o.append("")
    o.append("Broker cores: CPU seconds (utime+stime) of each broker process over the whole "
             "tool run (warm-up included) divided by its wall time. Throttled: the cgroup's "
             "`throttled_time` grown over the run (time its tasks waited for the next period "
             "because the quota was used up). Percentiles of the saturated runs are 0: only "
             "the fixed-rate run records latencies.\n")
    o.append("## Machine\n\n| | |\n|---|---|")
    for k, v in c.machine_description(args, binary):
        o.append(f"| {k} | {v.replace('|', '/')} |")
    o.append(f"| Load average at the end | {' '.join(f'{x:.2f}' for x in os.getloadavg())} |")
    o.append("")
    o.append("Broker keys added for every setup: " + ", ".join(f"`{p}`" for p in DATA_PROPS)
             + " (data dirs in tmpfs, `/dev/shm`: on one shared disk the three brokers would "
             "share the page cache's writeback, a fourth resource; this benchmark is about CPU)."
             f" Producer: `batch.size={BATCH_SIZE}`, `max.request.size={MAX_REQUEST_SIZE}`, "
             "`linger.ms=5` (ZipfProducer.java says "
             "why).\n")
    o.append("## Broker config (node 1, load setup when it ran)\n")
    cfg = (by.get("load") or by.get("count") or {}).get("config", "")
    o.append("```properties\n" + cfg.rstrip() + "\n```\n")
    return "\n".join(o)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="short warm-ups and windows")
    # Apache Kafka first: the fixed rate is half the first setup's skewed saturated rate, and
    # Kafka's is the lowest, so the rate is under every setup's saturation.
    p.add_argument("--setups", default="kafka,count,load")
    p.add_argument("--s", type=float, default=1.1, help="Zipf exponent (default 1.1)")
    p.add_argument("--record-size", type=int, default=1024)
    p.add_argument("--seed", type=int, default=33)
    p.add_argument("--rate", type=float, default=None,
                   help="fixed rate, records/s (default half the first setup's skewed rate)")
    p.add_argument("--broker-quota-us", type=int, default=25_000,
                   help="each broker's cfs quota per 100 ms period (default 25000: 0.25 CPU)")
    p.add_argument("--generator-quota-us", type=int, default=120_000,
                   help="the load generator's quota (default 120000: 1.2 CPU)")
    p.add_argument("--balance-warmup", type=float, default=None,
                   help="warm-up of every setup's saturated phases, s (default 90; quick 60)")
    p.add_argument("--kafkaiq-bin", default=os.environ.get("KAFKAIQ_BIN"))
    p.add_argument("--out")
    p.add_argument("--workdir")
    p.add_argument("--keep", action="store_true")
    p.add_argument("--note", default="")
    p.add_argument("--tool-timeout", type=float, default=180.0)
    args = p.parse_args()
    args.setups = [s.strip() for s in args.setups.split(",") if s.strip()]
    if any(s not in SETUPS for s in args.setups):
        p.error("--setups takes count, load, kafka")
    if args.balance_warmup is None:
        args.balance_warmup = 60 if args.quick else 90
    args.compare_bin = None
    # Absolute: each node runs in its own work dir.
    binary = Path(args.kafkaiq_bin or ROOT / "target" / "release" / "kafkaiq").resolve()
    if not os.access(binary, os.X_OK):
        log(f"no kafkaiq binary at {binary} (cargo build --release)")
        return 1
    libs = Path(subprocess.run([str(ROOT / "integration" / "kafka-libs.sh")], check=True,
                               capture_output=True, text=True).stdout.strip())
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="kafkaiq-balancer-bench-",
                                                      dir="/dev/shm"))
    workdir.mkdir(parents=True, exist_ok=True)
    groups = CpuGroups("kafkaiq-bench", {"broker1": args.broker_quota_us,
                                         "broker2": args.broker_quota_us,
                                         "broker3": args.broker_quota_us,
                                         "generator": args.generator_quota_us})
    desc = groups.describe()
    log(f"==> {desc}; work dir {workdir}")
    ports = cl.Ports(None)
    results: list[dict] = []
    rate_for: dict = {}
    t0 = time.monotonic()
    try:
        for name in args.setups:
            log(f"==> {LABELS[name]}")
            results.append(run_setup(name, args, libs, binary, workdir, ports, groups,
                                     rate_for))
            time.sleep(2)
    finally:
        groups.remove()
        log(f"==> cgroups removed; {time.monotonic() - t0:.0f} s in all")
        text = report(results, args, desc, binary)
        if args.note:
            text = text.replace("\n## Results", f"\n**Conditions:** {args.note}\n\n## Results", 1)
        date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
        out = Path(args.out) if args.out else (
            workdir / "balancer-report.md" if args.quick
            else ROOT / "benches" / "results" / f"balancer-{date}.md")
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text)
        out.with_suffix(".json").write_text(json.dumps(results, indent=1, default=str) + "\n")
        log(f"==> report written to {out}")
        print(text)
    if not args.keep and not args.workdir:
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
