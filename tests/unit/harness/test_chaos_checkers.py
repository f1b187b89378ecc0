"""The fault harness's checkers find what they claim to: each anomaly is planted in a
small synthetic history or set of files, and a clean one passes."""

from __future__ import annotations

from pathlib import Path

from tests.chaos import checkers
from tests.chaos.history import History


def _sends(h: History, rows: list[tuple[str, int, int | None]]) -> None:
    """(value, partition, acked offset or None for an unknown outcome)"""
    for value, p, offset in rows:
        op = h.invoke("producer-0", "send", {"value": value, "partition": p})
        if offset is None:
            h.complete(op, "producer-0", "info", "send", {"value": value, "partition": p})
        else:
            h.complete(
                op, "producer-0", "ok", "send", {"value": value, "partition": p, "offset": offset}
            )


def test_writes_clean_and_each_anomaly() -> None:
    h = History()
    _sends(h, [("p0-0", 0, 0), ("p0-1", 0, 1), ("p0-2", 0, None), ("p0-3", 1, 0)])
    final = {0: (0, 3, [(0, "p0-0"), (1, "p0-1"), (2, "p0-2")]), 1: (0, 1, [(0, "p0-3")])}
    anomalies, stats = checkers.check_writes(h, final)
    assert anomalies == []
    assert (stats["acked"], stats["unknown_outcome"], stats["unknown_but_written"]) == (3, 1, 1)

    kinds = lambda final: sorted({a["kind"] for a in checkers.check_writes(h, final)[0]})  # noqa: E731
    assert kinds({0: (0, 1, [(0, "p0-0")]), 1: (0, 1, [(0, "p0-3")])}) == ["lost"]
    moved = {0: (0, 2, [(0, "p0-1"), (1, "p0-0")]), 1: (0, 1, [(0, "p0-3")])}
    assert "lost" in kinds(moved)  # at another offset than acknowledged
    dup = {0: (0, 3, [(0, "p0-0"), (1, "p0-1"), (2, "p0-1")]), 1: (0, 1, [(0, "p0-3")])}
    assert kinds(dup) == ["duplicated"]
    phantom = {0: (0, 3, [(0, "p0-0"), (1, "p0-1"), (2, "p9-9")]), 1: (0, 1, [(0, "p0-3")])}
    assert kinds(phantom) == ["phantom"]
    h2 = History()
    _sends(h2, [("p0-0", 0, None), ("p0-1", 0, None)])
    reordered = {0: (0, 2, [(0, "p0-1"), (1, "p0-0")])}
    assert [a["kind"] for a in checkers.check_writes(h2, reordered)[0]] == ["reordered"]


def test_reads_must_be_in_the_final_log() -> None:
    h = History()
    h.info("consumer-0", "read", [(0, 0, "p0-0"), (0, 1, "p0-1")])
    final = {0: (0, 2, [(0, "p0-0"), (1, "p0-1")])}
    assert checkers.check_reads(h, final) == []
    h.info("consumer-1", "read", [(0, 2, "p0-2")])  # read beyond what survived
    assert [a["kind"] for a in checkers.check_reads(h, final)] == ["read-not-in-log"]


def test_commits_never_go_back_past_the_log_or_lost() -> None:
    def monitor(h: History, offsets: dict[int, int]) -> None:
        h.complete(h.invoke("monitor", "committed"), "monitor", "ok", "committed", offsets)

    final = {0: (0, 10, [])}
    h = History()
    monitor(h, {0: 3})
    h.complete(h.invoke("consumer-0", "commit"), "consumer-0", "ok", "commit", {0: 5})
    monitor(h, {0: 5})
    assert checkers.check_commits(h, final) == []
    monitor(h, {0: 4})
    assert "commit-went-back" in [a["kind"] for a in checkers.check_commits(h, final)]
    h2 = History()
    monitor(h2, {0: 11})
    assert [a["kind"] for a in checkers.check_commits(h2, final)] == ["commit-past-log"]
    h3 = History()
    h3.complete(h3.invoke("consumer-0", "commit"), "consumer-0", "ok", "commit", {0: 7})
    monitor(h3, {0: 6})
    assert [a["kind"] for a in checkers.check_commits(h3, final)] == ["commit-lost"]


