"""The commit a candidate is built from: clean, named by SHA and tree, cloned fresh.

``candidate build`` refuses a dirty tree or an untracked file that would ship,
records the commit SHA and tree hash, and runs the suite from a clean clone of
that commit. A green suite in a dirty working tree proves nothing
about any commit, so every modified, staged, deleted, renamed and
untracked-not-ignored file refuses the build, and so does any tracked file marked
``assume-unchanged`` or ``skip-worktree`` (git would not compare it, so the tree
could differ while status says clean); the suite never runs in the
working tree: it runs in a clone checked out at the SHA. git is asked through
:mod:`smf_tools.candidate.gitrepo`, the one place the candidate asks it.
"""

from __future__ import annotations

from pathlib import Path

import msgspec

from smf_tools.candidate.gitrepo import (
    SHA,
    GitError,
    clone_commit,
    commit_of,
    dirty_files,
    hidden_files,
    tree_of,
)


class SourceError(Exception):
    """The repository cannot name one clean commit; the message says why in one line."""


class DirtyTreeError(SourceError):
    """The working tree differs from its commit: what would ship is not what is named."""

    def __init__(self, files: tuple[str, ...]) -> None:
        shown = ", ".join(files[:10]) + (f" and {len(files) - 10} more" if len(files) > 10 else "")
        super().__init__(f"the working tree is not clean: {shown}")
        self.files = files


class HiddenChangesError(SourceError):
    """Tracked files git is told not to compare: the tree may differ from its commit
    while ``git status`` says it is clean, so it is refused as a dirty one is."""

    def __init__(self, files: tuple[str, ...]) -> None:
        shown = ", ".join(files[:10]) + (f" and {len(files) - 10} more" if len(files) > 10 else "")
        super().__init__(
            f"the working tree hides changes: {len(files)} tracked file(s) marked "
            f"assume-unchanged or skip-worktree: {shown}"
        )
        self.files = files


class Commit(msgspec.Struct, frozen=True):
    """A commit by its SHA and the hash of its tree (``git rev-parse HEAD^{tree}``)."""

    sha: str
    tree: str


def head_commit(repo: Path) -> Commit:
    """HEAD's SHA and tree, after refusing a working tree that differs from it."""
    try:
        files = tuple(dirty_files(repo))
        if files:
            raise DirtyTreeError(files)
        hidden = tuple(hidden_files(repo))
        if hidden:
            raise HiddenChangesError(hidden)
        sha, tree = commit_of(repo, "HEAD"), tree_of(repo, "HEAD")
    except GitError as exc:
        raise SourceError(str(exc)) from exc
    if not (SHA.match(sha) and SHA.match(tree)):
        raise SourceError(f"git named HEAD {sha!r} with tree {tree!r}: not SHA-1 hex")
    return Commit(sha=sha, tree=tree)


def clean_commit(repo: Path) -> Commit | None:
    """HEAD when the working tree is clean, else None: what a test run may claim to
    have run against (the JUnit properties, :mod:`smf_tools.candidate.junit`)."""
    try:
        return head_commit(repo)
    except SourceError:
        return None


def clone_at(repo: Path, commit: Commit, into: Path) -> Path:
    """A fresh clone of ``repo`` at ``commit``, whose tree is checked to be the recorded one."""
    try:
        clone_commit(repo, commit.sha, into)
        tree = tree_of(into, "HEAD")
    except GitError as exc:
        raise SourceError(str(exc)) from exc
    if tree != commit.tree:
        raise SourceError(f"the clone's tree is {tree}, not {commit.tree}")
    return into
