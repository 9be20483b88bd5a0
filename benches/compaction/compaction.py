#!/usr/bin/env python3
"""Log cleaner benchmark: KafkaIQ beside Apache Kafka 4.1.1 on one compacted partition.

    benches/compaction/compaction.py --smoke      # tiny data set, < 2 min
    benches/compaction/compaction.py              # ~2M records of 100 B over 200k keys

For each broker in turn (single node on 127.0.0.1, the same server.properties keys):
1. creates topic `cleaned` (1 partition, cleanup.policy=compact, segment.bytes=1 MiB) with
   min.cleanable.dirty.ratio=1.0, which no log reaches (a log is cleanable when its dirty ratio is
   strictly above the setting), so nothing is cleaned while the data set is produced;
2. produces the data set with kcat (key:value lines, `-K:`), every key written `rounds` times;
3. records the broker's RSS, sets min.cleanable.dirty.ratio=0.5 on the topic (IncrementalAlterConfigs
   through kafka-configs), and waits until the cleaner's pass lines account for the whole log;
4. reads the topic back with kcat and checks one record per key holding the last value written.

Throughput is MB read per second of cleaning from the broker's own pass lines (KafkaIQ: "log cleaner
pass" mb_read/seconds; Kafka: "MB of log processed in ... seconds" from LogCleaner's INFO logger),
summed over passes. Both count the log bytes read by the copy, each once; the read that builds the
offset map is reported apart by both (KafkaIQ: indexed_mb, Kafka: "Indexed ... MB"). Wall time runs from the alter being acknowledged to the last pass line.
Memory is VmHWM (peak RSS) after cleaning minus VmRSS just before the alter; for the JVM this is
resident growth, not heap use: Kafka allocates its dedupe buffer on the heap when the cleaner
thread starts, so that buffer is already resident before the cleaning and not in the growth.

With --produce, instead: the same load, then kafka-producer-perf-test (100 B records, acks=1, no
throttle) on a second, plain (delete) topic twice: once with the cleaner idle, once with the alter
sent 3 s into the run, so the whole cleaning of `cleaned` happens while the producer writes (a
compacted topic would need keys, which perf-test does not send), and once more idle after it.
The idle runs send a describe-configs at the same moment, so all runs carry the same tool load.
Reported: records/s of each run, the cleaning run over the mean of the idle ones, and whether the
pass line appeared before the producer finished.
Standard library only.
"""

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "compare"))
import compare  # noqa: E402  (Broker classes, ports, /proc readers)

ROOT = compare.ROOT
TOPIC = "cleaned"
DEDUPE = 128 * 1024 * 1024
BROKER_PROPS = [
    "num.partitions=1",
    "auto.create.topics.enable=false",
    f"log.cleaner.dedupe.buffer.size={DEDUPE}",
    "log.cleaner.backoff.ms=200",
    "log.cleaner.threads=1",
    "log.cleaner.enable=true",
]
LOG4J = """status = error
appender.out.type = Console
appender.out.name = OUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = warn
rootLogger.appenderRef.out.ref = OUT
logger.cleaner.name = org.apache.kafka.storage.internals.log
logger.cleaner.level = info
logger.cleaner2.name = kafka.log.LogCleaner
logger.cleaner2.level = info
logger.server.name = kafka.server.KafkaRaftServer
logger.server.level = info
"""

KIQ_PASS = re.compile(r"log cleaner pass.*?mb_read=([\d.e+-]+).*?seconds=([\d.e+-]+)"
                      r"(?:.*?records_before=(\d+))?(?:.*?records_after=(\d+))?")
# Kafka formats with a thousands separator ("%,.1f").
KAFKA_PASS = re.compile(r"([\d,.]+) MB of log processed in ([\d,.]+) seconds")
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def libs() -> Path:
    out = subprocess.run([str(ROOT / "integration" / "kafka-libs.sh")], capture_output=True,
                         text=True, check=True)
    return Path(out.stdout.strip().splitlines()[-1])


