"""The state of a training run as tagged JSON: saved without pickle, restored without running code.

A checkpoint of a parameter-server run holds objects of a few kinds (the coordinator, its run
log, the policy with its counters and interval trackers, random generators, the simulator's event
queue).  :func:`encode` turns such an object graph into JSON-ready data and :func:`decode` turns
it back, exactly:

* ``None``, ``bool``, ``int``, ``str`` and ``float`` (also ``inf`` and ``nan``: Python's JSON
  writes them, and ``repr`` of a float round-trips) are themselves;
* lists stay lists (long ones of plain numbers, or of tuples of them, as raw columns);
  tuples, dicts (any hashable scalar keys, insertion order kept), ``defaultdict(int | list)``
  and ``deque`` are tagged;
* numpy arrays and scalars of numeric dtypes are their raw bytes in base64 (bit-exact);
* a ``numpy.random.Generator`` is its bit generator's state;
* an instance of a class in the allow-list (:data:`CLASSES`) is its class name and its
  ``__dict__`` less the names its class lists in ``TRANSIENT`` (what belongs to the process, not
  to the state: those fall back to the class's defaults when decoded); decoding makes the
  instance with ``cls.__new__`` and sets the attributes, so no constructor and no code named by
  the file runs.  A class of the list that defines ``__setstate__`` (a run log's
  :class:`~hpcbsp.util.spooled.Spooled` rows, partly on disk) is its ``__getstate__()`` instead,
  given back to its own ``__setstate__``.

Anything else raises :class:`SnapshotError` naming where it was found.  So does a mutable object
reachable twice (two attributes sharing one list or array): restoring would split it into two
copies and change what the program does, so it is refused rather than silently miscopied.
"""
from __future__ import annotations

import base64
from collections import defaultdict, deque
from typing import Any

import numpy as np

__all__ = ["SnapshotError", "encode", "decode", "CLASSES"]


class SnapshotError(ValueError):
    """The object cannot be snapshotted, or the data is not a snapshot this code can read."""


def _allowed() -> dict[str, type]:
    # Imported here: the policies import nothing from this module, but keeping the allow-list
    # lazy lets this module load first and stay free of the package's import order.
    from ..util.spooled import Spooled
    from . import policies
    from .coordinator import Coordinator
    from .policies.clocks import HeldByCount, PushClock
    from .policies.intervals import IntervalTracker
    from .runlog import RunLog, Staleness

    classes = [Coordinator, RunLog, Staleness, Spooled, PushClock, HeldByCount, IntervalTracker,
               *policies.REGISTRY.values()]
    return {f"{c.__module__}.{c.__qualname__}": c for c in classes}


#: Classes whose instances may appear in a snapshot, by qualified name (filled on first use).
CLASSES: dict[str, type] = {}

_FACTORIES = {"int": int, "list": list}
_NUMERIC_KINDS = "biufc"


def _classes() -> dict[str, type]:
    if not CLASSES:
        CLASSES.update(_allowed())
    return CLASSES


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def encode(obj: Any) -> Any:
    """JSON-ready data from ``obj`` (see the module docstring for what is supported)."""
    return _Encoder().encode(obj, "state")


