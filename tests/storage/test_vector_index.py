"""The vector index over real LMDB files: fed by the outbox, filtered like the lexical index.

An in-test embedder (a hashing bag of words, like the loopback server's) keeps
these tests independent of HTTP; the hybrid tests (tests/service/test_hybrid.py)
use the loopback OpenAI-compatible server.
"""

from __future__ import annotations

import hashlib
import math
import re
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import pytest

from protocol.errors import OutOfRange, RequestError, StoreError
from storage.embeddings import DEFAULT_MAX_TOKENS
from storage.search import LexicalIndex
from storage.vectors import Neighbours, SharedOutbox, VectorIndex, VectorWorker, fuse
from storage.vectors.chunking import RESERVED_TOKENS, estimate
from tests.storage.contexts import ContextSetup, setup_fixture

WORD = re.compile(r"\w+")


class HashEmbedder:
    """Deterministic vectors: a signed feature-hashing bag of lower-cased words."""

    def __init__(self, dimension: int = 32, model: str = "test:hash") -> None:
        self._dimension = dimension
        self._model = model
        self.texts: list[str] = []
        self.max_tokens: int | None = None
        self.gate: threading.Event | None = None
        self.fail: Exception | None = None
        self.wrong_dimension = False

    @property
    def model_id(self) -> str:
        return self._model

    @property
    def dimension(self) -> int:
        return self._dimension

    def embed(
        self, texts: Sequence[str], *, kind: Literal["document", "query"] = "document"
    ) -> list[list[float]]:
        if self.gate is not None:
            self.gate.wait(30)
        if self.fail is not None:
            raise self.fail
        self.texts.extend(texts)
        dim = self._dimension + (1 if self.wrong_dimension else 0)
        return [vector(t, dim) for t in texts]

    def close(self) -> None:
        pass


def vector(text: str, dim: int) -> list[float]:
    v = [0.0] * dim
    for w in WORD.findall(text.lower()) or ["<empty>"]:
        h = int.from_bytes(hashlib.blake2b(w.encode(), digest_size=8).digest())
        v[h % dim] += 1.0 if h >> 63 else -1.0
    n = math.sqrt(sum(x * x for x in v)) or 1.0
    return [x / n for x in v]


class Setup(ContextSetup):
    """A context on real LMDB files, its lexical index and its vector index sharing the outbox."""

    def __init__(self, root: Path, embedder: HashEmbedder | None = None) -> None:
        super().__init__(root)
        self.embedder = embedder or HashEmbedder()
        self.outbox = SharedOutbox(self.backend)
        self.index = LexicalIndex.open(self.backend.path, backend=self.outbox)
        self.vectors = VectorIndex.open(self.backend.path, backend=self.outbox)
        self.outbox.consumers = [self.index.applied, self.vectors.applied]

    def catch_up(self) -> None:
        self.index.catch_up()
        self.vectors.catch_up(self.embedder)

    def ids(self, text: str, **kw: Any) -> list[str]:
        kw.setdefault("limit", 100)
        q = vector(text, self.embedder.dimension)
        return [h.id for h in self.vectors.search(q, **kw).hits]

    def close(self) -> None:
        self.vectors.close()
        self.index.close()
        super().close()


s = setup_fixture(Setup, "s")


def corpus(s: Setup) -> dict[str, str]:
    """Events of three kinds and frames with trust, valid time and lifecycles; every text
    says "zebra" so a lexical search for it lists every document."""
    refs = {
        "refund": s.ctx.observe("user_message", "zebra: I want a refund for the tablet").ref,
        "log": s.ctx.observe("tool_result", "zebra: signing failed, the key expired").ref,
        "ext": s.ctx.observe("external", "zebra: weather in Paris is sunny").ref,
    }
    s.ctx.claim()
    s.commit(
        f"""(context-tx (base-version {{base}})
          (derive rule/2025 (from {refs["log"]}) (rule "zebra sign with the 2025 key"))
          (derive rule/2026 (rule "zebra sign with the 2026 key"))
          (derive rule/old (rule "zebra sign nothing at all"))
          (envelope rule/2025 (valid-from "2025-01-01") (valid-to "2026-01-01"))
          (envelope rule/2026 (valid-from "2026-01-01") (valid-to "2027-01-01"))
          (envelope rule/old (trust candidate)))"""
    )
    s.commit("(context-tx (base-version {base}) (retire rule/old))")
    return refs


