"""Client quotas in the metadata log (KIP-546): AlterClientQuotas writes ClientQuotaRecord,
DescribeClientQuotas is answered by brokers from their image. Enforcement comes later."""

from __future__ import annotations

from collections.abc import Sequence

from kio.schema.errors import ErrorCode

from keeperless.controller.quorum_controller import QuorumController, Result
from keeperless.metadata import _records_gen as r
from keeperless.metadata.admin import ApiError, QuotaAlteration
from keeperless.metadata.image import QuotaEntity

__all__ = ["alter_client_quotas"]

# entity types and the quota keys each accepts (Kafka's QuotaConfigs)
_CLIENT_KEYS = {
    "producer_byte_rate",
    "consumer_byte_rate",
    "request_percentage",
    "controller_mutation_rate",
}
KEYS = {"user": _CLIENT_KEYS, "client-id": _CLIENT_KEYS, "ip": {"connection_creation_rate"}}
_INT_KEYS = {"producer_byte_rate", "consumer_byte_rate", "connection_creation_rate"}

# (entity, [(key, value, remove)])


def _check(entity: QuotaEntity, ops: Sequence[tuple[str, float, bool]]) -> str | None:
    types = [t for t, _ in entity]
    if not entity or len(set(types)) != len(types):
        return f"Invalid empty or duplicate entity types in {list(entity)}"
    for t in types:
        if t not in KEYS:
            return f"Unhandled client quota entity type: {t}"
    if "ip" in types and len(types) > 1:
        return "Invalid quota entity combination, IP entity should not be combined with others"
    allowed = set.intersection(*(KEYS[t] for t in types))
    for key, value, remove in ops:
        if key not in allowed:
            return f"Invalid configuration key {key}"
        if remove:
            continue
        if value <= 0:
            return f"Invalid value {value} for configuration key {key}: must be positive"
        if key in _INT_KEYS and value != int(value):
            return f"Configuration {key} must be a Long value"
    return None


def alter_client_quotas(
    c: QuorumController, changes: Sequence[QuotaAlteration], validate_only: bool
) -> Result[list[ApiError]]:
    records: list[r.ClientQuotaRecord] = []
    results: list[ApiError] = []
    for raw_entity, ops in changes:
        entity = tuple(sorted(raw_entity))
        bad = _check(entity, ops)
        if bad is not None:
            results.append(ApiError(ErrorCode.invalid_request, bad))
            continue
        results.append(ApiError.none())
        current = c.image.client_quotas.get(entity, {})
        for key, value, remove in ops:
            if remove and key not in current:
                continue
            records.append(
                r.ClientQuotaRecord(
                    entity=tuple(
                        r.ClientQuotaRecordEntityData(entity_type=t, entity_name=n)
                        for t, n in entity
                    ),
                    key=key,
                    value=0.0 if remove else float(value),
                    remove=remove,
                )
            )
    return Result([] if validate_only else list(records), results)
