"""Malformed and hostile request bodies, shared by the webhook and extender fuzz tests: fixed
nasty bodies, mutations of recorded real requests (truncated, bytes flipped, a field swapped
for a value of the wrong type), arbitrary JSON values, and a memory-growth probe."""

from __future__ import annotations

import json
import random
import gc
import logging
import tracemalloc
from typing import Any, Awaitable, Callable

from hypothesis import strategies as st

FIXED_BODIES: tuple[bytes, ...] = (
    b"", b" ", b"\n", b"null", b"0", b"[]", b"{}", b'""', b"\x00" * 100, b"\xff\xfe\xfd",
    b"{" * 5000, b"[" * 100_000, b'{"a":' * 2000, b"1e999999", b"-", b'"\\ud800"',
    b'"' + b"a" * 100_000 + b'"', b"{\"a\":1,}", b"NaN", b"[1,2", b"{\"a\" 1}",
)

# Numbers a Go int64 cannot hold, integers spelled as strings, floats where an integer belongs:
# each must be refused while decoding (an answer echoing one could not be encoded again).
HOSTILE_NUMBERS: tuple[Any, ...] = ("99999999999999999999", 99999999999999999999, -99999999999999999999, 2 ** 63,
                                    -(2 ** 63) - 1, 2 ** 64 - 1, 1e308, 0.5, "1e3", "-1", True)

WRONG_TYPES: tuple[Any, ...] = (None, 1, -1, 0, "x", "", [], {}, [1], {"a": None}, True, 1e308, -1e308,
                                2 ** 64, "9" * 50, [None] * 3, {"": ""}) + HOSTILE_NUMBERS


def leaf_paths(doc: Any, path: tuple = ()) -> list[tuple]:
    """Every path from the root of a JSON document to a value that is not an object or array."""
    if isinstance(doc, dict):
        return [p for k, v in doc.items() for p in leaf_paths(v, path + (k,))]
    if isinstance(doc, list):
        return [p for i, v in enumerate(doc) for p in leaf_paths(v, path + (i,))]
    return [path]


def replaced(doc: Any, path: tuple, value: Any) -> Any:
    """A copy of ``doc`` with the value at ``path`` replaced."""
    out = json.loads(json.dumps(doc))
    target = out
    for k in path[:-1]:
        target = target[k]
    target[path[-1]] = value
    return out

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=20,
)


def wire(doc: Any) -> bytes:
    """Compact JSON ending in one newline, as Go's encoders send it."""
    return json.dumps(doc, separators=(",", ":")).encode() + b"\n"


def swap_a_field(rng: random.Random, doc: Any) -> None:
    """Walk down a random path of objects and lists and replace what is there with a value of
    the wrong type."""
    target = doc
    while True:
        keys = list(target) if isinstance(target, dict) else list(range(len(target))) if isinstance(target, list) else []
        if not keys:
            return
        k = rng.choice(keys)
        if isinstance(target[k], (dict, list)) and target[k] and rng.random() < 0.75:
            target = target[k]
            continue
        target[k] = rng.choice(WRONG_TYPES)
        return


def mutated(rng: random.Random, seeds: list[bytes], n: int,
            root: Callable[[Any], Any] = lambda doc: doc) -> list[bytes]:
    """`n` bodies: the fixed ones, then mutations of random seeds. `root` picks the part of a
    seed document whose fields get swapped (e.g. an AdmissionReview's request)."""
    out = list(FIXED_BODIES)
    while len(out) < n:
        seed = rng.choice(seeds)
        how = rng.randrange(4)
        if how == 0:
            out.append(seed[: rng.randrange(len(seed))])
        elif how == 1:
            b = bytearray(seed)
            for _ in range(rng.randrange(1, 8)):
                b[rng.randrange(len(b))] = rng.randrange(256)
            out.append(bytes(b))
        else:
            doc = json.loads(seed)
            swap_a_field(rng, root(doc))
            out.append(wire(doc))
    return out[:n]


async def memory_growth(round_: Callable[[], Awaitable[None]]) -> int:
    """Bytes still allocated after a second identical round (the first warms caches). The
    servers' warnings about the bad bodies are muted meanwhile: pytest keeps every captured log
    line, which is the test harness growing, not the server."""
    await round_()
    gc.collect()
    quiet = logging.getLogger("gpuqueue")
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        await round_()
        gc.collect()  # garbage in reference cycles awaiting the collector is not growth
        return tracemalloc.get_traced_memory()[0] - base
    finally:
        tracemalloc.stop()
        quiet.setLevel(level)
