"""Whether the program ``hpcbsp supervise`` is to run can run hpcbsp, checked before the launch.

A program started as ``python ...`` runs under the ``python`` first on the job's PATH, which is
often another than the one hpcbsp is installed in (a virtualenv not activated, a system Python):
every rank would then fail at ``import hpcbsp``, after the launch.  :func:`python_without_hpcbsp`
asks that interpreter, once, on this machine, whether it finds hpcbsp (``find_spec``: nothing is
imported), so that the supervisor can refuse in one line naming it and the one that has hpcbsp.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from typing import Mapping

#: Seconds the check that the program's Python has hpcbsp may take (it starts that Python once).
PYTHON_CHECK_S = 30.0


def python_without_hpcbsp(command: str, env: Mapping[str, str]) -> str | None:
    """Why the program cannot run hpcbsp, when it is a Python interpreter (``python``,
    ``python3.11``, a path to one) that cannot import hpcbsp in the environment the job gets
    (the ``python`` first on PATH is often another than the one hpcbsp is installed in); None
    when it can, when it is no Python, or when that cannot be told here (the check itself
    failed or ran out of time: the launch then says what it says).  The check runs that
    Python on this machine once, asking only where hpcbsp would be found (nothing is imported)."""
    found = shutil.which(command, path=env.get("PATH"))
    if found is None or not re.fullmatch(r"python[0-9.]*", os.path.basename(command)):
        return None
    probe = "import importlib.util, sys; sys.exit(3 if importlib.util.find_spec('hpcbsp') is None else 0)"
    try:
        done = subprocess.run([found, "-c", probe], env=dict(env), stdin=subprocess.DEVNULL, capture_output=True,
                              timeout=PYTHON_CHECK_S)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 3:
        return None
    here = sys.executable
    return (f"the program's {command} is {found}, which cannot import hpcbsp (this hpcbsp runs under {here}): "
            f"give that Python after -- (-- {here} ...), or activate the virtualenv that has hpcbsp")
