"""`metadata-shell`: browse a metadata image as a file system, like Kafka's metadata shell.

The image comes from a snapshot file, from a metadata log directory (its newest snapshot
plus the log after it), or from a live controller quorum (fetched as an observer would).
Commands: ls, cd, pwd, cat, find, tree, history, help, exit.
"""

from __future__ import annotations

import cmd
import contextlib
import json
import shlex
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, TextIO

import keeperless
from keeperless.metadata.codec import record_to_json
from keeperless.metadata.image import MetadataDelta, MetadataImage
from keeperless.metadata.snapshot import image_records
from keeperless.protocol.apis import ApiKey
from keeperless.runtime.metadata_log import decode_entry, iter_entry
from keeperless.storage.meta_properties import uuid_to_kafka
from keeperless.tools.client import ToolError

__all__ = [
    "MetadataShell",
    "build_tree",
    "load_directory",
    "load_from_quorum",
    "load_snapshot",
    "run_shell",
]

Tree = dict[str, Any]  # a directory: name -> Tree | str (file contents)


def _replay(records: Iterable[Any], image: MetadataImage | None = None) -> MetadataImage:
    delta = MetadataDelta(image or MetadataImage())
    for r in records:
        delta.replay(r)
    return delta.apply()


def load_snapshot(path: Path) -> MetadataImage:
    if not path.exists():
        raise ToolError(f"--snapshot {path} does not exist")
    return _replay(iter_entry(path.read_bytes()))


def load_directory(path: Path) -> MetadataImage:
    """The newest snapshot in a metadata log directory plus every batch after it."""
    from keeperless.runtime.raft_log import FileRaftLog

    log_dir = (
        path if path.name.startswith("__cluster_metadata") else (path / "__cluster_metadata-0")
    )
    if not log_dir.is_dir():
        raise ToolError(f"--directory {path} holds no __cluster_metadata-0 log")
    raft_log = FileRaftLog(log_dir, read_only=True)
    try:
        image = MetadataImage()
        if raft_log.snapshot_id is not None:
            image = _replay(iter_entry(raft_log.snapshot_data()))
        for e in raft_log.read(raft_log.start_offset, 2**62):
            if not e.control:
                image = _replay(decode_entry(e.data), image)
        return image
    finally:
        raft_log.close()


def load_from_quorum(servers: list[tuple[str, int]]) -> tuple[MetadataImage, int, int]:
    """Fetch the committed metadata from the active controller, as an observer would:
    (image, leader id, epoch)."""
    import datetime

    from keeperless.protocol.records import complete_batches
    from keeperless.tools.client import call
    from keeperless.tools.quorum import describe_quorum

    cl = call(
        servers,
        ApiKey.DESCRIBE_CLUSTER,
        1,
        {"include_cluster_authorized_operations": False, "endpoint_type": 2},
    )
    leader = describe_quorum(servers)
    addrs = {b.broker_id: (b.host, b.port) for b in cl.brokers}
    target = [addrs.get(leader.leader_id, servers[0])]
    image = MetadataImage()
    offset = 0
    # the epoch of the last record (or snapshot) read, as a follower sends it: with -1
    # past offset 0 the leader sees a divergence inside its snapshot and points at the
    # snapshot again, for ever (the shell spun at 70% CPU once a snapshot existed)
    last_epoch = -1
    while offset < leader.high_watermark:
        resp = call(
            target,
            ApiKey.FETCH,
            12,
            {
                "replica_id": -1,
                "max_wait": datetime.timedelta(0),
                "min_bytes": 0,
                "max_bytes": 8 << 20,
                "isolation_level": 0,
                "session_id": 0,
                "session_epoch": -1,
                "topics": [
                    {
                        "topic": "__cluster_metadata",
                        "partitions": [
                            {
                                "partition": 0,
                                "current_leader_epoch": leader.leader_epoch,
                                "fetch_offset": offset,
                                "last_fetched_epoch": last_epoch,
                                "log_start_offset": -1,
                                "partition_max_bytes": 8 << 20,
                            }
                        ],
                    }
                ],
                "forgotten_topics_data": [],
                "rack_id": "",
            },
        )
        p = resp.responses[0].partitions[0]
        if p.snapshot_id.end_offset >= 0:
            if offset == p.snapshot_id.end_offset and last_epoch == p.snapshot_id.epoch:
                raise ToolError(
                    f"the leader keeps pointing at snapshot {p.snapshot_id.end_offset}-"
                    f"{p.snapshot_id.epoch} although it was loaded"
                )
            image, offset = _fetch_snapshot(target, leader, p.snapshot_id)
            last_epoch = p.snapshot_id.epoch
            continue
        data = bytes(p.records or b"")
        if not data:
            break
        for pos, h in complete_batches(data):
            if h.last_offset >= leader.high_watermark:
                return image, leader.leader_id, leader.leader_epoch
            if not h.is_control:
                image = _replay(decode_entry(data[pos : pos + h.size]), image)
            offset = h.last_offset + 1
            last_epoch = h.partition_leader_epoch
    return image, leader.leader_id, leader.leader_epoch


