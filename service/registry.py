"""The operation registry: every call of the service declared once, every port made from it.

An :class:`Operation` is declared once, in :mod:`service.operations`, around the
service function that does the work (``fn(ctx, *arguments) -> reply``). The
declaration holds the call's name, the permission it needs (``read``,
``commit``, ``recall``, ``admin``), whether it writes, its one line of
documentation, and whether and how it is exposed as an MCP tool (:class:`Tool`)
and an HTTP route (:class:`Route`). Its argument model (pydantic, frozen,
unknown names refused, with the bounds written in the function's annotations)
and its reply type are read from the service function's signature.

From that declaration come:

* the embedded method: :class:`Operation` is a descriptor, so
  ``ctx.frame_history(frame_id)`` on a :class:`~service.context.Context` (whose
  base is :class:`service.operations.Operations`) binds and checks the
  arguments, then runs the service function;
* the Ray handle's blocking method (the same descriptor, read on a
  :class:`~actors.client.ContextHandle`, which sends the checked arguments)
  and its ``*_async`` form;
* the context actor's method (capability guard, argument check, error
  envelope), the MCP tool, the HTTP route with its OpenAPI schemas, and the
  call table of ``docs/api.md`` (``python -m service.apidoc``).

Arguments are checked in exactly one place: :meth:`Operation.bind`, against
the argument model. A type that does not fit is RequestError ``bad_argument``;
a value outside its bounds (a negative offset, too many ids) is OutOfRange. A
port never checks an argument again; what a port adds is how bytes travel.
"""

from __future__ import annotations

import inspect
import re
import typing
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import (
    TYPE_CHECKING,
    Annotated,
    Any,
    Concatenate,
    Generic,
    Literal,
    ParamSpec,
    Protocol,
    TypeVar,
    overload,
)

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    Strict,
    TypeAdapter,
    ValidationError,
    create_model,
)

from protocol.errors import MorphzError, OutOfRange, RequestError, WireError
from protocol.ids import MAX_FRAME_ID
from protocol.wire import surrogate_in

if TYPE_CHECKING:
    from protocol.governance import AdmissionPolicy

P = ParamSpec("P")
R = TypeVar("R")

Permission = Literal["read", "commit", "recall", "admin"]
"""The capability operation a call needs (see :mod:`protocol.capabilities`)."""

MAX_REF_CHARS = 4096
"""The longest frame id, event reference or cursor an argument may be (the stored ids
are far shorter: a longer one names nothing)."""

FrameId = Annotated[str, Strict(), Field(max_length=MAX_REF_CHARS, description="A frame id.")]
"""A frame id argument (an unknown one is NotFound, not a bad argument)."""
EventRef = Annotated[
    str,
    Strict(),
    Field(max_length=MAX_REF_CHARS, description="An event reference (@eN) or event id."),
]
"""An event reference argument: ``@eN`` or a stable ``ev:`` id."""
Count = Annotated[int, Strict(), Field(ge=0, le=1 << 62)]
"""A non-negative integer argument: a version, an offset, a sequence number."""
Text = Annotated[str, Strict()]
"""A string argument."""
Cursor = Annotated[
    str, Strict(), Field(max_length=MAX_REF_CHARS, description="The next_cursor of a page.")
]
"""A page cursor argument (the ``next_cursor`` an earlier page answered)."""
Session = Annotated[
    str,
    Strict(),
    Field(max_length=MAX_REF_CHARS, description="The session (conversation or agent thread)."),
]
"""The session a call records in or compiles for."""

__all__ = [
    "MAX_FRAME_ID",
    "MAX_REF_CHARS",
    "OPERATIONS",
    "Ask",
    "Bound",
    "Caller",
    "Carry",
    "EMBEDDED",
    "Count",
    "Cursor",
    "Example",
    "EventRef",
    "FrameId",
    "Operation",
    "Permission",
    "Port",
    "Route",
    "Session",
    "Text",
    "Tool",
    "argument_error",
]


@dataclass(frozen=True)
class Route:
    """How an operation is served over HTTP: *method* and *path* under
    ``/v1/contexts/{context}`` (path parameters are argument names; the other
    arguments are query parameters for GET and the JSON body for POST), the
    *status* of a success, and for a list or scalar reply the *key* it is answered under
    (``{key: [...]}``, default ``items``; ``{key: 3}``, default ``result``: an HTTP reply
    is always a JSON object)."""

    method: Literal["GET", "POST"]
    path: str
    status: int = 200
    key: str | None = None


