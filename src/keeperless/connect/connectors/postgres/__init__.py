"""Change data capture from PostgreSQL (Debezium's PostgreSQL connector, in Python)."""

from keeperless.connect.connectors.postgres.connector import PostgresConnector

__all__ = ["PostgresConnector"]
