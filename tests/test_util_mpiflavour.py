"""Which MPI this is, and what each flavour's launcher says and sets (hpcbsp.util.mpiflavour).

Oracles: the texts the three MPIs print, copied from MPICH 5.0.2, Open MPI 5.0.11 and Intel MPI
2021.18 from PyPI (library versions, crash reports, the variables a rank gets from mpiexec).
"""
from __future__ import annotations

import os

import pytest
from mpi_helpers import FLAVOUR, run_mpi

from hpcbsp.util.flavours import IMPI, MPICH, OPENMPI, UNKNOWN, is_launcher_variable
from hpcbsp.util.mpiflavour import (
    by_name,
    child_env,
    crash_line,
    library_flavour,
    library_name,
    program_output,
    root_refusal,
    running_flavour,
    timeout_env,
)

LIBRARIES = [
    ("MPICH Version:      5.0.2\nMPICH Release date: Fri Sep 25 2026\nMPICH ABI:          17:2:5\n", MPICH),
    ("Open MPI v5.0.11, package: Open MPI user@localhost Distribution, ident: 5.0.11, repo rev: v5.0.11rc1, "
     "Sep 16, 2026 ", OPENMPI),
    ("Intel(R) MPI Library 2021.18.1 for Linux* OS\n", IMPI),
    ("MVAPICH2 Version     :\t2.3.7\n", MPICH),
    ("Some Vendor MPI 1.0\n", UNKNOWN),
]


@pytest.mark.parametrize("text,flavour", LIBRARIES)
def test_the_library_version_names_the_flavour(text, flavour):
    assert library_flavour(text) is flavour
    assert library_name(text) == text.strip().splitlines()[0].strip()


def test_the_library_name_drops_the_nul_that_ends_open_mpis_text():
    """Open MPI's MPI_Get_library_version ends in the C string's NUL, which mpi4py passes on
    (seen in `hpcbsp info` under Open MPI 5.0.11); the name printed must not carry it."""
    text = "Open MPI v5.0.11, package: Open MPI root@host Distribution, ident: 5.0.11, repo rev: v5.0.11, Nov 2026\x00"
    assert library_name(text) == text[:-1]
    assert library_flavour(text) is OPENMPI


def test_names_and_the_running_library():
    assert [by_name(n) for n in ("mpich", "openmpi", "impi")] == [MPICH, OPENMPI, IMPI]
    with pytest.raises(ValueError, match="unknown MPI flavour 'lam'"):
        by_name("lam")
    assert running_flavour().known  # this suite runs on MPICH, Open MPI or Intel MPI


CRASHES = [
    (MPICH, "=   EXIT CODE: 139\n=   CLEANING UP REMAINING PROCESSES\n"
            "YOUR APPLICATION TERMINATED WITH THE EXIT STRING: Segmentation fault (signal 11)\n",
     "Segmentation fault (signal 11)"),
    (OPENMPI, "prterun noticed that process rank 1 with PID 9139 on node vm exited on\nsignal 11 (Segmentation fault).\n",
     "signal 11 (Segmentation fault)"),
    (IMPI, "=   RANK 0 PID 9212 RUNNING AT vm\n=   KILLED BY SIGNAL: 9 (Killed)\n" + "=" * 83 + "\n\n" + "=" * 83 + "\n"
           "=   RANK 1 PID 9213 RUNNING AT vm\n=   KILLED BY SIGNAL: 11 (Segmentation fault)\n",
     "11 (Segmentation fault)"),  # the rank the launcher killed first, then the one that crashed
]


@pytest.mark.parametrize("flavour,output,words", CRASHES)
def test_each_launchers_crash_report_is_read(flavour, output, words):
    assert crash_line(flavour, output) == words
    assert crash_line(UNKNOWN, output) == words  # an unknown MPI: any of the known reports
    assert crash_line(flavour, "[rank 0] KeyError: 'x'\n") is None
    killed = output.replace("Segmentation fault", "Killed").replace("11", "9")  # only SIGKILL: that one
    assert crash_line(flavour, killed) is not None and "9" in crash_line(flavour, killed)


def test_a_child_keeps_the_users_settings_and_drops_the_launchers():
    rank = {  # what each mpiexec gave a rank (a selection)
        "PMI_RANK": "0", "PMI_FD": "9", "HYDI_CONTROL_FD": "7", "MPI_LOCALRANKID": "0",       # hydra
        "OMPI_COMM_WORLD_RANK": "0", "PMIX_NAMESPACE": "prterun-vm-1@1", "PRTE_LAUNCHED": "1",  # PRRTE
        "I_MPI_HYDRA_UUID": "541d", "I_MPI_INFO_NC": "2", "I_MPI_PIN_MAPPING": "1:0 0",         # Intel
    }
    user = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1", "OMPI_MCA_btl": "self,tcp",
            "PRTE_MCA_rmaps_default_mapping_policy": ":oversubscribe", "I_MPI_FABRICS": "shm:ofi",
            "MPIR_CVAR_ENABLE_HEAVY_YIELD": "1", "HOME": "/root"}
    assert all(is_launcher_variable(k) for k in rank) and not any(is_launcher_variable(k) for k in user)
    assert child_env({**rank, **user}) == user
    assert child_env({**rank, **user}, drop=("MPIR_",), X="1") == {
        **{k: v for k, v in user.items() if not k.startswith("MPIR_")}, "X": "1"}


