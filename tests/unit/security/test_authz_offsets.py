"""Authorization of committed offsets (issue 17, found by a helper's probe): committing
needs READ on each topic (besides the group), and fetching offsets shows only topics
the principal may DESCRIBE - left out of an all-topics answer, refused when named."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from keeperless.protocol.build import build
from keeperless.protocol.framing import RequestHeader, response_class
from keeperless.security.authz import AclOp, Resource
from tests.unit.security.test_authz_txn_apis import OK, _Allowing, _run

T, G = Resource.TOPIC, Resource.GROUP


def _commit_answer(header: RequestHeader, req: Any) -> Any:
    topics = [{"name": t.name, "partitions": [
        {"partition_index": p.partition_index, "error_code": OK} for p in t.partitions]}
        for t in req.topics]  # fmt: skip
    return build(response_class(header.api_key, header.api_version),
                 {"throttle_time": 0, "topics": topics})  # fmt: skip


def _errors(resp: Any) -> dict[str, list[int]]:
    return {t.name: [p.error_code for p in t.partitions] for t in resp.topics}


def test_offset_commits_need_read_on_each_topic() -> None:
    part = {"partition_index": 0, "committed_offset": 5, "committed_leader_epoch": -1,
            "committed_metadata": ""}  # fmt: skip
    topics = [{"name": "mine", "partitions": [part]}, {"name": "hidden", "partitions": [part]}]
    commit = {"group_id": "g", "generation_id_or_member_epoch": -1, "member_id": "",
              "group_instance_id": None, "topics": topics}  # fmt: skip
    allowed = _Allowing((AclOp.READ, G, "g"), (AclOp.READ, T, "mine"))
    resp, called = _run(allowed, 8, 8, commit, _commit_answer)
    assert [[t.name for t in r.topics] for r in called] == [["mine"]]
    assert _errors(resp) == {"mine": [OK], "hidden": [ErrorCode.topic_authorization_failed]}
    # the group first: without READ on it nothing is committed, whatever the topics
    resp, called = _run(_Allowing((AclOp.READ, T, "mine")), 8, 8, commit, _commit_answer)
    assert not called
    assert set(_errors(resp)) == {"mine", "hidden"}
    assert {e for es in _errors(resp).values() for e in es} == {
        ErrorCode.group_authorization_failed
    }
    txn = {"transactional_id": "tx", "group_id": "g", "producer_id": 1, "producer_epoch": 0,
           "generation_id": -1, "member_id": "", "group_instance_id": None,
           "topics": topics}  # fmt: skip
    allowed.set.add((AclOp.WRITE, Resource.TRANSACTIONAL_ID, "tx"))
    resp, called = _run(allowed, 28, 3, txn, _commit_answer)
    assert [[t.name for t in r.topics] for r in called] == [["mine"]]
    assert _errors(resp) == {"mine": [OK], "hidden": [ErrorCode.topic_authorization_failed]}


def _fetch_answer(header: RequestHeader, req: Any) -> Any:
    def topics() -> list[dict[str, Any]]:
        return [{"name": n, "partitions": [
            {"partition_index": 0, "committed_offset": 5, "committed_leader_epoch": -1,
             "metadata": "", "error_code": OK}]} for n in ("mine", "hidden")]  # fmt: skip

    cls = response_class(9, header.api_version)
    if header.api_version >= 8:
        groups = [{"group_id": g.group_id, "topics": topics(), "error_code": OK}
                  for g in req.groups]  # fmt: skip
        return build(cls, {"throttle_time": 0, "groups": groups})
    return build(cls, {"throttle_time": 0, "topics": topics(), "error_code": OK})


def test_offset_fetches_show_only_describable_topics() -> None:
    allowed = _Allowing((AclOp.DESCRIBE, G, "g"), (AclOp.DESCRIBE, T, "mine"))
    named = [
        {"name": "mine", "partition_indexes": [0]},
        {"name": "hidden", "partition_indexes": [0]},
    ]
    for topics in (None, named):
        body = {"groups": [{"group_id": "g", "topics": topics}], "require_stable": False}
        resp, _ = _run(allowed, 9, 8, body, _fetch_answer)
        got = {t.name: (t.partitions[0].committed_offset, t.partitions[0].error_code)
               for t in resp.groups[0].topics}  # fmt: skip
        old, _ = _run(allowed, 9, 7, {"group_id": "g", "topics": topics,
                                      "require_stable": False}, _fetch_answer)  # fmt: skip
        assert {t.name: (t.partitions[0].committed_offset, t.partitions[0].error_code)
                for t in old.topics} == got  # fmt: skip
        assert got["mine"] == (5, OK)
        if topics is None:
            assert set(got) == {"mine"}  # left out of an all-topics answer
        else:
            assert got["hidden"] == (-1, ErrorCode.topic_authorization_failed)
