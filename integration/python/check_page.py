"""The leadership page in a real browser, against a three-node KafkaIQ cluster.

Starts the nodes of config/cluster/ (every node broker and controller), creates a topic of
three partitions at replication factor 3, opens `/` of node 1 in headless Chromium (driven by
Playwright) and reads what the page shows, table by table, as a user would:

1. all three brokers alive, each leading the partition it is preferred for, and three voters
   in the controller quorum, one of them its leader;
2. after kill -9 of node 3 (node 2 if 3 is the active controller, whose loss the history calls
   a controller failover): the node fenced, its partition led by another replica with the
   cause "broker fenced" as its last change, and that change in the recent-changes table;
3. after it restarts: alive, back in every ISR, every partition led by its preferred replica
   again, the rebalance named in the history.

Screenshots of states 2 and 3 are written to the folder given by --screenshots. Each wait
has a deadline; a page that never shows the state fails with what it showed last.

Usage: check_page.py --bin target/release/kafkaiq --root REPO --work DIR --screenshots DIR
"""

import argparse
import os
import signal
import subprocess
import sys
import time
import urllib.request

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from playwright.sync_api import sync_playwright

TOPIC = "orders"
NODES = (1, 2, 3)
BOOTSTRAP = "127.0.0.1:9092,127.0.0.1:9093,127.0.0.1:9094"
OVERRIDES = [
    "auto.leader.rebalance.enable=true",
    "leader.imbalance.check.interval.seconds=2",
    "leader.imbalance.per.broker.percentage=0",
]


def http_port(node):
    return 9643 + node


class Cluster:
    def __init__(self, binary, root, work):
        self.binary = binary
        self.root = root
        self.work = work
        self.procs = {}
        os.makedirs(os.path.join(work, "conf"), exist_ok=True)

    def config(self, node):
        path = os.path.join(self.work, "conf", f"node-{node}.properties")
        if not os.path.exists(path):
            source = os.path.join(self.root, "config", "cluster", f"node-{node}.properties")
            with open(source) as f:
                lines = f.read().splitlines()
            data = os.path.join(self.work, f"node-{node}", "data")
            lines = [f"log.dirs={data}" if l.startswith("log.dirs=") else l for l in lines]
            with open(path, "w") as f:
                f.write("\n".join(lines) + "\n")
        return path

    def start(self, node):
        args = [self.binary, "--config", self.config(node)]
        for o in OVERRIDES + [f"http.listener=127.0.0.1:{http_port(node)}"]:
            args += ["--override", o]
        log = open(os.path.join(self.work, f"node-{node}.log"), "ab")
        self.procs[node] = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)

    def kill(self, node):
        p = self.procs.pop(node)
        p.send_signal(signal.SIGKILL)
        p.wait()

    def stop_all(self):
        clean = True
        for p in self.procs.values():
            p.send_signal(signal.SIGTERM)
        for node, p in self.procs.items():
            try:
                if p.wait(timeout=30) != 0:
                    print(f"node {node} exited with {p.returncode}", file=sys.stderr)
                    clean = False
            except subprocess.TimeoutExpired:
                p.kill()
                print(f"node {node} did not stop within 30 s", file=sys.stderr)
                clean = False
        self.procs = {}
        return clean

    def logs_tail(self, lines=20):
        for node in NODES:
            path = os.path.join(self.work, f"node-{node}.log")
            if os.path.exists(path):
                with open(path, errors="replace") as f:
                    tail = f.read().splitlines()[-lines:]
                print(f"--- node {node}", *tail, sep="\n", file=sys.stderr)


def wait_until(what, deadline_s, probe):
    """Calls probe() until it returns something truthy; returns that or fails with the last
    thing probe reported (a probe returns (ok, shown))."""
    end = time.monotonic() + deadline_s
    shown = None
    while time.monotonic() < end:
        ok, shown = probe()
        if ok:
            return shown
        time.sleep(0.25)
    raise AssertionError(f"timed out after {deadline_s} s waiting for {what}; last seen: {shown}")


def http_ok(url):
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return r.status == 200
    except OSError:
        return False


def table(page, table_id):
    """The rows of one of the page's tables as dicts keyed by its header texts."""
    return page.evaluate(
        """id => {
            const t = document.getElementById(id);
            const heads = Array.from(t.tHead.rows[0].cells).map(c => c.textContent.trim());
            return Array.from(t.tBodies[0].rows).map(r =>
                Object.fromEntries(Array.from(r.cells).map((c, i) => [heads[i], c.textContent.trim()])));
        }""",
        table_id,
    )


