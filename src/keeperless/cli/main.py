"""The `keeperless` command: thin subcommands that parse flags and call the library."""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

from keeperless.server.config import ConfigError, load_config
from keeperless.storage.meta_properties import StorageError, random_kafka_uuid
from keeperless.tools.errors import ToolError

__all__ = ["main"]


def _fail(message: str) -> int:
    print(f"ERROR: {message}", file=sys.stderr)
    return 1


def _storage(args: argparse.Namespace) -> int:
    if args.storage_cmd == "random-uuid":
        print(random_kafka_uuid())
        return 0
    from keeperless.storage.format import format_storage, storage_info

    cfg = load_config(args.config, args.override or ())
    if args.storage_cmd == "format":
        res = format_storage(
            cfg.all_log_dirs,
            cfg.metadata_log_dir,
            cfg.node_id,
            args.cluster_id,
            args.release_version,
            args.ignore_formatted,
            int(time.time() * 1000),
        )
        for d in res.formatted:
            print(f"Formatting {d} with metadata.version level {res.metadata_version}.")
        for d in res.skipped:
            print(f"{d} is already formatted; skipping (--ignore-formatted).")
        return 0
    found = False
    for d, meta in storage_info(cfg.all_log_dirs):
        if meta is None:
            print(f"{d}: not formatted")
        else:
            found = True
            print(
                f"{d}: cluster.id={meta.cluster_id} node.id={meta.node_id} "
                f"directory.id={meta.directory_id} version={meta.version}"
            )
    return 0 if found else 1


def _server(args: argparse.Namespace) -> int:
    if args.server_cmd == "stop":
        from keeperless.tools.server_stop import stop_servers

        return stop_servers(args.node_id, args.process_role, sys.stdout)
    from keeperless.storage.format import check_storage

    cfg = load_config(args.config, args.override or ())
    cluster_id = check_storage(cfg.all_log_dirs, cfg.node_id, args.config)
    from keeperless.server.node import run_node

    return run_node(cfg, cluster_id)


def _command_config(path: str | None) -> dict[str, str]:
    if not path:
        return {}
    from keeperless._properties import parse_properties

    try:
        return parse_properties(Path(path).read_text(), path)
    except OSError as e:
        raise ToolError(f"--command-config {path}: {e.strerror}") from None


# tools that speak the protocol themselves (tools/client.py): plaintext only
_RAW_TOOLS = ("metadata-quorum", "features", "cluster", "log-dirs", "leader-election", "configs")


def _check_raw_command_config(args: argparse.Namespace) -> None:
    """--command-config of a tool with the raw client: read (a missing file is an error)
    and refuse what it cannot honour rather than ignoring it."""
    path = getattr(args, "command_config", None)
    if not path:
        return
    props = _command_config(path)
    protocol = props.get("security.protocol", "PLAINTEXT").strip().upper()
    if protocol != "PLAINTEXT":
        raise ToolError(
            f"--command-config {path}: security.protocol={protocol} is not supported by "
            f"{args.command} (it connects with PLAINTEXT only); point it at a PLAINTEXT "
            "listener"
        )


def _servers(args: argparse.Namespace) -> list[tuple[str, int]]:
    from keeperless.tools.client import parse_servers

    if getattr(args, "bootstrap_controller", None):
        return parse_servers(args.bootstrap_controller, "--bootstrap-controller")
    if getattr(args, "bootstrap_server", None):
        return parse_servers(args.bootstrap_server, "--bootstrap-server")
    raise ToolError("one of --bootstrap-server or --bootstrap-controller is required")


