"""Every ``HPCBSP_*`` environment variable, declared once: :data:`SETTINGS`.

A :class:`Setting` holds a variable's meaning, its default, the values it allows, where it is
read and, for those the Python package reads, its parser (:mod:`.envparse`) and the value it has
when unset.  :mod:`.settings` reads, checks and shows them and renders docs/environment.md's
table from them, in the order declared here: the package's own variables, then those only the
Slurm scripts read, the one ``hpcbsp supervise`` sets, and the test suite's (``parse`` None: known,
so never warned about, and never parsed by the package).

A variable whose value is a word of one of :mod:`.choices`' lists is declared by
:func:`_one_of`: its allowed values, parser and shown default all come from the list and the
default word.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from .choices import CONTROL_COLLECTIVES, EXCHANGES, ROUTING_CHOICES, TRANSPORTS, WAIT_MODES, one_of
from .envparse import (
    choice,
    emulated,
    fraction,
    integer,
    milliseconds_or_off,
    positive_seconds,
    seconds_at_least,
    seconds_or_off,
    switch,
    writable_file,
)

__all__ = ["SETTINGS", "Setting"]


@dataclass(frozen=True)
class Setting:
    """One environment variable (see the module docstring)."""

    name: str
    meaning: str                 #: what it does (docs/environment.md's wording)
    default: str                 #: the default, as the docs show it
    allowed: str                 #: the values allowed, as the docs and the error show them
    read_by: str                 #: where it is read (a module, a script, the tests)
    parse: Callable[[str], Any] | None = None  #: stripped, non-empty text -> value (ValueError)
    unset: Any = None            #: the value :func:`.settings.value` gives when it is unset

    @property
    def python(self) -> bool:
        """Whether the Python package reads (and so checks) it."""
        return self.parse is not None


def _one_of(name: str, meaning: str, choices: tuple[str, ...], read_by: str, default: str = "auto") -> Setting:
    """A variable the package reads whose value is one word of ``choices`` (any case), ``default``
    when unset."""
    return Setting(name, meaning, f"`{default}`", one_of(choices), read_by, choice(choices), default)


_PACKAGE: tuple[Setting, ...] = (
    Setting("HPCBSP_SYNC_TIMEOUT",
            "Default `timeout` (seconds) of every BSP context, as `hpcbsp.BSP(timeout=S)` sets it for "
            "one context: a collective BSP call (`sync`, `coarray`, `allreduce`, ...) that waits longer "
            "for the other ranks raises `SyncTimeout` (a `BSPError`) naming the ranks that never arrived "
            "and their hosts; the same bound holds inside the superstep's data exchange (a peer that "
            "stops there, behind a dead link, is named too); uncaught, it ends the job with one line per "
            "rank. `bsp.sync(label, timeout=S)` sets it for one sync. Give every rank the same value.",
            "no limit (a training world of `hpcbsp.elastic`: 60)", "a positive number of seconds",
            "`runtime/superstep/lifecycle.py`", positive_seconds),
    Setting("HPCBSP_ABORT_GRACE",
            "Seconds the other ranks have, after one rank failed, to reach a BSP call (where they learn "
            "of the failure and stop cleanly) before the whole job is aborted. Used by the runtime and "
            "by FA-BSP mailboxes.",
            "`10`", "a positive number of seconds", "`runtime/superstep/lifecycle.py`", positive_seconds, 10.0),
    Setting("HPCBSP_COMPILED_SYNC",
            "`0` runs the control step (an empty `sync`, and every blocking collective's first step) "
            "through mpi4py's Python calls instead of one compiled call to the MPI library's "
            "`MPI_Start`/`MPI_Wait` (see `hpcbsp/runtime/superstep/native.py`). The two drive the same persistent "
            "request, so ranks may differ in it. Read when a context is made.",
            "`1`", "`0` or `1`", "`runtime/superstep/native.py`", switch, True),
    _one_of("HPCBSP_CONTROL_COLLECTIVE",
            "The allreduce of the small record every sync and collective call begins with (the control "
            "step): `persistent` (`MPI_Allreduce_init` once, `MPI_Start` + `MPI_Wait` per step), "
            "`blocking` (one `MPI_Allreduce` per step), or `auto`: the one the running MPI library runs "
            "faster (blocking under Open MPI, persistent under MPICH and Intel MPI; measured in "
            "docs/notes/performance-journal.md, *Per MPI*). "
            "The ranks check that they agree when a context is made (the two kinds never match). "
            "Read when a context is made.",
            CONTROL_COLLECTIVES, "`runtime/superstep/control.py`"),
    Setting("HPCBSP_LEDGER_WINDOW",
            "Supersteps each rank keeps whole in its superstep ledger (`bsp.ledger`): the most recent "
            "ones, 80 bytes each; older ones leave the window but stay counted in the ledger's "
            "aggregates (`bsp.ledger.aggregates`: count, totals, maxima, per label), so that a rank's "
            "memory does not grow with the number of supersteps. `bsp.ledger.stream(DIR)` (the apps' "
            "`--ledger PATH`) keeps every row in files instead (`hpcbsp ledger merge`). Read when a "
            "context is made.",
            "`10000`", "an integer from 1 to 2**40", "`runtime/superstep/ledger.py`",
            integer(1, 2**40), 10_000),
    Setting("HPCBSP_LATENESS",
            "Who arrived last, live, as `hpcbsp.BSP(lateness=MS)` sets it for one context: a threshold "
            "in milliseconds; every control step then carries each rank's work time (one more word in "
            "its reduction, no new message), and rank 0 writes a line to stderr when one rank arrived "
            "last, later than the earliest rank by more than the threshold, in 8 of the last 10 "
            "supersteps (`[hpcbsp] rank 2 (on node4) arrived last in 8 of the last 10 supersteps, +38 ms "
            "on average`; at most once per 10 supersteps). Give every rank the same value. `hpcbsp report` "
            "finds the late ranks in a saved ledger afterwards. See `runtime/superstep/lateness.py`.",
            "`off`", "`off` or a number of milliseconds", "`runtime/superstep/lateness.py`",
            milliseconds_or_off, 0.0),
    Setting("HPCBSP_DEATHWATCH",
            "`0` turns off the watcher (one process per job and node) that names a rank which died "
            "without a report (SIGKILL, a segfault, the out-of-memory killer), removes the job's "
            "`/dev/shm` segments after a fault and runs the failure detector; see "
            "`hpcbsp/runtime/failure/nodewatch.py`.",
            "`1`", "`0` or `1`", "`runtime/failure/deathwatch.py`", switch, True),
    Setting("HPCBSP_HEARTBEAT_TIMEOUT",
            "The failure detector, on without any setting: the watcher of each node "
            "(`hpcbsp/runtime/failure/nodewatch.py`, a process beside the ranks, so a rank that computes for "
            "hours in one superstep is never suspected) ends the job, naming the node and its ranks, "
            "when another node of the job has not been heard from for this many seconds (it died, froze, "
            "or lost its link) or a rank of its own node has been stopped (SIGSTOP) that long: every "
            "node's watcher then kills its ranks, and under Slurm the job's step is cancelled; the "
            "job's ranks end at most timeout + period after the fault. Shorter "
            "finds a lost node sooner; too short gives up a node whose watcher was starved of CPU for "
            "that long (an overloaded node) or, for a stopped rank, a job suspended on purpose. `0` "
            "turns the detector off (the watch still names a rank that died). At least two periods.",
            "`10`", "`0` (off) or a number of seconds >= 0.1", "`runtime/failure/deathwatch.py`",
            seconds_or_off, 10.0),
    Setting("HPCBSP_HEARTBEAT_PERIOD",
            "Seconds between two heartbeats (an authenticated UDP datagram from each node's watcher to "
            "each of its 2 observers on a ring of the job's nodes) and between two looks at the node's "
            "ranks. The cost is 2 datagrams per period per node whatever the job's size, outside the ranks "
            "(`python -m hpcbsp.bench watch` measures it; `python -m hpcbsp.bench detector` simulates "
            "the protocol at scale; docs/cluster.md, *Failure detection at scale*).",
            "`1`", "a number of seconds >= 0.05", "`runtime/failure/deathwatch.py`", seconds_at_least(0.05), 1.0),
    Setting("HPCBSP_LARGE_PUT_BYTES",
            "Puts of at least this many bytes are received straight into the target array instead of "
            "through a staging buffer (and travel on their own after the headers: in rounds of one "
            "Alltoallv, as messages in a sync with a timeout). Read when a context is made.",
            "`65536`", "an integer from 1 to 2**63 - 1", "`runtime/superstep/outbox.py`",
            integer(1, 2**63 - 1), 64 * 1024),
    Setting("HPCBSP_MAILBOX_BYTES",
            "Bytes per destination buffer of an FA-BSP mailbox that does not give its own buffer size "
            "(D: the ranks one rank sends to, p with direct routing); a buffer is one MPI message.",
            "16 MiB / D, between 64 KiB and 512 KiB", "an integer from 1 to 2147483647 (2 GiB, one "
            "MPI message)", "`fabsp/engine.py`", integer(1, (1 << 31) - 1)),
    _one_of("HPCBSP_ROUTING",
            "Routing of FA-BSP mailboxes that do not choose one (`bsp.mailbox(..., routing=)`, the "
            "irregular apps' `--routing`): `direct` (a buffer for every other rank), `2d` or `3d` "
            "(records hop through a grid of ranks; about 2 sqrt(p) or 3 cbrt(p) buffers per rank, up to "
            "2 or 3 messages per record), `node` (records for another node go through one rank of "
            "each node: one message per node pair, up to 3 per record), `auto` (direct up to 256 ranks, "
            "2d up to 32,768, 3d beyond). Give every rank the same value. See `hpcbsp/fabsp/routing.py`.",
            ROUTING_CHOICES, "`fabsp/routing.py`"),
    _one_of("HPCBSP_WAIT",
            "How a rank waits for the others in a collective call, as `hpcbsp.BSP(wait=...)` sets it for "
            "one context: `spin` (busy-poll, lowest latency), `yield` (poll with growing sleeps, gives "
            "the core away), `auto` (yield when a node runs more ranks than it has cores). See "
            "`hpcbsp/runtime/superstep/waiting.py`.",
            WAIT_MODES, "`runtime/superstep/waiting.py`"),
    _one_of("HPCBSP_ELEMENTS_TRANSPORT",
            "How the packed records of `Coarray.put_elements` reach their ranks: `auto` (where every "
            "rank of a context is on one node and the context has no sync timeout, they are packed into "
            "an MPI shared-memory window in `/dev/shm` and applied by their destinations from there, so "
            "only a header travels; the window, up to 2 x 1.25 x the largest batch of a superstep per "
            "rank, grows when the ranks agree inside a sync and only if `/dev/shm` has room; messages "
            "otherwise), `messages` (always messages). A rank that says `messages`, or a sync given a "
            "timeout, switches it off on every rank. See `hpcbsp/runtime/superstep/arena.py`.",
            TRANSPORTS, "`runtime/superstep/arena.py`"),
    _one_of("HPCBSP_PS_TRANSPORT",
            "How the parameter server's weights reach the workers, as `serve(..., transport=)` and "
            "`work(..., transport=)` set it for one run: `auto` (an MPI shared-memory window where the "
            "server and every worker are on one node: each worker copies the weights once, the server "
            "only updates them; messages otherwise), `messages` (the weights as messages in 1 MiB "
            "pieces, also on one node). Ranks that differ get messages. See "
            "`hpcbsp/elastic/transport.py`.",
            TRANSPORTS, "`elastic/transport.py`"),
    Setting("HPCBSP_SLOT_MEMORY_SHARE",
            "The largest share of this node's memory the parameter server's shared window may take with "
            "the workers' gradient slots (the model, and a slot per worker in the gradients' type: "
            "(1 + workers) x the model, 2 bytes a value in a float16 or bfloat16 slot): above it "
            "the gradients travel as messages, and rank 0 says so in one line with the sizes. See "
            "`hpcbsp/elastic/transport.py`.",
            "0.25", "a number greater than 0 and at most 1", "`elastic/transport.py`", fraction, 0.25),
    Setting("HPCBSP_FARM_REPORT",
            "A file to which a BSF farm program (`hpcbsp.farm`, e.g. `hpcbsp.apps.bsf.jacobi`) appends "
            "its measured timings, one JSON line per run (missing folders are created); checked before "
            "the run, so that an unwritable place costs no work. `hpcbsp-cost calibrate` and "
            "`slurm/sweep-point.sbatch` set it for the runs they start.",
            "unset", "a file that can be written", "`farm/timings.py`",
            writable_file),
    _one_of("HPCBSP_FARM_EXCHANGE",
            "The BSF farm's exchange when the program does not choose one: `linear` (the master talks to "
            "the workers one by one) or `tree` (binomial tree); the apps' `--exchange`.",
            EXCHANGES, "`farm/skeleton.py`", default="linear"),
    Setting("HPCBSP_FARM_EMULATE",
            "Emulated compute for farm programs that do not pass `emulate=`: the workers wait the Map's "
            "measured time instead of computing (a simulation of compute, and every output says so); "
            "the apps' `--emulate-compute`, set by `hpcbsp-cost calibrate --emulate-compute` for its "
            "runs.",
            "unset (off)", "`measure`, `t_map=S[,t_a=S]` (seconds >= 0), or `0`, `off`, `no`",
            "`farm/emulation.py`", emulated),
    Setting("HPCBSP_PROGRESS",
            "Progress lines of long commands (benchmarks, `hpcbsp-cost calibrate`, training, the apps) on "
            "stderr: unset, they are written only when stderr is a terminal; `1` wherever stderr goes "
            "(`hpcbsp supervise` sets it for its job, whose last progress line tells it how far the job "
            "got); `0` never. A command's `--quiet` turns them off either way.",
            "unset (on a terminal only)", "`0` or `1`", "`util/progress.py`", switch),
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
