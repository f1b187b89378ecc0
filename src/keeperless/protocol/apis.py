"""Every Kafka API: its key, and for each API this node serves, the versions it answers
on the broker listener and on the controller listener. Each API is declared here once;
the ApiVersions answers, the listeners' request routing, the authorization table and the
handler registry (``server/registry.py``) are all read from this table."""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping
from types import MappingProxyType

__all__ = [
    "ADVERTISED_MIN",
    "APIS",
    "API_NAMES",
    "BROKER_APIS",
    "CONTROLLER_APIS",
    "GATED",
    "ApiKey",
    "ApiSpec",
    "Listener",
]


class ApiKey(enum.IntEnum):
    """Kafka's API keys (``org.apache.kafka.common.protocol.ApiKeys``), as of 4.1."""

    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    OFFSET_COMMIT = 8
    OFFSET_FETCH = 9
    FIND_COORDINATOR = 10
    JOIN_GROUP = 11
    HEARTBEAT = 12
    LEAVE_GROUP = 13
    SYNC_GROUP = 14
    DESCRIBE_GROUPS = 15
    LIST_GROUPS = 16
    SASL_HANDSHAKE = 17
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    DELETE_RECORDS = 21
    INIT_PRODUCER_ID = 22
    OFFSET_FOR_LEADER_EPOCH = 23
    ADD_PARTITIONS_TO_TXN = 24
    ADD_OFFSETS_TO_TXN = 25
    END_TXN = 26
    WRITE_TXN_MARKERS = 27
    TXN_OFFSET_COMMIT = 28
    DESCRIBE_ACLS = 29
    CREATE_ACLS = 30
    DELETE_ACLS = 31
    DESCRIBE_CONFIGS = 32
    ALTER_CONFIGS = 33
    ALTER_REPLICA_LOG_DIRS = 34
    DESCRIBE_LOG_DIRS = 35
    SASL_AUTHENTICATE = 36
    CREATE_PARTITIONS = 37
    CREATE_DELEGATION_TOKEN = 38
    RENEW_DELEGATION_TOKEN = 39
    EXPIRE_DELEGATION_TOKEN = 40
    DESCRIBE_DELEGATION_TOKEN = 41
    DELETE_GROUPS = 42
    ELECT_LEADERS = 43
    INCREMENTAL_ALTER_CONFIGS = 44
    ALTER_PARTITION_REASSIGNMENTS = 45
    LIST_PARTITION_REASSIGNMENTS = 46
    OFFSET_DELETE = 47
    DESCRIBE_CLIENT_QUOTAS = 48
    ALTER_CLIENT_QUOTAS = 49
    DESCRIBE_USER_SCRAM_CREDENTIALS = 50
    ALTER_USER_SCRAM_CREDENTIALS = 51
    VOTE = 52
    BEGIN_QUORUM_EPOCH = 53
    END_QUORUM_EPOCH = 54
    DESCRIBE_QUORUM = 55
    ALTER_PARTITION = 56
    UPDATE_FEATURES = 57
    ENVELOPE = 58
    FETCH_SNAPSHOT = 59
    DESCRIBE_CLUSTER = 60
    DESCRIBE_PRODUCERS = 61
    BROKER_REGISTRATION = 62
    BROKER_HEARTBEAT = 63
    UNREGISTER_BROKER = 64
    DESCRIBE_TRANSACTIONS = 65
    LIST_TRANSACTIONS = 66
    ALLOCATE_PRODUCER_IDS = 67
    CONSUMER_GROUP_HEARTBEAT = 68
    CONSUMER_GROUP_DESCRIBE = 69
    CONTROLLER_REGISTRATION = 70
    GET_TELEMETRY_SUBSCRIPTIONS = 71
    PUSH_TELEMETRY = 72
    ASSIGN_REPLICAS_TO_DIRS = 73
    LIST_CONFIG_RESOURCES = 74
    DESCRIBE_TOPIC_PARTITIONS = 75
    SHARE_GROUP_HEARTBEAT = 76
    SHARE_GROUP_DESCRIBE = 77
    SHARE_FETCH = 78
    SHARE_ACKNOWLEDGE = 79
    ADD_RAFT_VOTER = 80
    REMOVE_RAFT_VOTER = 81
    UPDATE_RAFT_VOTER = 82
    INITIALIZE_SHARE_GROUP_STATE = 83
    READ_SHARE_GROUP_STATE = 84
    WRITE_SHARE_GROUP_STATE = 85
    DELETE_SHARE_GROUP_STATE = 86
    READ_SHARE_GROUP_STATE_SUMMARY = 87
    STREAMS_GROUP_HEARTBEAT = 88
    STREAMS_GROUP_DESCRIBE = 89
    DESCRIBE_SHARE_GROUP_OFFSETS = 90
    ALTER_SHARE_GROUP_OFFSETS = 91
    DELETE_SHARE_GROUP_OFFSETS = 92

    @property
    def title(self) -> str:
        """Kafka's name of the API: ``ApiVersions``, ``DescribeUserScramCredentials``."""
        return "".join(w.capitalize() for w in self.name.split("_"))


