"""Hostile input (issue 17), against a baseline measured in the same run:

1. decoding: --inputs (default 1,000,000) mutated and random request frames of every
   API and version a node serves, each decoded as the request router does; every one
   must decode or be refused with ProtocolError (anything else is counted as a crash),
   the process's peak RSS growth is reported; the baseline is the rate of decoding the
   same APIs' valid frames;
2. a live node: --socket-inputs (default 20,000) of those frames sent over fresh and
   reused connections; the node must still answer ApiVersions and take a real produce
   afterwards, and its RSS growth is reported.

    python bench/fuzz.py [--inputs 1000000] [--socket-inputs 20000] [--seed 1]

Prints a table and writes bench/results/fuzz-<time>.json (its short form runs in make
test).
"""

from __future__ import annotations

import argparse
import random
import resource
import socket
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.integration.cluster import Node, api_versions_ok  # noqa: E402
from tests.unit.protocol.test_request_fuzz import APIS, valid_frame  # noqa: E402

from bench._report import write_result  # noqa: E402
from keeperless.protocol.framing import ProtocolError, decode_request, read_header  # noqa: E402

HUGE = (b"\x7f\xff\xff\xff", b"\xff\xff\xff\xf0", b"\x80\x80\x80\x08")


def mutate(rng: random.Random, frames: list[bytes]) -> bytes:
    frame = bytearray(rng.choice(frames))
    how = rng.randrange(5)
    if how == 0:
        return bytes(frame[:10]) + rng.randbytes(rng.randrange(300))
    if how == 1 and len(frame) > 11:
        return bytes(frame[: rng.randrange(10, len(frame))])
    if how == 2:
        return bytes(frame) + rng.randbytes(rng.randrange(1, 64))
    for _ in range(rng.randrange(1, 9)):
        pos = rng.randrange(len(frame))
        if how == 3 and pos + 4 <= len(frame):
            frame[pos : pos + 4] = rng.choice(HUGE)
        else:
            frame[pos] ^= rng.randrange(1, 256)
    return bytes(frame)


def decode(frame: bytes) -> bool:
    view = memoryview(frame)
    header, pos = read_header(view)
    decode_request(header, view, pos)
    return True


def decoding(n: int, seed: int) -> dict[str, object]:
    frames = [valid_frame(k, v) for k, v in APIS]
    t0 = time.perf_counter()
    rounds = max(1, n // len(frames) // 10)
    for _ in range(rounds):
        for f in frames:
            decode(f)
    baseline = rounds * len(frames) / (time.perf_counter() - t0)
    rng = random.Random(seed)
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    decoded = refused = crashed = 0
    examples: list[str] = []
    t0 = time.perf_counter()
    for _ in range(n):
        f = mutate(rng, frames)
        try:
            decode(f)
            decoded += 1
        except ProtocolError:
            refused += 1
        except Exception as e:  # a crash: what the node would log with a traceback
            crashed += 1
            if len(examples) < 5:
                examples.append(f"{type(e).__name__}: {e} ({f[:12].hex()})")
    rate = n / (time.perf_counter() - t0)
    rss1 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"inputs": n, "decoded": decoded, "refused": refused, "crashed": crashed,
            "examples": examples, "inputs_per_s": round(rate),
            "valid_decodes_per_s_baseline": round(baseline),
            "peak_rss_growth_kb": rss1 - rss0}  # fmt: skip


def _rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return -1


def live(n: int, seed: int, workdir: Path) -> dict[str, object]:
    from confluent_kafka import Producer

    frames = [valid_frame(k, v) for k, v in APIS]
    rng = random.Random(seed)
    node = Node(workdir)
    node.format()
    node.start()
    try:
        assert node.proc is not None
        rss0 = _rss_kb(node.proc.pid)
        sent = closed = 0
        t0 = time.perf_counter()
        s: socket.socket | None = None
        for i in range(n):
            if s is None or i % 50 == 0:
                if s is not None:
                    s.close()
                s = socket.create_connection(("127.0.0.1", node.port), timeout=5)
            f = mutate(rng, frames)
            try:
                s.sendall(len(f).to_bytes(4, "big") + f)
                sent += 1
            except OSError:
                closed += 1
                s.close()
                s = None
        if s is not None:
            s.close()
        elapsed = time.perf_counter() - t0
        alive = api_versions_ok(node.port)
        p = Producer({"bootstrap.servers": node.bootstrap})
        p.produce("after-fuzz", value=b"still here")
        produced = p.flush(30) == 0
        rss1 = _rss_kb(node.proc.pid)
        return {"inputs": n, "sent": sent, "connections_closed_by_node": closed,
                "inputs_per_s": round(n / elapsed), "node_alive": alive,
                "produce_after": produced, "node_rss_growth_kb": rss1 - rss0}  # fmt: skip
    finally:
        node.stop()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--inputs", type=int, default=1_000_000)
    ap.add_argument("--socket-inputs", type=int, default=20_000)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args(argv)
    import tempfile

    dec = decoding(args.inputs, args.seed)
    with tempfile.TemporaryDirectory() as tmp:
        node = live(args.socket_inputs, args.seed, Path(tmp))
    print(f"{'decoding':<12} {'inputs':>10} {'decoded':>9} {'refused':>9} {'crashed':>8} "
          f"{'inputs/s':>9} {'valid/s (baseline)':>19} {'RSS growth':>11}")  # fmt: skip
    growth = f"{dec['peak_rss_growth_kb']} KB"
    print(f"{'':<12} {dec['inputs']:>10,} {dec['decoded']:>9,} {dec['refused']:>9,} "
          f"{dec['crashed']:>8} {dec['inputs_per_s']:>9,} "
          f"{dec['valid_decodes_per_s_baseline']:>19,} {growth:>11}")  # fmt: skip
    print()
    print(f"{'live node':<12} {'inputs':>10} {'inputs/s':>9} {'alive after':>12} "
          f"{'produce after':>14} {'RSS growth':>11}")  # fmt: skip
    node_growth = f"{node['node_rss_growth_kb']} KB"
    alive, after = str(node["node_alive"]), str(node["produce_after"])
    print(f"{'':<12} {node['inputs']:>10,} {node['inputs_per_s']:>9,} "
          f"{alive:>12} {after:>14} {node_growth:>11}")  # fmt: skip
    for e in dec["examples"]:  # type: ignore[attr-defined]
        print("crash:", e)
    write_result("fuzz", {"decoding": dec, "live_node": node})


if __name__ == "__main__":
    main()