class _Encoder:
    def __init__(self) -> None:
        # id of a mutable object -> where it was first found, and the object itself: holding it
        # keeps temporaries (a bit generator's state dict) alive, so that no id is reused.
        self.seen: dict[int, tuple[str, Any]] = {}

    def _once(self, obj: Any, where: str) -> None:
        owner = obj.base if isinstance(obj, np.ndarray) and obj.base is not None else obj
        if id(owner) in self.seen:
            raise SnapshotError(f"{where} is the same object as {self.seen[id(owner)][0]}: a "
                                "snapshot would restore two copies; give each its own object")
        self.seen[id(owner)] = (where, owner)

    def encode(self, obj: Any, where: str) -> Any:
        if obj is None or isinstance(obj, (bool, str)):
            return obj
        if isinstance(obj, (int, float)) and type(obj) in (int, float):
            return obj
        if isinstance(obj, np.ndarray):
            self._once(obj, where)
            return self._array(obj, where)
        if isinstance(obj, np.generic):
            if obj.dtype.kind not in _NUMERIC_KINDS:
                raise SnapshotError(f"{where}: numpy scalar of dtype {obj.dtype} is not supported")
            return {"__npscalar__": obj.dtype.str, "data": _b64(obj.tobytes())}
        if isinstance(obj, np.random.Generator):
            self._once(obj, where)
            return {"__rng__": type(obj.bit_generator).__name__,
                    "state": self.encode(obj.bit_generator.state, f"{where}.state")}
        if isinstance(obj, list):
            self._once(obj, where)
            compact = _compact(obj)
            if compact is not None:
                return compact
            return [self.encode(v, f"{where}[{i}]") for i, v in enumerate(obj)]
        if isinstance(obj, tuple) and type(obj) is tuple:
            return {"__tuple__": [self.encode(v, f"{where}[{i}]") for i, v in enumerate(obj)]}
        if isinstance(obj, deque):
            self._once(obj, where)
            return {"__deque__": [self.encode(v, f"{where}[{i}]") for i, v in enumerate(obj)],
                    "maxlen": obj.maxlen}
        if isinstance(obj, dict):
            self._once(obj, where)
            items = [[self.encode(k, f"{where} key"), self.encode(v, f"{where}[{k!r}]")]
                     for k, v in obj.items()]
            if isinstance(obj, defaultdict):
                name = next((n for n, f in _FACTORIES.items() if obj.default_factory is f), None)
                if name is None:
                    raise SnapshotError(f"{where}: defaultdict({obj.default_factory!r}) is not supported")
                return {"__defaultdict__": name, "items": items}
            if type(obj) is not dict:
                raise SnapshotError(f"{where}: {type(obj).__name__} is not supported")
            return {"__dict__": items}
        name = f"{type(obj).__module__}.{type(obj).__qualname__}"
        if name in _classes():
            self._once(obj, where)
            skip = getattr(type(obj), "TRANSIENT", ())  # (a class's own: not part of its state)
            state = obj.__getstate__() if hasattr(type(obj), "__setstate__") else vars(obj)
            return {"__object__": name,
                    "attrs": {k: self.encode(v, f"{where}.{k}") for k, v in state.items() if k not in skip}}
        raise SnapshotError(f"{where}: cannot snapshot a {type(obj).__name__} "
                            f"(not one of the supported types or allowed classes)")

    @staticmethod
    def _array(a: np.ndarray, where: str) -> dict[str, Any]:
        if a.dtype.kind not in _NUMERIC_KINDS:
            raise SnapshotError(f"{where}: array of dtype {a.dtype} is not supported")
        return {"__ndarray__": a.dtype.str, "shape": list(a.shape),
                "data": _b64(np.ascontiguousarray(a).tobytes())}


#: Lists at least this long of plain ints or floats, or of equal-length tuples of them (a run
#: log's push times, its staleness values), are stored as raw int64/float64 columns: encoding
#: a million pushes element by element took seconds, during which a server answers nobody.
_COMPACT_MIN = 32


def _column(values: Any) -> tuple[str, str] | None:
    """("i" or "f", base64 of the raw column) if ``values`` are all plain ints or all floats."""
    kind = type(values[0])
    if kind is float and all(type(v) is float for v in values):
        return "f", _b64(np.array(values, dtype=np.float64).tobytes())
    if kind is int and all(type(v) is int for v in values):
        try:
            return "i", _b64(np.array(values, dtype=np.int64).tobytes())
        except OverflowError:
            return None
    return None


