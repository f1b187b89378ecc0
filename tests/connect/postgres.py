"""A real PostgreSQL server for the tests, from Debian's packages: initdb and pg_ctl in a
temporary directory, as the ``postgres`` user (PostgreSQL refuses to run as root), on a
free port, with ``wal_level=logical``."""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import psycopg2

from tests.integration.cluster import free_port, wait_until


def pg_bin(name: str) -> str:
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    if found:
        return found[-1]
    path = shutil.which(name)
    if path is None:
        raise RuntimeError(
            f"{name} not found: install Debian's postgresql package (make test does)"
        )
    return path


class Postgres:
    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="keeperless-pg-", dir="/tmp"))
        self.data = self.dir / "data"
        self.port = free_port()
        self.user = "postgres"
        self.as_root = os.geteuid() == 0
        if self.as_root:
            pw = pwd.getpwnam("postgres")
            os.chown(self.dir, pw.pw_uid, pw.pw_gid)
            self.user = "postgres"
        else:
            self.user = pwd.getpwuid(os.geteuid()).pw_name

    def _run(self, *cmd: str) -> subprocess.CompletedProcess[str]:
        full = ["runuser", "-u", "postgres", "--", *cmd] if self.as_root else list(cmd)
        return subprocess.run(full, capture_output=True, text=True, timeout=120, check=True)

    def start(self) -> None:
        self._run(pg_bin("initdb"), "-D", str(self.data), "-U", self.user, "--auth=trust",
                  "-E", "UTF8", "--locale=C")  # fmt: skip
        with (self.data / "postgresql.conf").open("a") as f:
            f.write(f"port = {self.port}\nlisten_addresses = '127.0.0.1'\n"
                    f"unix_socket_directories = '{self.dir}'\nwal_level = logical\n"
                    "max_replication_slots = 10\nmax_wal_senders = 10\nfsync = off\n")  # fmt: skip
        self._run(pg_bin("pg_ctl"), "-D", str(self.data), "-l", str(self.dir / "pg.log"), "-w",
                  "start")  # fmt: skip
        wait_until(self._up, 30, what="PostgreSQL accepting connections")

    def _up(self) -> bool:
        try:
            self.connect().close()
            return True
        except psycopg2.OperationalError:
            return False

    def restart(self) -> None:
        """pg_ctl restart -m fast: every connection (the replication one too) is cut."""
        self._run(pg_bin("pg_ctl"), "-D", str(self.data), "-l", str(self.dir / "pg.log"), "-m",
                  "fast", "-w", "restart")  # fmt: skip
        wait_until(self._up, 30, what="PostgreSQL back")

    def stop(self) -> None:
        with contextlib.suppress(subprocess.CalledProcessError):
            self._run(pg_bin("pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "stop")
        shutil.rmtree(self.dir, ignore_errors=True)

    def connect(self, db: str = "postgres") -> Any:
        conn = psycopg2.connect(host="127.0.0.1", port=self.port, user=self.user, dbname=db)
        conn.autocommit = True
        return conn

    def sql(self, statement: str, *args: Any, db: str = "postgres") -> list[tuple[Any, ...]]:
        conn = self.connect(db)
        try:
            with conn.cursor() as cur:
                cur.execute(statement, args or None)
                return list(cur.fetchall()) if cur.description else []
        finally:
            conn.close()

    def copy(self, table: str, columns: str, rows: list[str], db: str = "postgres") -> None:
        """COPY rows (tab-separated lines) in: one WAL record, one LSN, for many rows."""
        import io

        conn = self.connect(db)
        try:
            with conn.cursor() as cur:
                cur.copy_expert(f"COPY {table} ({columns}) FROM STDIN",
                                io.StringIO("".join(r + "\n" for r in rows)))  # fmt: skip
        finally:
            conn.close()

    def connector_config(self, **more: str) -> dict[str, str]:
        return {
            "connector.class": "io.debezium.connector.postgresql.PostgresConnector",
            "database.hostname": "127.0.0.1", "database.port": str(self.port),
            "database.user": self.user, "database.password": "", "database.dbname": "postgres",
            "topic.prefix": "dbserver1", "plugin.name": "pgoutput", **more,
        }  # fmt: skip
