"""Epoch certificates (:mod:`storage.replication.epochs`): the directory signs epochs with an
Ed25519 key of its own, kept out of the key directory; members verify with public keys only."""

from __future__ import annotations

from pathlib import Path

import pytest

from protocol import capabilities
from protocol.errors import WireError
from storage import keys
from storage.replication import epochs
from storage.replication.codec import control_mac

SEED = bytes(range(32))
PUBLIC = {capabilities.key_id(capabilities.public_key(SEED)): capabilities.public_key(SEED)}


def test_a_certificate_checks_out_only_for_its_context_epoch_purpose_and_member() -> None:
    cert = epochs.sign(SEED, "c", 5, "epoch", "morphz:c#f0@e0")
    assert epochs.check(PUBLIC, cert, "c", 5, ("epoch",)) == (5, "epoch", "morphz:c#f0@e0")
    assert epochs.check(PUBLIC, cert, "c", 5, ("epoch",), "morphz:c#f0@e0")[0] == 5
    refused = [
        (cert, "d", 5, ("epoch",), None),  # another context
        (cert, "c", 6, ("epoch",), None),  # another epoch (a newer one: 2**62 needs its own)
        (cert, "c", 5, ("seal",), None),  # another purpose
        (cert, "c", 5, ("epoch",), "morphz:c#f1@e0"),  # another member
        (epochs.sign(b"x" * 32, "c", 5), "c", 5, ("epoch",), None),  # a foreign key
        (cert[:-1] + bytes([cert[-1] ^ 1]), "c", 5, ("epoch",), None),  # tampered
        (control_mac(b"k" * 32, "epoch", 5), "c", 5, ("epoch",), None),  # the retired MAC
        (b"", "c", 5, ("epoch",), None),
        (b"\x93\x01\x02", "c", 5, ("epoch",), None),
        (b"\xff" * 2000, "c", 5, ("epoch",), None),
        (None, "c", 5, ("epoch",), None),
    ]
    for bad, context, epoch, accept, member in refused:
        with pytest.raises(WireError) as e:
            epochs.check(PUBLIC, bad, context, epoch, accept, member)
        assert e.value.code == "bad_signature", (bad, context, epoch, accept, member)
    for wrong in (-1, True, 1.5, "5"):
        with pytest.raises(WireError) as e:
            epochs.check(PUBLIC, cert, "c", wrong, ("epoch",))
        assert e.value.code == "bad_argument"
    with pytest.raises(WireError) as retired:
        epochs.check(PUBLIC, control_mac(b"k" * 32, "epoch", 5), "c", 5, ("epoch",))
    assert "retired scheme" in retired.value.message


def test_members_verify_with_the_public_key_alone_and_the_private_key_is_not_in_the_key_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The replication key directory (``$MORPHZ_KEY_DIR``, shared with every node) holds no
    key that signs an epoch: the signing key lives beside it, and a member with only
    ``$MORPHZ_DIRECTORY_PUBLIC_KEYS`` checks certificates; a different public key there
    refuses the real directory's certificates."""
    monkeypatch.setenv(keys.KEY_DIR_ENV, str(tmp_path / "keys"))
    monkeypatch.delenv(keys.DIRECTORY_KEY_ENV, raising=False)
    monkeypatch.delenv(keys.DIRECTORY_PUBLIC_KEYS_ENV, raising=False)
    path = keys.directory_key_path()
    assert path == tmp_path / "morphz-directory" / "epoch-signing.key"
    assert keys.key_dir() not in path.parents
    with pytest.raises(WireError) as none:  # no key anywhere yet: refused, not trusted
        epochs.check_epoch("c", 1, b"x" * 80, ("epoch",))
    assert none.value.code == "bad_signature" and "MORPHZ_DIRECTORY_PUBLIC_KEYS" in (
        none.value.message
    )
    cert = epochs.sign_epoch("c", 1)  # the directory's process: makes the key and its .pub
    assert path.exists() and (path.stat().st_mode & 0o777) == 0o600
    public = path.with_suffix(".pub").read_text().strip()
    assert epochs.check_epoch("c", 1, cert, ("epoch",)) == 1  # one machine: the .pub file
    seed = keys.key_at(path).hex()
    assert all(seed not in p.read_text() for p in (tmp_path / "keys").rglob("*") if p.is_file())
    # a node with the public key only (the private key file is not there)
    monkeypatch.setenv(keys.DIRECTORY_KEY_ENV, str(tmp_path / "absent" / "signing.key"))
    monkeypatch.setenv(keys.DIRECTORY_PUBLIC_KEYS_ENV, public)
    assert epochs.check_epoch("c", 1, cert, ("epoch",)) == 1
    assert not (tmp_path / "absent").exists()
    other = capabilities.public_key(b"o" * 32).hex()
    monkeypatch.setenv(keys.DIRECTORY_PUBLIC_KEYS_ENV, other)
    with pytest.raises(WireError) as foreign:
        epochs.check_epoch("c", 1, cert, ("epoch",))
    assert foreign.value.code == "bad_signature" and "not one of the directory" in (
        foreign.value.message
    )
