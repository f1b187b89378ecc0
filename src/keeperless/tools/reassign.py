"""`reassign-partitions`: Kafka's kafka-reassign-partitions.sh over Metadata,
AlterPartitionReassignments and ListPartitionReassignments - --generate a proposal for
moving topics to a broker list, --execute a reassignment JSON file (refused while others
run, unless --additional), --verify it, --cancel it, --list what runs - with Kafka's
JSON files and words."""

from __future__ import annotations

import json
import os
import random
import time
from pathlib import Path
from typing import Any, TextIO

from keeperless.protocol.apis import ApiKey
from keeperless.tools.client import ToolError, call

__all__ = ["check_reassign_args", "run_reassign"]

Servers = list[tuple[str, int]]
Assignment = dict[tuple[str, int], list[int]]

_VERIFY_WARNING = (
    "Warning: You must run --verify periodically, until the reassignment completes, to "
    "ensure the throttle is removed."
)
# Kafka's QuotaConfig keys the tool sets and clears
_BROKER_THROTTLES = ("leader.replication.throttled.rate", "follower.replication.throttled.rate",
                     "replica.alter.log.dirs.io.max.bytes.per.second")  # fmt: skip
_TOPIC_THROTTLES = ("leader.replication.throttled.replicas",
                    "follower.replication.throttled.replicas")  # fmt: skip
_TOPIC, _BROKER = 2, 4  # ConfigResource types

_ACTIONS = ("generate", "execute", "verify", "cancel", "list")
_CANNOT_EXECUTE = (
    "Cannot execute because there is an existing partition assignment.  Use --additional to "
    "override this and create a new partition assignment in addition to the existing one. "
    "The --additional flag can also be used to change the throttle by resubmitting the "
    "current reassignment."
)


def check_reassign_args(args: Any) -> str:
    actions = [a for a in _ACTIONS if getattr(args, a)]
    if len(actions) != 1:
        raise ToolError("Command must include exactly one action: --generate, --execute, "
                        "--verify, --cancel, --list")  # fmt: skip
    action = actions[0]
    if not args.bootstrap_server:
        raise ToolError('Missing required argument "[bootstrap-server]"')
    need = {"generate": ("topics_to_move_json_file", "broker_list"),
            "execute": ("reassignment_json_file",), "verify": ("reassignment_json_file",),
            "cancel": ("reassignment_json_file",), "list": ()}[action]  # fmt: skip
    for name in need:
        if not getattr(args, name):
            raise ToolError(f'Missing required argument "[{name.replace("_", "-")}]"')
    return action


def _tp(key: tuple[str, int]) -> str:
    return f"{key[0]}-{key[1]}"


def _json(assignment: Assignment) -> str:
    """Kafka's formatAsReassignmentJson."""
    parts = [{"topic": t, "partition": p, "replicas": r, "log_dirs": ["any"] * len(r)}
             for (t, p), r in sorted(assignment.items())]  # fmt: skip
    return json.dumps({"version": 1, "partitions": parts}, separators=(",", ":"))


def _read(path: str, flag: str) -> Any:
    try:
        return json.loads(Path(path).read_text())
    except OSError as e:
        raise ToolError(f"{flag} {path}: {e.strerror}") from None
    except json.JSONDecodeError as e:
        raise ToolError(f"{flag} {path}: not JSON ({e})") from None


# (topic, partition, broker) -> the log directory its replica is to move to
DirMoves = dict[tuple[str, int, int], str]


def _replica(key: tuple[str, int, int]) -> str:
    """Kafka's TopicPartitionReplica: topic-partition-broker."""
    return f"{key[0]}-{key[1]}-{key[2]}"


def _log_dirs(path: str) -> DirMoves:
    """The replicas of a reassignment file with a log directory other than "any"."""
    data = _read(path, "--reassignment-json-file")
    out: DirMoves = {}
    for p in data.get("partitions") or []:
        replicas = [int(b) for b in p["replicas"]]
        dirs = p.get("log_dirs")
        if dirs is None:
            continue
        if not isinstance(dirs, list) or len(dirs) != len(replicas):
            where = f"{p['topic']}-{p['partition']}"
            raise ToolError(f"Size of replicas list {replicas} is different from size of log "
                            f"dirs list {dirs} for partition {where}")  # fmt: skip
        for b, d in zip(replicas, dirs, strict=True):
            if d != "any":
                out[(str(p["topic"]), int(p["partition"]), b)] = str(d)
    return out


