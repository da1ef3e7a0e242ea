"""Commands that use Ray: joining a cluster started before them, one-line failures when it
cannot be reached, and the write commands going through the context actor holding a store.

Each command runs as a child process (a fresh interpreter, not connected to Ray), as a
user would run it.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from service.store import Store
from tests.actors.cluster import RayCluster

MORPHZ = [sys.executable, "-c", "from morphz.cli import main; main()"]
RAY = [sys.executable, "-c", "import sys; from ray.scripts.scripts import main; sys.exit(main())"]
NOBODY = "127.0.0.1:1"
"""A Ray address nobody listens on."""


def _env(**extra: str) -> dict[str, str]:
    """This environment without a store or cluster named, plus *extra*.

    ``RAY_AUTH_MODE`` is pinned (to this process's, which its session cluster set,
    else ``disabled``) so a cluster started here and the commands joining it agree:
    Ray enables token auth for ``ray start`` whenever a token file exists, but a
    driver joining an explicit address only when told to.
    """
    env = {k: v for k, v in os.environ.items() if k not in ("MORPHZ_STORE", "RAY_ADDRESS")}
    env["RAY_AUTH_MODE"] = os.environ.get("RAY_AUTH_MODE", "disabled")
    env.update(extra)
    return env


def morphz(
    *args: str, stdin: str | None = None, timeout: float = 120, **env: str
) -> subprocess.CompletedProcess[str]:
    """Run the CLI in a child process (RAY_ADDRESS only if given in *env*)."""
    return subprocess.run(
        [*MORPHZ, *args],
        input=stdin,
        capture_output=True,
        text=True,
        env=_env(**env),
        timeout=timeout,
    )


def _one_line_failure(p: subprocess.CompletedProcess[str], code: str) -> None:
    assert p.returncode == 1, (p.stdout, p.stderr[-2000:])
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1, p.stderr
    assert lines[0].startswith(f"morphz: {code}: "), p.stderr
    assert "Traceback" not in p.stderr and p.stdout == ""


@pytest.fixture
def held_store(tmp_path: Path) -> Iterator[Path]:
    """A store whose context this test process holds open for writing (no actor anywhere)."""
    path = tmp_path / "store"
    with Store(path).open("default", create=True, sync=False) as ctx:
        assert ctx.commit("(context-tx (base-version 0) (derive a (x 1)))").committed
        yield path


# -- unreachable clusters: one line, exit 1, nothing changed -----------------------------


@pytest.mark.parametrize(
    "args",
    [
        ["demo", "--no-live"],
        ["loadtest", "--threads", "1", "--transactions", "2"],
    ],
    ids=["demo", "loadtest"],
)
@pytest.mark.parametrize("how", ["RAY_ADDRESS", "--address"])
def test_an_unreachable_cluster_is_one_line_and_exit_1(
    tmp_path: Path, args: list[str], how: str
) -> None:
    if how == "RAY_ADDRESS":
        p = morphz(*args, "--store", str(tmp_path / "s"), RAY_ADDRESS=NOBODY, timeout=60)
    else:
        p = morphz(*args, "--store", str(tmp_path / "s"), "--address", NOBODY, timeout=60)
    _one_line_failure(p, "ray_unreachable")
    assert NOBODY in p.stderr
    assert not (tmp_path / "s").exists() or not any((tmp_path / "s").iterdir())


def test_an_unreachable_cluster_with_json_is_one_error_object(tmp_path: Path) -> None:
    p = morphz("--json", "demo", "--no-live", "--store", str(tmp_path), RAY_ADDRESS=NOBODY)
    assert p.returncode == 1 and "Traceback" not in p.stderr, p.stderr
    lines = p.stdout.strip().splitlines()
    assert len(lines) == 1
    assert json.loads(lines[0])["error"]["code"] == "ray_unreachable"


def test_a_malformed_address_is_one_line_and_exit_1(tmp_path: Path) -> None:
    p = morphz("demo", "--no-live", "--store", str(tmp_path), "--address", "no-such::address")
    _one_line_failure(p, "ray_unreachable")


@pytest.mark.parametrize(
    "args, stdin",
    [
        (["observe", "--kind", "external", "--text", "x"], None),
        (["claim"], None),
        (["tx"], "(context-tx (base-version 1) (revise a (x 2)))"),
        (["deliver", "@e1"], None),
    ],
    ids=["observe", "claim", "tx", "deliver"],
)
def test_a_locked_store_with_an_unreachable_cluster_changes_nothing(
    held_store: Path, args: list[str], stdin: str | None
) -> None:
    for extra, env in (
        (["--address", NOBODY], {}),
        ([], {"RAY_ADDRESS": NOBODY}),
    ):
        p = morphz("--store", str(held_store), *args, *extra, stdin=stdin, **env)
        _one_line_failure(p, "ray_unreachable")
    # without any address and no actor advertising itself: store_locked, with the way out
    p = morphz("--store", str(held_store), *args, stdin=stdin)
    _one_line_failure(p, "store_locked")
    assert "--address" in p.stderr
    with Store(held_store).open("default", readonly=True) as ctx:
        assert ctx.meta().version == 1


def test_review_address_unreachable_is_one_line(held_store: Path) -> None:
    p = morphz(
        "--store", str(held_store), "review", "accept", "a", "--reviewer", "r", "--address", NOBODY
    )
    _one_line_failure(p, "ray_unreachable")


def test_a_garbage_advert_is_no_advert(held_store: Path) -> None:
    from actors.client.lookup import advertised
    from actors.client.names import advert_path

    path = Path(advert_path(held_store, "default"))
    for junk in (b"", b"{not json", b"[]", b'{"format": 1, "context": "default"}', b"x" * 9000):
        path.write_bytes(junk)
        assert advertised(held_store, "default") is None
        p = morphz("--store", str(held_store), "claim")
        _one_line_failure(p, "store_locked")
    path.write_bytes(
        json.dumps(
            {"format": 1, "context": "default", "address": NOBODY, "namespace": "morphz"}
        ).encode()
    )
    assert advertised(held_store, "default") is not None
    # the advert's address is used when nothing else names a cluster
    _one_line_failure(morphz("--store", str(held_store), "claim"), "ray_unreachable")


def test_an_embedded_writer_clears_a_stale_advert(tmp_path: Path) -> None:
    from actors.client.names import advert_path

    store = tmp_path / "store"
    with Store(store).open("default", create=True):
        pass
    stale = Path(advert_path(store, "default"))
    stale.write_text(json.dumps({"format": 1, "context": "default", "address": NOBODY}))
    p = morphz("--store", str(store), "observe", "--kind", "external", "--text", "x")
    assert p.returncode == 0, p.stderr
    assert not stale.exists()


# -- a cluster started before the command -------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def ray_head() -> Iterator[tuple[str, str]]:
    """A Ray cluster started before the test's commands (see :func:`started_head`)."""
    with started_head() as head:
        yield head


