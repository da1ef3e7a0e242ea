"""Sensitive content: the rules that find secrets and personal data in text, located and masked.

One :class:`SensitiveRule` per shape (API keys and tokens, private key blocks,
JWTs, bearer tokens, ``password=…``, credentials in URLs, e-mail addresses,
phone numbers, payment card numbers). :func:`locate_sensitive` finds where
they match in a text (character offsets, overlaps inside an earlier match
dropped); :func:`mask_excerpt` shows a match in its context with every secret
part replaced by ``****``, so a report or an audit entry never holds the
secret itself. :func:`sensitive_findings` is admission's view: the names of
the rules a text breaks.

:class:`SensitiveFinding` is one located match in a stored record (an
accepted frame's body or keys, an observation's text), as the quarantine scan
and the unattended pass report it. Pure: no I/O, no clock.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

Category = Literal["secret", "personal"]
"""What a rule protects: credentials (``secret``) or personal data (``personal``)."""

MAX_SPANS_PER_TEXT = 32
"""Matches located in one text at most (the first ones, by offset); the rest are not reported."""
EXCERPT_CONTEXT = 16
"""Characters of context shown on each side of a match in a masked excerpt."""
MAX_EXCERPT = 160
"""Characters of a masked excerpt at most."""
MASK = "****"
"""What replaces the secret part of a match in an excerpt."""
MAX_SCAN_CHARS = 1 << 20
"""Characters of one text the rules look at (1 Mi): every rule runs in time linear in its
input, so one record costs at most this much. The rest of a longer text is not scanned: it is
reported as one :data:`UNSCANNED` span (so admission rejects such a frame, and the scan flags
such an observation for a human)."""


def _luhn(digits: str) -> bool:
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = int(ch)
        if i % 2 == 1:
            d *= 2
            if d > 9:
                d -= 9
        total += d
    return total % 10 == 0


_CARD_PREFIX = re.compile(
    r"4|5[1-5]|2(?:2[2-9]|[3-6]\d|7[01]|720)|3[47]|3[068]|35|6(?:011|5|4[4-9]|2)"
)


def _card(text: str) -> bool:
    """A payment card number: 13 to 19 digits, an issuer prefix, and the Luhn check."""
    digits = re.sub(r"\D", "", text)
    return 13 <= len(digits) <= 19 and bool(_CARD_PREFIX.match(digits)) and _luhn(digits)


_PLACEHOLDERS = frozenset(
    {"none", "null", "nil", "true", "false", "empty", "unset", "redacted", "changeme", "example"}
)


def _real_value(text: str) -> bool:
    """A ``key=value`` value that is not a placeholder (``***``, ``<…>``, ``${VAR}``, ``null``)."""
    m = _KEY_VALUE.search(text)
    value = (m.group("secret") if m else text).strip("\"'")
    if value.lower() in _PLACEHOLDERS or set(value) <= set("*xX.•-_"):
        return False
    return not (value.startswith(("$", "<", "{", "%")) or value.isdigit())


_FILE_TYPES = frozenset(
    "png jpg jpeg gif svg webp ico bmp pdf js mjs ts tsx jsx css map json py rb go rs md txt"
    " html yaml yml toml lock zip gz tar whl".split()
)


def _address(text: str) -> bool:
    """An e-mail address, not a file name such as ``icon@2x.png``."""
    return text.rsplit(".", 1)[-1].lower() not in _FILE_TYPES


@dataclass(frozen=True, slots=True)
class SensitiveRule:
    """One shape of sensitive content.

    ``code`` is stable (reports and audit entries carry it), ``name`` is for
    people. The ``secret`` group of ``pattern`` is what an excerpt masks (the
    whole match when the pattern has none); ``check``, when set, must accept
    the matched text too (the Luhn check of card numbers).
    """

    code: str
    name: str
    category: Category
    pattern: re.Pattern[str]
    check: Callable[[str], bool] | None = None


_KEY_NAMES = (
    r"password|passwd|passphrase|pwd|secret|api[_\-]?key|apikey|access[_\-]?key|auth[_\-]?token"
    r"|access[_\-]?token|refresh[_\-]?token|token|client[_\-]?secret|private[_\-]?key"
)
_KEY_VALUE = re.compile(
    r"(?i)(?<![A-Za-z0-9])(?:" + _KEY_NAMES + r")(?![A-Za-z0-9_])"
    r"[\"']?[ \t]{0,16}+(?:=|:)[ \t]{0,16}+"
    r"(?P<secret>\"[^\"\s]{6,4096}+\"|'[^'\s]{6,4096}+'|[^\s\"',;)(]{6,4096}+)"
)

SENSITIVE_RULES: tuple[SensitiveRule, ...] = (
    SensitiveRule(
        "private_key",
        "private key block",
        "secret",
        re.compile(
            r"-----BEGIN [A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----"
            r"(?P<secret>[\s\S]*?)(?:-----END [A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----|\Z)"
        ),
    ),
    SensitiveRule(
        "aws_access_key",
        "AWS access key id",
        "secret",
        re.compile(r"\b(?:AKIA|ASIA|AIDA|AROA|AGPA|ANPA|ANVA|AIPA)(?P<secret>[0-9A-Z]{16})\b"),
    ),
    SensitiveRule(
        "github_token",
        "GitHub token",
        "secret",
        re.compile(
            r"\b(?:gh[pousr]_(?P<secret>[A-Za-z0-9]{36,255})"
            r"|github_pat_(?P<pat>[A-Za-z0-9_]{22,255}))\b"
        ),
    ),
    SensitiveRule(
        "slack_token",
        "Slack token",
        "secret",
        re.compile(r"\bxox[abposre]-(?P<secret>[A-Za-z0-9][A-Za-z0-9\-]{9,}+)"),
    ),
    SensitiveRule(
        "slack_webhook",
        "Slack webhook URL",
        "secret",
        re.compile(r"https://hooks\.slack\.com/services/(?P<secret>[A-Za-z0-9/_\-]{16,}+)"),
    ),
    SensitiveRule(
        "api_key",
        "API key (sk-…)",
        "secret",
        re.compile(
            r"\b(?:sk|rk)[-_](?P<secret>(?:[A-Za-z0-9]++[-_]){0,4}[A-Za-z0-9]{16,}+[A-Za-z0-9_\-]*+)"
        ),
    ),
    SensitiveRule(
        "google_api_key",
        "Google API key",
        "secret",
        re.compile(r"\bAIza(?P<secret>[0-9A-Za-z_\-]{35})(?![0-9A-Za-z_\-])"),
    ),
    SensitiveRule(
        "jwt",
        "JSON web token",
        "secret",
        re.compile(
            r"(?<![A-Za-z0-9_\-.])eyJ"
            r"(?P<secret>[A-Za-z0-9_\-]{8,}+\.eyJ[A-Za-z0-9_\-]{8,}+\.[A-Za-z0-9_\-]{8,}+)"
        ),
    ),
    SensitiveRule(
        "bearer_token",
        "bearer token",
        "secret",
        re.compile(
            r"(?i)\b(?:bearer|authorization:\s{0,16}+(?:basic|token))\s{1,16}+"
            r"(?P<secret>(?=[A-Za-z0-9\-._~+/]{0,4096}\d)[A-Za-z0-9\-._~+/]{16,4096}+=*+)"
        ),
    ),
    SensitiveRule(
        "url_credentials",
        "password in a URL",
        "secret",
        re.compile(
            r"\b[a-z][a-z0-9+.\-]{0,15}://[^/\s:@\"']{1,256}+:(?P<secret>[^/\s@\"']{3,256}+)@[\w.\-]++"
        ),
    ),
    SensitiveRule(
        "key_value",
        "password or secret in key=value",
        "secret",
        _KEY_VALUE,
        _real_value,
    ),
    SensitiveRule(
        "email",
        "email address",
        "personal",
        re.compile(
            r"(?<![\w.%+\-])[A-Za-z0-9._%+\-]++@[A-Za-z0-9\-]++(?:\.[A-Za-z0-9\-]++)*\.[A-Za-z]{2,63}\b"
            r"(?!:[\w/~])"  # not an SSH remote (git@github.com:org/repo)
        ),
        _address,
    ),
    SensitiveRule(
        "phone",
        "phone number",
        "personal",
        re.compile(
            r"(?<![\w+])(?:\+\d{1,3}[\s.\-]?\(?\d{1,4}\)?(?:[\s.\-]?\d{2,4}){2,4}"
            r"|\(\d{3}\)\s?\d{3}-\d{4}|\d{3}-\d{3}-\d{4}|1[3-9]\d{9})(?![\w\-])"
        ),
    ),
    SensitiveRule(
        "payment_card",
        "payment card number",
        "personal",
        re.compile(r"(?<![\w\-])(?:\d[ \-]?){12,18}\d(?![\w\-])"),
        _card,
    ),
)
"""Every rule, secrets first; each is tested with positive and negative examples.