def _fetch_snapshot(
    target: list[tuple[str, int]], leader: Any, sid: Any
) -> tuple[MetadataImage, int]:
    from keeperless.tools.client import call

    data = bytearray()
    while True:
        resp = call(
            target,
            ApiKey.FETCH_SNAPSHOT,
            1,
            {
                "replica_id": -1,
                "max_bytes": 8 << 20,
                "topics": [
                    {
                        "name": "__cluster_metadata",
                        "partitions": [
                            {
                                "partition": 0,
                                "current_leader_epoch": leader.leader_epoch,
                                "snapshot_id": {"end_offset": sid.end_offset, "epoch": sid.epoch},
                                "position": len(data),
                            }
                        ],
                    }
                ],
            },
        )
        p = resp.topics[0].partitions[0]
        if int(p.error_code) != 0:
            raise ToolError(f"FetchSnapshot failed: {p.error_code.name}")
        data += bytes(p.unaligned_records or b"")
        if len(data) >= p.size:
            return _replay(iter_entry(bytes(data))), sid.end_offset


def _quota_tree(image: MetadataImage) -> Tree:
    """/clientQuotas/<type>/<name>[/<type>/<name>...]/<key> = value."""
    out: Tree = {}
    for entity, values in image.client_quotas.items():
        node = out
        for etype, name in entity:
            node = node.setdefault(etype, {}).setdefault(name or "<default>", {})
        for key, value in values.items():
            node[key] = str(value)
    return out


def voters_json(voters: Any, kraft_version: int | None) -> str:
    """/metadataQuorum/voters: the quorum's kraft.version and voter set (KIP-853), as
    kafka-metadata-quorum describes voters."""
    from keeperless.storage.meta_properties import uuid_to_kafka

    listed = [
        {
            "id": v.id,
            "directoryId": None if v.directory_id is None else uuid_to_kafka(v.directory_id),
            "endpoints": [str(e) for e in v.endpoints],
        }
        for v in voters or ()
    ]
    return json.dumps({"kraftVersion": kraft_version or 0, "voters": listed}, indent=2)


def log_voters(path: Path) -> str:
    """The latest voter set of a metadata log directory or snapshot file (static
    quorums keep none in the log: their voters are controller.quorum.voters)."""
    from keeperless.raft.voters import voters_in_batch, voters_in_snapshot

    if path.is_file():
        version, voters = voters_in_snapshot(path.read_bytes())
        return voters_json(voters, version)
    from keeperless.runtime.raft_log import FileRaftLog

    log_dir = path if path.name.startswith("__cluster_metadata") else path / "__cluster_metadata-0"
    raft_log = FileRaftLog(log_dir, read_only=True)
    try:
        version, voters = (None, None)
        if raft_log.snapshot_id is not None:
            version, voters = voters_in_snapshot(raft_log.snapshot_data())
        for e in raft_log.read(raft_log.start_offset, 2**62):
            if e.control:
                v, vs = voters_in_batch(e.data)
                version = v if v is not None else version
                voters = vs if vs is not None else voters
        return voters_json(voters, version)
    finally:
        raft_log.close()


