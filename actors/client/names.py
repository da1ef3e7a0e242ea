"""What every side of the actor layer names the same way, defined once.

The Ray namespace contexts live in, the actor names of a context's primary and
followers, the context directory's actor name, the limits both a handle and its
actor enforce, where a context actor advertises itself, and the directory's
entries (:class:`ContextEntry`, :class:`Member`) with the one call that reads
an entry. The client side (:mod:`actors.client`), the server side
(:mod:`actors.server`) and the cluster side (:mod:`actors.cluster`) import these
from here; none keeps its own copy. The error codes they share are
:mod:`protocol.errors`' (``FENCED``, ``STALE_EPOCH``, ``REPLICA_GAP``).
"""

from __future__ import annotations

import os

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, ValidationError

from protocol.errors import RequestError
from service.transactions import MAX_SUBMIT_MANY
from storage import context_path

DEFAULT_NAMESPACE = "morphz"
"""The Ray namespace context actors live in unless told otherwise."""
CONTEXT_PREFIX = "ctx:"
"""Context actors (primaries and followers) are named ``ctx:<context name>…``."""
HOST_PREFIX = "host:"
"""Context hosts (one process serving many contexts) are named ``host:<host name>``."""
DIRECTORY_NAME = "morphz:directory"
"""The Ray actor name of a namespace's first context directory (its standbys are named
``morphz:directory~<random>``; the one leading is named in the lead record:
:mod:`actors.client.leader`)."""
MAX_CALL_BYTES = 16 << 20
"""Most payload bytes one ``submit`` / ``submit_many`` call may carry: the context actor
refuses more with ``overloaded`` (:mod:`actors.server.intake`)."""
ADVERT_FILE = "actor.json"
"""The file in a context's directory naming the context actor that holds it."""
ADVERT_FORMAT = 1
"""The format number written into (and required of) an advert."""


def actor_name(context: str) -> str:
    """The Ray actor name of the context *context* served from one node (epoch 0)."""
    return CONTEXT_PREFIX + context


def host_actor(host: str) -> str:
    """The Ray actor name of the context host *host*."""
    return HOST_PREFIX + host


def is_host(actor: str) -> bool:
    """True if *actor* names a context host: calls to a context there go through its
    host's ``call`` with the context's name (:mod:`actors.server.hosting`)."""
    return actor.startswith(HOST_PREFIX)


def is_directory(actor: str) -> bool:
    """True if *actor* names a context directory: the first one or a standby."""
    return actor == DIRECTORY_NAME or actor.startswith(DIRECTORY_NAME + "~")


def primary_actor(name: str, epoch: int) -> str:
    """The actor name of *name*'s primary at *epoch*: ``ctx:<name>`` at epoch 0 (the
    single-node name), ``ctx:<name>@e<epoch>`` afterwards."""
    return actor_name(name) if epoch == 0 else f"{CONTEXT_PREFIX}{name}@e{epoch}"


def follower_actor(name: str, k: int, epoch: int) -> str:
    """The actor name of *name*'s follower number *k* created at *epoch*."""
    return f"{CONTEXT_PREFIX}{name}#f{k}@e{epoch}"


def advert_path(store_dir: str | os.PathLike[str], name: str) -> str:
    """Where the actor serving context *name* of *store_dir* advertises itself."""
    return os.path.join(context_path(store_dir, name), ADVERT_FILE)


class Member(BaseModel):
    """One member of a context — its primary or one of its followers: the node it is on,
    its Ray actor name and its store root."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    node_id: str
    actor: str
    store_dir: str


def member_of(value: object, what: str) -> Member:
    """*value* (a :class:`Member` or its fields) as a member; ``bad_argument`` naming *what*
    otherwise."""
    if isinstance(value, Member):
        return value
    try:
        return Member.model_validate(value)
    except ValidationError as e:
        raise RequestError(f"bad {what}: {e.errors()[0].get('msg')}", code="bad_argument") from e


def members_of(value: object, what: str) -> tuple[Member, ...]:
    """*value* (a list of members) as members (:func:`member_of`)."""
    if not isinstance(value, (list, tuple)):
        raise RequestError(f"{what} must be a list of members", code="bad_argument")
    return tuple(member_of(m, what) for m in value)


class ContextEntry(BaseModel):
    """Where one context lives, as the directory records it.

    ``follower_count``: how many followers the context is placed with (the
    ``followers`` tuple lists those running now; a lost one is replaced).
    ``acks``: followers that must hold a commit before it is acknowledged
    (default ``follower_count``). ``epoch`` grows by one at each promotion. An entry
    recorded as ``replicas`` (the count's earlier name) reads the same.
    ``epoch_signature``: the directory's Ed25519 certificate that ``primary`` serves this
    context at ``epoch`` (hex; :mod:`storage.replication.epochs`): members accept the
    epoch only with it. ``tenant``: the tenant whose admin placed it (its admins may change
    it; None: placed while the directory was open, the operator's).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    epoch: int
    follower_count: int = Field(validation_alias=AliasChoices("follower_count", "replicas"))
    acks: int
    primary: Member
    followers: tuple[Member, ...]
    policy: str
    epoch_signature: str = ""
    tenant: str | None = None

    @property
    def replicated(self) -> bool:
        """True if the context has (or is meant to have) followers."""
        return self.follower_count > 0 or bool(self.followers)


__all__ = [
    "ADVERT_FILE",
    "ADVERT_FORMAT",
    "CONTEXT_PREFIX",
    "DEFAULT_NAMESPACE",
    "DIRECTORY_NAME",
    "HOST_PREFIX",
    "MAX_CALL_BYTES",
    "MAX_SUBMIT_MANY",
    "ContextEntry",
    "Member",
    "actor_name",
    "advert_path",
    "follower_actor",
    "host_actor",
    "is_directory",
    "is_host",
    "member_of",
    "members_of",
    "primary_actor",
]
