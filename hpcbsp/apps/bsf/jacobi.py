"""BSF Jacobi: solve a diagonally dominant system A x = b with the BSF farm.

    mpiexec -n P python -m hpcbsp.apps.bsf.jacobi [--n N] [--eps E] [--max-iter M] [--seed S]

Rank 0 is the master, ranks 1..P-1 the workers.  Jacobi's step x' = C x + d (C = −D⁻¹(A − D),
d = D⁻¹ b) in BSF form (Sokolinsky's BSF-Jacobi): the map list is the columns c_j of C, the Map
F_x(j) = x_j·c_j, the Reduce is vector addition, the master adds d and stops when
||x' − x||₂ < eps.  Rank 0 checks the answer against ``numpy.linalg.solve`` and prints the BSF
parameters the run measured of itself and the K_max they predict.
"""
from __future__ import annotations

import argparse
import sys

import numpy as np

from hpcbsp.apps.bsf.system import app_main, app_parser, vector_sum_problem
from hpcbsp.farm import BSFProblem


def jacobi_problem(a: np.ndarray, b: np.ndarray, eps: float) -> BSFProblem:
    """Jacobi's iteration as a BSF problem (map list: the columns of C; a sublist is a slice)."""
    diag = np.diag(a).copy()
    c = -a / diag[:, None]
    np.fill_diagonal(c, 0.0)
    d = b / diag
    ct = np.ascontiguousarray(c.T)  # row j of ct is column j of C: an element of the map list

    def map_columns(x: np.ndarray, cols: slice) -> np.ndarray:
        return x[cols, None] * ct[cols]  # F_x(j) = x_j·c_j for every column j of the sublist

    def compute(x: np.ndarray, s: np.ndarray) -> np.ndarray:
        return s + d

    return vector_sum_problem(a.shape[0], map_columns, compute, eps)


def build(a: np.ndarray, b: np.ndarray, args: argparse.Namespace) -> BSFProblem:
    """The app's BSF problem for the options given."""
    return jacobi_problem(a, b, args.eps)


def main(argv: list[str] | None = None) -> int:
    parser = app_parser("jacobi", "BSF Jacobi: solve a diagonally dominant system with the BSF farm "
                                  "(rank 0 master, ranks 1..P-1 workers) and check it against numpy.", n=1000,
                        max_iter=500)
    # Jacobi's error after the stop test is below eps·ρ/(1 − ρ) with ρ <= 1/1.5: 1e3·eps is generous.
    return app_main(parser, argv, "BSF Jacobi", build, dominance=1.5, tolerance_factor=1e3)


if __name__ == "__main__":
    sys.exit(main())