def build_tree(image: MetadataImage, leader: str, voters: str = "") -> Tree:
    """The virtual file system of an image; files hold Kafka-style JSON."""

    def js(rec: Any) -> str:
        return json.dumps(record_to_json(rec, rec.HIGHEST_VERSION)["data"], indent=2)

    by_kind: dict[str, list[Any]] = {}
    for rec in image_records(image):
        by_kind.setdefault(type(rec).__name__, []).append(rec)
    brokers: Tree = {}
    for rec in by_kind.get("RegisterBrokerRecord", []):
        b = image.brokers[rec.broker_id]
        brokers[str(rec.broker_id)] = {"registration": js(rec), "isFenced": str(b.fenced).lower()}
    topics: Tree = {}
    topic_ids: Tree = {}
    for t in image.topics.values():
        tid = uuid_to_kafka(t.topic_id)
        node: Tree = {"id": tid, "name": t.name}
        for rec in by_kind.get("PartitionRecord", []):
            if rec.topic_id == t.topic_id:
                node[str(rec.partition_id)] = {"data": js(rec)}
        topics[t.name] = node
        topic_ids[tid] = node
    configs: Tree = {}
    kinds = {2: "topic", 4: "broker"}
    for (rtype, rname), entries in image.configs.items():
        group = configs.setdefault(kinds.get(rtype, str(rtype)), {})
        group[rname or "<default>"] = {k: v for k, v in entries.items()}
    return {
        "brokers": brokers,
        "topics": topics,
        "topicIds": topic_ids,
        "configs": configs,
        "features": {k: str(v) for k, v in image.features.items()},
        "acls": {
            "byId": {
                uuid_to_kafka(rec.id): js(rec)
                for rec in by_kind.get("AccessControlEntryRecord", [])
            }
        },
        "clientQuotas": _quota_tree(image),
        # Kafka's DelegationTokenImageNode: the tokens' information (never an HMAC)
        "delegationToken": {
            rec.token_id: js(rec) for rec in by_kind.get("DelegationTokenRecord", [])
        },
        "metadataQuorum": {"leader": leader, **({"voters": voters} if voters else {})},
        "local": {"version": keeperless.__version__, "commitId": "unknown"},
    }


class MetadataShell(cmd.Cmd):
    prompt = "[ /]: "

    def __init__(self, tree: Tree, out: TextIO) -> None:
        super().__init__(stdout=out)
        self.tree = tree
        self.cwd: list[str] = []
        self.out = out
        self.history: list[str] = []
        self.errors = 0  # a one-shot command that failed exits 1
        self._update_prompt()

    # -- paths --------------------------------------------------------------------------

    def _resolve(self, path: str) -> list[str]:
        parts = [] if path.startswith("/") else list(self.cwd)
        for p in path.split("/"):
            if p in ("", "."):
                continue
            if p == "..":
                if parts:
                    parts.pop()
            else:
                parts.append(p)
        return parts

    def _node(self, parts: list[str]) -> Any:
        node: Any = self.tree
        for p in parts:
            if not isinstance(node, dict) or p not in node:
                raise KeyError("/" + "/".join(parts))
            node = node[p]
        return node

    def _update_prompt(self) -> None:
        self.prompt = f"[ /{'/'.join(self.cwd)}]: "

    def _say(self, text: str) -> None:
        print(text, file=self.out)

    def _err(self, text: str) -> None:
        self.errors += 1
        print(text, file=sys.stderr)

    def onecmd(self, line: str) -> bool:
        """Commands separated by ';' run in turn (cd brokers/1 ; cat registration)."""
        if ";" in line:
            return any(
                [super(MetadataShell, self).onecmd(part.strip()) for part in line.split(";")]
            )
        return super().onecmd(line)

    def precmd(self, line: str) -> str:
        if line.strip():
            self.history.append(line)
        return line

    # -- commands -----------------------------------------------------------------------

    def do_ls(self, arg: str) -> None:
        """ls [path...]: list a directory (or name a file)."""
        targets = shlex.split(arg) or ["."]
        for t in targets:
            try:
                node = self._node(self._resolve(t))
            except KeyError as e:
                self._err(f"ls: {t}: no such file or directory ({e.args[0]})")
                continue
            if isinstance(node, dict):
                if len(targets) > 1:
                    self._say(f"{t}:")
                for name in sorted(node):
                    self._say(name)
            else:
                self._say(t)

    def do_cd(self, arg: str) -> None:
        """cd [path]: change directory (default /)."""
        parts = self._resolve(arg.strip() or "/")
        try:
            node = self._node(parts)
        except KeyError:
            self._err(f"cd: {arg}: no such directory")
            return
        if not isinstance(node, dict):
            self._err(f"cd: {arg}: not a directory")
            return
        self.cwd = parts
        self._update_prompt()

    def do_pwd(self, arg: str) -> None:
        """pwd: print the current directory."""
        self._say("/" + "/".join(self.cwd))

    def do_cat(self, arg: str) -> None:
        """cat path...: print files."""
        for t in shlex.split(arg):
            try:
                node = self._node(self._resolve(t))
            except KeyError:
                self._err(f"cat: {t}: no such file")
                continue
            if isinstance(node, dict):
                self._err(f"cat: {t}: is a directory")
            else:
                self._say(str(node))

    def _walk(self, parts: list[str], node: Any) -> Iterator[tuple[list[str], Any]]:
        yield parts, node
        if isinstance(node, dict):
            for name in sorted(node):
                yield from self._walk([*parts, name], node[name])

    def do_find(self, arg: str) -> None:
        """find [path]: every path below a directory."""
        parts = self._resolve(arg.strip() or ".")
        try:
            node = self._node(parts)
        except KeyError:
            self._err(f"find: {arg}: no such file or directory")
            return
        for p, _ in self._walk(parts, node):
            self._say("/" + "/".join(p))

    def do_tree(self, arg: str) -> None:
        """tree [path]: a directory and everything below it, indented."""
        parts = self._resolve(arg.strip() or ".")
        try:
            node = self._node(parts)
        except KeyError:
            self._err(f"tree: {arg}: no such file or directory")
            return
        for p, n in self._walk(parts, node):
            depth = len(p) - len(parts)
            name = p[-1] if p else "/"
            if isinstance(n, dict):
                self._say("  " * depth + name + ":")
            else:
                self._say("  " * depth + f"{name}: {str(n).replace(chr(10), ' ')}")

    def do_history(self, arg: str) -> None:
        """history: the commands typed so far."""
        for i, line in enumerate(self.history, 1):
            self._say(f"{i:>4}  {line}")

    def do_exit(self, arg: str) -> bool:
        """exit: leave the shell."""
        return True

    do_quit = do_exit
    do_EOF = do_exit

    def default(self, line: str) -> None:
        self._err(f"Unknown command {line.split()[0]!r}; type help for the list")

    def emptyline(self) -> bool:
        return False

    def completedefault(self, text: str, line: str, begidx: int, endidx: int) -> list[str]:
        head, _, partial = text.rpartition("/")
        try:
            node = self._node(self._resolve(head or ("." if not text.startswith("/") else "/")))
        except KeyError:
            return []
        if not isinstance(node, dict):
            return []
        prefix = head + "/" if head or text.startswith("/") else ""
        return [
            prefix + name + ("/" if isinstance(node[name], dict) else "")
            for name in sorted(node)
            if name.startswith(partial)
        ]


