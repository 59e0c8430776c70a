"""Which copy of hpcbsp a process runs: its directory and, in a git checkout, its commit.

A benchmark prints it first, so that a before/after comparison shows which tree each run
measured.  (``python -m`` puts the current directory ahead of ``PYTHONPATH`` on ``sys.path``:
``PYTHONPATH=../before python -m hpcbsp.bench sync`` run in the repository measures the
repository's tree, not ``../before``; run each tree from its own directory.)

The commit is read from the checkout's git files (``HEAD``, loose and packed refs, a worktree's
``gitdir``), without starting ``git``: a benchmark may run under MPI, where forking a process is
best avoided.  None where the package is not in a git checkout (an installed wheel).
"""
from __future__ import annotations

import os

__all__ = ["commit_of", "describe", "package_root"]


def package_root() -> str:
    """The directory that holds the ``hpcbsp`` package this process imported (this module's)."""
    return os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


def commit_of(root: str) -> str | None:
    """The commit checked out at ``root`` (12 hex digits), or None if ``root`` is not a git
    checkout or its files cannot be read."""
    dotgit = os.path.join(root, ".git")
    if os.path.isdir(dotgit):
        gitdir = dotgit
    else:  # a worktree's .git file: "gitdir: PATH"
        text = _read(dotgit)
        if not text or not text.startswith("gitdir:"):
            return None
        gitdir = os.path.join(root, text.split(":", 1)[1].strip())
    head = _read(os.path.join(gitdir, "HEAD"))
    if not head:
        return None
    if not head.startswith("ref:"):
        return head[:12]  # a detached HEAD
    ref = head.split(":", 1)[1].strip()
    common = _read(os.path.join(gitdir, "commondir"))
    bases = [gitdir] + ([os.path.join(gitdir, common)] if common else [])
    for base in bases:
        loose = _read(os.path.join(base, ref))
        if loose:
            return loose[:12]
    for base in bases:
        for line in (_read(os.path.join(base, "packed-refs")) or "").splitlines():
            sha, _, name = line.partition(" ")
            if name == ref:
                return sha[:12]
    return None


def describe() -> str:
    """``hpcbsp from DIR (commit C)``: the copy of hpcbsp this process runs."""
    root = package_root()
    commit = commit_of(root)
    return f"hpcbsp from {root}" + (f" (commit {commit})" if commit else "")