Every pattern runs in linear time on Python's backtracking engine: a repetition is
bounded, or possessive, or cannot overlap the next start (a token's start is guarded
by a look-behind, so a run of ``eyJ-eyJ-…`` is walked once, not once per ``eyJ``).
``benchmarks/bench_sensitive.py`` times every rule on adversarial strings at two
sizes beside ordinary text and fails on growth faster than linear.
"""

UNSCANNED = SensitiveRule("unscanned", "text beyond the scan limit", "secret", re.compile(r"(?!)"))
"""The span of a text past :data:`MAX_SCAN_CHARS`: not looked at, so not known to be clean."""

SECRET_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (r.name, r.pattern) for r in SENSITIVE_RULES if r.category == "secret"
)
"""Secrets a frame must not carry into long-term memory, as ``(name, pattern)`` pairs
(:func:`locate_sensitive` also runs each rule's check)."""
PERSONAL_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (r.name, r.pattern) for r in SENSITIVE_RULES if r.category == "personal"
)
"""Personal data as ``(name, pattern)`` pairs: e-mail addresses, phone numbers, card numbers
(a pattern alone over-matches: :func:`locate_sensitive` also runs each rule's check)."""


@dataclass(frozen=True, slots=True)
class SensitiveSpan:
    """Where one rule matched in a text: ``[start, end)``, and the secret part ``[inner_start,
    inner_end)`` an excerpt masks."""

    rule: SensitiveRule
    start: int
    end: int
    inner_start: int
    inner_end: int


