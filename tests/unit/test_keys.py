"""Ed25519 keys, key ids and key files (smf_assurance/subjects/keys.py)."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import stat
from pathlib import Path
from typing import Any

import msgspec
import pytest

from smf_assurance.subjects.keys import (
    KEY_ID_PREFIX,
    MAX_KEY_FILE_BYTES,
    PRIVATE_KEY_KIND,
    PUBLIC_KEY_KIND,
    KeyFileError,
    PublicKeyRecord,
    SigningKey,
    VerifyKey,
    generate_signing_key,
    key_id_of,
    load_private_key,
    public_record,
    verify_key_from_record,
    write_private_key,
)

# RFC 8032 section 7.1, TEST 1: a published seed, public key and signature.
RFC8032_SEED = bytes.fromhex("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60")
RFC8032_PUBLIC = bytes.fromhex("d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a")
RFC8032_SIGNATURE = bytes.fromhex(
    "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e06522490155"
    "5fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b"
)


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode("ascii")


def _rewrite(path: Path, **changes: Any) -> None:
    document = json.loads(path.read_bytes())
    document.update(changes)
    path.write_text(json.dumps(document))


# --- key ids ----------------------------------------------------------------


def test_key_id_is_sha256_of_raw_public_key() -> None:
    expected = "ed25519:" + hashlib.sha256(RFC8032_PUBLIC).hexdigest()
    assert key_id_of(RFC8032_PUBLIC) == expected
    assert expected.startswith(KEY_ID_PREFIX)


def test_key_id_rejects_wrong_length() -> None:
    with pytest.raises(ValueError, match="32 bytes"):
        key_id_of(RFC8032_PUBLIC[:31])


def test_distinct_keys_have_distinct_ids() -> None:
    assert generate_signing_key().key_id != generate_signing_key().key_id


# --- signing and verify keys -------------------------------------------------


def test_from_seed_matches_rfc8032_vector() -> None:
    key = SigningKey.from_seed(RFC8032_SEED)
    assert key.public_bytes == RFC8032_PUBLIC
    assert key.seed() == RFC8032_SEED
    assert key.key_id == key_id_of(RFC8032_PUBLIC)
    assert key.sign(b"") == RFC8032_SIGNATURE


def test_from_seed_rejects_wrong_length() -> None:
    with pytest.raises(ValueError, match="seed is 32 bytes"):
        SigningKey.from_seed(RFC8032_SEED + b"\x00")


def test_signature_is_64_bytes_and_verifies() -> None:
    key = generate_signing_key()
    signature = key.sign(b"message")
    assert len(signature) == 64
    assert key.verify_key.verify(b"message", signature)
    assert not key.verify_key.verify(b"messagE", signature)
    assert not generate_signing_key().verify_key.verify(b"message", signature)


def test_verify_rejects_signature_of_wrong_length() -> None:
    key = generate_signing_key()
    with pytest.raises(ValueError, match="64 bytes"):
        key.verify_key.verify(b"message", key.sign(b"message")[:63])


def test_verify_key_equality_is_by_public_bytes() -> None:
    a = VerifyKey(RFC8032_PUBLIC)
    b = VerifyKey(bytes(RFC8032_PUBLIC))
    assert a == b
    assert hash(a) == hash(b)
    assert a != VerifyKey(generate_signing_key().public_bytes)
    assert a != RFC8032_PUBLIC
    assert a.key_id == key_id_of(RFC8032_PUBLIC)


def test_verify_key_rejects_wrong_length() -> None:
    with pytest.raises(ValueError, match="32 bytes"):
        VerifyKey(b"\x01" * 33)


def test_signing_key_repr_never_shows_the_seed() -> None:
    key = SigningKey.from_seed(RFC8032_SEED)
    text = repr(key)
    assert key.key_id in text
    assert RFC8032_SEED.hex() not in text
    assert _b64(RFC8032_SEED) not in text
    assert "9d61b19d" not in text


# --- private key files -------------------------------------------------------


def test_private_key_file_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "attorney-1.key"
    key = generate_signing_key()
    write_private_key(path, key, "attorney-1")

    loaded, principal = load_private_key(path)

    assert principal == "attorney-1"
    assert loaded.key_id == key.key_id
    assert loaded.seed() == key.seed()
    document = json.loads(path.read_bytes())
    assert document == {
        "kind": PRIVATE_KEY_KIND,
        "key_id": key.key_id,
        "principal": "attorney-1",
        "public_key": _b64(key.public_bytes),
        "secret_seed": _b64(key.seed()),
    }


def test_private_key_file_mode_is_0600(tmp_path: Path) -> None:
    path = tmp_path / "k.key"
    old_umask = os.umask(0)
    try:
        write_private_key(path, generate_signing_key(), "gate")
    finally:
        os.umask(old_umask)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_write_refuses_to_overwrite(tmp_path: Path) -> None:
    path = tmp_path / "k.key"
    first = generate_signing_key()
    write_private_key(path, first, "gate")
    before = path.read_bytes()

    with pytest.raises(KeyFileError, match="refusing to overwrite"):
        write_private_key(path, generate_signing_key(), "gate")

    assert path.read_bytes() == before


def test_write_refuses_a_planted_symlink(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("do not touch")
    link = tmp_path / "k.key"
    link.symlink_to(victim)

    with pytest.raises(KeyFileError, match="refusing to overwrite"):
        write_private_key(link, generate_signing_key(), "gate")

    assert victim.read_text() == "do not touch"


def test_write_rejects_empty_principal(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="principal"):
        write_private_key(tmp_path / "k.key", generate_signing_key(), "")
    assert not (tmp_path / "k.key").exists()


def test_failed_write_leaves_no_partial_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken_fsync(fd: int) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(os, "fsync", broken_fsync)
    path = tmp_path / "k.key"
    with pytest.raises(OSError, match="disk full"):
        write_private_key(path, generate_signing_key(), "gate")
    assert not path.exists()


@pytest.fixture
def key_file(tmp_path: Path) -> Path:
    path = tmp_path / "k.key"
    write_private_key(path, generate_signing_key(), "attorney-1")
    return path


def test_tampered_key_id_is_refused(key_file: Path) -> None:
    _rewrite(key_file, key_id=generate_signing_key().key_id)
    with pytest.raises(KeyFileError, match=r"key_id .* does not match the public key"):
        load_private_key(key_file)


def test_seed_that_does_not_derive_public_key_is_refused(key_file: Path) -> None:
    _rewrite(key_file, secret_seed=_b64(generate_signing_key().seed()))
    with pytest.raises(KeyFileError, match="secret_seed does not derive public_key"):
        load_private_key(key_file)


def test_public_key_swapped_with_matching_key_id_is_refused(key_file: Path) -> None:
    other = generate_signing_key()
    _rewrite(key_file, key_id=other.key_id, public_key=_b64(other.public_bytes))
    with pytest.raises(KeyFileError, match="secret_seed does not derive public_key"):
        load_private_key(key_file)


def test_unknown_field_is_refused(key_file: Path) -> None:
    _rewrite(key_file, comment="hello")
    with pytest.raises(KeyFileError, match="comment"):
        load_private_key(key_file)


def test_wrong_kind_is_refused(key_file: Path) -> None:
    _rewrite(key_file, kind=PUBLIC_KEY_KIND)
    with pytest.raises(KeyFileError, match="kind"):
        load_private_key(key_file)


def test_missing_field_is_refused(key_file: Path) -> None:
    document = json.loads(key_file.read_bytes())
    del document["secret_seed"]
    key_file.write_text(json.dumps(document))
    with pytest.raises(KeyFileError, match="secret_seed"):
        load_private_key(key_file)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("secret_seed", "not base64!", "secret_seed is not valid base64"),
        ("secret_seed", _b64(b"\x01" * 31), "secret_seed is 31 bytes, expected 32"),
        ("public_key", "@@@@", "public_key is not valid base64"),
        ("public_key", _b64(b"\x01" * 33), "public_key is 33 bytes, expected 32"),
        ("public_key", "é", "public_key is not valid base64"),
        ("principal", "", "principal"),
    ],
)
def test_malformed_fields_are_refused(key_file: Path, field: str, value: str, message: str) -> None:
    _rewrite(key_file, **{field: value})
    with pytest.raises(KeyFileError, match=message):
        load_private_key(key_file)


def test_not_json_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "k.key"
    path.write_bytes(b"-----BEGIN PRIVATE KEY-----")
    with pytest.raises(KeyFileError, match=re.escape(f"not a {PRIVATE_KEY_KIND} file")):
        load_private_key(path)


def test_oversized_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "k.key"
    path.write_bytes(b" " * (MAX_KEY_FILE_BYTES + 1))
    with pytest.raises(KeyFileError, match="larger than"):
        load_private_key(path)


def test_missing_file_is_a_key_file_error(tmp_path: Path) -> None:
    with pytest.raises(KeyFileError, match="cannot read key file"):
        load_private_key(tmp_path / "absent.key")


# --- public key records ------------------------------------------------------


def test_public_record_round_trip_through_json() -> None:
    key = generate_signing_key()
    record = public_record(key, "attorney-1")
    assert record.kind == PUBLIC_KEY_KIND
    assert record.key_id == key.key_id

    decoded = msgspec.json.decode(msgspec.json.encode(record), type=PublicKeyRecord)

    assert decoded == record
    assert verify_key_from_record(decoded) == key.verify_key


def test_public_record_accepts_a_verify_key() -> None:
    key = generate_signing_key()
    assert public_record(key.verify_key, "gate") == public_record(key, "gate")


def test_public_record_rejects_empty_principal() -> None:
    with pytest.raises(ValueError, match="principal"):
        public_record(generate_signing_key(), "")


def test_public_record_never_contains_the_seed() -> None:
    key = generate_signing_key()
    encoded = msgspec.json.encode(public_record(key, "gate"))
    assert _b64(key.seed()).encode() not in encoded
    assert b"secret" not in encoded


def test_record_with_foreign_key_id_is_refused() -> None:
    record = public_record(generate_signing_key(), "attorney-1")
    forged = msgspec.structs.replace(record, key_id=generate_signing_key().key_id)
    with pytest.raises(KeyFileError, match="does not match the public key"):
        verify_key_from_record(forged)


def test_record_decoding_rejects_unknown_fields() -> None:
    record = msgspec.to_builtins(public_record(generate_signing_key(), "gate"))
    record["role"] = "attorney"
    with pytest.raises(msgspec.ValidationError, match="role"):
        msgspec.json.decode(json.dumps(record).encode(), type=PublicKeyRecord)