def _admin(h: History, f: str, value: dict[str, object], outcome: str | None) -> None:
    op = h.invoke("admin", f, value)
    if outcome is None:
        h.complete(op, "admin", "info", f, {**value, "code": "timed out"})
    else:
        kind = "ok" if outcome == "none" else "fail"
        h.complete(op, "admin", kind, f, {**value, "code": outcome})


def test_admin_linearizability() -> None:
    h = History()
    _admin(h, "create", {"topic": "a", "partitions": 1}, "none")
    _admin(h, "create", {"topic": "a", "partitions": 2}, "topic_exists")
    _admin(h, "partitions", {"topic": "a", "total": 1}, "invalid_partitions")
    _admin(h, "partitions", {"topic": "a", "total": 3}, "none")
    _admin(h, "delete", {"topic": "a"}, "none")
    _admin(h, "config", {"topic": "a", "retention.ms": "5"}, "unknown_topic")
    _admin(h, "create", {"topic": "a", "partitions": 1}, "invalid_replication_factor")
    assert checkers.check_admin(h)[0] == []

    bad = History()
    _admin(bad, "create", {"topic": "a", "partitions": 1}, "none")
    _admin(bad, "delete", {"topic": "a"}, "none")
    _admin(bad, "delete", {"topic": "a"}, "none")  # deleted twice
    found = checkers.check_admin(bad)[0]
    assert [a["kind"] for a in found] == ["admin-not-linearizable"]
    assert found[0]["op"] == "delete"


def test_admin_not_controller_may_still_take_effect() -> None:
    """Seed 4414: a create answered NOT_CONTROLLER (the controller lost the leadership
    after appending it) was committed by the next leader."""
    h = History()
    _admin(h, "create", {"topic": "a", "partitions": 1}, "not_controller")
    _admin(h, "partitions", {"topic": "a", "total": 4}, "none")
    assert checkers.check_admin(h)[0] == []
    never = History()
    _admin(never, "create", {"topic": "a", "partitions": 1}, "not_controller")
    _admin(never, "partitions", {"topic": "a", "total": 4}, "unknown_topic")
    assert checkers.check_admin(never)[0] == []


def test_admin_an_unknown_outcome_may_take_effect_later_or_never() -> None:
    later = History()
    _admin(later, "create", {"topic": "a", "partitions": 1}, None)  # timed out
    _admin(later, "config", {"topic": "b", "retention.ms": "1"}, "unknown_topic")
    _admin(later, "create", {"topic": "a", "partitions": 1}, "topic_exists")  # it happened
    assert checkers.check_admin(later)[0] == []
    never = History()
    _admin(never, "create", {"topic": "a", "partitions": 1}, None)
    _admin(never, "create", {"topic": "a", "partitions": 1}, "none")  # it never did
    _admin(never, "delete", {"topic": "a"}, "none")
    assert checkers.check_admin(never)[0] == []
    # but not both: created by the timed-out call *and* by the next one
    both = History()
    _admin(both, "create", {"topic": "a", "partitions": 1}, None)
    _admin(both, "delete", {"topic": "a"}, "unknown_topic")  # so it had not happened yet
    _admin(both, "create", {"topic": "a", "partitions": 1}, "none")
    _admin(both, "delete", {"topic": "a"}, "none")
    _admin(both, "delete", {"topic": "a"}, "none")  # only if the first create came last
    assert checkers.check_admin(both)[0] == []
    _admin(both, "delete", {"topic": "a"}, "none")  # a third time: impossible
    assert [a["kind"] for a in checkers.check_admin(both)[0]] == ["admin-not-linearizable"]


