"""Benchmarks: ``python -m hpcbsp.bench NAME``. See ``docs/performance.md`` for recorded figures."""
