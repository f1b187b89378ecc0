"""kafka-python, aiokafka and kcat against a real node."""

from __future__ import annotations

import asyncio
import shutil
import subprocess

import pytest

from tests.integration.cluster import Node


def test_kafka_python_admin_produce_group_commit(node: Node) -> None:
    from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.admin import NewTopic

    admin = KafkaAdminClient(bootstrap_servers=node.bootstrap)
    # kafka-python infers the broker's release from ApiVersions and picks features by it
    assert admin._client.check_version() == (4, 1)
    admin.create_topics([NewTopic("kp", 2, 1)])
    assert "kp" in admin.list_topics()
    producer = KafkaProducer(bootstrap_servers=node.bootstrap, compression_type="gzip", acks="all")
    for i in range(20):
        producer.send("kp", key=b"k%d" % (i % 3), value=b"v%d" % i, headers=[("n", b"%d" % i)]).get(
            10
        )
    producer.close()
    consumer = KafkaConsumer(
        "kp",
        bootstrap_servers=node.bootstrap,
        group_id="kpg",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        consumer_timeout_ms=15000,
    )
    got = []
    for m in consumer:
        got.append(m)
        if len(got) == 20:
            break
    consumer.commit()
    assert sorted(m.value for m in got) == sorted(b"v%d" % i for i in range(20))
    assert all(dict(m.headers)["n"] == m.value[1:] for m in got)
    committed = [consumer.committed(TopicPartition("kp", p)) or 0 for p in (0, 1)]
    consumer.close()
    assert sum(committed) == 20
    groups = admin.list_groups()
    assert any("kpg" in str(g) for g in groups)
    admin.close()


def test_aiokafka_produce_consume_group(node: Node) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    async def run() -> list[bytes]:
        admin = AIOKafkaAdminClient(bootstrap_servers=node.bootstrap)
        await admin.start()
        await admin.create_topics([NewTopic("aio", 3, 1)])
        await admin.close()
        producer = AIOKafkaProducer(
            bootstrap_servers=node.bootstrap, compression_type="lz4", enable_idempotence=True
        )
        await producer.start()
        for i in range(30):
            await producer.send_and_wait("aio", b"m%d" % i, key=b"%d" % i, headers=[("h", b"1")])
        await producer.stop()
        consumer = AIOKafkaConsumer(
            "aio",
            bootstrap_servers=node.bootstrap,
            group_id="aiog",
            auto_offset_reset="earliest",
            enable_auto_commit=False,
        )
        await consumer.start()
        out: list[bytes] = []
        try:
            async with asyncio.timeout(30):
                async for m in consumer:
                    out.append(m.value)
                    if len(out) == 30:
                        break
            await consumer.commit()
        finally:
            await consumer.stop()
        return out

    got = asyncio.run(run())
    assert sorted(got) == sorted(b"m%d" % i for i in range(30))


needs_kcat = pytest.mark.skipif(
    shutil.which("kcat") is None, reason="kcat not installed (make test installs it)"
)


@needs_kcat
def test_kcat_list_produce_consume(node: Node) -> None:
    subprocess.run(
        ["kcat", "-b", node.bootstrap, "-P", "-t", "kc", "-K:"],
        input="a:one\nb:two\nc:three\n",
        text=True,
        check=True,
        timeout=30,
    )
    listing = subprocess.run(
        ["kcat", "-b", node.bootstrap, "-L"], capture_output=True, text=True, check=True, timeout=30
    ).stdout
    assert 'topic "kc" with 1 partitions' in listing
    assert "broker 1 at 127.0.0.1" in listing
    out = subprocess.run(
        [
            "kcat",
            "-b",
            node.bootstrap,
            "-C",
            "-t",
            "kc",
            "-e",
            "-o",
            "beginning",
            "-f",
            "%k=%s@%o\n",
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    ).stdout
    assert out.splitlines() == ["a=one@0", "b=two@1", "c=three@2"]
