"""The authorized-operations bit fields that Metadata, DescribeCluster,
DescribeTopicPartitions, DescribeGroups and ConsumerGroupDescribe carry. With no
authorizer configured, Kafka answers every operation the resource type supports."""

from __future__ import annotations

__all__ = ["NOT_REQUESTED", "all_operations"]

# Kafka's AclOperation codes
READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE = 3, 4, 5, 6, 7, 8
CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE = 9, 10, 11, 12

# Kafka's AclEntry.supportedOperations, by resource type name
SUPPORTED = {
    "topic": (READ, WRITE, CREATE, DESCRIBE, DELETE, ALTER, DESCRIBE_CONFIGS, ALTER_CONFIGS),
    "group": (READ, DESCRIBE, DELETE, DESCRIBE_CONFIGS, ALTER_CONFIGS),
    "cluster": (
        CREATE,
        CLUSTER_ACTION,
        DESCRIBE_CONFIGS,
        ALTER_CONFIGS,
        IDEMPOTENT_WRITE,
        ALTER,
        DESCRIBE,
    ),
}

NOT_REQUESTED = -2147483648  # Kafka's "authorized operations not included"


def all_operations(resource: str) -> int:
    """The 32-bit field with a bit per operation the resource type supports."""
    field = 0
    for code in SUPPORTED[resource]:
        field |= 1 << code
    return field
