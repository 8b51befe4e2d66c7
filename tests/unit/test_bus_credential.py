"""A runtime's bus credential, as both adapters read it.

``smf_assurance.subjects.bus_access.read_credential`` and ``inbox_prefix`` against the golden
vectors of ``tests/vectors/bus_access.json``, which the TypeScript twin
(``smf_assurance/adapters/openclaw/src/contract/bus_access.ts``) reads in
``smf_assurance/adapters/openclaw/test/vectors.test.ts``: the same files give the same
reason codes on both sides. Also: no error names a byte of the seed.

Does not prove that the server enforces anything (tests/bus/test_bus_permissions.py,
tests/runtimes/test_hermes_bus_auth.py, tests/runtimes/test_openclaw_bus_auth.py).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from smf_assurance.subjects.bus_access import CredentialFileError, inbox_prefix, read_credential
from smf_assurance.subjects.names import SubjectError

VECTORS = json.loads((Path(__file__).parents[1] / "vectors" / "bus_access.json").read_text())


@pytest.mark.parametrize("row", VECTORS["inbox_prefix"], ids=lambda r: r["name"])
def test_inbox_prefix_vectors(row: dict[str, Any]) -> None:
    if row.get("error"):
        with pytest.raises(SubjectError):
            inbox_prefix(row["principal"])
    else:
        assert inbox_prefix(row["principal"]) == row["prefix"]


def seed_file(tmp_path: Path, row: dict[str, Any]) -> Path:
    path = tmp_path / "seed.nkey"
    kind = row.get("kind")
    if kind == "missing":
        return path
    if kind == "directory":
        path.mkdir()
        return path
    path.write_bytes(row["content"].encode("ascii"))
    path.chmod(row["mode"])
    return path


@pytest.mark.parametrize("row", VECTORS["seed_files"], ids=lambda r: r["name"])
def test_seed_file_vectors(tmp_path: Path, row: dict[str, Any]) -> None:
    path = seed_file(tmp_path, row)
    if row["expect"] == "ok":
        credential = read_credential("hermes-runtime", path)
        assert credential.seed_file == path
        assert credential.connect_options()["inbox_prefix"] == "_INBOX.hermes-runtime"
        return
    with pytest.raises(CredentialFileError) as caught:
        read_credential("hermes-runtime", path)
    assert caught.value.reason_code == row["expect"]
    assert "SUAAAA" not in str(caught.value)


def test_a_principal_that_is_not_one_token_is_refused(tmp_path: Path) -> None:
    row = VECTORS["seed_files"][0]
    with pytest.raises(CredentialFileError) as caught:
        read_credential("a.b", seed_file(tmp_path, row))
    assert caught.value.reason_code == "smf_bus_credential_invalid"


def test_the_credential_holds_the_path_never_the_seed(tmp_path: Path) -> None:
    credential = read_credential("rt", seed_file(tmp_path, VECTORS["seed_files"][0]))
    assert "SUAAAA" not in repr(credential)
    assert "SUAAAA" not in json.dumps(credential.connect_options())
