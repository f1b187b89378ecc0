"""The controller's cluster membership (controller/cluster_control.py, Kafka's
ClusterControlManager): which partitions each broker holds, kept as records are
replayed and undone when they never commit; registrations; steady heartbeats."""

from __future__ import annotations

import uuid

from keeperless.controller.cluster_control import ClusterControl
from keeperless.metadata.admin import NewTopic
from tests.unit.controller_log import active_cluster


def _held(cluster: ClusterControl) -> dict[int, int]:
    return {b: len(keys) for b, keys in sorted(cluster.partitions_by_broker.items()) if keys}


def test_the_partition_index_follows_replay_and_undoes_what_never_commits() -> None:
    c, log = active_cluster()
    # "a": 5 partitions x 2 replicas, "b": 3 x 3, over brokers 1-3
    assert sum(_held(c.cluster).values()) == 5 * 2 + 3 * 3
    committed = dict(_held(c.cluster))
    log.append(c.create_topics([NewTopic("c", 3, 3)], False).records)
    assert _held(c.cluster) == {b: n + 3 for b, n in committed.items()}
    c.renounce()  # leadership lost before "c" committed: its index changes are undone
    assert _held(c.cluster) == committed
    # the same records committed this time stay, and a later loss keeps them
    log.entries.clear()
    log.append(c.create_topics([NewTopic("c", 3, 3)], False).records)
    log.commit()
    c.renounce()
    assert _held(c.cluster) == {b: n + 3 for b, n in committed.items()}
    # a snapshot loaded: the index is built anew from the image, the same
    before = {b: set(k) for b, k in c.cluster.partitions_by_broker.items()}
    c.cluster.reindex(c.image)
    assert {b: set(k) for b, k in c.cluster.partitions_by_broker.items() if k} == {
        b: k for b, k in before.items() if k
    }


def test_a_steady_heartbeat_is_answered_at_once_and_others_need_the_operation() -> None:
    c, _ = active_cluster()
    b = c.image.brokers[2]
    assert c.cluster.steady_heartbeat(c.image, 2, b.epoch, False, 5_000, metadata_offset=9) == (
        c.cluster.steady_heartbeat(c.image, 2, b.epoch, False, 5_001, metadata_offset=9)
    )
    assert c.cluster.last_heartbeat_ms[2] == 5_001
    assert c.cluster.broker_offsets[2] == 9
    # another epoch, a wish to be fenced or to shut down: the full operation decides
    assert c.cluster.steady_heartbeat(c.image, 2, b.epoch - 1, False, 6_000) is None
    assert c.cluster.steady_heartbeat(c.image, 2, b.epoch, True, 6_000) is None
    assert (
        c.cluster.steady_heartbeat(c.image, 2, b.epoch, False, 6_000, want_shut_down=True) is None
    )
    assert c.cluster.steady_heartbeat(c.image, 9, 0, False, 6_000) is None  # unknown broker


def test_a_broker_is_unregistered_only_once_it_is_fenced() -> None:
    c, log = active_cluster()
    res = c.cluster.unregister_broker(c.image, 3)
    assert res.records == []
    assert "still active" in (res.response.message or "")
    assert c.cluster.unregister_broker(c.image, 7).response.code != 0
    reg = c.cluster.register_broker(
        c.image, False, 4, uuid.uuid4(), [("P", "h", 4)], None, log.offset + 1, 0
    )
    assert reg.response[0].code == 0
    assert [type(x).__name__ for x in reg.records] == ["RegisterBrokerRecord"]
