"""The lexical index over real LMDB files: queries, filters, lag, rebuild, and the outbox."""

from __future__ import annotations

import heapq
import json
import random
import shutil
from pathlib import Path
from typing import Any

import pytest

import storage.search.documents as documents_module
import storage.search.format as format_module
import storage.search.postings as postings_module
import storage.search.ranking as ranking_module
from protocol.errors import OutOfRange, RequestError
from storage.search import FRAME_BASE, IndexWorker, LexicalIndex, SearchResult
from storage.search.accumulator import ScoreArrays
from tests.storage.contexts import ContextSetup, setup_fixture
from tests.trajectories import SAMPLE

STATE_BENCH = SAMPLE

SHANGHAI_EVENT = "生产配置确认部署地区为上海 cn-shanghai"
SEED_TX = """(context-tx
  (base-version {base})
  (reason "current production configuration confirms cn-shanghai")
  (derive deployment/target-v2 (from {ref} deployment/target-v1) (fact (region cn-shanghai)))
  (relate deployment/target-v2 supersedes deployment/target-v1)
  (retire deployment/target-v1)
  (retire {ref}))"""


class Setup(ContextSetup):
    """A context on real LMDB files and its index."""

    def __init__(self, root: Path, name: str = "c") -> None:
        super().__init__(root, name)
        self.index = LexicalIndex.for_backend(self.backend)

    def search(self, query: str, **kw: Any) -> SearchResult:
        return self.index.search(query, **kw)

    def ids(self, query: str, **kw: Any) -> list[str]:
        return [h.id for h in self.search(query, **kw).hits]

    def close(self) -> None:
        self.index.close()
        super().close()


s = setup_fixture(Setup, "s")


def seed(s: Setup) -> None:
    """The seed's deployment story: target v1 from an old event, v2 from the Chinese one."""
    s.ctx.observe("tool_result", "deploy target is cn-beijing according to the old runbook")
    e = s.ctx.observe("tool_result", SHANGHAI_EVENT)
    s.ctx.observe("user_message", "请把服务部署到正确的地区")
    s.ctx.observe("external", "ภาษาไทยง่ายนิดเดียว")
    s.ctx.observe("tool_result", "東京に行きます。ソフトウェアのテストは完了しました")
    s.ctx.claim()
    s.commit(
        "(context-tx (base-version {base}) (derive deployment/target-v1 (from @e1) (fact (region cn-beijing))))"
    )
    s.commit(SEED_TX.replace("{ref}", e.ref))


def test_chinese_mixed_and_thai_queries_find_their_documents(s: Setup) -> None:
    seed(s)
    s.index.catch_up()
    assert s.ids("上海") == ["@e2"]
    assert s.ids("部署地区")[0] == "@e2"
    assert set(s.ids("cn-shanghai")[:2]) == {"deployment/target-v2", "@e2"}
    assert s.ids("shanghai 上海")[0] == "@e2"  # matches both terms
    assert s.ids("ภาษาไทย") == ["@e4"]
    assert s.ids("ソフトウェア")[0] == "@e5"
    assert s.ids("テスト 東京")[0] == "@e5"
    assert s.ids("target-v2")[0] == "deployment/target-v2"
    hit = s.search("部署地区").hits[0]
    assert hit.type == "event" and hit.kind == "tool_result" and hit.lifecycle == "retired"
    assert "«部署»«地区»" in hit.snippet
    frame = s.search("cn-shanghai", kinds={"frame"}).hits[0]
    assert frame.id == "deployment/target-v2" and frame.kind == "frame"
    assert "«shanghai»" in frame.snippet
    # A frame that mentions 上海 is found by it too, once revised to say so.
    s.commit(
        "(context-tx (base-version {base}) (revise deployment/target-v2 (fact (region cn-shanghai) (city 上海))))"
    )
    s.index.catch_up()
    assert set(s.ids("上海")) == {"@e2", "deployment/target-v2"}
    assert s.ids("nothing-matches-this") == []
    assert s.ids("") == [] and s.ids("!!!") == []


def test_retired_content_is_found_and_filtered_by_lifecycle(s: Setup) -> None:
    seed(s)
    s.index.catch_up()
    assert set(s.ids("region")) == {"deployment/target-v1", "deployment/target-v2"}
    assert s.ids("region", lifecycle="retired") == ["deployment/target-v1"]
    assert s.ids("region", lifecycle="active") == ["deployment/target-v2"]
    assert s.ids("region", lifecycle=["active", "retired"]) != []
    assert s.ids("上海", lifecycle="active") == []
    # Restoring changes only the lifecycle the index reports.
    s.commit("(context-tx (base-version {base}) (restore @e2))")
    s.index.catch_up()
    assert s.ids("上海", lifecycle="active") == ["@e2"]
    assert s.search("上海").hits[0].lifecycle == "active"


