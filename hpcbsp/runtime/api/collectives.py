"""Collectives of a BSP context: each is a superstep of its own, ended by the context's ``sync``
path (pending puts are delivered first) with the collective's MPI call as its :class:`Step`.

The facade methods (``BSP.allreduce``, ``reduce_scatter``, ``allgather_blocks``, ``broadcast``,
``gather_all``, ``foldl``) document the h-relations; this module
checks the arguments (a :class:`UsageError` on the calling rank, before any MPI call) and makes
the calls.
"""
from __future__ import annotations

import pickle
from typing import TYPE_CHECKING, Any, Callable, TypeVar

import numpy as np
from mpi4py import MPI

from ..errors import UsageError
from ..superstep.control import Kind, signature
from ..superstep.ledger import Traffic
from ..superstep.supersteps import Step
from .distribution import block_range
from .records import check_pid

if TYPE_CHECKING:
    from ..superstep.supersteps import Supersteps

C = TypeVar("C")  # the context type split makes
#: ``foldl``'s default ``initial``: fold from the first rank's value.
NO_INITIAL: Any = object()

OPS = {"sum": MPI.SUM, "prod": MPI.PROD, "min": MPI.MIN, "max": MPI.MAX,
       "land": MPI.LAND, "lor": MPI.LOR, "band": MPI.BAND, "bor": MPI.BOR}
#: numpy's ufuncs of the ops, for the dtypes on which MPI defines no predefined op (``_numpy_op``).
_UFUNCS = {"sum": np.add, "prod": np.multiply, "min": np.minimum, "max": np.maximum,
           "band": np.bitwise_and, "bor": np.bitwise_or}


def _count_both_ways(traffic: Traffic, nbytes: int, nprocs: int) -> None:
    """A reduction: ``nbytes`` out of and into every rank, one message each way."""
    if nprocs > 1:
        traffic.bytes_out += nbytes
        traffic.bytes_in += nbytes
        traffic.msgs_out += 1
        traffic.msgs_in += 1


def allreduce(bsp: "Supersteps", x: Any, op: str, exact: bool, out: np.ndarray | None = None) -> Any:
    """See :meth:`hpcbsp.runtime.api.context.BSP.allreduce`."""
    if op not in OPS:
        raise UsageError(f"rank {bsp.pid}: allreduce op {op!r} is not one of {', '.join(OPS)}")
    arr = np.asarray(x)
    if arr.dtype == object:
        raise UsageError(f"rank {bsp.pid}: allreduce needs numeric data, got {type(x).__name__}")
    if exact:
        if op != "sum" or arr.dtype.kind not in "fiub":
            raise UsageError(f"rank {bsp.pid}: exact=True needs op='sum' on real numbers")
        if arr.dtype.kind == "f" and arr.itemsize > 8:
            raise UsageError(f"rank {bsp.pid}: exact=True sums float64 values (or narrower, or "
                             f"integers); {arr.dtype} would be rounded first: convert it yourself "
                             "if that is what you want")
        if out is not None:
            raise UsageError(f"rank {bsp.pid}: allreduce(exact=True) returns a float, not into out=")
        return _exact_sum(bsp, arr)
    if out is not None and (not isinstance(out, np.ndarray) or out.shape != arr.shape
                            or out.dtype != arr.dtype or not out.flags.c_contiguous
                            or not out.flags.writeable or np.shares_memory(out, arr)):
        raise UsageError(f"rank {bsp.pid}: allreduce out= must be a writeable C-contiguous array "
                         f"of shape {arr.shape} and dtype {arr.dtype}, not overlapping x")
    desc = f"allreduce(op={op!r}, dtype={arr.dtype}, shape={arr.shape})"
    # MPI only reads the send buffer: a C-contiguous array goes as it is (no copy); anything
    # else is copied (np.array keeps 0-d arrays 0-d, unlike ascontiguousarray).
    send = arr if arr.ndim and arr.flags.c_contiguous else np.array(arr, order="C")
    result = np.empty_like(send) if out is None else out

    def run(traffic: Traffic) -> None:
        bsp.comm.Allreduce(send, result, op=OPS[op])
        _count_both_ways(traffic, send.nbytes, bsp.nprocs)

    bsp.sync(f"allreduce:{op}", _step=Step(Kind.ALLREDUCE, signature(desc), lambda: desc, run))
    return result[()] if arr.ndim == 0 else result


