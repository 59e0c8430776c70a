"""``hpcbsp-cost calibrate -- COMMAND ...``: run a BSF program at a few small K, write RUNS.csv and MODEL.json.

COMMAND must run a program built on :mod:`hpcbsp.farm`: the farm appends its measured
timings to the file named by ``$HPCBSP_FARM_REPORT``, which this command sets for every run.
Each K runs under ``mpiexec -n K+1`` (rank 0 is the master); a leading ``python`` in COMMAND is
replaced by this interpreter so the runs use the same environment.

The model written is what the runs measured of themselves: every iteration of every run
decomposed at its own K into the BSF parameters, pooled, medians, with a bootstrap over the
iterations (:func:`hpcbsp.cost.farmmodel.model_from_farm_runs`).  The components model of the
smallest K alone is also checked against every measured K.  (``hpcbsp-cost fit`` fits T(K)
instead, for programs that do not report their components.)

``exchange`` selects the farm's exchange (``$HPCBSP_FARM_EXCHANGE`` of the runs; the model takes
the same communication form).  ``emulate`` runs the workers' compute emulated
(``$HPCBSP_FARM_EMULATE``, :mod:`hpcbsp.farm.emulation`): ``measure`` has the first run measure
the Map's time and every later run wait exactly that; the summary, the model file and every line
printed then say that this is a simulation of compute.
"""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from dataclasses import replace
from typing import Any, Sequence, TextIO

import numpy as np

from ..farm.emulation import EMULATE_ENV, NOTICE, FarmEmulation, parse_emulation
from ..farm.params import PARAM_NAMES
from ..farm.skeleton import EXCHANGE_ENV
from ..farm.timings import REPORT_ENV
from ..runtime.launch import find_mpiexec
from ..util.choices import EXCHANGES
from ..util.jobcommand import JobCommandError, job_command, read_hosts
from ..util.mpiflavour import child_env, mpiexec_flavour, program_output, root_refusal, timeout_env
from ..util.progress import Progress
from ..util.text import plural
from .errors import CostInputError
from .farmmodel import model_from_farm_runs
from .modelfile import CalibratedModel, save_model
from .runs import Runs, write_runs
from .suggest import format_suggestion, suggest
from .validate import validation

RUN_COLUMNS = ("workers", "seconds", "repeat", "list_length", "iterations", *PARAM_NAMES[:-1])


def _command(command: Sequence[str]) -> list[str]:
    cmd = list(command)
    if cmd and os.path.basename(cmd[0]) in ("python", "python3"):
        cmd[0] = sys.executable
    return cmd


def _clean_env(report: str, timeout: float, farm_env: dict[str, str] | None = None) -> dict[str, str]:
    # Without the launcher's variables of an enclosing job (any MPI's) and MPICH's settings.
    env = child_env(os.environ, drop=("MPIR_",))
    env.update(farm_env or {})
    env[REPORT_ENV] = report
    env.update(timeout_env(timeout))  # whole seconds: 0.5 must not become 0 (none)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def run_once(command: Sequence[str], workers: int, repeat: int, out_dir: str, *, timeout: float,
             mpiexec: str, farm_env: dict[str, str] | None = None, hosts: str | None = None,
             launch: str = "mpiexec") -> dict[str, Any]:
    """One run at K workers; returns the last farm report it wrote.

    ``farm_env``: extra environment of the run (the farm's exchange and emulation settings);
    ``hosts``, ``launch``: where the K + 1 ranks run (:func:`hpcbsp.util.jobcommand.job_command`).
    """
    report = os.path.join(out_dir, f"report-K{workers}-r{repeat}.jsonl")
    log = os.path.join(out_dir, f"run-K{workers}-r{repeat}.log")
    if os.path.exists(report):
        os.remove(report)
    try:
        cmd = [*job_command(mpiexec, workers + 1, hosts=hosts, launch=launch), *_command(command)]
    except JobCommandError as exc:
        raise CostInputError(str(exc)) from None
    limit = max(1, math.ceil(timeout))
    t0 = time.monotonic()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=limit + 15,
                              env=_clean_env(report, timeout, farm_env), stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise CostInputError(f"the run at K = {workers} did not finish within {timeout:g} s: {' '.join(cmd)}") from None
    except OSError as exc:
        raise CostInputError(f"cannot start {cmd[0]}: {exc.strerror or exc}") from None
    with open(log, "w") as fh:
        fh.write(f"$ {' '.join(cmd)}\n{proc.stdout}\n--- stderr ---\n{proc.stderr}")
    # Cut off by MPIEXEC_TIMEOUT: mpiexec says so with a status of its own (255 from hydra), but a launcher may also end
    # the job quietly; a run that reached the limit without a report was cut off either way.
    if (proc.returncode != 0 or not os.path.exists(report)) and time.monotonic() - t0 >= limit:
        raise CostInputError(f"the run at K = {workers} timed out after {limit} s (--timeout {timeout:g}); "
                             f"give a larger --timeout or a smaller problem (log: {log})")
    if proc.returncode != 0:  # the program's last line, not one of the MPI's own (Open MPI adds a block)
        last = (program_output(mpiexec_flavour(mpiexec), proc.stderr).strip().splitlines() or ["(no output)"])[-1]
        raise CostInputError(f"the run at K = {workers} failed with status {proc.returncode}: {last} (log: {log})")
    try:
        with open(report) as fh:
            lines = [json.loads(line) for line in fh if line.strip()]
    except FileNotFoundError:
        lines = []
    if not lines:
        raise CostInputError(f"the program wrote no farm report at K = {workers}: calibrate needs a program "
                             f"built on hpcbsp.farm (log: {log})")
    return lines[-1]