def test_controllers_one_active_per_epoch_and_idle_when_cut_off() -> None:
    line = "INFO x: [node {n}] Became the active controller in epoch {e}\n"
    logs = {1: line.format(n=1, e=3), 2: line.format(n=2, e=4) + "resigning leadership"}
    cut = [{"node": 2, "cpu_pct": 1.0, "window_s": 5}]
    assert checkers.check_controllers(logs, cut) == []
    logs[3] = line.format(n=3, e=4)
    assert [a["kind"] for a in checkers.check_controllers(logs, [])] == ["two-active-controllers"]
    busy = [{"node": 1, "cpu_pct": 80.0, "window_s": 5}]
    found = {a["kind"] for a in checkers.check_controllers({1: ""}, busy)}
    assert found == {"busy-while-cut-off", "never-resigned-while-cut-off"}


def test_logs_without_errors() -> None:
    clean = {1: "2026 INFO a: fine\n"}
    assert checkers.check_logs(clean, []) == []
    bad = {1: "2026 ERROR a: boom\nTraceback (most recent call last):\n  x\n"}
    assert len(checkers.check_logs(bad, [])) == 2
    full = {1: "2026 ERROR a: cannot write\nOSError: [Errno 28] No space left on device\n"}
    assert checkers.check_logs(full, [1]) == []
    assert len(checkers.check_logs(full, [2])) == 1
    failed = {3: "2026 ERROR b: [node 3] Log directory /d/disk-b (x) is offline after an I/O "
                 "error ([Errno 20] Not a directory)\n"}  # fmt: skip
    assert checkers.check_logs(failed, [], [3]) == []
    assert len(checkers.check_logs(failed, [], [4])) == 1
    # a pool worker being spawned when its node was killed -9: not the node's error
    orphan = (
        'Traceback (most recent call last):\n  File "<string>", line 1, in <module>\n'
        '  File "/py/multiprocessing/spawn.py", line 122, in spawn_main\n'
        "    exitcode = _main(fd, parent_sentinel)\n"
        '  File "/py/multiprocessing/spawn.py", line 130, in _main\n'
        "    preparation_data = reduction.pickle.load(from_parent)\n"
        "EOFError: Ran out of input\n2026 INFO keeperless.server.node: [node 1] Listening\n"
    )
    assert checkers.check_logs({1: orphan}, []) == []
    ours = orphan.replace("<string>", "/src/keeperless/runtime/log_cleaner.py")
    assert len(checkers.check_logs({1: ours}, [])) == 1


def test_replicas_and_metadata_logs_must_agree(tmp_path: Path) -> None:
    import uuid

    from keeperless.protocol.records import build_batch, iter_batches, patch_offsets
    from keeperless.storage.log import LogConfig, PartitionLog
    from keeperless.storage.partition_dirs import write_topic_id

    tid = uuid.uuid4()
    dirs = {}
    for node, values in ((4, [b"a", b"b"]), (5, [b"a", b"x"])):
        d = tmp_path / f"n{node}"
        (d / "t-0").mkdir(parents=True)
        write_topic_id(d / "t-0", tid)
        log = PartitionLog(d / "t-0", LogConfig(), 0)
        for i, v in enumerate(values):
            buf = bytearray(build_batch([(None, v, ())]))
            patch_offsets(buf, 0, i, 0)
            log.append(bytes(buf), list(iter_batches(buf)), 0)
        log.close()
        dirs[node] = [d]
    topics = {"t": (tid, {0: [4, 5]})}
    found = checkers.check_replicas(dirs, topics)
    assert [a["kind"] for a in found] == ["replicas-differ"]
    other = {"t": (uuid.uuid4(), {0: [4, 5]})}  # the directories belong to another t
    assert {a["kind"] for a in checkers.check_replicas(dirs, other)} == {
        "stray-partition-directory"
    }
    # a second log directory of node 4 holding the partition too (a move's old copy)
    import shutil

    shutil.copytree(dirs[4][0] / "t-0", tmp_path / "n4b" / "t-0")
    dirs[4].append(tmp_path / "n4b")
    assert "duplicate-replica" in {a["kind"] for a in checkers.check_replicas(dirs, topics)}


