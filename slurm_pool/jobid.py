"""A Slurm job id in Slurm's own notation, the one type every entry point takes.  Stdlib only.

``123`` (a job; an array's or a heterogeneous job's whole), ``123_4`` (task 4
of array 123), ``123+1`` (component 1 of heterogeneous job 123), and, only
where a command takes a range (``scancel``), ``123_[1-3,7]``.  What Slurm's
own parser (``unfmt_job_id_string`` in ``src/common/slurm_protocol_defs.c``)
reads more loosely is refused here: signs, leading zeros, blanks, ``_``
digit separators, other scripts' digits, decimals.  Bounds, from Slurm:

* a job id is a uint32 above 0 and below ``MAX_FED_JOB_ID`` (0xfffffffd,
  ``slurm/slurm.h``; federated ids use the top bits, so the local
  ``MaxJobId`` bound of 0x3FFFFFF does not apply to every id a user sees);
* an array task id is below ``MaxArraySize``, which "may not exceed 4000001"
  (slurm.conf(5); default 1001, ``DEFAULT_MAX_ARRAY_SIZE`` in
  ``src/common/read_config.h``): at most 4,000,000;
* a het component's offset is below ``MAX_HET_JOB_COMPONENTS`` (128, ``slurm/slurm.h``).

A record in the queue has a unique id and a name in this notation
(:func:`names`): task 2 of array 4 may be job 7 (``7`` and ``4_2`` name it),
component 1 of het job 5 is job 6 (``6`` and ``5+1``), and ``4`` / ``5``
name the whole array / het job, as ``scancel`` reads them.
"""

from __future__ import annotations

import re

from slurm_pool.text import shown

#: Largest job id: below MAX_FED_JOB_ID (0xfffffffd, slurm/slurm.h; unfmt_job_id_string refuses it and above).
MAX_JOB_ID = 0xFFFFFFFD - 1
#: Largest array task id: MaxArraySize "may not exceed 4000001" (slurm.conf(5)) and tasks are below it.
MAX_ARRAY_TASK = 4_000_000
#: Largest het component offset: MAX_HET_JOB_COMPONENTS (128, slurm/slurm.h) components, from 0.
MAX_HET_COMPONENT = 127
#: Most ranges one array expression may list (a bound on the work one request makes).
MAX_RANGES = 64

_NUM = r"(?:0|[1-9][0-9]{0,9})"
_ID = re.compile(rf"({_NUM})(?:_({_NUM})|\+({_NUM})|_\[({_NUM}(?:-{_NUM})?(?:,{_NUM}(?:-{_NUM})?)*)\])?")
_ITEM = re.compile(rf"({_NUM})(?:-({_NUM}))?")

SHAPE = (
    "a Slurm job id: 123, an array task 123_4 or a heterogeneous job's component 123+1 "
    "(ASCII digits, no sign or leading zero)"
)


class JobIdError(ValueError):
    """A value that is not a job id in Slurm's notation; the message names the field and the value."""


