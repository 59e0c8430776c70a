"""``hpcbsp info``: what this installation and this launch look like.

The MPI part names the library and its version, which implementation that is (MPICH, Open MPI,
Intel MPI: :mod:`hpcbsp.util.mpiflavour`), the mpiexec beside this Python and whether it belongs
to the same MPI, the launcher that started this job, the transport between nodes (the variables
set that choose it, or that the library chooses) and the environment variables that matter for
that MPI: those set (``mpi_settings``) and what each of the important ones does
(``mpi_variables``); which allreduce every sync begins with (``control_step``); and every
``HPCBSP_*`` variable set (``hpcbsp_settings``), a bad value or an unknown name marked as such
with the reason.  Unlike every other command, ``hpcbsp info`` runs with a bad ``HPCBSP_*``
value (it is where one looks at them): it shows it, marked ``INVALID``, and its exit status
does not change (0, or 1 for a launch that cannot work).
"""
from __future__ import annotations

import json
import platform
import socket
import sys
from typing import Any

from .. import __version__
from ..runtime.launch import detect_launch, find_mpiexec, machine_id, transport_advice, transport_settings
from ..util import settings
from ..util.args.parser import OneLineParser
from ..util.mpiflavour import library_flavour, library_name, mpiexec_flavour


def gather_info() -> dict[str, Any]:
    """Collective over MPI.COMM_WORLD: versions, MPI library, world size, launch, kernels."""
    import mpi4py
    import numpy
    from mpi4py import MPI

    from .. import kernels

    world = MPI.COMM_WORLD
    library = MPI.Get_library_version()
    flavour = library_flavour(library)
    host = socket.gethostname()
    hosts = world.gather(host, root=0)
    machines = world.gather(machine_id(), root=0)
    transports = world.gather(transport_settings(flavour=flavour), root=0)
    launch = detect_launch()
    device = next((line.split(":", 1)[1].strip() for line in library.splitlines()
                   if line.strip().startswith("MPICH Device:")), None)
    mpiexec = find_mpiexec()
    mpiexec_kind = mpiexec_flavour(mpiexec) if mpiexec else None
    info: dict[str, Any] = {
        "hpcbsp": __version__,
        "python": platform.python_version(),
        "numpy": numpy.__version__,
        "mpi4py": mpi4py.__version__,
        "mpi_library": library_name(library),
        "mpi": flavour.title,
        "mpi_standard": "{}.{}".format(*MPI.Get_version()),
        "world_size": world.Get_size(),
        **launch.as_dict(),
        # The MPI's own launcher and the mpiexec of this environment, which must be the same MPI's.
        "mpi_launcher": flavour.launcher,
        "mpiexec": (f"{mpiexec} ({mpiexec_kind.title})" if mpiexec and mpiexec_kind else None),
        "mpiexec_mismatch": (f"{mpiexec} is {mpiexec_kind.title}'s but mpi4py runs on {flavour.title}: "
                             "launch with the mpiexec of the same MPI"
                             if mpiexec_kind and mpiexec_kind.known and flavour.known
                             and mpiexec_kind is not flavour else None),
        "hosts": sorted(set(hosts)) if hosts else None,
        # Ranks per host, and what the environment tells MPI about its transport (rank 0's; the
        # MPICH device names the netmods it was built with). None where MPI does not say.
        "ranks_per_host": ({h: hosts.count(h) for h in sorted(set(hosts))} if hosts else None),
        "mpi_device": device,
        "transport": (transports[0] or "chosen by the MPI library") if transports else None,
        "transport_advice": (transport_advice(hosts, machines or [], transports[0], flavour)
                             if hosts and transports else None),
        "mpi_settings": flavour.settings() or "none set (the library's defaults)",
        "mpi_variables": [f"{name}: {what}" for name, what in flavour.variables] or None,
        "control_step": _control_step(flavour.title),
        "hpcbsp_settings": hpcbsp_settings() or "none set (the defaults)",
        "kernels": kernels.compiled_status(),
        "exact_sum": ("extraction fast path on" if kernels.exact_sum_fast_path_enabled() else
                      "integer bins only (the build or the floating-point environment rules out "
                      "the extraction fast path: round-to-nearest without flush-to-zero needed)"),
    }
    return info


def hpcbsp_settings() -> dict[str, dict[str, str | None]]:
    """Every ``HPCBSP_*`` variable set: ``{name: {"value": ..., "problem": ...}}``
    (:func:`hpcbsp.util.settings.shown`: ``problem`` is None, ``invalid: ...`` or ``unknown: ...``)."""
    return {name: {"value": raw, "problem": problem} for name, raw, problem in settings.shown()}


def _control_step(title: str) -> str:
    """The control step's collective (every sync begins with it), whether it is compiled and
    whether it carries the lateness watch."""
    from ..runtime.environment import setting
    from ..runtime.errors import BSPError
    from ..runtime.superstep.control import requested_collective
    from ..runtime.superstep.native import why_not_compiled

    try:
        chosen = requested_collective()
        source = (f"HPCBSP_CONTROL_COLLECTIVE=auto: the faster under {title}"
                  if setting("HPCBSP_CONTROL_COLLECTIVE") == "auto" else "HPCBSP_CONTROL_COLLECTIVE")
        why = why_not_compiled(chosen)
        late = float(setting("HPCBSP_LATENESS"))
    except BSPError:  # (a bad HPCBSP_CONTROL_COLLECTIVE, HPCBSP_COMPILED_SYNC or HPCBSP_LATENESS)
        return "not known: an HPCBSP_* variable it reads is invalid (see hpcbsp_settings)"
    watch = f"lateness watch on (HPCBSP_LATENESS={1e3 * late:g} ms)" if late else "lateness watch off (HPCBSP_LATENESS)"
    return f"{chosen} MPI_Allreduce ({source}), " + (f"through mpi4py ({why})" if why else "compiled") + f", {watch}"


def main(argv: list[str] | None = None) -> int:
    parser = OneLineParser(
        prog="hpcbsp info",
        check_settings=False,  # (a bad HPCBSP_* value is shown, marked invalid: hpcbsp_settings)
        description="Report hpcbsp's versions, the MPI library (MPICH, Open MPI, Intel MPI) and the "
                    "variables that matter to it, the world size, how the job was launched (mpiexec, "
                    "srun, singleton), the transport between nodes and which kernels are compiled. Run it "
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
            elif key == "mpi_variables" and value:
                value = ("\n" + " " * (width + 2)).join(value)
            elif key == "hpcbsp_settings" and isinstance(value, dict):
                value = ("\n" + " " * (width + 2)).join(
                    f"{name}={shown['value']!r}" + (f"  {_marked(shown['problem'])}" if shown["problem"] else "")
                    for name, shown in value.items())
            elif isinstance(value, list):
                value = ", ".join(map(str, value))
            elif isinstance(value, dict):
                value = ", ".join(f"{k}={v}" for k, v in value.items())
            if value is None or key == "launch_error":
                continue
            print(f"{key:<{width}}  {value}")
    if info["mpiexec_mismatch"] and info["launcher"] == "singleton":
        print(f"warning: {info['mpiexec_mismatch']}", file=sys.stderr)
    if launch_error:
        print(f"error: {launch_error}", file=sys.stderr)
        return 1
    return 0


def _marked(problem: str) -> str:
    """``invalid: ...`` as the text report shows it: INVALID, and what it means for the other commands."""
    kind, _, why = problem.partition(": ")
    if kind == "invalid":
        return f"INVALID: {why}; every other hpcbsp command refuses to run with it (exit 2): correct it or unset it"
    return f"{kind.upper()}: {why}"