def test_metadata_logs_must_hold_the_same_records(tmp_path: Path) -> None:
    import uuid

    from keeperless.metadata import _records_gen as r
    from keeperless.metadata.codec import encode_record
    from keeperless.protocol.records import build_batch
    from keeperless.raft.messages import Entry
    from keeperless.runtime.raft_log import FileRaftLog

    def entry(base: int, name: bytes) -> Entry:
        rec = r.TopicRecord(name=name.decode(), topic_id=uuid.UUID(int=base + 1))
        data = bytearray(build_batch([(None, encode_record(rec), ())]))
        data[0:8] = base.to_bytes(8, "big")
        data[12:16] = (1).to_bytes(4, "big")
        return Entry(base, base, 1, bytes(data))

    dirs = {}
    for node, values in ((1, [b"a", b"b", b"c"]), (2, [b"a", b"b"]), (3, [b"a", b"z", b"c"])):
        d = tmp_path / f"n{node}"
        log = FileRaftLog(d / "__cluster_metadata-0")
        log.append([entry(i, v) for i, v in enumerate(values)])
        log.flush()
        log.close()
        dirs[node] = d
    found = checkers.check_metadata_agreement({1: dirs[1], 2: dirs[2]})
    assert found == []  # a shorter log agrees on what it has
    found = checkers.check_metadata_agreement(dirs)
    assert {(a["kind"], tuple(a["nodes"]), a.get("offset")) for a in found} == {
        ("metadata-images-differ", (1, 3), None),
        ("metadata-logs-differ", (1, 3), 1),
        ("metadata-logs-differ", (2, 3), 1),
    }


def test_writes_acknowledged_without_an_offset() -> None:
    """An idempotent producer may acknowledge a batch without its offset (persisted, as a
    later sequence showed): it must be in its partition, once."""
    h = History()
    op = h.invoke("producer-0", "send", {"value": "p0-0", "partition": 0})
    h.complete(op, "producer-0", "ok", "send", {"value": "p0-0", "partition": 0, "offset": None})
    assert checkers.check_writes(h, {0: (0, 1, [(0, "p0-0")])})[0] == []
    assert [a["kind"] for a in checkers.check_writes(h, {0: (0, 0, [])})[0]] == ["lost"]
    moved = {0: (0, 0, []), 1: (0, 1, [(0, "p0-0")])}
    assert [a["kind"] for a in checkers.check_writes(h, moved)[0]] == ["lost"]
    # read at an offset a DeleteRecords deleted since: gone by request (seed 4303)
    h.info("consumer-0", "read", [[0, 0, "p0-0"]])
    deleted = {0: (1, 1, [])}
    assert [a["kind"] for a in checkers.check_writes(h, deleted)[0]] == ["lost"]  # not asked
    d = h.invoke("admin", "delete-records", {"partition": 0, "offset": 1})
    h.complete(d, "admin", "ok", "delete-records",
               {"partition": 0, "offset": 1, "low_watermark": 1})  # fmt: skip
    assert checkers.check_writes(h, deleted)[0] == []


def test_an_acknowledged_upgrade_is_never_lost() -> None:
    h = History()
    assert checkers.check_upgrades(h, "3.5-IV2", "3.5-IV2") == []
    op = h.invoke("nemesis", "upgrade", {"release": "3.7-IV2"})
    h.complete(op, "nemesis", "ok", "upgrade", {"release": "3.7-IV2"})
    assert checkers.check_upgrades(h, "3.5-IV2", "3.7-IV2") == []
    assert [a["kind"] for a in checkers.check_upgrades(h, "3.5-IV2", "3.6-IV2")] == ["upgrade-lost"]
    op = h.invoke("nemesis", "upgrade", {"release": "3.9-IV0"})
    h.complete(op, "nemesis", "info", "upgrade", {"release": "3.9-IV0"})  # timed out
    assert checkers.check_upgrades(h, "3.5-IV2", "3.9-IV0") == []  # it may have happened
    assert checkers.check_upgrades(h, "3.5-IV2", "3.7-IV2") == []  # or not


