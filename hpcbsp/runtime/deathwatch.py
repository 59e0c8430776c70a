"""Name a rank that dies without a word: SIGKILL, a segfault, the out-of-memory killer.

Such a rank cannot report itself, and ``mpiexec`` (MPICH's hydra) names only a PID, often not the
right one: it kills the other ranks at once and reports whichever process it reaped first.  So
every process that joins a multi-rank BSP context starts one watcher, a ``/bin/sh`` of a few
hundred kilobytes in its own session, that holds the read end of a pipe:

* the process writes ``bye`` when it exits normally (``atexit``), and the watcher ends quietly;
* a rank that reports its own failure and then aborts the job writes ``claimed`` first: its
  watcher takes the node's failure marker, so that the peers killed by the launcher stay quiet;
  a rank interrupted by Ctrl-C takes the marker itself (:func:`claim_report`: the first rank of
  the node prints the one line) and writes ``owner``, and its watcher removes the marker later;
* if the pipe closes without either word, the process died silently.  The watcher reads how it
  ended from ``/proc/PID/stat`` (its exit code, while the launcher has not reaped it yet):
  HUP, INT or TERM (scancel, a time limit, Ctrl-C) and plain exits are not silent deaths and
  stay quiet; a crash (SEGV, BUS, ABRT, ...) is always this rank's own, since launchers end
  ranks with SIGKILL, and is named at once.  For SIGKILL (the out-of-memory killer, a kill from
  outside, or the launcher ending the job) it looks at the job's other ranks on the node: if one
  is still alive and not dying, this rank died first and is named; if one crashed or was asked
  to stop, that explains it and this watcher stays quiet; a rank that outlived an already reaped
  peer was not first and stays quiet.  Otherwise every peer is dead too, killed by the launcher
  after this rank or before it: the watcher that woke first (each tries to create the job's
  ``.first`` file the moment its pipe closes, with no fork; the launcher kills the others only
  after it has seen the first death) names its rank, with that doubt said, after a short wait,
  and the others stay quiet.  (Before, all of them raced for the marker after the wait, and a
  rank the launcher killed was sometimes named instead of the one that died first.)

Only one line per node is printed: whoever creates the node's failure marker (an atomic
``mkdir`` in the temporary directory, keyed by the user, the host and the launcher's process
on it, the parent of every rank of the job there, with its start time) prints; the marker is
removed ten seconds later.  A forked child (multiprocessing) lets go of the pipe.  On a
multi-node job each node decides alone.  ``HPCBSP_DEATHWATCH=0`` turns the watcher off.
"""
from __future__ import annotations

import atexit
import os
import socket
import subprocess
import tempfile

__all__ = ["start", "claim", "claim_report"]

# $1 marker, $2 this rank's pid, $3 the line naming it, $4... the job's other ranks on this node.
# Only shell builtins run before the first-death check (no fork: the launcher kills the other
# ranks within milliseconds).  The watcher closes its output before it waits to remove the
# marker, so that nobody reading the job's output waits for it.
_SCRIPT = r"""
marker=$1 me=$2 line=$3
shift 3
peers=$*
hold_marker() {  # take the node's marker (or leave it to whoever has it), say $1, clean up
  mkdir "$marker" 2>/dev/null || exit 0
  [ -z "$1" ] || printf '%s\n' "$1" >&2
  exec 2>&- 1>&-
  sleep 10
  rmdir "$marker" 2>/dev/null
  exit 0
}
IFS= read -r word
first=
if [ -z "$word" ]; then  # died: record the order the watchers woke in (no fork: a builtin's O_EXCL)
  set -C
  if true 2>/dev/null >"$marker.first"; then
    first=1
    trap 'exec 2>&- 1>&-; sleep 10; rm -f "$marker.first"' EXIT
  fi
  set +C
fi
case "$word" in
  bye) exit 0 ;;
  claimed) hold_marker "" ;;
  owner) exec 2>&- 1>&-; sleep 10; rmdir "$marker" 2>/dev/null; exit 0 ;;  # see claim_report
esac
probe() {  # S: the state of process $1 ("gone" once reaped), C: its exit code (0 while alive)
  S=gone C=
  [ -r "/proc/$1/stat" ] || return 0
  IFS= read -r st 2>/dev/null < "/proc/$1/stat" || return 0
  set -- ${st##*)}
  S=$1
  eval "C=\${$#}"
}
probe "$me"; mine=$S
signal_of() {  # G: the signal that ended a process with exit code $1 ("" if unknown)
  G=
  case "$1" in ''|*[!0-9]*) ;; *) G=$(($1 & 127)) ;; esac
}
signal_of "$C"
how="killed by a signal or crashed" sure=
case "$G" in
  '') ;;
  0|1|2|15) exit 0 ;;  # it exited, or was asked to stop (HUP, INT, TERM): not a silent death
  9) how="killed by SIGKILL (out of memory, or a kill from outside)" ;;
  *) how="crashed with SIG$(kill -l "$G" 2>/dev/null || echo "$G")"
     sure=1 ;;  # launchers end ranks with SIGKILL: a crash is this rank's own
esac
if [ -z "$sure" ]; then
  alive= gone= crashed=
  for p in $peers; do
    probe "$p"
    signal_of "$C"
    case "$S" in
      gone) gone=1 ;;
      *) case "$G" in
           0) [ "$S" != Z ] && [ "$S" != X ] && [ "$S" != x ] && alive=1 ;;
           1|2|15) exit 0 ;;  # the job is being stopped (scancel, a time limit, Ctrl-C)
           9|'') ;;
           *) crashed=1 ;;
         esac ;;
    esac
  done
  if [ -n "$alive" ]; then
    sure=1  # another rank still runs untouched: this one died first
  else
    [ -n "$crashed" ] && exit 0                   # a rank that crashed names itself
    [ -n "$gone" ] && [ "$mine" != gone ] && exit 0  # a peer was reaped first: it went first
    [ -n "$first" ] || exit 0  # another rank's watcher woke first: its rank died first
    sleep 0.3
    how="$how (the launcher was ending the job: another rank may have died first)"
  fi
fi
hold_marker "$line: $how"
"""

