"""The `keeperless` command: thin subcommands that parse flags and call the library."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence

from keeperless.server.config import ConfigError, load_config
from keeperless.storage.meta_properties import StorageError, random_kafka_uuid

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
    from keeperless.storage.format import check_storage

    cfg = load_config(args.config, args.override or ())
    cluster_id = check_storage(cfg.all_log_dirs, cfg.node_id, args.config)
    from keeperless.server.node import run_node

    return run_node(cfg, cluster_id)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="keeperless", description=__doc__)
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
    return p


def _skip_hypothesis_hooks() -> None:
    """kio registers Hypothesis strategies for its types whenever Hypothesis is
    importable, which costs over a second at start-up in a development venv. The command
    never needs them, so make Hypothesis unimportable here unless it is already loaded."""
    if "hypothesis" not in sys.modules and "kio" not in sys.modules:
        sys.modules["hypothesis"] = None  # type: ignore[assignment]


def main(argv: Sequence[str] | None = None) -> int:
    _skip_hypothesis_hooks()
    args = build_parser().parse_args(argv)
    try:
        if args.command == "storage":
            return _storage(args)
        return _server(args)
    except (ConfigError, StorageError, ValueError) as e:
        return _fail(str(e))


if __name__ == "__main__":
    sys.exit(main())