def test_admin_a_retried_request_finds_its_own_work_done() -> None:
    """A broker sends a forwarded request again when the controller moves before it
    answers (as Kafka does): the second attempt answers TOPIC_ALREADY_EXISTS for a create
    that did happen (seed 11005), INVALID_PARTITIONS for partitions it added (11021)."""
    h = History()
    _admin(h, "create", {"topic": "a", "partitions": 3}, "topic_exists")
    _admin(h, "partitions", {"topic": "a", "total": 4}, "invalid_partitions")
    _admin(h, "partitions", {"topic": "a", "total": 4}, "invalid_partitions")
    _admin(h, "delete", {"topic": "a"}, "unknown_topic")
    _admin(h, "create", {"topic": "a", "partitions": 1}, "none")
    assert checkers.check_admin(h)[0] == []
    # but its effect is kept: the topic it says exists must exist afterwards
    bad = History()
    _admin(bad, "create", {"topic": "a", "partitions": 3}, "topic_exists")
    _admin(bad, "create", {"topic": "a", "partitions": 3}, "none")
    assert [a["kind"] for a in checkers.check_admin(bad)[0]] == ["admin-not-linearizable"]
    fewer = History()  # and it cannot explain a refusal to shrink
    _admin(fewer, "create", {"topic": "a", "partitions": 3}, "none")
    _admin(fewer, "partitions", {"topic": "a", "total": 5}, "invalid_partitions")
    _admin(fewer, "partitions", {"topic": "a", "total": 4}, "none")
    assert [a["kind"] for a in checkers.check_admin(fewer)[0]] == ["admin-not-linearizable"]


def test_duplicates_under_two_producer_epochs_are_the_clients(tmp_path: Path) -> None:
    """librdkafka re-sends what it had in flight under a new epoch after a message timed
    out (seed 11041): copies under two epochs of one producer are the client's doing;
    copies under one epoch are a broker that did not recognise a retry."""
    import uuid

    from keeperless.protocol.records import build_batch, iter_batches, patch_offsets
    from keeperless.storage.log import LogConfig, PartitionLog
    from keeperless.storage.partition_dirs import write_topic_id

    d = tmp_path / "n1"
    (d / "t-0").mkdir(parents=True)
    write_topic_id(d / "t-0", uuid.uuid4())
    log = PartitionLog(d / "t-0", LogConfig(), 0)
    # p0-1 under epochs 0 and 1 (re-sent after a bump); p1-1 twice under epoch 1
    writes = [(b"p0-1", 0, 5), (b"p0-1", 1, 0), (b"p1-1", 1, 1), (b"p1-1", 1, 1)]
    for i, (v, epoch, seq) in enumerate(writes):
        buf = bytearray(
            build_batch([(None, v, ())], producer_id=1000, producer_epoch=epoch,
                        base_sequence=seq)
        )  # fmt: skip
        patch_offsets(buf, 0, i, 0)
        log.append(bytes(buf), list(iter_batches(buf)), 0)
    log.close()
    dups = [
        {"kind": "duplicated", "value": "p0-1", "at": [[0, 0], [0, 1]], "topic": "t"},
        {"kind": "duplicated", "value": "p1-1", "at": [[0, 2], [0, 3]], "topic": "t"},
        {"kind": "lost", "value": "p0-9"},
        {"kind": "reordered", "partition": 0, "offset": 1, "value": "p0-1", "after": "p0-2",
         "topic": "t"},
        {"kind": "reordered", "partition": 0, "offset": 3, "value": "p1-1", "after": "p1-2",
         "topic": "t"},
    ]  # fmt: skip
    kept, explained = checkers.explain_duplicates(dups, {1: [d]}, "t")
    assert [(a["kind"], a["value"], a.get("writers")) for a in explained] == [
        ("duplicated", "p0-1", [(1000, 0), (1000, 1)]),
        ("reordered", "p0-1", None),
    ]
    assert [(a["kind"], a["value"]) for a in kept] == [
        ("duplicated", "p1-1"),
        ("lost", "p0-9"),
        ("reordered", "p1-1"),
    ]
    # copies the files do not show are not explained away
    assert checkers.explain_duplicates(dups, {}, "t")[0] == dups
    # nor copies in another topic, whatever this topic's batches at those offsets hold
    # (seed 8204: the bulk topic's copies were looked up in the main topic's files)
    other = [{**a, "topic": "bulk"} if "topic" in a else a for a in dups]
    assert checkers.explain_duplicates(other, {1: [d]}, "t") == (other, [])


