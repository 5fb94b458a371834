#!/usr/bin/env python3
"""The plain-consumer check of a broker's group coordinator: how long a
killed (or frozen) member's partitions take to reach the member left.

No dedup-stream here: two plain consumers (confluent-kafka, librdkafka) in
one group on a topic of 4 partitions, `session.timeout.ms` 6000 and
`heartbeat.interval.ms` 500 (as tests/kafka.rs sets its workers). Once
both hold partitions, one is killed with SIGKILL (or frozen with SIGSTOP,
`--freeze`), and the script times how long until the other holds all 4.
A broker whose coordinator follows the protocol hands them on about one
session timeout after the member fell silent.

It starts its own Tansu broker (memory storage) on a free loopback port in
a temporary directory, unless `--brokers HOST:PORT` names one.

Usage: python3 scripts/kafka_group_check.py [--runs N] [--freeze]
       [--brokers HOST:PORT]
Needs confluent-kafka (pip install confluent-kafka, in a venv) and
`tansu` on the PATH.
"""

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

TOPIC = "group-check"
PARTITIONS = 4
SESSION_MS = 6000


def member(brokers, group):
    """A plain consumer: prints its assignment (a sorted list of
    partitions) each time it changes, then polls until killed."""
    from confluent_kafka import Consumer

    held = set()

    def assigned(_consumer, partitions):
        held.update(p.partition for p in partitions)
        print("held", json.dumps(sorted(held)), flush=True)

    def revoked(_consumer, partitions):
        held.difference_update(p.partition for p in partitions)
        print("held", json.dumps(sorted(held)), flush=True)

    consumer = Consumer({
        "bootstrap.servers": brokers,
        "group.id": group,
        "session.timeout.ms": SESSION_MS,
        "heartbeat.interval.ms": 500,
        "auto.offset.reset": "earliest",
    })
    consumer.subscribe([TOPIC], on_assign=assigned, on_revoke=revoked)
    while True:
        consumer.poll(0.2)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(port, seconds):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    sys.exit(f"nothing listens on port {port} after {seconds} s")


class Member:
    """A member process and the last assignment it printed."""

    def __init__(self, brokers, group):
        self.process = subprocess.Popen(
            [sys.executable, __file__, "--member", brokers, group],
            stdout=subprocess.PIPE, text=True)
        os.set_blocking(self.process.stdout.fileno(), False)
        self.held = []

    def read(self):
        for line in iter(self.process.stdout.readline, ""):
            if line.startswith("held "):
                self.held = json.loads(line[5:])
        return self.held

    def stop(self):
        self.process.kill()
        self.process.wait()


def wait_until(what, seconds, done):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if done():
            return True
        time.sleep(0.1)
    print(f"  {what}: not within {seconds} s", flush=True)
    return False


def one_run(brokers, run, freeze, limit):
    group = f"check-{run}-{os.getpid()}"
    a, b = Member(brokers, group), Member(brokers, group)
    try:
        if not wait_until("both members hold partitions", 120,
                          lambda: a.read() and b.read()
                          and len(a.held) + len(b.held) == PARTITIONS):
            return None
        os.kill(a.process.pid, signal.SIGSTOP if freeze else signal.SIGKILL)
        silent = time.monotonic()
        if not wait_until("the other member holds every partition", limit,
                          lambda: len(b.read()) == PARTITIONS):
            return None
        return time.monotonic() - silent
    finally:
        if freeze:
            os.kill(a.process.pid, signal.SIGCONT)
        a.stop()
        b.stop()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--member", nargs=2, help=argparse.SUPPRESS)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--freeze", action="store_true",
                        help="SIGSTOP the member instead of SIGKILL")
    parser.add_argument("--brokers", help="HOST:PORT of a running broker")
    parser.add_argument("--limit", type=float, default=180,
                        help="seconds to wait for the handover")
    args = parser.parse_args()
    if args.member:
        member(*args.member)
        return
    from confluent_kafka.admin import AdminClient, NewTopic

    broker = None
    temp = tempfile.TemporaryDirectory()
    brokers = args.brokers
    if brokers is None:
        if not shutil.which("tansu"):
            sys.exit("tansu is not on the PATH (cargo install tansu --version 0.6.0 "
                     "--features dynostore --locked)")
        port = free_port()
        url = f"tcp://127.0.0.1:{port}"
        broker = subprocess.Popen(
            ["tansu", "broker", "--listener-url", url, "--advertised-listener-url", url,
             "--storage-engine", "memory://tansu/"],
            cwd=temp.name, stdout=subprocess.DEVNULL,
            stderr=open(os.path.join(temp.name, "tansu.log"), "w"))
        wait_for_port(port, 30)
        brokers = f"127.0.0.1:{port}"
    try:
        admin = AdminClient({"bootstrap.servers": brokers})
        for future in admin.create_topics(
                [NewTopic(TOPIC, PARTITIONS, 1)]).values():
            try:
                future.result()
            except Exception as e:  # already there: fine
                if "exists" not in str(e).lower():
                    raise
        how = "SIGSTOP" if args.freeze else "SIGKILL"
        print(f"session.timeout.ms {SESSION_MS}; a member stopped with {how}:", flush=True)
        for run in range(args.runs):
            took = one_run(brokers, run, args.freeze, args.limit)
            shown = "did not happen" if took is None else f"{took:.1f} s"
            print(f"run {run + 1}: partitions handed on after {shown}", flush=True)
    finally:
        if broker is not None:
            broker.kill()
            broker.wait()


if __name__ == "__main__":
    main()