def model_from_reports(by_k: dict[int, list[dict[str, Any]]], length: int, *,
                       n_boot: int = 200) -> tuple[CalibratedModel, str, CalibratedModel]:
    """The calibrated model from farm reports at a few K: ``(model, method, components)``.

    The model is what the runs measured of themselves, every run's iterations pooled over every
    K (:func:`~hpcbsp.cost.farmmodel.model_from_farm_runs`), in the farm's exchange form;
    ``components`` is the same from the smallest K alone, the white-box check against every
    measured K that ``calibrate`` prints.  The runs' T(K) are not fitted: at K <= 3 a fit of
    T(K) infers the exchange from the small differences between a few T and swung from 15
    to 27 ms per worker between two calibrations on 33 emulated nodes, where the pooled
    iterations measured 24.4 and 25.0 ms (docs/notes/performance-journal.md, "BSF prediction
    across 33 emulated nodes").  An emulated run's model says
    so in its ``fit`` record.
    """
    smallest = min(by_k)
    reports = [r for k in sorted(by_k) for r in by_k[k]]
    model = model_from_farm_runs(reports, n_boot=n_boot)
    components = model_from_farm_runs(by_k[smallest], n_boot=n_boot)
    for cm in (model, components):
        if length != cm.model.params.list_length:
            cm.model = cm.model.with_params(replace(cm.model.params, list_length=length))
    emulated = by_k[smallest][0].get("emulated")
    if emulated:
        model.fit["emulated_compute"] = dict(emulated)
        model.fit["notice"] = NOTICE
    return model, "components of every run", components


def run_record(by_k: dict[int, list[dict[str, Any]]]) -> dict[str, Any]:
    """What :func:`~hpcbsp.cost.suggest.suggest` reads of the runs: ``run_noise``, the relative
    standard deviation of one run's T (the repeats' spread about their mean at each K, pooled over
    the K that have repeats; None without any), and ``iterations_per_run`` (the median)."""
    devs = [np.asarray(t) / np.mean(t) - 1.0 for t in
            ([r["seconds_per_iteration"] for r in reports] for reports in by_k.values()) if len(t) >= 2]
    dof = sum(d.size - 1 for d in devs)
    return {"run_noise": float(np.sqrt(sum(float(d @ d) for d in devs) / dof)) if dof else None,
            "iterations_per_run": int(np.median([r["iterations"] for v in by_k.values() for r in v]))}