def _version_1(data: Any) -> None:
    """Kafka's files are version 1 (absent: 1); another version is refused in its words."""
    version = data.get("version", 1) if isinstance(data, dict) else 1
    if version != 1:
        raise ToolError(f"Not supported version field value {version}")


def _reassignment_file(path: str) -> Assignment:
    data = _read(path, "--reassignment-json-file")
    _version_1(data)
    parts = data.get("partitions") if isinstance(data, dict) else None
    if not isinstance(parts, list) or not parts:
        raise ToolError("Partition reassignment list cannot be empty")
    out: Assignment = {}
    dups = []
    for p in parts:
        try:
            key = (str(p["topic"]), int(p["partition"]))
            replicas = [int(b) for b in p["replicas"]]
        except (KeyError, TypeError, ValueError):
            raise ToolError(f"--reassignment-json-file {path}: each partition needs topic, "
                            f"partition and replicas: {json.dumps(p)}") from None  # fmt: skip
        if key in out:
            raise ToolError(f"Reassignment JSON file contains multiple entries for {_tp(key)}")
        if len(set(replicas)) != len(replicas):
            dups.append(f"{_tp(key)}: {replicas}")
        out[key] = replicas
    if dups:
        raise ToolError("Partition replica lists may not contain duplicate entries: "
                        + ", ".join(dups))  # fmt: skip
    return out


def _metadata(servers: Servers, topics: list[str]) -> Any:
    body = {"topics": [{"name": t, "topic_id": None} for t in topics],
            "allow_auto_topic_creation": False,
            "include_topic_authorized_operations": False}  # fmt: skip
    return call(servers, ApiKey.METADATA, 12, body)


def _current(servers: Servers, topics: list[str]) -> tuple[Assignment, list[int]]:
    """The topics' replica assignments and the registered brokers (unknown topics:
    ToolError, as Kafka's "Topic X not found.")."""
    md = _metadata(servers, sorted(set(topics)))
    out: Assignment = {}
    for t in md.topics:
        if t.error_code:
            raise ToolError(f"Topic {t.name} not found.")
        for p in t.partitions:
            out[(t.name, p.partition_index)] = list(p.replica_nodes)
    return out, sorted(b.node_id for b in md.brokers)


def _addresses(servers: Servers) -> dict[int, tuple[str, int]]:
    md = _metadata(servers, [])
    return {b.node_id: (b.host, b.port) for b in md.brokers}


def _move_dirs(servers: Servers, moves: DirMoves) -> set[tuple[str, int, int]]:
    """One AlterReplicaLogDirs to each broker of ``moves``: the replicas whose move
    started (the others are not on their broker yet, or failed)."""
    addresses = _addresses(servers)
    started: set[tuple[str, int, int]] = set()
    for broker in sorted({b for _, _, b in moves}):
        mine = {k: d for k, d in moves.items() if k[2] == broker}
        if broker not in addresses:
            continue
        by_dir: dict[str, dict[str, list[int]]] = {}
        for (t, p, _), d in sorted(mine.items()):
            by_dir.setdefault(d, {}).setdefault(t, []).append(p)
        body = {"dirs": [{"path": d, "topics": [{"name": t, "partitions": ps}
                                                for t, ps in ts.items()]}
                         for d, ts in by_dir.items()]}  # fmt: skip
        resp = call([addresses[broker]], ApiKey.ALTER_REPLICA_LOG_DIRS, 2, body)
        for t in resp.results:
            for p in t.partitions:
                key = (t.topic_name, p.partition_index, broker)
                if int(p.error_code) == 0:
                    started.add(key)
                elif int(p.error_code) != 9:  # REPLICA_NOT_AVAILABLE: not there yet
                    # Kafka's words, with the broker's error and the directory asked for
                    raise ToolError(f"Failed to alter dir for {_replica(key)}: "
                                    f"{p.error_code.name.upper()} ({mine.get(key)})")  # fmt: skip
    return started


