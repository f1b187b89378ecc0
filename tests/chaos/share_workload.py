"""The share-group workload of the fault harness (KIP-932, issue 28), on runs whose
cluster starts with share groups on (``ChaosCluster.share``). Processes:

- ``share-producer``: an idempotent producer of unique integers to the two partitions
  of ``chaos-share``;
- ``share-consumer-0`` and ``-1``: share consumers of one group in explicit
  acknowledgement mode; each record polled is accepted, released or rejected, and the
  acknowledgements are committed (now and then only after the acquisition lock expired,
  so the broker must refuse them); now and then a consumer closes and starts again;
- ``share-crasher``: a share consumer in a child process, killed -9 as soon as it holds
  records (no acknowledgement, no leave): they go to the others once their lock expires.

After the run ``drain`` accepts everything still deliverable, until nothing came for
longer than a lock. ``tests/chaos/share_checker.py`` analyses the history."""

from __future__ import annotations

import contextlib
import json
import logging
import random
import select
import subprocess
import sys
import threading
import time
from typing import Any

from confluent_kafka import AcknowledgeType, KafkaException, Producer, ShareConsumer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.chaos.history import History
from tests.chaos.share_checker import check_share, from_events, kill_times

__all__ = ["SHARE_GROUP", "SHARE_TOPIC", "ShareWorkload"]

SHARE_TOPIC = "chaos-share"
SHARE_GROUP = "chaos-share"
SHARE_PARTITIONS = 2
LOCK_MS = 5000  # the group's share.record.lock.duration.ms
DELIVERY_LIMIT = 3  # the cluster's group.share.delivery.count.limit (cluster.py)
_MAX_OPS = 2000  # per process: every loop is bounded
_quiet = logging.getLogger("chaos.librdkafka")
_KINDS = {"accept": AcknowledgeType.ACCEPT, "release": AcknowledgeType.RELEASE,
          "reject": AcknowledgeType.REJECT}  # fmt: skip

# the crashing consumer: reports each poll's records with its own monotonic clock (the
# same clock as the harness's on Linux), never acknowledges, runs until killed
_CRASHER = r"""
import json, sys, time
from confluent_kafka import ShareConsumer
c = ShareConsumer({"bootstrap.servers": sys.argv[1], "group.id": sys.argv[2],
                   "share.acknowledgement.mode": "explicit", "log_level": 0})
c.subscribe([sys.argv[3]])
end = time.monotonic() + 120
while time.monotonic() < end:
    t0 = time.monotonic()
    try:
        got = [m for m in c.poll(0.5) or [] if m.error() is None and m.value()]
    except Exception:
        continue
    if got:
        recs = [[m.partition(), m.offset(), int(m.value()), m.delivery_count()] for m in got]
        print(json.dumps([t0, time.monotonic(), recs]), flush=True)
"""


