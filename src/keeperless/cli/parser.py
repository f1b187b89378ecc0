"""The argument parser of the `keeperless` command and of Kafka's script names."""

from __future__ import annotations

import argparse
import sys
from typing import Any, NoReturn

__all__ = ["COMMANDS", "as_script", "build_parser", "help_hint"]

# Kafka's script -> the keeperless tool (and the words it starts with)
COMMANDS: dict[str, tuple[str, ...]] = {
    "kafka-storage.sh": ("storage",),
    "kafka-server-start.sh": ("server", "start"),
    "kafka-server-stop.sh": ("server", "stop"),
    "kafka-topics.sh": ("topics",),
    "kafka-configs.sh": ("configs",),
    "kafka-console-producer.sh": ("console-producer",),
    "kafka-console-consumer.sh": ("console-consumer",),
    "kafka-consumer-groups.sh": ("consumer-groups",),
    "kafka-share-groups.sh": ("share-groups",),
    "kafka-metadata-quorum.sh": ("metadata-quorum",),
    "kafka-metadata-shell.sh": ("metadata-shell",),
    "kafka-dump-log.sh": ("dump-log",),
    "kafka-cluster.sh": ("cluster",),
    "kafka-features.sh": ("features",),
    "kafka-leader-election.sh": ("leader-election",),
    "kafka-log-dirs.sh": ("log-dirs",),
    "kafka-delete-records.sh": ("delete-records",),
    "kafka-transactions.sh": ("transactions",),
    "kafka-acls.sh": ("acls",),
    "kafka-delegation-tokens.sh": ("delegation-tokens",),
    "kafka-reassign-partitions.sh": ("reassign-partitions",),
    "connect-distributed.sh": ("connect-distributed",),
}

# set by main() when run as one of Kafka's scripts: ("keeperless topics", "kafka-topics.sh")
SCRIPT: list[tuple[str, str]] = []


def as_script(script: str | None) -> None:
    """Name errors' help after Kafka's script ``script`` (from the entry points, or
    KEEPERLESS_SCRIPT set by the scripts in bin/)."""
    if script in COMMANDS:
        SCRIPT[:] = [(" ".join(("keeperless", *COMMANDS[script])), script)]


def help_hint(prog: str) -> str:
    """The help command an error points to: the subcommand's, under its Kafka name when
    run as a Kafka script."""
    for words, script in SCRIPT:
        if prog == words:
            return f"{script} --help"
        if prog.startswith(words + " "):
            return f"{script} {prog[len(words) + 1 :]} --help"
    return f"{prog} --help"


def _connection_flags(
    p: argparse.ArgumentParser, controller: bool = True, under: bool = False
) -> None:
    """--bootstrap-server, --bootstrap-controller, --command-config. ``under``: flags of
    a subcommand whose parent takes them too (Kafka's tools take them before the
    subcommand); unset, they leave the parent's value alone."""
    kw: dict[str, object] = {"default": argparse.SUPPRESS} if under else {}
    p.add_argument("--bootstrap-server", help="host:port of brokers", **kw)  # type: ignore[arg-type]
    if controller:
        p.add_argument("--bootstrap-controller", help="host:port of controllers", **kw)  # type: ignore[arg-type]
    p.add_argument("--command-config", help="client properties file", **kw)  # type: ignore[arg-type]


class _Parser(argparse.ArgumentParser):
    """Kafka's tools fail with one line and exit 1 (argparse prints the usage, exits 2)."""

    def error(self, message: str) -> NoReturn:
        print(f"ERROR: {message} (see {help_hint(self.prog)})", file=sys.stderr)
        raise SystemExit(1)

    def format_usage(self) -> str:
        return _under_script(super().format_usage())

    def format_help(self) -> str:
        return _under_script(super().format_help())


