"""Every ``HPCBSP_*`` environment variable: the one place that knows each one.

Each variable is declared once, in :data:`SETTINGS`, with its meaning, its default, the values
it allows, where it is read and (for those the Python package reads) its parser.  The readers
(the runtime, the mailboxes, the farm, the parameter server) get a value through :func:`value`;
``docs/environment.md``'s table is :func:`markdown_table` (``tests/test_settings.py`` holds the
two together).

Semantics:

* A variable that is unset, or set to blanks only, has its default.  A value is stripped of
  surrounding blanks before it is parsed; names and words are case-insensitive (``Yield`` is
  ``yield``).
* :func:`value` reads ``os.environ`` at each call (nothing is cached: a program may change a
  variable between two contexts, as ``python -m hpcbsp.bench sync`` does).
* A bad value raises :class:`SettingError`, whose text is one line: ``environment variable
  NAME='VALUE' is not ALLOWED (WHY): correct it or unset it (docs/environment.md)``.
* :func:`check` parses every ``HPCBSP_*`` variable that is set, before any work (a context's
  start, every command line's parser), and raises for the first bad one in the order of the
  names.  A name that is not declared is no error: :func:`check` returns one warning for it,
  naming the closest declared name (``HPCBSP_SYNC_TIMOUT``: did you mean
  ``HPCBSP_SYNC_TIMEOUT``?); :func:`warn` prints each such warning once per process, on
  rank 0.
* Variables that only the Slurm scripts or the test suite read are declared too (``parse`` is
  None): they are known, so never warned about, and never parsed by the package.
* :func:`shown` lists every ``HPCBSP_*`` variable set with what is wrong with it, if anything
  (invalid, with the reason; unknown, with the closest name), and never raises: ``hpcbsp info``
  shows them there instead of refusing to run.
* The words a choice allows (``HPCBSP_WAIT``, ``HPCBSP_ROUTING``, ...) are the tuples of
  :mod:`hpcbsp.util.choices`, which the code and the command lines read too.
"""
from __future__ import annotations

import difflib
import math
import os
import sys
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from .choices import CONTROL_COLLECTIVES, EXCHANGES, ROUTING_CHOICES, TRANSPORTS, WAIT_MODES, one_of
from .launcher import launcher_rank
from .outputs import OutputError, prepare_output

__all__ = ["PREFIX", "SETTINGS", "Setting", "SettingError", "check", "emulation", "markdown_table",
           "shown", "value", "warn"]

#: The prefix of every variable of hpcbsp's.
PREFIX = "HPCBSP_"
#: Where the user reads about them (named in every error and warning).
DOC = "docs/environment.md"


class SettingError(ValueError):
    """A bad value in an ``HPCBSP_*`` variable; the text is the one line to show."""


@dataclass(frozen=True)
class Setting:
    """One environment variable (see the module docstring)."""

    name: str
    meaning: str                 #: what it does (docs/environment.md's wording)
    default: str                 #: the default, as the docs show it
    allowed: str                 #: the values allowed, as the docs and the error show them
    read_by: str                 #: where it is read (a module, a script, the tests)
    parse: Callable[[str], Any] | None = None  #: stripped, non-empty text -> value (ValueError)
    unset: Any = None            #: the value :func:`value` gives when it is unset

    @property
    def python(self) -> bool:
        """Whether the Python package reads (and so checks) it."""
        return self.parse is not None


# -- parsers: stripped, non-empty text -> value, or ValueError (its text: why, if anything to add)

def _choice(choices: tuple[str, ...]) -> Callable[[str], str]:
    """The parser of one of :mod:`.choices`' lists (any case: ``Yield`` is ``yield``)."""
    def parse(text: str) -> str:
        word = text.lower()
        if word not in choices:
            raise ValueError("")
        return word
    return parse


def _switch(text: str) -> bool:
    if text not in ("0", "1"):
        raise ValueError("")
    return text == "1"


