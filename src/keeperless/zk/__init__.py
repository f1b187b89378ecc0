"""ZooKeeper-mode Kafka clusters: reading their metadata from ZooKeeper (issue 31)."""
