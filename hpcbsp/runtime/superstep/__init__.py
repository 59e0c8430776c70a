"""The superstep machinery: ending a superstep (control step, exchange, ledger row), the outbox
and the shared arena the exchange moves records through, and how a rank waits."""
