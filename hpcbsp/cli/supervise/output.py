"""The job's stdout on its way through: the program's bytes to stdout, the launcher's own lines to stderr.

Hydra writes its own messages on the job's stdout (``[mpiexec@HOST] Sending Ctrl-C to processes
as requested``, the ``BAD TERMINATION`` banner between rules of ``=``), where they would mix
with the program's result.  :class:`Sorter` passes the job's stdout on as it comes and moves
those lines to stderr: a line is the MPI's when it matches the MPI's own lines, or lies in a
block between two of its rules (:func:`hpcbsp.util.mpiflavour.own_patterns`).

Nothing is held back longer than it takes to tell: a complete line goes out at once; the start
of a line whose end has not come yet waits at most :data:`HOLD_S` seconds, then goes to stdout
(the rest of that line follows it there); the lines after a rule wait for the closing rule, at
most :data:`BLOCK_LINES` lines and :data:`HOLD_S` seconds, and go to stdout if it does not
come (a program's own line of ``=``); empty lines go with the next line (hydra's banner begins
with one), or, when none comes within :data:`HOLD_S` seconds, with the line before them.  At
the end of the stream what waits goes to stdout, empty lines where the line before them went.
"""
from __future__ import annotations

import re

#: Seconds the start of a line, or an open block, may wait to be told apart.
HOLD_S = 0.2
#: Lines an open block may hold before it counts as the program's.
BLOCK_LINES = 40

OUT, ERR = "out", "err"


class Sorter:
    """Splits one stream (the job's stdout) into ``(OUT, bytes)`` and ``(ERR, bytes)`` pieces, in order."""

    def __init__(self, lines: re.Pattern[str], rules: re.Pattern[str]) -> None:
        self.lines = lines
        self.rules = rules
        self.partial = bytearray()       # the start of a line not yet told apart
        self.partial_since = 0.0
        self.mid_line = False            # the start of the current line went to stdout: its rest follows
        self.block: list[bytes] | None = None  # the lines after an opening rule
        self.block_since = 0.0
        self.blanks: list[bytes] = []    # empty lines, waiting for the next line
        self.blanks_since = 0.0
        self.last = OUT                  # where the last line that was not empty went

    def feed(self, chunk: bytes, now: float) -> list[tuple[str, bytes]]:
        """What to write now of ``chunk`` (received at ``now``, time.monotonic())."""
        out: list[tuple[str, bytes]] = []
        data = bytes(chunk)
        if self.mid_line:
            cut = data.find(b"\n")
            if cut < 0:
                return [(OUT, data)]
            out.append((OUT, data[:cut + 1]))
            data = data[cut + 1:]
            self.mid_line = False
        if data and not self.partial:
            self.partial_since = now
        self.partial += data
        while (cut := self.partial.find(b"\n")) >= 0:
            line = bytes(self.partial[:cut + 1])
            del self.partial[:cut + 1]
            out += self._line(line, now)
            self.partial_since = now
        return out + self.tick(now)

    def tick(self, now: float) -> list[tuple[str, bytes]]:
        """What has waited long enough (call it every tenth of a second or so)."""
        out: list[tuple[str, bytes]] = []
        if self.block is not None and now - self.block_since > HOLD_S:
            out += self._release()
        if self.blanks and now - self.blanks_since > HOLD_S:
            out += self._blanks(self.last)
        if self.partial and self.block is None and now - self.partial_since > HOLD_S:
            out += self._blanks(OUT)
            out.append((OUT, bytes(self.partial)))
            self.partial.clear()
            self.mid_line = True
            self.last = OUT
        return out

    def close(self) -> list[tuple[str, bytes]]:
        """The end of the stream: whatever waits, to stdout (empty lines where the line before them went)."""
        out = self._release() if self.block is not None else []
        out += self._blanks(self.last)
        if self.partial:
            out.append((OUT, bytes(self.partial)))
            self.partial.clear()
        return out

    def _line(self, line: bytes, now: float) -> list[tuple[str, bytes]]:
        text = line.decode("utf-8", "replace").rstrip("\r\n")
        if self.block is not None:
            self.block.append(line)
            if self.rules.match(text):
                block, self.block = self.block, None
                self.last = ERR
                return [(ERR, b"".join(block))]
            return self._release() if len(self.block) > BLOCK_LINES else []
        if not text.strip():
            if not self.blanks:
                self.blanks_since = now
            self.blanks.append(line)
            return []
        if self.rules.match(text):
            self.block, self.block_since = [*self.blanks, line], now
            self.blanks = []
            return []
        sink = ERR if self.lines.match(text) else OUT
        out = self._blanks(sink) + [(sink, line)]
        self.last = sink
        return out

    def _blanks(self, sink: str) -> list[tuple[str, bytes]]:
        """The empty lines that waited, to ``sink``."""
        blanks, self.blanks = self.blanks, []
        return [(sink, b"".join(blanks))] if blanks else []

    def _release(self) -> list[tuple[str, bytes]]:
        """An open block that never closed: the program's, to stdout."""
        block, self.block = self.block or [], None
        if block:
            self.last = OUT
        return [(OUT, b"".join(block))] if block else []
