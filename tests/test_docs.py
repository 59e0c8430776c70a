"""The documentation is true: every command block in README.md and docs/*.md runs as written,
and every environment variable the code reads is documented.

The blocks are read from the Markdown when the tests run, so an edit to the docs is tested (no
command is copied here).  Each fenced block whose info string is ``bash``, ``sh``, ``shell`` or
``python`` runs, in document order, in a temporary directory per document.  That directory holds
symlinks to the repository's top-level entries (``Makefile``, ``.venv``, ``slurm/``, ...), so
relative paths in the docs work and whatever the commands write lands in the temporary
directory.  Shell blocks run under ``bash -e -o pipefail`` with this virtualenv activated (its
``bin/`` first on ``PATH``: ``python``, ``mpiexec``, ``hpcbsp`` and ``hpcbsp-cost`` are the
venv's, and ``mpiexec -n N`` runs with N as written: oversubscribed on a small machine).  A
Python block runs as ``python BLOCK.py``.  Every block has a timeout (``MPIEXEC_TIMEOUT`` too),
and a block fails the test when it exits non-zero or runs out of time.

A block that is not to run as such says so in an HTML comment on the line(s) above it::

    <!-- doc-test: no-run (REASON) -->   not run; the reason is required
    <!-- doc-test: file NAME -->          written to NAME in the directory, not run by itself;
                                          a later block of the same document must name NAME
    <!-- doc-test: mpiexec -n N -->       a Python block run as ``mpiexec -n N python BLOCK.py``
    <!-- doc-test: slurm -->              needs a responding Slurm: run only where one answers
                                          (``.ci/run`` starts one), otherwise skipped with why
    <!-- doc-test: timeout S -->          seconds this block may take (default 180)

Blocks with another info string (``text`` for program output or a file tree, ``json``, ``c``
for a C source a documented command builds, ...) are not commands; a block without an info
string fails :func:`test_every_block_is_run_or_marked`,
which also checks every marker.  Inline commands in the prose are not run.
"""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

# Launcher and MPI variables of an enclosing job or mpiexec must not leak into the blocks; why
from cluster_helpers import skip_or_fail
from mpi_helpers import clean_env, mpich_only
from test_slurm_jobs import _slurm_unavailable

REPO = Path(__file__).resolve().parents[1]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
VENV_BIN = Path(sys.executable).parent

RUNNABLE = {"bash": "shell", "sh": "shell", "shell": "shell", "python": "python"}
NOT_COMMANDS = {"text", "json", "csv", "toml", "yaml", "ini", "diff", "c"}  # output, files, C source
DEFAULT_TIMEOUT = 180.0


_MARKER = re.compile(r"^\s*<!--\s*doc-test:\s*(.*?)\s*-->\s*$")
_FENCE = re.compile(r"^( *)(`{3,})(.*)$")


@dataclass
class Block:
    doc: Path
    line: int  # 1-based line of the opening fence
    lang: str
    text: str
    markers: list[str] = field(default_factory=list)

    @property
    def where(self) -> str:
        return f"{self.doc.relative_to(REPO)}:{self.line}"

    def marker(self, key: str) -> str | None:
        """The argument of the marker ``key`` ("" when it has none), or None without one."""
        for m in self.markers:
            if m == key or m.startswith(key + " "):
                return m[len(key):].strip()
        return None

    @property
    def runs(self) -> bool:
        return self.lang in RUNNABLE and self.marker("no-run") is None and self.marker("file") is None


def parse(doc: Path) -> list[Block]:
    """The fenced code blocks of ``doc``, with the doc-test markers just above each."""
    lines = doc.read_text().splitlines()
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, ticks, info = len(m.group(1)), m.group(2), m.group(3).strip()
        markers: list[str] = []
        j = i - 1
        while j >= 0 and (not lines[j].strip() or _MARKER.match(lines[j])):
            mm = _MARKER.match(lines[j])
            if mm:
                markers.insert(0, mm.group(1))
            j -= 1
        body: list[str] = []
        k = i + 1
        while k < len(lines) and not re.match(rf"^ *{ticks}`*\s*$", lines[k]):
            line = lines[k]
            body.append(line[indent:] if line[:indent].strip() == "" else line)
            k += 1
        lang = info.split()[0] if info else ""
        blocks.append(Block(doc, i + 1, lang, "\n".join(body) + "\n", markers))
        i = k + 1
    return blocks


ALL_BLOCKS = [b for doc in DOCS for b in parse(doc)]


