"""The Bulk Synchronous Farm apps: iterative solvers of a linear system on the master/worker
skeleton of :mod:`hpcbsp.farm`, each runnable as ``python -m hpcbsp.apps.bsf.NAME``:
``jacobi`` (a Map over the columns) and ``cimmino`` (a Map over the rows, the projections).

:mod:`.system` holds what they share: the test system, the vector-sum problem, the command line
and the driver with its check against ``numpy.linalg.solve`` and its BSF prediction.
"""
