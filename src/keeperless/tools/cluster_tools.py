"""`cluster unregister`, `log-dirs --describe` and `features describe`, as Kafka's tools."""

from __future__ import annotations

import json
from typing import Any, TextIO

from keeperless.metadata.features import (
    FEATURE_BOOTSTRAP,
    FEATURE_DEPENDENCIES,
    FEATURE_ORDER,
    LATEST_PRODUCTION_METADATA_VERSION,
    METADATA_VERSION_FEATURE,
    default_feature_levels,
    describe_level,
    known_metadata_version,
    metadata_version_for_release,
    release_for_level,
)
from keeperless.protocol.apis import ApiKey
from keeperless.tools.client import ToolError, call, exception_class, parse_servers, refusal

__all__ = [
    "describe_features",
    "describe_log_dirs",
    "elect_leaders",
    "feature_dependencies",
    "unregister_broker",
    "update_features",
    "version_mapping",
]

NOT_CONTROLLER = 41


def _hosted(servers: list[tuple[str, int]], broker_id: int) -> list[str]:
    """The partitions ("topic-p") whose replicas include ``broker_id``."""
    body = {"topics": None, "allow_auto_topic_creation": False,
            "include_topic_authorized_operations": False}  # fmt: skip
    md = call(servers, ApiKey.METADATA, 12, body)
    return sorted(
        (f"{t.name}-{p.partition_index}" for t in md.topics for p in t.partitions
         if broker_id in p.replica_nodes),
        key=lambda k: (k.rsplit("-", 1)[0], int(k.rsplit("-", 1)[1])),
    )  # fmt: skip


def unregister_broker(bootstrap: str, broker_id: int, out: TextIO) -> int:
    """Kafka's kafka-cluster.sh unregister; then, beyond Kafka's tool, a warning naming
    the partitions the broker still holds replicas of (they are not moved: each stays
    under-replicated, readable from its other replicas, until it is reassigned)."""
    servers = parse_servers(bootstrap, "--bootstrap-server")
    resp = call(servers, ApiKey.UNREGISTER_BROKER, 0, {"broker_id": broker_id}, timeout_s=40)
    if int(resp.error_code) != 0:
        raise ToolError(resp.error_message or resp.error_code.name)
    print(f"Broker {broker_id} is no longer registered.", file=out)
    try:
        hosted = _hosted(servers, broker_id)
    except (ToolError, OSError):
        return 0  # the unregistration is done; the warning is best effort
    if hosted:
        shown = ", ".join(hosted[:10]) + (
            f" and {len(hosted) - 10} more" if len(hosted) > 10 else ""
        )
        print(
            f"WARNING: broker {broker_id} still holds replicas of {len(hosted)} "
            f"partition(s): {shown}. They stay under-replicated until they are reassigned "
            "to registered brokers (kafka-reassign-partitions.sh); drain a broker before "
            "unregistering it.",
            file=out,
        )
    return 0


def _brokers(servers: list[tuple[str, int]]) -> dict[int, tuple[str, int]]:
    md = call(
        servers,
        ApiKey.METADATA,
        12,
        {
            "topics": [],
            "allow_auto_topic_creation": False,
            "include_topic_authorized_operations": False,
        },
    )
    return {b.node_id: (b.host, b.port) for b in md.brokers}


