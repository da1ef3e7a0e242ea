"""The judged search dev set (benchmarks/search_dev) and its evaluation harness.

The data tests check what the judging promised: the files parse, the counts the
README gives hold, no question is asked twice, the dev and test splits share no
conversation, and every judged turn exists in the STATE-Bench trajectories (the
translated corpora cover every message of their source). The harness tests run
its metrics on hand-made cases and the whole evaluation, without embeddings, over
a two-conversation set built here (real LMDB contexts, real SQLite FTS5).
"""

from __future__ import annotations

import json
import re
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from harness.loadtest.trajectories import TRAJECTORIES_ENV

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
if str(BENCHMARKS) not in sys.path:
    sys.path.insert(0, str(BENCHMARKS))

import search_eval  # noqa: E402

from tests.trajectories import full_trajectories  # noqa: E402

DEV = BENCHMARKS / "search_dev"
CJK = re.compile("[\u4e00-\u9fff]")


@pytest.fixture(scope="module")
def trajectories() -> Path:
    """The whole STATE-Bench training set (the dev set's pools span every trajectory)."""
    return full_trajectories()


@pytest.fixture(scope="module")
def questions() -> list[search_eval.Question]:
    return search_eval.load_questions(DEV)


def _corpus(lang: str) -> list[dict[str, Any]]:
    lines = (DEV / f"corpus_{lang}.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines if line.strip()]


# -- the data --------------------------------------------------------------------


def test_the_dev_set_has_the_promised_size_and_spread(
    questions: list[search_eval.Question],
) -> None:
    by_lang = Counter(q.lang for q in questions)
    assert by_lang["en"] >= 150 and by_lang["zh"] >= 40 and by_lang["mixed"] >= 40
    assert set(by_lang) == {"en", "zh", "mixed"}
    en_convs = {q.conversation for q in questions if search_eval.group(q) == "en"}
    assert len(en_convs) >= 30
    assert {q.domain for q in questions if q.lang == "en"} == {
        "customer_support",
        "shopping_assistant",
        "travel",
        "chat",
    }
    for lang in ("zh", "mixed"):
        assert len({q.domain for q in questions if q.lang == lang}) == 3


def test_long_conversations_are_a_customers_sessions_in_order(
    questions: list[search_eval.Question], trajectories: Path
) -> None:
    longs = search_eval.long_conversations(DEV)
    assert len(longs) == 15
    seen: set[str] = set()
    for conv, sessions in longs.items():
        _, domain, customer = conv.split("/")
        assert len(sessions) >= 8 and not seen & set(sessions)
        seen |= set(sessions)
        numbers = [int(s.split("/")[1].split("-")[0]) for s in sessions]
        assert numbers == sorted(numbers)
        for source in sessions:
            assert source.split("/")[0] == domain
            system = json.loads((trajectories / f"{source}.json").read_text("utf-8"))
            assert customer in system["conversation"][0]["content"], source
    long_qs = [q for q in questions if search_eval.group(q) == "long"]
    assert len(long_qs) == 99
    assert Counter(q.split for q in long_qs) == {"dev": 55, "test": 44}
    assert {q.conversation for q in long_qs} == set(longs)


def test_questions_are_well_formed_unique_and_judged(
    questions: list[search_eval.Question],
) -> None:
    longs = search_eval.long_conversations(DEV)
    assert len({q.id for q in questions}) == len(questions)
    # The chat questions asked of the lengthened chats are copies (tested below).
    questions = [q for q in questions if search_eval.group(q) != "chat-long"]
    texts = Counter((q.lang, q.question.strip().casefold()) for q in questions)
    assert [t for t, n in texts.items() if n > 1] == []
    for q in questions:
        assert q.split in ("dev", "test") and q.question.strip() and q.turns
        assert len(set(q.turns)) == len(q.turns)
        prefix = q.source if q.lang == "en" else f"{q.lang}/{q.source}"
        sessions = {prefix}
        if search_eval.group(q) == "long":
            # A long conversation's question names the session (trajectory) it is about;
            # a question whose answer spans sessions has turns in several of its sessions.
            assert q.source in longs[q.conversation] and q.lang == "en"
            sessions = set(longs[q.conversation])
            assert any(t.partition("#")[0] == q.source for t in q.turns), q.id
        else:
            assert q.conversation == prefix
        assert q.domain == q.source.split("/")[0]
        for turn in q.turns:
            conv, _, ref = turn.partition("#")
            assert conv in sessions and re.fullmatch(r"\d+(\.\d+)?", ref), turn
        if q.lang != "en":
            assert CJK.search(q.question), q.id
        if q.lang == "mixed":
            assert re.search("[A-Za-z]", q.question), q.id


def test_splits_are_disjoint_by_conversation(questions: list[search_eval.Question]) -> None:
    split_of: dict[str, set[str]] = {}
    for q in questions:
        split_of.setdefault(q.conversation, set()).add(q.split)
    assert all(len(s) == 1 for s in split_of.values())
    for lang in search_eval.LANGS:
        assert {q.split for q in questions if search_eval.group(q) == lang} == {"dev", "test"}


def test_chats_are_two_friends_dated_sessions_with_judged_questions_of_every_kind(
    questions: list[search_eval.Question],
) -> None:
    rows = [
        json.loads(line)
        for line in (DEV / "chat_turns.jsonl").read_text(encoding="utf-8").splitlines()
        if line.strip()
    ]
    chats = search_eval.chat_docs(DEV)
    assert len(chats) >= 6 and sum(len(d) for d in chats.values()) == len(rows)
    for conv, docs in chats.items():
        mine = [r for r in rows if r["conversation"] == conv]
        assert len({r["speaker"] for r in mine}) == 2, conv
        sessions = [r["session"] for r in mine]
        assert sessions == sorted(sessions) and len(set(sessions)) >= 4, conv
        for n in set(sessions):
            turns = [r["turn"] for r in mine if r["session"] == n]
            assert turns == list(range(1, len(turns) + 1)), (conv, n)
        times = [d.time for d in docs]
        assert times == sorted(times), conv  # sessions dated in order
        assert all(d.text.startswith(r["speaker"] + ": ") for d, r in zip(docs, mine, strict=True))
    chat_qs = [q for q in questions if search_eval.group(q) == "chat"]
    assert {q.conversation for q in chat_qs} == set(chats)
    assert {q.kind for q in chat_qs} == {"single", "temporal", "multi", "said", "change"}
    assert all(q.answer.strip() and q.lang == "en" for q in chat_qs)
    assert all(len(q.turns) >= 2 for q in chat_qs if q.kind == "multi")
    # Every question naming one of the two friends is also asked with the other's name.
    other = {q.id: q for q in questions if search_eval.group(q) == "chat-other"}
    assert len(other) >= len(chat_qs) // 2
    for q in chat_qs:
        copy = other.get(q.id + "-other")
        if copy is not None:
            assert copy.turns == q.turns and copy.split == q.split
            assert copy.question != q.question
            assert len(copy.question.split()) == len(q.question.split())


def test_a_lengthened_chat_is_its_split_s_chats_with_the_friends_renamed(
    questions: list[search_eval.Question],
) -> None:
    chats = search_eval.chat_docs(DEV)
    longer = search_eval.long_chat_docs(DEV)
    chat_qs = {q.id: q for q in questions if search_eval.group(q) == "chat"}
    long_qs = [q for q in questions if search_eval.group(q) == "chat-long"]
    assert len(long_qs) == len(chat_qs) and len(longer) == len(chats)
    split_of = {q.conversation: q.split for q in chat_qs.values()}
    for q in long_qs:
        original = chat_qs[q.id.removesuffix("-long")]
        assert (q.question, q.turns, q.split) == (original.question, original.turns, original.split)
        own = original.conversation
        assert q.conversation == "chat-long/" + own.split("/", 1)[1]
        docs = longer[q.conversation]
        mine = set(search_eval.scopes([q], None, DEV)[0][q.conversation]) == set(docs)
        assert mine and [d for d in docs if d.id.startswith(own + "#")] == chats[own]
        assert len({d.id for d in docs}) == len(docs)
        # Only chats of the same split, all of them; every turn labelled by one of the two.
        sources = {d.id.partition("#")[0] for d in docs}
        assert sources == {c for c, split in split_of.items() if split == q.split}
        pair = {d.text.split(": ", 1)[0] for d in chats[own]}
        assert {d.text.split(": ", 1)[0] for d in docs} == pair
        for other in sources - {own}:  # its friends' names are gone from its turns
            names = {d.text.split(": ", 1)[0] for d in chats[other]} - pair
            turns = [d.text for d in docs if d.id.startswith(other + "#")]
            assert len(turns) == len(chats[other])
            assert not any(re.search(rf"\b{name}\b", t) for t in turns for name in names)
        times = [d.time for d in docs]
        assert times == sorted(times) and len(docs) >= 4 * len(chats[own])


def test_translated_corpora_are_chinese_and_keep_their_provenance() -> None:
    for lang in ("zh", "mixed"):
        rows = _corpus(lang)
        assert rows
        seen = set()
        for row in rows:
            assert row["conversation"] == f"{lang}/{row['source']}"
            assert row["role"] in ("user", "assistant") and row["text"].strip()
            assert (row["conversation"], row["turn"]) not in seen
            seen.add((row["conversation"], row["turn"]))
            if "[TASK_DONE]" not in row["text"]:
                assert CJK.search(row["text"]), (lang, row["conversation"], row["turn"])
        if lang == "mixed":
            assert sum(bool(re.search("[A-Za-z]{3}", r["text"])) for r in rows) > len(rows) // 2


def test_the_readme_states_the_licence_and_how_it_was_judged() -> None:
    text = (DEV / "README.md").read_text(encoding="utf-8")
    assert "MIT License" in text and "STATE-Bench contributors" in text
    assert "judged" in text and "split" in text


def test_every_judged_turn_exists_in_the_trajectories(
    questions: list[search_eval.Question], trajectories: Path
) -> None:
    docs, of = search_eval.scopes(questions, trajectories, DEV)
    for q in questions:
        ids = {d.id for d in docs[of["conversation"][q.id]]}
        assert set(q.turns) <= ids, (q.id, sorted(set(q.turns) - ids))
        if search_eval.group(q) == "chat-long":
            assert q.id not in of["pool"]  # its lengthened chat is a pool already
            continue
        pool = {d.id for d in docs[of["pool"][q.id]]}
        assert set(q.turns) <= pool


def test_translations_cover_every_message_of_their_source(trajectories: Path) -> None:
    for lang in ("zh", "mixed"):
        by_conv: dict[str, set[int]] = {}
        for row in _corpus(lang):
            by_conv.setdefault(row["source"], set()).add(row["turn"])
        for source, turns in by_conv.items():
            messages = json.loads((trajectories / f"{source}.json").read_text("utf-8"))
            have = {
                i
                for i, m in enumerate(messages["conversation"])
                if m["role"] != "system" and m.get("content")
            }
            assert turns == have, (lang, source)


# -- the metrics -----------------------------------------------------------------


def test_metrics_on_a_hand_made_ranking() -> None:
    ranked = ["a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k"]
    assert search_eval.recall_at(ranked, ["b", "g", "z"], 5) == pytest.approx(1 / 3)
    assert search_eval.recall_at(ranked, ["b", "g", "z"], 10) == pytest.approx(2 / 3)
    assert search_eval.recall_at(ranked, ["k"], 10) == 0.0
    assert search_eval.hit_at(ranked, ["z", "j"], 10) == 1.0
    assert search_eval.hit_at(ranked, ["k"], 10) == 0.0
    assert search_eval.reciprocal_rank(ranked, ["z", "c", "b"]) == pytest.approx(0.5)
    assert search_eval.reciprocal_rank(ranked, ["k"]) == 0.0
    assert search_eval.reciprocal_rank([], ["a"]) == 0.0
    assert search_eval.score(ranked, ["a"]) == {
        "recall@5": 1.0,
        "recall@10": 1.0,
        "hit@10": 1.0,
        "mrr": 1.0,
    }
    assert search_eval.mean_scores([{"mrr": 1.0, "hit@10": 1.0}, {"mrr": 0.0, "hit@10": 1.0}]) == {
        "mrr": 0.5,
        "hit@10": 1.0,
    }
    with pytest.raises(ValueError, match="at least one relevant"):
        search_eval.recall_at(ranked, [], 5)


def test_reciprocal_rank_fusion_is_deterministic() -> None:
    # b is 2nd and 1st: 1/62 + 1/61 beats a's 1/61 alone; ties (c, d) break by id.
    assert search_eval.rrf([["a", "b", "d"], ["b", "c"]]) == ["b", "a", "c", "d"]
    assert search_eval.rrf([["x"], []]) == ["x"]


# -- the harness, end to end (no embeddings) -----------------------------------------


def source_of(n: int) -> str:
    """The tiny set's trajectory *n*."""
    return {1: "travel/1-lisbon", 2: "travel/2-porto"}[n]


def _tiny_set(tmp: Path) -> tuple[Path, Path]:
    traj = tmp / "trajectories"
    (traj / "travel").mkdir(parents=True)
    conv = {
        "conversation": [
            {"role": "system", "content": "You are a travel agent."},
            {"role": "user", "content": "Please cancel my hotel booking in Lisbon."},
            {
                "role": "assistant",
                "content": "Your Lisbon hotel reservation is cancelled; refunds take 5 days.",
                "tool_calls": [
                    {
                        "name": "cancel_hotel",
                        "arguments": {"id": "HR-1"},
                        "result": {"status": "cancelled", "refund": 300},
                    }
                ],
            },
            {"role": "user", "content": "Which seat did I pick on the flight?"},
            {"role": "assistant", "content": "You have an aisle seat on the morning flight."},
        ]
    }
    (traj / "travel" / "1-lisbon.json").write_text(json.dumps(conv), encoding="utf-8")
    later = {
        "conversation": [
            {"role": "system", "content": "You are a travel agent."},
            {"role": "user", "content": "Book me a rental car in Porto for Friday."},
            {"role": "assistant", "content": "Done: a compact car, pickup at 9am."},
        ]
    }
    (traj / "travel" / "2-porto.json").write_text(json.dumps(later), encoding="utf-8")
    dev = tmp / "dev"
    dev.mkdir()
    (dev / "long_conversations.jsonl").write_text(
        json.dumps({"conversation": "long/travel/u1", "sessions": [source_of(1), source_of(2)]})
        + "\n",
        encoding="utf-8",
    )
    source = "travel/1-lisbon"
    rows = [
        ("en", source, "When do hotel refunds arrive?", [f"{source}#2"], "dev"),
        ("en", source, "What seat was chosen for the flight?", [f"{source}#4"], "test"),
        ("zh", f"zh/{source}", "里斯本的酒店退款多久到账？", [f"zh/{source}#2"], "dev"),
        (
            "mixed",
            f"mixed/{source}",
            "Lisbon 的 hotel 退了多少钱？",
            [f"mixed/{source}#2.0"],
            "dev",
        ),
        ("en", "long/travel/u1", "When is the Porto car picked up?", ["travel/2-porto#2"], "dev"),
    ]
    with open(dev / "questions.jsonl", "w", encoding="utf-8") as f:
        for n, (lang, conv_id, text, turns, split) in enumerate(rows):
            q = {
                "id": f"q{n}",
                "lang": lang,
                "split": split,
                "domain": "travel",
                "conversation": conv_id,
                "source": source if conv_id != "long/travel/u1" else source_of(2),
                "question": text,
                "turns": turns,
            }
            f.write(json.dumps(q, ensure_ascii=False) + "\n")
    zh = [
        "请取消我在里斯本的酒店预订。",
        "您在里斯本的酒店已取消，退款五天内到账。",
        "我选的是哪个座位？",
        "您是早班航班的靠过道座位。",
    ]
    for lang, texts in (("zh", zh), ("mixed", zh)):
        with open(dev / f"corpus_{lang}.jsonl", "w", encoding="utf-8") as f:
            for turn, (role, text) in enumerate(
                zip(["user", "assistant"] * 2, texts, strict=True), start=1
            ):
                row = {
                    "conversation": f"{lang}/{source}",
                    "source": source,
                    "turn": turn,
                    "role": role,
                    "text": text,
                }
                f.write(json.dumps(row, ensure_ascii=False) + "\n")
    chat = [
        (1, "2023-01-02 10:00", "Maya", "I adopted a greyhound called Biscuit yesterday!"),
        (1, "2023-01-02 10:00", "Tom", "omg congrats, send pictures"),
        (2, "2023-02-01 09:30", "Tom", "How is the new pup settling in?"),
        (2, "2023-02-01 09:30", "Maya", "He sleeps all day and steals socks."),
    ]
    with open(dev / "chat_turns.jsonl", "w", encoding="utf-8") as f:
        for n, (session, date, speaker, text) in enumerate(chat):
            row = {
                "conversation": "chat/t1",
                "session": session,
                "date": date,
                "turn": n % 2 + 1,
                "speaker": speaker,
                "text": text,
            }
            f.write(json.dumps(row) + "\n")
    question = {
        "id": "c0",
        "lang": "en",
        "split": "dev",
        "domain": "chat",
        "conversation": "chat/t1",
        "source": "chat/t1",
        "question": "Which breed of dog did Maya adopt?",
        "turns": ["chat/t1#1.1"],
        "kind": "single",
        "answer": "a greyhound",
    }
    (dev / "chat_questions.jsonl").write_text(json.dumps(question) + "\n", encoding="utf-8")
    return traj, dev


def test_the_evaluation_runs_end_to_end_without_embeddings(tmp_path: Path) -> None:
    traj, dev = _tiny_set(tmp_path)
    questions = search_eval.load_questions(dev)
    docs, of = search_eval.scopes(questions, traj, dev)
    assert [d.id for d in docs["travel/1-lisbon"]] == [
        "travel/1-lisbon#1",
        "travel/1-lisbon#2",
        "travel/1-lisbon#2.0",
        "travel/1-lisbon#3",
        "travel/1-lisbon#4",
    ]
    assert [(d.id, d.session) for d in docs["long/travel/u1"]][3:] == [
        ("travel/1-lisbon#3", "travel/1-lisbon"),
        ("travel/1-lisbon#4", "travel/1-lisbon"),
        ("travel/2-porto#1", "travel/2-porto"),
        ("travel/2-porto#2", "travel/2-porto"),
    ]
    assert docs["zh/travel/1-lisbon"][1].text.startswith("您在里斯本")
    assert docs["zh/travel/1-lisbon"][2].id == "zh/travel/1-lisbon#2.0"  # the original tool call
    logged: list[str] = []
    report = search_eval.run(
        traj, tmp_path / "scratch", tmp_path / "cache", logged.append, dense=False, dev_dir=dev
    )
    figures = report["figures"]
    assert set(figures) == {"conversation", "pool"}
    engines = set(figures["conversation"])
    assert engines == {"morphz-lexical-nostem", "morphz-lexical", "fts5-unicode61", "fts5-porter"}
    lexical = figures["conversation"]["morphz-lexical"]
    assert lexical["en"]["dev"]["hit@10"] == 1.0 and lexical["zh"]["dev"]["hit@10"] == 1.0
    assert "travel/1-lisbon#4" in report["rankings"]["conversation/morphz-lexical"]["q1"][:2]
    assert figures["conversation"]["fts5-porter"]["zh"]["dev"]["hit@10"] == 0.0  # no CJK words
    assert lexical["long"]["dev"]["hit@10"] == 1.0 and lexical["en"]["dev"]["recall@10"] == 1.0
    assert lexical["chat"]["dev"]["recall@10"] == 1.0
    assert any("dense engines skipped" in line for line in logged)


def test_chats_need_no_trajectories(tmp_path: Path) -> None:
    _, dev = _tiny_set(tmp_path)
    questions = search_eval.load_questions(dev)
    chat = [q for q in questions if search_eval.group(q) == "chat"]
    assert [q.kind for q in chat] == ["single"]
    [other] = [q for q in questions if search_eval.group(q) == "chat-other"]
    assert (other.id, other.question, other.turns) == (
        "c0-other",
        "Which breed of dog did Tom adopt?",
        ("chat/t1#1.1",),
    )
    docs, of = search_eval.scopes(chat, None, dev)
    assert [(d.id, d.session, d.text[:5]) for d in docs["chat/t1"]] == [
        ("chat/t1#1.1", "chat/t1/1", "Maya:"),
        ("chat/t1#1.2", "chat/t1/1", "Tom: "),
        ("chat/t1#2.1", "chat/t1/2", "Tom: "),
        ("chat/t1#2.2", "chat/t1/2", "Maya:"),
    ]
    assert docs["chat/t1"][2].time == 1675243800.0 + 1  # 2023-02-01 09:30 UTC, turn 1
    assert of["pool"]["c0"] == "pool:chat"
    with pytest.raises(ValueError, match="without the trajectories"):
        search_eval.scopes(questions, None, dev)
    report = search_eval.run(
        None,
        tmp_path / "scratch",
        tmp_path / "cache",
        print,
        dense=False,
        dev_dir=dev,
        groups=("chat",),
    )
    assert report["questions"] == 1
    assert report["rankings"]["conversation/morphz-lexical"]["c0"][0] == "chat/t1#1.1"


def test_the_dev_set_bench_needs_the_trajectories(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import bench_search

    monkeypatch.delenv(TRAJECTORIES_ENV, raising=False)
    with pytest.raises(SystemExit) as info:
        bench_search.main(["--dev-set"])
    assert "--trajectories" in str(info.value) and TRAJECTORIES_ENV in str(info.value)
    with pytest.raises(SystemExit) as info:
        bench_search.main(["--dev-set", "--trajectories", str(tmp_path / "missing")])
    assert "no trajectory directory" in str(info.value)
