"""The HostPriorityList encoder: its joined bytes read back exactly as orjson's encoding of the
same entries, for node names that need no escaping and for names that do."""

from __future__ import annotations

import random

import orjson

from gpuqueue.extender.scheduler.wire import encode_host_priorities


def test_host_priorities_encode_like_json_for_any_names():
    rnd = random.Random(7)
    alphabet = "abcz09.-" * 4 + '"\\\n\té/ '
    for _ in range(300):
        hosts = ["".join(rnd.choice(alphabet) for _ in range(rnd.randrange(0, 12))) for _ in range(rnd.randrange(0, 20))]
        scores = [rnd.randrange(11) for _ in hosts]
        body = encode_host_priorities(hosts, scores)
        assert orjson.loads(body) == [{"Host": h, "Score": s} for h, s in zip(hosts, scores)]


def test_hosts_known_plain_encode_as_when_checked():
    """What /prioritize passes as plain (names orjson encoded without a backslash, all ASCII)
    encodes exactly as the checked path does; DEL, which JSON lets through unescaped, included."""
    rnd = random.Random(11)
    alphabet = "abcz09.-" * 4 + "\x7f"
    for _ in range(200):
        hosts = ["".join(rnd.choice(alphabet) for _ in range(rnd.randrange(1, 12))) for _ in range(rnd.randrange(1, 20))]
        encoded = orjson.dumps(hosts)
        assert encoded.isascii() and b"\\" not in encoded
        scores = [rnd.randrange(11) for _ in hosts]
        body = encode_host_priorities(hosts, scores, plain=True)
        assert orjson.loads(body) == orjson.loads(encode_host_priorities(hosts, scores))
        assert orjson.loads(body) == [{"Host": h, "Score": s} for h, s in zip(hosts, scores)]
