"""The `keeperless` command: thin subcommands that parse flags and call the library."""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from keeperless.cli.parser import as_script, build_parser, help_hint
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
    if args.storage_cmd == "version-mapping":
        from keeperless.tools.cluster_tools import version_mapping

        return version_mapping(args.release_version, sys.stdout)
    if args.storage_cmd == "feature-dependencies":
        from keeperless.tools.cluster_tools import feature_dependencies

        return feature_dependencies(args.feature, sys.stdout)
    from keeperless.storage.format import format_storage, storage_info

    cfg = load_config(args.config, args.override or ())
    if args.storage_cmd == "format":
        initial = _initial_controllers(args, cfg)
        res = format_storage(
            cfg.all_log_dirs,
            cfg.metadata_log_dir,
            cfg.node_id,
            args.cluster_id,
            args.release_version,
            args.ignore_formatted,
            int(time.time() * 1000),
            tuple(args.add_scram),
            tuple(args.feature),
            initial,
        )
        from keeperless.metadata.features import release_for_level

        release = release_for_level(res.metadata_version)
        for d in res.formatted:  # Kafka's Formatter's lines
            what = "data directory"
            if d == cfg.metadata_log_dir:
                what = "dynamic metadata voter directory" if initial else "metadata directory"
            print(f"Formatting {what} {d} with metadata.version {release}.")
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


def _initial_controllers(args: argparse.Namespace, cfg: Any) -> Any:
    """format --standalone / --initial-controllers / --no-initial-controllers (KIP-853):
    the first voters of a dynamic quorum, whose controllers name no
    controller.quorum.voters (they find the quorum by controller.quorum.bootstrap.servers),
    or None for a static quorum or a controller that joins later."""
    from keeperless.raft.voters import Endpoint, Voter, VoterSet
    from keeperless.storage.format import parse_dynamic_voters
    from keeperless.storage.meta_properties import uuid_from_kafka

    listener = cfg.controller_listener_names[0] if cfg.controller_listener_names else "CONTROLLER"
    static = [v.node_id for v in cfg.voters]
    given = args.initial_controllers is not None  # ("" is given, and refused as Kafka does)
    if given or args.standalone:
        flag = "--initial-controllers" if given else "--standalone"
        if static:
            raise ToolError(
                f"{flag} formats a dynamic quorum, but controller.quorum.voters is set (a "
                f"static quorum of {static}): remove controller.quorum.voters and set "
                "controller.quorum.bootstrap.servers instead, or format without " + flag
            )
    if given:
        try:
            return parse_dynamic_voters(args.initial_controllers, listener)
        except ValueError as e:
            raise ToolError(f"--initial-controllers: {e}") from None
    if args.standalone:
        if "controller" not in cfg.roles:
            raise ToolError("You can only use --standalone on a controller.")
        ep = cfg.advertised_controller_endpoint
        if ep is None:
            raise ToolError("No controller listeners found.")
        host = ep.host or "localhost"
        # a directory id as Kafka makes one: never starting with '-' (a tool would take
        # it for an option: remove-controller --controller-directory-id failed so)
        directory = uuid_from_kafka(random_kafka_uuid())
        return VoterSet.of([Voter(cfg.node_id, directory, (Endpoint(listener, host, ep.port),))])
    if not args.no_initial_controllers and "controller" in cfg.roles and not static:
        raise ToolError(
            "Because controller.quorum.voters is not set on this controller, you must specify "
            "one of the following: --standalone, --initial-controllers, or "
            "--no-initial-controllers."
        )
    return None


def _server(args: argparse.Namespace) -> int:
    if args.server_cmd == "stop":
        from keeperless.tools.server_stop import stop_servers

        return stop_servers(args.node_id, args.process_role, sys.stdout)
    import logging

    from keeperless.storage.format import check_storage

    cfg = load_config(args.config, args.override or ())
    # (the node's format: what checking its storage does - adopting a ZooKeeper-mode
    # broker's directories - is in its log)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    cluster_id = check_storage(cfg.all_log_dirs, cfg.node_id, args.config, cfg.metadata_log_dir)
    if args.daemon:
        return _daemon(args)
    from keeperless.runtime.open_files import raise_open_file_limit
    from keeperless.server.node import run_node

    raise_open_file_limit()
    return run_node(cfg, cluster_id)


