"""Failure handling: a context's open/closed/failed state and failure report, and the watch that
names a rank which died without a word (a rank's side, the node's watcher, its /proc reading and clean-up)."""