def _spans_of(rule: SensitiveRule, text: str) -> Iterable[SensitiveSpan]:
    for m in rule.pattern.finditer(text):
        if rule.check is not None and not rule.check(m.group()):
            continue
        inner = next(
            (m.span(g) for g in ("secret", "pat") if g in m.re.groupindex and m.group(g)),
            m.span(),
        )
        yield SensitiveSpan(rule, m.start(), m.end(), inner[0], inner[1])


def locate_sensitive(text: str, limit: int = MAX_SPANS_PER_TEXT) -> list[SensitiveSpan]:
    """Every match of :data:`SENSITIVE_RULES` in *text*, by offset, at most *limit*.

    A match that lies inside an earlier (or longer) one is dropped, so a key
    inside ``password=…`` is reported once. Only the first :data:`MAX_SCAN_CHARS`
    characters are scanned; the rest of a longer text is one :data:`UNSCANNED` span.
    """
    scanned = text[:MAX_SCAN_CHARS]
    found = [s for rule in SENSITIVE_RULES for s in _spans_of(rule, scanned)]
    found.sort(key=lambda s: (s.start, -s.end))
    out: list[SensitiveSpan] = []
    reach = -1
    for s in found:
        if s.end <= reach:
            continue
        out.append(s)
        reach = max(reach, s.end)
        if len(out) >= limit:
            break
    if len(text) > MAX_SCAN_CHARS:  # always reported, in place of the last match if need be
        rest = SensitiveSpan(UNSCANNED, MAX_SCAN_CHARS, len(text), MAX_SCAN_CHARS, len(text))
        out = [*out[: max(0, limit - 1)], rest]
    return out


def sensitive_findings(text: str) -> list[str]:
    """What sensitive content *text* holds: the names of the rules it breaks, each once."""
    names = {s.rule.name for s in locate_sensitive(text, limit=len(text) + 1)}
    return [r.name for r in (*SENSITIVE_RULES, UNSCANNED) if r.name in names]