class JobId:
    """A job, an array task (``task``), a het component (``component``) or array tasks (``tasks``: ranges).

    Immutable and compared by value, like a frozen dataclass, but written out: the prolog checks its job's
    id with it, and ``dataclasses`` would pull ``inspect`` into every hook's start (tests/unit/test_node_cli.py).
    """

    __slots__ = ("job", "task", "component", "tasks")
    job: int
    task: int | None
    component: int | None
    #: Inclusive ranges of array task ids (``123_[1-3,7]``); only from :meth:`parse` with ``ranges=True``.
    tasks: tuple[tuple[int, int], ...]

    def __init__(
        self, job: int, task: int | None = None, component: int | None = None, tasks: tuple[tuple[int, int], ...] = ()
    ) -> None:
        for name, value in (("job", job), ("task", task), ("component", component), ("tasks", tasks)):
            object.__setattr__(self, name, value)
        self._check()

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"JobId is immutable: cannot set {name}")

    def _key(self) -> tuple:
        return (self.job, self.task, self.component, self.tasks)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, JobId) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return f"JobId(job={self.job!r}, task={self.task!r}, component={self.component!r}, tasks={self.tasks!r})"

    def _check(self) -> None:
        _bound(self.job, 1, MAX_JOB_ID, "a job id", str(self.job))
        if self.task is not None:
            _bound(self.task, 0, MAX_ARRAY_TASK, "an array task id", str(self.task))
        if self.component is not None:
            _bound(self.component, 0, MAX_HET_COMPONENT, "a het component", str(self.component))
        for lo, hi in self.tasks:
            _bound(lo, 0, MAX_ARRAY_TASK, "an array task id", str(lo))
            _bound(hi, lo, MAX_ARRAY_TASK, "an array task range end", str(hi))
        if sum(x is not None and x != () for x in (self.task, self.component, self.tasks or None)) > 1:
            raise JobIdError("job id: an array task, a het component and a range of tasks exclude each other")

    @classmethod
    def parse(cls, value: object, what: str = "job id", *, ranges: bool = False) -> "JobId":
        """``value`` (a str, or an int for a plain id) in Slurm's notation; :class:`JobIdError` otherwise."""
        if isinstance(value, bool) or not isinstance(value, (int, str)):
            raise JobIdError(f"{what}: {value!r} is not {SHAPE}")
        if isinstance(value, int):
            return cls(_checked(value, 1, MAX_JOB_ID, what, "a job id", str(value)))
        m = _ID.fullmatch(value) if value.isascii() else None
        if m is None:
            raise JobIdError(f"{what}: {_quoted(value)} is not {SHAPE}{_why_not(value)}")
        job = _checked(int(m.group(1)), 1, MAX_JOB_ID, what, "a job id", value)
        if m.group(2) is not None:
            return cls(job, task=_checked(int(m.group(2)), 0, MAX_ARRAY_TASK, what, "an array task id", value))
        if m.group(3) is not None:
            return cls(job, component=_checked(int(m.group(3)), 0, MAX_HET_COMPONENT, what, "a het component", value))
        if m.group(4) is not None:
            if not ranges:
                raise JobIdError(f"{what}: {_quoted(value)}: a range of array tasks is not taken here")
            return cls(job, tasks=_ranges(m.group(4), what, value))
        return cls(job)

    @property
    def plain(self) -> bool:
        """A plain id: a job, or the whole of an array or het job."""
        return self.task is None and self.component is None and not self.tasks

    def __str__(self) -> str:
        if self.task is not None:
            return f"{self.job}_{self.task}"
        if self.component is not None:
            return f"{self.job}+{self.component}"
        if self.tasks:
            return f"{self.job}_[{','.join(str(lo) if lo == hi else f'{lo}-{hi}' for lo, hi in self.tasks)}]"
        return str(self.job)

    def has_task(self, task: int) -> bool:
        """``task`` is this id's task, or in its ranges."""
        return task == self.task or any(lo <= task <= hi for lo, hi in self.tasks)


def own_id(value: object, what: str = "SLURM_JOB_ID") -> str:
    """A job's own id as Slurm sets it (``SLURM_JOB_ID``: digits, the same for every task of an array or
    component of a het job is its own), checked as :class:`JobId`; :class:`JobIdError` naming ``what`` else."""
    ref = JobId.parse(value, what)
    if not ref.plain:
        raise JobIdError(f"{what}: {_quoted(str(value))} is not a job's own id (digits only)")
    return str(ref)


