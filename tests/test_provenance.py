"""``hpcbsp.util.provenance``: the commit read from a checkout's git files, against ``git
rev-parse`` (the oracle) on throw-away repositories: a branch, its refs packed, a detached HEAD,
a worktree; and the first line of a benchmark run."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from hpcbsp.util.provenance import commit_of, describe, package_root

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git to make the repositories")


def git(cwd, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True,
                          timeout=30).stdout.strip()


def test_the_commit_is_what_git_says_in_every_kind_of_checkout(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    for i in range(2):
        (repo / "f").write_text(str(i))
        git(repo, "add", "f")
        git(repo, "commit", "-q", "-m", f"c{i}")
    head = git(repo, "rev-parse", "HEAD")
    assert commit_of(str(repo)) == head[:12]                      # a loose ref
    git(repo, "pack-refs", "--all")
    assert commit_of(str(repo)) == head[:12]                      # a packed ref
    first = git(repo, "rev-parse", "HEAD~1")
    git(repo, "worktree", "add", "-q", "--detach", str(tmp_path / "wt"), first)
    assert commit_of(str(tmp_path / "wt")) == first[:12]          # a worktree, detached
    git(repo, "worktree", "add", "-q", "-b", "other", str(tmp_path / "wt2"), first)
    (tmp_path / "wt2" / "f").write_text("x")
    git(tmp_path / "wt2", "commit", "-q", "-am", "on other")
    assert commit_of(str(tmp_path / "wt2")) == git(tmp_path / "wt2", "rev-parse", "HEAD")[:12]
    assert commit_of(str(tmp_path)) is None                        # not a checkout


def test_a_benchmark_says_first_which_copy_of_hpcbsp_it_measures():
    proc = subprocess.run([sys.executable, "-m", "hpcbsp.bench", "sync", "--quick", "--mib", "0.1"],
                          capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    first = proc.stdout.splitlines()[0]
    assert first == f"measuring {describe()}" and package_root() in first, first
