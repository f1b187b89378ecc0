"""The Kafka APIs this node implements, and the version ranges it advertises."""

from __future__ import annotations

__all__ = ["ADVERTISED_MIN", "API_NAMES", "BROKER_APIS", "CONTROLLER_APIS"]

# api key -> (min version, max version) served on the broker listener: Apache Kafka
# 4.1's ranges for every API implemented here (tests/unit/test_api_versions.py holds
# Kafka's table and checks each entry against it).
BROKER_APIS: dict[int, tuple[int, int]] = {
    0: (3, 13),  # Produce (v13: topic ids, KIP-516)
    1: (4, 18),  # Fetch (v13+: topic ids)
    2: (1, 10),  # ListOffsets
    3: (0, 13),  # Metadata
    8: (2, 9),  # OffsetCommit
    9: (1, 9),  # OffsetFetch
    10: (0, 6),  # FindCoordinator
    11: (0, 9),  # JoinGroup
    12: (0, 4),  # Heartbeat
    13: (0, 5),  # LeaveGroup
    14: (0, 5),  # SyncGroup
    15: (0, 6),  # DescribeGroups
    16: (0, 5),  # ListGroups
    17: (0, 1),  # SaslHandshake (answered by the connection, runtime/sasl_state.py)
    18: (0, 4),  # ApiVersions
    19: (2, 7),  # CreateTopics
    20: (1, 6),  # DeleteTopics
    21: (0, 2),  # DeleteRecords
    22: (0, 5),  # InitProducerId
    23: (2, 4),  # OffsetForLeaderEpoch
    24: (0, 5),  # AddPartitionsToTxn (v4+: batched, verify_only)
    25: (0, 4),  # AddOffsetsToTxn
    26: (0, 5),  # EndTxn
    27: (1, 1),  # WriteTxnMarkers (broker to broker)
    28: (0, 5),  # TxnOffsetCommit
    29: (1, 3),  # DescribeAcls (from the image; enforcement comes later)
    30: (1, 3),  # CreateAcls (forwarded to the controller)
    31: (1, 3),  # DeleteAcls (forwarded to the controller)
    32: (1, 4),  # DescribeConfigs
    33: (0, 2),  # AlterConfigs (forwarded to the controller)
    34: (1, 2),  # AlterReplicaLogDirs (one log directory per broker)
    35: (1, 4),  # DescribeLogDirs
    36: (0, 2),  # SaslAuthenticate
    37: (0, 3),  # CreatePartitions
    42: (0, 2),  # DeleteGroups
    43: (0, 2),  # ElectLeaders (forwarded to the controller)
    44: (0, 1),  # IncrementalAlterConfigs
    47: (0, 0),  # OffsetDelete
    48: (0, 1),  # DescribeClientQuotas (from the image; enforcement comes later)
    49: (0, 1),  # AlterClientQuotas (forwarded to the controller)
    50: (0, 0),  # DescribeUserScramCredentials (from the image)
    51: (0, 0),  # AlterUserScramCredentials (forwarded to the controller)
    55: (0, 2),  # DescribeQuorum (forwarded to the controller)
    57: (0, 2),  # UpdateFeatures (forwarded to the controller)
    60: (0, 2),  # DescribeCluster
    61: (0, 0),  # DescribeProducers
    64: (0, 0),  # UnregisterBroker (forwarded to the controller)
    65: (0, 0),  # DescribeTransactions
    66: (0, 2),  # ListTransactions
    68: (0, 1),  # ConsumerGroupHeartbeat (KIP-848)
    69: (0, 1),  # ConsumerGroupDescribe
    74: (0, 1),  # ListConfigResources
    75: (0, 0),  # DescribeTopicPartitions
}

# Kafka 4.x advertises Produce from v0 although it serves v3 and later only: librdkafka
# before 2.0 looks for v0-v2 to decide which message formats a broker takes
# (KAFKA-18659). A request below the served range is refused like any unsupported one.
ADVERTISED_MIN = {0: 0}

# The controller listener: Raft between voters and observers, and the RPCs brokers send
# to the active controller.
CONTROLLER_APIS: dict[int, tuple[int, int]] = {
    1: (12, 12),  # Fetch (of __cluster_metadata)
    17: (0, 1),  # SaslHandshake
    18: (0, 3),  # ApiVersions
    19: (7, 7),  # CreateTopics
    20: (6, 6),  # DeleteTopics
    30: (2, 3),  # CreateAcls
    31: (2, 3),  # DeleteAcls
    33: (0, 2),  # AlterConfigs
    36: (0, 2),  # SaslAuthenticate
    37: (3, 3),  # CreatePartitions
    43: (1, 2),  # ElectLeaders
    44: (0, 1),  # IncrementalAlterConfigs
    49: (0, 1),  # AlterClientQuotas
    51: (0, 0),  # AlterUserScramCredentials
    52: (2, 2),  # Vote
    53: (1, 1),  # BeginQuorumEpoch
    54: (1, 1),  # EndQuorumEpoch
    55: (0, 2),  # DescribeQuorum
    56: (2, 3),  # AlterPartition
    57: (0, 1),  # UpdateFeatures
    58: (0, 0),  # Envelope (brokers' forwarded admin requests, KIP-590)
    59: (1, 1),  # FetchSnapshot
    60: (0, 1),  # DescribeCluster (the controllers, KIP-919)
    62: (3, 3),  # BrokerRegistration
    63: (1, 1),  # BrokerHeartbeat
    64: (0, 0),  # UnregisterBroker
    67: (0, 0),  # AllocateProducerIds
}

API_NAMES = {
    66: "ListTransactions",
    65: "DescribeTransactions",
    61: "DescribeProducers",
    17: "SaslHandshake",
    58: "Envelope",
    36: "SaslAuthenticate",
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
    21: "DeleteRecords",
    22: "InitProducerId",
    23: "OffsetForLeaderEpoch",
    24: "AddPartitionsToTxn",
    25: "AddOffsetsToTxn",
    26: "EndTxn",
    27: "WriteTxnMarkers",
    28: "TxnOffsetCommit",
    33: "AlterConfigs",
    34: "AlterReplicaLogDirs",
    47: "OffsetDelete",
    68: "ConsumerGroupHeartbeat",
    69: "ConsumerGroupDescribe",
    74: "ListConfigResources",
    75: "DescribeTopicPartitions",
    29: "DescribeAcls",
    30: "CreateAcls",
    31: "DeleteAcls",
    32: "DescribeConfigs",
    37: "CreatePartitions",
    60: "DescribeCluster",
    42: "DeleteGroups",
    43: "ElectLeaders",
    44: "IncrementalAlterConfigs",
    48: "DescribeClientQuotas",
    49: "AlterClientQuotas",
    50: "DescribeUserScramCredentials",
    51: "AlterUserScramCredentials",
    56: "AlterPartition",
    57: "UpdateFeatures",
    35: "DescribeLogDirs",
    64: "UnregisterBroker",
    52: "Vote",
    53: "BeginQuorumEpoch",
    54: "EndQuorumEpoch",
    55: "DescribeQuorum",
    59: "FetchSnapshot",
    62: "BrokerRegistration",
    63: "BrokerHeartbeat",
    67: "AllocateProducerIds",
}