def test_time_kind_and_prefix_filters(s: Setup) -> None:
    s.ctx.observe_many(
        [
            {
                "kind": "tool_result",
                "text": "backup finished on node alpha",
                "session": "ops",
                "time": 1_000.0,
            },
            {
                "kind": "user_message",
                "text": "is the backup finished",
                "session": "main",
                "time": 2_000.0,
            },
            {
                "kind": "tool_result",
                "text": "backup finished on node beta",
                "session": "ops",
                "time": 3_000.0,
            },
            {
                "kind": "external",
                "text": "backup window announced",
                "session": "main",
                "time": 4_000.0,
            },
        ]
    )
    s.ctx.claim()
    s.commit("(context-tx (base-version {base}) (derive ops/backup (from @e1) (backup finished)))")
    s.commit("(context-tx (base-version {base}) (derive notes/backup (from @e3) (backup pending)))")
    s.index.catch_up()
    everything = s.ids("backup", limit=100)
    assert set(everything) == {"@e1", "@e2", "@e3", "@e4", "ops/backup", "notes/backup"}
    assert set(s.ids("backup", since=1_500, until=3_000)) == {"@e2", "@e3"}
    assert set(s.ids("backup", since=3_000)) >= {"@e3", "@e4"}
    assert set(s.ids("backup", until=1_000)) == {"@e1"}
    assert set(s.ids("backup", kinds={"tool_result"})) == {"@e1", "@e3"}
    assert set(s.ids("backup", kinds=["frame"])) == {"ops/backup", "notes/backup"}
    assert set(s.ids("backup", kinds={"frame", "external"})) == {
        "ops/backup",
        "notes/backup",
        "@e4",
    }
    assert set(
        s.ids("backup", kinds={"tool_result", "user_message", "external", "recall_result"})
    ) == {
        "@e1",
        "@e2",
        "@e3",
        "@e4",
    }
    assert s.ids("backup", id_prefix="ops/") == ["ops/backup"]
    assert set(s.ids("backup", id_prefix="@e")) == {"@e1", "@e2", "@e3", "@e4"}
    assert s.ids("backup", id_prefix="@e3") == ["@e3"]
    assert s.ids("backup", kinds={"user_message"}, since=0, until=10_000) == ["@e2"]
    assert len(s.ids("backup", limit=2)) == 2


def test_bad_arguments_are_refused(s: Setup) -> None:
    with pytest.raises(OutOfRange):
        s.search("x", limit=0)
    with pytest.raises(OutOfRange):
        s.search("x", limit=1001)
    with pytest.raises(OutOfRange):
        s.search("x", since=10, until=5)
    with pytest.raises(RequestError) as err:
        s.search("x", kinds={"tool_result", "memo"})
    assert err.value.code == "bad_kind"
    with pytest.raises(RequestError):
        s.search("x", lifecycle="gone")
    with pytest.raises(OutOfRange):
        s.search("x" * 5000)
    with pytest.raises(OutOfRange):
        s.index.apply_intents(limit=0)


def test_lag_is_visible_then_caught_up(s: Setup) -> None:
    s.index.catch_up()
    s.ctx.observe("tool_result", "disk usage at 91 percent on db-3")
    s.ctx.claim()
    s.commit("(context-tx (base-version {base}) (derive alert/disk (from @e1) (disk db-3 high)))")
    before = s.search("disk")
    assert before.version == 1 and before.indexed_version == 0 and before.lag == 2
    assert before.hits == ()
    assert s.index.apply_intents(limit=1) == 1
    middle = s.search("disk")
    assert middle.lag == 1 and [h.id for h in middle.hits] == ["@e1"]
    assert s.index.apply_intents() == 1
    after = s.search("disk")
    assert after.indexed_version == after.version == 1 and after.lag == 0
    assert {h.id for h in after.hits} == {"@e1", "alert/disk"}
    # Applied intents are acknowledged: the outbox is empty, its numbering goes on.
    assert s.backend.outbox_read(0, 100) == []
    assert s.index.apply_intents() == 0


def test_worker_drains_intents_in_the_background(s: Setup) -> None:
    with IndexWorker(s.index, poll=0.01) as worker:
        for i in range(50):
            s.ctx.observe("tool_result", f"build {i} finished with status green 构建成功")
        s.ctx.claim()
        s.commit(
            "(context-tx (base-version {base}) (derive build/status (from @e50) (status green)))"
        )
        assert worker.wait_for(version=s.ctx.version(), timeout=20)
        result = s.search("构建成功", limit=100)
        assert result.lag == 0 and result.indexed_version == result.version
        assert len(result.hits) == 50
        assert worker.wait_for(timeout=20)
        assert not worker.wait_for(version=s.ctx.version() + 5, timeout=0.2)
        assert worker.error is None


