"""Metadata record classes generated from Kafka's JSON schemas.

Do not edit: run `python tools/gen_metadata_records.py`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar
from uuid import UUID

from keeperless.metadata.fieldspec import ZERO_UUID, FieldSpec


@dataclass(frozen=True, slots=True, kw_only=True)
class AbortTransactionRecord:
    """AbortTransactionRecord (type 25), versions 0-0."""

    API_KEY: ClassVar[int] = 25
    TYPE_NAME: ClassVar[str] = "ABORT_TRANSACTION_RECORD"
    LOWEST_VERSION: ClassVar[int] = 0
    HIGHEST_VERSION: ClassVar[int] = 0
    FIELDS: ClassVar[tuple[FieldSpec, ...]]
    reason: str | None = None


AbortTransactionRecord.FIELDS = (FieldSpec("reason", "Reason", "string", 0, 32767, 0, 0, 0, None),)


@dataclass(frozen=True, slots=True, kw_only=True)
class AccessControlEntryRecord:
    """AccessControlEntryRecord (type 18), versions 0-0."""

    API_KEY: ClassVar[int] = 18
    TYPE_NAME: ClassVar[str] = "ACCESS_CONTROL_ENTRY_RECORD"
    LOWEST_VERSION: ClassVar[int] = 0
    HIGHEST_VERSION: ClassVar[int] = 0
    FIELDS: ClassVar[tuple[FieldSpec, ...]]
    id: UUID = ZERO_UUID
    resource_type: int = 0
    resource_name: str = ""
    pattern_type: int = 0
    principal: str = ""
    host: str = ""
    operation: int = 0
    permission_type: int = 0


AccessControlEntryRecord.FIELDS = (
    FieldSpec("id", "Id", "uuid", 0, 32767, 99, None, 99, None),
    FieldSpec("resource_type", "ResourceType", "int8", 0, 32767, 99, None, 99, None),
    FieldSpec("resource_name", "ResourceName", "string", 0, 32767, 99, None, 99, None),
    FieldSpec("pattern_type", "PatternType", "int8", 0, 32767, 99, None, 99, None),
    FieldSpec("principal", "Principal", "string", 0, 32767, 99, None, 99, None),
    FieldSpec("host", "Host", "string", 0, 32767, 99, None, 99, None),
    FieldSpec("operation", "Operation", "int8", 0, 32767, 99, None, 99, None),
    FieldSpec("permission_type", "PermissionType", "int8", 0, 32767, 99, None, 99, None),
)


@dataclass(frozen=True, slots=True, kw_only=True)
class BeginTransactionRecord:
    """BeginTransactionRecord (type 23), versions 0-0."""

    API_KEY: ClassVar[int] = 23
    TYPE_NAME: ClassVar[str] = "BEGIN_TRANSACTION_RECORD"
    LOWEST_VERSION: ClassVar[int] = 0
    HIGHEST_VERSION: ClassVar[int] = 0
    FIELDS: ClassVar[tuple[FieldSpec, ...]]
    name: str | None = None


BeginTransactionRecord.FIELDS = (FieldSpec("name", "Name", "string", 0, 32767, 0, 0, 0, None),)


@dataclass(frozen=True, slots=True, kw_only=True)
class BrokerRegistrationChangeRecord:
    """BrokerRegistrationChangeRecord (type 17), versions 0-2."""

    API_KEY: ClassVar[int] = 17
    TYPE_NAME: ClassVar[str] = "BROKER_REGISTRATION_CHANGE_RECORD"
    LOWEST_VERSION: ClassVar[int] = 0
    HIGHEST_VERSION: ClassVar[int] = 2
    FIELDS: ClassVar[tuple[FieldSpec, ...]]
    broker_id: int = 0
    broker_epoch: int = 0
    fenced: int = 0
    in_controlled_shutdown: int = 0
    log_dirs: tuple[UUID, ...] = ()


BrokerRegistrationChangeRecord.FIELDS = (
    FieldSpec("broker_id", "BrokerId", "int32", 0, 32767, 99, None, 99, None),
    FieldSpec("broker_epoch", "BrokerEpoch", "int64", 0, 32767, 99, None, 99, None),
    FieldSpec("fenced", "Fenced", "int8", 0, 32767, 99, 0, 0, None),
    FieldSpec("in_controlled_shutdown", "InControlledShutdown", "int8", 1, 32767, 99, 1, 1, None),
    FieldSpec("log_dirs", "LogDirs", "[]uuid", 2, 32767, 99, 2, 2, None),
)


@dataclass(frozen=True, slots=True, kw_only=True)
class ClientQuotaRecordEntityData:
    FIELDS: ClassVar[tuple[FieldSpec, ...]]
    entity_type: str = ""
    entity_name: str | None = ""


ClientQuotaRecordEntityData.FIELDS = (
    FieldSpec("entity_type", "EntityType", "string", 0, 32767, 99, None, 99, None),
    FieldSpec("entity_name", "EntityName", "string", 0, 32767, 0, None, 99, None),
)


@dataclass(frozen=True, slots=True, kw_only=True)
class ClientQuotaRecord:
    """ClientQuotaRecord (type 14), versions 0-0."""

    API_KEY: ClassVar[int] = 14
    TYPE_NAME: ClassVar[str] = "CLIENT_QUOTA_RECORD"
    LOWEST_VERSION: ClassVar[int] = 0
    HIGHEST_VERSION: ClassVar[int] = 0
    FIELDS: ClassVar[tuple[FieldSpec, ...]]
    entity: tuple[ClientQuotaRecordEntityData, ...] = ()
    key: str = ""
    value: float = 0.0
    remove: bool = False


ClientQuotaRecord.FIELDS = (
    FieldSpec(
        "entity", "Entity", "[]EntityData", 0, 32767, 99, None, 99, ClientQuotaRecordEntityData
    ),
    FieldSpec("key", "Key", "string", 0, 32767, 99, None, 99, None),
    FieldSpec("value", "Value", "float64", 0, 32767, 99, None, 99, None),
    FieldSpec("remove", "Remove", "bool", 0, 32767, 99, None, 99, None),
)


@dataclass(frozen=True, slots=True, kw_only=True)
class ConfigRecord:
    """ConfigRecord (type 4), versions 0-0."""

    API_KEY: ClassVar[int] = 4
    TYPE_NAME: ClassVar[str] = "CONFIG_RECORD"
    LOWEST_VERSION: ClassVar[int] = 0
    HIGHEST_VERSION: ClassVar[int] = 0
    FIELDS: ClassVar[tuple[FieldSpec, ...]]
    resource_type: int = 0
    resource_name: str = ""
    name: str = ""
    value: str | None = ""


ConfigRecord.FIELDS = (
    FieldSpec("resource_type", "ResourceType", "int8", 0, 32767, 99, None, 99, None),
    FieldSpec("resource_name", "ResourceName", "string", 0, 32767, 99, None, 99, None),
    FieldSpec("name", "Name", "string", 0, 32767, 99, None, 99, None),
    FieldSpec("value", "Value", "string", 0, 32767, 0, None, 99, None),
)


@dataclass(frozen=True, slots=True, kw_only=True)
class DelegationTokenRecord:
    """DelegationTokenRecord (type 10), versions 0-0."""

    API_KEY: ClassVar[int] = 10
    TYPE_NAME: ClassVar[str] = "DELEGATION_TOKEN_RECORD"
    LOWEST_VERSION: ClassVar[int] = 0
    HIGHEST_VERSION: ClassVar[int] = 0
    FIELDS: ClassVar[tuple[FieldSpec, ...]]
    owner: str = ""
    requester: str = ""
    renewers: tuple[str, ...] = ()
    issue_timestamp: int = 0
    max_timestamp: int = 0
    expiration_timestamp: int = 0
    token_id: str = ""


DelegationTokenRecord.FIELDS = (
    FieldSpec("owner", "Owner", "string", 0, 32767, 99, None, 99, None),
    FieldSpec("requester", "Requester", "string", 0, 32767, 99, None, 99, None),
    FieldSpec("renewers", "Renewers", "[]string", 0, 32767, 99, None, 99, None),
    FieldSpec("issue_timestamp", "IssueTimestamp", "int64", 0, 32767, 99, None, 99, None),
    FieldSpec("max_timestamp", "MaxTimestamp", "int64", 0, 32767, 99, None, 99, None),
    FieldSpec("expiration_timestamp", "ExpirationTimestamp", "int64", 0, 32767, 99, None, 99, None),
    FieldSpec("token_id", "TokenId", "string", 0, 32767, 99, None, 99, None),
)


@dataclass(frozen=True, slots=True, kw_only=True)
class EndTransactionRecord:
    """EndTransactionRecord (type 24), versions 0-0."""

    API_KEY: ClassVar[int] = 24
    TYPE_NAME: ClassVar[str] = "END_TRANSACTION_RECORD"
    LOWEST_VERSION: ClassVar[int] = 0
    HIGHEST_VERSION: ClassVar[int] = 0
    FIELDS: ClassVar[tuple[FieldSpec, ...]]


EndTransactionRecord.FIELDS = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class FeatureLevelRecord:
    """FeatureLevelRecord (type 12), versions 0-0."""

    API_KEY: ClassVar[int] = 12
    TYPE_NAME: ClassVar[str] = "FEATURE_LEVEL_RECORD"
    LOWEST_VERSION: ClassVar[int] = 0
    HIGHEST_VERSION: ClassVar[int] = 0
    FIELDS: ClassVar[tuple[FieldSpec, ...]]
    name: str = ""
    feature_level: int = 0


FeatureLevelRecord.FIELDS = (
    FieldSpec("name", "Name", "string", 0, 32767, 99, None, 99, None),
    FieldSpec("feature_level", "FeatureLevel", "int16", 0, 32767, 99, None, 99, None),
)


@dataclass(frozen=True, slots=True, kw_only=True)
class FenceBrokerRecord:
    """FenceBrokerRecord (type 7), versions 0-0."""

    API_KEY: ClassVar[int] = 7
    TYPE_NAME: ClassVar[str] = "FENCE_BROKER_RECORD"
    LOWEST_VERSION: ClassVar[int] = 0
    HIGHEST_VERSION: ClassVar[int] = 0
    FIELDS: ClassVar[tuple[FieldSpec, ...]]
    id: int = 0
    epoch: int = 0


FenceBrokerRecord.FIELDS = (
    FieldSpec("id", "Id", "int32", 0, 32767, 99, None, 99, None),
    FieldSpec("epoch", "Epoch", "int64", 0, 32767, 99, None, 99, None),
)


@dataclass(frozen=True, slots=True, kw_only=True)
class NoOpRecord:
    """NoOpRecord (type 20), versions 0-0."""

    API_KEY: ClassVar[int] = 20
    TYPE_NAME: ClassVar[str] = "NO_OP_RECORD"
    LOWEST_VERSION: ClassVar[int] = 0
    HIGHEST_VERSION: ClassVar[int] = 0
    FIELDS: ClassVar[tuple[FieldSpec, ...]]


NoOpRecord.FIELDS = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionChangeRecord:
    """PartitionChangeRecord (type 5), versions 0-2."""

    API_KEY: ClassVar[int] = 5
    TYPE_NAME: ClassVar[str] = "PARTITION_CHANGE_RECORD"
    LOWEST_VERSION: ClassVar[int] = 0
    HIGHEST_VERSION: ClassVar[int] = 2
    FIELDS: ClassVar[tuple[FieldSpec, ...]]
    partition_id: int = -1
    topic_id: UUID = ZERO_UUID
    isr: tuple[int, ...] | None = None
    leader: int = -2
    replicas: tuple[int, ...] | None = None
    removing_replicas: tuple[int, ...] | None = None
    adding_replicas: tuple[int, ...] | None = None
    leader_recovery_state: int = -1
    directories: tuple[UUID, ...] | None = None
    eligible_leader_replicas: tuple[int, ...] | None = None
    last_known_elr: tuple[int, ...] | None = None


PartitionChangeRecord.FIELDS = (
    FieldSpec("partition_id", "PartitionId", "int32", 0, 32767, 99, None, 99, None),
    FieldSpec("topic_id", "TopicId", "uuid", 0, 32767, 99, None, 99, None),
    FieldSpec("isr", "Isr", "[]int32", 0, 32767, 0, 0, 0, None),
    FieldSpec("leader", "Leader", "int32", 0, 32767, 99, 1, 0, None),
    FieldSpec("replicas", "Replicas", "[]int32", 0, 32767, 0, 2, 0, None),
    FieldSpec("removing_replicas", "RemovingReplicas", "[]int32", 0, 32767, 0, 3, 0, None),
    FieldSpec("adding_replicas", "AddingReplicas", "[]int32", 0, 32767, 0, 4, 0, None),
    FieldSpec("leader_recovery_state", "LeaderRecoveryState", "int8", 0, 32767, 99, 5, 0, None),
    FieldSpec("directories", "Directories", "[]uuid", 1, 32767, 1, 8, 1, None),
    FieldSpec(
        "eligible_leader_replicas", "EligibleLeaderReplicas", "[]int32", 2, 32767, 2, 6, 2, None
    ),
    FieldSpec("last_known_elr", "LastKnownElr", "[]int32", 2, 32767, 2, 7, 2, None),
)


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionRecord:
    """PartitionRecord (type 3), versions 0-2."""

    API_KEY: ClassVar[int] = 3
    TYPE_NAME: ClassVar[str] = "PARTITION_RECORD"
    LOWEST_VERSION: ClassVar[int] = 0
    HIGHEST_VERSION: ClassVar[int] = 2
    FIELDS: ClassVar[tuple[FieldSpec, ...]]
    partition_id: int = -1
    topic_id: UUID = ZERO_UUID
    replicas: tuple[int, ...] = ()
    isr: tuple[int, ...] = ()
    removing_replicas: tuple[int, ...] = ()
    adding_replicas: tuple[int, ...] = ()
    leader: int = -1
    leader_recovery_state: int = 0
    leader_epoch: int = -1
    partition_epoch: int = -1
    directories: tuple[UUID, ...] = ()
    eligible_leader_replicas: tuple[int, ...] | None = None
    last_known_elr: tuple[int, ...] | None = None


PartitionRecord.FIELDS = (
    FieldSpec("partition_id", "PartitionId", "int32", 0, 32767, 99, None, 99, None),
    FieldSpec("topic_id", "TopicId", "uuid", 0, 32767, 99, None, 99, None),
    FieldSpec("replicas", "Replicas", "[]int32", 0, 32767, 99, None, 99, None),
    FieldSpec("isr", "Isr", "[]int32", 0, 32767, 99, None, 99, None),
    FieldSpec("removing_replicas", "RemovingReplicas", "[]int32", 0, 32767, 99, None, 99, None),
    FieldSpec("adding_replicas", "AddingReplicas", "[]int32", 0, 32767, 99, None, 99, None),
    FieldSpec("leader", "Leader", "int32", 0, 32767, 99, None, 99, None),
    FieldSpec("leader_recovery_state", "LeaderRecoveryState", "int8", 0, 32767, 99, 0, 0, None),
    FieldSpec("leader_epoch", "LeaderEpoch", "int32", 0, 32767, 99, None, 99, None),
    FieldSpec("partition_epoch", "PartitionEpoch", "int32", 0, 32767, 99, None, 99, None),
    FieldSpec("directories", "Directories", "[]uuid", 1, 32767, 99, None, 99, None),
    FieldSpec(
        "eligible_leader_replicas", "EligibleLeaderReplicas", "[]int32", 2, 32767, 2, 1, 2, None
    ),
    FieldSpec("last_known_elr", "LastKnownElr", "[]int32", 2, 32767, 2, 2, 2, None),
)


@dataclass(frozen=True, slots=True, kw_only=True)
class ProducerIdsRecord:
    """ProducerIdsRecord (type 15), versions 0-0."""

    API_KEY: ClassVar[int] = 15
    TYPE_NAME: ClassVar[str] = "PRODUCER_IDS_RECORD"
    LOWEST_VERSION: ClassVar[int] = 0
    HIGHEST_VERSION: ClassVar[int] = 0
    FIELDS: ClassVar[tuple[FieldSpec, ...]]
    broker_id: int = 0
    broker_epoch: int = -1
    next_producer_id: int = 0


ProducerIdsRecord.FIELDS = (
    FieldSpec("broker_id", "BrokerId", "int32", 0, 32767, 99, None, 99, None),
    FieldSpec("broker_epoch", "BrokerEpoch", "int64", 0, 32767, 99, None, 99, None),
    FieldSpec("next_producer_id", "NextProducerId", "int64", 0, 32767, 99, None, 99, None),
)


@dataclass(frozen=True, slots=True, kw_only=True)
class RegisterBrokerRecordBrokerEndpoint:
    FIELDS: ClassVar[tuple[FieldSpec, ...]]
    name: str = ""
    host: str = ""
    port: int = 0
    security_protocol: int = 0


RegisterBrokerRecordBrokerEndpoint.FIELDS = (
    FieldSpec("name", "Name", "string", 0, 32767, 99, None, 99, None),
    FieldSpec("host", "Host", "string", 0, 32767, 99, None, 99, None),
    FieldSpec("port", "Port", "uint16", 0, 32767, 99, None, 99, None),
    FieldSpec("security_protocol", "SecurityProtocol", "int16", 0, 32767, 99, None, 99, None),
)


@dataclass(frozen=True, slots=True, kw_only=True)
class RegisterBrokerRecordBrokerFeature:
    FIELDS: ClassVar[tuple[FieldSpec, ...]]
    name: str = ""
    min_supported_version: int = 0
    max_supported_version: int = 0


RegisterBrokerRecordBrokerFeature.FIELDS = (
    FieldSpec("name", "Name", "string", 0, 32767, 99, None, 99, None),
    FieldSpec(
        "min_supported_version", "MinSupportedVersion", "int16", 0, 32767, 99, None, 99, None
    ),
    FieldSpec(
        "max_supported_version", "MaxSupportedVersion", "int16", 0, 32767, 99, None, 99, None
    ),
)


@dataclass(frozen=True, slots=True, kw_only=True)
class RegisterBrokerRecord:
    """RegisterBrokerRecord (type 0), versions 0-3."""

    API_KEY: ClassVar[int] = 0
    TYPE_NAME: ClassVar[str] = "REGISTER_BROKER_RECORD"
    LOWEST_VERSION: ClassVar[int] = 0
    HIGHEST_VERSION: ClassVar[int] = 3
    FIELDS: ClassVar[tuple[FieldSpec, ...]]
    broker_id: int = 0
    is_migrating_zk_broker: bool = False
    incarnation_id: UUID = ZERO_UUID
    broker_epoch: int = 0
    end_points: tuple[RegisterBrokerRecordBrokerEndpoint, ...] = ()
    features: tuple[RegisterBrokerRecordBrokerFeature, ...] = ()
    rack: str | None = ""
    fenced: bool = True
    in_controlled_shutdown: bool = False
    log_dirs: tuple[UUID, ...] = ()


RegisterBrokerRecord.FIELDS = (
    FieldSpec("broker_id", "BrokerId", "int32", 0, 32767, 99, None, 99, None),
    FieldSpec(
        "is_migrating_zk_broker", "IsMigratingZkBroker", "bool", 2, 32767, 99, None, 99, None
    ),
    FieldSpec("incarnation_id", "IncarnationId", "uuid", 0, 32767, 99, None, 99, None),
    FieldSpec("broker_epoch", "BrokerEpoch", "int64", 0, 32767, 99, None, 99, None),
    FieldSpec(
        "end_points",
        "EndPoints",
        "[]BrokerEndpoint",
        0,
        32767,
        99,
        None,
        99,
        RegisterBrokerRecordBrokerEndpoint,
    ),
    FieldSpec(
        "features",
        "Features",
        "[]BrokerFeature",
        0,
        32767,
        99,
        None,
        99,
        RegisterBrokerRecordBrokerFeature,
    ),
    FieldSpec("rack", "Rack", "string", 0, 32767, 0, None, 99, None),
    FieldSpec("fenced", "Fenced", "bool", 0, 32767, 99, None, 99, None),
    FieldSpec(
        "in_controlled_shutdown", "InControlledShutdown", "bool", 1, 32767, 99, None, 99, None
    ),
    FieldSpec("log_dirs", "LogDirs", "[]uuid", 3, 32767, 99, 0, 3, None),
)


@dataclass(frozen=True, slots=True, kw_only=True)
class RegisterControllerRecordControllerEndpoint:
    FIELDS: ClassVar[tuple[FieldSpec, ...]]
    name: str = ""
    host: str = ""
    port: int = 0
    security_protocol: int = 0


RegisterControllerRecordControllerEndpoint.FIELDS = (
    FieldSpec("name", "Name", "string", 0, 32767, 99, None, 99, None),
    FieldSpec("host", "Host", "string", 0, 32767, 99, None, 99, None),
    FieldSpec("port", "Port", "uint16", 0, 32767, 99, None, 99, None),
    FieldSpec("security_protocol", "SecurityProtocol", "int16", 0, 32767, 99, None, 99, None),
)


@dataclass(frozen=True, slots=True, kw_only=True)
class RegisterControllerRecordControllerFeature:
    FIELDS: ClassVar[tuple[FieldSpec, ...]]
    name: str = ""
    min_supported_version: int = 0
    max_supported_version: int = 0


RegisterControllerRecordControllerFeature.FIELDS = (
    FieldSpec("name", "Name", "string", 0, 32767, 99, None, 99, None),
    FieldSpec(
        "min_supported_version", "MinSupportedVersion", "int16", 0, 32767, 99, None, 99, None
    ),
    FieldSpec(
        "max_supported_version", "MaxSupportedVersion", "int16", 0, 32767, 99, None, 99, None
    ),
)


@dataclass(frozen=True, slots=True, kw_only=True)
class RegisterControllerRecord:
    """RegisterControllerRecord (type 27), versions 0-0."""

    API_KEY: ClassVar[int] = 27
    TYPE_NAME: ClassVar[str] = "REGISTER_CONTROLLER_RECORD"
    LOWEST_VERSION: ClassVar[int] = 0
    HIGHEST_VERSION: ClassVar[int] = 0
    FIELDS: ClassVar[tuple[FieldSpec, ...]]
    controller_id: int = 0
    incarnation_id: UUID = ZERO_UUID
    zk_migration_ready: bool = False
    end_points: tuple[RegisterControllerRecordControllerEndpoint, ...] = ()
    features: tuple[RegisterControllerRecordControllerFeature, ...] = ()


RegisterControllerRecord.FIELDS = (
    FieldSpec("controller_id", "ControllerId", "int32", 0, 32767, 99, None, 99, None),
    FieldSpec("incarnation_id", "IncarnationId", "uuid", 0, 32767, 99, None, 99, None),
    FieldSpec("zk_migration_ready", "ZkMigrationReady", "bool", 0, 32767, 99, None, 99, None),
    FieldSpec(
        "end_points",
        "EndPoints",
        "[]ControllerEndpoint",
        0,
        32767,
        99,
        None,
        99,
        RegisterControllerRecordControllerEndpoint,
    ),
    FieldSpec(
        "features",
        "Features",
        "[]ControllerFeature",
        0,
        32767,
        99,
        None,
        99,
        RegisterControllerRecordControllerFeature,
    ),
)


@dataclass(frozen=True, slots=True, kw_only=True)
class RemoveAccessControlEntryRecord:
    """RemoveAccessControlEntryRecord (type 19), versions 0-0."""

    API_KEY: ClassVar[int] = 19
    TYPE_NAME: ClassVar[str] = "REMOVE_ACCESS_CONTROL_ENTRY_RECORD"
    LOWEST_VERSION: ClassVar[int] = 0
    HIGHEST_VERSION: ClassVar[int] = 0
    FIELDS: ClassVar[tuple[FieldSpec, ...]]
    id: UUID = ZERO_UUID


RemoveAccessControlEntryRecord.FIELDS = (
    FieldSpec("id", "Id", "uuid", 0, 32767, 99, None, 99, None),
)


@dataclass(frozen=True, slots=True, kw_only=True)
class RemoveDelegationTokenRecord:
    """RemoveDelegationTokenRecord (type 26), versions 0-0."""

    API_KEY: ClassVar[int] = 26
    TYPE_NAME: ClassVar[str] = "REMOVE_DELEGATION_TOKEN_RECORD"
    LOWEST_VERSION: ClassVar[int] = 0
    HIGHEST_VERSION: ClassVar[int] = 0
    FIELDS: ClassVar[tuple[FieldSpec, ...]]
    token_id: str = ""


RemoveDelegationTokenRecord.FIELDS = (
    FieldSpec("token_id", "TokenId", "string", 0, 32767, 99, None, 99, None),
)


@dataclass(frozen=True, slots=True, kw_only=True)
class RemoveTopicRecord:
    """RemoveTopicRecord (type 9), versions 0-0."""

    API_KEY: ClassVar[int] = 9
    TYPE_NAME: ClassVar[str] = "REMOVE_TOPIC_RECORD"
    LOWEST_VERSION: ClassVar[int] = 0
    HIGHEST_VERSION: ClassVar[int] = 0
    FIELDS: ClassVar[tuple[FieldSpec, ...]]
    topic_id: UUID = ZERO_UUID


RemoveTopicRecord.FIELDS = (FieldSpec("topic_id", "TopicId", "uuid", 0, 32767, 99, None, 99, None),)


@dataclass(frozen=True, slots=True, kw_only=True)
class RemoveUserScramCredentialRecord:
    """RemoveUserScramCredentialRecord (type 22), versions 0-0."""

    API_KEY: ClassVar[int] = 22
    TYPE_NAME: ClassVar[str] = "REMOVE_USER_SCRAM_CREDENTIAL_RECORD"
    LOWEST_VERSION: ClassVar[int] = 0
    HIGHEST_VERSION: ClassVar[int] = 0
    FIELDS: ClassVar[tuple[FieldSpec, ...]]
    name: str = ""
    mechanism: int = 0


RemoveUserScramCredentialRecord.FIELDS = (
    FieldSpec("name", "Name", "string", 0, 32767, 99, None, 99, None),
    FieldSpec("mechanism", "Mechanism", "int8", 0, 32767, 99, None, 99, None),
)


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicRecord:
    """TopicRecord (type 2), versions 0-0."""

    API_KEY: ClassVar[int] = 2
    TYPE_NAME: ClassVar[str] = "TOPIC_RECORD"
    LOWEST_VERSION: ClassVar[int] = 0
    HIGHEST_VERSION: ClassVar[int] = 0
    FIELDS: ClassVar[tuple[FieldSpec, ...]]
    name: str = ""
    topic_id: UUID = ZERO_UUID


TopicRecord.FIELDS = (
    FieldSpec("name", "Name", "string", 0, 32767, 99, None, 99, None),
    FieldSpec("topic_id", "TopicId", "uuid", 0, 32767, 99, None, 99, None),
)


@dataclass(frozen=True, slots=True, kw_only=True)
class UnfenceBrokerRecord:
    """UnfenceBrokerRecord (type 8), versions 0-0."""

    API_KEY: ClassVar[int] = 8
    TYPE_NAME: ClassVar[str] = "UNFENCE_BROKER_RECORD"
    LOWEST_VERSION: ClassVar[int] = 0
    HIGHEST_VERSION: ClassVar[int] = 0
    FIELDS: ClassVar[tuple[FieldSpec, ...]]
    id: int = 0
    epoch: int = 0


UnfenceBrokerRecord.FIELDS = (
    FieldSpec("id", "Id", "int32", 0, 32767, 99, None, 99, None),
    FieldSpec("epoch", "Epoch", "int64", 0, 32767, 99, None, 99, None),
)


@dataclass(frozen=True, slots=True, kw_only=True)
class UnregisterBrokerRecord:
    """UnregisterBrokerRecord (type 1), versions 0-0."""

    API_KEY: ClassVar[int] = 1
    TYPE_NAME: ClassVar[str] = "UNREGISTER_BROKER_RECORD"
    LOWEST_VERSION: ClassVar[int] = 0
    HIGHEST_VERSION: ClassVar[int] = 0
    FIELDS: ClassVar[tuple[FieldSpec, ...]]
    broker_id: int = 0
    broker_epoch: int = 0


UnregisterBrokerRecord.FIELDS = (
    FieldSpec("broker_id", "BrokerId", "int32", 0, 32767, 99, None, 99, None),
    FieldSpec("broker_epoch", "BrokerEpoch", "int64", 0, 32767, 99, None, 99, None),
)


@dataclass(frozen=True, slots=True, kw_only=True)
class UserScramCredentialRecord:
    """UserScramCredentialRecord (type 11), versions 0-0."""

    API_KEY: ClassVar[int] = 11
    TYPE_NAME: ClassVar[str] = "USER_SCRAM_CREDENTIAL_RECORD"
    LOWEST_VERSION: ClassVar[int] = 0
    HIGHEST_VERSION: ClassVar[int] = 0
    FIELDS: ClassVar[tuple[FieldSpec, ...]]
    name: str = ""
    mechanism: int = 0
    salt: bytes = b""
    stored_key: bytes = b""
    server_key: bytes = b""
    iterations: int = 0


UserScramCredentialRecord.FIELDS = (
    FieldSpec("name", "Name", "string", 0, 32767, 99, None, 99, None),
    FieldSpec("mechanism", "Mechanism", "int8", 0, 32767, 99, None, 99, None),
    FieldSpec("salt", "Salt", "bytes", 0, 32767, 99, None, 99, None),
    FieldSpec("stored_key", "StoredKey", "bytes", 0, 32767, 99, None, 99, None),
    FieldSpec("server_key", "ServerKey", "bytes", 0, 32767, 99, None, 99, None),
    FieldSpec("iterations", "Iterations", "int32", 0, 32767, 99, None, 99, None),
)


@dataclass(frozen=True, slots=True, kw_only=True)
class ZkMigrationStateRecord:
    """ZkMigrationStateRecord (type 21), versions 0-0."""

    API_KEY: ClassVar[int] = 21
    TYPE_NAME: ClassVar[str] = "ZK_MIGRATION_STATE_RECORD"
    LOWEST_VERSION: ClassVar[int] = 0
    HIGHEST_VERSION: ClassVar[int] = 0
    FIELDS: ClassVar[tuple[FieldSpec, ...]]
    zk_migration_state: int = 0


ZkMigrationStateRecord.FIELDS = (
    FieldSpec("zk_migration_state", "ZkMigrationState", "int8", 0, 32767, 99, None, 99, None),
)


RECORD_TYPES: dict[int, type] = {
    0: RegisterBrokerRecord,
    1: UnregisterBrokerRecord,
    2: TopicRecord,
    3: PartitionRecord,
    4: ConfigRecord,
    5: PartitionChangeRecord,
    7: FenceBrokerRecord,
    8: UnfenceBrokerRecord,
    9: RemoveTopicRecord,
    10: DelegationTokenRecord,
    11: UserScramCredentialRecord,
    12: FeatureLevelRecord,
    14: ClientQuotaRecord,
    15: ProducerIdsRecord,
    17: BrokerRegistrationChangeRecord,
    18: AccessControlEntryRecord,
    19: RemoveAccessControlEntryRecord,
    20: NoOpRecord,
    21: ZkMigrationStateRecord,
    22: RemoveUserScramCredentialRecord,
    23: BeginTransactionRecord,
    24: EndTransactionRecord,
    25: AbortTransactionRecord,
    26: RemoveDelegationTokenRecord,
    27: RegisterControllerRecord,
}