def by(rows, key):
    return {r[key]: r for r in rows}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--root", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--screenshots", required=True)
    ap.add_argument("--chromium", default="/usr/bin/chromium")
    a = ap.parse_args()
    os.makedirs(a.screenshots, exist_ok=True)

    cluster = Cluster(a.bin, a.root, a.work)
    ok = False
    try:
        for n in NODES:
            cluster.start(n)
        wait_until("every node's HTTP listener", 60,
                   lambda: (all(http_ok(f"http://127.0.0.1:{http_port(n)}/api/brokers") for n in NODES), None))

        admin = AdminClient({"bootstrap.servers": BOOTSTRAP})
        def created():
            futures = admin.create_topics([NewTopic(TOPIC, num_partitions=3, replication_factor=3)],
                                          request_timeout=15)
            try:
                futures[TOPIC].result(timeout=20)
                return True, None
            except Exception as e:  # a retry after a time-out may find it created
                return "TOPIC_ALREADY_EXISTS" in str(e), str(e)
        wait_until(f"topic {TOPIC} created", 90, created)

        producer = Producer({"bootstrap.servers": BOOTSTRAP, "acks": "all", "enable.idempotence": True})
        for i in range(30):
            producer.produce(TOPIC, value=f"v{i}".encode(), partition=i % 3)
        assert producer.flush(30) == 0, "produced records not acknowledged"
        del producer, admin  # their connections would only log the kills below

        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=a.chromium, args=["--no-sandbox"])
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            console_errors = []
            page.on("console", lambda m: m.type == "error" and console_errors.append(m.text))
            page.on("pageerror", lambda e: console_errors.append(str(e)))
            page.goto(f"http://127.0.0.1:{http_port(1)}/")

            def brokers_and_partitions():
                brokers = by(table(page, "brokers"), "id")
                parts = by(table(page, "partitions"), "partition")
                return brokers, parts

            # 1. Formed and balanced: three alive brokers, each leading what it is preferred for.
            def balanced():
                brokers, parts = brokers_and_partitions()
                mine = {k: v for k, v in parts.items() if k.startswith(TOPIC + "-")}
                good = (
                    sorted(brokers) == ["1", "2", "3"]
                    and all(b["state"] == "alive" for b in brokers.values())
                    and len(mine) == 3
                    and all(p["leader"] == p["preferred"] and p["health"] == "healthy"
                            and len(p["ISR"].split(",")) == 3 for p in mine.values())
                )
                return good, (brokers, mine)
            brokers, parts = wait_until("a balanced cluster on the page", 60, balanced)
            quorum = table(page, "quorum")
            assert sorted(v["voter"] for v in quorum) == ["1", "2", "3"], quorum
            assert sum(v["role"].startswith("leader (epoch ") for v in quorum) == 1, quorum
            # The victim is neither the node serving the page nor the active controller, whose
            # loss the history names a controller failover instead.
            victim = next(n for n in ("3", "2") if brokers[n]["controller"] != "active")
            victim_partition = next(k for k, p in parts.items() if p["preferred"] == victim)

            # 2. The victim killed: fenced on the page, its partition led elsewhere, and why.
            cluster.kill(int(victim))
            def fenced():
                brokers, parts = brokers_and_partitions()
                p = parts.get(victim_partition, {})
                history = table(page, "history")
                why = [h for h in history if h["partition"] == victim_partition
                       and h["cause"] == "broker fenced" and f"broker {victim} fenced" in h["what"]]
                good = (
                    brokers.get(victim, {}).get("state") == "fenced"
                    and p.get("leader") not in (None, victim, "none")
                    and p.get("health") == "under replicated"
                    and victim not in p.get("ISR", "").split(",")
                    and p.get("last change", "").startswith("broker fenced")
                    and bool(why)
                )
                return good, (brokers.get(victim), p, why)
            shown, p, why = wait_until(f"node {victim} fenced and its partition led elsewhere", 60, fenced)
            print(f"fenced: broker {victim} {shown['state']}; {victim_partition} led by {p['leader']}, "
                  f"last change '{p['last change']}'; history: {why[0]['what']}")
            page.screenshot(path=os.path.join(a.screenshots, "fenced.png"), full_page=True)

            # 3. The victim back: in every ISR, and the preferred leaders lead again.
            cluster.start(int(victim))
            def rebalanced():
                good, (brokers, mine) = balanced()
                history = table(page, "history")
                back = [h for h in history if h["partition"] == victim_partition
                        and h["cause"] == "auto rebalance"]
                return good and bool(back), (brokers, mine, back[:1])
            _, mine, back = wait_until(f"node {victim} back and leading its partition", 90, rebalanced)
            print(f"balanced: {victim_partition} led by {mine[victim_partition]['leader']}; "
                  f"history: {back[0]['what']}")
            page.screenshot(path=os.path.join(a.screenshots, "balanced.png"), full_page=True)

            error = page.text_content("#error")
            assert error == "", f"the page reported: {error}"
            assert not console_errors, f"browser console errors: {console_errors}"
            browser.close()
        ok = True
    finally:
        clean = cluster.stop_all()
        if not ok or not clean:
            cluster.logs_tail()
    if not clean:
        sys.exit("a node did not stop cleanly")
    print("leadership page: ok")


if __name__ == "__main__":
    main()
