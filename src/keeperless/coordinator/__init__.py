"""The coordinators' rules (Kafka's coordinator shards): pure state machines over the
records of an internal topic, returning records and an answer; no I/O."""
