"""The job command line: host files read as MPICH hydra reads them, checked before any job starts,
and spelled for the MPI of the mpiexec (MPICH's and Intel MPI's hydra, Open MPI's PRRTE).

Oracles: hand-written host files and the exact argv each must give for each flavour.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from mpi_helpers import clean_env

from hpcbsp.util.flavours import IMPI, MPICH, OPENMPI, UNKNOWN
from hpcbsp.util.jobcommand import (
    LOCAL_CLUSTER_MARK,
    JobCommandError,
    job_command,
    local_cluster_launcher,
    probe_command,
    read_hosts,
)


def write(path, text, mode=0o644):
    path.write_text(text)
    os.chmod(path, mode)
    return str(path)


def test_hosts_in_order_without_slots_comments_or_repeats(tmp_path):
    f = write(tmp_path / "hosts", "# the nodes\nnode3:4\nnode1\n\n  node2 # a comment\nnode1:2\n")
    assert read_hosts(f) == ["node3", "node1", "node2"]


@pytest.mark.parametrize("text", ["", "# only a comment\n\n"])
def test_a_file_without_hosts_is_refused(tmp_path, text):
    with pytest.raises(JobCommandError, match="lists no host"):
        read_hosts(write(tmp_path / "hosts", text))


def test_an_unreadable_file_is_refused_with_its_name(tmp_path):
    with pytest.raises(JobCommandError, match=f"host file {tmp_path}/missing: cannot read it"):
        read_hosts(tmp_path / "missing")


def test_plain_mpiexec_and_one_rank_per_host(tmp_path):
    assert job_command("mpiexec", 3, flavour=MPICH) == ["mpiexec", "-n", "3"]
    f = write(tmp_path / "hosts", "a\nb\nc\nd\n")
    assert job_command("/x/mpiexec", 4, hosts=f, flavour=MPICH) == ["/x/mpiexec", "-f", f, "-ppn", "1", "-n", "4"]


def test_each_flavour_spells_its_own_placement(tmp_path):
    f = write(tmp_path / "hosts", "a:2\nb\nc\nd\n")
    assert job_command("mpiexec", 3, flavour=IMPI) == ["mpiexec", "-n", "3"]
    assert job_command("mpiexec", 3, hosts=f, flavour=IMPI) == ["mpiexec", "-f", f, "-ppn", "1", "-n", "3"]
    # Open MPI: more ranks than cores only when told; its host files have another syntax, so the
    # first N hosts are named on the command line, one rank on each.
    assert job_command("mpiexec", 3, flavour=OPENMPI) == ["mpiexec", "--map-by", ":OVERSUBSCRIBE", "-n", "3"]
    assert job_command("mpiexec", 3, hosts=f, flavour=OPENMPI) == ["mpiexec", "--host", "a,b,c", "--map-by",
                                                                   "ppr:1:node", "-n", "3"]
    assert job_command("mpiexec", 3, flavour=UNKNOWN) == ["mpiexec", "-n", "3"]
    with pytest.raises(JobCommandError, match="cannot tell which MPI mpiexec belongs to"):
        job_command("mpiexec", 3, hosts=f, flavour=UNKNOWN)


def test_the_hosts_of_a_launch_go_as_a_written_file(tmp_path):
    # (hpcbsp supervise: one argument however many hosts, in each MPI's host-file syntax)
    f = write(tmp_path / "hosts", "a:2\nb\nc\nd\n")
    folder = tmp_path / "private"
    folder.mkdir()
    written = str(folder / "launch.hosts")
    assert job_command("mpiexec", 2, hosts=f, only=["c", "a"], flavour=MPICH, hostfile_dir=str(folder)) == [
        "mpiexec", "-f", written, "-ppn", "1", "-n", "2"]
    assert Path(written).read_text() == "c:1\na:1\n"
    assert job_command("mpiexec", 3, hosts=f, flavour=OPENMPI, hostfile_dir=str(folder)) == [
        "mpiexec", "--hostfile", written, "--map-by", "ppr:1:node", "-n", "3"]
    assert Path(written).read_text() == "a slots=1\nb slots=1\nc slots=1\n"
    assert job_command("mpiexec", 1, hosts=f, only=["d"], flavour=IMPI, hostfile_dir=str(folder)) == [
        "mpiexec", "-f", written, "-ppn", "1", "-n", "1"]
    assert Path(written).read_text() == "d:1\n"


def test_the_flavour_of_an_mpiexec_is_found_beside_it(tmp_path):
    from hpcbsp.util.mpiflavour import mpiexec_flavour

    for marker, flavour in (("prterun", OPENMPI), ("impi_info", IMPI), ("hydra_pmi_proxy", MPICH)):
        d = tmp_path / marker
        d.mkdir()
        write(d / marker, "#!/bin/sh\n", 0o755)
        assert mpiexec_flavour(write(d / "mpiexec", "#!/bin/sh\nexit 1\n", 0o755)) is flavour
    d = tmp_path / "bare"
    d.mkdir()
    assert mpiexec_flavour(write(d / "mpiexec", "#!/bin/sh\necho 'mpiexec (Open MPI) 4.1.6'\n", 0o755)) is OPENMPI
    assert mpiexec_flavour(tmp_path / "missing" / "mpiexec") is UNKNOWN


def test_fewer_hosts_than_ranks_is_refused(tmp_path):
    f = write(tmp_path / "hosts", "a\nb\n")
    with pytest.raises(JobCommandError, match="lists 2 host\\(s\\), but 3 ranks need one host each"):
        job_command("mpiexec", 3, hosts=f)


def test_the_local_clusters_launcher_is_used_for_its_host_file(tmp_path):
    f = write(tmp_path / "hosts", "n1\nn2\n")
    assert local_cluster_launcher(f) is None  # no launcher beside it
    rsh = write(tmp_path / "rsh", f"#!/bin/sh\n# Written by {LOCAL_CLUSTER_MARK}: MPICH hydra's rsh launcher\n", 0o755)
    assert local_cluster_launcher(f) == rsh
    assert job_command("mpiexec", 2, hosts=f, flavour=MPICH) == ["mpiexec", "-f", f, "-ppn", "1", "-launcher", "rsh",
                                                                 "-launcher-exec", rsh, "-n", "2"]
    assert job_command("mpiexec", 2, hosts=f, flavour=OPENMPI) == ["mpiexec", "--host", "n1,n2", "--map-by", "ppr:1:node",
                                                                   "--prtemca", "plm_ssh_agent", rsh, "-n", "2"]
    write(tmp_path / "rsh", "#!/bin/sh\nexec ssh \"$@\"\n", 0o755)  # someone else's rsh: not ours
    assert local_cluster_launcher(f) is None


def test_srun_one_task_per_node_and_bad_combinations(tmp_path):
    assert job_command("mpiexec", 5, launch="srun", flavour=MPICH) == ["srun", "-N", "5", "-n", "5", "--mpi=pmi2"]
    assert job_command("mpiexec", 5, launch="srun", flavour=IMPI) == ["srun", "-N", "5", "-n", "5", "--mpi=pmi2"]
    assert job_command("mpiexec", 5, launch="srun", flavour=OPENMPI) == ["srun", "-N", "5", "-n", "5", "--mpi=pmix"]
    assert job_command("mpiexec", 5, launch="srun", flavour=UNKNOWN) == ["srun", "-N", "5", "-n", "5"]
    with pytest.raises(JobCommandError, match="a host file is for mpiexec"):
        job_command("mpiexec", 2, hosts=write(tmp_path / "hosts", "a\nb\n"), launch="srun")
    with pytest.raises(JobCommandError, match="unknown launch 'ssh'"):
        job_command("mpiexec", 2, launch="ssh")


@pytest.mark.parametrize("argv", [
    [sys.executable, "-m", "hpcbsp.bench", "bsf", "--hosts", "HOSTS", "--workers", "1-4", "--no-plot"],
    [sys.executable, "-m", "hpcbsp.cli.cost", "calibrate", "--hosts", "HOSTS", "--workers", "1,2,3",
     "--", "python", "-m", "hpcbsp.apps.bsf.jacobi"],
])
def test_the_commands_refuse_a_short_host_file_before_any_run(tmp_path, argv):
    hosts = write(tmp_path / "hosts", "a\nb\n")
    out = subprocess.run([a.replace("HOSTS", hosts) for a in argv], capture_output=True, text=True, timeout=120,
                         cwd=tmp_path, env=clean_env())
    assert out.returncode == 2, out.stderr
    assert "lists 2 host(s), but" in out.stderr and "Traceback" not in out.stderr
    assert not [f for f in (tmp_path / "runs").rglob("*") if f.is_file()]  # no run started, nothing written


def test_a_relaunch_on_some_hosts_names_them_and_keeps_the_files_launcher(tmp_path):
    f = write(tmp_path / "hosts", "n1\nn2\nn3\n")
    assert job_command("mpiexec", 2, hosts=f, only=["n3", "n1"], flavour=MPICH) == \
        ["mpiexec", "-hosts", "n3,n1", "-ppn", "1", "-n", "2"]
    rsh = write(tmp_path / "rsh", f"#!/bin/sh\n# Written by {LOCAL_CLUSTER_MARK}\n", 0o755)
    assert job_command("mpiexec", 1, hosts=f, only=["n2"], flavour=MPICH) == ["mpiexec", "-hosts", "n2", "-ppn", "1", "-launcher",
                                                               "rsh", "-launcher-exec", rsh, "-n", "1"]
    with pytest.raises(JobCommandError, match="does not list n9"):
        job_command("mpiexec", 1, hosts=f, only=["n9"], flavour=MPICH)
    with pytest.raises(JobCommandError, match="lists 1 host\\(s\\), but 2 ranks"):
        job_command("mpiexec", 2, hosts=f, only=["n2"], flavour=MPICH)
    with pytest.raises(JobCommandError, match="give the host file too"):
        job_command("mpiexec", 1, only=["n2"], flavour=MPICH)


def test_srun_leaves_out_the_excluded_nodes():
    assert job_command("mpiexec", 2, launch="srun", exclude=["b", "d"], flavour=MPICH) == \
        ["srun", "-N", "2", "-n", "2", "--mpi=pmi2", "--exclude=b,d"]
    assert job_command("mpiexec", 2, launch="srun", kill_on_bad_exit=True, flavour=MPICH) == \
        ["srun", "-N", "2", "-n", "2", "--mpi=pmi2", "--kill-on-bad-exit=1"]
    with pytest.raises(JobCommandError, match="exclude is for srun"):
        job_command("mpiexec", 2, exclude=["b"], flavour=MPICH)


def test_a_host_is_checked_through_the_launcher_the_job_would_use(tmp_path):
    f = write(tmp_path / "hosts", "n1\n")
    assert probe_command(f, "n1") == ["ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=5", "n1", "true"]
    rsh = write(tmp_path / "rsh", f"#!/bin/sh\n# Written by {LOCAL_CLUSTER_MARK}\n", 0o755)
    assert probe_command(f, "n1") == [rsh, "n1", "true"]
