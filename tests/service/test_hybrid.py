"""Hybrid search through the service: lexical and semantic rankings fused by reciprocal rank.

Vectors come from the loopback OpenAI-compatible server (tests/embedding_server.py:
a hashing bag of words, so texts sharing words are near) through the real HTTP client.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import morphz
from adapters.embeddings import EmbedderConfig, make_embedder
from protocol.errors import OutOfRange, RequestError
from service.context import Context
from service.search import FUSE_K, FUSE_WEIGHTS, english_only, fuse_weights
from storage.search import LexicalIndex
from tests.actors.cluster import RayCluster
from tests.embedding_server import EmbeddingServer

TEXTS = [
    ("user_message", "Please refund the tablet, the screen cracked on arrival."),
    ("tool_result", "Refund issued: 199 EUR for order 4471 (tablet)."),
    ("user_message", "Deploy the release to the eu-west region tonight."),
    ("tool_result", "regression suite: 412 passed, 0 failed"),
    ("external", "Weather in Paris: sunny, 21 degrees."),
    ("user_message", "请把服务部署到上海地区"),
]


def config(server: EmbeddingServer, **kw: Any) -> EmbedderConfig:
    return EmbedderConfig(provider="openai", model="hash-bow", url=server.url, **kw)


def fill(ctx: Context) -> list[str]:
    # Unrelated texts, each in its own session: no turn lends its neighbour evidence.
    refs = [ctx.observe(kind, text, session=f"s{i}").ref for i, (kind, text) in enumerate(TEXTS)]
    ctx.claim()
    receipt = ctx.commit(
        f"(context-tx (base-version {ctx.version()})"
        f' (derive refund-policy (from {refs[1]}) (rule "refunds for a cracked screen"))'
        f' (derive region (from {refs[2]}) (target "eu-west")))'
    )
    assert receipt.committed, receipt.to_dict()
    return refs


@pytest.fixture
def hybrid(tmp_path: Path, embedding_server: EmbeddingServer) -> Iterator[Context]:
    with morphz.open_context(tmp_path, "c", embedder=config(embedding_server)) as ctx:
        fill(ctx)
        assert ctx.searcher.catch_up(30)
        yield ctx


def order(ctx: Context, query: str, **kw: Any) -> list[tuple[str, float, tuple[str, ...]]]:
    return [
        (h.id, h.score, tuple(s.name for s in h.signals))
        for h in ctx.searcher.find(query, **kw).hits
    ]


def test_hits_say_which_signals_found_them(hybrid: Context) -> None:
    result = hybrid.searcher.find("refund tablet", limit=8)
    assert result.semantic is not None and result.semantic.degraded is None
    assert result.semantic.lag == 0 and result.semantic.model == "openai:hash-bow"
    first = result.hits[0]
    assert [s.name for s in first.signals] == ["lexical", "semantic"]
    assert [s.rank for s in first.signals] == [1, 1] or first.signals[0].rank <= 2
    assert "«" in first.snippet  # the lexical snippet, highlighted
    both = [h for h in result.hits if len(h.signals) == 2]
    only = [h for h in result.hits if [s.name for s in h.signals] == ["semantic"]]
    assert len(both) >= 2 and only  # semantic neighbours without the words
    # Fused scores: weight/(k+rank) summed; both signals beat one.
    assert first.score == pytest.approx(
        sum(FUSE_WEIGHTS[s.name] / (FUSE_K + s.rank) for s in first.signals)
    )
    assert min(h.score for h in both) > max(h.score for h in only)
    doc = result.to_dict()
    assert doc["hits"][0]["signals"][0] == {
        "name": "lexical",
        "rank": first.signals[0].rank,
        "score": round(first.signals[0].score, 6),
    }
    assert doc["semantic"]["model"] == "openai:hash-bow"


def test_an_english_only_model_does_not_outvote_the_words_of_a_chinese_query(
    tmp_path: Path, embedding_server: EmbeddingServer
) -> None:
    assert english_only("local:all-MiniLM-L6-v2") and english_only("openai:BAAI/bge-small-en")
    assert not english_only("openai:multilingual-e5-small") and not english_only("hash-bow")
    assert fuse_weights("退货 refund", "local:all-MiniLM-L6-v2")["semantic"] == 0.0
    assert fuse_weights("refund", "local:all-MiniLM-L6-v2") == FUSE_WEIGHTS
    assert fuse_weights("退货", "openai:multilingual-e5-small") == FUSE_WEIGHTS
    # The loopback server answers any model name: here it plays an English-only model.
    english = EmbedderConfig(provider="openai", model="all-MiniLM-L6-v2", url=embedding_server.url)
    with morphz.open_context(tmp_path, "c", embedder=english) as ctx:
        fill(ctx)
        assert ctx.searcher.catch_up(30)
        lexical = [h.id for h in ctx.searcher.index.search("部署到上海", limit=10).hits]
        hits = ctx.searcher.find("部署到上海", limit=10).hits
        assert lexical and [h.id for h in hits][: len(lexical)] == lexical
        # The semantic side is still reported, but only the words' ranking scores.
        assert any("semantic" in {s.name for s in h.signals} for h in hits)
        for rank, h in enumerate(hits[: len(lexical)], start=1):
            assert h.score == pytest.approx(FUSE_WEIGHTS["lexical"] / (FUSE_K + rank))
        # An English query still fuses both sides.
        both = ctx.searcher.find("refund tablet", limit=8).hits
        assert any({s.name for s in h.signals} == {"semantic"} for h in both)


def test_same_query_same_order_twice_and_across_reopen(
    tmp_path: Path, embedding_server: EmbeddingServer
) -> None:
    queries = ["refund tablet", "deploy region", "上海", "sunny Paris weather", ""]
    with morphz.open_context(tmp_path, "c", embedder=config(embedding_server)) as ctx:
        fill(ctx)
        ctx.searcher.catch_up(30)
        first = {q: order(ctx, q, limit=10) for q in queries}
        assert first == {q: order(ctx, q, limit=10) for q in queries}
    sent = len(embedding_server.texts)
    with morphz.open_context(tmp_path, "c", embedder=config(embedding_server)) as ctx:
        ctx.searcher.catch_up(30)
        assert {q: order(ctx, q, limit=10) for q in queries} == first
    # Reopening re-embedded nothing: only the queries (and the client's one probe of the
    # dimension) went to the server.
    again = [t for t in embedding_server.texts[sent:] if t != "dimension probe"]
    assert again == [q for q in queries if q.strip()]
    assert first[""] == []  # no words, nothing to embed: no hits


def test_filters_apply_to_both_signals(hybrid: Context) -> None:
    frames = hybrid.searcher.find("refund tablet", kinds="frame", limit=10).hits
    assert {h.id for h in frames} == {"refund-policy", "region"}
    assert all(h.type == "frame" for h in frames)
    users = hybrid.searcher.find("refund", kinds=["user_message"], limit=10).hits
    assert users and all(h.kind == "user_message" for h in users)
    none = hybrid.searcher.find("refund", since=4e9, limit=10).hits
    assert none == ()


def test_without_an_embedder_search_is_exactly_lexical(tmp_path: Path) -> None:
    with morphz.open_context(tmp_path, "c") as ctx:
        fill(ctx)
        ctx.searcher.catch_up()
        result = ctx.searcher.find("refund tablet", limit=5)
        assert result.semantic is None and all(h.signals == () for h in result.hits)
        with LexicalIndex.for_backend(ctx.backend) as index:
            assert result == index.search("refund tablet", limit=5)
        assert "semantic" not in result.to_dict()
        assert all("signals" not in h for h in result.to_dict()["hits"])
        reply = ctx.search({"query": "refund"})
        assert set(reply.keys()) == {"ref", "hits", "recalled", "lag", "results"}
        assert not (tmp_path / "c" / "vectors").exists()


def test_an_unreachable_embedder_degrades_to_lexical_with_a_flag(tmp_path: Path) -> None:
    down = EmbedderConfig(
        provider="openai", model="m", url="http://127.0.0.1:9/v1", max_retries=0, timeout=2
    )
    with morphz.open_context(tmp_path, "c", embedder=down) as ctx:
        fill(ctx)
        assert not ctx.searcher.catch_up(5)  # the vectors cannot catch up; no exception
        result = ctx.searcher.find("refund tablet", limit=5)
        assert result.semantic is not None
        assert result.semantic.degraded is not None
        assert result.semantic.degraded.startswith("embed_unreachable: ")
        assert [s.name for h in result.hits for s in h.signals] == ["lexical"] * len(result.hits)
        lexical = ctx.searcher.index.search("refund tablet", limit=5)
        assert result.hits and [h.id for h in result.hits] == [h.id for h in lexical.hits]
        reply = ctx.search({"query": "refund tablet"})
        assert reply.degraded is not None and reply.hits == len(result.hits)
        text = ctx.read_event(reply.ref).text
        assert "semantic search unavailable (embed_unreachable" in text
        assert "[lexical]" in text


def test_a_failing_query_embedding_degrades_pauses_and_recovers(
    hybrid: Context, embedding_server: EmbeddingServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    import service.search

    hybrid.use_embedder(config(embedding_server, max_retries=0))
    assert hybrid.searcher.catch_up(30)
    embedding_server.fail_next(10, status=500)
    bad = hybrid.searcher.find("refund tablet", limit=5)
    assert bad.semantic is not None and bad.semantic.degraded is not None
    embedding_server.reset()
    # Within the pause the embedder is not called again: the same answer, at once.
    calls = len(embedding_server.calls)
    again = hybrid.searcher.find("refund tablet", limit=5)
    assert again.semantic is not None and again.semantic.degraded == bad.semantic.degraded
    assert len(embedding_server.calls) == calls and not hybrid.searcher.catch_up(1)
    monkeypatch.setattr(service.search, "EMBEDDER_PAUSE", 0.0)
    good = hybrid.searcher.find("refund tablet", limit=5)
    assert good.semantic is not None and good.semantic.degraded is None


def test_the_model_search_is_hybrid_and_recorded_with_its_signals(hybrid: Context) -> None:
    reply = hybrid.search({"query": "refund for the cracked tablet", "limit": 5})
    assert reply.semantic_lag == 0 and reply.degraded is None
    assert reply.hits == 5 and "refund-policy" in reply.recalled
    text = hybrid.read_event(reply.ref).text
    assert "[lexical+semantic]" in text and "[semantic]" in text
    # Governance still applies: hidden trust is refused, nothing is recorded.
    version, last = hybrid.version(), hybrid.meta().next_seq
    with pytest.raises(RequestError) as e:
        hybrid.search({"query": "refund", "trust": ["quarantined"]})
    assert e.value.code == "not_permitted"
    for bad, error in (
        ({"query": "refund", "kinds": ["nope"]}, RequestError),
        ({"query": "refund", "limit": 0}, OutOfRange),
        ({"query": 5}, RequestError),
        ({"query": "refund", "colour": "red"}, RequestError),
    ):
        with pytest.raises(error):
            hybrid.search(bad)
    assert (hybrid.version(), hybrid.meta().next_seq) == (version, last)


def test_an_embedder_instance_is_used_and_left_open(
    tmp_path: Path, embedding_server: EmbeddingServer
) -> None:
    embedder = make_embedder(config(embedding_server))
    try:
        with morphz.open_context(tmp_path, "c", embedder=embedder) as ctx:
            fill(ctx)
            ctx.searcher.catch_up(30)
            assert ctx.searcher.find("tablet").semantic is not None
        assert embedder.embed(["still open"])  # the caller owns it
    finally:
        embedder.close()


def test_workers_report_the_semantic_lag(tmp_path: Path, embedding_server: EmbeddingServer) -> None:
    with morphz.open_context(tmp_path, "c", embedder=config(embedding_server)) as ctx:
        fill(ctx)
        ctx.searcher.start_worker()
        assert ctx.searcher.catch_up(30)
        embedding_server.hold("late")  # the worker falls behind; commits do not wait
        ctx.observe("tool_result", "a late tablet note")
        # The searcher's own search does not wait for the workers (a port's search does).
        reply = ctx.searcher.search(ctx, {"query": "tablet note"})
        assert reply["semantic_lag"] is not None and reply["semantic_lag"] >= 1
        embedding_server.release()
        assert ctx.searcher.catch_up(30)
        assert ctx.searcher.find("tablet note").semantic.lag == 0  # type: ignore[union-attr]


def test_reindex_rebuilds_the_vectors_too(
    hybrid: Context, embedding_server: EmbeddingServer
) -> None:
    before = len(embedding_server.texts)
    stats = hybrid.searcher.reindex()
    assert stats["vectors"]["model"] == "openai:hash-bow"
    assert stats["vectors"]["documents"] == stats["documents"]
    assert len(embedding_server.texts) - before == stats["documents"]


def test_the_actor_search_is_hybrid_when_configured(
    ray_cluster: RayCluster,
    tmp_path: Path,
    context_name: str,
    namespace: str,
    embedding_server: EmbeddingServer,
) -> None:
    from actors import connect

    with pytest.raises(RequestError):
        connect(context_name, store_dir=tmp_path, namespace=namespace, embedder="x")  # type: ignore[arg-type]
    handle = connect(
        context_name, store_dir=tmp_path, namespace=namespace, embedder=config(embedding_server)
    )
    try:
        for i, (kind, text) in enumerate(TEXTS):
            handle.observe(kind, text, session=f"s{i}")
        reply = handle.search({"query": "refund tablet", "limit": 4})
        assert reply.hits == 4 and reply.get("degraded") is None
        assert reply.semantic_lag is not None
        text = handle.read_event(reply.ref, 0, 4096).text
        assert "[lexical+semantic]" in text
    finally:
        handle.shutdown()


def test_the_embedded_mcp_memory_picks_up_the_embedder_from_the_environment(
    tmp_path: Path, embedding_server: EmbeddingServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    from servers.mcp_server import open_memory

    with morphz.open_context(tmp_path, "c") as ctx:
        fill(ctx)
    monkeypatch.setenv("MORPHZ_EMBED_URL", embedding_server.url)
    monkeypatch.setenv("MORPHZ_EMBED_MODEL", "hash-bow")
    memory = open_memory(str(tmp_path), "c")
    try:
        reply = memory.call("search", {"query": "refund tablet", "limit": 3}, "main")
        assert reply["semantic_lag"] == 0 and "degraded" not in reply
        text = memory.call("read_event", reply["ref"], 0, 4096)["text"]
        assert "[lexical+semantic]" in text
    finally:
        memory.close()


def test_a_context_with_vectors_keeps_the_outbox_for_them_when_opened_without(
    tmp_path: Path, embedding_server: EmbeddingServer
) -> None:
    with morphz.open_context(tmp_path, "c", embedder=config(embedding_server)) as ctx:
        fill(ctx)
        assert ctx.searcher.catch_up(30)
    with morphz.open_context(tmp_path, "c") as ctx:  # lexical only
        late = ctx.observe("tool_result", "a tablet note written while vectors slept")
        ctx.search({"query": "tablet"})
        ctx.searcher.catch_up()
        assert ctx.searcher.index.lag() == 0
        kept = [n for n, _ in ctx.backend.outbox_read(0, 100)]
        assert len(kept) == 2  # the observation and the recorded search, for the vectors
    sent = len(embedding_server.texts)
    with morphz.open_context(tmp_path, "c", embedder=config(embedding_server)) as ctx:
        assert ctx.searcher.catch_up(30)
        assert not ctx.searcher.vectors.state().syncing
        assert ctx.backend.outbox_read(0, 100) == []
        hits = ctx.searcher.find("note written while vectors slept", limit=1).hits
        assert hits[0].id == late.ref and hits[0].signals[-1].name == "semantic"
    new = [t for t in embedding_server.texts[sent:] if t != "dimension probe"]
    assert len(new) == 3  # the two documents that were held back, and the query


def test_lexical_search_never_loads_the_vector_libraries() -> None:
    import subprocess
    import sys

    from service.search import VECTORS_DIR
    from storage.vectors import VECTOR_DIR

    assert VECTORS_DIR == VECTOR_DIR
    code = (
        "import sys, tempfile, morphz\n"
        "with tempfile.TemporaryDirectory() as d, morphz.open_context(d, 'c') as ctx:\n"
        "    ctx.observe('tool_result', 'tests passed')\n"
        "    assert ctx.search({'query': 'tests'}).hits == 1\n"
        "print(sorted(m for m in ('numpy', 'usearch', 'httpx') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_the_cli_search_and_reindex_take_an_embedder(
    tmp_path: Path, embedding_server: EmbeddingServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    import json

    from click.testing import CliRunner

    from morphz.cli import cli

    for name in ("MORPHZ_EMBED_URL", "MORPHZ_EMBED_MODEL", "MORPHZ_EMBED_PROVIDER"):
        monkeypatch.delenv(name, raising=False)
    with morphz.open_context(tmp_path, "default") as ctx:
        fill(ctx)
    runner = CliRunner()

    def run(*args: str) -> Any:
        return runner.invoke(cli, ["--store", str(tmp_path), *args], catch_exceptions=False)

    flags = ["--embed-url", embedding_server.url, "--embed-model", "hash-bow"]
    lexical = json.loads(run("--json", "search", "refund tablet").output)
    assert "semantic" not in lexical and all("signals" not in h for h in lexical["hits"])
    hybrid = json.loads(run("--json", "search", "refund tablet", *flags).output)
    assert hybrid["semantic"]["model"] == "openai:hash-bow" and hybrid["semantic"]["lag"] == 0
    assert hybrid["hits"][0]["signals"][0]["name"] == "lexical"
    assert {s["name"] for h in hybrid["hits"] for s in h["signals"]} == {"lexical", "semantic"}
    monkeypatch.setenv("MORPHZ_EMBED_URL", embedding_server.url)
    monkeypatch.setenv("MORPHZ_EMBED_MODEL", "hash-bow")
    human = run("search", "refund tablet", "--kind", "frame")
    assert human.exit_code == 0 and "hybrid with openai:hash-bow" in human.output
    assert "lexical#1  semantic#" in human.output
    stats = json.loads(run("--json", "reindex").output)
    assert stats["vectors"]["documents"] == stats["documents"]
    monkeypatch.setenv("MORPHZ_EMBED_MAX_RETRIES", "0")
    down = run("search", "refund", "--embed-url", "http://127.0.0.1:9/v1")
    assert down.exit_code == 0 and "semantic search unavailable (embed_unreachable" in down.output
    for bad in (["--embed-url", "notaurl"], ["--embed-model", " "]):
        result = runner.invoke(cli, ["--store", str(tmp_path), "search", "x", *bad])
        assert result.exit_code == 2, result.output