FILTERS: list[dict[str, Any]] = [
    {},
    {"kinds": "frame"},
    {"kinds": ["user_message", "external"]},
    {"lifecycle": "active"},
    {"lifecycle": ["retiring", "retired"]},
    {"trust": "accepted"},
    {"trust": ["candidate"], "kinds": "frame"},
    {"valid_at": "2025-06-01"},
    {"valid_at": "2026-06-01", "kinds": "frame"},
    {"id_prefix": "rule/20"},
    {"id_prefix": "@e"},
    {"since": 0.0, "until": 1e11},
    {"until": 1.0},
]


@pytest.mark.parametrize("filters", FILTERS, ids=lambda f: ",".join(f) or "none")
def test_every_filter_keeps_what_the_lexical_filter_keeps(
    s: Setup, filters: dict[str, Any]
) -> None:
    corpus(s)
    s.catch_up()
    lexical = {h.id for h in s.index.search("zebra", limit=100, **filters).hits}
    semantic = set(s.ids("zebra sign", **filters))
    assert semantic == lexical
    if not filters:
        assert len(semantic) == 6


def test_time_filters_follow_the_frame_s_last_write(s: Setup) -> None:
    refs = corpus(s)
    s.catch_up()
    cut = time.time()
    time.sleep(0.01)
    s.commit('(context-tx (base-version {base}) (revise rule/2026 (rule "zebra sign twice")))')
    s.catch_up()
    assert set(s.ids("zebra", since=cut)) == {"rule/2026"}
    assert refs["refund"] in s.ids("zebra", until=cut)


def test_retired_material_stays_findable_with_its_lifecycle(s: Setup) -> None:
    refs = corpus(s)
    s.commit(f"(context-tx (base-version {{base}}) (retire {refs['ext']}))")
    s.catch_up()
    hits = {h.id: h for h in s.vectors.search(vector("weather paris sunny", 32), limit=3).hits}
    assert hits[refs["ext"]].lifecycle == "retired"
    assert refs["ext"] not in s.ids("weather paris sunny", lifecycle="active")
    old = s.vectors.search(vector("sign nothing", 32), limit=1, kinds="frame").hits[0]
    assert (old.id, old.lifecycle, old.trust) == ("rule/old", "retiring", "candidate")


def test_nearest_first_with_snippets_and_scores(s: Setup) -> None:
    refs = corpus(s)
    s.catch_up()
    res = s.vectors.search(vector("refund for the tablet", 32), limit=2)
    assert res.hits[0].id == refs["refund"]
    assert res.hits[0].snippet.startswith("zebra: I want a refund")
    assert res.hits[0].score >= res.hits[1].score
    assert res.lag == 0 and res.model_id == "test:hash" and not res.building
    assert res.indexed_version == s.ctx.version()


def test_only_changed_text_is_embedded_again(s: Setup) -> None:
    corpus(s)
    s.catch_up()
    before = len(s.embedder.texts)
    s.commit("(context-tx (base-version {base}) (envelope rule/2026 (trust candidate)))")
    s.catch_up()
    assert len(s.embedder.texts) == before  # a trust change rewrites the record only
    assert "rule/2026" in s.ids("zebra", trust="candidate", kinds="frame")
    s.commit('(context-tx (base-version {base}) (revise rule/2026 (rule "zebra sign thrice")))')
    s.catch_up()
    assert s.embedder.texts[before:] == ['rule/2026 (rule "zebra sign thrice")']


def test_durable_across_reopen_without_embedding_again(tmp_path: Path) -> None:
    s = Setup(tmp_path)
    corpus(s)
    s.catch_up()
    q = vector("sign with the key", 32)
    first = s.vectors.search(q, limit=6)
    embedded = len(s.embedder.texts)
    s.close()
    s2 = Setup(tmp_path, s.embedder)
    try:
        assert s2.vectors.apply_intents(s2.embedder) == 0
        again = s2.vectors.search(q, limit=6)
        assert again.hits == first.hits
        assert len(s2.embedder.texts) == embedded
    finally:
        s2.close()


def test_a_new_model_rebuilds_the_vectors(s: Setup) -> None:
    corpus(s)
    s.catch_up()
    old = s.vectors.state()
    other = HashEmbedder(dimension=16, model="test:other")
    # Until rebuilt, a search for the new model finds nothing and says so.
    waiting = s.vectors.search(vector("zebra", 32), model_id="test:other")
    assert waiting.hits == () and waiting.building
    s.vectors.catch_up(other)
    state = s.vectors.state()
    assert (state.model_id, state.dimension, state.documents) == ("test:other", 16, 6)
    assert state.generation > old.generation and not state.syncing
    assert len(other.texts) == 6
    assert len(s.vectors.search(vector("zebra", 16), limit=10).hits) == 6
    with pytest.raises(RequestError) as e:
        s.vectors.search(vector("zebra", 32))
    assert e.value.code == "bad_dimension"