def _marker_problems(block: Block) -> list[str]:
    problems = []
    for m in block.markers:
        key = m.split()[0] if m.split() else ""
        arg = m[len(key):].strip()
        if key == "no-run":
            if not re.fullmatch(r"\(.+\)", arg):
                problems.append(f"{block.where}: `no-run` needs a reason in parentheses: {m!r}")
        elif key == "file":
            if not re.fullmatch(r"[\w.-]+", arg):
                problems.append(f"{block.where}: `file` needs a plain file name: {m!r}")
        elif key == "mpiexec":
            if not re.fullmatch(r"-n [1-9]\d*", arg) or block.lang != "python":
                problems.append(f"{block.where}: `mpiexec -n N` is for Python blocks: {m!r}")
        elif key == "slurm":
            if arg:
                problems.append(f"{block.where}: `slurm` takes no argument: {m!r}")
        elif key == "timeout":
            if not re.fullmatch(r"[1-9]\d*", arg):
                problems.append(f"{block.where}: `timeout` needs whole seconds: {m!r}")
        else:
            problems.append(f"{block.where}: unknown doc-test marker {m!r} (see tests/test_docs.py)")
    if block.markers and block.lang not in RUNNABLE:
        problems.append(f"{block.where}: a doc-test marker on a ```{block.lang} block, which never runs")
    return problems


def test_every_block_is_run_or_marked():
    """Every fenced block is a command that runs, a block marked as not run (with a reason), or
    plainly not a command (```text and the like); every marker is understood."""
    problems: list[str] = []
    for block in ALL_BLOCKS:
        if not block.lang:
            problems.append(f"{block.where}: a block without an info string: say ```bash, ```python, "
                            "or ```text for output and file trees")
        elif block.lang not in RUNNABLE and block.lang not in NOT_COMMANDS:
            problems.append(f"{block.where}: info string {block.lang!r} is neither a command "
                            f"({', '.join(RUNNABLE)}) nor known as output or a listing ({', '.join(sorted(NOT_COMMANDS))})")
        problems += _marker_problems(block)
        name = block.marker("file")
        if name:
            later = [b for b in ALL_BLOCKS if b.doc == block.doc and b.line > block.line and b.runs]
            if not any(re.search(rf"(?<![\w.-]){re.escape(name)}(?![\w-])", b.text) for b in later):
                problems.append(f"{block.where}: written to {name}, but no later block of "
                                f"{block.doc.name} that runs names it, so it never runs")
    assert not problems, "\n".join(problems)
    assert sum(b.runs for b in ALL_BLOCKS) > 0


NOTES = sorted((REPO / "docs" / "notes").glob("*.md"))


def test_journal_blocks_are_marked_not_run():
    """The engineers' notes (docs/notes/, not user docs) are not run: their commands are past
    measurements (docs/notes/README.md says why).  So that none of them looks tested, every
    command block there is marked ``no-run (journal: ...)``, and every marker is well formed."""
    assert NOTES, "docs/notes/ holds no notes"
    problems: list[str] = []
    for doc in NOTES:
        for block in parse(doc):
            if not block.lang:
                problems.append(f"{block.where}: a block without an info string")
            problems += _marker_problems(block)
            reason = block.marker("no-run")
            if block.lang in RUNNABLE and not (reason or "").startswith("(journal:"):
                problems.append(f"{block.where}: a command block of the journal is not run by the doc "
                                "test; mark it <!-- doc-test: no-run (journal: a past measurement) -->")
    assert not problems, "\n".join(problems)


# ---------------------------------------------------------------------------------------- running

def _workdir(tmp_path: Path) -> Path:
    """A directory that looks like the repository (symlinks to its top-level entries, ``.venv``
    to the virtualenv running these tests) but keeps what the commands write."""
    work = tmp_path / "work"
    work.mkdir()
    for entry in REPO.iterdir():
        if entry.name not in (".git", ".venv", "runs", "out"):
            (work / entry.name).symlink_to(entry)
    (work / ".venv").symlink_to(VENV_BIN.parent)
    return work


def _make_would_reinstall(work: Path) -> bool:
    """True when ``make`` in ``work`` would reinstall hpcbsp (its stamp is older than
    pyproject.toml, setup.py or kernels/): that would install the temporary directory."""
    proc = subprocess.run(["make", "-q", ".venv/.hpcbsp-installed"], cwd=work, capture_output=True,
                          stdin=subprocess.DEVNULL, timeout=60)
    return proc.returncode != 0


def _env(timeout: float) -> dict[str, str]:
    env = clean_env(slurm=True, transport=True)
    env["PATH"] = f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}"  # the venv, activated
    env["VIRTUAL_ENV"] = str(VENV_BIN.parent)
    env.pop("PYTHONHOME", None)
    env["MPIEXEC_TIMEOUT"] = str(int(timeout))
    env["PYTHONUNBUFFERED"] = "1"
    return env


