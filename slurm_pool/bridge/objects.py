"""Reading the objects Kubernetes sends: every field the bridge uses is checked for its shape.

The API server validates what it stores, but the bridge reads it through a
client, a proxy or a test double, and a field of the wrong shape (a list where
a map belongs, a string for a list, a boolean or a negative number for a
count) must neither end a run with a traceback nor be read as something it is
not.  Each reader here returns the field when it has the shape the bridge
reads, its default when it is absent or null, and raises :class:`Unreadable`
(naming the field and showing the value) otherwise.  What an unreadable object
means is the caller's decision; the bridge never lets one make it lend more,
think a node emptier or lower inference demand (``docs/bridge.md``).

Quantities go through the Kubernetes client's own parser
(``kubernetes.utils.quantity.parse_quantity``), after a full-string check of
the quantity grammar: the parser alone also takes ``1_0``, non-ASCII digits,
``NaN``, ``Infinity`` and booleans.
"""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Any, Callable, Mapping, TypeVar

from slurm_pool.errors import InputError
from slurm_pool.text import matches, shown, strict_int

T = TypeVar("T")

Obj = Mapping[str, Any]

#: Kubernetes' quantity grammar (``<signedNumber><suffix>``), ASCII digits only.
_QUANTITY = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]{1,3}|[KMGTPE]i|[numkMGTPE])?")
#: The largest quantity Kubernetes keeps as an integer (int64).
MAX_QUANTITY = 2**63 - 1


class Unreadable(InputError):
    """A Kubernetes object, or a field of it, that does not have the shape the bridge reads."""


def show(value: Any) -> str:
    """``value`` for a message: its repr, terminal-safe and cut short."""
    text = shown(repr(value))
    return text if len(text) <= 80 else text[:77] + "..."


def ident(kind: str, obj: Any) -> str:
    """``Kind namespace/name`` (or what of it can be read), terminal-safe; never raises."""
    meta = obj.get("metadata") if isinstance(obj, Mapping) else None
    if not isinstance(meta, Mapping):
        return f"{kind} (no readable metadata)"
    ns, name = meta.get("namespace"), meta.get("name")
    name_text = shown(name) if isinstance(name, str) and name else "(no readable name)"
    return f"{kind} {shown(ns)}/{name_text}" if isinstance(ns, str) and ns else f"{kind} {name_text}"


def listed(value: Any, kind: str) -> list[Any]:
    """An API answer that must be a list (of ``kind``, for the message)."""
    if not isinstance(value, list):
        raise Unreadable(f"Kubernetes' list of {kind}: {show(value)} is not a list")
    return value


def mapping(obj: Obj, key: str, path: str) -> Obj:
    """``obj[key]`` as a map (``{}`` when absent or null)."""
    value = obj.get(key)
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise Unreadable(f"{path}: {show(value)} is not a map")
    return value


def objects(obj: Obj, key: str, path: str) -> list[Obj]:
    """``obj[key]`` as a list of maps (``[]`` when absent or null)."""
    value = obj.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise Unreadable(f"{path}: {show(value)} is not a list")
    for i, item in enumerate(value):
        if not isinstance(item, Mapping):
            raise Unreadable(f"{path}[{i}]: {show(item)} is not a map")
    return value


def string(obj: Obj, key: str, path: str, default: str = "") -> str:
    """``obj[key]`` as a string (``default`` when absent or null)."""
    value = obj.get(key)
    if value is None:
        return default
    if not isinstance(value, str):
        raise Unreadable(f"{path}: {show(value)} is not a string")
    return value


def flag(obj: Obj, key: str, path: str) -> bool:
    """``obj[key]`` as a boolean (False when absent or null)."""
    value = obj.get(key)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise Unreadable(f"{path}: {show(value)} is not true or false")
    return value


def strings(obj: Obj, key: str, path: str) -> dict[str, str]:
    """``obj[key]`` as a map of strings to strings (labels, annotations)."""
    out = {}
    for k, v in mapping(obj, key, path).items():
        if not isinstance(k, str) or not isinstance(v, str):
            raise Unreadable(f"{path}: {show(k)}: {show(v)} is not a string to a string")
        out[k] = v
    return out


def identity(obj: Any, kind: str, namespaced: bool = True) -> tuple[str, str]:
    """``(namespace, name)`` of ``obj``: a valid Kubernetes name (and namespace), else :class:`Unreadable`."""
    if not isinstance(obj, Mapping):
        raise Unreadable(f"{kind}: {show(obj)} is not an object")
    meta = mapping(obj, "metadata", f"{ident(kind, obj)}: metadata")
    name = meta.get("name")
    if not matches("k8s-name", name):
        raise Unreadable(f"{ident(kind, obj)}: metadata.name: {show(name)} is not a Kubernetes name")
    ns = meta.get("namespace") if namespaced else None
    if ns is not None and not matches("k8s-label", ns):
        raise Unreadable(f"{ident(kind, obj)}: metadata.namespace: {show(ns)} is not a Kubernetes namespace")
    return str(ns or ""), str(name)


#: Replicas and other counts are int32 in the Kubernetes API.
MAX_COUNT = 2**31 - 1


def count(value: Any, path: str) -> int:
    """A whole number of things (replicas, pods): an int or its ASCII digits, not a bool, not negative."""
    try:
        n = strict_int(value, path)
    except ValueError:
        raise Unreadable(f"{path}: {show(value)} is not a whole number") from None
    if n < 0:
        raise Unreadable(f"{path}: {show(value)} is negative")
    if n > MAX_COUNT:
        raise Unreadable(f"{path}: {show(value)} is more than Kubernetes counts (int32)")
    return n


def quantity(value: Any, path: str) -> Decimal:
    """A Kubernetes quantity (``2``, ``"2"``, ``"1Ki"``, ``"500m"``), finite and not negative."""
    from kubernetes.utils.quantity import parse_quantity

    ok = isinstance(value, str) and _QUANTITY.fullmatch(value) is not None
    ok = ok or (isinstance(value, int) and not isinstance(value, bool))
    if not ok:
        raise Unreadable(f"{path}: {show(value)} is not a Kubernetes quantity")
    try:
        q = Decimal(parse_quantity(value))
    except (ValueError, ArithmeticError):
        raise Unreadable(f"{path}: {show(value)} is not a Kubernetes quantity") from None
    if not q.is_finite():
        raise Unreadable(f"{path}: {show(value)} is not a finite quantity")
    if q < 0:
        raise Unreadable(f"{path}: {show(value)} is negative")
    if q > MAX_QUANTITY:
        raise Unreadable(f"{path}: {show(value)} is larger than Kubernetes keeps")
    return q


def devices(value: Any, path: str) -> int:
    """A device count (GPUs, MIG slices): a whole quantity, as Kubernetes requires of extended resources."""
    q = quantity(value, path)
    if q != q.to_integral_value():
        raise Unreadable(f"{path}: {show(value)} is not a whole number of devices")
    return int(q)


class Problems(list[str]):
    """The problems met reading one object; :meth:`read` gives a cautious value for a field it cannot read."""

    def read(self, get: Callable[[], T], cautious: T) -> T:
        try:
            return get()
        except Unreadable as exc:
            self.append(str(exc))
            return cautious