def test_lag_while_the_worker_is_behind_and_commits_never_wait(s: Setup) -> None:
    corpus(s)
    s.catch_up()
    s.embedder.gate = threading.Event()  # the embedder hangs
    worker = VectorWorker(s.vectors, s.embedder, poll=0.01)
    try:
        for i in range(3):
            s.ctx.observe("tool_result", f"zebra late note {i}")  # returns: nothing waits
        s.index.catch_up()
        res = s.vectors.search(vector("late note", 32), limit=10)
        assert res.lag == 3
        assert not any("late" in h.snippet for h in res.hits)
        # The lexical index is current; the outbox keeps what the vectors still need.
        assert s.index.lag() == 0
        assert len(s.backend.outbox_read(0, 100)) == 3
        assert not worker.wait_for(timeout=0.1)
        s.embedder.gate.set()
        assert worker.wait_for(timeout=30)
        res = s.vectors.search(vector("late note", 32), limit=3)
        assert res.lag == 0 and all("late" in h.snippet for h in res.hits)
        assert s.backend.outbox_read(0, 100) == []  # both applied: acknowledged
    finally:
        s.embedder.gate.set()
        worker.stop()


def test_a_failing_embedder_is_kept_and_retried_by_the_worker(s: Setup) -> None:
    s.embedder.fail = StoreError("endpoint down")
    worker = VectorWorker(s.vectors, s.embedder, poll=0.01)
    try:
        s.ctx.observe("tool_result", "zebra while down")
        deadline = time.monotonic() + 10
        while worker.error is None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert isinstance(worker.error, StoreError)
        assert s.vectors.lag() == 1
        s.embedder.fail = None
        worker.notify()
        assert worker.wait_for(timeout=30)
        assert worker.error is None and s.vectors.lag() == 0
    finally:
        worker.stop()


def test_wrong_dimension_from_the_embedder_writes_nothing(s: Setup) -> None:
    corpus(s)
    s.catch_up()
    state = s.vectors.state()
    s.ctx.observe("tool_result", "zebra one more")
    s.embedder.wrong_dimension = True
    with pytest.raises(StoreError, match="33 dimensions"):
        s.vectors.apply_intents(s.embedder)
    assert s.vectors.state() == state
    s.embedder.wrong_dimension = False
    assert s.vectors.apply_intents(s.embedder) == 1


def test_bad_queries_get_typed_errors(s: Setup) -> None:
    corpus(s)
    s.catch_up()
    cases: list[tuple[Any, dict[str, Any], type[Exception], str | None]] = [
        ([0.1] * 31, {}, RequestError, "bad_dimension"),
        ([[0.1] * 32], {}, RequestError, "bad_dimension"),
        ([float("nan")] * 32, {}, RequestError, "bad_vector"),
        (["x"] * 32, {}, RequestError, "bad_vector"),
        ([0.1] * 32, {"kinds": "nope"}, RequestError, "bad_kind"),
        ([0.1] * 32, {"kinds": []}, RequestError, "bad_kind"),
        ([0.1] * 32, {"lifecycle": "dead"}, RequestError, "bad_lifecycle"),
        ([0.1] * 32, {"trust": "trusted"}, RequestError, "bad_trust"),
        ([0.1] * 32, {"valid_at": "yesterday"}, RequestError, "bad_time"),
        ([0.1] * 32, {"id_prefix": 7}, RequestError, "bad_prefix"),
        ([0.1] * 32, {"since": 5.0, "until": 1.0}, OutOfRange, None),
        ([0.1] * 32, {"since": "now"}, OutOfRange, None),
        ([0.1] * 32, {"limit": 0}, OutOfRange, None),
        ([0.1] * 32, {"limit": True}, OutOfRange, None),
    ]
    state = s.vectors.state()
    for vec, kw, error, code in cases:
        with pytest.raises(error) as e:
            s.vectors.search(vec, **kw)
        if code is not None:
            assert getattr(e.value, "code", None) == code, (vec[:1], kw)
    assert s.vectors.state() == state


