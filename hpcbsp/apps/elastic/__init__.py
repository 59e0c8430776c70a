"""The elastic-synchronisation programs, built on the library :mod:`hpcbsp.elastic`:

* ``python -m hpcbsp.apps.elastic.train`` (:mod:`.train`): training runs under BSP, ASP, SSP,
  DSSP, ElasticBSP, backup workers and the allreduce baseline, on MPI (a training world of
  :func:`hpcbsp.elastic.launch_world`) or on the virtual clock (``--simulate``); their outputs
  and the comparison.
* ``python -m hpcbsp.apps.elastic.paper`` (:mod:`.paper`): the ElasticBSP paper's experiment,
  small (one ``train`` job, then a report with confidence intervals).

What they share: :mod:`.experiment` (one training run per policy, simulated or on a world, from
one configuration), :mod:`.report` (the comparison and the output files) and :mod:`.resume`
(where a run's checkpoints go and how a restart reads them).
"""
