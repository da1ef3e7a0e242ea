"""English word forms that no suffix-stripping stemmer joins: irregular inflection, and nouns
made from verbs with endings Snowball keeps.

Snowball's English stemmer conflates ``run``/``runs``/``running`` but not ``ran``;
``go`` and ``went``, ``buy`` and ``bought``, ``child`` and ``children`` stay apart. A
question asks with the bare form after *did* ("when did Caroline **go** to the support
group?", "what did the customer **buy**?") while the turn that answers says what happened,
in the past tense ("I **went** there yesterday", "I **bought** the blender"): the word the
question and its answer share is the one the stemmer cannot see.

:data:`GROUPS` lists the inflected forms of the English verbs and nouns whose past
tense, past participle or plural is irregular (the standard closed list of English
grammar, no domain's vocabulary). Forms that are far more often another word were left
out (``rose``, ``ground``, ``wound``, ``bound``, ``bore``, ``lay``/``lie``, ``lit``);
verbs whose forms are all one (``cut``, ``put``) need no entry. Auxiliaries (``be``,
``have``, ``do``, ``get``) are not listed: they are function words of a question
(:mod:`storage.search.questions`).

Derivation (:func:`derived`): Snowball strips ``-ance``, ``-al``, ``-ation`` and ``-ness``
but keeps a short word's ``-ment`` (``payment``, ``agreement``), ``-ure`` (``departure``,
``closure``), ``-ery`` (``delivery``), ``-ial`` (``denial``) and ``-sion`` (``decision``):
"when does the flight **depart**?" is answered by "**departure** at 10:15". A word with
such an ending gives the verbs it may come from, any other word the nouns it may make;
most candidates are no word at all, and a candidate no document holds adds nothing.

A query word also looks up these relatives (and their stem terms) at the weight of a stem
match (:data:`~storage.search.ranking.STEM_WEIGHT`), so a turn with the form the question
used still ranks first. Query side only: the index is unchanged, and each query word adds
at most a handful of lookups.
"""

from __future__ import annotations

from storage.search.questions import FUNCTION_WORDS

_LIST = """
arise arose arisen | awake awoke awoken | beat beaten | become became | begin began begun
bend bent | bite bit bitten | bleed bled | blow blew blown
break broke broken | breed bred | bring brought | build built | burn burnt
buy bought | catch caught | choose chose chosen | cling clung | come came
creep crept | deal dealt | dig dug | draw drew drawn | dream dreamt
drink drank drunk | drive drove driven | eat ate eaten | fall fell fallen | feed fed | feel felt
fight fought | find found | flee fled | fling flung | fly flew flown | forbid forbade forbidden
forget forgot forgotten | forgive forgave forgiven | freeze froze frozen
give gave given | go went gone | grow grew grown | hang hung | hear heard
hide hid hidden | hold held | keep kept | kneel knelt | know knew known
lead led | lean leant | leap leapt | learn learnt | leave left | lend lent
lose lost | make made | mean meant | meet met | mistake mistook mistaken | overcome overcame
pay paid | prove proven | redo redid redone | rebuild rebuilt
rethink rethought | repay repaid | resell resold | rewrite rewrote rewritten
ride rode ridden | ring rang rung | rise risen | run ran | say said | see saw seen
seek sought | sell sold | send sent | sew sewn | shake shook shaken
shine shone | shoot shot | show shown | shrink shrank shrunk | sing sang sung
sink sank sunk | sit sat | sleep slept | slide slid | sling slung | sneak snuck | speak spoke spoken
speed sped | spend spent | spill spilt | spin spun | spit spat
spring sprang sprung | stand stood | steal stole stolen | stick stuck | sting stung
stink stank stunk | strike struck | string strung | strive strove striven | swear swore sworn
sweep swept | swim swam swum | swing swung | take took taken | teach taught
tear tore torn | tell told | think thought | throw threw thrown | understand understood
undertake undertook undertaken | undo undid undone | wake woke woken | wear wore worn
weave wove woven | weep wept | win won | withdraw withdrew withdrawn
withhold withheld | write wrote written | oversleep overslept | overpay overpaid
mislead misled | misunderstand misunderstood | outgrow outgrew outgrown | overtake overtook
overtaken | uphold upheld | withstand withstood |
child children | man men | woman women | person people | foot feet | tooth teeth
mouse mice | goose geese | ox oxen | wife wives | knife knives | wolf wolves
half halves | shelf shelves | thief thieves | loaf loaves | calf calves
"""

GROUPS: dict[str, tuple[str, ...]] = {}
"""Each listed form (lower case) → every form of its word, in the list's order."""
for _group in _LIST.split("|"):
    _forms = tuple(dict.fromkeys(_group.split()))
    for _form in _forms:
        GROUPS[_form] = _forms
del _group, _forms, _form


def forms(word: str) -> tuple[str, ...]:
    """The other irregular forms of *word* (lower case; ``()`` if it has none listed).

    ``went`` → ``go``, ``gone``; ``children`` → ``child``. One dict lookup.
    """
    group = GROUPS.get(word)
    if not group:
        return ()
    return tuple(f for f in group if f != word)


DERIVED = True
"""Whether :func:`derived` relatives are looked up (a switch for measuring)."""

_TO_VERB = (
    ("ment", ""),
    ("ment", "e"),
    ("ure", ""),
    ("ure", "e"),
    ("ery", "er"),
    ("ial", "y"),
    ("sion", "de"),
    ("ission", "it"),
)
"""A noun's ending and what replaces it in the verb it comes from (``payment`` → ``pay``,
``departure`` → ``depart``, ``closure`` → ``close``, ``delivery`` → ``deliver``, ``denial``
→ ``deny``, ``decision`` → ``decide``, ``permission`` → ``permit``)."""
_TO_NOUN = (
    ("", "ment"),
    ("", "ure"),
    ("e", "ure"),
    ("er", "ery"),
    ("y", "ial"),
    ("de", "sion"),
    ("it", "ission"),
)
"""The same pairs read the other way: a verb's ending and what replaces it in its noun."""


def derived(word: str) -> tuple[str, ...]:
    """Candidate derivational relatives of *word* (lower case) that Snowball's English stemmer
    does not join: ``payment`` ↔ ``pay``, ``departure`` ↔ ``depart``, ``delivery`` ↔
    ``deliver``, ``denial`` ↔ ``deny``, ``decision`` ↔ ``decide`` (its other suffixes,
    ``-ance``, ``-al``, ``-ation``, ``-ness`` …, it already strips).

    Candidates only: most are not words, and a candidate no document holds costs one
    read and adds nothing. A word with one of the noun endings of :data:`_TO_VERB`
    (and at least three letters before it; a plural too) gives its verbs, any other its
    nouns; at most four candidates, function words none.
    """
    if not DERIVED or len(word) < 3 or word in FUNCTION_WORDS:
        return ()
    noun = word[:-1] if word.endswith("s") and not word.endswith("ss") else word  # payments
    verbs = [
        noun[: -len(end)] + new
        for end, new in _TO_VERB
        if noun.endswith(end) and len(noun) >= len(end) + 3
    ]
    if verbs:
        return tuple(dict.fromkeys(verbs))
    return tuple(
        dict.fromkeys(
            word[: len(word) - len(end)] + new for end, new in _TO_NOUN if word.endswith(end)
        )
    )
