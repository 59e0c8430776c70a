"""The BSP context users meet and what it creates: coarrays, queues, vars, their registration,
collectives, partitionings, checkpoints, ``hpcbsp.run``, and the extension interface for layers above."""