def _run(block: Block, work: Path) -> tuple[int | None, str, float]:
    """Run one block in ``work``: (status or None on timeout, output, seconds)."""
    timeout = float(block.marker("timeout") or DEFAULT_TIMEOUT)
    if RUNNABLE[block.lang] == "shell" and re.search(r"(?m)^\s*make\b", block.text) and _make_would_reinstall(work):
        return 2, ("make would reinstall hpcbsp into the virtualenv from the test's temporary "
                   "directory: run `make install` in the repository first"), 0.0
    if RUNNABLE[block.lang] == "shell":
        cmd = ["bash", "--noprofile", "--norc", "-e", "-o", "pipefail", "-c", block.text]
    else:
        script = work / f".doc-block-{block.doc.stem}-{block.line}.py"
        script.write_text(block.text)
        ranks = block.marker("mpiexec")
        cmd = [str(VENV_BIN / "python"), script.name]
        if ranks:
            cmd = [str(VENV_BIN / "mpiexec"), *ranks.split()] + cmd
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=work, env=_env(timeout), stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
        status: int | None = proc.returncode
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # the block's whole process group: mpiexec and ranks
        out, _ = proc.communicate()
        status = None
    return status, out, time.monotonic() - t0


def _run_blocks(blocks: list[Block], tmp_path: Path) -> None:
    """Run ``blocks`` in order (``file`` blocks are written as they come) and fail with every
    block that failed, its command and the end of its output."""
    work = _workdir(tmp_path)
    failures, ran = [], []
    for block in blocks:
        name = block.marker("file")
        if name:
            (work / name).write_text(block.text)
        if not block.runs:
            continue
        status, out, seconds = _run(block, work)
        ran.append(block)
        print(f"{block.where}: status {status} in {seconds:.1f} s")
        if status != 0:
            what = f"timed out after {seconds:.0f} s" if status is None else f"exited with status {status}"
            tail = "\n".join(out.splitlines()[-25:])
            failures.append(f"--- {block.where} {what}:\n{block.text}--- output (end):\n{tail}")
    assert not failures, "\n".join(failures)
    assert ran == [b for b in blocks if b.runs], "every block that is not marked must have run"


def _doc_id(doc: Path) -> str:
    return str(doc.relative_to(REPO))


@pytest.mark.parametrize("doc", DOCS, ids=_doc_id)
def test_doc_blocks_run_as_written(doc: Path, tmp_path: Path):
    blocks = [b for b in ALL_BLOCKS if b.doc == doc and b.marker("slurm") is None]
    if not any(b.runs for b in blocks):
        pytest.skip(f"{_doc_id(doc)} has no block that runs outside Slurm (its blocks, if any, are "
                    "marked no-run, file or slurm, or are not commands)")
    _run_blocks(blocks, tmp_path)


_SLURM_DOCS = [doc for doc in DOCS if any(b.marker("slurm") is not None and b.runs for b in ALL_BLOCKS
                                          if b.doc == doc)]


@pytest.mark.slurm
@mpich_only("the Slurm blocks launch with srun --mpi=pmi2 and hydra's options on the emulated cluster")
@pytest.mark.parametrize("doc", _SLURM_DOCS, ids=_doc_id)
def test_doc_slurm_blocks_run_as_written(doc: Path, tmp_path: Path):
    skip_or_fail(_slurm_unavailable())  # asked here, not at import: collecting must not wait on Slurm
    # The document's `file` blocks too, so that the Slurm blocks find the files they name.
    _run_blocks([b for b in ALL_BLOCKS if b.doc == doc and (b.marker("slurm") is not None or b.marker("file"))],
                tmp_path)


def test_the_python_names_the_docs_use_exist():
    """Every ``hpcbsp.NAME`` the README and docs/*.md show in code is importable as written:
    an attribute of the package (``hpcbsp.Block``, ``hpcbsp.run``) or a module
    (``hpcbsp.apps.heat``).  Oracle: importlib, on the names read from the Markdown."""
    import importlib
    import types

    import hpcbsp

    placeholders = {".x"}  # docs/architecture.md: "as any `import hpcbsp.x` does"
    missing = []
    for doc in DOCS:
        names = set(re.findall(r"\bhpcbsp((?:\.[A-Za-z_]\w*)+)", "\n".join(
            re.findall(r"`([^`\n]+)`", doc.read_text()))))
        for dotted in sorted(names - placeholders):
            parts = dotted.lstrip(".").split(".")
            obj: object = hpcbsp
            for i, part in enumerate(parts):
                if part.isupper():  # a placeholder: hpcbsp.apps.NAME
                    break
                if hasattr(obj, part):
                    obj = getattr(obj, part)
                    continue
                try:
                    obj = importlib.import_module("hpcbsp." + ".".join(parts[: i + 1]))
                except ImportError:
                    if isinstance(obj, types.ModuleType):  # neither a name nor a module of it
                        missing.append(f"{_doc_id(doc)}: hpcbsp{dotted}")
                    break
    assert not missing, "names the docs show that hpcbsp does not have:\n" + "\n".join(missing)


