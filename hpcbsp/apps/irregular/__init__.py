"""The irregular apps, bale's kernels on FA-BSP: ``histogram``, ``index_gather``, ``triangles``,
``bfs`` and ``toposort`` (each runnable as ``python -m hpcbsp.apps.irregular.NAME``), each in
the modes fabsp (mailboxes) and bsp (bulk exchanges in supersteps), all but toposort in naive
(one MPI message per record), and the table apps in rma (one passive-target RMA operation per
record).

Shared parts: :mod:`.layout` (the cyclic table layout), :mod:`.cli` (options and the table apps'
driver), :mod:`.naive` and :mod:`.rma` (the baselines' transports), :mod:`.report` (timing and
the report), :mod:`.graphs` (graph generators and serial oracles).
"""
