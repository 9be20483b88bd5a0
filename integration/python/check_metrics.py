"""KafkaIQ's /metrics through prometheus_client's strict OpenMetrics parser, and its JSON API.

Usage: check_metrics.py http://HOST:PORT   (scrapes /metrics and reads /api/...)
       check_metrics.py --file SCRAPE.txt  (parses a saved scrape)

Fails (exit 1) if the text does not parse, or if a metric family Kafka dashboards use is
missing or has the wrong type.
"""
import json
import sys
import urllib.request

from prometheus_client.openmetrics.parser import text_string_to_metric_families

EXPECTED = {
    "kafka_server_replicamanager_leadercount": "gauge",
    "kafka_server_replicamanager_partitioncount": "gauge",
    "kafka_server_replicamanager_underreplicatedpartitions": "gauge",
    "kafka_server_replicamanager_underminisrpartitioncount": "gauge",
    "kafka_server_replicamanager_offlinereplicacount": "gauge",
    "kafka_server_replicamanager_isrshrinks": "counter",
    "kafka_server_replicamanager_isrexpands": "counter",
    "kafka_controller_kafkacontroller_activecontrollercount": "gauge",
    "kafka_controller_kafkacontroller_offlinepartitionscount": "gauge",
    "kafka_controller_kafkacontroller_preferredreplicaimbalancecount": "gauge",
    "kafka_controller_kafkacontroller_globalpartitioncount": "gauge",
    "kafka_controller_controllerstats_leaderelectionrateandtimems": "histogram",
    "kafka_controller_controllerstats_uncleanleaderelections": "counter",
    "kafka_server_brokertopicmetrics_bytesin": "counter",
    "kafka_server_brokertopicmetrics_bytesout": "counter",
    "kafka_server_brokertopicmetrics_messagesin": "counter",
    "kafka_server_brokertopicmetrics_replicationbytesout": "counter",
    "kafkaiq_fetch_consumer_bytes": "counter",
    "kafka_network_requestmetrics_totaltimems": "histogram",
    "kafka_cluster_partition_underreplicated": "gauge",
    "kafka_cluster_partition_insyncreplicascount": "gauge",
    "kafka_cluster_partition_laststableoffsetlag": "gauge",
    "kafkaiq_partition_open_transactions": "gauge",
    "kafka_server_transaction_coordinator_metrics_partition_load_time_max": "gauge",
    "kafka_server_transaction_coordinator_metrics_partition_load_time_avg": "gauge",
    "kafkaiq_transaction_coordinator_transactional_ids": "gauge",
    "kafka_server_group_coordinator_metrics_group_count": "gauge",
    "kafka_server_group_coordinator_metrics_consumer_group_count": "gauge",
    "kafka_server_group_coordinator_metrics_consumer_group_rebalance": "counter",
}


# Families with one sample per hosted partition: none on a broker without partitions.
PER_PARTITION = ("kafka_cluster_partition_", "kafkaiq_partition_")


def get(url):
    with urllib.request.urlopen(url, timeout=10) as r:
        return r.status, r.headers.get("Content-Type", ""), r.read().decode()


def check_text(text, fresh=False):
    families = {f.name: f for f in text_string_to_metric_families(text)}
    hosted = families["kafka_server_replicamanager_partitioncount"].samples[0].value
    problems = []
    for name, kind in EXPECTED.items():
        f = families.get(name)
        if f is None and name.startswith(PER_PARTITION) and hosted == 0:
            continue  # per-partition families have no samples on a broker without partitions
        if f is None and name == "kafka_network_requestmetrics_totaltimems" and fresh:
            continue  # per-API samples appear with the first Kafka request
        if f is None:
            problems.append(f"missing {name}")
        elif f.type != kind:
            problems.append(f"{name}: type {f.type}, expected {kind}")
    samples = sum(len(f.samples) for f in families.values())
    return problems, len(families), samples


def main():
    if sys.argv[1:2] == ["--file"]:
        with open(sys.argv[2]) as fh:
            text = fh.read()
    else:
        base = sys.argv[1].rstrip("/")
        status, ctype, text = get(base + "/metrics")
        assert status == 200, status
        assert ctype.startswith("application/openmetrics-text"), ctype
        for path in ("/api/brokers", "/api/partitions", "/api/quorum", "/api/groups"):
            status, ctype, body = get(base + path)
            assert status == 200 and ctype == "application/json", (path, status, ctype)
            json.loads(body)
        status, ctype, page = get(base + "/")
        assert status == 200 and ctype.startswith("text/html"), (status, ctype)
    # A saved scrape (the cargo test's) comes after traffic; a live broker may have none yet.
    problems, families, samples = check_text(text, fresh=sys.argv[1:2] != ["--file"])
    if problems:
        print("\n".join(problems))
        sys.exit(1)
    print(f"parsed {families} metric families, {samples} samples")


if __name__ == "__main__":
    main()
