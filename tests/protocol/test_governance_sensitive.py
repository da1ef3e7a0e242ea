"""The sensitive-content rules: each shape found where it is, masked in every excerpt, and no
false positive on the ids, hashes and numbers memory is full of."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol.governance import (
    MASK,
    SENSITIVE_RULES,
    locate_sensitive,
    mask_excerpt,
    sensitive_findings,
)
from protocol.governance.sensitive import MAX_SPANS_PER_TEXT, locate_in

# (rule code, text, the secret part an excerpt must never show)
POSITIVE = [
    ("aws_access_key", "creds AKIAIOSFODNN7EXAMPLE for ci", "IOSFODNN7EXAMPLE"),
    ("aws_access_key", "temp ASIAY34FZKBOKMUTVV7A", "Y34FZKBOKMUTVV7A"),
    ("github_token", "GH_TOKEN ghp_" + "a1B2c3D4e5" * 3 + "f6G7h8", "a1B2c3D4e5a1B2"),
    ("github_token", "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuv", "11ABCDEFG01234"),
    ("api_key", "OPENAI_KEY sk-proj-Ab3dEf6hIj9kLm2nOp5qRs8t", "Ab3dEf6hIj9kLm2n"),
    ("api_key", '(config (key "sk-abcdefghijklmnopqrstuvwx"))', "abcdefghijklmnop"),
    ("api_key", "stripe sk_live_4eC39HqLyjWDarjtT1zdp7dc", "4eC39HqLyjWDarjt"),
    ("slack_token", "xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOp", "123456789012-1234"),
    ("slack_webhook", "https://hooks.slack.com/services/T000/B000/XXXXXXXXXXXXXXXX", "T000/B000"),
    (
        "private_key",
        "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA7x\n-----END RSA PRIVATE KEY-----",
        "MIIEowIBAAKCAQEA7x",
    ),
    ("private_key", "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEA", "b3BlbnNzaC1r"),
    (
        "jwt",
        "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0TH",
        "hbGciOiJIUzI1NiJ9",
    ),
    ("bearer_token", "Authorization: Bearer abc123def456ghi789jkl", "abc123def456ghi789jkl"),
    ("bearer_token", "curl -H 'authorization: token 0123456789abcdef01'", "0123456789abcdef"),
    ("google_api_key", "AIzaSyA1234567890abcdefghijklmnopqrstuv", "SyA1234567890abc"),
    ("key_value", '(db "password=hunter22")', "hunter22"),
    ("key_value", "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCY", "wJalrXUtnFEMI"),
    ("key_value", '{"client_secret": "q8Zt-93kdLw"}', "q8Zt-93kdLw"),
    ("url_credentials", "postgres://admin:s3cr3t@db.internal:5432/app", "s3cr3t"),
    ("email", '(contact "alice@example.com")', "alice@example.com"),
    ("phone", '(phone "+1 415 555 0100")', "415 555 0100"),
    ("payment_card", '(card "4111 1111 1111 1111")', "4111 1111 1111 1111"),
    ("payment_card", "amex 378282246310005", "378282246310005"),
]

NEGATIVE = [
    "3f786850e387550fdab836ed7e6dc881de23001b",  # a git sha
    "3F786850E387550FDAB836ED7E6DC881DE23001B",
    "123e4567-e89b-12d3-a456-426614174000",  # a uuid
    "deployment/target-v2 release test-result",  # frame ids
    "ev:0123456789abcdef0123 @e42",  # event ids and references
    "sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
    "(release 2026-01-01 v1.2.3 build 1234567)",
    "4111 1111 1111 1112",  # fails Luhn
    "1767225600123 1234567890123456",  # epoch milliseconds, a number with no issuer prefix
    "max_tokens=4096 token: 4096 tokens=12",
    "task-1234567890abcdefghijkl disk-usage-monitoring-alerts",
    "sk-learn-compatible-estimator-wrapper",
    "-----BEGIN PUBLIC KEY-----",
    "-----BEGIN CERTIFICATE-----",
    "the bearer of bad news arrived yesterday",
    "password policy: rotate monthly; the secret: not here",
    "password=${DB_PASSWORD} token=null api_key=<your key here> password: ********",
    "AKIA123 ASIAisnotakey ghp_short xoxb eyJhbGciOiJIUzI1NiJ9",
    "icon@2x.png left-pad@1.3.0 git@github.com:org/repo.git",
    "v2.3.4+1.20.30 port 8080:80",
    "deadbeef4111111111111111cafe 0x4111111111111111",  # digits inside a hex string
]


@pytest.mark.parametrize(("code", "text", "secret"), POSITIVE)
def test_each_rule_finds_its_shape_where_it_is_and_masks_it(
    code: str, text: str, secret: str
) -> None:
    spans = locate_sensitive(text)
    assert [s.rule.code for s in spans] == [code]
    (s,) = spans
    assert secret in text[s.start : s.end]  # the offsets locate the match
    excerpt = mask_excerpt(text, spans, s)
    assert MASK in excerpt and secret not in excerpt
    assert sensitive_findings(text) == [s.rule.name]


@pytest.mark.parametrize("text", NEGATIVE)
def test_ordinary_ids_hashes_and_numbers_are_not_sensitive(text: str) -> None:
    assert locate_sensitive(text) == []
    assert sensitive_findings(text) == []


def test_every_rule_has_a_positive_example() -> None:
    assert {code for code, _, _ in POSITIVE} == {r.code for r in SENSITIVE_RULES}


def test_a_finding_reports_record_field_offsets_rule_and_a_masked_excerpt() -> None:
    text = "deploy with AKIAIOSFODNN7EXAMPLE then mail ops@example.com"
    found = locate_in("observation", "ev:0123456789abcdef0123", "@e7", "text", text)
    assert [(f.rule, text[f.start : f.end]) for f in found] == [
        ("aws_access_key", "AKIAIOSFODNN7EXAMPLE"),
        ("email", "ops@example.com"),
    ]
    doc = json.dumps([f.to_dict() for f in found])
    assert "IOSFODNN7EXAMPLE" not in doc and "ops@example.com" not in doc
    first = found[0].to_dict()
    assert first["record"] == "observation" and first["ref"] == "@e7"
    assert first["field"] == "text" and first["category"] == "secret"
    assert "forget @e7" in first["remedy"]
    assert first["excerpt"] == "deploy with AKIA**** then mail ****…"


def test_a_match_inside_a_longer_one_is_reported_once() -> None:
    text = "api_key=sk-proj-Ab3dEf6hIj9kLm2nOp5qRs8t"
    assert [s.rule.code for s in locate_sensitive(text)] == ["key_value"]


@given(
    prefix=st.text(max_size=40),
    suffix=st.text(max_size=40),
    key=st.from_regex(r"[A-Z2-7]{16}", fullmatch=True),
)
def test_an_excerpt_never_shows_the_secret_whatever_surrounds_it(
    prefix: str, suffix: str, key: str
) -> None:
    text = f"{prefix} AKIA{key} {suffix}"
    spans = locate_sensitive(text)
    assert any(text[s.start : s.end] == "AKIA" + key for s in spans)
    for s in spans:
        assert key not in mask_excerpt(text, spans, s)


def test_past_the_reported_limit_secrets_still_mask_the_excerpts() -> None:
    keys = [f"AKIA{n:016d}" for n in range(MAX_SPANS_PER_TEXT + 2)]
    text = " ".join(keys)
    found = locate_in("frame", "f", "f", "body", text)
    assert len(found) == MAX_SPANS_PER_TEXT
    for f in found:
        assert all(k[4:] not in f.excerpt for k in keys)


@pytest.mark.parametrize(
    "unit",
    [
        "a.",
        "a_",
        "a-",
        "a:",
        "a://b:c",
        "a.b@",
        "password ",
        "bearer ",
        "sk-a",
        "1-",
        "+1 ",
        "(555) ",
    ],
)
def test_long_adversarial_runs_are_scanned_without_a_match(unit: str) -> None:
    # Each of these once made a rule backtrack over the rest of the text (quadratic);
    # the repetitions are bounded now, so 100,000 characters scan like any text.
    text = unit * (100_000 // len(unit))
    assert [s.rule.code for s in locate_sensitive(text)] == []
