"""What a context actor was started with that changes how it serves, kept in the context.

A context actor's behaviour depends on more than its store: the governance cadence
(``governance_every``, ``governance_unused_ticks``), the admission policy, the embedder
that makes search hybrid, capability enforcement and, for a replicated context, how many
of its last batches it keeps for followers to catch up from (``replication_log``, read by
the primary and by every follower from the context's meta:
:func:`storage.replication.recording.retain_of`; default
:data:`~storage.replication.recording.DEFAULT_RETAIN`). Those used to live only in the
actor's constructor arguments, so a context served again without them (a promoted
follower, an unreplicated context served on its returned node, a copied or restored
store) silently served differently. They are now part of the context:
:func:`settle` merges what the actor was given with what the context recorded, and the
host records the result in the context's meta (:meth:`service.context.Context.record_settings`),
which every copy of the store carries (followers, snapshots, backups).

The rule: a value given now replaces the recorded one; a value not given (None) keeps
it; enforcement is sticky (once on, on). The window and the history length are the
context's own already (:class:`protocol.state.Meta`), and the tenant and project too.

Admission: a policy object cannot be recorded, only described: ``{"name", "builtin"}``.
The built-in :class:`~protocol.governance.DefaultPolicy` is rebuilt under its name; a
custom policy is not rebuilt from a name (that would mean importing code named by
the store). A context that recorded a custom policy and is served without it gets
:class:`UnavailablePolicy`: every admission decision refuses with
``admission_unavailable`` (nothing is admitted by a policy other than the one chosen)
while commits and reads go on; serving it with ``admission=`` again restores it.
"""

from __future__ import annotations

from typing import Any

from protocol.errors import RequestError
from protocol.governance import AdmissionPolicy, DefaultPolicy
from protocol.governance.policy import Decision
from protocol.state import Frame
from protocol.view import ReadView
from storage.replication.recording import RETAIN_SETTING

SETTINGS_FORMAT = 1
"""The version of the recorded settings' layout."""

ADMISSION_UNAVAILABLE = "admission_unavailable"


class UnavailablePolicy:
    """The admission of a context whose recorded custom policy is not here: every
    decision refuses with ``admission_unavailable`` (see the module doc)."""

    def __init__(self, name: str) -> None:
        self.name = name

    def review(self, frame: Frame, view: ReadView) -> Decision:
        """Refuse: this process does not have the policy the context was served with."""
        raise RequestError(
            f"the context was served with admission policy {self.name!r}, which this"
            " process does not have; serve it with admission= to decide admissions",
            code=ADMISSION_UNAVAILABLE,
        )


def describe_policy(policy: AdmissionPolicy) -> dict[str, Any]:
    """What is recorded of *policy*: its name, and whether it is the built-in one."""
    return {"name": str(policy.name), "builtin": type(policy) is DefaultPolicy}


def policy_of(recorded: object) -> AdmissionPolicy:
    """The policy to serve with when none was given: the built-in one rebuilt under its
    recorded name, :class:`UnavailablePolicy` for a recorded custom one, else the default."""
    if not isinstance(recorded, dict) or not isinstance(recorded.get("name"), str):
        return DefaultPolicy()
    if recorded.get("builtin"):
        return DefaultPolicy(recorded["name"])
    return UnavailablePolicy(recorded["name"])


def settle(
    recorded: dict[str, Any] | None,
    *,
    governance_every: float | None,
    governance_unused_ticks: int | None,
    admission: AdmissionPolicy | None,
    embedder: dict[str, Any] | None,
    enforce: bool,
    replication_log: int | None = None,
) -> dict[str, Any]:
    """The settings to serve with and record: each given value (not None) replaces the
    recorded one, a missing one keeps it; ``enforce`` is sticky. Plain JSON values."""
    old = recorded if isinstance(recorded, dict) else {}

    def pick(given: Any, key: str) -> Any:
        return given if given is not None else old.get(key)

    return {
        "format": SETTINGS_FORMAT,
        "governance_every": pick(governance_every, "governance_every"),
        "governance_unused_ticks": pick(governance_unused_ticks, "governance_unused_ticks"),
        "admission": (
            describe_policy(admission)
            if admission is not None
            else old.get("admission") or describe_policy(DefaultPolicy())
        ),
        "embedder": pick(embedder, "embedder"),
        "enforce": bool(enforce) or bool(old.get("enforce")),
        RETAIN_SETTING: pick(replication_log, RETAIN_SETTING),
    }