def describe_log_dirs(
    bootstrap: str, broker_list: str | None, topic_list: str | None, out: TextIO
) -> int:
    servers = parse_servers(bootstrap, "--bootstrap-server")
    brokers = _brokers(servers)
    wanted = sorted(brokers) if not broker_list else [int(b) for b in broker_list.split(",")]
    missing = [b for b in wanted if b not in brokers]
    if missing:
        raise ToolError(f"brokers {','.join(map(str, missing))} are not live in the cluster")
    topics = set(topic_list.split(",")) if topic_list else None
    print("Querying brokers for log directories information", file=out)
    result = []
    for b in wanted:
        resp = call([brokers[b]], ApiKey.DESCRIBE_LOG_DIRS, 4, {"topics": None})
        if int(resp.error_code) != 0:  # v3+: the whole request refused
            why = refusal(resp.error_code)
            raise ToolError(f"broker {b} refused to describe its log directories: {why}")
        dirs = []
        for d in resp.results:
            dirs.append(
                {
                    # as Kafka's LogDirsCommand: the exception's class name
                    "error": None if int(d.error_code) == 0 else exception_class(d.error_code),
                    "logDir": d.log_dir,
                    "partitions": [
                        {
                            "isFuture": p.is_future_key,
                            "offsetLag": p.offset_lag,
                            "partition": f"{t.name}-{p.partition_index}",
                            "size": p.partition_size,
                        }
                        for t in d.topics
                        if topics is None or t.name in topics
                        for p in t.partitions
                    ],
                }
            )
        result.append({"broker": b, "logDirs": dirs})
    print(f"Received log directory information from brokers {','.join(map(str, wanted))}", file=out)
    print(json.dumps({"brokers": result, "version": 1}, separators=(",", ":")), file=out)
    return 0


def describe_features(servers: list[tuple[str, int]], out: TextIO) -> int:
    resp: Any = call(
        servers,
        ApiKey.API_VERSIONS,
        3,
        {"client_software_name": "keeperless", "client_software_version": "tool"},
    )
    finalized = {f.name: f.max_version_level for f in resp.finalized_features}
    for f in sorted(resp.supported_features, key=lambda f: f.name):
        level = finalized.get(f.name)

        def name(v: int, feature: str = f.name) -> str:
            return release_for_level(v) if feature == "metadata.version" else str(v)

        print(
            f"Feature: {f.name}\tSupportedMinVersion: {name(f.min_version)}\t"
            f"SupportedMaxVersion: {name(f.max_version)}\tFinalizedVersionLevel: "
            f"{name(level) if level is not None else 0}\tEpoch: "  # (Kafka: 0 if not finalized)
            f"{resp.finalized_features_epoch}",
            file=out,
        )
    return 0


def _call_active(
    servers: list[tuple[str, int]], api_key: int, version: int, body: dict[str, Any]
) -> Any:
    """Brokers forward to the active controller; with --bootstrap-controller, ask each
    controller until the active one answers."""
    resp: Any = None
    for server in servers:
        resp = call([server], api_key, version, body, timeout_s=70)
        if int(resp.error_code) != NOT_CONTROLLER:
            return resp
    return resp


def feature_levels(
    metadata: str | None, release: str | None, features: list[str] | None, upgrade: bool
) -> list[tuple[str, int]]:
    """--release-version RELEASE (metadata.version and every other feature at its
    default for that release, as Kafka's FeatureCommand; an upgrade does not send a
    feature to 0), or --metadata RELEASE and --feature NAME=LEVEL, as (feature, level)."""
    if release is not None and (metadata is not None or features):
        raise ToolError("Can not specify `release-version` with other feature flags.")
    out: list[tuple[str, int]] = []
    for flag, value in (("--metadata", metadata), ("--release-version", release)):
        if value is not None:
            try:
                out.append(("metadata.version", metadata_version_for_release(value)))
            except ValueError as e:
                raise ToolError(f"{flag}: {e}") from None
    if release is not None:
        defaults = default_feature_levels(out[0][1])
        out += [(f, lv) for f, lv in defaults.items() if lv > 0 or not upgrade]
    names = {f for f, _ in out}
    for item in features or ():
        name, sep, level = item.partition("=")
        if not sep or not level.strip().lstrip("-").isdigit():
            raise ToolError(f"--feature {item!r}: expected NAME=LEVEL, e.g. metadata.version=21")
        if name.strip() in names:
            raise ToolError(f"Feature {name.strip()} was specified more than once.")
        names.add(name.strip())
        out.append((name.strip(), int(level)))
    if not out:
        raise ToolError("one of --metadata, --release-version or --feature is required")
    return out


