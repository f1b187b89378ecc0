"""The group coordinator on a broker (Kafka's group-coordinator module): classic,
consumer-protocol and share groups' membership APIs and committed offsets, written through
the coordinator runtime to `__consumer_offsets`; the rules are in `coordinator/`."""