def test_revise_replaces_the_old_terms(s: Setup) -> None:
    s.commit(
        '(context-tx (base-version {base}) (derive plan (steps "compile the kernel" 编译内核)))'
    )
    s.index.catch_up()
    assert s.ids("kernel") == ["plan"] and s.ids("内核") == ["plan"]
    s.commit('(context-tx (base-version {base}) (revise plan (steps "package the wheel" 打包)))')
    s.index.catch_up()
    assert s.ids("kernel") == [] and s.ids("内核") == []
    assert s.ids("wheel") == ["plan"] and s.ids("打包") == ["plan"]
    assert s.index.state().documents == 1


def dump(index: LexicalIndex) -> dict[str, Any]:
    """Every posting, document frequency and document record of an index."""
    shared = index._shared
    out: dict[str, Any] = {}
    with shared.env.begin() as txn:
        for name in ("docs", "frame_ids", "fterms", "terms"):
            out[name] = dict(txn.cursor(db=shared.dbs[name]).iternext())
        postings: dict[bytes, list[tuple[int, int]]] = {}
        for key, value in txn.cursor(db=shared.dbs["postings"]).iternext():
            docs, codes = format_module._decode(bytes(value))
            term = bytes(key)[:-5]
            postings.setdefault(term, []).extend(zip(docs, codes, strict=True))
        out["postings"] = postings
        state = format_module._load_state(txn, shared.dbs)
        out["state"] = (state.documents, state.total_length, state.next_frame)
    for plist in out["postings"].values():
        assert [d for d, _ in plist] == sorted({d for d, _ in plist})
    return out


WORDS = "alpha beta gamma delta 部署 地区 上海 北京 ภาษา ไทย テスト ログ error warning ok".split()


def churn(s: Setup, rng: random.Random, rounds: int) -> None:
    """Observations, derives, revises, retires and restores in random order."""
    frames: list[str] = []
    for r in range(rounds):
        n = rng.randint(1, 4)
        s.ctx.observe_many(
            [
                {
                    "kind": "tool_result",
                    "text": " ".join(rng.choices(WORDS, k=rng.randint(0, 12))),
                    "session": "main",
                    "time": 1000.0 + r,
                }
                for _ in range(n)
            ]
        )
        s.ctx.claim()
        op = rng.random()
        body = " ".join(rng.choices(WORDS, k=rng.randint(1, 6)))
        if op < 0.35 or not frames:
            fid = f"f/{r}"
            frames.append(fid)
            s.commit(f'(context-tx (base-version {{base}}) (derive {fid} (note "{body}")))')
        elif op < 0.7:
            fid = rng.choice(frames)
            if s.ctx.frame(fid)["lifecycle"] != "retired":
                s.commit(f'(context-tx (base-version {{base}}) (revise {fid} (note "{body}")))')
        elif op < 0.8:
            s.commit(f"(context-tx (base-version {{base}}) (retire {rng.choice(frames)}))")
        elif op < 0.9:
            s.commit(f"(context-tx (base-version {{base}}) (restore {rng.choice(frames)}))")
        else:
            s.commit(
                f"(context-tx (base-version {{base}}) (retire @e{rng.randint(1, s.ctx.meta().next_seq - 1)}))"
            )
        if rng.random() < 0.3:
            s.index.apply_intents(limit=rng.randint(1, 5))


QUERIES = [
    "alpha",
    "部署地区",
    "上海 beta",
    "ภาษาไทย",
    "テスト ログ",
    "error warning ok",
    "gamma delta 北京",
    "f",
]


def answers(s: Setup) -> list[list[tuple[str, float, str]]]:
    return [[(h.id, h.score, h.lifecycle) for h in s.search(q, limit=50).hits] for q in QUERIES]