def tool(lib, main, args, timeout=120):
    cmd = ["java", "-Xmx256m", "-cp", f"{lib}/*", main, *args]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if r.returncode != 0:
        raise RuntimeError(f"{main} {' '.join(args)}: {r.stderr[-800:]}")
    return r.stdout


def passes(broker) -> list[tuple[float, float]]:
    text = ANSI.sub("", broker.log.read_text(errors="replace"))
    pat = KIQ_PASS if broker.key == "kafkaiq" else KAFKA_PASS
    num = lambda t: float(t.replace(",", ""))
    return [(num(m.group(1)), num(m.group(2))) for m in pat.finditer(text)]


def make_data(path: Path, records: int, keys: int, value_bytes: int) -> dict[str, str]:
    last = {}
    pad = "x" * value_bytes
    with open(path, "w") as f:
        for i in range(records):
            k = f"key-{i % keys:08d}"
            v = f"{i:012d}-" + pad[: value_bytes - 13]
            f.write(f"{k}:{v}\n")
            last[k] = v
    return last


def run_broker(broker, lib, data: Path, last: dict, timeout_s: float) -> dict:
    out = {"broker": broker.label}
    broker.start()
    pid = broker.proc.pid
    try:
        bs = f"127.0.0.1:{broker.port}"
        tool(lib, "org.apache.kafka.tools.TopicCommand",
             ["--bootstrap-server", bs, "--create", "--topic", TOPIC, "--partitions", "1",
              "--replication-factor", "1", "--config", "cleanup.policy=compact",
              "--config", "segment.bytes=1048576", "--config", "min.cleanable.dirty.ratio=1.0"])
        t = time.monotonic()
        with open(data) as f:
            subprocess.run(["kcat", "-P", "-b", bs, "-t", TOPIC, "-K:", "-z", "none",
                            "-X", "linger.ms=5", "-X", "batch.num.messages=2000"],
                           stdin=f, check=True, timeout=timeout_s)
        out["produce_s"] = time.monotonic() - t
        time.sleep(2)
        before = passes(broker)
        out["log_before_mib"] = dir_mib(broker)
        rss0 = compare.proc_status_kib(pid, "VmRSS")
        hwm0 = compare.proc_status_kib(pid, "VmHWM")
        out["rss_before_mib"] = rss0 / 1024
        t0 = time.monotonic()
        tool(lib, "kafka.admin.ConfigCommand",
             ["--bootstrap-server", bs, "--alter", "--entity-type", "topics", "--entity-name",
              TOPIC, "--add-config", "min.cleanable.dirty.ratio=0.5"])
        t_alter = time.monotonic()
        # Done when a pass appeared and no new one for 5 s (backoff is 200 ms).
        seen, last_change = len(before), None
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            n = len(passes(broker))
            if n != seen:
                seen, last_change = n, time.monotonic()
            if last_change and time.monotonic() - last_change > 5:
                break
            time.sleep(0.2)
        ps = passes(broker)[len(before):]
        out["passes"] = len(ps)
        out["mb_read"] = sum(p[0] for p in ps)
        out["clean_s"] = sum(p[1] for p in ps)
        out["mb_per_s"] = out["mb_read"] / out["clean_s"] if out["clean_s"] else 0
        out["log_mib_per_s"] = out["log_before_mib"] / out["clean_s"] if out["clean_s"] else 0
        out["wall_s"] = (last_change - t_alter) if last_change else None
        out["alter_s"] = t_alter - t0
        hwm1 = compare.proc_status_kib(pid, "VmHWM")
        out["peak_delta_mib"] = (hwm1 - rss0) / 1024
        out["hwm_before_mib"] = hwm0 / 1024
        out["hwm_after_mib"] = hwm1 / 1024
        # Verify: one record per key, the last value written.
        r = subprocess.run(["kcat", "-C", "-b", bs, "-t", TOPIC, "-e", "-q", "-f", "%k:%s\n"],
                           capture_output=True, text=True, timeout=timeout_s)
        got = {}
        records = 0
        for line in r.stdout.splitlines():
            k, _, v = line.partition(":")
            got[k] = v
            records += 1
        out["records_after"] = records
        wrong = [k for k, v in last.items() if got.get(k) != v]
        out["keys_ok"] = len(last) - len(wrong)
        out["keys"] = len(last)
        out["wrong_sample"] = wrong[:3]
        out["log_dir_mib"] = dir_mib(broker)
    finally:
        broker.stop()
        out["problems"] = broker.problems
    return out


