"""Authorization of the transaction APIs (issue 17): AddPartitionsToTxn needs WRITE on
the transactional id and its topics (CLUSTER_ACTION from v4, brokers only);
DescribeTransactions DESCRIBE on each id, answering only the topics the principal may
describe; DescribeProducers READ on each topic. Each refusal encodes."""

from __future__ import annotations

from typing import Any

from kio.index import load_request_schema
from kio.schema.errors import ErrorCode

from keeperless.protocol.build import build
from keeperless.protocol.framing import RequestHeader, encode_response, response_class
from keeperless.security.api_rules import _NO_TIME, authorized_handlers
from keeperless.security.authorizer import CLUSTER_NAME, Authorizer
from keeperless.security.authz import AclOp, Authz, Resource

X, T, C = Resource.TRANSACTIONAL_ID, Resource.TOPIC, Resource.CLUSTER
OK = ErrorCode.none


class _Allowing(Authz):
    """Allows exactly the (operation, resource, name) triples given."""

    def __init__(self, *allowed: tuple[AclOp, Resource, str]) -> None:
        super().__init__(lambda: None, Authorizer())  # type: ignore[arg-type,return-value]
        self.set = set(allowed)

    def allowed(self, who: Any, op: AclOp, resource: Resource, name: str = CLUSTER_NAME) -> bool:
        return (op, resource, name) in self.set


def _run(authz: Authz, key: int, version: int, body: dict[str, Any], answer: Any) -> Any:
    import asyncio

    called: list[Any] = []

    async def handler(header: RequestHeader, req: Any) -> Any:
        called.append(req)
        return answer(header, req)

    h = authorized_handlers({key: handler}, authz)[key]
    header = RequestHeader(key, version, 1, "c")
    req = build(load_request_schema(key, version), body)
    resp = asyncio.run(h(header, req))
    assert encode_response(header, resp)
    return resp, called


def _add_v3(header: RequestHeader, req: Any) -> Any:
    results = [{"name": t.name, "results_by_partition": [
        {"partition_index": i, "partition_error_code": OK} for i in t.partitions]}
        for t in req.v3_and_below_topics]  # fmt: skip
    return build(response_class(24, header.api_version),
                 {"throttle_time": 0, "results_by_topic_v3_and_below": results})  # fmt: skip


def test_add_partitions_to_txn_needs_write_on_the_id_and_each_topic() -> None:
    body = {"v3_and_below_transactional_id": "tx", "v3_and_below_producer_id": 1,
            "v3_and_below_producer_epoch": 0, "v3_and_below_topics": [
                {"name": "a", "partitions": [0, 1]}, {"name": "b", "partitions": [0]}]}  # fmt: skip

    def errors(resp: Any) -> dict[str, set[int]]:
        return {t.name: {p.partition_error_code for p in t.results_by_partition}
                for t in resp.results_by_topic_v3_and_below}  # fmt: skip

    resp, called = _run(_Allowing((AclOp.WRITE, T, "a"), (AclOp.WRITE, T, "b")), 24, 3, body,
                        _add_v3)  # fmt: skip
    assert not called
    assert errors(resp) == {"a": {ErrorCode.transactional_id_authorization_failed},
                            "b": {ErrorCode.transactional_id_authorization_failed}}  # fmt: skip
    resp, called = _run(_Allowing((AclOp.WRITE, X, "tx"), (AclOp.WRITE, T, "a")), 24, 3, body,
                        _add_v3)  # fmt: skip
    assert not called
    assert errors(resp) == {"a": {ErrorCode.operation_not_attempted},
                            "b": {ErrorCode.topic_authorization_failed}}  # fmt: skip
    everything = _Allowing((AclOp.WRITE, X, "tx"), (AclOp.WRITE, T, "a"), (AclOp.WRITE, T, "b"))
    resp, called = _run(everything, 24, 3, body, _add_v3)
    assert len(called) == 1
    assert errors(resp) == {"a": {0}, "b": {0}}
    # v4+: only brokers (CLUSTER_ACTION) verify or add for others
    txn = {"transactional_id": "tx", "producer_id": 1, "producer_epoch": 0,
           "verify_only": True, "topics": [{"name": "a", "partitions": [0]}]}  # fmt: skip
    v4 = {"transactions": [txn]}
    resp, called = _run(everything, 24, 4, v4, lambda h, r: None)
    assert not called
    assert resp.error_code == ErrorCode.cluster_authorization_failed


def test_describe_transactions_per_id_and_only_describable_topics() -> None:
    def answer(header: RequestHeader, req: Any) -> Any:
        states = [{"error_code": OK, "transactional_id": t, "transaction_state": "Ongoing",
                   "transaction_timeout": 60000, "transaction_start_time": _NO_TIME,
                   "producer_id": 5, "producer_epoch": 0, "topics": [
                       {"topic": "seen", "partitions": [0]},
                       {"topic": "hidden", "partitions": [1]}]}
                  for t in req.transactional_ids]  # fmt: skip
        return build(response_class(65, header.api_version),
                     {"throttle_time": 0, "transaction_states": states})  # fmt: skip

    authz = _Allowing((AclOp.DESCRIBE, X, "mine"), (AclOp.DESCRIBE, T, "seen"))
    resp, called = _run(authz, 65, 0, {"transactional_ids": ["mine", "theirs"]}, answer)
    assert [list(r.transactional_ids) for r in called] == [["mine"]]
    by_id = {s.transactional_id: s for s in resp.transaction_states}
    assert by_id["theirs"].error_code == ErrorCode.transactional_id_authorization_failed
    assert by_id["mine"].error_code == ErrorCode.none
    assert [t.topic for t in by_id["mine"].topics] == ["seen"]


def test_describe_producers_needs_read_on_each_topic() -> None:
    def answer(header: RequestHeader, req: Any) -> Any:
        topics = [{"name": t.name, "partitions": [
            {"partition_index": i, "error_code": OK, "error_message": None,
             "active_producers": []} for i in t.partition_indexes]}
            for t in req.topics]  # fmt: skip
        return build(response_class(61, header.api_version),
                     {"throttle_time": 0, "topics": topics})  # fmt: skip

    body = {"topics": [{"name": "ok", "partition_indexes": [0]},
                       {"name": "no", "partition_indexes": [0, 1]}]}  # fmt: skip
    resp, called = _run(_Allowing((AclOp.READ, T, "ok")), 61, 0, body, answer)
    assert [[t.name for t in r.topics] for r in called] == [["ok"]]
    errs = {t.name: [p.error_code for p in t.partitions] for t in resp.topics}
    assert errs == {"ok": [0], "no": [ErrorCode.topic_authorization_failed] * 2}
