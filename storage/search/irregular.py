"""English irregular inflection: the forms of one word that no suffix-stripping stemmer joins.

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

A query word of a group also looks up the group's other forms, at the weight of a stem
match (:data:`~storage.search.ranking.STEM_WEIGHT`), so a turn with the form the question
used still ranks first. Query side only: the index is unchanged, and each query word adds
at most a handful of lookups (:func:`forms`).
"""

from __future__ import annotations

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
