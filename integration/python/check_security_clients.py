"""kafka-python over TLS (with a client certificate) and SASL (PLAIN, SCRAM-SHA-256/512).

Usage: check_security_clients.py CASE... with each CASE as in
integration/programs/security-clients-go/main.go: NAME,BOOTSTRAP,PROTOCOL,MECHANISM,USER,
PASSWORD,BADPASSWORD, and the PEM files in SSL_CA, SSL_CERT and SSL_KEY. For each case: five
records with a payload of its own go to the topic python-NAME (acks=all), a consumer reads
partition 0 from the start and must find exactly them, and the case's wrong credentials (a
wrong password; on SSL no client certificate) must be refused. One process runs every case;
exits 1 if any fails.
"""
import logging
import os
import sys
import time
import uuid

from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient
from kafka.errors import KafkaError

RECORDS = 5


def client_config(protocol, mechanism, user, password, with_cert):
    config = {"security_protocol": protocol, "request_timeout_ms": 20000}
    if protocol.endswith("SSL"):
        config["ssl_cafile"] = os.environ["SSL_CA"]
        config["ssl_check_hostname"] = True
        if with_cert:
            config["ssl_certfile"] = os.environ["SSL_CERT"]
            config["ssl_keyfile"] = os.environ["SSL_KEY"]
    if protocol.startswith("SASL_"):
        config.update(sasl_mechanism=mechanism, sasl_plain_username=user, sasl_plain_password=password)
    return config


def round_trip(name, bootstrap, config):
    topic = "python-" + name
    payload = f"{topic}-{uuid.uuid4()}"
    sent = [f"{payload}-{i}" for i in range(RECORDS)]
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", **config)
    try:
        for value in sent:
            producer.send(topic, value.encode(), partition=0).get(timeout=30)
    finally:
        producer.close()
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, **config)
    got = []
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        deadline = time.monotonic() + 30
        while len(got) < len(sent) and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                got += [r.value.decode() for r in records if r.value.decode().startswith(payload)]
    finally:
        consumer.close()
    if got != sent:
        raise AssertionError(f"read back {got}, sent {sent}")


class Captured(logging.Handler):
    """Keeps the client's log lines: why a bootstrap connection failed is only logged."""

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.lines = []

    def emit(self, record):
        self.lines.append(record.getMessage())


def refusal(bootstrap, protocol, config):
    """One bootstrap with the wrong credentials: the log line saying why it failed for them, or
    None if it failed otherwise (a connection closed before the broker's answer was read)."""
    captured = Captured()
    logger = logging.getLogger("kafka")
    logger.addHandler(captured)
    logger.setLevel(logging.INFO)
    try:
        admin = KafkaAdminClient(bootstrap_servers=bootstrap, bootstrap_timeout_ms=4000, **config)
    except KafkaError:
        # A wrong password is answered SASL_AUTHENTICATION_FAILED; the mTLS listener ends the
        # handshake of a client without a certificate (an alert, or a closed connection).
        if protocol.startswith("SASL_"):
            signs = ["SaslAuthenticationFailedError", "Authentication failed"]
        else:
            signs = ["certificate", "SSL", "TLS", "EOF", "Connection reset"]
        # The lines that say why a connection failed, not those that merely name the transport.
        failures = [line for line in captured.lines if "Abort" in line or "failed" in line.lower()]
        why = [line for line in failures if any(s in line for s in signs)]
        return (why[0] if why else None), captured.lines
    finally:
        logger.removeHandler(captured)
    admin.close()
    raise AssertionError("the wrong credentials were accepted")


def refused(bootstrap, protocol, config):
    """The wrong credentials must fail to bootstrap, for an authentication or TLS error. On a
    busy machine a bootstrap may end before the broker's answer is read: up to three tries."""
    for _ in range(3):
        why, lines = refusal(bootstrap, protocol, config)
        if why:
            return why
    raise AssertionError(f"refused, but not for its credentials: {lines[-8:]}")


def main():
    failed = 0
    for case in sys.argv[1:]:
        name, bootstrap, protocol, mechanism, user, password, bad = case.split(",")
        try:
            round_trip(name, bootstrap, client_config(protocol, mechanism, user, password, True))
            print(f"kafka-python {name}: {RECORDS} records produced and read back")
            why = refused(bootstrap, protocol, client_config(protocol, mechanism, user, bad, False))
            print(f"kafka-python {name}: wrong credentials refused ({why})")
        except (AssertionError, KafkaError, OSError) as e:
            failed += 1
            print(f"kafka-python {name}: FAIL: {type(e).__name__}: {e}")
    if failed or len(sys.argv) < 2:
        print(f"kafka-python: {failed} of {len(sys.argv) - 1} cases failed")
        sys.exit(1)


if __name__ == "__main__":
    main()