@pytest.mark.parametrize("small", [False, True])
def test_rebuild_answers_like_the_incremental_index(
    s: Setup, monkeypatch: pytest.MonkeyPatch, small: bool
) -> None:
    if small:
        # Tiny chunks and caps exercise chunk splits, merges, capped scans and probes.
        monkeypatch.setattr(postings_module, "CHUNK_POSTINGS", 3)
        monkeypatch.setattr(ranking_module, "SCAN_CAP", 7)
        monkeypatch.setattr(ranking_module, "PROBE_CAP", 5)
        # Small rebuild pages and flushes: many snapshots, many partial flushes.
        monkeypatch.setattr(documents_module, "REBUILD_PAGE", 4)
        monkeypatch.setattr(documents_module, "BULK_DOCS", 5)
    churn(s, random.Random(7), 120)
    s.index.catch_up()
    incremental = answers(s)
    assert any(incremental)
    before = dump(s.index)
    stats = s.index.rebuild()
    assert stats["documents"] == s.index.state().documents
    assert stats["indexed_version"] == s.ctx.version()
    after = dump(s.index)
    assert after["docs"] == before["docs"] and after["terms"] == before["terms"]
    assert after["state"] == before["state"]
    assert after["postings"] == before["postings"]
    assert answers(s) == incremental


def test_deleted_index_is_rebuilt_from_the_durable_records(tmp_path: Path) -> None:
    s = Setup(tmp_path)
    seed(s)
    s.index.catch_up()
    expected = answers(s)
    s.close()
    shutil.rmtree(tmp_path / "c" / "index")
    s = Setup(tmp_path)
    try:
        assert s.index.state().built is False
        assert s.search("上海").hits == ()
        s.index.catch_up()
        assert s.ids("上海") == ["@e2"]
        assert answers(s) == expected
    finally:
        s.close()


def test_intents_acknowledged_behind_the_index_force_a_rebuild(s: Setup) -> None:
    s.ctx.observe("tool_result", "first observation")
    s.index.catch_up()
    s.ctx.observe("tool_result", "second observation about kubernetes")
    s.backend.outbox_ack(s.backend.outbox_last())  # someone else drained it
    assert s.ids("kubernetes") == []
    s.index.catch_up()
    assert s.ids("kubernetes") == ["@e2"]


def test_empty_huge_and_emoji_events(s: Setup) -> None:
    s.ctx.observe("tool_result", "")
    s.ctx.observe("tool_result", "😀🚀")
    long_text = "lorem ipsum dolor " * 20_000 + " needle-in-the-haystack 针在草堆里"
    s.ctx.observe("tool_result", long_text)
    s.index.catch_up()
    assert s.index.state().documents == 3
    assert s.ids("needle") == ["@e3"]
    assert s.ids("草堆") == ["@e3"]
    hit = s.search("lorem").hits[0]
    assert hit.id == "@e3" and "«lorem»" in hit.snippet and len(hit.snippet) < 200


def test_docnums_of_frames_follow_creation_order(s: Setup) -> None:
    s.commit("(context-tx (base-version {base}) (derive zeta (x 1)) (derive alpha (x 2)))")
    s.commit("(context-tx (base-version {base}) (derive beta (x 3)))")
    s.index.catch_up()
    ids = dump(s.index)["frame_ids"]
    assert [
        format_module._U32.unpack(ids[k])[0] - FRAME_BASE for k in (b"alpha", b"zeta", b"beta")
    ] == [0, 1, 2]


def _conversations(limit: int) -> list[tuple[str, list[dict[str, Any]]]]:
    files = sorted(STATE_BENCH.glob("*/*.json"))[:limit]
    return [(f.stem, json.loads(f.read_text(encoding="utf-8"))["conversation"]) for f in files]


def test_state_bench_conversations(s: Setup) -> None:
    owner: dict[str, str] = {}
    for name, messages in _conversations(6):
        items = []
        for m in messages:
            kind = {"user": "user_message", "system": "external"}.get(m["role"], "external")
            items.append((kind, m["content"] or "", name))
            for call in m.get("tool_calls") or []:
                text = json.dumps(call, ensure_ascii=False)
                items.append(("tool_result", text, name))
        for e in s.ctx.observe_many(items):
            owner[e.ref] = name
    s.index.catch_up()
    assert s.index.state().documents == len(owner)
    # Each conversation's first user message is found by its own rarest words.
    for name, messages in _conversations(6):
        first = next(m["content"] for m in messages if m["role"] == "user")
        hits = s.search(first, limit=5).hits
        assert hits and owner[hits[0].id] == name, (name, first, hits[:2])
        order_ids = {w.strip(".,;:") for w in first.split() if w.startswith("ORD-")}
        for order in order_ids:
            found = s.search(order, limit=20).hits
            assert any(owner[h.id] == name for h in found)