class Listener(enum.Enum):
    """Where a request arrives: a broker's listeners (clients and other brokers) or a
    controller's (Raft, brokers' RPCs, forwarded admin requests)."""

    BROKER = "broker"
    CONTROLLER = "controller"


@dataclasses.dataclass(frozen=True)
class ApiSpec:
    """One API as this node serves it: the (min, max) versions on each listener (None:
    not served there). ``advertised_min`` is a lower minimum to advertise than to serve
    (see Produce below)."""

    key: ApiKey
    broker: tuple[int, int] | None = None
    controller: tuple[int, int] | None = None
    advertised_min: int | None = None
    # advertised only while this feature is finalized at this level or higher (Kafka
    # leaves the share group APIs out of ApiVersions while share.version is 0)
    feature: tuple[str, int] | None = None

    def versions(self, listener: Listener) -> tuple[int, int] | None:
        return self.broker if listener is Listener.BROKER else self.controller


# Apache Kafka 4.1's ranges for every API implemented here
# (tests/unit/protocol/test_api_versions.py holds Kafka's table and checks each entry
# against it). Produce: Kafka 4.x advertises v0
# although it serves v3 and later only, as librdkafka before 2.0 looks for v0-v2 to decide
# which message formats a broker takes (KAFKA-18659); a request below the served range is
# refused like any unsupported one.
_TABLE = (
    ApiSpec(ApiKey.PRODUCE, broker=(3, 13), advertised_min=0),  # v13: topic ids, KIP-516
    ApiSpec(
        ApiKey.FETCH, broker=(4, 18), controller=(12, 17)
    ),  # v13+: topic ids; of __cluster_metadata (v17: directory ids, KIP-853)
    ApiSpec(ApiKey.LIST_OFFSETS, broker=(1, 10)),
    ApiSpec(ApiKey.METADATA, broker=(0, 13)),
    ApiSpec(ApiKey.OFFSET_COMMIT, broker=(2, 9)),
    ApiSpec(ApiKey.OFFSET_FETCH, broker=(1, 9)),
    ApiSpec(ApiKey.FIND_COORDINATOR, broker=(0, 6)),
    ApiSpec(ApiKey.JOIN_GROUP, broker=(0, 9)),
    ApiSpec(ApiKey.HEARTBEAT, broker=(0, 4)),
    ApiSpec(ApiKey.LEAVE_GROUP, broker=(0, 5)),
    ApiSpec(ApiKey.SYNC_GROUP, broker=(0, 5)),
    ApiSpec(ApiKey.DESCRIBE_GROUPS, broker=(0, 6)),
    ApiSpec(ApiKey.LIST_GROUPS, broker=(0, 5)),
    ApiSpec(
        ApiKey.SASL_HANDSHAKE, broker=(0, 1), controller=(0, 1)
    ),  # answered by the connection, security/sasl_state.py
    ApiSpec(ApiKey.API_VERSIONS, broker=(0, 4), controller=(0, 3)),
    ApiSpec(ApiKey.CREATE_TOPICS, broker=(2, 7), controller=(7, 7)),
    ApiSpec(ApiKey.DELETE_TOPICS, broker=(1, 6), controller=(6, 6)),
    ApiSpec(ApiKey.DELETE_RECORDS, broker=(0, 2)),
    ApiSpec(ApiKey.INIT_PRODUCER_ID, broker=(0, 5)),
    ApiSpec(ApiKey.OFFSET_FOR_LEADER_EPOCH, broker=(2, 4)),
    ApiSpec(ApiKey.ADD_PARTITIONS_TO_TXN, broker=(0, 5)),  # v4+: batched, verify_only
    ApiSpec(ApiKey.ADD_OFFSETS_TO_TXN, broker=(0, 4)),
    ApiSpec(ApiKey.END_TXN, broker=(0, 5)),
    ApiSpec(ApiKey.WRITE_TXN_MARKERS, broker=(1, 2)),  # broker to broker; v2: TV
    ApiSpec(ApiKey.TXN_OFFSET_COMMIT, broker=(0, 5)),
    ApiSpec(ApiKey.DESCRIBE_ACLS, broker=(1, 3)),  # from the image
    ApiSpec(ApiKey.CREATE_ACLS, broker=(1, 3), controller=(2, 3)),  # forwarded to the controller
    ApiSpec(ApiKey.DELETE_ACLS, broker=(1, 3), controller=(2, 3)),  # forwarded to the controller
    ApiSpec(ApiKey.DESCRIBE_CONFIGS, broker=(1, 4)),
    ApiSpec(ApiKey.ALTER_CONFIGS, broker=(0, 2), controller=(0, 2)),  # forwarded to the controller
    ApiSpec(ApiKey.ALTER_REPLICA_LOG_DIRS, broker=(1, 2)),
    ApiSpec(ApiKey.DESCRIBE_LOG_DIRS, broker=(1, 4)),
    ApiSpec(ApiKey.SASL_AUTHENTICATE, broker=(0, 2), controller=(0, 2)),
    ApiSpec(ApiKey.CREATE_PARTITIONS, broker=(0, 3), controller=(3, 3)),
    ApiSpec(ApiKey.DELETE_GROUPS, broker=(0, 2)),
    ApiSpec(ApiKey.ELECT_LEADERS, broker=(0, 2), controller=(1, 2)),  # forwarded to the controller
    ApiSpec(ApiKey.INCREMENTAL_ALTER_CONFIGS, broker=(0, 1), controller=(0, 1)),
    ApiSpec(ApiKey.OFFSET_DELETE, broker=(0, 0)),
    # partition reassignment (KIP-455), forwarded to the controller
    ApiSpec(ApiKey.ALTER_PARTITION_REASSIGNMENTS, broker=(0, 1), controller=(0, 1)),
    ApiSpec(ApiKey.LIST_PARTITION_REASSIGNMENTS, broker=(0, 0), controller=(0, 0)),
    ApiSpec(ApiKey.DESCRIBE_CLIENT_QUOTAS, broker=(0, 1)),  # from the image
    ApiSpec(
        ApiKey.ALTER_CLIENT_QUOTAS, broker=(0, 1), controller=(0, 1)
    ),  # forwarded to the controller
    # delegation tokens (KIP-48): created, renewed and expired on the controller
    ApiSpec(ApiKey.CREATE_DELEGATION_TOKEN, broker=(1, 3), controller=(1, 3)),
    ApiSpec(ApiKey.RENEW_DELEGATION_TOKEN, broker=(1, 2), controller=(1, 2)),
    ApiSpec(ApiKey.EXPIRE_DELEGATION_TOKEN, broker=(1, 2), controller=(1, 2)),
    ApiSpec(ApiKey.DESCRIBE_DELEGATION_TOKEN, broker=(1, 3)),  # from the image
    ApiSpec(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, broker=(0, 0)),  # from the image
    ApiSpec(
        ApiKey.ALTER_USER_SCRAM_CREDENTIALS, broker=(0, 0), controller=(0, 0)
    ),  # forwarded to the controller
    ApiSpec(ApiKey.VOTE, controller=(2, 2)),
    ApiSpec(ApiKey.BEGIN_QUORUM_EPOCH, controller=(1, 1)),
    ApiSpec(ApiKey.END_QUORUM_EPOCH, controller=(1, 1)),
    ApiSpec(
        ApiKey.DESCRIBE_QUORUM, broker=(0, 2), controller=(0, 2)
    ),  # forwarded to the controller
    ApiSpec(ApiKey.ALTER_PARTITION, controller=(2, 3)),
    ApiSpec(
        ApiKey.UPDATE_FEATURES, broker=(0, 2), controller=(0, 1)
    ),  # forwarded to the controller
    ApiSpec(ApiKey.ENVELOPE, controller=(0, 0)),  # brokers' forwarded admin requests, KIP-590
    ApiSpec(ApiKey.FETCH_SNAPSHOT, controller=(1, 1)),
    # KIP-853: voter changes, made by the active controller (brokers forward adding and
    # removing one, as Kafka's do; Kafka 4.1's brokers advertise AddRaftVoter v0 only)
    ApiSpec(ApiKey.ADD_RAFT_VOTER, broker=(0, 0), controller=(0, 1)),
    ApiSpec(ApiKey.REMOVE_RAFT_VOTER, broker=(0, 0), controller=(0, 0)),
    ApiSpec(ApiKey.UPDATE_RAFT_VOTER, controller=(0, 0)),
    ApiSpec(ApiKey.DESCRIBE_CLUSTER, broker=(0, 2), controller=(0, 1)),  # the controllers, KIP-919
    ApiSpec(ApiKey.DESCRIBE_PRODUCERS, broker=(0, 0)),
    ApiSpec(ApiKey.BROKER_REGISTRATION, controller=(3, 3)),
    ApiSpec(ApiKey.BROKER_HEARTBEAT, controller=(1, 1)),
    ApiSpec(
        ApiKey.UNREGISTER_BROKER, broker=(0, 0), controller=(0, 0)
    ),  # forwarded to the controller
    ApiSpec(ApiKey.DESCRIBE_TRANSACTIONS, broker=(0, 0)),
    ApiSpec(ApiKey.LIST_TRANSACTIONS, broker=(0, 2)),
    ApiSpec(ApiKey.ALLOCATE_PRODUCER_IDS, controller=(0, 0)),
    ApiSpec(ApiKey.ASSIGN_REPLICAS_TO_DIRS, controller=(0, 0)),  # KIP-858, broker to controller
    ApiSpec(ApiKey.CONSUMER_GROUP_HEARTBEAT, broker=(0, 1)),  # KIP-848
    ApiSpec(ApiKey.CONSUMER_GROUP_DESCRIBE, broker=(0, 1)),
    ApiSpec(ApiKey.LIST_CONFIG_RESOURCES, broker=(0, 1)),
    # share groups (KIP-932), while share.version is 1
    ApiSpec(ApiKey.SHARE_GROUP_HEARTBEAT, broker=(1, 1), feature=("share.version", 1)),
    ApiSpec(ApiKey.SHARE_GROUP_DESCRIBE, broker=(1, 1), feature=("share.version", 1)),
    ApiSpec(ApiKey.SHARE_FETCH, broker=(1, 1), feature=("share.version", 1)),
    ApiSpec(ApiKey.SHARE_ACKNOWLEDGE, broker=(1, 1), feature=("share.version", 1)),
    # the share coordinator's, broker to broker (Kafka 4.1's v0)
    ApiSpec(ApiKey.INITIALIZE_SHARE_GROUP_STATE, broker=(0, 0), feature=("share.version", 1)),
    ApiSpec(ApiKey.READ_SHARE_GROUP_STATE, broker=(0, 0), feature=("share.version", 1)),
    ApiSpec(ApiKey.WRITE_SHARE_GROUP_STATE, broker=(0, 0), feature=("share.version", 1)),
    ApiSpec(ApiKey.DELETE_SHARE_GROUP_STATE, broker=(0, 0), feature=("share.version", 1)),
    ApiSpec(ApiKey.READ_SHARE_GROUP_STATE_SUMMARY, broker=(0, 1), feature=("share.version", 1)),
    ApiSpec(ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, broker=(0, 1), feature=("share.version", 1)),
    ApiSpec(ApiKey.ALTER_SHARE_GROUP_OFFSETS, broker=(0, 0), feature=("share.version", 1)),
    ApiSpec(ApiKey.DELETE_SHARE_GROUP_OFFSETS, broker=(0, 0), feature=("share.version", 1)),
    ApiSpec(ApiKey.DESCRIBE_TOPIC_PARTITIONS, broker=(0, 0)),
)


