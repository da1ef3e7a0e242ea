"""The safe-by-default binding rule (:mod:`servers.binding`) and ``morphz mcp``'s use of it."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
from click.testing import CliRunner

from morphz.cli.main import cli
from protocol.errors import RequestError
from servers.binding import check_bind, is_loopback, parse_host_port
from servers.mcp_server import open_memory, read_capability
from service.store import Store


@pytest.mark.parametrize(
    "host", ["127.0.0.1", "127.8.9.1", "localhost", "LOCALHOST", "::1", "[::1]"]
)
def test_loopback_is_allowed_without_warning(host: str) -> None:
    assert is_loopback(host)
    assert check_bind(host, enforced=False, insecure=False) == []


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.1.2.3", "example.com", "127.0.0.1.nip.io"])
def test_another_address_needs_capabilities_or_insecure(host: str) -> None:
    assert not is_loopback(host)
    with pytest.raises(RequestError) as e:
        check_bind(host, enforced=False, insecure=False)
    assert e.value.code == "insecure_bind" and "--insecure" in e.value.message
    assert check_bind(host, enforced=True, insecure=False) == []
    (warning,) = check_bind(host, enforced=False, insecure=True)
    assert host in warning and "NOT enforced" in warning


@pytest.mark.parametrize("host", ["", "   ", None, 7, "a" * 300, "evil host", "h/ost", "u@h"])
def test_a_malformed_host_is_bad_argument(host: object) -> None:
    with pytest.raises(RequestError) as e:
        check_bind(host, enforced=True, insecure=True)
    assert e.value.code == "bad_argument"


def test_host_port_forms() -> None:
    assert parse_host_port("0.0.0.0:8080") == ("0.0.0.0", 8080)
    assert parse_host_port(":9") == ("127.0.0.1", 9)
    assert parse_host_port("9") == ("127.0.0.1", 9)
    assert parse_host_port("[::1]:70") == ("::1", 70)
    for bad in ["", "host:", "host:port", "h:70000", "h:-1", "[::1]70", None]:
        with pytest.raises(RequestError) as e:
            parse_host_port(bad)
        assert e.value.code == "bad_argument"


def test_mcp_refuses_a_public_address_before_touching_the_store(tmp_path: Path) -> None:
    store = tmp_path / "s"
    result = CliRunner().invoke(
        cli, ["--store", str(store), "mcp", "--create", "--http", "0.0.0.0:0"]
    )
    assert result.exit_code == 1
    assert "insecure_bind" in result.output and "--insecure" in result.output
    assert not store.exists()  # nothing created, nothing served


def test_mcp_bad_http_value_is_a_usage_error(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["--store", str(tmp_path), "mcp", "--http", "x:y"])
    assert result.exit_code == 2 and "bad_argument" in result.output


def test_capability_from_a_file_or_base64(tmp_path: Path) -> None:
    token = b"\x01\x02capability"
    f = tmp_path / "cap"
    f.write_bytes(token)
    assert read_capability(str(f)) == token
    assert read_capability(base64.b64encode(token).decode()) == token
    assert read_capability(base64.urlsafe_b64encode(token).decode().rstrip("=")) == token
    assert read_capability(None) is None
    for bad in ["not base64 !!", str(tmp_path / "missing-and-not-b64!")]:
        with pytest.raises(RequestError) as e:
            read_capability(bad)
        assert e.value.code == "bad_argument"
    (tmp_path / "empty").write_bytes(b"")
    with pytest.raises(RequestError):
        read_capability(str(tmp_path / "empty"))


def test_a_capability_on_an_embedded_store_is_refused(tmp_path: Path) -> None:
    with pytest.raises(RequestError) as e:
        open_memory(str(tmp_path), "default", capability=b"token", create=True)
    assert e.value.code == "bad_argument" and "--address" in e.value.message
    assert not Store(str(tmp_path)).exists("default")  # refused before anything was created
