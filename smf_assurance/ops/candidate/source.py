"""The commit a candidate is built from: clean, named by SHA and tree, cloned fresh.

Issue 24, "``candidate build``: refuses a dirty tree or an untracked file that
would ship; records the commit SHA and tree hash; runs the suite from a clean
clone of that commit". A green suite in a dirty working tree proves nothing
about any commit, so the check counts every modified, staged, deleted and
untracked-not-ignored file, and the suite never runs in the working tree: it
runs in a ``git clone`` checked out at the SHA.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Final

import msgspec

GIT_TIMEOUT_S: Final = 120.0
"""Bounds a hung git (a lock, a network remote); local commands end long before."""

_HEX40: Final = re.compile(r"^[0-9a-f]{40}\Z")


class SourceError(Exception):
    """The repository cannot name one clean commit; the message says why in one line."""


class DirtyTreeError(SourceError):
    """The working tree differs from its commit: what would ship is not what is named."""

    def __init__(self, files: tuple[str, ...]) -> None:
        shown = ", ".join(files[:10]) + (f" and {len(files) - 10} more" if len(files) > 10 else "")
        super().__init__(f"the working tree is not clean: {shown}")
        self.files = files


class Commit(msgspec.Struct, frozen=True):
    """A commit by its SHA and the hash of its tree (``git rev-parse HEAD^{tree}``)."""

    sha: str
    tree: str


def git(repo: Path, *args: str) -> str:
    """Run git in ``repo`` and return its stdout; any failure is a :class:`SourceError`."""
    try:
        done = subprocess.run(
            ["git", "-C", str(repo), *args],
            capture_output=True,
            text=True,
            timeout=GIT_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SourceError(f"git {args[0]} failed: {type(exc).__name__}") from exc
    if done.returncode != 0:
        lines = done.stderr.strip().splitlines()
        raise SourceError(f"git {args[0]} failed: {lines[0] if lines else done.returncode}")
    return done.stdout


def changed_files(repo: Path) -> tuple[str, ...]:
    """Every path that differs from HEAD: modified, staged, deleted, renamed, and
    untracked unless ignored (``--untracked-files=all`` lists each file, not its folder)."""
    out = git(repo, "status", "--porcelain=v1", "-z", "--untracked-files=all")
    entries = out.split("\0")
    files: list[str] = []
    skip = False
    for entry in entries:
        if skip:
            skip = False
            continue
        if not entry:
            continue
        files.append(entry[3:])
        # A rename or copy is followed by its source path, which is not a second change.
        skip = entry[0] in "RC" or entry[1] in "RC"
    return tuple(sorted(set(files)))


def head_commit(repo: Path) -> Commit:
    """HEAD's SHA and tree, after refusing a working tree that differs from it."""
    files = changed_files(repo)
    if files:
        raise DirtyTreeError(files)
    sha = git(repo, "rev-parse", "--verify", "HEAD^{commit}").strip()
    tree = git(repo, "rev-parse", "--verify", "HEAD^{tree}").strip()
    if not (_HEX40.match(sha) and _HEX40.match(tree)):
        raise SourceError(f"git named HEAD {sha!r} with tree {tree!r}: not SHA-1 hex")
    return Commit(sha=sha, tree=tree)


def clean_commit(repo: Path) -> Commit | None:
    """HEAD when the working tree is clean, else None: what a test run may claim to
    have run against (the JUnit properties, :mod:`smf_assurance.ops.candidate.junit`)."""
    try:
        return head_commit(repo)
    except SourceError:
        return None


def clone_at(repo: Path, commit: Commit, into: Path) -> Path:
    """A fresh clone of ``repo`` checked out at ``commit``, whose tree is checked to be
    the recorded one: nothing of the working tree (ignored files included) comes along."""
    git(repo, "clone", "--quiet", "--no-checkout", "--", str(repo.resolve()), str(into))
    git(into, "-c", "advice.detachedHead=false", "checkout", "--quiet", commit.sha)
    tree = git(into, "rev-parse", "HEAD^{tree}").strip()
    if tree != commit.tree:
        raise SourceError(f"the clone's tree is {tree}, not {commit.tree}")
    return into
