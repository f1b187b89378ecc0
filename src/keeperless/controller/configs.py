"""IncrementalAlterConfigs on the controller: validated ConfigRecords for topics and for
brokers (one broker, or the cluster-wide default with an empty name)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from kio.schema.errors import ErrorCode

from keeperless.controller.eligible import eligible_after
from keeperless.controller.quorum_controller import QuorumController, Result
from keeperless.metadata import _records_gen as r
from keeperless.metadata.admin import ApiError
from keeperless.metadata.config_catalog import BROKER_CONFIGS
from keeperless.metadata.config_def import ConfigValueError
from keeperless.metadata.config_resolution import TOPIC_SYNONYMS
from keeperless.metadata.group_configs import (
    GROUP_CONFIGS,
    GROUP_RESOURCE,
    validate_group_config,
)
from keeperless.metadata.image import (
    BROKER_RESOURCE,
    TOPIC_RESOURCE,
    MetadataDelta,
    MetadataImage,
)
from keeperless.metadata.topic_configs import (
    TOPIC_CONFIG_DEFAULTS,
    TopicConfigError,
    validate_topic_configs,
)
from keeperless.metadata.update_modes import (
    LIVE_UNSUPPORTED,
    LIVE_UNSUPPORTED_REASON,
    PER_BROKER,
    READ_ONLY,
    listener_key,
)

__all__ = [
    "DYNAMIC_BROKER_CONFIGS",
    "ConfigChange",
    "alter_configs",
    "incremental_alter_configs",
]

SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
# broker keys that may change while running (Kafka's "cluster-wide"/"per-broker" kind)
DYNAMIC_BROKER_CONFIGS = frozenset(k for k, d in BROKER_CONFIGS.items() if d.scope != READ_ONLY)
# a broker key that stands for a topic config in the same unit is validated as that one
_TOPIC_KEY_OF = {
    broker_key: topic_key
    for topic_key, chain in TOPIC_SYNONYMS.items()
    for broker_key, factor in chain
    if factor == 1
}

ConfigChange = tuple[int, str, Sequence[tuple[str, int, str | None]]]


def _validate(
    rtype: int, name: str, key: str, value: str | None, limits: Mapping[str, int]
) -> str | None:
    if rtype == GROUP_RESOURCE:
        return validate_group_config(key, value, limits)
    if rtype == TOPIC_RESOURCE:
        try:
            validate_topic_configs({key: value})
        except TopicConfigError as e:
            return str(e)
        return None
    # a listener's own value of a per-broker key (listener.name.<l>.<key>), as Kafka's
    # DynamicListenerConfig takes it: checked as the key it names
    listener, base = listener_key(key)
    if base in LIVE_UNSUPPORTED:
        return f"Cannot update these configs dynamically: [{key}] ({LIVE_UNSUPPORTED_REASON})"
    per_listener = listener is not None and base in BROKER_CONFIGS
    if base not in DYNAMIC_BROKER_CONFIGS or (
        per_listener and BROKER_CONFIGS[base].scope != PER_BROKER
    ):
        return f"Cannot update these configs dynamically: [{key}]" if key else "Empty config name"
    if not name and BROKER_CONFIGS[base].scope == PER_BROKER:
        # Kafka's DynamicBrokerConfig: a per-broker config has no cluster-wide default
        return (
            "Cannot update these configs at default cluster level, broker id must be "
            f"specified: [{key}]"
        )
    if value is None:
        return None
    d = BROKER_CONFIGS[base]
    try:  # the definition the node's own parser reads (metadata/config_def.py)
        d.validate(value)
    except ConfigValueError as e:
        return str(e).replace(f"configuration {base}:", f"configuration {key}:")
    topic_key = _TOPIC_KEY_OF.get(key)
    if topic_key is not None and d.validator is None:
        try:  # a broker default of a topic config takes what the topic config takes
            validate_topic_configs({topic_key: value})
        except TopicConfigError as e:
            return str(e).replace(topic_key, key)
    return None


def _default(rtype: int, key: str) -> str | None:
    if rtype == TOPIC_RESOURCE:
        return TOPIC_CONFIG_DEFAULTS.get(key)
    d = BROKER_CONFIGS.get(key)
    return d.default if d is not None else None


def incremental_alter_configs(
    c: QuorumController, changes: Sequence[ConfigChange], validate_only: bool
) -> Result[list[tuple[int, str, ApiError]]]:
    records: list[Any] = []
    out: list[tuple[int, str, ApiError]] = []
    for rtype, name, ops in changes:
        if rtype == TOPIC_RESOURCE and c.image.topic(name) is None:
            out.append(
                (
                    rtype,
                    name,
                    ApiError(ErrorCode.unknown_topic_or_partition, f"Topic {name} does not exist"),
                )
            )
            continue
        if (
            rtype == BROKER_RESOURCE
            and name
            and not (name.isdigit() and int(name) in c.image.brokers)
        ):
            out.append((rtype, name, ApiError(ErrorCode.invalid_request, f"Unknown broker {name}")))
            continue
        if rtype == GROUP_RESOURCE and not name:
            out.append((rtype, name, ApiError(ErrorCode.invalid_request,
                                              "A group config needs a group name")))  # fmt: skip
            continue
        if rtype not in (TOPIC_RESOURCE, BROKER_RESOURCE, GROUP_RESOURCE):
            out.append(
                (
                    rtype,
                    name,
                    ApiError(ErrorCode.invalid_request, f"Unsupported resource type {rtype}"),
                )
            )
            continue
        current = dict(c.image.configs.get((rtype, name), {}))
        mine: list[Any] = []
        error = None
        for key, op, value in ops:
            if op in (APPEND, SUBTRACT) and rtype == GROUP_RESOURCE:
                error = ApiError(
                    ErrorCode.invalid_config,
                    f"{'APPEND' if op == APPEND else 'SUBTRACT'} is only valid for list "
                    f"configs; {key} is not one",
                )
                break
            if op == DELETE and rtype == GROUP_RESOURCE and key not in GROUP_CONFIGS:
                error = ApiError(ErrorCode.invalid_config, f"Unknown group config name: {key}")
                break
            if op in (APPEND, SUBTRACT):
                # from the effective value: the one set, else the default (Kafka's
                # ConfigurationControlManager: APPEND compact to a topic on the default
                # cleanup.policy=delete gives delete,compact)
                base = current.get(key)
                if base is None:
                    base = _default(rtype, key)
                parts = [p for p in (base or "").split(",") if p]
                for v in (value or "").split(","):
                    if op == APPEND and v and v not in parts:
                        parts.append(v)
                    elif op == SUBTRACT and v in parts:
                        parts.remove(v)
                value, op = ",".join(parts), SET
            if op == SET:
                problem = _validate(rtype, name, key, value, c.defaults)
                if problem is not None:
                    error = ApiError(ErrorCode.invalid_config, problem)
                    break
                current[key] = value or ""
            elif op == DELETE:
                current.pop(key, None)
                value = None
            else:
                error = ApiError(ErrorCode.invalid_request, f"Unknown config operation {op}")
                break
            mine.append(
                r.ConfigRecord(resource_type=rtype, resource_name=name, name=key, value=value)
            )
        if error is not None:
            out.append((rtype, name, error))
            continue
        records.extend(mine)
        out.append((rtype, name, ApiError.none()))
    if validate_only:
        return Result([], out)
    touched = _min_isr_scope(records)
    if touched is not None and c.elr_min_isr() is not None:
        # KIP-966: the eligible replicas follow a new min.insync.replicas (Kafka's
        # handleMinIsrUpdate), in the image these config records make
        delta = MetadataDelta(c.image)
        for rec in records:
            delta.replay(rec)
        more = _elr_after_min_isr(c, delta.apply(), touched)
        return Result(records, out, atomic=False, more=more)
    return Result(records, out)


def _min_isr_scope(records: Sequence[Any]) -> set[str] | None:
    """The topics whose effective min.insync.replicas the records may change (an empty
    set: every topic - the cluster default changed); None: none."""
    topics: set[str] = set()
    every = False
    for rec in records:
        if rec.name != "min.insync.replicas":
            continue
        if rec.resource_type == TOPIC_RESOURCE:
            topics.add(rec.resource_name)
        elif rec.resource_type == BROKER_RESOURCE and rec.resource_name == "":
            every = True
    if every:
        return set()
    return topics or None


def _elr_after_min_isr(
    c: QuorumController, image: MetadataImage, topics: set[str]
) -> Iterator[Any]:
    """For each partition of ``topics`` (all when empty), its ELR as the new
    min.insync.replicas of ``image`` makes it: cleared where the ISR is at or above
    it."""
    min_isr = c.elr_min_isr(image)
    if min_isr is None:
        return
    for t in list(image.topics.values()):
        if topics and t.name not in topics:
            continue
        wanted = min_isr(t.name)
        for idx, info in t.partitions.items():
            if not info.isr:
                continue  # offline: its eligible replicas are all it has
            elr, last_known = eligible_after(info, info.isr, wanted)
            if (elr, last_known) != (info.elr, info.last_known_elr):
                yield r.PartitionChangeRecord(
                    partition_id=idx,
                    topic_id=t.topic_id,
                    eligible_leader_replicas=elr if elr != info.elr else None,
                    last_known_elr=last_known if last_known != info.last_known_elr else None,
                )


def alter_configs(
    c: QuorumController,
    resources: Sequence[tuple[int, str, Sequence[tuple[str, str | None]]]],
    validate_only: bool,
) -> Result[list[tuple[int, str, ApiError]]]:
    """The legacy AlterConfigs (API 33, still served by Kafka 4.x): each resource's
    dynamic configs become exactly the given set; keys left out are deleted. Results
    come in the order of the request."""
    named = [(rtype, name) for rtype, name, _ in resources]
    refusals: dict[int, ApiError] = {}
    changes: list[ConfigChange] = []
    for i, (rtype, name, configs) in enumerate(resources):
        keys = [k for k, _ in configs]
        if named.count((rtype, name)) > 1:
            refusals[i] = ApiError(ErrorCode.invalid_request, "Duplicate resource.")
        elif len(set(keys)) != len(keys):
            dup = sorted({k for k in keys if keys.count(k) > 1})
            refusals[i] = ApiError(ErrorCode.invalid_request, f"Duplicate key(s): {dup}")
        elif any(v is None for _, v in configs):
            nulls = [k for k, v in configs if v is None]
            refusals[i] = ApiError(ErrorCode.invalid_request, f"Null value not supported: {nulls}")
        else:
            current = c.image.configs.get((rtype, name), {})
            ops: list[tuple[str, int, str | None]] = [(k, SET, v) for k, v in configs]
            ops += [(k, DELETE, None) for k in sorted(current) if k not in set(keys)]
            changes.append((rtype, name, ops))
    result = incremental_alter_configs(c, changes, validate_only)
    applied = iter(result.response)
    out = [
        (rtype, name, refusals[i]) if i in refusals else next(applied)
        for i, (rtype, name, _) in enumerate(resources)
    ]
    return Result(result.records, out, atomic=result.atomic, more=result.more)