def test_deleted_records_may_be_missing_and_a_deletion_is_never_undone() -> None:
    """DeleteRecords in the workload: acknowledged writes (and reads) below the final
    log start are gone by request, only if a deletion asked that far; the start never
    falls below an acknowledged low watermark, never passes what was asked."""
    h = History()
    _sends(h, [("p0-0", 0, 0), ("p0-1", 0, 1), ("p0-2", 0, 2), ("p0-3", 0, 3)])
    h.info("consumer-0", "read", [[0, 0, "p0-0"], [0, 1, "p0-1"]])
    after = {0: (2, 4, [(2, "p0-2"), (3, "p0-3")])}
    # no deletion asked: the first two are lost, and were read
    assert {a["kind"] for a in checkers.check_writes(h, after)[0]} == {"lost"}
    assert {a["kind"] for a in checkers.check_reads(h, after)} == {"read-not-in-log"}
    assert [a["kind"] for a in checkers.check_deletions(h, after)] == ["deleted-unasked"]
    d = h.invoke("admin", "delete-records", {"partition": 0, "offset": 2})
    h.complete(d, "admin", "ok", "delete-records",
               {"partition": 0, "offset": 2, "low_watermark": 2})  # fmt: skip
    assert checkers.check_writes(h, after)[0] == []
    assert checkers.check_reads(h, after) == []
    assert checkers.check_deletions(h, after) == []
    assert checkers.check_admin(h)[0] == []  # not one of the admin model's operations
    undone = {0: (1, 4, [(1, "p0-1"), (2, "p0-2"), (3, "p0-3")])}
    assert [a["kind"] for a in checkers.check_deletions(h, undone)] == ["deletion-undone"]
    assert checkers.check_writes(h, {0: (3, 4, [(3, "p0-3")])})[0] != []  # too far


def test_compaction_keeps_each_keys_latest_acknowledged_write() -> None:
    h = History()
    for value, p, offset in (("kv-1-0", 1, 0), ("kv-1-2", 1, 1), ("kv-2-1", 0, 0)):
        op = h.invoke("kv-producer", "send", {"value": value, "partition": p})
        h.complete(op, "kv-producer", "ok", "send",
                   {"value": value, "partition": p, "offset": offset})  # fmt: skip
    later = h.invoke("kv-producer", "send", {"value": "kv-2-3", "partition": 0})
    h.complete(later, "kv-producer", "info", "send", {"value": "kv-2-3", "partition": 0})
    cleaned = {0: (0, 2, [(1, "kv-2-3")]), 1: (0, 2, [(1, "kv-1-2")])}
    assert checkers.check_compaction(h, cleaned)[0] == []  # kv-2-1 replaced by a later write
    lost = {0: (0, 1, [(0, "kv-2-1")]), 1: (0, 2, [(0, "kv-1-0")])}  # kept the older value
    assert [a["kind"] for a in checkers.check_compaction(h, lost)[0]] == ["compaction-lost-latest"]
    gone = {0: (0, 1, [(0, "kv-2-1")]), 1: (0, 2, [])}
    assert [a["kind"] for a in checkers.check_compaction(h, gone)[0]] == ["compaction-lost-latest"]