def update_features(
    servers: list[tuple[str, int]],
    levels: list[tuple[str, int]],
    upgrade_type: int,
    dry_run: bool,
    out: TextIO,
) -> int:
    """kafka-features upgrade/downgrade: one line per feature, exit 1 if any failed."""
    verb = "upgrade" if upgrade_type == 1 else "downgrade"
    body = {
        "timeout": 60_000,
        "feature_updates": [
            {"feature": f, "max_version_level": level, "upgrade_type": upgrade_type}
            for f, level in levels
        ],
        "validate_only": dry_run,
    }
    resp = _call_active(servers, 57, 1, body)
    wanted = dict(levels)
    if int(resp.error_code) != 0:
        raise ToolError(
            f"Could not {verb} {', '.join(wanted)}: {resp.error_message or resp.error_code.name}"
        )
    failed = 0
    for res in sorted(resp.results, key=lambda r: str(r.feature)):  # by name, as Kafka's
        level = wanted.get(res.feature)
        done = "can be" if dry_run else "was"
        if int(res.error_code) == 0 and level == 0:
            print(f"{res.feature} {done} disabled.", file=out)
        elif int(res.error_code) == 0:
            print(f"{res.feature} {done} {verb}d to {level}.", file=out)
        else:
            failed += 1
            message = res.error_message or res.error_code.name
            what = "disable" if level == 0 else f"{verb}"
            target = "" if level == 0 else f" to {level}"
            helper = "Can not" if dry_run else "Could not"
            print(f"{helper} {what} {res.feature}{target}. {message}", file=out)
    if failed:
        raise ToolError(f"{failed} out of {len(resp.results)} operation(s) failed.")
    return 0


def version_mapping(release: str | None, out: TextIO) -> int:
    """kafka-storage.sh / kafka-features.sh version-mapping: metadata.version and the
    default level of every other feature for a release (the latest production one if
    none is named)."""
    if release is None:
        level = LATEST_PRODUCTION_METADATA_VERSION
    else:
        try:
            level = metadata_version_for_release(release)
        except ValueError as e:
            raise ToolError(f"--release-version: {e}") from None
    print(f"metadata.version={level} ({release_for_level(level)})", file=out)
    for name, feature_level in default_feature_levels(level, kraft=True).items():
        print(f"{name}={feature_level}", file=out)
    return 0


def feature_dependencies(specs: list[str], out: TextIO) -> int:
    """kafka-storage.sh / kafka-features.sh feature-dependencies --feature NAME=LEVEL:
    the levels of other features each one needs (KIP-1022), in Kafka's words."""
    for spec in specs:
        name, sep, value = (x.strip() for x in spec.partition("="))
        if not sep or not value.isdigit():
            raise ToolError(f"--feature {spec!r}: expected NAME=LEVEL, e.g. kraft.version=1")
        level = int(value)
        if name == METADATA_VERSION_FEATURE:
            if not known_metadata_version(level):
                raise ToolError(f"Unknown metadata.version {level}")
            print(f"{describe_level(name, level)} has no dependencies.", file=out)
            continue
        if name not in FEATURE_ORDER:
            raise ToolError(
                f"Unknown feature: {name}. Known features are: "
                f"{', '.join(sorted((METADATA_VERSION_FEATURE, *FEATURE_ORDER)))}"
            )
        levels = [0, *(lv for f, lv in FEATURE_BOOTSTRAP if f == name)]
        if level not in levels:
            raise ToolError(
                f"No feature:{name} with feature level {level}; its levels are "
                f"{min(levels)}-{max(levels)}"
            )
        needs = FEATURE_DEPENDENCIES.get((name, level), {})
        if not needs:
            print(f"{name}={level} has no dependencies.", file=out)
            continue
        print(f"{name}={level} requires:", file=out)
        for dep, dep_level in needs.items():
            print(f"    {describe_level(dep, dep_level)}", file=out)
    return 0


