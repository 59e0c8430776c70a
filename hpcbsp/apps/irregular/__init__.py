"""The irregular apps, bale's kernels on FA-BSP: ``histogram``, ``index_gather``, ``triangles`` and
``bfs`` (each runnable as ``python -m hpcbsp.apps.irregular.NAME``), each in the modes fabsp
(mailboxes), bsp (one bulk exchange per superstep), naive (one MPI message per record) and, for
the table apps, rma (one passive-target RMA operation per record).

Shared parts: :mod:`.layout` (the cyclic table layout), :mod:`.cli` (options and the table apps'
driver), :mod:`.naive` and :mod:`.rma` (the baselines' transports), :mod:`.report` (timing and
the report), :mod:`.graphs` (graph generators and serial oracles).
"""
