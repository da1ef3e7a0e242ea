"""The client handle's own rules, without Ray: retry delays, client ids, argument checks."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from actors.client import ContextHandle, RetryPolicy, connect, new_client_id
from protocol.errors import ParseError, RequestError
from protocol.wire import tx_from_msgpack


def test_retry_delays_grow_are_capped_and_end() -> None:
    policy = RetryPolicy(attempts=5, initial=0.1, multiplier=2.0, max_delay=0.3)
    rng = random.Random(1)
    delays = [policy.delay(n, rng) for n in range(6)]
    assert delays[-1] is None
    ceilings = [0.1, 0.2, 0.3, 0.3, 0.3]
    for delay, ceiling in zip(delays, ceilings, strict=False):
        assert delay is not None and ceiling / 2 <= delay <= ceiling
    total = sum(d or 0 for d in (RetryPolicy().delay(n) for n in range(10)))
    assert 1.7 < total <= 3.55
    with pytest.raises(RequestError):
        RetryPolicy(multiplier=0.5)


def test_prepare_settles_the_client_id_once() -> None:
    text = "(context-tx (base-version 3) (derive a (x 1)))"
    tx, payload = ContextHandle.prepare(text)
    assert tx.client_id is not None and tx.client_id.startswith("c-")
    assert tx_from_msgpack(payload) == tx
    again, same = ContextHandle.prepare(tx)
    assert again.client_id == tx.client_id and same == payload
    named, _ = ContextHandle.prepare(tx, "mine")
    assert named.client_id == "mine"
    assert new_client_id() != new_client_id()
    with pytest.raises(RequestError) as long_id:
        ContextHandle.prepare(text, "x" * 201)
    assert long_id.value.code == "bad_client_id"
    with pytest.raises(ParseError):
        ContextHandle.prepare("(context-tx (base-version 3)")
    with pytest.raises(RequestError):
        ContextHandle.prepare(42)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("options", "code"),
    [
        ({"name": "../up"}, "bad_context_name"),
        ({"window": -1}, "bad_argument"),
        ({"history_keep": 0}, "bad_argument"),
        ({"lifetime": "forever"}, "bad_argument"),
        ({"namespace": ""}, "bad_argument"),
        ({"store_dir": 12}, "bad_argument"),
    ],
)
def test_connect_checks_arguments_before_any_remote_call(
    tmp_path: Path, options: dict[str, object], code: str
) -> None:
    args: dict[str, object] = {"name": "ok", "store_dir": tmp_path, **options}
    name = args.pop("name")
    with pytest.raises(RequestError) as info:
        connect(name, **args)  # type: ignore[arg-type]
    assert info.value.code == code