class ShareWorkload:
    def __init__(
        self,
        bootstrap: str,
        history: History,
        stop: threading.Event,
        rng: random.Random,
        enabled: bool,
    ) -> None:
        self.bootstrap = bootstrap
        self.history = history
        self.stop = stop
        self.rng = random.Random(rng.random())
        self.enabled = enabled
        self._values = iter(range(1, 10**9))
        self.crashes = 0

    def _common(self) -> dict[str, Any]:
        return {"bootstrap.servers": self.bootstrap, "logger": _quiet, "log_level": 0}

    def setup(self) -> None:
        if not self.enabled:
            return
        admin = AdminClient(self._common())
        conf = {"min.insync.replicas": "2"}
        fs = admin.create_topics([NewTopic(SHARE_TOPIC, SHARE_PARTITIONS, 3, config=conf)])
        fs[SHARE_TOPIC].result(30)
        res = subprocess.run(
            [sys.executable, "-m", "keeperless", "configs", "--bootstrap-server", self.bootstrap,
             "--alter", "--entity-type", "groups", "--entity-name", SHARE_GROUP, "--add-config",
             f"share.auto.offset.reset=earliest,share.record.lock.duration.ms={LOCK_MS}"],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        if res.returncode != 0:
            raise RuntimeError(f"share group config: {res.stdout}{res.stderr}")

    def targets(self) -> list[tuple[str, Any]]:
        if not self.enabled:
            return []
        return [
            ("share-producer", self._produce),
            ("share-consumer-0", lambda: self._consume("share-consumer-0")),
            ("share-consumer-1", lambda: self._consume("share-consumer-1")),
            ("share-crasher", self._crash),
        ]

    # -- producing ------------------------------------------------------------------------

    def _produce(self) -> None:
        name, h = "share-producer", self.history
        p = Producer({**self._common(), "enable.idempotence": True, "acks": "all",
                      "message.timeout.ms": 20_000, "request.timeout.ms": 5_000,
                      "error_cb": h.fatal_errors(name)})  # fmt: skip

        def report(op: int, v: int) -> Any:
            def cb(err: Any, msg: Any) -> None:
                if err is None:
                    h.complete(op, name, "ok", "send", {"value": v, "partition": msg.partition(),
                                                        "offset": msg.offset()})  # fmt: skip
                else:  # maybe written
                    h.complete(op, name, "info", "send", {"value": v, "error": err.name()})

            return cb

        for _ in range(_MAX_OPS):
            if self.stop.is_set():
                break
            v = next(self._values)
            op = h.invoke(name, "send", {"value": v})
            try:
                part = self.rng.randrange(SHARE_PARTITIONS)
                p.produce(SHARE_TOPIC, value=str(v).encode(), partition=part,
                          on_delivery=report(op, v))  # fmt: skip
            except BufferError:
                h.complete(op, name, "fail", "send", {"value": v})
            except KafkaException:  # fatal: recorded by error_cb with its reason
                h.complete(op, name, "fail", "send", {"value": v})
                break
            p.poll(0)
            time.sleep(0.1)
        p.flush(30)

    # -- consuming ------------------------------------------------------------------------

    def _consumer(self) -> ShareConsumer:
        c = ShareConsumer({**self._common(), "group.id": SHARE_GROUP,
                           "share.acknowledgement.mode": "explicit"})  # fmt: skip
        c.subscribe([SHARE_TOPIC])
        return c

    def _poll_once(self, name: str, c: ShareConsumer) -> list[Any]:
        h = self.history
        op = h.invoke(name, "poll")
        try:
            got = [m for m in c.poll(0.5) or [] if m.error() is None and m.value()]
        except KafkaException as e:
            h.complete(op, name, "info", "poll", {"error": str(e)[:200]})
            return []
        h.complete(op, name, "ok", "poll", {"records": [
            [m.partition(), m.offset(), int(m.value()), m.delivery_count()] for m in got
        ]})  # fmt: skip
        return got

    def _acknowledge(self, name: str, c: ShareConsumer, acks: list[tuple[Any, str]]) -> None:
        """Acknowledge and commit; the partitions answered without error are confirmed."""
        h = self.history
        for m, kind in acks:
            c.acknowledge(m, _KINDS[kind])
        op = h.invoke(name, "ack", {"acks": [[m.partition(), m.offset(), int(m.value()), kind]
                                             for m, kind in acks]})  # fmt: skip
        try:
            res = c.commit_sync(10)
        except KafkaException as e:
            h.complete(op, name, "info", "ack", {"error": str(e)[:200]})
            return
        confirmed = [tp.partition for tp, err in res.items() if err is None]
        errors = {str(tp.partition): str(err)[:120] for tp, err in res.items() if err is not None}
        h.complete(op, name, "ok", "ack", {"confirmed": confirmed, "errors": errors})

    def _consume(self, name: str) -> None:
        h = self.history
        c = self._consumer()
        try:
            for _ in range(_MAX_OPS):
                if self.stop.is_set():
                    break
                if self.rng.random() < 0.01:  # a restart: close leaves the group
                    c.close()
                    h.info(name, "restart")
                    c = self._consumer()
                got = self._poll_once(name, c)
                if not got:
                    continue
                acks = []
                for m in got:
                    r = self.rng.random()
                    acks.append((m, "accept" if r < 0.8 else "release" if r < 0.92 else "reject"))
                if self.rng.random() < 0.03:  # too slow: the locks expire first
                    time.sleep(LOCK_MS / 1000 + 1.0)
                self._acknowledge(name, c, acks)
        except KafkaException as e:
            h.info(name, "error", str(e)[:200])
        finally:
            with contextlib.suppress(KafkaException, RuntimeError):
                c.close()

    def _crash(self) -> None:
        """Start a share consumer in a child process and kill -9 it once it holds records;
        again, a few seconds later, until the run ends."""
        name, h = "share-crasher", self.history
        for _ in range(_MAX_OPS):
            if self.stop.wait(self.rng.uniform(3.0, 8.0)):
                break
            child = subprocess.Popen([sys.executable, "-c", _CRASHER, self.bootstrap,
                                      SHARE_GROUP, SHARE_TOPIC],
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)  # fmt: skip
            assert child.stdout is not None
            try:
                deadline = time.monotonic() + 20.0
                while time.monotonic() < deadline and not self.stop.is_set():
                    ready, _, _ = select.select([child.stdout], [], [], 0.5)
                    if not ready:
                        continue
                    line = child.stdout.readline()
                    if not line:
                        break
                    t0, t1, recs = json.loads(line)
                    h.info(name, "poll", {"records": recs, "start_s": round(t0 - h.start, 4),
                                          "end_s": round(t1 - h.start, 4)})  # fmt: skip
                    break  # it holds records: kill it now
            finally:
                child.kill()
                child.wait(10)
                self.crashes += 1
                h.info(name, "killed")

    # -- the end --------------------------------------------------------------------------

    def drain(self, timeout_s: float = 120.0) -> None:
        """Accept whatever is still deliverable, until nothing came for two locks."""
        if not self.enabled:
            return
        name = "share-drain"
        c = self._consumer()
        deadline = time.monotonic() + timeout_s
        last = time.monotonic()
        try:
            while time.monotonic() < deadline and time.monotonic() - last < 2 * LOCK_MS / 1000:
                got = self._poll_once(name, c)
                if got:
                    last = time.monotonic()
                    self._acknowledge(name, c, [(m, "accept") for m in got])
        finally:
            c.close()

    def check(self) -> tuple[list[dict[str, Any]], dict[str, int]]:
        if not self.enabled:
            return [], {}
        events = self.history.of("share-")
        writes, deliveries, acks = from_events(events)
        anomalies, stats = check_share(writes, deliveries, acks, DELIVERY_LIMIT, kill_times(events))
        stats["crashes"] = self.crashes
        return anomalies, stats