def test_missed_intents_are_resynchronized_without_embedding_everything(s: Setup) -> None:
    refs = corpus(s)
    s.catch_up()
    embedded = len(s.embedder.texts)
    # Another process acknowledges intents this index never applied.
    s.ctx.observe("tool_result", "zebra seen only by the lexical index")
    s.commit("(context-tx (base-version {base}) (retire rule/2025))")
    s.index.catch_up(s.backend)  # the bare store: acknowledges for itself alone
    assert s.backend.outbox_read(0, 100) == []
    s.vectors.catch_up(s.embedder)
    state = s.vectors.state()
    assert not state.syncing and state.applied == s.backend.outbox_last()
    assert s.embedder.texts[embedded:] == ["zebra seen only by the lexical index"]
    assert "rule/2025" in s.ids("zebra", lifecycle="retiring")
    assert refs["refund"] in s.ids("zebra")


def test_forgotten_content_loses_its_vector(s: Setup) -> None:
    refs = corpus(s)
    s.catch_up()
    s.ctx.acting(holder="alice").forget(refs["refund"], reason="asked to")
    s.catch_up()
    hit = s.vectors.search(vector("refund tablet", 32), limit=1, id_prefix=refs["refund"]).hits
    assert hit and "tablet" not in hit[0].snippet
    assert "I want a refund for the tablet" not in s.embedder.texts[-1]


def test_neighbours_exact_ties_break_by_label_and_the_graph_rescores() -> None:
    import numpy as np

    n = Neighbours(4)
    v = np.eye(4, dtype=np.float32)
    n.put([5, 3, 9], np.stack([v[0], v[0], v[1]]))
    assert n.search(v[0], 2) == [(3, 1.0), (5, 1.0)]
    n.remove([3])
    assert [k for k, _ in n.search(v[0], 3)] == [5, 9]
    n.put([5], v[2:3])  # replaced
    assert n.search(v[2], 1) == [(5, 1.0)]
    graph = n._graph(wait=True)
    n.put([11], v[3:4])
    assert len(graph) == 3 and n.search(v[3], 1) == [(11, 1.0)]


def test_rrf_is_deterministic_and_names_the_signals() -> None:
    fused = fuse([("lexical", [("a", 9.0), ("b", 5.0)]), ("semantic", [("b", 0.9), ("c", 0.8)])])
    assert [i for i, _, _ in fused] == ["b", "a", "c"]
    assert [s.name for s in fused[0][2]] == ["lexical", "semantic"]
    assert fused[0][2][1].rank == 1 and fused[2][2][0].rank == 2
    tie = fuse([("lexical", [("y", 1.0)]), ("semantic", [("x", 1.0)])])
    assert [i for i, _, _ in tie] == ["x", "y"]  # equal fused scores: by id
    # Weighted: the semantic ranking at half weight no longer outvotes lexical rank 1.
    lists = [("lexical", [("a", 9.0), ("b", 5.0)]), ("semantic", [("c", 0.9), ("a", 0.1)])]
    weighted = fuse(lists, 5, {"semantic": 0.5})
    assert [i for i, _, _ in weighted] == ["a", "b", "c"]
    assert weighted[0][1] == pytest.approx(1 / 6 + 0.5 / 7)
    assert [i for i, _, _ in fuse(lists, 5, {"semantic": 0.0})][:2] == ["a", "b"]
    for bad in (-1.0, float("nan")):
        with pytest.raises(ValueError):
            fuse(lists, 5, {"semantic": bad})


