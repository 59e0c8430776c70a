"""``hpcbsp info``: what this installation and this launch look like."""
from __future__ import annotations

import json
import platform
import socket
import sys
from typing import Any

from .. import __version__
from ..runtime.launch import detect_launch, machine_id, transport_advice, transport_settings
from ..util.args import OneLineParser


def gather_info() -> dict[str, Any]:
    """Collective over MPI.COMM_WORLD: versions, MPI library, world size, launch, kernels."""
    import mpi4py
    import numpy
    from mpi4py import MPI

    from .. import kernels

    world = MPI.COMM_WORLD
    host = socket.gethostname()
    hosts = world.gather(host, root=0)
    machines = world.gather(machine_id(), root=0)
    transports = world.gather(transport_settings(), root=0)
    launch = detect_launch()
    library = MPI.Get_library_version()
    device = next((line.split(":", 1)[1].strip() for line in library.splitlines()
                   if line.strip().startswith("MPICH Device:")), None)
    info: dict[str, Any] = {
        "hpcbsp": __version__,
        "python": platform.python_version(),
        "numpy": numpy.__version__,
        "mpi4py": mpi4py.__version__,
        "mpi_library": MPI.Get_library_version().strip().splitlines()[0].strip(),
        "mpi_standard": "{}.{}".format(*MPI.Get_version()),
        "world_size": world.Get_size(),
        **launch.as_dict(),
        "hosts": sorted(set(hosts)) if hosts else None,
        # Ranks per host, and what the environment tells MPI about its transport (rank 0's; the
        # MPICH device names the netmods it was built with). None where MPI does not say.
        "ranks_per_host": ({h: hosts.count(h) for h in sorted(set(hosts))} if hosts else None),
        "mpi_device": device,
        "transport": (transports[0] or "chosen by the MPI library") if transports else None,
        "transport_advice": (transport_advice(hosts, machines or [], transports[0])
                             if hosts and transports else None),
        "kernels": kernels.compiled_status(),
        "exact_sum": ("extraction fast path on" if kernels.exact_sum_fast_path_enabled() else
                      "integer bins only (the build or the floating-point environment rules out "
                      "the extraction fast path: round-to-nearest without flush-to-zero needed)"),
    }
    return info


def main(argv: list[str] | None = None) -> int:
    parser = OneLineParser(
        prog="hpcbsp info",
        description="Report hpcbsp's versions, the MPI library, the world size, how the job was "
                    "launched (mpiexec, srun, singleton) and which kernels are compiled. Run it "
                    "under your launcher (e.g. `srun --mpi=pmi2 -n 4 hpcbsp info`) to check a launch.")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    from ..runtime.errors import BSPError
    from ..runtime.launch import check_world

    info = gather_info()
    from mpi4py import MPI

    launch_error = None
    try:
        check_world(MPI.COMM_WORLD.Get_size())
    except BSPError as exc:
        launch_error = str(exc)
    info["launch_error"] = launch_error
    if MPI.COMM_WORLD.Get_rank() != 0:
        return 1 if launch_error else 0
    if args.json:
        print(json.dumps(info, indent=1))
    else:
        width = max(len(k) for k in info)
        for key, value in info.items():
            if key == "kernels":
                value = ", ".join(f"{k}: {'compiled' if v else 'NOT compiled'}" for k, v in value.items())
            elif isinstance(value, list):
                value = ", ".join(map(str, value))
            elif isinstance(value, dict):
                value = ", ".join(f"{k}={v}" for k, v in value.items())
            if value is None or key == "launch_error":
                continue
            print(f"{key:<{width}}  {value}")
    if launch_error:
        print(f"error: {launch_error}", file=sys.stderr)
        return 1
    return 0
