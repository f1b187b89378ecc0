"""Client workloads of a chaos run, each a thread in the root namespace recording what it
asked and what it was told:

* producers: idempotent, acks=all, unique values, explicit partitions (RF 3, min ISR 2);
* a keyed producer to a compacted topic the log cleaner keeps cleaning;
* a consumer group: members that poll and commit their positions synchronously, one
  of the classic protocol and one of the consumer protocol (KIP-848) in the same group;
* a monitor reading the group's committed offsets back (OffsetFetch) every second;
* an admin client: one operation at a time on a few topics (create, delete, re-create,
  add partitions, alter a config), so that its history is sequential; now and then a
  DeleteRecords of a few records at the start of a partition of the workload's topic.

Every loop is bounded (a rate and a total) and stops when asked.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from confluent_kafka import (
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    NewTopic,
    OffsetSpec,
)

from tests.chaos.bulk_workload import BulkWorkload
from tests.chaos.history import History
from tests.chaos.jepsen_workload import JEPSEN_TOPIC, JepsenWorkload
from tests.chaos.jepsen_workload import KEYS as JEPSEN_KEYS
from tests.chaos.secure_workload import SecureWorkload
from tests.chaos.share_workload import ShareWorkload
from tests.chaos.txn_workload import TxnWorkload

__all__ = ["ADMIN_TOPICS", "GROUP", "KV_TOPIC", "TOPIC", "Workload"]

TOPIC = "chaos"
# a compacted topic the log cleaner works on all along (small segments, low ratio)
KV_TOPIC = "chaos-kv"
KV_PARTITIONS = 2
KV_KEYS = 40
GROUP = "chaos-g"
ADMIN_TOPICS = ("adm-0", "adm-1", "adm-2")
# outcomes the controller decides (anything else, e.g. a timeout, is unknown: "info")
DEFINITE = {
    0: "none",
    3: "unknown_topic",
    36: "topic_exists",
    37: "invalid_partitions",
    38: "invalid_replication_factor",
    41: "not_controller",
}


_quiet = logging.getLogger("chaos.librdkafka")  # librdkafka's own chatter, dropped
_quiet.addHandler(logging.NullHandler())
_quiet.propagate = False


class Workload:
    def __init__(
        self,
        bootstrap: str,
        history: History,
        rng: random.Random,
        partitions: int = 6,
        producers: int = 2,
        rate_per_s: float = 80.0,
        max_messages: int = 20_000,
        racks: Sequence[str] = (),
        secure_bootstrap: str = "",
        bulk_bytes: int = 0,
        share: bool = False,
    ) -> None:
        self.bootstrap = bootstrap
        self.racks = list(racks)
        self.history = history
        self.rng = random.Random(rng.random())
        self.partitions = partitions
        self.producers = producers
        self.rate_per_s = rate_per_s
        self.max_messages = max_messages
        self.stop = threading.Event()
        self.moves_stop = threading.Event()  # set once healed: reassignments then settle
        self.threads: list[threading.Thread] = []
        # exactly-once: a transactional copier between two topics
        self.txn = TxnWorkload(bootstrap, history, self.stop)
        # security: SCRAM users and ACLs enforced on a SASL listener (issue 17)
        self.secure = SecureWorkload(bootstrap, secure_bootstrap, history, self.stop)
        # Jepsen's Kafka workload: sends, polls and transactions on one topic (issue 29)
        self.jepsen = JepsenWorkload(bootstrap, history, self.stop, self.rng)
        # volume: large values until ``bulk_bytes`` are acknowledged (issue 23)
        self.bulk = BulkWorkload(bootstrap, history, self.stop, self.rng, bulk_bytes)
        # share groups: queue semantics under faults, on clusters that have them (issue 28)
        self.share = ShareWorkload(bootstrap, history, self.stop, self.rng, share)

    def _common(self) -> dict[str, Any]:
        return {"bootstrap.servers": self.bootstrap, "logger": _quiet, "log_level": 0}

    def setup(self) -> None:
        admin = AdminClient(self._common())
        # small segments: rolls and retention happen within a run (the cluster keeps
        # Kafka's default segment.bytes, which the bulk topic fills)
        conf = {"min.insync.replicas": "2", "segment.bytes": str(1 << 20)}
        fs = admin.create_topics([NewTopic(TOPIC, self.partitions, 3, config=conf)])
        fs[TOPIC].result(30)
        kv = {
            "min.insync.replicas": "2",
            "cleanup.policy": "compact",
            "segment.bytes": "8192",
            "min.cleanable.dirty.ratio": "0.05",
        }
        admin.create_topics([NewTopic(KV_TOPIC, KV_PARTITIONS, 3, config=kv)])[KV_TOPIC].result(30)
        self.txn.setup()
        self.secure.setup()
        self.jepsen.setup()
        self.share.setup()
        if self.bulk.target_bytes:
            self.bulk.setup()

    def start(self) -> None:
        targets: list[tuple[str, Any]] = [
            (f"producer-{k}", lambda k=k: self._produce(k)) for k in range(self.producers)
        ]
        targets += [(f"consumer-{k}", lambda k=k: self._consume(k)) for k in range(2)]
        targets += [("monitor", self._monitor), ("admin", self._admin), ("mover", self._move)]
        targets += [("kv-producer", self._produce_kv)]
        targets += self.txn.targets()
        targets += self.secure.targets()
        targets += self.jepsen.targets()
        targets += self.share.targets()
        if self.bulk.target_bytes:
            targets += self.bulk.targets()
        for name, fn in targets:
            t = threading.Thread(target=fn, name=name, daemon=True)
            t.start()
            self.threads.append(t)

    def finish(self, timeout_s: float = 60.0) -> None:
        self.stop.set()
        deadline = time.monotonic() + timeout_s
        for t in self.threads:
            t.join(max(deadline - time.monotonic(), 0.1))

    # -- producers ---------------------------------------------------------------------

    def _produce(self, k: int) -> None:
        name = f"producer-{k}"
        h = self.history
        p = Producer(
            {
                **self._common(),
                "acks": "all",
                "enable.idempotence": True,
                "linger.ms": 5,
                "message.timeout.ms": 20_000,
                "request.timeout.ms": 5_000,
                "error_cb": h.fatal_errors(name),
            }
        )
        pending: dict[int, tuple[str, int]] = {}

        def report(op: int, value: str, partition: int) -> Any:
            def cb(err: KafkaError | None, msg: Any) -> None:
                pending.pop(op, None)
                if err is None:
                    h.complete(
                        op, name, "ok", "send",
                        {"value": value, "partition": msg.partition(), "offset": msg.offset()},
                    )  # fmt: skip
                else:
                    h.complete(
                        op, name, "info", "send",
                        {"value": value, "partition": partition, "error": err.name()},
                    )  # fmt: skip

            return cb

        interval = 1.0 / self.rate_per_s
        seq = 0
        next_at = time.monotonic()
        while not self.stop.is_set() and seq < self.max_messages // self.producers:
            value = f"p{k}-{seq}"
            partition = seq % self.partitions
            op = h.invoke(name, "send", {"value": value, "partition": partition})
            pending[op] = (value, partition)
            try:
                p.produce(
                    TOPIC, value=value.encode(), partition=partition,
                    on_delivery=report(op, value, partition),
                )  # fmt: skip
            except BufferError:
                pending.pop(op, None)
                h.complete(op, name, "fail", "send", {"value": value, "error": "queue full"})
            except KafkaException:  # fatal: recorded by error_cb with its reason
                pending.pop(op, None)
                h.complete(op, name, "fail", "send", {"value": value, "error": "fatal"})
                break
            seq += 1
            p.poll(0)
            next_at += interval
            time.sleep(max(next_at - time.monotonic(), 0))
        p.flush(30)
        for op, (value, partition) in list(pending.items()):
            h.complete(
                op, name, "info", "send",
                {"value": value, "partition": partition, "error": "undelivered at the end"},
            )  # fmt: skip

    def _produce_kv(self) -> None:
        """Keyed updates to the compacted topic: values kv-<key>-<seq>, a key always to
        the same partition."""
        name = "kv-producer"
        h = self.history
        p = Producer(
            {**self._common(), "acks": "all", "enable.idempotence": True, "linger.ms": 5,
             "message.timeout.ms": 20_000, "request.timeout.ms": 5_000,
             "error_cb": h.fatal_errors(name)}
        )  # fmt: skip

        def report(op: int, value: str, partition: int) -> Any:
            def cb(err: KafkaError | None, msg: Any) -> None:
                v: dict[str, Any] = {"value": value, "partition": partition}
                if err is None:
                    h.complete(op, name, "ok", "send", {**v, "offset": msg.offset()})
                else:
                    h.complete(op, name, "info", "send", {**v, "error": err.name()})

            return cb

        seq = 0
        while not self.stop.wait(1 / 40) and seq < self.max_messages:
            key = self.rng.randrange(KV_KEYS)
            value = f"kv-{key}-{seq}"
            partition = key % KV_PARTITIONS
            op = h.invoke(name, "send", {"value": value, "partition": partition})
            try:
                cb = report(op, value, partition)
                p.produce(KV_TOPIC, key=str(key).encode(), value=value.encode(),
                          partition=partition, on_delivery=cb)  # fmt: skip
            except BufferError:
                h.complete(op, name, "fail", "send", {"value": value, "error": "queue full"})
            except KafkaException:  # fatal: recorded by error_cb with its reason
                h.complete(op, name, "fail", "send", {"value": value, "error": "fatal"})
                break
            seq += 1
            p.poll(0)
        p.flush(30)

    # -- consumer group ------------------------------------------------------------------

    def _consume(self, k: int) -> None:
        name = f"consumer-{k}"
        h = self.history
        # one member of each protocol in the same group (KIP-848 online migration): the
        # group turns consumer and classic again as the consumer-protocol one comes and
        # goes with the coordinator
        protocol: dict[str, Any] = (
            {"session.timeout.ms": 6000, "heartbeat.interval.ms": 1000}
            if k % 2 == 0
            else {"group.protocol": "consumer"}
        )
        if self.racks:  # reads from the replica in its rack, a follower as often as not
            protocol["client.rack"] = self.racks[k % len(self.racks)]
        c = Consumer(
            {
                **self._common(),
                "group.id": GROUP,
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                **protocol,
            }
        )
        # each assignment it gets (its first, then each rebalance): the report counts
        # them, so a coordinator failover that rebalanced the group shows
        c.subscribe(
            [TOPIC],
            on_assign=lambda _c, parts: h.info(
                name, "assigned", sorted(p.partition for p in parts)
            ),
        )
        since_commit = 0
        last_commit = time.monotonic()
        try:
            while not self.stop.is_set():
                msgs = c.consume(100, 0.5)
                read = [
                    (m.partition(), m.offset(), m.value().decode())
                    for m in msgs
                    if m.error() is None and m.value() is not None
                ]
                if read:
                    h.info(name, "read", read)
                since_commit += len(read)
                if since_commit >= 50 or (since_commit and time.monotonic() - last_commit > 1):
                    self._commit(c, name)
                    since_commit = 0
                    last_commit = time.monotonic()
        finally:
            c.close()

    def _commit(self, c: Consumer, name: str) -> None:
        h = self.history
        op = h.invoke(name, "commit")
        try:
            done = c.commit(asynchronous=False)
        except KafkaException as e:
            h.complete(op, name, "info", "commit", {"error": e.args[0].name()})
            return
        offsets = {tp.partition: tp.offset for tp in done or [] if tp.error is None}
        h.complete(op, name, "ok", "commit", offsets)

    def _monitor(self) -> None:
        """The group's committed offsets as the cluster reports them, every second."""
        h = self.history
        reader = committed_reader(self.bootstrap)
        try:
            while not self.stop.wait(1.0):
                op = h.invoke("monitor", "committed")
                try:
                    offsets = read_committed(reader, self.partitions)
                except KafkaException as e:
                    h.complete(op, "monitor", "fail", "committed", {"error": str(e)[:200]})
                    continue
                h.complete(op, "monitor", "ok", "committed", offsets)
        finally:
            reader.close()

    # -- admin ----------------------------------------------------------------------------

    def _admin(self) -> None:
        h = self.history
        admin = AdminClient(self._common())
        rng = self.rng
        while not self.stop.wait(rng.uniform(0.5, 1.5)):
            if rng.random() < 0.1:
                self._delete_records(admin)
                continue
            topic = rng.choice(ADMIN_TOPICS)
            f = rng.choice(["create", "create", "delete", "partitions", "config"])
            value: dict[str, Any] = {"topic": topic}
            if f == "create":
                value["partitions"] = rng.randint(1, 3)
            elif f == "partitions":
                value["total"] = rng.randint(2, 5)
            elif f == "config":
                value["retention.ms"] = str(rng.randrange(60_000, 10**9))
            op = h.invoke("admin", f, value)
            code = self._admin_op(admin, f, value)
            if code in DEFINITE:
                kind = "ok" if code == 0 else "fail"
                h.complete(op, "admin", kind, f, {**value, "code": DEFINITE[code]})
            else:
                h.complete(op, "admin", "info", f, {**value, "code": code})

    def _move(self) -> None:
        """Partition reassignment (issue 25) of the workload's own topic and of the Jepsen
        workload's (Jepsen's membership nemesis, issue 29 item 4) throughout: a
        partition at 3 replicas is moved to 2 of them, one at 2 gets the third broker back
        (a fresh replica that must catch up), in a shuffled order; some moves are
        cancelled and some replaced before they complete. Every other checker then holds
        over partitions whose replicas changed: no acknowledged write lost, replicas
        agreeing, and no copy left on a broker that no longer hosts one."""
        from keeperless.tools.client import call, parse_servers
        from keeperless.tools.errors import ToolError

        h = self.history
        rng = random.Random(self.rng.random())
        servers = parse_servers(self.bootstrap, "bootstrap")
        sizes = {TOPIC: self.partitions, JEPSEN_TOPIC: JEPSEN_KEYS}
        md_body = {"topics": [{"name": t, "topic_id": None} for t in sizes],
                   "allow_auto_topic_creation": False,
                   "include_topic_authorized_operations": False}  # fmt: skip
        while not self.stop.wait(rng.uniform(1.0, 3.0)) and not self.moves_stop.is_set():
            if rng.random() < 0.15:
                self._throttle(servers, rng.choice([None, 1 << 20, 2 << 20, 4 << 20]))
                continue
            try:
                md = call(servers, 3, 12, md_body, timeout_s=8)
            except (ToolError, OSError):
                continue
            brokers = sorted(b.node_id for b in md.brokers)
            topic = TOPIC if rng.random() < 0.7 else JEPSEN_TOPIC
            parts = {p.partition_index: list(p.replica_nodes)
                     for t in md.topics if t.name == topic for p in t.partitions}  # fmt: skip
            p = rng.randrange(sizes[topic])
            current = parts.get(p)
            if not current or len(brokers) < 3:
                continue
            target: list[int] | None
            if rng.random() < 0.15:
                target = None  # cancel (NO_REASSIGNMENT_IN_PROGRESS when none runs)
            elif len(current) >= 3:
                target = rng.sample(current, 2)
            else:
                target = [*current, rng.choice([b for b in brokers if b not in current])]
                rng.shuffle(target)
            value = {"topic": topic, "partition": p, "target": target}
            op = h.invoke("mover", "reassign", value)
            body = {"timeout": 10_000, "topics": [{"name": topic, "partitions": [
                {"partition_index": p, "replicas": target}]}]}  # fmt: skip
            try:
                resp = call(servers, 45, 0, body, timeout_s=15)
            except (ToolError, OSError) as e:
                h.complete(op, "mover", "info", "reassign", {**value, "error": str(e)[:200]})
                continue
            code = int(resp.error_code)
            if not code and resp.responses:
                code = int(resp.responses[0].partitions[0].error_code)
            kind = "ok" if code == 0 else "fail"
            h.complete(op, "mover", kind, "reassign", {**value, "code": code})
        # the last moves complete while the cluster settles: at full speed
        deadline = time.monotonic() + 30
        while not self._throttle(servers, None) and time.monotonic() < deadline:
            time.sleep(1.0)

    def _throttle(self, servers: list[tuple[str, int]], rate: int | None) -> bool:
        """Replication throttles (issue 25) on every replica of the workload's topic at
        ``rate`` bytes/s (as the cluster default of every broker), or none: moves and
        the catch-up of restarted brokers run under them. True once answered."""
        from keeperless.tools.client import call
        from keeperless.tools.errors import ToolError

        h = self.history
        value = {"rate": rate}
        op = h.invoke("mover", "throttle", value)
        keys = ("leader.replication.throttled.replicas", "follower.replication.throttled.replicas")
        rates = ("leader.replication.throttled.rate", "follower.replication.throttled.rate")

        def ops(names: tuple[str, str], v: str | None) -> list[dict[str, Any]]:
            return [{"name": k, "config_operation": 1 if v is None else 0, "value": v}
                    for k in names]  # fmt: skip

        body = {"resources": [
            {"resource_type": 2, "resource_name": TOPIC,
             "configs": ops(keys, None if rate is None else "*")},
            {"resource_type": 4, "resource_name": "",
             "configs": ops(rates, None if rate is None else str(rate))},
        ], "validate_only": False}  # fmt: skip
        try:
            resp = call(servers, 44, 1, body, timeout_s=15)
        except (ToolError, OSError) as e:
            h.complete(op, "mover", "info", "throttle", {**value, "error": str(e)[:200]})
            return False
        codes = [int(r.error_code) for r in resp.responses]
        kind = "ok" if not any(codes) else "fail"
        h.complete(op, "mover", kind, "throttle", {**value, "codes": codes})
        return kind == "ok"

    def _delete_records(self, admin: AdminClient) -> None:
        """DeleteRecords of a few records at the start of a partition of the workload's
        topic (a few: what stays is what the write checker can verify)."""
        h = self.history
        p = self.rng.randrange(self.partitions)
        tp = TopicPartition(TOPIC, p)
        try:
            lo = admin.list_offsets({tp: OffsetSpec.earliest()}, request_timeout=8)[tp]
            start = lo.result(15).offset
        except Exception:
            return  # not an operation: nothing was asked
        value = {"partition": p, "offset": start + self.rng.randint(1, 30)}
        op = h.invoke("admin", "delete-records", value)
        try:
            res = admin.delete_records(
                [TopicPartition(TOPIC, p, value["offset"])], request_timeout=8
            )[TopicPartition(TOPIC, p)].result(15)
        except KafkaException as e:
            err = e.args[0]
            code = int(err.code()) if isinstance(err, KafkaError) else -1
            if code == 1:  # OFFSET_OUT_OF_RANGE: past the high watermark, nothing done
                h.complete(op, "admin", "fail", "delete-records", {**value, "code": code})
            else:
                h.complete(op, "admin", "info", "delete-records", {**value, "code": code})
            return
        except Exception as e:
            h.complete(op, "admin", "info", "delete-records",
                       {**value, "code": type(e).__name__})  # fmt: skip
            return
        h.complete(op, "admin", "ok", "delete-records",
                   {**value, "low_watermark": res.low_watermark})  # fmt: skip

    @staticmethod
    def _admin_op(admin: AdminClient, f: str, v: dict[str, Any]) -> int | str:
        topic = v["topic"]
        try:
            if f == "create":
                admin.create_topics([NewTopic(topic, v["partitions"], 3)], request_timeout=8)[
                    topic
                ].result(15)
            elif f == "delete":
                admin.delete_topics([topic], request_timeout=8)[topic].result(15)
            elif f == "partitions":
                admin.create_partitions([NewPartitions(topic, v["total"])], request_timeout=8)[
                    topic
                ].result(15)
            else:
                res = ConfigResource(
                    ConfigResource.Type.TOPIC,
                    topic,
                    incremental_configs=[
                        ConfigEntry(
                            "retention.ms",
                            v["retention.ms"],
                            incremental_operation=AlterConfigOpType.SET,
                        )
                    ],
                )
                for fut in admin.incremental_alter_configs([res], request_timeout=8).values():
                    fut.result(15)
        except KafkaException as e:
            err = e.args[0]
            return int(err.code()) if isinstance(err, KafkaError) else str(err)[:100]
        except Exception as e:  # a client-side timeout of the future
            return type(e).__name__
        return 0