@contextmanager
def started_head(**env: str) -> Iterator[tuple[str, str]]:
    """A Ray cluster started by ``ray start --head`` (environment *env*): its address,
    and the Ray temp dir (``RAY_TMPDIR``) where it is "the current cluster".

    ``--block`` keeps the starting process in the foreground: terminating it stops
    exactly the processes it started. Its own ``RAY_TMPDIR`` keeps it out of the
    default one, so other Ray users on the machine never see it; a command given the
    same ``RAY_TMPDIR`` sees it as ``ray.init()`` would (the old demo crashed there).
    """
    temp = tempfile.mkdtemp(prefix="mzr-")
    port = _free_port()
    head = subprocess.Popen(
        [
            *RAY,
            "start",
            "--head",
            "--block",
            f"--port={port}",
            "--num-cpus=2",
            "--include-dashboard=false",
            "--disable-usage-stats",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=_env(RAY_TMPDIR=temp, **env),
    )
    address = f"127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if head.poll() is not None or time.monotonic() > deadline:
                    pytest.fail("ray start --head did not come up")
                time.sleep(0.2)
        yield address, temp
    finally:
        head.send_signal(signal.SIGTERM)
        try:
            head.wait(timeout=60)
        except subprocess.TimeoutExpired:
            head.kill()
            head.wait()
        shutil.rmtree(temp, ignore_errors=True)


@pytest.mark.ray
def test_the_demo_joins_a_cluster_started_before_it(
    ray_head: tuple[str, str], tmp_path: Path
) -> None:
    address, temp = ray_head
    # The whole demo (four threads) once; the other ways of finding the cluster with one
    # thread (the join is the same, the three other stories add only actor start-ups).
    for extra, env in (
        ([], {"RAY_ADDRESS": address}),
        (["--threads", "1", "--address", address], {}),
        (["--threads", "1", "--address", "auto"], {"RAY_TMPDIR": temp}),  # as Ray finds it
        (["--threads", "1"], {"RAY_TMPDIR": temp}),  # no address: its own cluster, no crash
    ):
        store = tmp_path / uuid.uuid4().hex[:8]
        p = morphz("--json", "demo", "--no-live", "--store", str(store), *extra, **env)
        assert p.returncode == 0, (extra, env, p.stdout, p.stderr[-1000:])
        assert "num_cpus" not in p.stderr and "Traceback" not in p.stderr
        doc = json.loads(p.stdout)
        assert doc["ok"] is True, doc["checks"]
        assert doc["threads"] == (1 if "--threads" in extra else 4)
        assert doc["checks"] and all(doc["checks"].values())


@pytest.mark.ray
def test_joining_a_token_cluster_without_the_token_is_one_line(tmp_path: Path) -> None:
    # The head's token is given in its environment: no token file is needed or written.
    with started_head(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=secrets.token_hex(32)) as (address, _):
        p = morphz(
            "demo",
            "--no-live",
            "--store",
            str(tmp_path),
            RAY_ADDRESS=address,
            RAY_AUTH_MODE="disabled",
        )
    _one_line_failure(p, "ray_unreachable")
    # Refused by the probe made before the join (Ray's own join retries for tens of
    # seconds), with what to set.
    assert (
        f"cannot join the Ray cluster at {address}: the cluster uses token authentication: set RAY_AUTH_MODE=token"
        in p.stderr
    )
    assert "~/.ray/auth_token" in p.stderr


# -- the write commands through a running context actor -----------------------------------

SCRIPT: list[tuple[list[str], str | None]] = [
    (["observe", "--kind", "user_message", "--text", "Ship v1 once the tests pass."], None),
    (["--json", "observe", "--kind", "tool_result", "--text", "412 passed"], None),
    (["claim"], None),
    (["--json", "claim"], None),
    (
        ["tx"],
        "(context-tx (base-version 0) (derive release (from @e1) (goal ship-v1))"
        " (derive tests (from @e2) (tests passed)) (retire @e2))",
    ),
    (["tx"], "(context-tx (base-version 1) (retire @e1))"),  # rejected: not delivered
    (["--json", "tx"], "(context-tx (base-version 1) (retire @e1))"),
    (["tx"], "(context-tx (base-version 1) (derive oops (from @e1) (x)"),  # parse error
    (["deliver", "@e1"], None),
    (["--json", "deliver", "@e9"], None),  # no such event
    (["tx", "--client-id", "c-1"], "(context-tx (base-version 1) (retire @e1))"),
    (["tx", "--client-id", "c-1"], "(context-tx (base-version 1) (retire @e1))"),  # duplicate
]


def _normal(text: str) -> str:
    """Output with the random parts (event ids, client ids) blanked."""
    text = re.sub(r"ev:[0-9a-f]{20}", "ev:…", text)
    return re.sub(r'"client_id": "c-[0-9a-f]{32}"', '"client_id": null', text)


def _run_script(store: Path, **env: str) -> list[tuple[int, str, str]]:
    out = []
    for args, stdin in SCRIPT:
        p = morphz("--store", str(store), *args, stdin=stdin, **env)
        assert "Traceback" not in p.stderr, p.stderr
        out.append((p.returncode, _normal(p.stdout), _normal(p.stderr)))
    return out


@pytest.mark.ray
def test_the_write_commands_go_through_the_actor_holding_the_store(
    ray_cluster: RayCluster, tmp_path: Path, namespace: str
) -> None:
    from actors import connect
    from protocol.errors import StoreLocked

    embedded_store, actor_store = tmp_path / "embedded", tmp_path / "actor"
    with Store(embedded_store).open("default", create=True):
        pass
    embedded = _run_script(embedded_store)

    handle = connect("default", store_dir=actor_store, namespace=namespace)
    try:
        with pytest.raises(StoreLocked):  # the actor holds it: no embedded writer can
            Store(actor_store).open("default")
        # found through the store alone: the actor advertises its address and namespace
        through = _run_script(actor_store)
        assert through == embedded
        assert [code for code, _, _ in through] == [0, 0, 0, 0, 0, 1, 1, 2, 0, 1, 0, 0]
        # the actor's own state changed, and the reads saw it read-only meanwhile
        assert handle.version() == 2
        assert handle.frame("tests")["body"] == "(tests passed)"
        assert handle.event("@e1")["lifecycle"] == "retired"
        assert handle.txlog(2)["client_id"] == "c-1"
        state = morphz("--store", str(actor_store), "--json", "state")
        assert state.returncode == 0 and json.loads(state.stdout)["version"] == 2
        # RAY_ADDRESS names the cluster too (same actor, found by the advert's namespace)
        p = morphz(
            "--store",
            str(actor_store),
            "observe",
            "--kind",
            "external",
            "--text",
            "via RAY_ADDRESS",
            RAY_ADDRESS=ray_cluster.cluster.address,
        )
        assert p.returncode == 0, p.stderr
        assert p.stdout.startswith("@e3  external  (15 chars)  ev:")
        assert handle.event("@e3")["kind"] == "external"
    finally:
        handle.shutdown()


@pytest.mark.ray
def test_the_write_commands_go_through_the_host_holding_the_store(
    ray_cluster: RayCluster, tmp_path: Path, namespace: str
) -> None:
    from actors.server.hosting import start_host

    store = tmp_path / "hosted"
    host = start_host("cli-h", store_dir=store, namespace=namespace)
    try:
        handle = host.context("default")  # active on the host: it holds the store
        before = host.contexts()[0]["calls"]
        p = morphz(
            "--store", str(store), "tx", stdin="(context-tx (base-version 0) (derive a (x 1)))"
        )
        assert p.returncode == 0, p.stderr
        state = morphz("--store", str(store), "--json", "state")
        assert state.returncode == 0 and json.loads(state.stdout)["version"] == 1
        assert host.contexts()[0]["calls"] >= before + 2  # its handshake and its submission
        assert handle.version() == 1 and handle.frame("a")["body"] == "(x 1)"
    finally:
        host.shutdown()


@pytest.mark.ray
def test_an_actor_serving_another_store_is_refused(
    ray_cluster: RayCluster, tmp_path: Path, namespace: str
) -> None:
    from actors import connect
    from actors.client.names import advert_path

    handle = connect("default", store_dir=tmp_path / "elsewhere", namespace=namespace)
    try:
        held = tmp_path / "held"
        with Store(held).open("default", create=True) as ctx:
            doc: dict[str, Any] = {
                "format": 1,
                "context": "default",
                "address": ray_cluster.cluster.address,
                "namespace": namespace,
            }
            Path(advert_path(held, "default")).write_text(json.dumps(doc))
            p = morphz("--store", str(held), "claim")
            _one_line_failure(p, "context_elsewhere")
            doc["namespace"] = namespace + "-none"
            Path(advert_path(held, "default")).write_text(json.dumps(doc))
            p = morphz("--store", str(held), "claim")
            _one_line_failure(p, "not_found")
            assert ctx.meta().version == 0
        assert handle.version() == 0
    finally:
        handle.shutdown()