def _exact_sum(bsp: "Supersteps", arr: np.ndarray) -> float:
    from ... import kernels

    desc = "allreduce(op='sum', exact=True)"
    total: list[np.ndarray] = []

    def run(traffic: Traffic) -> None:
        state = kernels.exact_sum_state(arr)  # any shape and stride; 64-bit integers exactly
        total.append(np.empty_like(state))
        bsp.comm.Allreduce(state, total[0], op=MPI.SUM)
        _count_both_ways(traffic, state.nbytes, bsp.nprocs)

    bsp.sync("allreduce:exact-sum", _step=Step(Kind.ALLREDUCE, signature(desc), lambda: desc, run))
    return float(kernels.exact_sum_round(total[0]))


def _blocks(n: int, p: int) -> list[slice]:
    """The block of each rank in ``reduce_scatter`` and ``allgather_blocks``: ``block_range``
    (as :class:`.partition.Block`)."""
    return [slice(*block_range(n, p, r)) for r in range(p)]


def _check_block_buffer(bsp: "Supersteps", arr: Any, call: str) -> np.ndarray:
    if not isinstance(arr, np.ndarray) or arr.ndim != 1 or not arr.flags.c_contiguous \
            or arr.dtype.kind not in "biufc":
        raise UsageError(f"rank {bsp.pid}: {call} needs a 1-D C-contiguous numeric numpy array, "
                         f"got {type(arr).__name__}{'' if not isinstance(arr, np.ndarray) else f' {arr.dtype} {arr.shape}'}")
    return arr


#: The dtype kinds on which the MPI standard defines each predefined op (MPI 4.1, 6.9.2): the
#: others (sums of booleans, bitwise ops on booleans, min/max of complex numbers) reduce with
#: numpy's ufunc in a user-defined op (:func:`_numpy_op`).
_MPI_KINDS = {"sum": "iufc", "prod": "iufc", "min": "iuf", "max": "iuf",
              "land": "iub", "lor": "iub", "band": "iu", "bor": "iu"}
_NUMPY_OPS: dict[tuple[str, str], MPI.Op] = {}


def _numpy_op(op: str, dtype: np.dtype) -> MPI.Op:
    """A commutative user-defined MPI op that combines two buffers of ``dtype`` with numpy's
    ``op`` (made once per op and dtype; MPI calls it with ``inout = in op inout``)."""
    key = (op, dtype.str)
    made = _NUMPY_OPS.get(key)
    if made is None:
        ufunc = _UFUNCS[op]

        def combine(inbuf: Any, inoutbuf: Any, datatype: MPI.Datatype) -> None:
            a = np.frombuffer(inbuf, dtype=dtype)
            b = np.frombuffer(inoutbuf, dtype=dtype)
            ufunc(a, b, out=b)

        made = _NUMPY_OPS[key] = MPI.Op.Create(combine, commute=True)
    return made