def run_shell(args: Any, out: TextIO) -> int:
    """Entry point of `keeperless metadata-shell`."""
    sources = [s for s in (args.snapshot, args.directory, args.bootstrap_controller) if s]
    if len(sources) != 1:
        raise ToolError("give exactly one of --snapshot, --directory, --bootstrap-controller")
    if args.snapshot:
        image = load_snapshot(Path(args.snapshot))
        leader = "unknown: this view comes from a snapshot file, not from a live quorum"
        voters = log_voters(Path(args.snapshot))
    elif args.directory:
        image = load_directory(Path(args.directory))
        leader = "unknown: this view comes from a log directory, not from a live quorum"
        voters = log_voters(Path(args.directory))
    else:
        from keeperless.tools.client import parse_servers
        from keeperless.tools.quorum import describe_quorum_nodes

        servers = parse_servers(args.bootstrap_controller, "--bootstrap-controller")
        image, leader_id, epoch = load_from_quorum(servers)
        leader = f"LeaderAndEpoch(leaderId={leader_id}, epoch={epoch})"
        p, nodes = describe_quorum_nodes(servers)
        voters = json.dumps(
            {
                "voters": [
                    {
                        "id": v.replica_id,
                        "directoryId": _dir_text(v.replica_directory_id),
                        "endpoints": nodes.get(v.replica_id, []),
                    }
                    for v in p.current_voters
                ]
            },
            indent=2,
        )
    shell = MetadataShell(build_tree(image, leader, voters), out)
    command = [c for c in (args.shell_command or []) if c != "--"]
    if command:
        shell.onecmd(shlex.join(command))
        return 1 if shell.errors else 0
    try:
        import readline

        hist = Path.home() / ".keeperless_metadata_shell_history"
        if hist.exists():
            readline.read_history_file(hist)
        readline.set_completer_delims(" \t")
    except (ImportError, OSError):
        readline = None  # type: ignore[assignment]
    shell.cmdloop("keeperless metadata shell: ls, cd, pwd, cat, find, tree, history, help, exit")
    if readline is not None:
        with contextlib.suppress(OSError):
            readline.write_history_file(hist)
    return 0


def _dir_text(d: Any) -> str | None:
    import uuid as _uuid

    from keeperless.storage.meta_properties import uuid_to_kafka

    return None if d is None or d == _uuid.UUID(int=0) else uuid_to_kafka(d)