def _tools(args: argparse.Namespace) -> int:
    if args.command in _RAW_TOOLS:
        _check_raw_command_config(args)
    if args.command == "dump-log":
        from keeperless.tools.dump_log import dump_file

        ok = True
        # comma-separated as Kafka's, or several (a shell glob: --files dir/*.log)
        files = [f for arg in args.files for f in arg.split(",") if f.strip()]
        for f in files:
            path = Path(f.strip())
            if not path.exists():
                raise ToolError(f"--files: {path} does not exist")
            ok = (
                dump_file(
                    path,
                    sys.stdout,
                    args.cluster_metadata_decoder,
                    args.print_data_log,
                    args.deep_iteration,
                    args.skip_record_metadata,
                )
                and ok
            )
        return 0 if ok else 1
    if args.command == "metadata-quorum":
        from keeperless.tools.quorum import print_replication, print_status

        if args.replication:
            print_replication(_servers(args), sys.stdout)
        else:
            print_status(_servers(args), sys.stdout)
        return 0
    if args.command == "metadata-shell":
        from keeperless.tools.metadata_shell import run_shell

        return run_shell(args, sys.stdout)
    if args.command == "cluster":
        if args.cluster_cmd == "unregister":
            from keeperless.tools.cluster_tools import unregister_broker

            if not args.bootstrap_server:
                raise ToolError("--bootstrap-server is required")
            return unregister_broker(args.bootstrap_server, args.id, sys.stdout)
        from keeperless.tools.quorum import cluster_id

        print(f"Cluster ID: {cluster_id(_servers(args))}")
        return 0
    if args.command == "features":
        from keeperless.tools import cluster_tools

        if args.features_cmd == "describe":
            return cluster_tools.describe_features(_servers(args), sys.stdout)
        levels = cluster_tools.feature_levels(args.metadata, args.release_version, args.feature)
        upgrade_type = 1 if args.features_cmd == "upgrade" else 3 if args.unsafe else 2
        return cluster_tools.update_features(
            _servers(args), levels, upgrade_type, args.dry_run, sys.stdout
        )
    if args.command == "leader-election":
        from keeperless.tools import cluster_tools

        if not args.bootstrap_server:
            raise ToolError("--bootstrap-server is required")
        targets = cluster_tools.election_partitions(
            args.topic, args.partition, args.all_topic_partitions, args.path_to_json_file
        )
        return cluster_tools.elect_leaders(_servers(args), args.election_type, targets, sys.stdout)
    if args.command == "log-dirs":
        from keeperless.tools.cluster_tools import describe_log_dirs

        if not args.bootstrap_server:
            raise ToolError("--bootstrap-server is required")
        return describe_log_dirs(
            args.bootstrap_server, args.broker_list, args.topic_list, sys.stdout
        )
    if args.command == "configs":
        from keeperless.tools.configs import run_configs

        return run_configs(args, _servers(args), bool(args.bootstrap_controller), sys.stdout)
    if args.command == "topics" and args.version:
        import keeperless

        print(keeperless.__version__)
        return 0
    if not args.bootstrap_server:
        raise ToolError("--bootstrap-server is required")
    extra = _command_config(args.command_config)
    if args.command == "console-producer":
        from keeperless.tools.console import run_producer

        extra.update(_command_config(args.producer_config))
        return run_producer(args, extra, sys.stdin)
    if args.command == "console-consumer":
        from keeperless.tools.console import run_consumer

        extra.update(_command_config(args.consumer_config))
        return run_consumer(args, extra, sys.stdout)
    if args.command == "consumer-groups":
        from keeperless.tools.groups import run_consumer_groups

        return run_consumer_groups(args, extra, sys.stdout)
    from keeperless.tools.topics import run_topics

    return run_topics(args, extra, sys.stdout)


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
        print(f"ERROR: {message} (see {self.prog} --help)", file=sys.stderr)
        raise SystemExit(1)


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
    info = st_sub.add_parser("info", help="show how log directories are formatted")
    info.add_argument("-c", "--config", required=True)
    info.add_argument("--override", action="append", metavar="KEY=VALUE")

    sv = sub.add_parser("server", help="run a node")
    sv_sub = sv.add_subparsers(dest="server_cmd", required=True)
    start = sv_sub.add_parser("start", help="start a node from server.properties")
    start.add_argument("config")
    start.add_argument("--override", action="append", metavar="KEY=VALUE")
    stop = sv_sub.add_parser("stop", help="stop the nodes running on this machine (SIGTERM)")
    stop.add_argument("--node-id", type=int, help="only the node with this node.id")
    stop.add_argument("--process-role", choices=["broker", "controller"])

    tp = sub.add_parser("topics", help="create, list, describe, alter and delete topics")
    _connection_flags(tp, controller=False)
    for flag in ("--create", "--list", "--describe", "--alter", "--delete"):
        tp.add_argument(flag, action="store_true")
    tp.add_argument("--topic", help="a topic; a regular expression except with --create")
    tp.add_argument("--partitions", type=int)
    tp.add_argument("--replication-factor", type=int)
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

    cf = sub.add_parser("configs", help="describe and alter configs, quotas and SCRAM users")
    _connection_flags(cf)
    cf.add_argument("--describe", action="store_true")
    cf.add_argument("--alter", action="store_true")
    cf.add_argument("--all", action="store_true")
    cf.add_argument("--entity-type", action="append", help="topics, brokers, users or clients")
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

    dl = sub.add_parser("dump-log", help="print log segments, metadata logs and snapshots")
    dl.add_argument("--files", required=True, nargs="+", help="files (comma-separated)")
    dl.add_argument("--skip-record-metadata", action="store_true")
    dl.add_argument("--cluster-metadata-decoder", action="store_true")
    dl.add_argument("--print-data-log", action="store_true")
    dl.add_argument("--deep-iteration", action="store_true")
    return p