def calibrate(command: Sequence[str], *, workers: Sequence[int] = (1, 2, 3), repeats: int = 2,
              out_dir: str = "runs/calibrate", timeout: float = 300.0, mpiexec: str | None = None,
              list_length: int | None = None, n_boot: int = 200,
              progress: TextIO | None = None, exchange: str | None = None,
              emulate: str | None = None, hosts: str | None = None, launch: str = "mpiexec",
              until_width: int | None = None, max_workers: int | None = None,
              max_suggested: int = 8) -> dict[str, Any]:
    """Run, record and model; returns a summary document (the ``--json`` output).

    ``hosts``: a host file, one rank per host (the emulated cluster's launcher when it is that
    cluster's); ``launch="srun"``: one task per node of the Slurm allocation.  ``until_width``:
    after ``workers``, measure where :func:`~hpcbsp.cost.suggest.suggest` says (``repeats`` runs at
    each suggested K, K <= ``max_workers``, default: one per host but the master's, else the CPUs)
    until the K_max interval is at most this wide, or after ``max_suggested`` suggestions.
    """
    farm_env: dict[str, str] = {}
    if exchange is not None:
        if exchange not in EXCHANGES:
            raise CostInputError(f"unknown exchange {exchange!r}; choose from {', '.join(EXCHANGES)}")
        farm_env[EXCHANGE_ENV] = exchange
    emulation: FarmEmulation | None = None
    if emulate is not None:
        try:
            emulation = parse_emulation(emulate)
        except ValueError as exc:
            raise CostInputError(str(exc)) from None
        farm_env[EMULATE_ENV] = emulation.spec()
    mpiexec = mpiexec or find_mpiexec()
    if not mpiexec and launch == "mpiexec":
        raise CostInputError("no mpiexec found beside this Python or on PATH; give --mpiexec")
    mpiexec = mpiexec or "mpiexec"
    try:  # a bad host file is found before any run
        job_command(mpiexec, max(int(w) for w in workers) + 1, hosts=hosts, launch=launch)
    except JobCommandError as exc:
        raise CostInputError(str(exc)) from None
    refusal = root_refusal(mpiexec_flavour(mpiexec)) if launch == "mpiexec" else None
    if refusal:  # found before any run, not as K failed runs
        raise CostInputError(f"{mpiexec}: {refusal}")
    if hosts:  # one rank per host, the master's included
        max_workers = min(max_workers or 1 << 62, len(read_hosts(hosts)) - 1)
    max_workers = max_workers or os.cpu_count() or 1
    where = ", one per host of " + hosts if hosts else ", by srun" if launch == "srun" else ""
    os.makedirs(out_dir, exist_ok=True)
    rows: list[dict[str, Any]] = []
    by_k: dict[int, list[dict[str, Any]]] = {}
    cpus = os.cpu_count() or 1
    # Ranks spread over hosts (or nodes) share no cores with each other; on this machine they do.
    oversubscribed_k = set() if hosts or launch == "srun" else {int(w) for w in workers if int(w) + 1 > cpus}
    # A line per run; to stderr only where Progress says (a terminal, or $HPCBSP_PROGRESS=1).
    show = Progress("calibrate", len(set(workers)) * repeats, unit="run", enabled=progress is not None,
                    stream=None if progress is sys.stderr else progress, every_s=0.0)

    def measure(k: int) -> None:
        nonlocal emulation
        first = len(by_k.get(k, []))
        for rep in range(first, first + repeats):
            show.note(f"running K = {k} ({k + 1} ranks{where}), repeat {rep + 1 - first}/{repeats} ...")
            report = run_once(command, k, rep, out_dir, timeout=timeout, mpiexec=mpiexec, farm_env=farm_env,
                              hosts=hosts, launch=launch)
            if emulation is not None and not report.get("emulated"):
                raise CostInputError(f"the program ignored ${EMULATE_ENV} (its farm report at K = {k} is of "
                                     "real compute); it must call hpcbsp.farm.run_farm without emulate=")
            if emulation is not None and emulation.measured:
                # The first run measured the Map; every later run waits exactly that long.
                t_map = float(report["emulated"]["t_map"])
                emulation = FarmEmulation(t_map, report["emulated"]["t_a"])
                farm_env[EMULATE_ENV] = emulation.spec()
                if progress is not None:  # what the results are (not progress): said wherever stderr goes
                    progress.write(f"calibrate: {NOTICE}; t_Map = {1e3 * t_map:.3f} ms measured "
                                   "by the first run, used by every run\n")
            by_k.setdefault(k, []).append(report)
            rows.append({"workers": k, "seconds": report["seconds_per_iteration"], "repeat": rep,
                         **{c: report[c] for c in RUN_COLUMNS[3:]}})
            note = " (oversubscribed)" if k in oversubscribed_k else ""
            show(len(rows), f"K = {k} repeat {rep + 1 - first}/{repeats}: {1e3 * report['seconds_per_iteration']:.3f} ms "
                            f"per iteration, {report['iterations']} iterations{note}")

    for k in sorted(set(int(w) for w in workers)):
        measure(k)
    suggested: list[int] = []
    while until_width is not None and len(suggested) < max_suggested:
        model, _, _ = model_from_reports(by_k, list_length or int(rows[0]["list_length"]), n_boot=n_boot)
        model.fit.update(run_record(by_k))
        lo, hi = model.k_max_interval()
        if lo is not None and hi is not None and hi - lo <= until_width:
            break
        step = suggest(model, repeats=repeats, max_workers=max_workers)
        if step["k"] is None:
            break
        show.note(format_suggestion(step).splitlines()[1])
        suggested.append(int(step["k"]))
        show.total = (show.total or 0) + repeats
        oversubscribed_k |= set() if hosts or launch == "srun" or step["k"] + 1 <= cpus else {int(step["k"])}
        measure(int(step["k"]))
    runs_path = os.path.join(out_dir, "RUNS.csv")
    model_path = os.path.join(out_dir, "MODEL.json")
    write_runs(runs_path, rows, RUN_COLUMNS)
    runs = Runs.from_arrays([r["workers"] for r in rows], [r["seconds"] for r in rows], source=runs_path)
    length = list_length or int(rows[0]["list_length"])
    smallest = min(by_k)
    model, method, components = model_from_reports(by_k, length, n_boot=n_boot)
    model.fit["command"] = " ".join(command)
    model.fit.update(run_record(by_k))
    emulated = by_k[smallest][0].get("emulated")
    comm = model.model.comm
    save_model(model_path, model)
    check = validation(components, runs)
    lo, hi = model.k_max_interval()
    oversubscribed = sorted(oversubscribed_k)
    return {
        "runs_csv": runs_path, "model_json": model_path, "method": method,
        "workers": sorted(by_k), "repeats": repeats, "list_length": length,
        "k_max": model.model.k_max(), "k_max_interval": [lo, hi], "k_bsf": model.model.k_bsf(),
        "params": model.model.params.as_dict(), "comm": model.model.comm, "granularity": model.model.granularity,
        "components_check": {"from_workers": smallest, "mape": check["mape"], "max_ape": check["max_ape"],
                             "points": check["points"]},
        "oversubscribed_workers": oversubscribed, "exchange": comm,
        "emulated_compute": emulated or None,
        "suggested_workers": suggested, "until_width": until_width,
    }