def test_compaction_checks_writes_acknowledged_without_an_offset_by_their_sequence() -> None:
    """librdkafka acknowledges a timed-out write without an offset when a later one
    succeeded (seed 14002 stopped the checker on it): its key's latest record must still
    be that write or a later one."""
    h = History()
    for value, offset in (("kv-1-0", 0), ("kv-1-4", None), ("kv-2-1", 1)):
        op = h.invoke("kv-producer", "send", {"value": value, "partition": 0})
        h.complete(op, "kv-producer", "ok", "send",
                   {"value": value, "partition": 0, "offset": offset})  # fmt: skip
    kept = {0: (0, 3, [(1, "kv-2-1"), (2, "kv-1-4")])}
    assert checkers.check_compaction(h, kept)[0] == []
    older = {0: (0, 3, [(0, "kv-1-0"), (1, "kv-2-1")])}
    assert [a["kind"] for a in checkers.check_compaction(h, older)[0]] == ["compaction-lost-latest"]


def test_compacted_replicas_agree_on_latest_values_not_batches(tmp_path: Path) -> None:
    import uuid

    from keeperless.protocol.records import build_batch, iter_batches, patch_offsets
    from keeperless.storage.log import LogConfig, PartitionLog
    from keeperless.storage.partition_dirs import write_topic_id

    tid = uuid.uuid4()

    def replica(node: int, rows: list[tuple[int, bytes, bytes]]) -> Path:
        d = tmp_path / f"n{node}"
        (d / "kv-0").mkdir(parents=True)
        write_topic_id(d / "kv-0", tid)
        log = PartitionLog(d / "kv-0", LogConfig(), 0)
        for offset, k, v in rows:
            buf = bytearray(build_batch([(k, v, ())]))
            patch_offsets(buf, 0, offset, 0)
            log.append(bytes(buf), list(iter_batches(buf)), 0)
        log.close()
        return d

    full = [(0, b"b", b"1"), (1, b"a", b"1"), (2, b"a", b"2")]
    cleaned = [(0, b"b", b"1"), (2, b"a", b"2")]  # the other cleaned offset 1 away
    dirs = {1: [replica(1, full)], 2: [replica(2, cleaned)]}
    topics = {"kv": (tid, {0: [1, 2]})}
    assert [a["kind"] for a in checkers.check_replicas(dirs, topics)] == ["replicas-differ"]
    assert checkers.check_replicas(dirs, topics, frozenset({"kv"})) == []
    wrong = {1: dirs[1], 3: [replica(3, [(0, b"b", b"1"), (1, b"a", b"1"), (2, b"b", b"2")])]}
    topics3 = {"kv": (tid, {0: [1, 3]})}
    assert [a["kind"] for a in checkers.check_replicas(wrong, topics3, frozenset({"kv"}))] == [
        "compacted-replicas-differ"
    ]


def test_exactly_once_output_is_the_input_below_the_committed_offset() -> None:
    from tests.chaos.txn_workload import check_exactly_once

    inputs = {0: ["in-0", "in-2", "in-4"], 1: ["in-1", "in-3"]}
    good = {0: ["out:in-0", "out:in-2"], 1: ["out:in-1", "out:in-3"]}
    committed = {0: 2, 1: 2}
    assert check_exactly_once(inputs, good, committed) == []

    def kinds(outputs: dict[int, list[str]]) -> list[str]:
        return [a["kind"] for a in check_exactly_once(inputs, outputs, committed)]

    assert kinds({0: ["out:in-0", "out:in-0", "out:in-2"], 1: good[1]}) == ["txn-duplicate"]
    assert kinds({0: ["out:in-0"], 1: good[1]}) == ["txn-lost"]
    # output committed without its input offsets (or offsets without the output)
    assert kinds({0: ["out:in-0", "out:in-2", "out:in-4"], 1: good[1]}) == [
        "txn-uncommitted-offsets"
    ]
    assert kinds({0: ["out:in-2", "out:in-0"], 1: good[1]}) == ["txn-reordered"]
    # a value the input holds twice (an idempotent producer's re-send) is copied twice
    twice = {0: ["in-0", "in-0"]}
    assert check_exactly_once(twice, {0: ["out:in-0", "out:in-0"]}, {0: 2}) == []


