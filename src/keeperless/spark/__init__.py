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

__all__ = ["register"]


def register(spark: SparkSession) -> None:
    """Make ``format("keeperless")`` available in this Spark session."""
    from keeperless.spark.source import KeeperlessDataSource

    spark.dataSource.register(KeeperlessDataSource)
