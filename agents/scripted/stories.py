"""The seed stories as scripted policies (seed 002): release, deployment, consolidation, pause.

Each ``*_policy()`` returns a :data:`~agents.scripted.model.PolicyFn` built
with :func:`~agents.scripted.model.first_match` from rules over a
:class:`~agents.scripted.scene.Scene`. Every policy first tries
:func:`sweep_rule`: in maintenance mode it retires observations its frames
already cite. :func:`scripted_model` gives the :class:`ScriptedModel` of a
story by name (:data:`POLICIES`), as the demo and the tests run them. All are
pure and deterministic.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from agents.scripted.model import (
    PolicyFn,
    Rule,
    ScriptedModel,
    build_tx,
    fact,
    first_match,
    sym,
    tool,
)
from agents.scripted.scene import FrameView, Observation, Scene
from protocol.errors import RequestError
from protocol.forms import Form, Symbol
from protocol.turns import ModelTurn, Reply, ToolCall
from protocol.tx import Derive, Relate, Retire, Revise

# -- rules shared by the ready policies ---------------------------------------


def sweep_rule(scene: Scene) -> ModelTurn | None:
    """In maintenance: retire observations of the batch that a listed frame already cites.

    User requests are kept unless shown delivered (R19).
    """
    if not scene.maintenance:
        return None
    cited = {s for f in scene.frames.values() for s in f.sources}
    batch = set(scene.batch)
    done = [
        o.ref
        for o in scene.observations
        if o.ref in batch and o.ref in cited and (not o.is_user or o.delivered is True)
    ]
    if not done:
        return None
    reason = "Maintenance: retire observations already captured in frames"
    return ModelTurn(transactions=(build_tx(scene, reason, Retire(refs=tuple(done))),))


def _stage(frame: FrameView | None) -> str | None:
    value = frame.get("stage") if frame is not None else None
    return str(value) if isinstance(value, str) else None


def _with_stage(
    frame: FrameView, stage: str, *extra: Form, goal: str | None = None
) -> tuple[Form, ...]:
    """The frame's body restated with a new stage (a revise replaces the whole body).

    *goal* restores a ``(goal …)`` the input did not show.
    """
    kept = [f for f in frame.without("stage") if f not in extra]
    if goal is not None and frame.get("goal") is None:
        kept.insert(0, fact("goal", sym(goal)))
    return (*kept, fact("stage", sym(stage)), *extra)


# -- release: tests → package → reply ---------------------------------------

_SHIP = re.compile(r"\bship\s+(v\d+(?:\.\d+)*)", re.I)
_PASSED = re.compile(r"\b(\d+)\s+passed\b", re.I)
_FAILED = re.compile(r"\b([1-9]\d*)\s+failed\b", re.I)
_PACKAGED = re.compile(r"\bpackag", re.I)
TESTS_PASSED = fact("tests", sym("passed"))


def _ship_request(scene: Scene) -> tuple[Observation, str] | None:
    for obs in scene.observations:
        m = _SHIP.search(obs.text)
        if m is not None and obs.kind in (None, "user_message"):
            return obs, "ship-" + m.group(1).lower()
    return None


def _goal(scene: Scene) -> str | None:
    request = _ship_request(scene)
    return request[1] if request is not None else None


def _test_report(scene: Scene) -> Observation | None:
    for obs in scene.observations:
        if not obs.is_user and _PASSED.search(obs.text):
            return obs
    return None


def _package_report(scene: Scene, exclude: Iterable[str]) -> Observation | None:
    skip = set(exclude)
    for obs in scene.observations:
        if not obs.is_user and obs.ref not in skip and _PACKAGED.search(obs.text):
            if not _PASSED.search(obs.text):
                return obs
    return None


def _plan_release(scene: Scene) -> ModelTurn | None:
    request = _ship_request(scene)
    if request is None or scene.frame("release") is not None:
        return None
    obs, goal = request
    tx = build_tx(
        scene,
        "The user asked to ship; run the regression tests first",
        Derive(
            id="release",
            sources=(obs.ref,),
            body=(fact("goal", sym(goal)), fact("stage", sym("awaiting-tests"))),
        ),
    )
    return ModelTurn(action=tool("run_tests", scene, suite="regression"), transactions=(tx,))


def _run_tests(scene: Scene) -> ModelTurn | None:
    release = scene.frame("release")
    if release is None or _stage(release) != "awaiting-tests" or _test_report(scene):
        return None
    return ModelTurn(action=tool("run_tests", scene, suite="regression"))


def _incorporate_tests(scene: Scene) -> ModelTurn | None:
    release = scene.frame("release")
    report = _test_report(scene)
    if release is None or report is None or scene.frame("test-result") is not None:
        return None
    failed = _FAILED.search(report.text)
    if failed is not None:
        tx = build_tx(
            scene,
            "The regression tests failed; the release is blocked",
            Derive(
                id="test-result",
                sources=(report.ref,),
                body=(fact("tests", sym("failed")), fact("failures", int(failed.group(1)))),
            ),
            Revise(id="release", body=_with_stage(release, "blocked", goal=_goal(scene))),
            Relate(subject="test-result", label="blocks", object="release"),
            Retire(refs=(report.ref,)),
        )
        request = _ship_request(scene)
        reply = Reply(
            text=f"The regression tests failed ({failed.group(1)} failures); not packaging.",
            request_ref=request[0].ref if request else None,
        )
        return ModelTurn(action=reply, transactions=(tx,), finish="done")
    paused = _stage(release) == "paused"
    # A paused release keeps its stage: the test result is recorded, packaging waits.
    goal = _goal(scene)
    body = (
        _with_stage(release, "paused", TESTS_PASSED, goal=goal)
        if paused
        else _with_stage(release, "packaging", goal=goal)
    )
    tx = build_tx(
        scene,
        "Incorporate the test result; the release stays paused"
        if paused
        else "Incorporate the test result and prepare the release",
        Derive(id="test-result", sources=(report.ref,), body=(TESTS_PASSED,)),
        Revise(id="release", body=body),
        Relate(subject="test-result", label="supports", object="release"),
        Retire(refs=(report.ref,)),
    )
    action = None if paused else _package_call(scene, release)
    return ModelTurn(action=action, transactions=(tx,))


def _package_call(scene: Scene, release: FrameView) -> ToolCall:
    goal = release.get("goal")
    target = str(goal) if goal is not None else "release"
    return ToolCall(
        name="package",
        arguments={"target": target},
        call_id=f"package-v{scene.version}",
        irreversible=True,
        idempotency_key=f"package:{target}",
    )


def _package(scene: Scene) -> ModelTurn | None:
    release = scene.frame("release")
    if _stage(release) != "packaging" or release is None or not scene.has("test-result"):
        return None
    request = _ship_request(scene)
    if _package_report(scene, [request[0].ref] if request else []) is not None:
        return None
    return ModelTurn(action=_package_call(scene, release))


def _packaged(scene: Scene) -> ModelTurn | None:
    release = scene.frame("release")
    if release is None or _stage(release) != "packaging":
        return None
    request = _ship_request(scene)
    report = _package_report(scene, [request[0].ref] if request else [])
    if report is None:
        return None
    tx = build_tx(
        scene,
        "The packaging tool reported success",
        Revise(
            id="release",
            sources=(report.ref,),
            body=_with_stage(release, "packaged", goal=_goal(scene)),
        ),
        Retire(refs=(report.ref,)),
    )
    goal = release.get("goal")
    reply = Reply(
        text=f"{goal if goal is not None else 'The release'}: tests passed and the package "
        "is built.",
        request_ref=request[0].ref if request else None,
    )
    return ModelTurn(action=reply, transactions=(tx,), finish="done")


def _retire_delivered(frame_id: str, stages: tuple[str, ...], pattern: re.Pattern[str]) -> Rule:
    def rule(scene: Scene) -> ModelTurn | None:
        if _stage(scene.frame(frame_id)) not in stages:
            return None
        done = [o.ref for o in scene.find_all(pattern, user=True) if o.delivered is True]
        if not done:
            return None
        reason = "The request is answered"
        return ModelTurn(transactions=(build_tx(scene, reason, Retire(refs=tuple(done))),))

    return rule


def release_policy() -> PolicyFn:
    """The seed's release story (seed 002, R10).

    1. a user message "ship vN" and no ``release`` frame → derive ``release``
       ``(goal ship-vN) (stage awaiting-tests)`` from it; action ``run_tests``;
    2. a tool result "412 passed" and no ``test-result`` → the seed's transaction:
       derive ``test-result`` from ``@eN``, revise ``release`` to
       ``(stage packaging)``, relate ``supports``, retire ``@eN``; action
       ``package`` (irreversible, idempotency key ``package:ship-vN``). If
       ``release`` is paused it stays paused with ``(tests passed)`` and there is
       no action; a report with failures blocks the release and replies;
    3. ``release`` at packaging with no packaging result yet → ``package``
       (again: the deferred action after maintenance, deduplicated by its key);
    4. a packaging result → revise ``release`` to ``(stage packaged)`` from it,
       retire it, and reply to the user's request;
    5. a request shown delivered once packaged → retire it.
    """
    return first_match(
        sweep_rule,
        _retire_delivered("release", ("packaged",), _SHIP),
        _plan_release,
        _incorporate_tests,
        _packaged,
        _package,
        _run_tests,
    )


# -- deployment: a newer configuration supersedes the target -----------------

_REGION = re.compile(r"\bregion\b\s*[=:]?\s*([a-z]{2,}-[a-z0-9-]*[a-z0-9])", re.I)
_DEPLOY_TO = re.compile(
    r"\bdeploy\w*\s+(?:\S+\s+){0,3}?(?:to|in|into)\s+([a-z]{2}-[a-z]+(?:-\d+)?)\b", re.I
)
_TARGET = re.compile(r"deployment/target-v(\d+)\Z")


def _current_target(scene: Scene) -> tuple[int, FrameView] | None:
    targets = [
        (int(m.group(1)), f)
        for fid, f in scene.frames.items()
        if (m := _TARGET.match(fid)) is not None and f.active
    ]
    return max(targets, key=lambda t: t[0]) if targets else None


def _region(frame: FrameView) -> str | None:
    for form in frame.body:
        if isinstance(form, tuple) and form and form[0] == "fact":
            for item in form[1:]:
                if isinstance(item, tuple) and len(item) == 2 and item[0] == "region":
                    return str(item[1])
    value = frame.get("region")
    return str(value) if value is not None else None


def _first_target(scene: Scene) -> ModelTurn | None:
    if any(_TARGET.match(f) for f in scene.frames):
        return None
    for obs in scene.find_all(_DEPLOY_TO, user=True):
        m = _DEPLOY_TO.search(obs.text)
        assert m is not None
        region = m.group(1).lower()
        tx = build_tx(
            scene,
            f"The user chose {region} as the deployment target",
            Derive(
                id="deployment/target-v1",
                sources=(obs.ref,),
                body=(fact("fact", fact("region", sym(region))),),
            ),
        )
        return ModelTurn(transactions=(tx,))
    return None


def _newer_configuration(scene: Scene) -> ModelTurn | None:
    current = _current_target(scene)
    if current is None:
        return None
    n, target = current
    old_region = _region(target)
    for obs in scene.find_all(_REGION, user=False):
        if obs.ref in target.sources:
            continue
        m = _REGION.search(obs.text)
        assert m is not None
        region = m.group(1).lower()
        if old_region is not None and region == old_region:
            reason = f"production configuration matches {region}"
            tx = build_tx(scene, reason, Retire(refs=(obs.ref,)))
            return ModelTurn(transactions=(tx,))
        new_id = f"deployment/target-v{n + 1}"
        if scene.frame(new_id) is not None:
            return None
        tx = build_tx(
            scene,
            f"current production configuration confirms {region}",
            Derive(
                id=new_id,
                sources=(obs.ref, target.id),
                body=(fact("fact", fact("region", sym(region))),),
            ),
            Relate(subject=new_id, label="supersedes", object=target.id),
            Retire(refs=(target.id,)),
            Retire(refs=(obs.ref,)),
        )
        return ModelTurn(transactions=(tx,))
    return None


def deployment_policy() -> PolicyFn:
    """The seed's deployment story (seed 002 / R17).

    A user message "deploy to cn-hangzhou" with no target frame derives
    ``deployment/target-v1 (fact (region cn-hangzhou))``. An observation that
    states ``region=cn-shanghai``, different from the current target's region,
    commits the seed's transaction: derive ``deployment/target-v2`` from it and
    ``deployment/target-v1``, relate ``supersedes``, retire both (the old target
    retires at once through its successor). A configuration that matches the
    current target is just retired. No tool actions.
    """
    return first_match(sweep_rule, _first_target, _newer_configuration)


# -- consolidation: release cases → release procedure -------------------------

_CASE = re.compile(r"release-case-[\w.\-]+\Z")
_STEPS = "After tests pass, build, verify this run's artifacts, then package."
_APPLICABILITY = "Check the current project layout and scripts before choosing a branch."


def _branch(case: FrameView) -> tuple[Form, ...]:
    layout = case.get("layout")
    name = str(layout) if isinstance(layout, Symbol) else case.id.rsplit("/", 1)[-1]
    return (sym(name), *case.without("layout", "outcome", "result"))


def _consolidate(scene: Scene) -> ModelTurn | None:
    if scene.frame("release-procedure") is not None:
        return None
    cases = sorted(f for f, v in scene.frames.items() if _CASE.match(f) and v.active)
    if len(cases) < 2:
        return None
    branches = tuple(_branch(scene.frames[c]) for c in cases)
    body = (
        fact("steps", _STEPS),
        *branches,
        fact("applicability", _APPLICABILITY),
    )
    ops: list[Any] = [Derive(id="release-procedure", sources=tuple(cases), body=body)]
    ops += [Relate(subject="release-procedure", label="supersedes", object=c) for c in cases]
    ops.append(Retire(refs=tuple(cases)))
    reason = (
        "Consolidate two release experiences into a reusable procedure"
        if len(cases) == 2
        else f"Consolidate {len(cases)} release experiences into a reusable procedure"
    )
    return ModelTurn(transactions=(build_tx(scene, reason, *ops),))


def consolidation_policy() -> PolicyFn:
    """The seed's consolidation story (seed 002, R17, R34).

    With two or more active ``release-case-*`` frames and no
    ``release-procedure``: derive ``release-procedure`` from the cases with the
    shared steps, one branch per case (named by its ``(layout X)``, holding its
    other fields), and the applicability note; relate it ``supersedes`` each
    case and retire the cases (they retire at once through the successor).
    The model writes the body; the runtime never summarizes (R34).
    """
    return first_match(sweep_rule, _consolidate)


# -- pause: a user pause that must hold both facts after a conflict -----------

_PAUSE = re.compile(r"\bpause\b|暂停", re.I)


def _pause(scene: Scene) -> ModelTurn | None:
    request = scene.find(_PAUSE, user=True)
    release = scene.frame("release")
    if request is None or release is None or _stage(release) == "paused":
        return None
    extra: list[Form] = []
    sources = [request.ref]
    tests = scene.frame("test-result")
    if tests is not None and tests.get("tests") == "passed":
        extra.append(TESTS_PASSED)
        sources.append("test-result")
    previous = _stage(release)
    if previous is not None and release.get("resume-at") is None:
        extra.append(fact("resume-at", sym(previous)))
    tx = build_tx(
        scene,
        "The user asked to pause the release",
        Revise(id="release", sources=tuple(sources), body=_with_stage(release, "paused", *extra)),
    )
    return ModelTurn(transactions=(tx,))


def _confirm_pause(scene: Scene) -> ModelTurn | None:
    request = scene.find(_PAUSE, user=True)
    release = scene.frame("release")
    if request is None or _stage(release) != "paused" or request.delivered is True:
        return None
    assert release is not None
    held = " Tests passed; packaging waits." if TESTS_PASSED in release.body else ""
    return ModelTurn(
        action=Reply(text=f"The release is paused.{held}", request_ref=request.ref),
        finish="done",
    )


def _nothing_to_pause(scene: Scene) -> ModelTurn | None:
    request = scene.find(_PAUSE, user=True)
    if request is None or scene.frame("release") is not None or request.delivered is True:
        return None
    return ModelTurn(
        action=Reply(text="There is no release in progress to pause.", request_ref=request.ref),
        finish="done",
    )


def pause_policy() -> PolicyFn:
    """The seed's concurrent pause (seed 002, R24).

    A user message "pause the release" with ``release`` not paused → revise
    ``release`` restating every fact it can see with ``(stage paused)``, the
    previous stage as ``(resume-at X)``, and ``(tests passed)`` when a
    ``test-result`` frame says so (then listed in ``from``, so the runtime
    checks it). If that transaction is rejected for a conflict, the next call
    reads the newer state and rebuilds it, so "tests passed" and "paused" are
    both held. Once ``release`` shows paused → reply to the request.
    """
    return first_match(
        sweep_rule,
        _retire_delivered("release", ("paused",), _PAUSE),
        _pause,
        _confirm_pause,
        _nothing_to_pause,
    )


POLICIES: Mapping[str, Callable[[], PolicyFn]] = {
    "release": release_policy,
    "deployment": deployment_policy,
    "consolidation": consolidation_policy,
    "pause": pause_policy,
}
"""The scripted seed stories by name: story → the function that builds its policy."""


def scripted_model(story: str) -> ScriptedModel:
    """A fresh :class:`ScriptedModel` playing the seed story *story* (a key of :data:`POLICIES`).

    An unknown story raises :class:`RequestError` (code ``bad_argument``).
    """
    make = POLICIES.get(story)
    if make is None:
        raise RequestError(f"no scripted story {story!r}", code="bad_argument")
    return ScriptedModel(make())


__all__ = [
    "POLICIES",
    "TESTS_PASSED",
    "consolidation_policy",
    "deployment_policy",
    "pause_policy",
    "release_policy",
    "scripted_model",
    "sweep_rule",
]
