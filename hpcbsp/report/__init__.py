"""``hpcbsp report``: what a saved superstep ledger says about a run, as text and one HTML page.

Layer 5, beside :mod:`hpcbsp.cost` (it reads saved ledgers, never a live context, and reuses the
cost tools' readers of ledgers and machine profiles).  :mod:`.analysis` reads a ledger (a merged
``.json`` or ``.csv``, or a stream folder) into arrays of supersteps x ranks and words the late
supersteps (the rule: :mod:`hpcbsp.runtime.superstep.lateness`); :mod:`.figures` draws them with
matplotlib (Agg); :mod:`.page` writes the self-contained page (images inline as base64 PNGs).
"""