def _connect(args: argparse.Namespace) -> int:
    from keeperless.connect.config import ConfigException, load_worker_config
    from keeperless.connect.worker import run_worker

    overrides = {}
    for o in args.override or ():
        key, sep, value = o.partition("=")
        if not sep:
            return _fail(f"--override {o!r}: expected key=value")
        overrides[key.strip()] = value
    try:
        cfg = load_worker_config(args.config, overrides)
    except ConfigException as e:
        return _fail(str(e))
    return run_worker(cfg)


def _daemon(args: argparse.Namespace) -> int:
    """kafka-server-start.sh -daemon: the node in its own session, its output appended to
    $LOG_DIR/kafkaServer.out (LOG_DIR defaults to ./logs, as Kafka's to its logs/), and
    return at once (after a glance that it did not die on start-up)."""
    import subprocess

    log_dir = Path(os.environ.get("LOG_DIR") or "logs").absolute()
    log_dir.mkdir(parents=True, exist_ok=True)
    out_path = log_dir / "kafkaServer.out"
    cmd = [sys.executable, "-m", "keeperless", "server", "start", str(Path(args.config).absolute())]
    for o in args.override or ():
        cmd += ["--override", o]
    with open(out_path, "ab") as out:
        proc = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
    try:
        code = proc.wait(0.5)
    except subprocess.TimeoutExpired:
        return 0
    tail = out_path.read_text(errors="replace").strip().splitlines()[-1:] or [""]
    raise ToolError(f"the node exited at once (status {code}): {tail[0]} (see {out_path})")


def _command_config(path: str | None) -> dict[str, str]:
    if not path:
        return {}
    from keeperless._properties import parse_properties

    try:
        return parse_properties(Path(path).read_text(), path)
    except OSError as e:
        raise ToolError(f"--command-config {path}: {e.strerror}") from None


# tools that speak the protocol themselves (tools/client.py)
_RAW_TOOLS = (
    "metadata-quorum",
    "features",
    "cluster",
    "log-dirs",
    "leader-election",
    "configs",
    "transactions",
    "share-groups",
    "delegation-tokens",
    "reassign-partitions",
)


