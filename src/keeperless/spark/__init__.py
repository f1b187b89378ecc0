"""keeperless topics in Apache Spark: ``format("keeperless")`` (install ``keeperless[spark]``).

>>> from keeperless.spark import register
>>> register(spark)   # once per SparkSession
>>> spark.read.format("keeperless").option("kafka.bootstrap.servers", "127.0.0.1:9092") \\
...     .option("subscribe", "events").load()
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["local_session", "register"]


def register(spark: SparkSession) -> None:
    """Make ``format("keeperless")`` available in this Spark session."""
    from keeperless.spark.source import KeeperlessDataSource

    spark.dataSource.register(KeeperlessDataSource)


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
