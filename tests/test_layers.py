"""Imports point down the layers (docs/architecture.md): no module imports a layer above its own.

Oracle: the layer table below, which docs/architecture.md draws; every ``import`` in every module
of hpcbsp (at module level or inside a function: a lazy import of a layer above is a dependency
too) is resolved to the hpcbsp package it names.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "hpcbsp"

#: Each package's layer; a module may import its own package and packages of lower layers.
LAYERS = {
    "util": 0,      # dependency-free helpers (no hpcbsp imports at all)
    "kernels": 1,   # local compute, no MPI
    "runtime": 2,   # the BSP runtime
    "fabsp": 3,     # FA-BSP mailboxes, on the runtime's extension interface
    "farm": 4,      # the BSF master/worker skeleton
    "elastic": 4,   # elastic synchronisation (parameter server, policies)
    "cost": 5,      # cost models (read ledgers and farm reports)
    "report": 5.5,  # hpcbsp report (reads saved ledgers with cost's readers)
    "apps": 6,      # example applications
    "cli": 7,       # command lines
    "bench": 7,     # benchmarks (run apps against baselines)
}
#: The hpcbsp package itself: its __init__ imports kernels, the runtime and fabsp (the public
#: names, and fabsp's bsp.mailbox), so it sits just above fabsp.
PACKAGE = 3.5
#: Modules directly in hpcbsp/ (``__main__``): above everything.
TOP = 8


def _package_of(module: str) -> str | None:
    """``hpcbsp.runtime.api.context`` -> ``runtime``; the root package -> ``""``; not hpcbsp -> None."""
    parts = module.split(".")
    if parts[0] != "hpcbsp":
        return None
    return parts[1] if len(parts) > 1 else ""


def _imports(path: Path) -> list[tuple[int, str]]:
    """Every (line, absolute module) this file imports, relative imports resolved.

    ``from .. import kernels`` (no module) imports the submodule ``kernels`` of the parent.
    """
    rel = path.relative_to(ROOT.parent).with_suffix("")
    package = list(rel.parts[:-1])  # the package this module is in (for __init__: itself)
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = ".".join(package[: len(package) - (node.level - 1)]) if node.level else ""
            if node.module is None:  # a submodule of base, or a name defined in base
                where = ROOT.parent.joinpath(*base.split("."))
                found += [(node.lineno, f"{base}.{alias.name}" if (where / alias.name).is_dir()
                           or (where / f"{alias.name}.py").exists() else base) for alias in node.names]
            else:
                found.append((node.lineno, f"{base}.{node.module}" if base else node.module))
    return found


def _modules() -> list[Path]:
    return sorted(p for p in ROOT.rglob("*.py") if "__pycache__" not in p.parts)


def _violations() -> list[str]:
    bad = []
    for path in _modules():
        rel = path.relative_to(ROOT)
        own = rel.parts[0] if len(rel.parts) > 1 else ""
        if own == "":
            continue  # the root package and hpcbsp/__main__.py sit above every layer
        mine = LAYERS[own]
        for line, module in _imports(path):
            pkg = _package_of(module)
            if pkg is None or pkg == own:
                continue
            if own == "util":
                bad.append(f"{rel}:{line}: util imports {module} (util has no hpcbsp imports)")
                continue
            theirs = PACKAGE if pkg == "" else LAYERS.get(pkg, TOP)
            if theirs >= mine:
                bad.append(f"{rel}:{line}: {own} (layer {mine}) imports {module} (layer {theirs})")
    return bad


def test_every_package_has_a_layer():
    packages = {p.name for p in ROOT.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert packages == set(LAYERS), "add the new package to LAYERS here and to docs/architecture.md"


def test_imports_point_down():
    assert _violations() == []


def test_kernels_know_nothing_of_mpi():
    users = [str(p.relative_to(ROOT)) for p in (ROOT / "kernels").rglob("*.py")
             if any(m.startswith("mpi4py") for _, m in _imports(p))]
    assert users == []


def test_the_checker_sees_an_upward_import(tmp_path, monkeypatch):
    # The oracle of the check itself: a runtime module that imports fabsp lazily is reported.
    fake_root = tmp_path / "hpcbsp"
    for pkg in LAYERS:
        (fake_root / pkg).mkdir(parents=True)
        (fake_root / pkg / "__init__.py").write_text("")
    (fake_root / "runtime" / "bad.py").write_text("def f():\n    from ..fabsp.mailbox import Mailbox\n")
    (fake_root / "fabsp" / "good.py").write_text("from ..runtime import errors\nfrom .. import kernels\n")
    monkeypatch.setattr(__import__(__name__), "ROOT", fake_root)
    assert _violations() == ["runtime/bad.py:2: runtime (layer 2) imports hpcbsp.fabsp.mailbox (layer 3)"]


@pytest.mark.parametrize("module", ["hpcbsp.runtime", "hpcbsp.fabsp"])
def test_importing_a_layer_imports_nothing_above_it(module):
    # Also at run time: importing the runtime alone loads no layer above it.  A fresh interpreter,
    # since this one has imported everything.
    import subprocess
    import sys

    from mpi_helpers import clean_env

    code = (f"import sys, {module}; "
            "print(sorted({m.split('.')[1] for m in sys.modules if m.startswith('hpcbsp.')}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env=clean_env(), stdin=subprocess.DEVNULL)
    assert out.returncode == 0, out.stderr
    loaded = set(eval(out.stdout.strip().splitlines()[-1]))
    mine = LAYERS[module.split(".")[1]]
    # `import hpcbsp.runtime` runs hpcbsp/__init__ first, which loads the top's choice of layers
    # (runtime and fabsp, see docs/architecture.md); nothing above fabsp may come with it.
    assert {pkg for pkg in loaded if LAYERS.get(pkg, TOP) > max(mine, LAYERS["fabsp"])} == set()


#: runtime/'s own layers (docs/architecture.md): its shared modules (errors, environment, launch
#: checks) at the bottom, then failure handling, the superstep machinery, and the API users meet.
RUNTIME_LAYERS = {"": 0, "failure": 1, "superstep": 2, "api": 3}


def _runtime_layer(module: str) -> float | None:
    """``hpcbsp.runtime.superstep.control`` -> 2; ``hpcbsp.runtime.errors`` -> 0; the package
    ``hpcbsp.runtime`` itself (its public names) -> above all; not runtime -> None."""
    parts = module.split(".")
    if parts[:2] != ["hpcbsp", "runtime"]:
        return None
    if len(parts) == 2:
        return len(RUNTIME_LAYERS)
    return RUNTIME_LAYERS.get(parts[2], 0)


def _runtime_violations() -> list[str]:
    """Imports inside runtime/ that point up its layers.  An import under ``if TYPE_CHECKING:`` is
    a type annotation's, not a dependency at run time, and is allowed."""
    bad = []
    for path in sorted(p for p in (ROOT / "runtime").rglob("*.py") if "__pycache__" not in p.parts):
        rel = path.relative_to(ROOT / "runtime")
        if rel == Path("__init__.py"):
            continue
        mine = RUNTIME_LAYERS.get(rel.parts[0], 0) if len(rel.parts) > 1 else 0
        tree = ast.parse(path.read_text(), str(path))
        typing_only = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If)
                       and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"
                       for stmt in node.body for n in ast.walk(stmt)}
        typing_lines = {node.lineno for node in ast.walk(tree)
                        if id(node) in typing_only and isinstance(node, (ast.Import, ast.ImportFrom))}
        for line, module in _imports(path):
            theirs = _runtime_layer(module)
            if theirs is not None and theirs > mine and line not in typing_lines:
                bad.append(f"runtime/{rel}:{line}: layer {mine} imports {module} (layer {theirs})")
    return bad