def _index(table: tuple[ApiSpec, ...]) -> Mapping[ApiKey, ApiSpec]:
    out: dict[ApiKey, ApiSpec] = {}
    for spec in table:
        if spec.key in out:
            raise ValueError(f"API {spec.key.title} ({int(spec.key)}) is declared twice")
        if spec.broker is None and spec.controller is None:
            raise ValueError(f"API {spec.key.title} is declared but served nowhere")
        out[spec.key] = spec
    return MappingProxyType(out)


APIS: Mapping[ApiKey, ApiSpec] = _index(_TABLE)

BROKER_APIS: Mapping[int, tuple[int, int]] = MappingProxyType(
    {k: s.broker for k, s in APIS.items() if s.broker is not None}
)
CONTROLLER_APIS: Mapping[int, tuple[int, int]] = MappingProxyType(
    {k: s.controller for k, s in APIS.items() if s.controller is not None}
)
ADVERTISED_MIN: Mapping[int, int] = MappingProxyType(
    {k: s.advertised_min for k, s in APIS.items() if s.advertised_min is not None}
)
# api key -> (feature, level) it is advertised under
GATED: Mapping[int, tuple[str, int]] = MappingProxyType(
    {k: s.feature for k, s in APIS.items() if s.feature is not None}
)
API_NAMES: Mapping[int, str] = MappingProxyType({k: k.title for k in ApiKey})