def names(ref: JobId, unique: int, own: JobId) -> bool:
    """``ref`` names the queue record whose unique id is ``unique`` and whose own name is ``own``.

    ``own`` is what squeue prints for it (``%i``): ``4_2`` for a task, ``4_[1-3]`` for an array's tasks not yet
    started, ``5+1`` for a het component (``5+0`` its leader), else its unique id.  A plain ``ref`` names a
    record by its unique id, and every record of the array or het job of that id (as ``scancel`` reads it).
    """
    if ref.plain:
        return unique == ref.job or own.job == ref.job
    if own.job != ref.job:
        return False
    if ref.component is not None:
        return own.component == ref.component
    if ref.task is not None:
        return own.has_task(ref.task)
    mine = own.tasks or (((own.task, own.task),) if own.task is not None else ())
    return any(max(a, c) <= min(b, d) for a, b in ref.tasks for c, d in mine)


def parse_tasks(text: str) -> tuple[tuple[int, int], ...] | None:
    """Slurm's array task string (``1-3,5``, ``1-7:2``, with ``%N``, its limit on tasks running at once) as
    ranges; None when it is not one (squeue may cut a long one short with ``...``)."""
    body = text.split("%", 1)[0]
    out: list[tuple[int, int]] = []
    for item in body.split(","):
        m = re.fullmatch(r"([0-9]{1,7})(?:-([0-9]{1,7})(?::([1-9][0-9]{0,6}))?)?", item)
        if m is None:
            return None
        lo = int(m.group(1))
        hi = int(m.group(2)) if m.group(2) else lo
        step = int(m.group(3)) if m.group(3) else 1
        if hi < lo or hi > MAX_ARRAY_TASK:
            return None
        if step == 1:
            out.append((lo, hi))
        elif (hi - lo) // step > MAX_RANGES * 64:
            return None
        else:
            out.extend((t, t) for t in range(lo, hi + 1, step))
    return tuple(out) if out else None


def _ranges(body: str, what: str, value: str) -> tuple[tuple[int, int], ...]:
    items = body.split(",")
    if len(items) > MAX_RANGES:
        raise JobIdError(f"{what}: {_quoted(value)} lists more than {MAX_RANGES} ranges")
    out = []
    for item in items:
        m = _ITEM.fullmatch(item)
        assert m is not None  # the whole expression matched _ID
        lo = _checked(int(m.group(1)), 0, MAX_ARRAY_TASK, what, "an array task id", value)
        hi = lo if m.group(2) is None else _checked(int(m.group(2)), 0, MAX_ARRAY_TASK, what, "an array task id", value)
        if hi < lo:
            raise JobIdError(f"{what}: {_quoted(value)}: the range {item} ends before it starts")
        out.append((lo, hi))
    return tuple(out)


def _checked(n: int, lo: int, hi: int, what: str, kind: str, value: str) -> int:
    if not lo <= n <= hi:
        raise JobIdError(f"{what}: {_quoted(value)}: {kind} is {lo} to {hi} in Slurm, not {n}")
    return n


def _bound(n: object, lo: int, hi: int, kind: str, value: str) -> None:
    if isinstance(n, bool) or not isinstance(n, int):
        raise JobIdError(f"job id: {n!r} ({kind}) is not a whole number")
    _checked(n, lo, hi, "job id", kind, value)


def _why_not(value: str) -> str:
    """What is wrong with a value that is not in the notation, when it is one of the usual slips."""
    if not value:
        return ": it is empty"
    if not value.isascii():
        return ": it holds characters other than ASCII (digits of another script?)"
    if value != value.strip() or " " in value:
        return ": it holds blanks"
    if value[0] in "+-":
        return ": it has a sign"
    if "." in value or "e" in value.lower():
        return ": it is not a whole number"
    if re.match(r"0[0-9]|[0-9]+[_+]0[0-9]", value):
        return ": it has a leading zero"
    if "__" in value or "_+" in value or "+_" in value or re.search(r"[0-9]_[0-9]+[_+]", value):
        return ": an id has at most one array task or het component"
    return ""


def _quoted(value: str) -> str:
    """The value as repr shows it (control characters escaped), cut short."""
    return shown(repr(value[:41]) if len(value) <= 40 else repr(value[:40]) + "...")