def mask_excerpt(
    text: str, spans: Sequence[SensitiveSpan], at: SensitiveSpan, context: int = EXCERPT_CONTEXT
) -> str:
    """The match *at* in its context, every secret part of *spans* replaced by :data:`MASK`.

    Never holds a secret part of any span: the excerpt shows the rule's
    public prefix (``AKIA``, ``password=``) and the surrounding text; line
    breaks show as spaces; ``…`` marks text left out.
    """
    lo, hi = max(0, at.start - context), min(len(text), at.end + context)
    hidden = sorted(
        (max(s.inner_start, lo), min(s.inner_end, hi))
        for s in (*spans, at)
        if s.inner_start < hi and s.inner_end > lo
    )
    parts: list[str] = []
    pos = lo
    for a, b in hidden:
        if b <= pos:
            continue
        a = max(a, pos)
        parts.append(text[pos:a])
        parts.append(MASK)
        pos = b
    parts.append(text[pos:hi])
    body = " ".join("".join(parts).split())
    if len(body) > MAX_EXCERPT:
        body = body[: MAX_EXCERPT - 1] + "…"
    return ("…" if lo > 0 else "") + body + ("…" if hi < len(text) else "")


Action = Literal["quarantined", "spared", "deferred", "reported"]
"""What the scan did about a finding: quarantined its frame, spared it (a human accepted
the frame), left it for the next pass, or reported it (an observation)."""


@dataclass(frozen=True, slots=True)
class SensitiveFinding:
    """One located match of a sensitive rule in a stored record, masked.

    ``record`` is ``frame`` or ``observation``; ``id`` the frame id or the
    event's stable id; ``ref`` the frame id or the ``@eN`` reference;
    ``field`` the text searched (``body``: the frame's printed body, as
    ``morphz frame`` shows it; ``keys``: its retrieval keys joined by spaces;
    ``text``: the observation's full text); ``start``/``end`` are character
    offsets in that text; ``rule`` the rule's code, ``name`` its name,
    ``category`` ``secret`` or ``personal``; ``excerpt`` the masked context;
    ``action`` what the scan did.
    """

    record: Literal["frame", "observation"]
    id: str
    ref: str
    field: str
    start: int
    end: int
    rule: str
    name: str
    category: str
    excerpt: str
    action: Action = "reported"

    @property
    def remedy(self) -> str:
        """What to do about it, in one sentence (``forget`` erases the content)."""
        if self.record == "observation":
            return f"an observation cannot be quarantined: erase its text with `forget {self.ref}`"
        if self.action == "quarantined":
            return f"quarantined: out of every input until reviewed; `forget {self.ref}` erases it"
        if self.action == "spared":
            return f"a human accepted {self.ref}, so it stays; `forget {self.ref}` erases it"
        if self.action == "deferred":
            return f"{self.ref} changed meanwhile: the next pass decides it"
        return f"`forget {self.ref}` erases it"

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (never the secret: the excerpt is masked)."""
        return {
            "record": self.record,
            "id": self.id,
            "ref": self.ref,
            "field": self.field,
            "start": self.start,
            "end": self.end,
            "rule": self.rule,
            "name": self.name,
            "category": self.category,
            "excerpt": self.excerpt,
            "action": self.action,
            "remedy": self.remedy,
        }

    def with_action(self, action: Action) -> SensitiveFinding:
        """The same finding with *action*."""
        return replace(self, action=action)


def locate_in(
    record: Literal["frame", "observation"], rid: str, ref: str, field: str, text: str
) -> list[SensitiveFinding]:
    """The located, masked findings of every rule in *text*, the field *field* of a record.

    At most :data:`MAX_SPANS_PER_TEXT` are reported; every match masks the excerpts.
    """
    spans = locate_sensitive(text, limit=len(text) + 1)
    shown = spans[:MAX_SPANS_PER_TEXT]
    if shown and spans[-1].rule is UNSCANNED and shown[-1] is not spans[-1]:
        shown[-1] = spans[-1]
    return [
        SensitiveFinding(
            record,
            rid,
            ref,
            field,
            s.start,
            s.end,
            s.rule.code,
            s.rule.name,
            s.rule.category,
            mask_excerpt(text, spans, s),
        )
        for s in shown
    ]