def format_calibration(doc: dict[str, Any]) -> str:
    """The calibration summary for people."""
    p = doc["params"]
    lo, hi = doc["k_max_interval"]
    lines = [f"{NOTICE} (t_Map = {1e3 * doc['emulated_compute']['t_map']:.3f} ms per iteration on one worker)"] \
        if doc.get("emulated_compute") else []
    lines += [f"calibrated from {plural(doc['repeats'], 'run')} at each K in {doc['workers']} ({doc['method']}); "
             f"l = {doc['list_length']}",
             f"model: {doc['comm']} exchange, {doc['granularity']} granularity; L = {p['latency']:.3g} s, "
             f"t_c = {p['t_c']:.3g} s, t_Map = {p['t_map']:.3g} s, t_a = {p['t_a']:.3g} s, t_p = {p['t_p']:.3g} s",
             f"K_max = {doc['k_max'] if doc['k_max'] else 'none (no turnover)'}, "
             f"95% interval [{lo}, {hi if hi is not None else 'no turnover'}]",
             f"model measured at K = {doc['components_check']['from_workers']} vs every measured K:"]
    for q in doc["components_check"]["points"]:
        lines.append(f"  K = {q['workers']:>3}: measured {1e3 * q['measured_mean']:.3f} ms, predicted "
                     f"{1e3 * q['predicted']:.3f} ms, mean |error| {q['mape']:.1f} % over {plural(q['runs'], 'run')}")
    if doc["oversubscribed_workers"] and not doc.get("emulated_compute"):
        lines.append(f"note: K = {doc['oversubscribed_workers']} ran more ranks than this machine has cores; "
                     "their times measure oversubscription, not the model")
    if doc.get("until_width") is not None:
        lo, hi = doc["k_max_interval"]
        narrow = lo is not None and hi is not None and hi - lo <= doc["until_width"]
        lines.append(f"run where suggest said: K = {', '.join(map(str, doc['suggested_workers'])) or 'none'}; the "
                     f"interval is {'' if narrow else 'not yet '}at most {doc['until_width']} wide")
    lines.append(f"wrote {doc['runs_csv']} and {doc['model_json']}")
    return "\n".join(lines)