def _under_script(text: str) -> str:
    """A usage under Kafka's script name when run as one (``usage: kafka-topics.sh``)."""
    for words, script in SCRIPT:
        if text.startswith("usage: " + words):
            return "usage: " + script + text[len("usage: " + words) :]
    return text


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="keeperless", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)

    st = sub.add_parser("storage", help="format and inspect log directories")
    st_sub = st.add_subparsers(dest="storage_cmd", required=True)
    st_sub.add_parser("random-uuid", help="print a new cluster id")
    fmt = st_sub.add_parser("format", help="format the log directories of a node")
    fmt.add_argument("-t", "--cluster-id", required=True)
    fmt.add_argument("-c", "--config", required=True)
    fmt.add_argument("--release-version", "-r", default=None)
    fmt.add_argument("--ignore-formatted", "-g", action="store_true")
    fmt.add_argument("--override", action="append", metavar="KEY=VALUE")
    quorum = fmt.add_mutually_exclusive_group()
    quorum.add_argument(
        "--standalone",
        "-s",
        action="store_true",
        help="a dynamic quorum (KIP-853) whose only voter is this controller",
    )
    fmt.add_argument(
        "--add-scram",
        "-S",
        action="append",
        default=[],
        metavar="MECHANISM=[name=USER,password=PASSWORD]",
        help="a SCRAM credential in the bootstrap metadata (a secured cluster's first user)",
    )
    fmt.add_argument(
        "--feature",
        "-f",
        action="append",
        default=[],
        metavar="NAME=LEVEL",
        help="a feature level in the bootstrap metadata, e.g. eligible.leader.replicas.version=1",
    )
    quorum.add_argument(
        "--initial-controllers",
        "-I",
        metavar="ID@HOST:PORT:DIRECTORY_ID,...",
        help="the first voters of a dynamic quorum (the same on every node formatted)",
    )
    quorum.add_argument(
        "--no-initial-controllers",
        "-N",
        action="store_true",
        help="a controller (or broker) that joins a dynamic quorum later",
    )
    vm = st_sub.add_parser("version-mapping", help="feature levels of a release")
    vm.add_argument("--release-version", "-r", default=None)
    _feature_dependencies_parser(st_sub)
    info = st_sub.add_parser("info", help="show how log directories are formatted")
    info.add_argument("-c", "--config", required=True)
    info.add_argument("--override", action="append", metavar="KEY=VALUE")

    sv = sub.add_parser("server", help="run a node")
    sv_sub = sv.add_subparsers(dest="server_cmd", required=True)
    start = sv_sub.add_parser("start", help="start a node from server.properties")
    start.add_argument("config")
    start.add_argument(
        "-daemon",
        "--daemon",
        dest="daemon",
        action="store_true",
        help="run in the background, output in $LOG_DIR/kafkaServer.out (default ./logs)",
    )
    start.add_argument("--override", action="append", metavar="KEY=VALUE")
    stop = sv_sub.add_parser("stop", help="stop the nodes running on this machine (SIGTERM)")
    stop.add_argument("--node-id", type=int, help="only the node with this node.id")
    stop.add_argument("--process-role", choices=["broker", "controller"])

    cd = sub.add_parser("connect-distributed", help="run a Kafka Connect-compatible worker")
    cd.add_argument("config", help="connect-distributed.properties")
    cd.add_argument("--override", action="append", metavar="KEY=VALUE",
                    help="a worker setting, over the file's")  # fmt: skip

    tp = sub.add_parser("topics", help="create, list, describe, alter and delete topics")
    _connection_flags(tp, controller=False)
    for flag in ("--create", "--list", "--describe", "--alter", "--delete"):
        tp.add_argument(flag, action="store_true")
    tp.add_argument("--topic", help="a topic; a regular expression except with --create")
    tp.add_argument("--partitions", type=int)
    tp.add_argument("--replication-factor", type=int)
    tp.add_argument("--replica-assignment",
                    help="--create: each partition's replicas, 1:2:3,2:3:4 (no --partitions, "
                    "no --replication-factor)")  # fmt: skip
    tp.add_argument("--config", action="append", metavar="KEY=VALUE")
    for flag in (
        "--if-not-exists",
        "--if-exists",
        "--exclude-internal",
        "--topics-with-overrides",
        "--under-replicated-partitions",
        "--unavailable-partitions",
        "--under-min-isr-partitions",
        "--at-min-isr-partitions",
        "--version",
    ):
        tp.add_argument(flag, action="store_true")

    pr = sub.add_parser("console-producer", help="produce lines of standard input")
    _connection_flags(pr, controller=False)
    pr.add_argument("--topic", required=True)
    pr.add_argument(
        "--property",
        action="append",
        metavar="KEY=VALUE",
        help="parse.key, key.separator, parse.headers, headers.delimiter, ...",
    )
    pr.add_argument("--producer-property", action="append", metavar="KEY=VALUE")
    pr.add_argument("--producer.config", dest="producer_config")

    co = sub.add_parser("console-consumer", help="print records of a topic")
    _connection_flags(co, controller=False)
    co.add_argument("--topic")
    co.add_argument("--include", help="a regular expression of the topics to consume")
    co.add_argument("--isolation-level", help="read_committed or read_uncommitted")
    co.add_argument("--formatter", help="only Kafka's DefaultMessageFormatter")
    co.add_argument("--group")
    co.add_argument("--from-beginning", action="store_true")
    co.add_argument("--partition", type=int)
    co.add_argument("--offset")
    co.add_argument("--max-messages", type=int)
    co.add_argument("--timeout-ms", type=int)
    co.add_argument(
        "--property",
        action="append",
        metavar="KEY=VALUE",
        help="print.key, print.headers, print.timestamp, key.separator, ...",
    )
    co.add_argument("--consumer-property", action="append", metavar="KEY=VALUE")
    co.add_argument("--consumer.config", dest="consumer_config")

    cg = sub.add_parser("consumer-groups", help="list, describe, reset and delete groups")
    _connection_flags(cg, controller=False)
    for flag in (
        "--list",
        "--describe",
        "--reset-offsets",
        "--delete",
        "--delete-offsets",
        "--execute",
        "--dry-run",
        "--to-earliest",
        "--to-latest",
        "--to-current",
        "--all-groups",
        "--all-topics",
        "--members",
        "--offsets",
        "--verbose",
    ):
        cg.add_argument(flag, action="store_true")
    cg.add_argument("--group", action="append", help="a group (repeatable)")
    cg.add_argument("--topic", action="append", help="TOPIC or TOPIC:PARTITION[,...] (repeatable)")
    cg.add_argument(
        "--state",
        nargs="?",
        const="",
        help="with --describe: the group's state; with --list: states to show (comma-separated)",
    )
    cg.add_argument("--to-offset", type=int)
    cg.add_argument("--shift-by", type=int)
    cg.add_argument("--to-datetime", help="YYYY-MM-DDTHH:mm:SS.sss[+hh:mm|Z]")
    cg.add_argument("--by-duration", help="PnDTnHnMnS: that long ago")

    sg = sub.add_parser("share-groups", help="list and describe share groups (KIP-932)")
    _connection_flags(sg, controller=False)
    for flag, what in (
        ("--list", "list the share groups"),
        ("--describe", "describe share groups: their offsets (the default), members or state"),
        ("--delete", "delete share groups with no member, and their state"),
        ("--reset-offsets", "set a share group's start offsets (no member may be in it); "
                            "needs --dry-run or --execute"),
        ("--delete-offsets", "delete a share group's state of whole topics (--topic)"),
        ("--members", "with --describe: each member, its client and partitions"),
        ("--offsets", "with --describe: each share-partition's start offset and lag"),
        ("--verbose", "with --describe: also leader epochs, member and group epochs"),
        ("--execute", "with --reset-offsets: write the new start offsets"),
        ("--dry-run", "with --reset-offsets: only show the new start offsets"),
        ("--to-earliest", "reset to each partition's earliest offset"),
        ("--to-latest", "reset to each partition's latest offset"),
        ("--to-current", "reset to the share group's current start offsets"),
        ("--all-topics", "reset every topic the share group has state for"),
        ("--all-groups", "with --describe or --delete: every share group"),
    ):  # fmt: skip
        sg.add_argument(flag, action="store_true", help=what)
    sg.add_argument("--timeout", type=int, metavar="MS",
                    help="how long to wait for each request, in ms (default 30000)")  # fmt: skip
    sg.add_argument("--group", action="append", help="a share group (repeatable)")
    sg.add_argument("--topic", action="append", help="TOPIC or TOPIC:PARTITION[,...] (repeatable)")
    sg.add_argument("--to-offset", type=int, help="reset to this offset")
    sg.add_argument("--shift-by", type=int, help="move the start offsets by N (may be negative)")
    sg.add_argument("--to-datetime", help="reset to the first offset at or after "
                                          "YYYY-MM-DDTHH:mm:SS.sss[+hh:mm|Z]")  # fmt: skip
    sg.add_argument("--by-duration", help="reset to the offsets of PnDTnHnMnS ago")
    sg.add_argument("--state", nargs="?", const="",
                    help="--describe: the group's state; --list: the states to show")  # fmt: skip

    cf = sub.add_parser("configs", help="describe and alter configs, quotas and SCRAM users")
    _connection_flags(cf)
    cf.add_argument("--describe", action="store_true")
    cf.add_argument("--alter", action="store_true")
    cf.add_argument("--all", action="store_true")
    cf.add_argument(
        "--entity-type",
        action="append",
        help="topics, brokers, broker-loggers, groups, users or clients",
    )
    cf.add_argument("--entity-name", action="append")
    cf.add_argument("--entity-default", action="store_true")
    for flag in ("--topic", "--broker", "--user", "--client"):
        cf.add_argument(flag)
    for flag in ("--broker-defaults", "--user-defaults", "--client-defaults"):
        cf.add_argument(flag, action="store_true")
    cf.add_argument("--add-config", action="append", metavar="K=V[,K=[V1,V2]]")
    cf.add_argument("--delete-config", action="append", metavar="K[,K]")

    mq = sub.add_parser("metadata-quorum", help="describe the metadata quorum")
    _connection_flags(mq)
    mq_sub = mq.add_subparsers(dest="quorum_cmd", required=True)
    desc = mq_sub.add_parser("describe", help="leader, epoch, high watermark, replicas")
    which = desc.add_mutually_exclusive_group(required=True)
    which.add_argument("--status", action="store_true")
    which.add_argument("--replication", action="store_true")
    desc.add_argument(
        "--human-readable", action="store_true", help="with --replication: times as 'N ms ago'"
    )
    add = mq_sub.add_parser("add-controller", help="make a caught-up controller a voter")
    add.add_argument("--dry-run", action="store_true")
    add.add_argument(
        "--command-config",
        dest="controller_config",
        help="the properties file of the controller to add (also accepted before the command)",
    )
    rm = mq_sub.add_parser("remove-controller", help="remove a voter from the quorum")
    rm.add_argument("--controller-id", "-i", type=int, required=True)
    rm.add_argument("--controller-directory-id", "-d", required=True)
    rm.add_argument("--dry-run", action="store_true")

    cl = sub.add_parser("cluster", help="cluster-level information")
    cl_sub = cl.add_subparsers(dest="cluster_cmd", required=True)
    cid = cl_sub.add_parser("cluster-id", help="print the cluster id")
    _connection_flags(cid)

    ms = sub.add_parser("metadata-shell", help="browse the metadata image as a file system")
    ms.add_argument("--snapshot", help="a .checkpoint snapshot file")
    ms.add_argument("--directory", help="a metadata log directory")
    ms.add_argument("--bootstrap-controller", help="host:port of controllers")
    ms.add_argument(
        "shell_command",
        metavar="command",
        nargs=argparse.REMAINDER,
        help="run one command and exit, e.g. -- ls /brokers",
    )

    un = cl_sub.add_parser("unregister", help="remove a stopped broker's registration")
    _connection_flags(un, controller=False)
    un.add_argument("--id", type=int, required=True)

    ft = sub.add_parser("features", help="metadata.version and other feature levels")
    _connection_flags(ft)
    ft_sub = ft.add_subparsers(dest="features_cmd", required=True)
    fd = ft_sub.add_parser("describe", help="supported and finalized feature levels")
    _connection_flags(fd, under=True)
    fv = ft_sub.add_parser("version-mapping", help="feature levels of a release")
    fv.add_argument("--release-version", default=None)
    _feature_dependencies_parser(ft_sub)
    fdis = ft_sub.add_parser("disable", help="disable (finalize at level 0) features")
    _connection_flags(fdis, under=True)
    fdis.add_argument("--feature", action="append", required=True, help="a feature name")
    fdis.add_argument("--dry-run", action="store_true", help="validate only")
    for verb in ("upgrade", "downgrade"):
        fu = ft_sub.add_parser(verb, help=f"{verb} finalized feature levels (metadata.version)")
        _connection_flags(fu, under=True)
        fu.add_argument("--metadata", help="a release for metadata.version, e.g. 3.9 or 3.7-IV2")
        fu.add_argument("--release-version", help="the same as --metadata")
        fu.add_argument("--feature", action="append", help="NAME=LEVEL, e.g. metadata.version=21")
        fu.add_argument("--dry-run", action="store_true", help="validate only")
        if verb == "downgrade":
            fu.add_argument(
                "--unsafe",
                action="store_true",
                help="allow a downgrade that could lose metadata (refused in this version)",
            )

    le = sub.add_parser("leader-election", help="elect preferred or unclean partition leaders")
    _connection_flags(le, controller=False)
    le.add_argument("--election-type", required=True, help="PREFERRED or UNCLEAN")
    le.add_argument("--topic")
    le.add_argument("--partition", type=int)
    le.add_argument("--all-topic-partitions", action="store_true")
    le.add_argument("--path-to-json-file", help='{"partitions": [{"topic": "t", "partition": 0}]}')

    ld = sub.add_parser("log-dirs", help="describe the log directories of brokers")
    _connection_flags(ld, controller=False)
    ld.add_argument("--describe", action="store_true", required=True)
    ld.add_argument("--broker-list")
    ld.add_argument("--topic-list")

    dr = sub.add_parser("delete-records", help="delete records up to an offset (DeleteRecords)")
    _connection_flags(dr, controller=False)
    dr.add_argument(
        "--offset-json-file",
        required=True,
        help='{"partitions": [{"topic": "t", "partition": 0, "offset": 3}], "version": 1}',
    )

    ac = sub.add_parser("acls", help="add, remove and list ACLs (kafka-acls.sh)")
    _connection_flags(ac, controller=False)
    for flag in ("--add", "--remove", "--list", "--cluster", "--producer", "--consumer",
                 "--idempotent", "--force"):  # fmt: skip
        ac.add_argument(flag, action="store_true")
    for flag in ("--topic", "--group", "--transactional-id", "--allow-principal",
                 "--deny-principal", "--allow-host", "--deny-host", "--operation"):  # fmt: skip
        ac.add_argument(flag, action="append")
    ac.add_argument("--resource-pattern-type", help="literal, prefixed, match or any")
    ac.add_argument("--principal", help="--list: only this principal's ACLs")

    rp = sub.add_parser(
        "reassign-partitions",
        help="move partitions between brokers (kafka-reassign-partitions.sh)",
    )
    _connection_flags(rp, controller=False)
    for flag in ("--generate", "--execute", "--verify", "--cancel", "--list", "--additional",
                 "--preserve-throttles", "--disable-rack-aware"):  # fmt: skip
        rp.add_argument(flag, action="store_true")
    rp.add_argument("--topics-to-move-json-file", help='{"topics": [{"topic": "t"}], "version": 1}')
    rp.add_argument("--broker-list", help="ids of the brokers to move to (--generate)")
    rp.add_argument("--reassignment-json-file", help="a reassignment (--generate's proposal)")
    rp.add_argument("--throttle", type=int,
                    help="--execute: bytes/s of the catch-up between brokers, until --verify "
                         "sees the reassignment done")  # fmt: skip
    rp.add_argument("--replica-alter-log-dirs-throttle", type=int,
                    help="--execute: bytes/s of replica moves between log directories")  # fmt: skip
    rp.add_argument("--timeout", type=int, default=10000, help="ms")

    dt = sub.add_parser(
        "delegation-tokens",
        help="create, renew, expire and describe delegation tokens (kafka-delegation-tokens.sh)",
    )
    _connection_flags(dt, controller=False)
    for flag in ("--create", "--renew", "--expire", "--describe"):
        dt.add_argument(flag, action="store_true")
    dt.add_argument("--owner-principal", action="append", help="principalType:name")
    dt.add_argument("--renewer-principal", action="append", help="principalType:name")
    dt.add_argument("--max-life-time-period", type=int,
                    help="ms; -1: delegation.token.max.lifetime.ms")  # fmt: skip
    dt.add_argument("--renew-time-period", type=int,
                    help="ms; -1: delegation.token.expiry.time.ms")  # fmt: skip
    dt.add_argument("--expiry-time-period", type=int, help="ms; -1: at once")
    dt.add_argument("--hmac", help="the token's HMAC (base64)")

    tx = sub.add_parser("transactions", help="list, describe, abort and find hanging transactions")
    _connection_flags(tx, controller=False)
    tx_sub = tx.add_subparsers(dest="txn_cmd", required=True)
    txl = tx_sub.add_parser("list", help="the transactions of every coordinator")
    txl.add_argument("--duration-filter", type=int, default=-1,
                     help="only transactions open at least this many ms")  # fmt: skip
    txl.add_argument("--transactional-id-pattern", help="a regular expression of the ids")
    txd = tx_sub.add_parser("describe", help="one transactional id's transaction")
    txd.add_argument("--transactional-id", required=True)
    txp = tx_sub.add_parser("describe-producers", help="the producers of a partition")
    txp.add_argument("--topic", required=True)
    txp.add_argument("--partition", type=int, required=True)
    txp.add_argument("--broker-id", type=int, help="(the partition's leader is asked)")
    txa = tx_sub.add_parser("abort", help="abort an open transaction on a partition")
    txa.add_argument("--topic", required=True)
    txa.add_argument("--partition", type=int, required=True)
    txa.add_argument("--start-offset", type=int)
    txa.add_argument("--producer-id", type=int)
    txa.add_argument("--producer-epoch", type=int)
    txa.add_argument("--coordinator-epoch", type=int)
    txh = tx_sub.add_parser("find-hanging", help="open transactions no coordinator completes")
    txh.add_argument("--broker-id", type=int)
    txh.add_argument("--topic")
    txh.add_argument("--partition", type=int)
    txh.add_argument("--max-transaction-timeout", type=int, default=15, help="minutes")
    for sp in (txl, txd, txp, txa, txh):
        _connection_flags(sp, controller=False, under=True)

    mz = sub.add_parser("migrate-zk", help="migrate a stopped ZooKeeper-mode Kafka cluster's "
                        "metadata into this controller's storage")  # fmt: skip
    mz.add_argument("--zookeeper-connect", required=True, metavar="HOST:PORT[/chroot]")
    mz.add_argument("-c", "--config", required=True, help="this node's server.properties")
    mz.add_argument("--dry-run", action="store_true", help="read and report; write nothing")
    mz.add_argument("--release-version", help="the metadata.version to format with")

    dl = sub.add_parser("dump-log", help="print log segments, metadata logs and snapshots")
    dl.add_argument("--files", required=True, nargs="+", help="files (comma-separated)")
    dl.add_argument("--skip-record-metadata", action="store_true")
    dl.add_argument("--cluster-metadata-decoder", action="store_true")
    dl.add_argument("--print-data-log", action="store_true")
    dl.add_argument("--deep-iteration", action="store_true")
    dl.add_argument("--offsets-decoder", action="store_true", help="decode __consumer_offsets")
    dl.add_argument(
        "--transaction-log-decoder", action="store_true", help="decode __transaction_state"
    )
    dl.add_argument(
        "--share-group-state-decoder", action="store_true", help="decode __share_group_state"
    )
    dl.add_argument("--max-bytes", type=int, help="read only the batches in the first N bytes")
    dl.add_argument("--key-decoder-class", help="not supported: keys print as UTF-8 text")
    dl.add_argument("--value-decoder-class", help="not supported: values print as UTF-8 text")
    return p


def _feature_dependencies_parser(sub: Any) -> None:
    """kafka-storage.sh / kafka-features.sh feature-dependencies (KIP-1022)."""
    fdp = sub.add_parser("feature-dependencies", help="what feature levels a level needs")
    fdp.add_argument(
        "--feature",
        action="append",
        required=True,
        help="NAME=LEVEL, e.g. eligible.leader.replicas.version=1 (repeatable)",
    )
