"""Moved to :mod:`hpcbsp.runtime.distribution` (kept until every importer is updated)."""
from ..runtime.distribution import block_range, block_sizes  # noqa: F401
