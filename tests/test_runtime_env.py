"""Bad values in hpcbsp's environment variables get one line naming the variable, not a
ValueError traceback (issue 14).  Oracle: the variable's documented meaning
(docs/environment.md) and the exit status and stderr of a fresh process."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest
from mpi_helpers import clean_env

from hpcbsp.runtime.errors import BSPError, env_number

pytestmark = pytest.mark.skipif(int(os.environ.get("PMI_SIZE", "1")) > 1,
                                reason="starts its own processes: runs in the serial pass")


@pytest.mark.parametrize("text, kind, minimum, expect", [
    ("30", float, 0.0, 30.0), (" 2.5 ", float, 0.0, 2.5), ("", float, 0.0, None),
    ("65536", int, 1, 65536), ("1", int, 1, 1),
])
def test_good_values(monkeypatch, text, kind, minimum, expect):
    monkeypatch.setenv("HPCBSP_TEST_VAR", text)
    assert env_number("HPCBSP_TEST_VAR", kind, minimum) == expect


@pytest.mark.parametrize("text, kind, minimum", [
    ("abc", float, 0.0), ("0", float, 0.0), ("-1", float, 0.0), ("nan", float, 0.0),
    ("inf", float, 0.0), ("1.5", int, 1), ("0", int, 1), ("x", int, 1),
])
def test_bad_values_name_the_variable(monkeypatch, text, kind, minimum):
    monkeypatch.setenv("HPCBSP_TEST_VAR", text)
    with pytest.raises(BSPError, match=rf"environment variable HPCBSP_TEST_VAR='{text}' is not"):
        env_number("HPCBSP_TEST_VAR", kind, minimum)


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