def committed_reader(bootstrap: str) -> Consumer:
    """A consumer of the group that never subscribes (so never joins it), to read its
    committed offsets. (AdminClient.list_consumer_group_offsets would be simpler, but
    librdkafka crashes on its NOT_COORDINATOR answers: librdkafka issue #5040.)"""
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": GROUP,
            "enable.auto.commit": False,
            "logger": _quiet,
            "log_level": 0,
        }
    )


def read_committed(reader: Consumer, partitions: int) -> dict[int, int]:
    tps = reader.committed([TopicPartition(TOPIC, p) for p in range(partitions)], timeout=5)
    return {tp.partition: tp.offset for tp in tps if tp.error is None}


def read_partition(
    bootstrap: str,
    topic: str,
    partition: int,
    timeout_s: float = 30.0,
    value: Callable[[bytes], Any] = bytes.decode,
) -> Any:
    """Every record of one partition, (offset, value(its bytes)), from its start to its
    high watermark, read by a consumer outside any group."""
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "chaos-reader",
            "enable.auto.commit": False,
            "fetch.max.bytes": 16 << 20,
            "logger": _quiet,
            "log_level": 0,
        }
    )
    try:
        tp = TopicPartition(topic, partition)
        lo, hi = c.get_watermark_offsets(tp, timeout=10)
        c.assign([TopicPartition(topic, partition, lo)])
        out: list[tuple[int, Any]] = []
        deadline = time.monotonic() + timeout_s
        while (not out or out[-1][0] < hi - 1) and hi > lo:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{topic}-{partition}: read up to {out[-1:]} of {hi}")
            for m in c.consume(500, 1.0):
                if m.error() is None:
                    out.append((m.offset(), value(m.value())))
        return lo, hi, out
    finally:
        c.close()
