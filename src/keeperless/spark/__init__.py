"""keeperless topics in Apache Spark: ``format("keeperless")`` (install ``keeperless[spark]``).

>>> from keeperless.spark import register
>>> register(spark)   # once per SparkSession
>>> spark.read.format("keeperless").option("kafka.bootstrap.servers", "127.0.0.1:9092") \\
...     .option("subscribe", "events").load()
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["local_session", "register"]


def register(spark: SparkSession) -> None:
    """Make ``format("keeperless")`` available in this Spark session."""
    from keeperless.spark.source import KeeperlessDataSource

    spark.dataSource.register(KeeperlessDataSource)
    _accept_default_save_mode()


def _accept_default_save_mode() -> None:
    """``df.write.format("keeperless").save()`` in Spark's default save mode, as Spark's
    Kafka sink accepts it: Spark refuses ErrorIfExists for every Python data source
    (UNSUPPORTED_DATA_SOURCE_SAVE_MODE), so the writer's mode is made Append for this
    format (a topic is appended to either way); Ignore is refused in the Kafka sink's words.
    Other formats are left alone."""
    from pyspark.sql.readwriter import DataFrameWriter

    writers: list[Any] = [DataFrameWriter]
    try:
        from pyspark.sql.connect.readwriter import DataFrameWriter as ConnectWriter

        writers.append(ConnectWriter)
    except (ImportError, SystemExit):
        # Spark Connect's client is optional; without its dependencies (grpc) pyspark's
        # import calls sys.exit(0) in a process whose __main__ has no file (python -c,
        # embedded interpreters, pytest-xdist workers), which silently ended the caller
        pass
    for cls in writers:
        if getattr(cls, "_keeperless_save_mode", False):
            continue
        original_format, original_mode, original_save = cls.format, cls.mode, cls.save

        def format(self: Any, source: str, _f: Any = original_format) -> Any:
            self._keeperless_source = source
            return _f(self, source)

        def mode(self: Any, save_mode: str | None, _m: Any = original_mode) -> Any:
            self._keeperless_mode = save_mode
            return _m(self, save_mode)

        def save(self: Any, path: str | None = None, format: str | None = None,
                 mode: str | None = None, partitionBy: Any = None, _s: Any = original_save,
                 **options: Any) -> Any:  # fmt: skip
            source = (format or getattr(self, "_keeperless_source", "") or "").lower()
            if source == "keeperless":
                chosen = mode or getattr(self, "_keeperless_mode", None) or "errorifexists"
                chosen = chosen.lower()
                if chosen == "ignore":
                    from keeperless.spark.options import OptionError
                    from keeperless.spark.source import save_mode_refusal

                    raise OptionError(save_mode_refusal("Ignore"))
                if chosen in ("errorifexists", "error", "default"):
                    mode = "append"
            return _s(self, path, format, mode, partitionBy, **options)

        cls.format, cls.mode, cls.save = format, mode, save
        cls._keeperless_save_mode = True


def local_session(app_name: str, **conf: str) -> SparkSession:
    """A ``local[2]`` session on loopback with ``format("keeperless")`` registered: what
    the example, the benchmark and the tests run on (``conf`` adds Spark settings)."""
    import os
    import sys

    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.master("local[2]").appName(app_name)
    settings = {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.sql.shuffle.partitions": "2",
        "spark.sql.session.timeZone": "UTC",
        **conf,
    }
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark
