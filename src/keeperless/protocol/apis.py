"""The Kafka APIs this node implements, and the version ranges it advertises."""

from __future__ import annotations

__all__ = ["API_NAMES", "BROKER_APIS", "CONTROLLER_APIS"]

# api key -> (min version, max version). The minimums are Kafka 4.0's (what kio
# provides); maximums are what the handlers implement.
BROKER_APIS: dict[int, tuple[int, int]] = {
    0: (3, 9),  # Produce
    1: (4, 12),  # Fetch
    2: (1, 7),  # ListOffsets
    3: (0, 12),  # Metadata
    8: (2, 8),  # OffsetCommit
    9: (1, 8),  # OffsetFetch
    10: (0, 4),  # FindCoordinator
    11: (0, 7),  # JoinGroup
    12: (0, 4),  # Heartbeat
    13: (0, 4),  # LeaveGroup
    14: (0, 5),  # SyncGroup
    15: (0, 5),  # DescribeGroups
    16: (0, 4),  # ListGroups
    18: (0, 3),  # ApiVersions
    19: (2, 7),  # CreateTopics
    20: (1, 6),  # DeleteTopics
    22: (0, 4),  # InitProducerId
    32: (1, 4),  # DescribeConfigs
    37: (0, 3),  # CreatePartitions
    60: (0, 1),  # DescribeCluster
}

CONTROLLER_APIS: dict[int, tuple[int, int]] = {
    18: (0, 3),  # ApiVersions
}

API_NAMES = {
    0: "Produce",
    1: "Fetch",
    2: "ListOffsets",
    3: "Metadata",
    8: "OffsetCommit",
    9: "OffsetFetch",
    10: "FindCoordinator",
    11: "JoinGroup",
    12: "Heartbeat",
    13: "LeaveGroup",
    14: "SyncGroup",
    15: "DescribeGroups",
    16: "ListGroups",
    18: "ApiVersions",
    19: "CreateTopics",
    20: "DeleteTopics",
    22: "InitProducerId",
    32: "DescribeConfigs",
    37: "CreatePartitions",
    60: "DescribeCluster",
}
