"""The transaction coordinator loads its partition whatever its size (it read 1 MiB
slices and failed at the first batch one of them cut: issue 23's audit; the group
coordinator's twin is in test_group_offsets)."""

from __future__ import annotations

import uuid
from pathlib import Path

from keeperless.broker.txn_markers import TxnMarkerWriter
from keeperless.coordinator.txn_records import TxnMetadata, TxnStatus, txn_key, txn_value
from keeperless.group.coordinator import GroupCoordinator, GroupSettings
from keeperless.metadata import _records_gen as r
from keeperless.protocol.records import build_batch, iter_batches, patch_offsets
from keeperless.storage.batch_scan import SCAN_WINDOW_BYTES
from keeperless.txn.coordinator import TXN_TOPIC, TxnCoordinator, TxnSettings
from tests.unit.brokers import make_broker

TID = uuid.uuid4()


def test_a_transaction_coordinator_loads_state_written_past_every_read_window(
    tmp_path: Path,
) -> None:
    b = make_broker(tmp_path)
    gc = GroupCoordinator(b, GroupSettings())
    tc = TxnCoordinator(b, TxnSettings(partitions=1), TxnMarkerWriter(b), gc.find_coordinator)
    b.on_committed(
        [
            r.TopicRecord(name=TXN_TOPIC, topic_id=TID),
            r.PartitionRecord(partition_id=0, topic_id=TID, replicas=(1, 2), isr=(1, 2), leader=2),
        ],
        3,
    )
    p = b.partitions.get(TXN_TOPIC, 0)
    assert p is not None
    # one transactional id's state, rewritten with ever more partitions: ~300 KB batches
    parts = {(f"topic-{i}", j) for i in range(300) for j in range(60)}
    epoch = 0
    while p.log.size_bytes < 3 * SCAN_WINDOW_BYTES:
        epoch += 1
        md = TxnMetadata("x", 7, epoch, 60_000, TxnStatus.ONGOING, parts, 1, 1)
        batch = bytearray(build_batch([(txn_key("x"), txn_value(md), ())]))
        for pos, _ in iter_batches(batch):
            patch_offsets(batch, pos, p.log.log_end_offset, 1)
        p.append_replica(bytes(batch), 0)
    b.on_committed([r.PartitionChangeRecord(partition_id=0, topic_id=TID, leader=1, isr=(1, 2))], 4)
    assert tc.txns["x"].producer_epoch == epoch
    b.close()