PERF_FINAL = re.compile(r"(\d+) records sent, ([\d.]+) records/sec \(([\d.]+) MB/sec\)")


def perf_run(broker, lib, records: int, side_tool: list, name: str) -> dict:
    """One kafka-producer-perf-test run on topic `plain`; `side_tool` (a ConfigCommand argument
    list) is run 3 s into it. Returns records/s and when the run ended."""
    bs = f"127.0.0.1:{broker.port}"
    log_path = broker.workdir / f"perf-{name}.log"
    cmd = ["java", "-Xmx256m", "-cp", f"{lib}/*", "org.apache.kafka.tools.ProducerPerformance",
           "--topic", "plain", "--num-records", str(records), "--record-size", "100",
           "--throughput", "-1", "--producer-props", f"bootstrap.servers={bs}", "acks=1"]
    with open(log_path, "w") as out:
        p = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
        time.sleep(3)
        t_side = time.monotonic()
        seen = len(passes(broker))
        tool(lib, "kafka.admin.ConfigCommand", ["--bootstrap-server", bs, *side_tool])
        pass_at = None
        deadline = time.monotonic() + 600
        while p.poll() is None and time.monotonic() < deadline:
            if pass_at is None and len(passes(broker)) != seen:
                pass_at = time.monotonic()
            time.sleep(0.2)
        p.wait(timeout=60)
    ended = time.monotonic()
    finals = PERF_FINAL.findall(log_path.read_text(errors="replace"))
    if p.returncode != 0 or not finals or int(finals[-1][0]) != records:
        raise RuntimeError(f"perf-test {name}: exit {p.returncode}: {log_path.read_text()[-800:]}")
    return {"records_per_s": float(finals[-1][1]), "mib_per_s": float(finals[-1][2]),
            "side_at": t_side, "ended": ended, "pass_at": pass_at}


def run_produce(broker, lib, data: Path, records: int, timeout_s: float) -> dict:
    out = {"broker": broker.label}
    broker.start()
    try:
        bs = f"127.0.0.1:{broker.port}"
        for topic, configs in [(TOPIC, ["cleanup.policy=compact", "segment.bytes=1048576",
                                        "min.cleanable.dirty.ratio=1.0"]),
                               ("plain", ["cleanup.policy=delete"])]:
            args = ["--bootstrap-server", bs, "--create", "--topic", topic, "--partitions", "1",
                    "--replication-factor", "1"]
            for c in configs:
                args += ["--config", c]
            tool(lib, "org.apache.kafka.tools.TopicCommand", args)
        with open(data) as f:
            subprocess.run(["kcat", "-P", "-b", bs, "-t", TOPIC, "-K:", "-z", "none",
                            "-X", "linger.ms=5", "-X", "batch.num.messages=2000"],
                           stdin=f, check=True, timeout=timeout_s)
        time.sleep(2)
        entity = ["--entity-type", "topics", "--entity-name", TOPIC]
        describe = ["--describe", *entity]
        idle = perf_run(broker, lib, records, describe, "idle-1")
        before = len(passes(broker))
        cleaning = perf_run(broker, lib, records,
                            ["--alter", *entity, "--add-config", "min.cleanable.dirty.ratio=0.5"],
                            "cleaning")
        # A second idle run after the cleaning (the log is clean, nothing left to do): the idle
        # figure is the mean of the runs before and after, so that neither order wins.
        idle2 = perf_run(broker, lib, records, describe, "idle-2")
        # When did the pass line appear? Polled until it does.
        deadline = time.monotonic() + timeout_s
        while len(passes(broker)) == before and time.monotonic() < deadline:
            time.sleep(0.2)
        ps = passes(broker)[before:]
        out["idle_records_per_s"] = (idle["records_per_s"] + idle2["records_per_s"]) / 2
        out["idle_runs"] = [idle["records_per_s"], idle2["records_per_s"]]
        out["cleaning_records_per_s"] = cleaning["records_per_s"]
        out["ratio"] = cleaning["records_per_s"] / out["idle_records_per_s"]
        out["clean_s"] = sum(p[1] for p in ps)
        out["passes"] = len(ps)
        out["run_s_after_alter"] = cleaning["ended"] - cleaning["side_at"]
        # The cleaning ended inside the run if its pass line appeared while the producer ran.
        out["cleaned_inside_run"] = cleaning["pass_at"] is not None
    finally:
        broker.stop()
        out["problems"] = broker.problems
    return out


