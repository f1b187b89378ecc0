"""A Kafka Connect-compatible worker: a client of the cluster that runs source and sink
connectors in a group of workers, with Kafka Connect's REST API and internal topics."""