def _skip_hypothesis_hooks() -> None:
    """kio registers Hypothesis strategies for its types whenever Hypothesis is
    importable, which costs over a second at start-up in a development venv. The command
    never needs them, so make Hypothesis unimportable here unless it is already loaded."""
    if "hypothesis" not in sys.modules and "kio" not in sys.modules:
        sys.modules["hypothesis"] = None  # type: ignore[assignment]


def main(argv: Sequence[str] | None = None) -> int:
    _skip_hypothesis_hooks()
    words = list(sys.argv[1:] if argv is None else argv)
    if any(w == "--zookeeper" or w.startswith("--zookeeper=") for w in words):
        return _fail(
            "--zookeeper is not supported: keeperless has no ZooKeeper (as Kafka 4); "
            "use --bootstrap-server (or --bootstrap-controller)"
        )
    args = build_parser().parse_args(words)
    try:
        if args.command == "storage":
            return _storage(args)
        if args.command == "server":
            return _server(args)
        return _tools(args)
    except (ConfigError, StorageError, ToolError, ValueError) as e:
        return _fail(str(e))
    except BrokenPipeError:
        return 0
    except KeyboardInterrupt:
        return 130
    except Exception as e:  # a tool fails with one line, never a traceback
        if args.command == "server" or os.environ.get("KEEPERLESS_TRACEBACK"):
            raise
        return _fail(_one_line(e))


def _one_line(e: BaseException) -> str:
    """An unexpected failure of a tool (a client library's exception, a timeout, a lost
    connection) as one line; KEEPERLESS_TRACEBACK=1 shows the traceback instead."""
    if type(e).__module__.startswith("confluent_kafka") or type(e).__name__ == "KafkaException":
        from keeperless.tools.rdkafka import kafka_error_text

        return kafka_error_text(e)
    if isinstance(e, TimeoutError):
        return f"timed out: {e}" if str(e) else "timed out waiting for the cluster"
    if isinstance(e, OSError) and e.strerror:
        where = f" ({e.filename})" if e.filename else ""
        return f"{e.strerror}{where}"
    return f"{type(e).__name__}: {e}" if str(e) else type(e).__name__


if __name__ == "__main__":
    sys.exit(main())
