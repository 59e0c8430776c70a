"""Bad values in hpcbsp's environment variables get one line naming the variable, not a
ValueError traceback (issue 14), through the runtime's access to them
(:mod:`hpcbsp.runtime.environment`).  Oracle: the variable's documented meaning
(docs/environment.md) and the exit status and stderr of a fresh process."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest
from mpi_helpers import clean_env

from hpcbsp.runtime.environment import setting
from hpcbsp.runtime.errors import BadInput

pytestmark = pytest.mark.skipif(int(os.environ.get("PMI_SIZE", "1")) > 1,
                                reason="starts its own processes: runs in the serial pass")


@pytest.mark.parametrize("name, text, expect", [
    ("HPCBSP_SYNC_TIMEOUT", "30", 30.0), ("HPCBSP_SYNC_TIMEOUT", " 2.5 ", 2.5), ("HPCBSP_SYNC_TIMEOUT", "", None),
    ("HPCBSP_ABORT_GRACE", "", 10.0), ("HPCBSP_MAILBOX_BYTES", "65536", 65536), ("HPCBSP_MAILBOX_BYTES", "1", 1),
])
def test_good_values(monkeypatch, name, text, expect):
    monkeypatch.setenv(name, text)
    assert setting(name) == expect


@pytest.mark.parametrize("name, text", [
    ("HPCBSP_SYNC_TIMEOUT", "abc"), ("HPCBSP_SYNC_TIMEOUT", "0"), ("HPCBSP_SYNC_TIMEOUT", "-1"),
    ("HPCBSP_SYNC_TIMEOUT", "nan"), ("HPCBSP_ABORT_GRACE", "inf"), ("HPCBSP_MAILBOX_BYTES", "1.5"),
    ("HPCBSP_MAILBOX_BYTES", "0"), ("HPCBSP_MAILBOX_BYTES", "x"),
])
def test_bad_values_name_the_variable(monkeypatch, name, text):
    monkeypatch.setenv(name, text)
    with pytest.raises(BadInput, match=rf"environment variable {name}='{text}' is not"):
        setting(name)


@pytest.mark.parametrize("var, value", [("HPCBSP_SYNC_TIMEOUT", "soon"),
                                        ("HPCBSP_MAILBOX_BYTES", "big")])
def test_a_program_with_a_bad_variable_ends_in_one_line(var, value):
    code = ("import numpy as np, hpcbsp\n"
            "def prog(bsp):\n"
            "    box = bsp.mailbox(lambda r: None, np.int64)\n"
            "    bsp.sync()\n"
            "hpcbsp.run(prog)\n")
    env = clean_env()
    env[var] = value
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, timeout=120, stdin=subprocess.DEVNULL)
    assert proc.returncode != 0
    assert f"{var}='{value}' is not" in proc.stderr
    assert "Traceback" not in proc.stderr and "ValueError" not in proc.stderr, proc.stderr
