"""What a restarted gate re-checks in the release it persisted.

ARCHITECTURE.md, "Governed releases": every consumer verifies signature,
digests and sequence before use, persisted across restarts. A restart loads
the last accepted release from the state file
(``smf_assurance.pipeline.stores.release_state``) and re-verifies it
(``ReleaseTrust.verify_stored``) before the gate uses it. The state file is
on disk, so these tests attack it the way someone with write access to it
could, through SQL on the real file, and restart a real
:class:`~smf_assurance.pipeline.followers.releases.ReleaseWatcher` on it:

- an artifact swapped in the stored bundle under its intact signed manifest
  (TUF 5.5.2/5.6.2, mix-and-match), with a replacement that would otherwise
  load cleanly (same release id, sequence and recipe);
- another validly signed release with the same sequence put in place of the
  accepted one (the persisted state names one release per sequence);
- a persisted sequence that no longer matches the stored bundle.

Each is refused with its reason code, the gate denies everything
(``no_verified_release``), and the rollback floor stays the accepted release.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from smf_assurance.core.release_trust import NoVerifiedReleaseError
from smf_assurance.pipeline.followers.releases import ReleaseWatcher
from smf_assurance.subjects.release import ReleaseBundle
from tests.support.builders import make_policy, make_release, make_rule, write_corpus
from tests.support.release_helpers import (
    HOUR,
    SIGNERS,
    T0,
    build,
    data,
    registry,
    root_of,
    small_corpus,
    swap,
)

ROOT = root_of(SIGNERS, 2)


def clock() -> int:
    return T0 + HOUR


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return small_corpus(tmp_path_factory.mktemp("corpus") / "c")


@pytest.fixture(scope="module")
def v1(corpus: Path) -> ReleaseBundle:
    return build(corpus)


@pytest.fixture(scope="module")
def lookalike(tmp_path_factory: pytest.TempPathFactory) -> ReleaseBundle:
    """Same release id, sequence and recipe as ``v1``, but its hold rule matches
    documents NOT under legal hold, and its registry names another runtime. Every
    artifact of it decodes, compiles and names ``v1``'s release: only the digests
    tell them apart."""
    other = write_corpus(
        tmp_path_factory.mktemp("corpus") / "o",
        [
            make_rule("hold", {"eq": {"fact": "workflow.legal_hold", "value": False}}),
            make_rule("read", statement="Another statement."),
        ],
        [
            make_policy("floor.hold", "hold", layer="smf_safety_floor", reason_code="held"),
            make_policy("customer.read", "read", layer="customer", effect="allow"),
        ],
        make_release("rel-test"),
    )
    return build(other, registry_bytes=registry(runtime_id="rt-other"))


async def accept(state: Path, bundle: ReleaseBundle) -> str:
    """Accept ``bundle`` through a real watcher; returns its manifest hash."""
    watcher = await ReleaseWatcher.open(ROOT, state, clock)
    try:
        await watcher.offer("test:accept", data(bundle))
        assert watcher.active is not None
        return watcher.active.manifest_hash
    finally:
        await watcher.close()


def tamper(state: Path, **columns: Any) -> None:
    """Write to the persisted release row directly, as a local attacker could."""
    assignments = ", ".join(f"{name} = ?" for name in columns)
    with sqlite3.connect(state) as conn:
        conn.execute(
            f"UPDATE release_state SET {assignments} WHERE id = 1",
            tuple(columns.values()),
        )


async def restart(state: Path) -> tuple[ReleaseWatcher, str | None]:
    """A restarted watcher after loading the stored release; the reason code of
    the stored release's refusal, if it was refused."""
    watcher = await ReleaseWatcher.open(ROOT, state, clock)
    await watcher.load_stored()
    refused = [r.reason_code for r in watcher.refusals if r.origin == "stored"]
    return watcher, refused[-1] if refused else None


async def assert_refused_on_restart(state: Path, accepted: str) -> None:
    """A restart on ``state`` refuses the stored release as not the accepted one,
    uses no release at all, and keeps the accepted release as its rollback floor."""
    watcher, refused = await restart(state)
    try:
        assert refused == "release_digest_mismatch"
        assert watcher.active is None
        with pytest.raises(NoVerifiedReleaseError):
            watcher.current()
        assert watcher.last_accepted is not None
        assert watcher.last_accepted.manifest_hash == accepted
    finally:
        await watcher.close()


async def test_an_untouched_stored_release_loads_on_restart(
    tmp_path: Path, v1: ReleaseBundle
) -> None:
    state = tmp_path / "release-state.db"
    accepted = await accept(state, v1)
    watcher, refused = await restart(state)
    try:
        assert refused is None
        assert watcher.active is not None
        assert watcher.active.manifest_hash == accepted
        assert watcher.current().release_id == "rel-test"
    finally:
        await watcher.close()


@pytest.mark.parametrize("artifact", ["enforcement", "analysis", "registry"])
async def test_an_artifact_swapped_under_the_intact_signed_manifest_is_refused_on_restart(
    tmp_path: Path, artifact: str, v1: ReleaseBundle, lookalike: ReleaseBundle
) -> None:
    state = tmp_path / "release-state.db"
    accepted = await accept(state, v1)
    assert getattr(lookalike, artifact) != getattr(v1, artifact)
    mixed = swap(v1, **{artifact: getattr(lookalike, artifact)})
    tamper(state, bundle=data(mixed))
    await assert_refused_on_restart(state, accepted)


async def test_another_signed_release_with_the_same_sequence_is_refused_on_restart(
    tmp_path: Path, corpus: Path, v1: ReleaseBundle
) -> None:
    state = tmp_path / "release-state.db"
    accepted = await accept(state, v1)
    twin = build(corpus, now_ms=T0 + 99)  # sequence 1 again, validly signed, another hash
    tamper(state, bundle=data(twin))
    await assert_refused_on_restart(state, accepted)


async def test_a_persisted_sequence_that_is_not_the_stored_releases_is_refused_on_restart(
    tmp_path: Path, v1: ReleaseBundle
) -> None:
    """The state row and the bundle it keeps must describe one release; a row moved
    to another sequence (the triggers let a sequence go up) no longer does."""
    state = tmp_path / "release-state.db"
    accepted = await accept(state, v1)
    tamper(state, sequence=7)
    await assert_refused_on_restart(state, accepted)