def test_the_timeout_is_whole_seconds_and_never_none():
    assert timeout_env(0.5) == {"MPIEXEC_TIMEOUT": "1"} and timeout_env(120) == {"MPIEXEC_TIMEOUT": "120"}


def test_open_mpi_as_root_needs_both_variables():
    root = os.geteuid() == 0
    assert root_refusal(MPICH, {}) is None and root_refusal(IMPI, {}) is None
    both = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
    assert root_refusal(OPENMPI, both) is None
    refusal = root_refusal(OPENMPI, {"OMPI_ALLOW_RUN_AS_ROOT": "1"})
    assert (refusal is not None) == root
    if root:
        assert "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1" in refusal


@pytest.mark.serial_only
def test_the_helpers_launch_reports_a_crash_of_this_mpi(tmp_path):
    """A rank that segfaults: the job's output, read by the flavour of the mpiexec in use, says so."""
    prog = tmp_path / "crash.py"
    prog.write_text("import os, signal, time\nfrom mpi4py import MPI\nc = MPI.COMM_WORLD\nc.Barrier()\n"
                    "if c.rank == 1:\n    os.kill(os.getpid(), signal.SIGSEGV)\ntime.sleep(5)\n")
    res = run_mpi(2, [str(prog)], timeout=60)
    assert res.returncode != 0 and not res.timed_out, res.output
    assert res.crash is not None and "11" in res.crash, (FLAVOUR.name, res.output)


OWN_OUTPUT = [  # (flavour, a job's stderr, what the program wrote)
    (OPENMPI, "[hpcbsp] rank 1/2: interrupted (SIGINT, Ctrl-C) at superstep 0; ending all 2 ranks\n" + "-" * 74 + "\n"
              "MPI_ABORT was invoked on rank 1 in communicator MPI_COMM_WORLD\n  Proc: [[24532,1],1]\n  Errorcode: 130\n\n"
              + "-" * 74 + "\n" + "-" * 74 + "\nprterun has exited due to process rank 1 with PID 0 on node vm calling\n"
              + "-" * 74 + "\n\x00",
     "[hpcbsp] rank 1/2: interrupted (SIGINT, Ctrl-C) at superstep 0; ending all 2 ranks\n"),
    (OPENMPI, "prog: error: argument -T/--table: '0' is not a positive integer\n[vm:28980] PMIX ERROR: PMIX_ERR_UNREACH in "
              "file /openmpi-5.0.11/3rd-party/openpmix/src/server/pmix_server.c at line 3146\n" + "-" * 74 + "\n"
              "prterun detected that one or more processes exited with non-zero status,\n" + "-" * 74 + "\n",
     "prog: error: argument -T/--table: '0' is not a positive integer\n"),
    (MPICH, "[rank 1] KeyError: 'x'\n" + "=" * 83 + "\n=   BAD TERMINATION OF ONE OF YOUR APPLICATION PROCESSES\n"
            "=   EXIT CODE: 9\n" + "=" * 83 + "\nYOUR APPLICATION TERMINATED WITH THE EXIT STRING: Killed (signal 9)\n"
            "This typically refers to a problem with your application.\n"
            "Please see the FAQ page for debugging suggestions\n",
     "[rank 1] KeyError: 'x'\n"),
    (MPICH, "[hpcbsp] my line\nAbort(3) on node 1 (rank 1 in comm 0): application called MPI_Abort(MPI_COMM_WORLD, 3)"
            " - process 1\n[mpiexec@vm] Sending Ctrl-C to processes as requested\n", "[hpcbsp] my line\n"),
    (OPENMPI, "a table\n" + "-" * 74 + "\nnot closed: the program's own\n",
     "a table\n" + "-" * 74 + "\nnot closed: the program's own\n"),
]


@pytest.mark.parametrize("flavour,output,program", OWN_OUTPUT)
def test_the_mpis_own_messages_are_told_from_the_programs(flavour, output, program):
    assert program_output(flavour, output) == program
    assert program_output(UNKNOWN, output) == program
    assert program_output(flavour, program) == program


@pytest.mark.parametrize("flavour", [MPICH, OPENMPI, IMPI], ids=lambda f: f.name)
def test_the_emulated_clusters_variables_force_tcp_over_the_named_interface(flavour):
    # Oracle: hpcbsp.runtime.launch.forces_tcp, which hpcbsp info uses to judge a job's settings.
    from hpcbsp.runtime.launch import forces_tcp

    env = flavour.cluster_tcp_env("br7")
    assert forces_tcp(env, flavour), env
    assert [name for name, value in env.items() if value == "br7"] == list(flavour.iface_vars)
    assert flavour.iface_vars  # every known MPI is told which interface to use
