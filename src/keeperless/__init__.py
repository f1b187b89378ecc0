"""keeperless: a Kafka-compatible event streaming platform with a KRaft metadata quorum."""

__version__ = "0.1.0"