def reduce_scatter(bsp: "Supersteps", x: Any, op: str, out: np.ndarray | None) -> np.ndarray:
    """See :meth:`hpcbsp.runtime.api.context.BSP.reduce_scatter`."""
    if op not in OPS:
        raise UsageError(f"rank {bsp.pid}: reduce_scatter op {op!r} is not one of {', '.join(OPS)}")
    arr = _check_block_buffer(bsp, x, "reduce_scatter")
    if op in ("land", "lor", "band", "bor") and arr.dtype.kind not in "biu":
        raise UsageError(f"rank {bsp.pid}: reduce_scatter op {op!r} needs integers or booleans, not {arr.dtype}")
    if out is None:
        out = np.empty_like(arr)
    elif (not isinstance(out, np.ndarray) or out.shape != arr.shape or out.dtype != arr.dtype
          or not out.flags.c_contiguous or not out.flags.writeable or np.shares_memory(out, arr)):
        raise UsageError(f"rank {bsp.pid}: reduce_scatter out= must be a writeable C-contiguous "
                         f"array of shape {arr.shape} and dtype {arr.dtype}, not overlapping x")
    desc = f"reduce_scatter(op={op!r}, dtype={arr.dtype}, n={arr.size})"
    p, me = bsp.nprocs, bsp.pid
    blocks = _blocks(arr.size, p)
    mine = out[blocks[me]]
    counts = [b.stop - b.start for b in blocks]
    mpi_op = OPS[op] if arr.dtype.kind in _MPI_KINDS[op] else _numpy_op(op, arr.dtype)

    def run(traffic: Traffic) -> None:
        if p == 1:  # (a logical op gives 0 or 1 on one rank too)
            mine[:] = (arr != 0) if op in ("land", "lor") else arr
            return
        # One collective: the MPI library's algorithm (recursive halving for short buffers,
        # ceil(log2 p) rounds; pairwise for long ones), each block reduced once, on its owner.
        bsp.comm.Reduce_scatter(arr, mine, counts, op=mpi_op)
        # The h-relation of a direct reduce-scatter: every block but its own out, to its owner;
        # p - 1 contributions to its own block in.
        traffic.bytes_out += arr.nbytes - mine.nbytes
        traffic.bytes_in += (p - 1) * mine.nbytes
        traffic.msgs_out += p - 1
        traffic.msgs_in += p - 1

    bsp.sync(f"reduce_scatter:{op}", _step=Step(Kind.REDUCE_SCATTER, signature(desc), lambda: desc, run))
    return mine


def allgather_blocks(bsp: "Supersteps", buf: Any) -> np.ndarray:
    """See :meth:`hpcbsp.runtime.api.context.BSP.allgather_blocks`."""
    arr = _check_block_buffer(bsp, buf, "allgather_blocks")
    if not arr.flags.writeable:
        raise UsageError(f"rank {bsp.pid}: allgather_blocks writes the other ranks' blocks into "
                         "its argument, which is read-only")
    desc = f"allgather_blocks(dtype={arr.dtype}, n={arr.size})"
    p, me = bsp.nprocs, bsp.pid
    blocks = _blocks(arr.size, p)
    size = arr.itemsize
    counts = [(b.stop - b.start) * size for b in blocks]
    displs = [b.start * size for b in blocks]

    def run(traffic: Traffic) -> None:
        if p == 1:
            return
        # One collective, in place, as bytes (any numeric dtype): the MPI library's algorithm
        # (recursive doubling, Bruck or a ring by size), ceil(log2 p) rounds for short buffers.
        bsp.comm.Allgatherv(MPI.IN_PLACE, [arr.view(np.uint8), counts, displs, MPI.BYTE])
        own = counts[me]
        traffic.bytes_out += (p - 1) * own  # the h-relation: its block to every other rank
        traffic.bytes_in += arr.nbytes - own
        traffic.msgs_out += p - 1
        traffic.msgs_in += p - 1

    bsp.sync("allgather_blocks", _step=Step(Kind.ALLGATHER, signature(desc), lambda: desc, run))
    return arr


