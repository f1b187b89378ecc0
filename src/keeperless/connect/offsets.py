"""A connector's offsets through the REST API (KIP-875): listed for any connector,
altered or reset only while it is STOPPED. A source connector's offsets are records of
the offset topic (a reset writes tombstones); a sink connector's are its consumer group's
(``connect-<name>``) committed offsets."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from confluent_kafka import ConsumerGroupTopicPartitions, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from keeperless.connect.herder import RestError
from keeperless.connect.plugins import connector_class
from keeperless.connect.state import offset_key
from keeperless.tools.group_offsets import delete_group_offsets

if TYPE_CHECKING:
    from keeperless.connect.herder import Herder

__all__ = ["alter_offsets", "get_offsets"]


def _sink_group(name: str) -> str:
    return f"connect-{name}"


def _sink_offsets(conf: dict[str, Any], name: str) -> list[dict[str, Any]]:
    admin = AdminClient(dict(conf))
    req = ConsumerGroupTopicPartitions(_sink_group(name))
    try:
        res = admin.list_consumer_group_offsets([req])[_sink_group(name)].result(30)
    except KafkaException as e:
        if e.args[0].name() in ("GROUP_ID_NOT_FOUND", "COORDINATOR_NOT_AVAILABLE"):
            return []
        raise
    return [
        {
            "partition": {"kafka_topic": tp.topic, "kafka_partition": tp.partition},
            "offset": {"kafka_offset": tp.offset},
        }
        for tp in sorted(res.topic_partitions, key=lambda t: (t.topic, t.partition))
        if tp.offset >= 0
    ]


async def get_offsets(herder: Herder, name: str) -> dict[str, Any]:
    herder.require(name)
    if herder.kind_of(name) == "sink":
        found = await asyncio.to_thread(_sink_offsets, herder.cfg.client_config(), name)
        return {"offsets": found}
    await herder.offset_log.read_to_end()
    return {"offsets": herder.offsets.of(name)}


def _check_stopped(herder: Herder, name: str) -> None:
    if herder.configs.target(name) != "STOPPED":
        raise RestError(
            400,
            "Connectors must be in the STOPPED state before their offsets can be modified. This "
            "can be done for the specified connector by issuing a 'PUT' request to the "
            f"'/connectors/{name}/stop' endpoint",
        )


def _sink_partition(entry: Mapping[str, Any]) -> tuple[str, int, int | None]:
    part = entry.get("partition") or {}
    topic, p = part.get("kafka_topic"), part.get("kafka_partition")
    if not isinstance(topic, str) or not isinstance(p, int):
        raise RestError(
            400,
            "Partitions of a sink connector need a string 'kafka_topic' and an integer 'kafka_partition'",  # noqa: E501
        )
    off = entry.get("offset")
    if off is None:
        return topic, p, None
    value = off.get("kafka_offset") if isinstance(off, dict) else None
    if not isinstance(value, int) or value < 0:
        raise RestError(
            400, "Offsets of a sink connector need a non-negative integer 'kafka_offset'"
        )
    return topic, p, value


def _alter_sink(
    conf: dict[str, Any], name: str, entries: list[tuple[str, int, int | None]] | None
) -> None:
    admin = AdminClient(dict(conf))
    group = _sink_group(name)
    if entries is None:
        try:
            admin.delete_consumer_groups([group])[group].result(30)
        except KafkaException as e:
            if e.args[0].name() != "GROUP_ID_NOT_FOUND":
                raise
        return
    alter = [TopicPartition(t, p, o) for t, p, o in entries if o is not None]
    if alter:
        req = ConsumerGroupTopicPartitions(group, alter)
        admin.alter_consumer_group_offsets([req])[group].result(30)
    drop: dict[str, list[int]] = {}
    for t, p, o in entries:
        if o is None:
            drop.setdefault(t, []).append(p)
    if drop:
        error, _ = delete_group_offsets(conf["bootstrap.servers"], group, drop)
        if error is not None:
            raise RestError(500, f"Failed to reset the offsets of {group}: {error}")


async def alter_offsets(herder: Herder, name: str, body: Any | None) -> dict[str, str]:
    """``body`` None resets every offset; otherwise ``{"offsets": [{partition, offset}]}``
    (an offset of null removes that partition's)."""
    config = herder.require(name)
    _check_stopped(herder, name)
    reset = body is None
    entries: list[Any] = []
    if not reset:
        got = body.get("offsets") if isinstance(body, dict) else None
        if not got or not isinstance(got, list):
            raise RestError(
                400, "Partitions / offsets need to be provided for an alter offsets request"
            )
        entries = got
    kind = herder.kind_of(name)
    try:
        if kind == "sink":
            parsed = None if reset else [_sink_partition(e) for e in entries]
            await asyncio.to_thread(_alter_sink, herder.cfg.client_config(), name, parsed)
        else:
            await herder.offset_log.read_to_end()
            if reset:
                pairs = [(e["partition"], None) for e in herder.offsets.of(name)]
            else:
                pairs = []
                for e in entries:
                    if not isinstance(e, dict) or not isinstance(e.get("partition"), dict):
                        raise RestError(400, "Every entry needs a 'partition' object")
                    pairs.append((e["partition"], e.get("offset")))
            for part, off in pairs:
                value = None if off is None else json.dumps(off, separators=(",", ":")).encode()
                await herder.offset_log.send(offset_key(name, part), value)
            await herder.offset_log.read_to_end()
    except KafkaException as e:
        raise RestError(500, f"Failed to modify the offsets of connector {name}: {e}") from None
    managed = connector_class(config["connector.class"])().alter_offsets(config, {})
    how = "reset" if reset else "altered"
    if managed:
        return {"message": f"The offsets for this connector have been {how} successfully"}
    return {
        "message": (
            f"The Connect framework-managed offsets for this connector have been {how} "
            "successfully. However, if this connector manages offsets externally, they will need "
            f"to be manually {how} in the system that the connector uses."
        )
    }