def _seconds(text: str) -> float:
    seconds = float(text)
    if not (math.isfinite(seconds) and seconds > 0):
        raise ValueError("")
    return seconds


def _seconds_at_least(low: float) -> Callable[[str], float]:
    def parse(text: str) -> float:
        seconds = float(text)
        if not (math.isfinite(seconds) and seconds >= low):
            raise ValueError("")
        return seconds
    return parse


def _seconds_or_off(text: str) -> float:
    seconds = float(text)
    if not (math.isfinite(seconds) and (seconds == 0 or seconds >= 0.1)):
        raise ValueError("")
    return seconds


def _integer(low: int, high: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        number = int(text)
        if not low <= number <= high:
            raise ValueError("")
        return number
    return parse


_writable: set[str] = set()  # report paths already checked by this process


def _writable_file(text: str) -> str:
    """A file path that can be written: its missing folders are made and a probe file is written
    there (once per process and path; :mod:`.outputs`)."""
    if text not in _writable:
        try:
            prepare_output(text, "the file")
        except OutputError as exc:
            raise ValueError(exc.reason) from None
        _writable.add(text)
    return text


def emulation(text: str) -> tuple[float | None, float | None] | None:
    """``$HPCBSP_FARM_EMULATE``'s format (also the apps' ``--emulate-compute``): ``measure`` ->
    ``(None, None)``; ``t_map=S[,t_a=S]`` -> ``(t_map, t_a or None)``; ``0``, ``off``, ``no`` ->
    None (no emulation).  Seconds are finite and >= 0.  ValueError names the problem."""
    text = text.strip()
    if text.lower() in ("0", "off", "no"):
        return None
    if text.lower() == "measure":
        return None, None
    expected = f"emulated compute {text!r}: expected 'measure' or 't_map=SECONDS[,t_a=SECONDS]'"
    fields: dict[str, float] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, sep, number = part.partition("=")
        key = key.strip()
        if not sep or key not in ("t_map", "t_a"):
            raise ValueError(expected)
        try:
            fields[key] = float(number)
        except ValueError:
            raise ValueError(f"emulated compute {text!r}: {key} is not a number of seconds") from None
        if not (math.isfinite(fields[key]) and fields[key] >= 0):
            raise ValueError(f"emulated compute {text!r}: {key} must be a finite number of seconds >= 0")
    if "t_map" not in fields:
        raise ValueError(expected)
    return fields["t_map"], fields.get("t_a")


def _emulation(text: str) -> tuple[float | None, float | None] | None:
    try:
        return emulation(text)
    except ValueError:
        raise ValueError("") from None  # the allowed values say it all


# -- the declarations ----------------------------------------------------------------------

_PACKAGE: tuple[Setting, ...] = (
    Setting("HPCBSP_SYNC_TIMEOUT",
            "Default `timeout` (seconds) of every BSP context, as `hpcbsp.BSP(timeout=S)` sets it for "
            "one context: a collective BSP call (`sync`, `coarray`, `allreduce`, ...) that waits longer "
            "for the other ranks raises `SyncTimeout` (a `BSPError`) naming the ranks that never arrived "
            "and their hosts; the same bound holds inside the superstep's data exchange (a peer that "
            "stops there, behind a dead link, is named too); uncaught, it ends the job with one line per "
            "rank. `bsp.sync(label, timeout=S)` sets it for one sync. Give every rank the same value.",
            "no limit (a training world of `hpcbsp.elastic`: 60)", "a positive number of seconds",
            "`runtime/superstep/lifecycle.py`", _seconds),
    Setting("HPCBSP_ABORT_GRACE",
            "Seconds the other ranks have, after one rank failed, to reach a BSP call (where they learn "
            "of the failure and stop cleanly) before the whole job is aborted. Used by the runtime and "
            "by FA-BSP mailboxes.",
            "`10`", "a positive number of seconds", "`runtime/superstep/lifecycle.py`", _seconds, 10.0),
    Setting("HPCBSP_COMPILED_SYNC",
            "`0` runs the control step (an empty `sync`, and every blocking collective's first step) "
            "through mpi4py's Python calls instead of one compiled call to the MPI library's "
            "`MPI_Start`/`MPI_Wait` (see `hpcbsp/runtime/superstep/native.py`). The two drive the same persistent "
            "request, so ranks may differ in it. Read when a context is made.",
            "`1`", "`0` or `1`", "`runtime/superstep/native.py`", _switch, True),
    Setting("HPCBSP_CONTROL_COLLECTIVE",
            "The allreduce of the small record every sync and collective call begins with (the control "
            "step): `persistent` (`MPI_Allreduce_init` once, `MPI_Start` + `MPI_Wait` per step), "
            "`blocking` (one `MPI_Allreduce` per step), or `auto`: the one the running MPI library runs "
            "faster (blocking under Open MPI, persistent under MPICH and Intel MPI; docs/performance.md). "
            "The ranks check that they agree when a context is made (the two kinds never match). "
            "Read when a context is made.",
            "`auto`", one_of(CONTROL_COLLECTIVES), "`runtime/superstep/control.py`",
            _choice(CONTROL_COLLECTIVES), "auto"),
    Setting("HPCBSP_DEATHWATCH",
            "`0` turns off the watcher (one process per job and node) that names a rank which died "
            "without a report (SIGKILL, a segfault, the out-of-memory killer), removes the job's "
            "`/dev/shm` segments after a fault and runs the failure detector; see "
            "`hpcbsp/runtime/failure/nodewatch.py`.",
            "`1`", "`0` or `1`", "`runtime/failure/deathwatch.py`", _switch, True),
    Setting("HPCBSP_HEARTBEAT_TIMEOUT",
            "The failure detector, on without any setting: the watcher of each node "
            "(`hpcbsp/runtime/failure/nodewatch.py`, a process beside the ranks, so a rank that computes for "
            "hours in one superstep is never suspected) ends the job, naming the node and its ranks, "
            "when another node of the job has not been heard from for this many seconds (it died, froze, "
            "or lost its link) or a rank of its own node has been stopped (SIGSTOP) that long. Shorter "
            "finds a lost node sooner; too short gives up a node whose watcher was starved of CPU for "
            "that long (an overloaded node) or, for a stopped rank, a job suspended on purpose. `0` "
            "turns the detector off (the watch still names a rank that died). At least two periods.",
            "`10`", "`0` (off) or a number of seconds >= 0.1", "`runtime/failure/deathwatch.py`",
            _seconds_or_off, 10.0),
    Setting("HPCBSP_HEARTBEAT_PERIOD",
            "Seconds between two heartbeats (a UDP datagram from each node's watcher to every other "
            "node's) and between two looks at the node's ranks. The cost is a few datagrams per second "
            "per node, outside the ranks (`python -m hpcbsp.bench watch` measures it).",
            "`1`", "a number of seconds >= 0.05", "`runtime/failure/deathwatch.py`", _seconds_at_least(0.05), 1.0),
    Setting("HPCBSP_LARGE_PUT_BYTES",
            "Puts of at least this many bytes are received straight into the target array instead of "
            "through a staging buffer (and travel on their own after the headers: in rounds of one "
            "Alltoallv, as messages in a sync with a timeout). Read when a context is made.",
            "`65536`", "an integer from 1 to 2**63 - 1", "`runtime/superstep/outbox.py`",
            _integer(1, 2**63 - 1), 64 * 1024),
    Setting("HPCBSP_MAILBOX_BYTES",
            "Bytes per destination buffer of an FA-BSP mailbox that does not give its own buffer size "
            "(D: the ranks one rank sends to, p with direct routing); a buffer is one MPI message.",
            "16 MiB / D, between 64 KiB and 512 KiB", "an integer from 1 to 2147483647 (2 GiB, one "
            "MPI message)", "`fabsp/engine.py`", _integer(1, (1 << 31) - 1)),
    Setting("HPCBSP_ROUTING",
            "Routing of FA-BSP mailboxes that do not choose one (`bsp.mailbox(..., routing=)`, the "
            "irregular apps' `--routing`): `direct` (a buffer for every other rank), `2d` or `3d` "
            "(records hop through a grid of ranks; about 2 sqrt(p) or 3 cbrt(p) buffers per rank, up to "
            "2 or 3 messages per record), `node` (records for another node go through one rank of "
            "each node: one message per node pair, up to 3 per record), `auto` (direct up to 256 ranks, "
            "2d up to 32,768, 3d beyond). Give every rank the same value. See `hpcbsp/fabsp/routing.py`.",
            "`auto`", one_of(ROUTING_CHOICES), "`fabsp/routing.py`",
            _choice(ROUTING_CHOICES), "auto"),
    Setting("HPCBSP_WAIT",
            "How a rank waits for the others in a collective call, as `hpcbsp.BSP(wait=...)` sets it for "
            "one context: `spin` (busy-poll, lowest latency), `yield` (poll with growing sleeps, gives "
            "the core away), `auto` (yield when a node runs more ranks than it has cores). See "
            "`hpcbsp/runtime/superstep/waiting.py`.",
            "`auto`", one_of(WAIT_MODES), "`runtime/superstep/waiting.py`",
            _choice(WAIT_MODES), "auto"),
    Setting("HPCBSP_ELEMENTS_TRANSPORT",
            "How the packed records of `Coarray.put_elements` reach their ranks: `auto` (where every "
            "rank of a context is on one node and the context has no sync timeout, they are packed into "
            "an MPI shared-memory window in `/dev/shm` and applied by their destinations from there, so "
            "only a header travels; the window, up to 2 x 1.25 x the largest batch of a superstep per "
            "rank, grows when the ranks agree inside a sync and only if `/dev/shm` has room; messages "
            "otherwise), `messages` (always messages). A rank that says `messages`, or a sync given a "
            "timeout, switches it off on every rank. See `hpcbsp/runtime/superstep/arena.py`.",
            "`auto`", one_of(TRANSPORTS), "`runtime/superstep/arena.py`", _choice(TRANSPORTS), "auto"),
    Setting("HPCBSP_PS_TRANSPORT",
            "How the parameter server's weights reach the workers, as `serve(..., transport=)` and "
            "`work(..., transport=)` set it for one run: `auto` (an MPI shared-memory window where the "
            "server and every worker are on one node: each worker copies the weights once, the server "
            "only updates them; messages otherwise), `messages` (the weights as messages in 1 MiB "
            "pieces, also on one node). Ranks that differ get messages. See "
            "`hpcbsp/elastic/transport.py`.",
            "`auto`", one_of(TRANSPORTS), "`elastic/transport.py`", _choice(TRANSPORTS), "auto"),
    Setting("HPCBSP_FARM_REPORT",
            "A file to which a BSF farm program (`hpcbsp.farm`, e.g. `hpcbsp.apps.bsf.jacobi`) appends "
            "its measured timings, one JSON line per run (missing folders are created); checked before "
            "the run, so that an unwritable place costs no work. `hpcbsp-cost calibrate` and "
            "`slurm/sweep-point.sbatch` set it for the runs they start.",
            "unset", "a file that can be written", "`farm/timings.py`",
            _writable_file),
    Setting("HPCBSP_FARM_EXCHANGE",
            "The BSF farm's exchange when the program does not choose one: `linear` (the master talks to "
            "the workers one by one) or `tree` (binomial tree); the apps' `--exchange`.",
            "`linear`", one_of(EXCHANGES), "`farm/skeleton.py`", _choice(EXCHANGES), "linear"),
    Setting("HPCBSP_FARM_EMULATE",
            "Emulated compute for farm programs that do not pass `emulate=`: the workers wait the Map's "
            "measured time instead of computing (a simulation of compute, and every output says so); "
            "the apps' `--emulate-compute`, set by `hpcbsp-cost calibrate --emulate-compute` for its "
            "runs.",
            "unset (off)", "`measure`, `t_map=S[,t_a=S]` (seconds >= 0), or `0`, `off`, `no`",
            "`farm/emulation.py`", _emulation),
)

_SCRIPTS: tuple[Setting, ...] = (
    Setting("HPCBSP_VENV", "the virtualenv to activate on the compute nodes", "`$SLURM_SUBMIT_DIR/.venv`",
            "a folder with `bin/python`", "every `slurm/*.sbatch` script"),
    Setting("HPCBSP_LAUNCHER", "how the job step is started", "`srun`", "`srun` or `mpiexec`",
            "`slurm/run.sbatch`"),
    Setting("HPCBSP_SRUN_MPI", "`srun --mpi=` plugin", "`pmi2`", "`pmi2` (MPICH), `pmix` (Open MPI)",
            "`slurm/run.sbatch`, `sweep-point.sbatch`, `long-run.sbatch`"),
    Setting("HPCBSP_CHECKPOINT", "checkpoint path; an argument `{checkpoint}` is replaced by it (the "
            "script exports it to the program)", "`$SLURM_SUBMIT_DIR/checkpoints/<job name>-<job id>`",
            "a path", "`slurm/long-run.sbatch`"),
    Setting("HPCBSP_MAX_RESTARTS", "gives up requeueing after this many restarts", "`20`",
            "an integer >= 0", "`slurm/long-run.sbatch`"),
    Setting("HPCBSP_STOP_GRACE", "seconds from the time-limit warning (SIGUSR1) until the program is "
            "stopped", "`60`", "an integer >= 0", "`slurm/long-run.sbatch`"),
    Setting("HPCBSP_CLUSTER_TRANSPORT",
            "`tcp`: jobs on the emulated nodes use MPICH's OFI netmod with libfabric's tcp provider, so "
            "their bytes cross the links; `any`: MPICH's own choice (shared memory between the nodes of "
            "one machine). See [cluster.md](cluster.md).",
            "`tcp`", "`tcp` or `any`", "`slurm/local-cluster.sh`'s launcher and task prolog"),
)

_SET: tuple[Setting, ...] = (
    Setting("HPCBSP_SUPERVISE_RESTART", "set by `hpcbsp supervise` for each launch: the restarts before "
            "it (0 for the first); hpcbsp itself does not read it, a program may (to say which launch "
            "it is)", "unset", "an integer >= 0", "`hpcbsp/cli/supervise/command.py`"),
)

_TESTS: tuple[Setting, ...] = (
    Setting("HPCBSP_CLI_NET_EXAMPLES", "generated examples per command of the command-line fuzz tests "
            "(raise it to hunt)", "`3`", "a positive integer", "`tests/test_cli_net.py`"),
    Setting("HPCBSP_FAULT_TAG", "marks the processes of one fault-injection test's job (so that the test "
            "finds and kills exactly those)", "unset", "any text", "`tests/test_cluster_faults.py`"),
)

#: Every declared variable, by name.
SETTINGS: dict[str, Setting] = {s.name: s for s in (*_PACKAGE, *_SCRIPTS, *_SET, *_TESTS)}


# -- reading and checking --------------------------------------------------------------------

def _read(setting: Setting, raw: str) -> tuple[Any, str | None]:
    """``(value, None)``, or ``(None, "is not ALLOWED (WHY)")`` for a bad ``raw``."""
    text = raw.strip()
    if not text:
        return setting.unset, None
    assert setting.parse is not None
    try:
        return setting.parse(text), None
    except ValueError as exc:
        why = str(exc)
        # (int("x") and float("x") say "invalid literal ...": the allowed values say it better)
        if why.startswith(("invalid literal", "could not convert")):
            why = ""
        return None, f"is not {_plain(setting.allowed)}" + (f" ({why})" if why else "")


def _parse(setting: Setting, raw: str) -> Any:
    value, bad = _read(setting, raw)
    if bad is not None:
        raise SettingError(f"environment variable {setting.name}={raw!r} {bad}: correct it or unset it ({DOC})")
    return value


def _plain(text: str) -> str:
    return text.replace("`", "")


def value(name: str, environ: Mapping[str, str] | None = None) -> Any:
    """The value of the declared variable ``name`` read by the package (its default when unset
    or blank); :class:`SettingError` for a bad one.  ``environ``: default ``os.environ``."""
    setting = SETTINGS[name]
    if not setting.python:
        raise KeyError(f"{name} is not read by the Python package")
    env = os.environ if environ is None else environ
    return _parse(setting, env.get(name, ""))


def check(environ: Mapping[str, str] | None = None) -> list[str]:
    """Parse every ``HPCBSP_*`` variable set in ``environ`` (default ``os.environ``) that the
    package reads: :class:`SettingError` for the first bad one (by name).  Returns a warning for
    each name that is not declared (the closest declared name suggested)."""
    env = os.environ if environ is None else environ
    warnings = []
    for name in sorted(n for n in env if n.startswith(PREFIX)):
        setting = SETTINGS.get(name)
        if setting is None:
            warnings.append(_unknown(name))
        elif setting.python:
            _parse(setting, env[name])
    return warnings


def shown(environ: Mapping[str, str] | None = None) -> list[tuple[str, str, str | None]]:
    """Every ``HPCBSP_*`` variable set in ``environ`` (default ``os.environ``), by name, as
    ``(name, value, problem)``: ``problem`` is None for a value hpcbsp takes (or a variable only
    the scripts or tests read), ``invalid: is not ALLOWED (WHY)`` for a bad value (with which
    every command but ``hpcbsp info`` refuses to run), ``unknown: ...`` for a name that is not
    hpcbsp's (with the closest one).  Nothing raises: ``hpcbsp info`` shows them all."""
    env = os.environ if environ is None else environ
    found: list[tuple[str, str, str | None]] = []
    for name in sorted(n for n in env if n.startswith(PREFIX)):
        setting = SETTINGS.get(name)
        problem = None
        if setting is None:
            problem = f"unknown: not a variable of hpcbsp's, ignored; {_hint(name)}"
        elif setting.python:
            bad = _read(setting, env[name])[1]
            problem = None if bad is None else f"invalid: {bad}"
        found.append((name, env[name], problem))
    return found


def _unknown(name: str) -> str:
    return f"{name} is not a variable of hpcbsp's and is ignored; {_hint(name)}"


def _hint(name: str) -> str:
    """``did you mean NAME?`` with the closest declared name, or where the known ones are."""
    # (compared without the prefix, which every name shares and which would make all look alike)
    tails = {known[len(PREFIX):]: known for known in SETTINGS}
    close = difflib.get_close_matches(name[len(PREFIX):], list(tails), n=1, cutoff=0.6)
    return f"did you mean {tails[close[0]]}?" if close else "the known ones are in " + DOC


_warned: set[str] = set()


def warn(warnings: list[str], rank: int | None = None) -> None:
    """Print each of :func:`check`'s ``warnings`` once per process, as ``[hpcbsp] warning: ...``
    on stderr, on rank 0 only (``rank``: default the launcher's)."""
    fresh = [w for w in warnings if w not in _warned]
    _warned.update(fresh)
    if fresh and (launcher_rank() if rank is None else rank) == 0:
        sys.stderr.write("".join(f"[hpcbsp] warning: {w}\n" for w in fresh))
        sys.stderr.flush()


# -- the documentation's table -----------------------------------------------------------------

def markdown_table() -> str:
    """docs/environment.md's table of every variable (tests/test_settings.py checks the docs
    hold exactly this)."""
    rows = ["| variable | default | allowed values | read by | what it does |", "|---|---|---|---|---|"]
    for s in SETTINGS.values():
        rows.append(f"| `{s.name}` | {s.default} | {s.allowed} | {s.read_by} | {s.meaning} |")
    return "\n".join(rows)