def election_partitions(
    topic: str | None, partition: int | None, all_partitions: bool, json_file: str | None
) -> list[tuple[str, int]] | None:
    """What --topic/--partition, --all-topic-partitions or --path-to-json-file name."""
    given = (topic is not None) + (json_file is not None) + all_partitions
    if given != 1:
        raise ToolError(
            "exactly one of --topic, --all-topic-partitions or --path-to-json-file is required"
        )
    if partition is not None and topic is None:
        raise ToolError("--partition needs --topic")
    if all_partitions:
        return None
    if json_file is not None:
        try:
            with open(json_file) as f:
                doc = json.load(f)
            return [(str(p["topic"]), int(p["partition"])) for p in doc["partitions"]]
        except OSError as e:
            raise ToolError(f"--path-to-json-file {json_file}: {e.strerror}") from None
        except (ValueError, KeyError, TypeError):
            raise ToolError(
                f"--path-to-json-file {json_file}: expected "
                '{"partitions": [{"topic": "t", "partition": 0}, ...]}'
            ) from None
    assert topic is not None
    if partition is not None:
        return [(topic, partition)]
    return [(topic, -1)]  # every partition of the topic, looked up when electing


def elect_leaders(
    servers: list[tuple[str, int]],
    election_type: str,
    partitions: list[tuple[str, int]] | None,
    out: TextIO,
) -> int:
    kind = election_type.upper()
    if kind not in ("PREFERRED", "UNCLEAN"):
        raise ToolError(f"--election-type {election_type!r}: expected PREFERRED or UNCLEAN")
    if partitions is not None and any(p < 0 for _, p in partitions):
        partitions = _expand_topics(servers, partitions)
    by_topic: dict[str, list[int]] = {}
    for t, p in partitions or ():
        by_topic.setdefault(t, []).append(p)
    body = {
        "election_type": 0 if kind == "PREFERRED" else 1,
        "topic_partitions": None
        if partitions is None
        else [{"topic": t, "partitions": ps} for t, ps in by_topic.items()],
        "timeout": 60_000,
    }
    resp = _call_active(servers, 43, 2, body)
    if int(resp.error_code) != 0:
        raise ToolError(f"Leader election ({kind}) failed: {resp.error_code.name}")
    done, noop, failed = [], [], []
    for res in resp.replica_election_results:
        for pr in res.partition_result:
            name = f"{res.topic}-{pr.partition_id}"
            code = int(pr.error_code)
            if code == 0:
                done.append(name)
            elif code == 84:  # ELECTION_NOT_NEEDED
                noop.append(name)
            else:
                failed.append((name, pr.error_message or pr.error_code.name))
    if done:
        print(
            f"Successfully completed leader election ({kind}) for partitions {', '.join(done)}",
            file=out,
        )
    if noop:
        print(f"Valid replica already elected for partitions {', '.join(noop)}", file=out)
    for name, message in failed:
        print(
            f"Error completing leader election ({kind}) for partition: {name}: {message}", file=out
        )
    if failed:
        raise ToolError(f"{len(failed)} replica(s) could not be elected")
    if not (done or noop):
        print(f"No partition needed a {kind.lower()} leader election", file=out)
    return 0


def _expand_topics(
    servers: list[tuple[str, int]], partitions: list[tuple[str, int]]
) -> list[tuple[str, int]]:
    """--topic without --partition: every partition of the topic."""
    names = sorted({t for t, p in partitions if p < 0})
    md = call(
        servers,
        ApiKey.METADATA,
        12,
        {
            "topics": [{"name": t, "topic_id": None} for t in names],
            "allow_auto_topic_creation": False,
            "include_topic_authorized_operations": False,
        },
    )
    out = [(t, p) for t, p in partitions if p >= 0]
    for t in md.topics:
        if int(t.error_code) != 0:
            raise ToolError(f"Topic '{t.name}' does not exist")
        out.extend((t.name, p.partition_index) for p in t.partitions)
    return out