def test_above_the_exact_limit_the_graph_proposes_and_exact_scores_decide(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import numpy as np

    import storage.vectors.neighbours as nb

    monkeypatch.setattr(nb, "EXACT_LIMIT", 50)
    rng = np.random.default_rng(7)
    data = rng.standard_normal((300, 16)).astype(np.float32)
    data /= np.linalg.norm(data, axis=1, keepdims=True)
    n = Neighbours(16)
    n.put(list(range(1, 301)), data)
    q = data[41]
    exact = n._exact(q, 10)
    assert n.search(q, 10) == exact  # the graph is still being built: exact meanwhile
    deadline = time.monotonic() + 30
    while n._ann is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert n.approximate and n.build_error is None
    n.put([42], data[0:1])  # label 42 (row 41) now holds another vector
    n.remove([7])
    found = n.search(q, 10)
    assert [s for _, s in found] == sorted((s for _, s in found), reverse=True)
    assert 42 not in [k for k, _ in found[:1]] and 7 not in [k for k, _ in found]
    assert n.search(data[0], 2)[0][0] in (1, 42)


def fill(s: Setup, count: int) -> None:
    """*count* events of varied words, embedded."""
    words = [f"w{i}" for i in range(400)]
    for i in range(count):
        s.ctx.observe("tool_result", " ".join(words[(i * k) % 397] for k in (1, 3, 7, 11, 13)))
    s.vectors.catch_up(s.embedder)


def test_wait_ready_waits_for_the_graph_and_checks_its_timeout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import storage.vectors.neighbours as nb

    s = Setup(tmp_path, HashEmbedder(dimension=64))
    try:
        assert s.vectors.wait_ready(0)  # no vectors yet: nothing to build
        fill(s, 120)
        assert s.vectors.wait_ready(0)  # below the exact limit: searches are exact scans
        mem = s.vectors._env().memory
        assert mem is not None and mem._ann is None and not mem.approximate
        for bad in (-1, float("nan"), "5", True, None):
            with pytest.raises(OutOfRange, match="timeout"):
                s.vectors.wait_ready(bad)  # type: ignore[arg-type]
        monkeypatch.setattr(nb, "EXACT_LIMIT", 50)
        assert s.vectors.wait_ready(60)
        assert mem.approximate and mem.build_error is None
        q = vector("w5 w15 w35", 64)
        assert s.vectors.search(q, limit=5).approximate
    finally:
        s.close()


def test_closing_stops_a_graph_build_between_two_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    import numpy as np

    import storage.vectors.neighbours as nb

    monkeypatch.setattr(nb, "EXACT_LIMIT", 50)
    monkeypatch.setattr(nb, "BUILD_CHUNK", 64)
    rng = np.random.default_rng(3)
    data = rng.standard_normal((6000, 128)).astype(np.float32)
    data /= np.linalg.norm(data, axis=1, keepdims=True)
    n = Neighbours(128)
    n.put(list(range(1, 6001)), data)
    n.start_graph()
    builder = n._builder
    assert builder is not None
    n.close()
    assert not builder.is_alive() and n.build_error is None
    assert not n.wait_ready(0) and not n.approximate  # stopped: no graph, searches stay exact
    assert n.search(data[9], 1) == [(10, pytest.approx(1.0))]
    n.start_graph()  # a closed structure starts no new build
    assert n._builder is builder


CHILD_EXITS_MID_BUILD = """
import sys
import storage.vectors.neighbours as nb
from storage.vectors import VectorIndex

nb.EXACT_LIMIT = 100
nb.BUILD_CHUNK = 128
index = VectorIndex.open(sys.argv[1])
mem_ready = index.wait_ready(0.3)  # starts the build; too short to finish it
print("building" if not mem_ready else "built", flush=True)
"""


def test_a_process_exiting_while_the_graph_builds_exits_cleanly(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    s = Setup(tmp_path, HashEmbedder(dimension=256))
    try:
        fill(s, 4000)
        path = s.backend.path
    finally:
        s.close()
    env = {**os.environ, "PYTHONPATH": str(root)}
    child = subprocess.run(
        [sys.executable, "-c", CHILD_EXITS_MID_BUILD, path],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert child.returncode == 0, child.stderr
    assert child.stdout.strip() == "building"  # it did exit in the middle of the build


def test_a_long_event_is_embedded_in_pieces_and_found_by_its_end(s: Setup) -> None:
    filler = " ".join(f"filler{i % 97}" for i in range(400))  # ~3,000 characters
    long = s.ctx.observe("tool_result", filler + " giraffe migration report").ref
    control = s.ctx.observe("tool_result", filler + " zebra crossing notice").ref
    s.catch_up()
    # The embedder says no window: pieces of the default budget, each within it.
    budget = DEFAULT_MAX_TOKENS - RESERVED_TOKENS
    pieces = [t for t in s.embedder.texts if "filler" in t]
    assert len(pieces) >= 6 and all(estimate(p) <= budget for p in pieces)
    assert "".join(pieces[: len(pieces) // 2]) == filler + " giraffe migration report"
    # The end of a long event counts: cut at the model's window the two would be one vector.
    q = vector("giraffe migration report", s.embedder.dimension)
    score = {h.id: h.score for h in s.vectors.search(q, limit=10).hits}
    assert score[long] > score[control] + 0.01
    # An embedder's own window sizes the pieces.
    s.embedder.max_tokens = 64
    s.ctx.observe("tool_result", filler + " okapi")
    s.catch_up()
    last = [t for t in s.embedder.texts if "filler" in t][len(pieces) :]
    assert len(last) > len(pieces) // 2 and all(estimate(p) <= 64 - RESERVED_TOKENS for p in last)