def dir_mib(broker) -> float:
    root = broker.workdir
    total = 0
    for p in root.rglob(f"{TOPIC}-0/*.log"):
        total += p.stat().st_size
    return total / (1024 * 1024)


class Kafka(compare.ApacheKafka):
    def command(self):
        cmd, env = super().command()
        cmd = cmd[:4] + BROKER_PROPS
        env["KAFKA_HEAP"] = (f"{compare.KAFKA_HEAP} "
                             f"-Dlog4j2.configurationFile={self.workdir / 'log4j2.properties'}")
        (self.workdir / "log4j2.properties").write_text(LOG4J)
        return cmd, env


class KIQ(compare.KafkaIQ):
    def command(self):
        listener = f"PLAINTEXT://127.0.0.1:{self.port}"
        props = ["node.id=1", f"listeners={listener}", f"advertised.listeners={listener}",
                 f"log.dirs={self.workdir / 'kafkaiq' / 'data'}", *compare.SINGLE_NODE_PROPS,
                 *BROKER_PROPS]
        self.config_text = "\n".join(props) + "\n"
        config = self.workdir / "server.properties"
        config.write_text(self.config_text)
        env = dict(os.environ, RUST_LOG="warn,kafkaiq::node::cleaner=info")
        return [str(self.binary), "--config", str(config)], env


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--binary", default=str(ROOT / "target" / "release" / "kafkaiq"))
    ap.add_argument("--only", choices=["kafkaiq", "kafka"])
    ap.add_argument("--produce", action="store_true",
                    help="produce throughput on a plain topic while the cleaner cleans, and not")
    a = ap.parse_args()
    records, keys, vbytes = (100_000, 10_000, 100) if a.smoke else (2_000_000, 200_000, 100)
    lib = libs()
    work = Path(tempfile.mkdtemp(prefix="compaction-bench."))
    data = work / "data.txt"
    log(f"data set: {records} records, {keys} keys, {vbytes} B values -> {data}")
    last = make_data(data, records, keys, vbytes)
    results = []
    for key in ["kafkaiq", "kafka"]:
        if a.only and a.only != key:
            continue
        wd = work / key
        wd.mkdir()
        b = KIQ(wd, Path(a.binary)) if key == "kafkaiq" else Kafka(wd)
        log(f"{b.label}: start")
        timeout = 600 if not a.smoke else 120
        if a.produce:
            r = run_produce(b, lib, data, 300_000 if a.smoke else 4_000_000, timeout)
        else:
            r = run_broker(b, lib, data, last, timeout)
        log(f"{b.label}: {r}")
        results.append(r)
    print(results)
    if not os.environ.get("KEEP"):
        shutil.rmtree(work, ignore_errors=True)
    else:
        log(f"kept {work}")


if __name__ == "__main__":
    main()