@dataclass(frozen=True)
class Tool:
    """How an operation is served as an MCP tool: its *name* (default the operation's)
    and its *description* (default the operation's documentation)."""

    name: str | None = None
    description: str | None = None


class Example:
    """One call of an operation, written in its declaration: the arguments the shape tests
    (``tests/service/test_shapes.py``) call it with on every port, after the shape script
    has made frames ``release`` and ``test-result``, events ``@e1`` to ``@e5`` and the
    candidate frame ``draft``.
    ``Example("release")`` is ``port.frame("release")``."""

    __slots__ = ("args", "kwargs")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.args = args
        self.kwargs = kwargs

    def run(self, port: Any, name: str) -> Any:
        """The reply of this call of operation *name* on *port* (an :class:`Ask` among the
        arguments is first asked of the same port)."""
        args = [a.run(port) if isinstance(a, Ask) else a for a in self.args]
        kwargs = {k: v.run(port) if isinstance(v, Ask) else v for k, v in self.kwargs.items()}
        return getattr(port, name)(*args, **kwargs)

    def call(self, name: str) -> str:
        """The call as Python text: ``frame('release')``."""
        parts = [repr(a) for a in self.args]
        parts += [f"{k}={v!r}" for k, v in self.kwargs.items()]
        return f"{name}({', '.join(parts)})"

    def __repr__(self) -> str:
        return self.call("Example")