_pipe: int | None = None
_marker: str | None = None


def start(rank: int, size: int) -> None:
    """Start this process's watcher (once; nothing for a single rank or when turned off)."""
    global _pipe, _marker
    if _pipe is not None or size < 2 or os.environ.get("HPCBSP_DEATHWATCH", "1") == "0":
        return
    host = socket.gethostname()
    # The launcher's pid and start time name this job on this node (a pid alone is reused).
    marker = os.path.join(tempfile.gettempdir(), f"hpcbsp-failed-{os.getuid()}-{host}-"
                                                 f"{os.getppid()}-{_start_time(os.getppid())}")
    line = f"[hpcbsp] rank {rank}/{size} (pid {os.getpid()} on {host}) died without a report"
    try:
        proc = subprocess.Popen(["/bin/sh", "-c", _SCRIPT, "hpcbsp-deathwatch", marker,
                                 str(os.getpid()), line, *map(str, _siblings())],
                                stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                start_new_session=True, close_fds=True)
    except OSError:
        return  # no /bin/sh: the launcher's own message is all there will be
    assert proc.stdin is not None
    _marker = marker
    _pipe = os.dup(proc.stdin.fileno())
    proc.stdin.close()
    proc.returncode = 0  # never waited for: it outlives this process by design
    atexit.register(_say, b"bye\n")
    os.register_at_fork(after_in_child=_forget)  # a forked child is not the rank


def _forget() -> None:
    """In a forked child: let go of the parent's pipe, saying nothing."""
    global _pipe
    if _pipe is not None:
        try:
            os.close(_pipe)
        except OSError:
            pass
        _pipe = None


def _start_time(pid: int) -> str:
    fields = _stat(pid)
    return fields[19] if len(fields) > 19 else "0"


def _stat(pid: int | str) -> list[str]:
    """The fields of ``/proc/PID/stat`` after the command name (state, ppid, ...); [] if gone."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return []


def _siblings(limit: int = 512) -> list[int]:
    """The other children of this process's parent: the job's ranks on this node (Linux)."""
    parent, me = str(os.getppid()), os.getpid()
    out: list[int] = []
    try:
        names = os.listdir("/proc")
    except OSError:
        return out
    for name in names:
        if name.isdigit() and int(name) != me and _stat(name)[1:2] == [parent]:
            out.append(int(name))
            if len(out) >= limit:
                break
    return out


def claim() -> None:
    """This rank reports its own failure and is about to abort the job: keep the peers quiet."""
    _say(b"claimed\n")


def claim_report() -> bool:
    """This rank is about to end the job with a line of its own (Ctrl-C): whether to print it.

    True for the first rank of this node to claim (it takes the node's failure marker, which
    keeps every watcher of the node quiet, and its watcher removes the marker later), False for
    the others, which stay quiet: one line per node, not one per rank.  True without a watcher.
    """
    if _pipe is None or _marker is None:
        return True
    try:
        os.mkdir(_marker)
    except FileExistsError:
        _say(b"claimed\n")
        return False
    except OSError:
        _say(b"claimed\n")
        return True
    _say(b"owner\n")
    return True


def _say(word: bytes) -> None:
    global _pipe
    if _pipe is None:
        return
    try:
        os.write(_pipe, word)
        os.close(_pipe)
    except OSError:
        pass
    _pipe = None