def broadcast(bsp: "Supersteps", x: Any, root: int) -> Any:
    """See :meth:`hpcbsp.runtime.api.context.BSP.broadcast`."""
    root = check_pid(root, bsp.nprocs, bsp.pid, "broadcast")
    desc = f"broadcast(root={root})"
    is_root = bsp.pid == root
    result: list[Any] = []

    def run(traffic: Traffic) -> None:
        comm = bsp.comm
        meta = (x.shape, x.dtype.str) if is_root and isinstance(x, np.ndarray) and x.dtype.kind != "O" \
            else None
        meta = comm.bcast(meta if is_root else None, root=root)
        if meta is not None:
            buf = np.ascontiguousarray(x) if is_root else np.empty(meta[0], dtype=np.dtype(meta[1]))
            comm.Bcast(buf, root=root)
            value, nbytes = buf, buf.nbytes
        else:
            value = comm.bcast(x if is_root else None, root=root)
            nbytes = len(pickle.dumps(value)) if is_root else 0
        if is_root:
            traffic.bytes_out += nbytes * (bsp.nprocs - 1)
            traffic.msgs_out += bsp.nprocs - 1
        else:
            traffic.bytes_in += nbytes if meta is None else value.nbytes
            traffic.msgs_in += 1
        result.append(value)

    bsp.sync(f"broadcast:{root}", _step=Step(Kind.BROADCAST, signature(desc), lambda: desc, run))
    return result[0]


def gather_all(bsp: "Supersteps", x: Any) -> list[Any]:
    """See :meth:`hpcbsp.runtime.api.context.BSP.gather_all`."""
    desc = "gather_all"
    arr = x if isinstance(x, np.ndarray) and x.dtype.kind != "O" else None
    meta = (arr.shape, arr.dtype.str, arr.dtype.descr) if arr is not None else None
    result: list[list[Any]] = []

    def run(traffic: Traffic) -> None:
        comm, p = bsp.comm, bsp.nprocs
        metas = comm.allgather(meta)
        if arr is not None and all(m == meta for m in metas):  # one shape and dtype: buffers
            send = arr if arr.flags.c_contiguous else np.array(arr, order="C")  # keeps 0-d arrays 0-d
            out = np.empty((p, *send.shape), dtype=send.dtype)
            # As bytes: any dtype, structured ones included (MPI has no type for those).
            comm.Allgather([send.reshape(-1).view(np.uint8), MPI.BYTE],
                           [out.reshape(-1).view(np.uint8), MPI.BYTE])
            values: list[Any] = list(out)
            nbytes = [send.nbytes] * p
        else:  # pickled once, here: the sizes for the ledger come with the bytes
            blobs = comm.allgather(pickle.dumps(x, protocol=pickle.HIGHEST_PROTOCOL))
            values = [pickle.loads(b) for b in blobs]
            nbytes = [len(b) for b in blobs]
        if p > 1:
            traffic.bytes_out += nbytes[bsp.pid] * (p - 1)
            traffic.bytes_in += sum(nbytes) - nbytes[bsp.pid]
            traffic.msgs_out += p - 1
            traffic.msgs_in += p - 1
        result.append(values)

    bsp.sync("gather_all", _step=Step(Kind.GATHER, signature(desc), lambda: desc, run))
    return result[0]


def foldl(bsp: "Supersteps", x: Any, fn: Callable[[Any, Any], Any], initial: Any) -> Any:
    """See :meth:`hpcbsp.runtime.api.context.BSP.foldl` (``initial`` is :data:`NO_INITIAL` where the
    caller gave none)."""
    if not callable(fn):
        raise UsageError(f"rank {bsp.pid}: foldl(fn={fn!r}): fn must be a function of two values")
    has_initial = initial is not NO_INITIAL
    values = gather_all(bsp, x)
    acc = initial if has_initial else values[0]
    for v in values if has_initial else values[1:]:
        acc = fn(acc, v)
    return acc


def split(bsp: "Supersteps", color: int | None, key: int | None,
          make: Callable[[MPI.Comm], C]) -> C | None:
    """``bsp.split`` (collective; a superstep): ``make(comm)`` on the ranks' new communicator,
    which is freed after (``make`` duplicates it); None on ranks that pass ``None``."""
    comms: list[MPI.Comm] = []

    def run(traffic: Traffic) -> None:
        comms.append(bsp.comm.Split(MPI.UNDEFINED if color is None else int(color),
                                    bsp.pid if key is None else int(key)))

    bsp.sync("split", _step=Step(Kind.SPLIT, 0, lambda: f"split(color={color})", run))
    sub = comms[0]
    if sub == MPI.COMM_NULL:
        return None
    try:
        return make(sub)
    finally:
        sub.Free()