# ------------------------------------------------------------------------ environment variables

_PY_READS = [
    re.compile(r"environ(?:\.get)?\(\s*[\"']([A-Za-z_][A-Za-z0-9_]*)[\"']"),
    re.compile(r"environ\[\s*[\"']([A-Za-z_][A-Za-z0-9_]*)[\"']"),
    re.compile(r"getenv\(\s*[\"']([A-Za-z_][A-Za-z0-9_]*)[\"']"),
    re.compile(r"[\"']([A-Za-z_][A-Za-z0-9_]*)[\"']\s+(?:not\s+)?in\s+(?:os\.)?environ\b"),
    # names kept in constants or tuples and read through a variable (launch.py, farm/timings.py)
    re.compile(r"[\"']((?:HPCBSP|SLURM|PMI|PMIX|OMPI|HYDRA|MPIEXEC|NUMBA)_[A-Z0-9_]*[A-Z0-9])[\"']"),
]
#: Set by bash itself, not read from the environment.
_SHELL_OWN = {"PWD", "OLDPWD", "RANDOM", "SECONDS", "LINENO", "BASH_SOURCE", "BASHPID", "UID", "EUID",
              "HOSTNAME", "IFS", "OPTARG", "OPTIND", "PPID"}


def _python_reads() -> dict[str, str]:
    found: dict[str, str] = {}
    for path in sorted((REPO / "hpcbsp").rglob("*.py")):
        text = path.read_text()
        for pattern in _PY_READS:
            for name in pattern.findall(text):
                found.setdefault(name, str(path.relative_to(REPO)))
    return found


def _shell_reads(path: Path) -> set[str]:
    """Upper-case variables a shell script reads from its environment: used but never assigned
    in the script, or used with a default (``${NAME:-default}``)."""
    code = "\n".join(re.sub(r"(^|\s)#.*$", "", line) for line in path.read_text().splitlines())
    # (names start upper-case; MPI libraries' own may go on in lower case: OMPI_MCA_pml)
    used = set(re.findall(r"\$\{?([A-Z][A-Za-z0-9_]*)", code))
    assigned = set(re.findall(r"(?m)^\s*(?:readonly\s+|local\s+|export\s+|declare\s+(?:-\w+\s+)*)?"
                              r"([A-Z][A-Za-z0-9_]*)=", code))
    assigned |= set(re.findall(r"\bfor\s+([A-Z][A-Za-z0-9_]*)\s+in\b", code))
    defaulted = set(re.findall(r"\$\{([A-Z][A-Za-z0-9_]*):?[-=?]", code))
    return ((used - assigned) | defaulted) - _SHELL_OWN


def _code_reads() -> dict[str, str]:
    """Every environment variable read by hpcbsp/, slurm/ and the Makefile, with one reader."""
    found = _python_reads()
    for path in sorted((REPO / "slurm").iterdir()):
        if path.suffix in (".sh", ".sbatch"):
            for name in _shell_reads(path):
                found.setdefault(name, str(path.relative_to(REPO)))
    makefile = (REPO / "Makefile").read_text()
    for name in re.findall(r"(?m)^(?:export\s+)?([A-Z][A-Z0-9_]*)\s*\?=", makefile):
        found.setdefault(name, "Makefile")
    return found


def _documented() -> set[str]:
    names: set[str] = set()
    for line in (REPO / "docs" / "environment.md").read_text().splitlines():
        cells = line.split("|")
        if line.startswith("|") and len(cells) > 2:
            names |= set(re.findall(r"`([A-Z][A-Za-z0-9_]+)`", cells[1]))
    return names


def test_every_environment_variable_read_is_documented():
    """docs/environment.md lists exactly the variables that hpcbsp/, slurm/ and the Makefile
    read (found in the code by the patterns above: os.environ/getenv calls, launcher and hpcbsp
    names in string constants, shell variables used but not assigned or used with a default,
    ``?=`` variables of the Makefile)."""
    reads = _code_reads()
    documented = _documented()
    missing = sorted(set(reads) - documented)
    assert not missing, "read by the code but not in docs/environment.md: " + ", ".join(
        f"{name} ({reads[name]})" for name in missing)
    stale = sorted(documented - set(reads))
    assert not stale, "in docs/environment.md but read nowhere: " + ", ".join(stale)
    # The finder itself, on names it must see (one of each kind of reader).
    assert {"HPCBSP_SYNC_TIMEOUT", "PMI_RANK", "HPCBSP_VENV", "TMPDIR", "VENV"} <= set(reads)
    assert "CONF" not in reads and "PWD" not in reads  # assigned in local-cluster.sh; bash's own


def test_environment_doc_is_linked_from_the_readme():
    assert "docs/environment.md" in (REPO / "README.md").read_text()