def test_runtime_sub_packages_import_down():
    assert _runtime_violations() == []


def test_every_runtime_sub_package_has_a_layer():
    subs = {p.name for p in (ROOT / "runtime").iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert subs == set(RUNTIME_LAYERS) - {""}, "add the new sub-package to RUNTIME_LAYERS and docs/architecture.md"


def test_the_runtime_checker_sees_an_upward_import(tmp_path, monkeypatch):
    # The oracle of the check itself: failure/ importing the superstep machinery is reported, a
    # typing-only import of the API is not.
    runtime = tmp_path / "hpcbsp" / "runtime"
    for sub in ("failure", "superstep", "api"):
        (runtime / sub).mkdir(parents=True)
        (runtime / sub / "__init__.py").write_text("")
    (runtime / "failure" / "bad.py").write_text("def f():\n    from ..superstep import control\n")
    (runtime / "superstep" / "ok.py").write_text(
        "from typing import TYPE_CHECKING\nfrom ..errors import BSPError\nif TYPE_CHECKING:\n    from ..api.coarray import Coarray\n")
    monkeypatch.setattr(__import__(__name__), "ROOT", tmp_path / "hpcbsp")
    assert _runtime_violations() == [
        "runtime/failure/bad.py:2: layer 1 imports hpcbsp.runtime.superstep (layer 2)"]