def _execute_moves(servers: Servers, moves: DirMoves, timeout_ms: int, out: TextIO) -> None:
    """Kafka's executeMoves: AlterReplicaLogDirs again until every move has started (a
    replica new to its broker cannot move before it is there), or --timeout."""
    pending = dict(moves)
    deadline = time.monotonic() + timeout_ms / 1000
    while True:
        started = _move_dirs(servers, pending)
        for key in sorted(started):
            print(f"Successfully started moving log directory to {pending[key]} for replica "
                  f"{key[0]}-{key[1]} with broker {key[2]} ", file=out)  # fmt: skip
            del pending[key]
        if not pending:
            return
        if time.monotonic() >= deadline:
            raise ToolError(f"Timed out before log directory move"
                            f"{'' if len(pending) == 1 else 's'} could be started for: "
                            + ",".join(_replica(k) for k in sorted(pending)))  # fmt: skip
        time.sleep(0.1)


def _check_log_dirs(servers: Servers, moves: DirMoves) -> None:
    """Every log directory a move names is one its broker has, checked before anything
    is changed (Kafka's tool finds out only after the reassignment has started)."""
    addresses = _addresses(servers)
    for broker in sorted({b for _, _, b in moves}):
        if broker not in addresses:
            continue  # not live: Kafka's tool waits for it (--timeout)
        resp = call([addresses[broker]], ApiKey.DESCRIBE_LOG_DIRS, 4, {"topics": None})
        have = {os.path.normpath(d.log_dir) for d in resp.results if not int(d.error_code)}
        for key, path in sorted(moves.items()):
            wanted = {os.path.normpath(os.path.abspath(path)), os.path.realpath(path)}
            if key[2] == broker and not wanted & have:
                raise ToolError(f"Failed to alter dir for {_replica(key)}: LOG_DIR_NOT_FOUND "
                                f"({path}): broker {broker}'s log directories are "
                                f"{', '.join(sorted(have))}; nothing was changed")  # fmt: skip


def _move_states(servers: Servers, moves: DirMoves) -> tuple[list[str], bool]:
    """Kafka's findLogDirMoveStates and replicaMoveStatesToString: a line per replica,
    and whether some move is still running."""
    addresses = _addresses(servers)
    where: dict[tuple[str, int, int], tuple[str | None, str | None]] = {}
    for broker in sorted({b for _, _, b in moves}):
        if broker not in addresses:
            continue
        resp = call([addresses[broker]], ApiKey.DESCRIBE_LOG_DIRS, 4, {"topics": None})
        for d in resp.results:
            if int(d.error_code):
                continue
            for t in d.topics:
                for p in t.partitions:
                    key = (t.name, p.partition_index, broker)
                    cur, fut = where.get(key, (None, None))
                    if p.is_future_key:
                        fut = d.log_dir
                    else:
                        cur = d.log_dir
                    where[key] = (cur, fut)
    lines, active = [], False
    for key in sorted(moves):
        t, p, b = key
        target = moves[key]
        if key not in where:
            lines.append(f"Partition {t}-{p} cannot be found in any live log directory on "
                         f"broker {b}.")  # fmt: skip
            continue
        cur, fut = where[key]
        if cur is None:
            lines.append(f"Partition {t}-{p} is not found in any live log dir on broker {b}. "
                         "There is likely an offline log directory on the broker.")  # fmt: skip
        elif fut is not None:
            active = True
            if _same(fut, target):
                lines.append(f"Reassignment of replica {_replica(key)} is still in progress.")
            else:
                lines.append(f"Partition {t}-{p} on broker {b} is being moved to log dir {fut} "
                             f"instead of {target}.")  # fmt: skip
        elif _same(cur, target):
            lines.append(f"Reassignment of replica {_replica(key)} completed successfully.")
        else:
            lines.append(f"Partition {t}-{p} on broker {b} is not being moved from log dir "
                         f"{cur} to {target}.")  # fmt: skip
    return lines, active