def _check_raw_command_config(args: argparse.Namespace) -> None:
    """--command-config of a tool with the raw client: read (a missing file is an error)
    and applied to its connections (TLS, SASL)."""
    path = getattr(args, "command_config", None)
    if not path:
        return
    from keeperless.tools.client import configure

    configure(_command_config(path), f"--command-config {path}")


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

        for flag in ("key_decoder_class", "value_decoder_class"):
            if getattr(args, flag):
                raise ToolError(
                    f"--{flag.replace('_', '-')} is not supported: keeperless has no Java "
                    "decoder classes; --print-data-log prints keys and values as UTF-8 text, "
                    "--offsets-decoder and --cluster-metadata-decoder decode the internal topics"
                )
        if args.max_bytes is not None and args.max_bytes < 0:
            raise ToolError("--max-bytes must not be negative")
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
                    args.offsets_decoder,
                    args.max_bytes,
                    args.transaction_log_decoder,
                    args.share_group_state_decoder,
                )
                and ok
            )
        return 0 if ok else 1
    if args.command == "metadata-quorum":
        from keeperless.tools.quorum import (
            add_controller,
            print_replication,
            print_status,
            remove_controller,
        )

        brokers = not getattr(args, "bootstrap_controller", None)  # (they forward)
        if args.quorum_cmd == "add-controller":
            conf = args.controller_config or args.command_config
            return add_controller(_servers(args), conf, args.dry_run, sys.stdout, brokers)
        if args.quorum_cmd == "remove-controller":
            return remove_controller(
                _servers(args),
                args.controller_id,
                args.controller_directory_id,
                args.dry_run,
                sys.stdout,
                brokers,
            )
        if args.human_readable and not args.replication:
            raise ToolError(
                "The option --human-readable is only supported along with --replication"
            )
        if args.replication:
            print_replication(_servers(args), sys.stdout, args.human_readable)
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
        if args.features_cmd == "version-mapping":
            return cluster_tools.version_mapping(args.release_version, sys.stdout)
        if args.features_cmd == "feature-dependencies":
            return cluster_tools.feature_dependencies(args.feature, sys.stdout)
        if args.features_cmd == "disable":
            return cluster_tools.update_features(
                _servers(args), [(f, 0) for f in args.feature], 2, args.dry_run, sys.stdout
            )
        levels = cluster_tools.feature_levels(
            args.metadata, args.release_version, args.feature, args.features_cmd == "upgrade"
        )
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
    if args.command == "share-groups":
        from keeperless.tools.share_groups import run_share_groups

        return run_share_groups(args, _servers(args), sys.stdout)
    if args.command == "transactions":
        from keeperless.tools.transactions import run_transactions

        if args.txn_cmd == "find-hanging" and args.broker_id is None and args.topic is None:
            raise ToolError("find-hanging needs --broker-id or --topic")
        return run_transactions(args, _servers(args), sys.stdout)
    if args.command == "reassign-partitions":
        from keeperless.tools.reassign import check_reassign_args, run_reassign

        check_reassign_args(args)
        return run_reassign(args, _servers(args), sys.stdout)
    if args.command == "delegation-tokens":
        from keeperless.tools.delegation_tokens import check_token_args, run_delegation_tokens

        check_token_args(args)
        return run_delegation_tokens(args, _servers(args), sys.stdout)
    if args.command == "acls":
        from keeperless.tools.acls import run_acls

        return run_acls(args, extra, sys.stdout)
    if args.command == "delete-records":
        from keeperless.tools.delete_records import run_delete_records

        return run_delete_records(args, extra, sys.stdout)
    if args.command == "consumer-groups":
        from keeperless.tools.groups import run_consumer_groups

        return run_consumer_groups(args, extra, sys.stdout)
    from keeperless.tools.topics import run_topics

    return run_topics(args, extra, sys.stdout)


def _skip_hypothesis_hooks() -> None:
    """kio registers Hypothesis strategies for its types whenever Hypothesis is
    importable, which costs over a second at start-up in a development venv. The command
    never needs them, so make Hypothesis unimportable here unless it is already loaded."""
    if "hypothesis" not in sys.modules and "kio" not in sys.modules:
        sys.modules["hypothesis"] = None  # type: ignore[assignment]


def main(argv: Sequence[str] | None = None) -> int:
    _skip_hypothesis_hooks()
    words = list(sys.argv[1:] if argv is None else argv)
    as_script(os.environ.pop("KEEPERLESS_SCRIPT", None))
    if any(w == "--zookeeper" or w.startswith("--zookeeper=") for w in words):
        return _fail(
            "--zookeeper is not supported: keeperless has no ZooKeeper (as Kafka 4); "
            "use --bootstrap-server (or --bootstrap-controller)"
        )
    args, unknown = build_parser().parse_known_args(words)
    if unknown:
        prog = " ".join(["keeperless", args.command, *_subcommand(args)])
        return _fail(f"unrecognized arguments: {' '.join(unknown)} (see {help_hint(prog)})")
    try:
        if args.command == "storage":
            return _storage(args)
        if args.command == "server":
            return _server(args)
        if args.command == "connect-distributed":
            return _connect(args)
        if args.command == "migrate-zk":
            from keeperless.tools.migrate_zk import migrate_zk

            cfg = load_config(args.config, ())
            return migrate_zk(
                args.zookeeper_connect, cfg, args.dry_run, sys.stdout, args.release_version
            )
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


def _subcommand(args: argparse.Namespace) -> list[str]:
    for attr in (
        "storage_cmd",
        "server_cmd",
        "quorum_cmd",
        "cluster_cmd",
        "features_cmd",
        "txn_cmd",
    ):
        value = getattr(args, attr, None)
        if value:
            return [value]
    return []


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