class Ask(Example):
    """An argument of an :class:`Example` that is the reply of another call on the same
    port: ``Example(Ask("export_frame", "release"))`` imports what that port exported."""

    __slots__ = ("name",)

    def __init__(self, name: str, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.name = name

    def run(self, port: Any, name: str | None = None) -> Any:
        """The reply of this call on *port*."""
        return super().run(port, self.name)

    def __repr__(self) -> str:
        return self.call(self.name)


@dataclass(frozen=True)
class Carry:
    """How a remote port carries an operation when not as its checked arguments.

    *encode* turns the checked arguments into the values the call sends (a
    submission's wire bytes, its client id settled once, so every retry carries the
    same). The context actor serves such a call in a method of the operation's name
    that takes those values (a submission goes into its group-commit inbox, where
    concurrent ones share one durable write) and answers the reply packed as it is
    (no envelope: a list of them for a list) or an error map; the handle decodes it
    into the declared reply type."""

    encode: Callable[[Any], tuple[Any, ...]]


@dataclass(frozen=True)
class Caller:
    """Who makes a call and what the port serving it holds, for the operations that
    audit, decide or seal: the *holder* of the capability (``embedded`` for the
    embedded API; None for a remote call that carried no capability, where none is
    enforced), the admission *policy* of the port (None: the default policy), the
    *key* that seals and opens exported packages (a function answering it: the
    context actor's grant key, read on first use; None: this port has none, and
    sharing a frame is refused), and the *tenant* and *project* the port serves
    (None: the context's own, from its meta).

    The caller is the one dependency a port injects into a service function (its
    keyword parameter ``caller``); no argument carries any of it, so no caller can
    name another holder or key."""

    holder: str | None = "embedded"
    policy: AdmissionPolicy | None = None
    key: Callable[[], bytes] | None = None
    tenant: str | None = None
    project: str | None = None

    def sealing_key(self) -> bytes:
        """The key that seals and opens packages; RequestError ``no_key`` when the port
        has none (embedded: ``ctx.acting(key=...)``)."""
        if self.key is None:
            raise RequestError(
                "sharing a frame needs the key that seals packages: ctx.acting(key=...)",
                code="no_key",
            )
        return self.key()


class Port(Protocol):
    """What an :class:`Operation` read on an object needs of it: a way to run a call,
    blocking and for event loops."""

    def invoke(self, op: Operation[Any, R], args: BaseModel) -> R:
        """Run *op* with its checked *args*; its reply."""
        ...

    async def invoke_async(self, op: Operation[Any, R], args: BaseModel) -> R:
        """:meth:`invoke` for event loops."""
        ...


class Bound(Generic[P, R]):
    """An operation read on a port: ``port.frame(frame_id)`` calls it, and
    ``await port.frame.aio(frame_id)`` is the form for event loops."""

    __slots__ = ("op", "port")

    def __init__(self, op: Operation[P, R], port: Port) -> None:
        self.op = op
        self.port = port

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        return self.port.invoke(self.op, self.op.bind(*args, **kwargs))

    async def aio(self, *args: P.args, **kwargs: P.kwargs) -> R:
        """The call for event loops."""
        return await self.port.invoke_async(self.op, self.op.bind(*args, **kwargs))

    @property
    def __name__(self) -> str:
        return self.op.name

    @property
    def __doc__(self) -> str | None:  # type: ignore[override]
        return self.op.__doc__

    def __repr__(self) -> str:
        return f"<{self.op.name} of {self.port!r}>"


_UNSET: Any = object()
"""No value given (None may be one)."""

EMBEDDED = Caller()
"""The caller of the embedded API (audited as ``embedded``, the default policy): the
default of a service function's ``caller`` parameter."""

OPERATIONS: dict[str, Operation[Any, Any]] = {}
"""Every declared operation by name, in declaration order (filled by :mod:`service.operations`)."""

RANGE_ERRORS = frozenset(
    {
        "greater_than",
        "greater_than_equal",
        "less_than",
        "less_than_equal",
        "too_short",
        "too_long",
        "string_too_short",
        "string_too_long",
    }
)
"""pydantic error types that mean a value outside its bounds (OutOfRange), not a wrong type."""


TYPE_NAMES = {
    "string_type": "a string",
    "int_type": "an integer",
    "int_from_float": "an integer",
    "bool_type": "a boolean",
    "float_type": "a number",
    "list_type": "a list",
    "sequence_str": "a list of strings",
    "dict_type": "a map",
    "bytes_type": "bytes",
}


def argument_error(name: str, e: ValidationError) -> MorphzError:
    """The typed error of arguments of call *name* that do not fit its argument model:
    OutOfRange for a value outside its bounds, RequestError ``bad_argument`` otherwise."""
    err = e.errors()[0]
    kind, ctx, value = err.get("type", ""), err.get("ctx") or {}, err.get("input")
    what = " ".join(str(p) for p in err.get("loc", ())).replace("_", " ") or "arguments"
    got = type(value).__name__
    if kind in TYPE_NAMES:
        message = f"{what} must be {TYPE_NAMES[kind]}, not {got}"
    elif kind in ("greater_than_equal", "less_than_equal", "greater_than", "less_than"):
        bound = {"greater_than_equal": ">=", "less_than_equal": "<=", "greater_than": ">"}
        op = bound.get(kind, "<")
        limit = next(iter(ctx.values()), "?")
        message = f"{what} must be {op} {limit}, not {value!r:.40}"
    elif kind in ("too_long", "string_too_long", "too_short", "string_too_short"):
        most = "at most" if "long" in kind else "at least"
        limit = ctx.get("max_length", ctx.get("min_length", "?"))
        unit = "characters" if kind.startswith("string") else "items"
        message = f"{what} holds {most} {limit} {unit}"
    elif kind == "missing":
        message = f"{name} needs {what}"
    elif kind == "extra_forbidden":
        message = f"{name} takes no argument {what}"
    else:
        message = f"{what}: {err.get('msg', 'invalid')}"
    if kind.startswith("bad_"):  # a check that names its own error code
        return RequestError(message, code=kind)
    if kind in RANGE_ERRORS:
        return OutOfRange(message)
    return RequestError(message, code="bad_argument")


@dataclass(frozen=True)
class _Signature:
    """What the service function's signature says: the argument model, the argument
    names in order, whether the function takes the caller, and the reply type."""

    args: type[BaseModel]
    names: tuple[str, ...]
    caller: bool
    reply: Any
    parameters: tuple[inspect.Parameter, ...]


def _camel(name: str) -> str:
    return "".join(part.title() for part in name.split("_"))


class Operation(Generic[P, R]):
    """One call of the service, declared once (see the module docstring).

    *fn* is the service function, ``fn(ctx, *arguments) -> reply``; a keyword
    parameter named ``caller`` (default :data:`EMBEDDED`) receives the :class:`Caller`
    and is no argument.
    *example* is one call of it (:class:`Example`), run on every port by the shape tests.
    *prepare* (``prepare(ctx, args) -> value``) is the part of the work that reads
    without the writer (scanning every observation, searching an index): a remote port
    runs it off its store thread first; its value reaches *fn* as the keyword
    ``prepared`` (no argument either). *indexed*: the call reads the search index, which
    a long-lived port keeps current from worker threads once the first such call came.
    *carry* (:class:`Carry`): a remote port sends what it encodes instead of the
    checked arguments, and the context actor serves the call in a method of its own
    (``submit`` sends wire bytes into the group-commit inbox); the signature, the
    argument check and the reply stay this declaration's. *keyed* gives checked
    arguments the idempotency key a remote port sends with every attempt of
    one call (an event id), so a retry never writes twice.
    *step* is the call's one write as ``step(w, *arguments) -> reply`` on a
    :class:`~protocol.view.WriteView` (*fn* runs it in a write of its own): a port may run
    it inside a write it shares with other calls (:meth:`run_in`; the context actor's
    group commit), where it writes what it would alone, and nothing when it raises a
    :class:`~protocol.errors.MorphzError` before applying anything.
    """

    def __init__(
        self,
        fn: Callable[Concatenate[Any, P], R],
        *,
        permission: Permission,
        writes: bool,
        doc: str | None = None,
        http: Route | None = None,
        mcp: Tool | None = None,
        example: Example | None = None,
        prepare: Callable[[Any, Any], Any] | None = None,
        indexed: bool = False,
        carry: Carry | None = None,
        keyed: Callable[[Any], Any] | None = None,
        step: Callable[..., R] | None = None,
    ) -> None:
        self.fn = fn
        self.name = fn.__name__
        self.permission: Permission = permission
        self.writes = writes
        self.doc = doc or (inspect.getdoc(fn) or "").strip().split("\n\n")[0].replace("\n", " ")
        self.http = http
        self.mcp = mcp
        self.example = example
        self.prepare = prepare
        self.indexed = indexed
        self.carry = carry
        self.keyed = keyed
        self.step = step
        self.__doc__ = inspect.getdoc(fn)

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name
        OPERATIONS[name] = self

    def __repr__(self) -> str:
        return f"Operation({self.name!r}, {self.permission})"

    # -- what the signature says ------------------------------------------------------

    @cached_property
    def _signature(self) -> _Signature:
        # ``ctx`` is annotated with a name the service module imports for type checking
        # only; it is no argument, so any stand-in resolves it.
        hints = typing.get_type_hints(self.fn, include_extras=True, localns={"Context": object})
        params = list(inspect.signature(self.fn).parameters.values())[1:]
        fields: dict[str, Any] = {}
        names: list[str] = []
        parameters: list[inspect.Parameter] = []
        caller = False
        for p in params:
            if p.name == "caller":
                caller = True
                continue
            if p.name == "prepared":
                continue
            default = ... if p.default is inspect.Parameter.empty else p.default
            fields[p.name] = (hints[p.name], default)
            names.append(p.name)
            parameters.append(
                inspect.Parameter(
                    p.name,
                    inspect.Parameter.KEYWORD_ONLY,
                    default=p.default,
                    annotation=hints[p.name],
                )
            )
        model = create_model(
            _camel(self.name) + "Args",
            __config__=ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True),
            __doc__=f"The arguments of ``{self.name}``.",
            **fields,
        )
        return _Signature(model, tuple(names), caller, hints.get("return"), tuple(parameters))

    @property
    def args(self) -> type[BaseModel]:
        """The argument model: one field per argument, with its bounds."""
        return self._signature.args

    @property
    def names(self) -> tuple[str, ...]:
        """The argument names, in order (a positional call binds them in this order)."""
        return self._signature.names

    @property
    def parameters(self) -> tuple[inspect.Parameter, ...]:
        """The arguments as keyword-only parameters with their annotated types and defaults
        (what a port that derives its own schema from a signature, as MCP and HTTP do, takes)."""
        return self._signature.parameters

    @property
    def reply(self) -> Any:
        """The reply type (a reply model, a list of them, ``int`` …)."""
        return self._signature.reply

    @cached_property
    def _reply_adapter(self) -> TypeAdapter[Any]:
        return TypeAdapter(self.reply)

    # -- the one argument check -----------------------------------------------------

    def bind(self, *args: Any, **kwargs: Any) -> BaseModel:
        """The checked arguments of a call ``op(*args, **kwargs)``.

        RequestError ``bad_argument`` for too many or unknown arguments or one of
        the wrong type; OutOfRange for a value outside its bounds.
        """
        names = self.names
        if len(args) > len(names):
            raise RequestError(
                f"{self.name} takes at most {len(names)} arguments, not {len(args)}",
                code="bad_argument",
            )
        values = dict(zip(names, args, strict=False))
        for key, value in kwargs.items():
            if key in values:
                raise RequestError(f"{self.name}: {key} given twice", code="bad_argument")
            values[key] = value
        return self.check(values)

    def check(self, values: dict[str, Any], *, strings: bool = False) -> BaseModel:
        """The checked arguments named in *values* (*strings*: values are text to
        parse, as an HTTP query string gives them). Text no store can encode (a lone
        surrogate, as JSON's ``\\ud800`` carries) is ``bad_argument`` on every port."""
        where = surrogate_in(values)
        if where is not None:
            raise RequestError(
                f"{self.name}: {where.replace('_', ' ')} holds a lone surrogate: text must be"
                " valid Unicode",
                code="bad_argument",
            )
        try:
            if strings:
                return self.args.model_validate_strings(values)
            return self.args.model_validate(values)
        except ValidationError as e:
            raise argument_error(self.name, e) from e

    def wire(self, args: BaseModel) -> tuple[Any, ...]:
        """The checked arguments as the positional values a remote call carries."""
        return tuple(getattr(args, name) for name in self.names)

    def unwire(self, values: tuple[Any, ...] | list[Any]) -> BaseModel:
        """The arguments a remote call carried, checked (:meth:`bind` of the values)."""
        return self.bind(*values)

    # -- running it ------------------------------------------------------------------

    def run(
        self, ctx: Any, args: BaseModel, caller: Caller | None = None, prepared: Any = _UNSET
    ) -> R:
        """Run the service function on *ctx* with checked *args* (and *caller*); *prepared*
        is what :attr:`prepare` answered, run here first when not given."""
        kwargs = {name: getattr(args, name) for name in self.names}
        if self._signature.caller:
            kwargs["caller"] = caller or Caller()
        if self.prepare is not None:
            kwargs["prepared"] = self.prepare(ctx, args) if prepared is _UNSET else prepared
        fn: Callable[..., R] = self.fn
        return fn(ctx, **kwargs)

    def run_in(self, w: Any, args: BaseModel) -> R:
        """Run the call's :attr:`step` with checked *args* inside the write *w* (a
        :class:`~protocol.view.WriteView` it may share with other calls); its reply."""
        step = self.step
        if step is None:
            raise RequestError(f"{self.name} has no write step", code="bad_argument")
        return step(w, **{name: getattr(args, name) for name in self.names})

    def decode(self, value: Any) -> R:
        """The reply a remote port's decoded answer describes; WireError for another shape."""
        try:
            reply: R = self._reply_adapter.validate_python(value)
        except ValidationError as e:
            err = e.errors()[0]
            where = ".".join(str(p) for p in err.get("loc", ())) or "reply"
            raise WireError(f"malformed reply of {self.name}: {where}: {err.get('msg')}") from e
        return reply

    # -- read on an object: its method --------------------------------------------------

    @overload
    def __get__(self, obj: None, owner: type) -> Operation[P, R]: ...
    @overload
    def __get__(self, obj: Port, owner: type) -> Bound[P, R]: ...
    def __get__(self, obj: Port | None, owner: type) -> Operation[P, R] | Bound[P, R]:
        if obj is None:
            return self
        return Bound(self, obj)

    def __call__(self, obj: Port, /, *args: P.args, **kwargs: P.kwargs) -> R:
        """``Operations.frame(ctx, frame_id)``: the call on *obj*, as its method would make it."""
        return obj.invoke(self, self.bind(*args, **kwargs))

    # -- the names a route path holds ---------------------------------------------------

    def path_names(self) -> list[str]:
        """The argument names the HTTP path holds (``{frame_id}``)."""
        if self.http is None:
            return []
        return re.findall(r"\{(\w+)\}", self.http.path)