def test_a_partition_left_with_the_replicas_of_two_sets_is_an_anomaly() -> None:
    topics = {"w": (None, {0: [1, 2, 3], 1: [4, 5], 2: [5, 6, 7, 2, 3, 4]})}
    found = checkers.check_replica_counts(topics, "w", frozenset({2, 3}))
    assert [(a["kind"], a["partition"]) for a in found] == [("replica-count", 2)]
    assert checkers.check_replica_counts(topics, "absent", frozenset({2, 3})) == []


def test_a_timed_out_token_expiry_is_an_unknown_outcome() -> None:
    """Seed 4615: an ExpireDelegationToken answered REQUEST_TIMED_OUT was committed by
    the controller afterwards; the workload had taken it for a refusal and reported the
    (expired) token lost. Timed out or NOT_CONTROLLER: it may or may not have expired."""
    import threading

    from tests.chaos.history import History
    from tests.chaos.secure_workload import SecureWorkload

    w = SecureWorkload("b", "s", History(), threading.Event())
    w.tokens = {"t1": "m1", "t2": "m2", "t3": "m3", "t4": "m4"}
    w.maybe_expired = {"t1", "t2", "t3", "t4"}
    w.expire_answered("t1", "m1", 7)  # REQUEST_TIMED_OUT
    w.expire_answered("t2", "m2", 41)  # NOT_CONTROLLER
    w.expire_answered("t3", "m3", 0)
    w.expire_answered("t4", "m4", 63)  # DELEGATION_TOKEN_OWNER_MISMATCH: refused
    assert w.maybe_expired == {"t1", "t2"}
    # seed 4621: resent after its first attempt committed, it found no token
    w.maybe_expired.add("t4")
    w.expire_answered("t4", "m4", 62)  # DELEGATION_TOKEN_NOT_FOUND
    assert w.maybe_expired == {"t1", "t2", "t4"}
    assert w.expired == {"t3": "m3"}


def test_the_voter_set_is_what_the_acknowledged_changes_made() -> None:
    h = History()
    h.info("nemesis", "voters", {"op": "initial", "voters": {"1": "a", "2": "b", "3": "c"}})
    h.info("nemesis", "voters", {"op": "add", "node": 7, "dir": "g", "outcome": "ok"})
    h.info("nemesis", "voters", {"op": "remove", "node": 3, "dir": "c", "outcome": "ok"})
    h.info("nemesis", "voters", {"op": "add", "node": 3, "dir": "c2", "outcome": "ok"})
    h.info("nemesis", "voters", {"op": "remove", "node": 2, "dir": "b", "outcome": "fail"})
    h.info("nemesis", "voters", {"op": "add", "node": 8, "dir": "h", "outcome": "info"})
    final = [{"id": 1, "directoryId": "a"}, {"id": 2, "directoryId": "b"},
             {"id": 3, "directoryId": "c2"}, {"id": 7, "directoryId": "g"}]  # fmt: skip
    assert checkers.check_voters(h, final) == []
    assert checkers.check_voters(h, [*final, {"id": 8, "directoryId": "h"}]) == []  # unknown
    lost = checkers.check_voters(h, [v for v in final if v["id"] != 7])
    assert [a["kind"] for a in lost] == ["voters-lost"]
    assert lost[0]["voters"] == {7: {"expected": "g", "final": None}}
    old_disk = checkers.check_voters(h, [*final[:2], {"id": 3, "directoryId": "c"}, final[3]])
    assert old_disk[0]["voters"] == {3: {"expected": "c2", "final": "c"}}
    assert checkers.check_voters(History(), None) == []  # a static quorum: nothing to check
