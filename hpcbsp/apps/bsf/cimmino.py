"""BSF Cimmino: solve A x = b by simultaneous projections onto the rows' hyperplanes, with the BSF farm.

    mpiexec -n P python -m hpcbsp.apps.bsf.cimmino [--n N] [--eps E] [--max-iter M] [--seed S]

The map list is the rows (a_i, b_i) of the system; the Map projects the current x onto each
row's hyperplane, F_x(i) = (b_i − a_i·x)/||a_i||² · a_i (the step to the projection); the Reduce
is vector addition; the master moves x by ``relaxation·ω`` times the sum, where
ω = 1/σ_max(D⁻¹A)² (D = diag ||a_i||) is the largest step that is safe for every system (the
classical Cimmino weights 1/m with λ ∈ (0, 2) are the special case ω·relaxation = λ/m, slower by
a factor of about m).  Rank 0 checks the answer against ``numpy.linalg.solve``.
"""
from __future__ import annotations

import argparse
import math
import sys

import numpy as np

from hpcbsp import kernels
from hpcbsp.apps.bsf.system import app_main, app_parser, vector_sum_problem
from hpcbsp.farm import BSFProblem
from hpcbsp.util.args.types import positive_float


def largest_singular_value(m: np.ndarray, iterations: int = 50, seed: int = 0) -> float:
    """σ_max(m) by power iteration on mᵀm (an estimate from below; exact enough for a step size)."""
    v = np.random.default_rng(seed).standard_normal(m.shape[1])
    sigma = 0.0
    for _ in range(iterations):
        w = m.T @ (m @ v)
        norm = math.sqrt(kernels.sqnorm(w))
        if norm == 0.0:
            return 0.0
        v = w / norm
        sigma = float(np.sqrt(norm))
    return sigma


def cimmino_problem(a: np.ndarray, b: np.ndarray, eps: float, relaxation: float = 1.0) -> BSFProblem:
    """Cimmino's method as a BSF problem (map list: the rows of the system)."""
    norms2 = np.einsum("ij,ij->i", a, a)
    sigma = largest_singular_value(a / np.sqrt(norms2)[:, None])
    # 0.95: the power iteration estimates σ_max from below; stay clear of the stability limit.
    step = 0.95 * relaxation / (sigma * sigma)

    def map_rows(x: np.ndarray, rows: slice) -> np.ndarray:
        block = a[rows]
        coef = (b[rows] - block @ x) / norms2[rows]
        return coef[:, None] * block

    def compute(x: np.ndarray, s: np.ndarray) -> np.ndarray:
        return x + step * s

    return vector_sum_problem(a.shape[0], map_rows, compute, eps)


def build(a: np.ndarray, b: np.ndarray, args: argparse.Namespace) -> BSFProblem:
    """The app's BSF problem for the options given."""
    return cimmino_problem(a, b, args.eps, args.relaxation)


def main(argv: list[str] | None = None) -> int:
    parser = app_parser("cimmino", "BSF Cimmino: solve a linear system by simultaneous projections with the BSF "
                                   "farm (rank 0 master, ranks 1..P-1 workers) and check it against numpy.",
                        n=600, max_iter=2000)
    parser.add_argument("--relaxation", type=positive_float, default=1.0, help="step scale in (0, 2) (default 1)")
    relaxation = parser.parse_known_args(argv)[0].relaxation
    if not 0 < relaxation < 2:
        parser.error(f"--relaxation must lie in (0, 2), got {relaxation}")
    # Cimmino's error is up to about cond²/step times its last step: allow more than Jacobi.
    return app_main(parser, argv, "BSF Cimmino", build, dominance=3.0, tolerance_factor=1e4)


if __name__ == "__main__":
    sys.exit(main())
