"""The few questions a candidate asks git, answered by git itself.

Reviews bound to the SHA: what a review binds (a commit and its
tree), whether the working tree is that commit and clean, and which files
changed between two commits are read from the repository with ``git``, never
guessed from the file system. Any failure of git is a :class:`GitError`, so a
caller refuses instead of treating an unanswered question as "unchanged".
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Final

SHA: Final = re.compile(r"^[0-9a-f]{40}\Z")
"""A full SHA-1 object name: a review names a commit whole, never abbreviated."""

_TIMEOUT_S: Final = 60.0


class GitError(Exception):
    """git could not answer (not a repository, an unknown commit, git missing)."""


def _git(repo: Path, *args: str) -> str:
    try:
        done = subprocess.run(
            ("git", "-C", str(repo), *args),
            capture_output=True,
            text=True,
            timeout=_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise GitError(f"git {args[0]} did not run: {type(exc).__name__}") from exc
    if done.returncode != 0:
        reason = done.stderr.strip().splitlines()
        raise GitError(f"git {args[0]} failed: {reason[-1] if reason else done.returncode}")
    return done.stdout


def commit_of(repo: Path, rev: str) -> str:
    """The full SHA ``rev`` names, which must be a commit in ``repo``."""
    return _git(repo, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}").strip()


def tree_of(repo: Path, rev: str) -> str:
    """The tree object of commit ``rev``: what the commit's files are, whatever its history."""
    return _git(repo, "rev-parse", "--verify", "--quiet", f"{rev}^{{tree}}").strip()


def dirty_files(repo: Path) -> list[str]:
    """Every modified, staged, renamed or untracked path (ignored files aside): a tree
    that has any is not the commit it sits on. With ``-z`` a rename or copy entry is
    followed by its source path, bare: that path is taken whole, not cut as an entry."""
    out = _git(repo, "status", "--porcelain=v1", "-z", "--untracked-files=all")
    files: set[str] = set()
    source_follows = False
    for entry in filter(None, out.split("\0")):
        if source_follows:
            files.add(entry)
            source_follows = False
            continue
        files.add(entry[3:])
        source_follows = "R" in entry[:2] or "C" in entry[:2]
    return sorted(files)


def hidden_files(repo: Path) -> list[str]:
    """Tracked paths git is told not to compare with the working tree: marked
    ``assume-unchanged`` (a lowercase tag in ``git ls-files -v``) or ``skip-worktree``
    (tag ``S``, ``s`` when both). ``git status`` and ``git diff`` report such a file
    clean whatever its content, so a tree holding one cannot be called its commit."""
    out = _git(repo, "ls-files", "-v", "-z")
    return sorted(
        entry[2:]
        for entry in filter(None, out.split("\0"))
        if entry[0].islower() or entry[0] == "S"
    )


def changed_files(repo: Path, old: str, new: str) -> frozenset[str]:
    """Paths that differ between commits ``old`` and ``new`` (``git diff --name-only``),
    renames counted at both names."""
    out = _git(repo, "diff", "--name-only", "--no-renames", "-z", old, new, "--")
    return frozenset(name for name in out.split("\0") if name)


def show_file(repo: Path, rev: str, path: str) -> str | None:
    """The text of ``path`` at commit ``rev``, or None when the commit has no such file."""
    listed = _git(repo, "ls-tree", "--name-only", "-z", rev, "--", path)
    if path not in listed.split("\0"):
        return None
    return _git(repo, "show", f"{rev}:{path}")


def git_dir_path(repo: Path, name: str) -> Path:
    """Where ``name`` lives inside the repository's git directory: a file kept there is
    out of the working tree, so keeping it does not make the tree dirty."""
    return Path(repo, _git(repo, "rev-parse", "--git-path", name).strip())


def clone_commit(repo: Path, sha: str, into: Path) -> Path:
    """A fresh clone of ``repo`` into ``into`` with ``sha`` checked out: the files of that
    commit and nothing of the working tree, ignored files included."""
    _git(repo, "clone", "--quiet", "--no-checkout", "--", str(repo.resolve()), str(into))
    _git(into, "-c", "advice.detachedHead=false", "checkout", "--quiet", sha)
    return into