def test_probes_and_pruning_match_their_plain_definitions(
    s: Setup, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A probe adds a term's score to exactly the documents holding it, wherever they fall
    among its chunks (before the first, in gaps, past the last, far ahead); the documents
    MaxScore keeps are those its plain definition keeps, ties to the earlier found."""
    monkeypatch.setattr(postings_module, "CHUNK_POSTINGS", 4)
    rng = random.Random(11)
    s.ctx.observe_many(
        [
            {"kind": "tool_result", "text": " ".join(rng.choices(WORDS[:6], k=rng.randint(1, 5)))}
            for _ in range(300)
        ]
    )
    s.index.catch_up()
    shared = s.index._shared
    postings = dump(s.index)["postings"]
    tn = ranking_module._TfNorm(3.0)
    with shared.env.begin() as txn:
        for term in (b"alpha", b"gamma", b"absent"):
            held = dict(postings.get(term, []))
            for trial in range(40):
                docs = sorted(rng.sample(range(0, 330), rng.randint(1, 1 + trial * 5)))
                acc = {d: 0.5 for d in docs}
                postings_module._probe(txn, shared.dbs["postings"], term, 2.0, tn, acc, docs)
                assert acc == {d: 0.5 + 2.0 * tn[held[d]] if d in held else 0.5 for d in docs}
    for trial in range(60):
        # Small and large maps, scores with many ties.
        size = rng.randint(1, 900) if trial % 2 else rng.randint(4000, 9000)
        acc = {rng.randrange(10**7): float(rng.randint(0, 12)) for _ in range(size)}
        rest, theta = float(rng.randint(0, 6)), float(rng.randint(1, 14))
        plain = [d for d, sc in acc.items() if sc + rest >= theta]
        cap = rng.choice([5, 64, 512])
        if len(plain) > cap:
            plain = heapq.nlargest(cap, plain, key=acc.__getitem__)
        cut = len(plain) == cap < sum(sc + rest >= theta for sc in acc.values())
        assert ranking_module._alive(acc, rest, theta, cap) == (sorted(plain), cut)
        kept, arrays_cut = ScoreArrays.of(acc).alive(rest, theta, cap)
        assert (list(kept), arrays_cut) == (sorted(plain), cut)
        assert kept == {d: acc[d] for d in sorted(plain)}
        # The older documents a capped term probes: the cap best below a docnum among
        # those found by terms scanned in full, ties to the earlier found.
        full = set(rng.sample(list(acc), len(acc) // 2))
        below = rng.randrange(10**7)
        older = [d for d in acc if d < below and d in full]
        if len(older) > cap:
            older = heapq.nlargest(cap, older, key=acc.__getitem__)
        arrays = ScoreArrays.of(acc, full=full)
        best, positions = arrays.older(below, cap)
        assert best == {d: acc[d] for d in sorted(older)}
        assert arrays.docs[positions].tolist() == sorted(older)


def test_scores_in_arrays_rank_as_scores_in_a_dict(
    s: Setup, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whether a query's scores are kept in a dict or (past ARRAY_DOCS / ALIVE_DOCS
    documents) in arrays, every answer is the same: hits, scores, signals, flags,
    with filters, capped scans and probes."""
    monkeypatch.setattr(postings_module, "CHUNK_POSTINGS", 3)
    monkeypatch.setattr(ranking_module, "SCAN_CAP", 7)
    monkeypatch.setattr(ranking_module, "PROBE_CAP", 5)
    monkeypatch.setattr(ranking_module, "PRUNE_DF", 2)
    # Old documents with a rare word: a capped scan of a common word must probe them.
    s.ctx.observe_many(
        [{"kind": "tool_result", "text": f"zebra alpha {'beta ' * i}"} for i in range(4)]
    )
    churn(s, random.Random(5), 120)
    s.index.catch_up()
    kwargs: list[dict[str, Any]] = [
        {},
        {"kinds": "frame"},
        {"kinds": ["tool_result"]},
        {"questions": False, "neighbours": False},
        {"limit": 3},
    ]

    def every_answer() -> list[Any]:
        out = []
        for q in [*QUERIES, "zebra alpha", "what did alpha say about beta", "when was gamma"]:
            for kw in kwargs:
                r = s.search(q, explain=True, **kw)
                out.append((r.hits, r.approximate))
        return out

    monkeypatch.setattr(ranking_module, "ARRAY_DOCS", 10**9)
    monkeypatch.setattr(ranking_module, "ALIVE_DOCS", 10**9)
    in_dicts = every_answer()
    assert any(hits for hits, _ in in_dicts) and any(approx for _, approx in in_dicts)
    for arrays, alive in ((0, 0), (5, 10**9), (10**9, 0), (12, 3)):
        monkeypatch.setattr(ranking_module, "ARRAY_DOCS", arrays)
        monkeypatch.setattr(ranking_module, "ALIVE_DOCS", alive)
        assert every_answer() == in_dicts, (arrays, alive)