def _compact(items: list) -> dict[str, Any] | None:
    if len(items) < _COMPACT_MIN:
        return None
    first = items[0]
    if type(first) is not tuple:
        col = _column(items)
        return None if col is None else {"__column__": col[1], "kind": col[0]}
    width = len(first)
    if width == 0 or not all(type(row) is tuple and len(row) == width for row in items):
        return None
    cols = [_column(col) for col in zip(*items)]
    if any(col is None for col in cols):
        return None
    return {"__rows__": [c[1] for c in cols], "kinds": "".join(c[0] for c in cols)}  # type: ignore[index]


def _uncolumn(kind: str, data: str) -> list:
    dtype = {"i": np.int64, "f": np.float64}.get(kind)
    if dtype is None:
        raise SnapshotError(f"column of kind {kind!r} in a snapshot")
    return np.frombuffer(base64.b64decode(data, validate=True), dtype=dtype).tolist()


def decode(data: Any) -> Any:
    """The object graph that :func:`encode` described (raises :class:`SnapshotError` on data
    that no encoder wrote)."""
    try:
        return _decode(data)
    except SnapshotError:
        raise
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        raise SnapshotError(f"not a training-state snapshot ({type(exc).__name__}: {exc})") from None


def _decode(d: Any) -> Any:
    if d is None or isinstance(d, (bool, int, float, str)):
        return d
    if isinstance(d, list):
        return [_decode(v) for v in d]
    if not isinstance(d, dict):
        raise SnapshotError(f"unexpected {type(d).__name__} in a snapshot")
    if "__ndarray__" in d:
        dtype = np.dtype(d["__ndarray__"])
        if dtype.kind not in _NUMERIC_KINDS:
            raise SnapshotError(f"array of dtype {dtype} in a snapshot")
        raw = base64.b64decode(d["data"], validate=True)
        return np.frombuffer(raw, dtype=dtype).reshape(d["shape"]).copy()
    if "__npscalar__" in d:
        dtype = np.dtype(d["__npscalar__"])
        if dtype.kind not in _NUMERIC_KINDS:
            raise SnapshotError(f"scalar of dtype {dtype} in a snapshot")
        return np.frombuffer(base64.b64decode(d["data"], validate=True), dtype=dtype)[0]
    if "__rng__" in d:
        bitgen = getattr(np.random, d["__rng__"], None)
        if not (isinstance(bitgen, type) and issubclass(bitgen, np.random.BitGenerator)):
            raise SnapshotError(f"unknown bit generator {d['__rng__']!r} in a snapshot")
        gen = bitgen()
        gen.state = _decode(d["state"])
        return np.random.Generator(gen)
    if "__column__" in d:
        return _uncolumn(d["kind"], d["__column__"])
    if "__rows__" in d:
        cols = [_uncolumn(k, c) for k, c in zip(d["kinds"], d["__rows__"], strict=True)]
        return list(zip(*cols))
    if "__tuple__" in d:
        return tuple(_decode(v) for v in d["__tuple__"])
    if "__deque__" in d:
        return deque((_decode(v) for v in d["__deque__"]), maxlen=d["maxlen"])
    if "__dict__" in d:
        return {_decode(k): _decode(v) for k, v in d["__dict__"]}
    if "__defaultdict__" in d:
        factory = _FACTORIES.get(d["__defaultdict__"])
        if factory is None:
            raise SnapshotError(f"defaultdict({d['__defaultdict__']!r}) in a snapshot")
        out: defaultdict[Any, Any] = defaultdict(factory)
        for k, v in d["items"]:
            out[_decode(k)] = _decode(v)
        return out
    if "__object__" in d:
        cls = _classes().get(d["__object__"])
        if cls is None:
            raise SnapshotError(f"class {d['__object__']!r} is not allowed in a snapshot")
        obj: Any = object.__new__(cls)  # (plain classes, see _allowed: no constructor runs)
        attrs = {k: _decode(v) for k, v in d["attrs"].items()}
        if hasattr(cls, "__setstate__"):
            obj.__setstate__(attrs)
        else:
            obj.__dict__.update(attrs)
        return obj
    raise SnapshotError(f"untagged object with keys {sorted(d)[:5]} in a snapshot")