def _same(a: str, b: str) -> bool:
    return os.path.normpath(os.path.abspath(a)) == os.path.normpath(os.path.abspath(b))


def _ongoing(servers: Servers) -> dict[tuple[str, int], Any]:
    resp = call(servers, ApiKey.LIST_PARTITION_REASSIGNMENTS, 0, {"timeout": 30_000,
                                                                  "topics": None})  # fmt: skip
    if resp.error_code:
        raise ToolError(resp.error_message or resp.error_code.name)
    return {(t.name, p.partition_index): p for t in resp.topics for p in t.partitions}


def _alter(servers: Servers, targets: dict[tuple[str, int], list[int] | None]) -> dict[str, str]:
    """Errors by partition ("topic-p": message) of one AlterPartitionReassignments."""
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for (t, p), replicas in sorted(targets.items()):
        by_topic.setdefault(t, []).append({"partition_index": p, "replicas": replicas})
    body = {"timeout": 30_000, "allow_replication_factor_change": True,
            "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()]}  # fmt: skip
    resp = call(servers, ApiKey.ALTER_PARTITION_REASSIGNMENTS, 0, body, timeout_s=40)
    if resp.error_code:
        raise ToolError(resp.error_message or resp.error_code.name)
    return {f"{t.name}-{p.partition_index}": p.error_message or p.error_code.name
            for t in resp.responses for p in t.partitions if p.error_code}  # fmt: skip


def _alter_configs(servers: Servers, changes: dict[tuple[int, str], dict[str, str | None]]) -> None:
    """One IncrementalAlterConfigs: each resource's keys SET to a value or DELETEd (None)."""
    resources = [
        {"resource_type": rtype, "resource_name": name,
         "configs": [{"name": k, "config_operation": 0 if v is not None else 1, "value": v}
                     for k, v in sorted(ops.items())]}
        for (rtype, name), ops in sorted(changes.items())
    ]  # fmt: skip
    if not resources:
        return
    body = {"resources": resources, "validate_only": False}
    resp = call(servers, ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, body, timeout_s=40)
    failed = [f"{r.resource_name}: {r.error_message or r.error_code.name}"
              for r in resp.responses if r.error_code]  # fmt: skip
    if failed:
        raise ToolError("Error setting throttles: " + "; ".join(failed))


def _set_throttles(
    servers: Servers,
    ongoing: dict[tuple[str, int], Any],
    targets: Assignment,
    current: Assignment,
    rate: int,
) -> None:
    """Kafka's modifyReassignmentThrottle: on each moving topic, the leader throttle on
    every source replica and the follower throttle on every new one (of this
    reassignment and those already running); the rate on every broker they involve."""
    moves: dict[tuple[str, int], tuple[set[int], set[int]]] = {}
    for key, r in ongoing.items():
        adding = set(r.adding_replicas)
        moves[key] = (set(r.replicas) - adding, adding)
    for key, replicas in targets.items():
        sources = moves[key][0] if key in moves else set(current[key])
        moves[key] = (sources, set(replicas) - sources)
    changes: dict[tuple[int, str], dict[str, str | None]] = {}
    brokers: set[int] = set()
    for topic in sorted({t for t, _ in moves}):
        mine = sorted((p, m) for (t, p), m in moves.items() if t == topic)
        leader = sorted({f"{p}:{b}" for p, (src, _) in mine for b in src})
        follower = sorted({f"{p}:{b}" for p, (_, dst) in mine for b in dst})
        changes[(_TOPIC, topic)] = {_TOPIC_THROTTLES[0]: ",".join(leader),
                                    _TOPIC_THROTTLES[1]: ",".join(follower)}  # fmt: skip
        for _, (src, dst) in mine:
            brokers |= src | dst
    for b in sorted(brokers):
        changes[(_BROKER, str(b))] = dict.fromkeys(_BROKER_THROTTLES[:2], str(rate))
    _alter_configs(servers, changes)


def _clear_throttles(
    servers: Servers, targets: Assignment, registered: list[int], out: TextIO
) -> None:
    """Kafka's clearAllThrottles: the broker throttles of every broker, the topic
    throttles of every topic of the reassignment."""
    brokers = sorted(set(registered) | {b for r in targets.values() for b in r})
    topics = sorted({t for t, _ in targets})
    print(f"Clearing broker-level throttles on broker{'' if len(brokers) == 1 else 's'} "
          f"{','.join(map(str, brokers))}", file=out)  # fmt: skip
    _alter_configs(servers, {(_BROKER, str(b)): dict.fromkeys(_BROKER_THROTTLES)
                             for b in brokers})  # fmt: skip
    print(f"Clearing topic-level throttles on topic{'' if len(topics) == 1 else 's'} "
          f"{','.join(topics)}", file=out)  # fmt: skip
    _alter_configs(servers, {(_TOPIC, t): dict.fromkeys(_TOPIC_THROTTLES) for t in topics})


def _lines(errors: dict[str, str]) -> str:
    return "\n".join(f"{k}: {v}" for k, v in sorted(errors.items()))


def _propose(current: Assignment, brokers: list[int]) -> Assignment:
    """Kafka's AdminUtils.assignReplicasToBrokers (rack-unaware): a random first broker,
    replicas spread by a shift that grows every full round."""
    out: Assignment = {}
    n = len(brokers)
    for topic in sorted({t for t, _ in current}):
        parts = sorted(p for t, p in current if t == topic)
        rf = len(current[(topic, parts[0])])
        if rf > n:
            raise ToolError(f"Replication factor: {rf} larger than available brokers: {n}.")
        start, shift = random.randrange(n), random.randrange(n)
        for p in parts:
            if p > 0 and p % n == 0:
                shift += 1
            first = (p + start) % n
            replicas = [brokers[first]]
            for j in range(rf - 1):
                replicas.append(brokers[(first + 1 + (shift + j) % (n - 1)) % n])
            out[(topic, p)] = replicas
    return out


def run_reassign(args: Any, servers: Servers, out: TextIO) -> int:
    action = check_reassign_args(args)
    if action == "list":
        ongoing = _ongoing(servers)
        if not ongoing:
            print("No partition reassignments found.", file=out)
            return 0
        print("Current partition reassignments:", file=out)
        for key in sorted(ongoing):
            p = ongoing[key]
            line = f"{_tp(key)}: replicas: {','.join(map(str, p.replicas))}."
            if p.adding_replicas:
                line += f" adding: {','.join(map(str, p.adding_replicas))}."
            if p.removing_replicas:
                line += f" removing: {','.join(map(str, p.removing_replicas))}."
            print(line, file=out)
        return 0
    if action == "generate":
        data = _read(args.topics_to_move_json_file, "--topics-to-move-json-file")
        _version_1(data)
        try:
            topics = [str(t["topic"]) for t in data["topics"]]
        except (KeyError, TypeError):
            raise ToolError('--topics-to-move-json-file: expected {"topics": [{"topic": '
                            '"name"}], "version": 1}') from None  # fmt: skip
        try:
            brokers = [int(b) for b in args.broker_list.split(",")]
        except ValueError:
            raise ToolError(
                f"--broker-list {args.broker_list!r}: expected ids like 1,2,3"
            ) from None
        if len(set(brokers)) != len(brokers):
            dup = sorted({b for b in brokers if brokers.count(b) > 1})
            raise ToolError(f"Broker list contains duplicate entries: {dup}")
        if len(set(topics)) != len(topics):
            dup_t = sorted({t for t in topics if topics.count(t) > 1})
            raise ToolError(f"List of topics to reassign contains duplicate entries: {dup_t}")
        current, registered = _current(servers, topics)
        proposed = _propose(current, [b for b in brokers if b in registered])
        print(f"Current partition replica assignment\n{_json(current)}\n", file=out)
        print(f"Proposed partition reassignment configuration\n{_json(proposed)}", file=out)
        return 0
    targets = _reassignment_file(args.reassignment_json_file)
    moves = _log_dirs(args.reassignment_json_file)
    if action == "execute":
        ongoing = _ongoing(servers)
        if not args.additional and ongoing:
            raise ToolError(_CANNOT_EXECUTE)
        for flag, value in (("--throttle", args.throttle),
                            ("--replica-alter-log-dirs-throttle",
                             args.replica_alter_log_dirs_throttle)):  # fmt: skip
            if value is not None and value < -1:
                raise ToolError(f"{flag} {value}: expected bytes per second (-1: none)")
        current, registered = _current(servers, [t for t, _ in targets])
        unknown = sorted({b for r in targets.values() for b in r} - set(registered))
        if unknown:
            raise ToolError(f"Unknown broker id {unknown[0]}")
        missing = sorted(set(targets) - set(current))
        if missing:
            raise ToolError("Unable to find partition: " + ", ".join(map(_tp, missing)))
        _check_log_dirs(servers, moves)
        mine = {k: v for k, v in current.items() if k in targets}
        print(f"Current partition replica assignment\n\n{_json(mine)}\n\n"
              "Save this to use as the --reassignment-json-file option during rollback",
              file=out)  # fmt: skip
        throttle = -1 if args.throttle is None else args.throttle
        dirs_throttle = (-1 if args.replica_alter_log_dirs_throttle is None
                         else args.replica_alter_log_dirs_throttle)  # fmt: skip
        if throttle >= 0 or dirs_throttle >= 0:
            print(_VERIFY_WARNING, file=out)
        if throttle >= 0:
            _set_throttles(servers, ongoing, targets, current, throttle)
            print(f"The inter-broker throttle limit was set to {throttle} B/s", file=out)
        if dirs_throttle >= 0:  # on the brokers of the log_dirs moves
            _alter_configs(servers, {(_BROKER, str(b)): {_BROKER_THROTTLES[2]: str(dirs_throttle)}
                                     for b in sorted({b for _, _, b in moves})})  # fmt: skip
            print(f"The replica-alter-dir throttle limit was set to {dirs_throttle} B/s",
                  file=out)  # fmt: skip
        errors = _alter(servers, {k: v for k, v in targets.items()})
        if errors:
            raise ToolError("Error reassigning partition(s):\n" + _lines(errors))
        names = ",".join(_tp(k) for k in sorted(targets))
        print(f"Successfully started partition reassignment{'' if len(targets) == 1 else 's'} "
              f"for {names}", file=out)  # fmt: skip
        if moves:
            _execute_moves(servers, moves, args.timeout, out)
        return 0
    ongoing = _ongoing(servers)
    if action == "cancel":
        active = sorted(k for k in targets if k in ongoing)
        if not active:
            print("None of the specified partition reassignments are active.", file=out)
        else:
            errors = _alter(servers, dict.fromkeys(active))
            if errors:
                raise ToolError("Error cancelling partition reassignment(s):\n" + _lines(errors))
            print(f"Successfully cancelled partition reassignment"
                  f"{'' if len(active) == 1 else 's'} for: {','.join(map(_tp, active))}",
                  file=out)  # fmt: skip
        if not args.preserve_throttles:
            _clear_throttles(servers, targets, _current(servers, [])[1], out)
        return 0
    current, registered = _current(servers, [t for t, _ in targets])
    print("Status of partition reassignment:", file=out)
    for key in sorted(targets):
        if key in ongoing:
            print(f"Reassignment of partition {_tp(key)} is still in progress.", file=out)
        elif current.get(key) == targets[key]:
            print(f"Reassignment of partition {_tp(key)} is completed.", file=out)
        else:
            have = ",".join(map(str, current.get(key, [])))
            want = ",".join(map(str, targets[key]))
            print(f"There is no active reassignment of partition {_tp(key)}, but replica set "
                  f"is {have} rather than {want}.", file=out)  # fmt: skip
    moving = False
    if moves:
        lines, moving = _move_states(servers, moves)
        print("\nReassignment of replicas:\n" + "\n".join(lines), file=out)
    if not args.preserve_throttles and not moving and not any(k in ongoing for k in targets):
        _clear_throttles(servers, targets, registered, out)
    return 0
