"""Hostile values against every field and reader (robustness, third round: issue 30).

The first round (``bench/robustness.py``) swaps values for odd ones and asks
only that nothing crashes.  This round puts *hostile* values -- a trailing
newline, a whole ``KEY=value`` line, terminal escapes, NEL and U+2028, Rich
markup, wrong JSON types, numbers Python reads too kindly -- into every place
one can reach, and checks what comes *out*:

* every spec string (positions generated from the schema) through ``render``:
  refused naming the field with nothing written, or every rendered
  slurm.conf/gres.conf line still one ``KEY=value`` line of a key the example has;
* ``--slurm-version`` values: refused;
* every string of a MIG plan through ``mig emit gres`` and ``mig apply --dry-run``:
  refused, or every gres line is ``NodeName=<node> Gres=...`` of a plan node;
* every number of a needs file through ``mig plan --needs``: refused or a plan;
* ``checkpoints prune`` under ``squeue`` answers that are not the whole queue
  (a fake ``squeue`` first on PATH): the queued job's directory survives;
* ``status`` on Slurm JSON whose every string in turn is hostile (fake
  ``sinfo``/``squeue``/``sacct``): no control character reaches the terminal;
* every number of a ``sacct --json`` record through ``simulate``: refused or a replay;
* the epilog's outcome file planted as a hard link, a symlink, a FIFO or
  another user's file (as root): never read.

Every CLI run must also exit 0, 1 or 2 (1 and 2 with an ``error`` line), print
no traceback and no raw control character (``\\n`` and ``\\t`` aside), in time.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import tempfile
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from click.testing import CliRunner, Result

REPO = Path(__file__).resolve().parent.parent

from slurm_pool.cli import cli  # noqa: E402
from slurm_pool.mig.planner import Gpu, plan  # noqa: E402
from tests.support.mutation import paths, replaced  # noqa: E402
from tests.support.spec_positions import BASE, CONCRETE, POSITIONS, dotted, value_at, with_value  # noqa: E402

DATA = REPO / "tests" / "data" / "slurm"
#: What must never reach a terminal or a config line raw (tab and newline are layout).
RAW = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
HOSTILE_TEXT = [
    "x\nPrologSlurmctld=/tmp/evil",
    "x\r",
    "\x1b[2J\x1b]0;owned\x07",
    "x\x85y",
    "x\u2028y",
    "\u202ex",
    "x\x00",
    "[/]",
    "[bold]x[/bold]",
    "a b=c",
    "#x",
    "a,b",
    "$(id)",
]
WRONG_TYPES: list[Any] = [None, True, 7, 1.5, [], {}, ["x"], {"a": "b"}]
HOSTILE_NUMBERS: list[Any] = [
    True, False, None, "nan", "NaN", "inf", "-inf", "1e400", "1_0", "١٢", "²", "1.5", -1, -2.5, 10**30, "", "x", [], {},
]  # fmt: skip
CONF_LINE = re.compile(r'#.*|\s*|(?:[A-Za-z][A-Za-z0-9]*=(?:"[^"\n]*"|[^\s"]*)\s*)+')
GRES_LINE = re.compile(r"NodeName=(?P<node>[A-Za-z0-9][A-Za-z0-9._-]*) Gres=\S+")


@dataclass
class Tally:
    tried: int = 0
    clean: int = 0
    failures: list[str] = field(default_factory=list)


def _invoke(argv: list[str], timeout: float, env: dict[str, str] | None = None) -> Result | str:
    """The CLI's result, or why there is none (raised, or no answer in time)."""
    box: dict[str, Any] = {}

    def go() -> None:
        try:
            box["res"] = CliRunner().invoke(cli, argv, color=True, env=env)
        except BaseException as exc:  # noqa: BLE001 -- classified below
            box["err"] = exc

    t = threading.Thread(target=go, daemon=True)
    t.start()
    t.join(timeout)
    if t.is_alive():
        return f"no answer within {timeout:g} s"
    if "err" in box:
        return f"raised {type(box['err']).__name__}"
    return box["res"]


def check(
    tally: Tally,
    argv: list[str],
    timeout: float,
    accept: Callable[[Result], str | None] = lambda _r: None,
    env: dict[str, str] | None = None,
    what: str | None = None,
) -> None:
    """One CLI run: clean when it exits 0/1/2 plainly and ``accept`` finds nothing wrong with the result."""
    tally.tried += 1
    what = what or " ".join(argv)[:160]
    res = _invoke(argv, timeout, env)
    if isinstance(res, str):
        tally.failures.append(f"{what!r}: {res}")
        return
    problem = verdict(res, accept)
    if problem:
        tally.failures.append(f"{what!r}: {problem}"[:300])
    else:
        tally.clean += 1


def verdict(res: Any, accept: Callable[[Any], str | None] = lambda _r: None) -> str | None:
    """What is wrong with a CLI result (``output``, ``exit_code``, ``exception``); None: it is clean."""
    out = res.output
    raw = RAW.search(out)
    if res.exception is not None and not isinstance(res.exception, SystemExit):
        return f"{type(res.exception).__name__}: {res.exception}"
    if "Traceback" in out:
        return "printed a traceback"
    if res.exit_code not in (0, 1, 2):
        return f"exit {res.exit_code}"
    if res.exit_code and "rror" not in out:
        return f"exit {res.exit_code} without an error message"
    if raw:
        return f"printed a raw control character: {raw.group()!r}"
    return accept(res)


def _sample(items: list[Any], k: int | None, rng: random.Random) -> list[Any]:
    return items if k is None or k >= len(items) else rng.sample(items, k)


# -- the spec, through render ---------------------------------------------------------------


def _spec_cases() -> list[tuple[tuple[Any, ...], str]]:
    out = []
    for pos in POSITIONS:
        path = CONCRETE[pos]
        if path is None:
            continue
        good = value_at(BASE, path)
        out += [(path, v) for v in HOSTILE_TEXT] + [(path, good + "\n"), (path, good + "\nNodeName=evil Gres=gpu:8")]
    return out


def spec_strings(work: Path, k: int | None, rng: random.Random, timeout: float) -> Tally:
    tally = Tally()
    baseline = work / "baseline"
    (work / "base.yaml").write_text(yaml.safe_dump(BASE, sort_keys=False))
    _invoke(["render", str(work / "base.yaml"), "-o", str(baseline), "--slurm-version", "26.05"], timeout)
    keys = _conf_keys(baseline)
    for i, (path, value) in enumerate(_sample(_spec_cases(), k, rng)):
        spec = work / f"spec-{i}.yaml"
        spec.write_text(yaml.safe_dump(with_value(BASE, path, value), sort_keys=False))
        out = work / f"render-{i}"
        field_path = re.sub(r"(\[[0-9]+\])+\Z", "", dotted(path))  # an item of a list: its list is named

        def accept(res: Result, out: Path = out, field_path: str = field_path) -> str | None:
            if res.exit_code:
                if out.exists() and any(out.iterdir()):
                    return "failed but wrote files"
                return None if f"error: {field_path}" in res.output else f"the error does not name {field_path}"
            bad = [line for name in ("slurm.conf", "gres.conf", "helpers.conf") for line in _lines(out / name)
                   if not CONF_LINE.fullmatch(line)]  # fmt: skip
            new = _conf_keys(out) - keys
            return f"rendered {bad[:2]}" if bad else (f"new config keys {sorted(new)}" if new else None)

        check(tally, ["render", str(spec), "-o", str(out), "--slurm-version", "26.05"], timeout, accept,
              what=f"render with {field_path}={value!r}")  # fmt: skip
    return tally


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def _conf_keys(out: Path) -> set[tuple[str, str]]:
    return {
        (name, line.split("=", 1)[0])
        for name in ("slurm.conf", "gres.conf", "helpers.conf")
        for line in _lines(out / name)
        if "=" in line and not line.startswith("#")
    }


def slurm_versions(work: Path, timeout: float) -> Tally:
    tally = Tally()
    spec = work / "base.yaml"
    for i, v in enumerate(["26.05\nX", "26.05\n", " 26.05", "26.05 ", "x26.05", "２６.05", "26.05;x", "\x1b[2J26.05"]):
        out = work / f"version-{i}"
        check(tally, ["render", str(spec), "-o", str(out), "--slurm-version", v], timeout,
              _refused, what=f"--slurm-version {v!r}")  # fmt: skip
    return tally


# -- MIG plans and needs --------------------------------------------------------------------


def _plan_doc() -> dict[str, Any]:
    gpus = [Gpu("n1", 0, ()), Gpu("n1", 1, ("7g.40gb",), busy=True), Gpu("n2", 0, None)]
    return plan("A100-40GB", gpus, {"3g.20gb": 1, "1g.5gb": 2}).to_dict()


def mig_plans(work: Path, k: int | None, rng: random.Random, timeout: float) -> Tally:
    tally = Tally()
    doc = _plan_doc()
    nodes = {"n1", "n2"}
    leaves = [p for p in paths(doc) if p and not isinstance(_at(doc, p), (dict, list))]
    cases = [(p, v) for p in leaves for v in HOSTILE_TEXT + WRONG_TYPES]
    for i, (path, value) in enumerate(_sample(cases, k, rng)):
        f = work / f"plan-{i}.json"
        f.write_text(json.dumps(replaced(doc, path, value)))

        def gres_ok(res: Result) -> str | None:
            if res.exit_code:
                return None
            for line in res.output.splitlines():
                m = GRES_LINE.fullmatch(line)
                if not m or m.group("node") not in nodes:
                    return f"wrote {line!r}"
            return None

        where = "/".join(map(str, path))
        check(tally, ["mig", "emit", "gres", "--plan", str(f)], timeout, gres_ok, what=f"emit gres {where}={value!r}")
        check(
            tally, ["mig", "apply", "--dry-run", "--plan", str(f)], timeout, what=f"apply --dry-run {where}={value!r}"
        )
    return tally


def _at(doc: Any, path: tuple[Any, ...]) -> Any:
    for p in path:
        doc = doc[p]
    return doc


def _refused(res: Result) -> str | None:
    return None if res.exit_code == 2 else f"exit {res.exit_code}: the value was read"


def mig_needs(work: Path, timeout: float) -> Tally:
    tally = Tally()
    row = {"gpu_mem_gb": 10, "compute": 0.3, "count": 2}
    for i, (key, value) in enumerate((k, v) for k in row for v in HOSTILE_NUMBERS):
        f = work / f"needs-{i}.json"
        f.write_text(json.dumps({"needs": [{**row, key: value}]}))
        # Unset or empty takes the field's default (a needs CSV has empty cells); a decimal string is a CSV number.
        may_read = value in (None, "") or (value == "1.5" and key != "count")
        check(tally, ["mig", "plan", "--gpus", "2", "--model", "A100-40GB", "--needs", str(f)], timeout,
              (lambda r: None) if may_read else _refused, what=f"needs {key}={value!r}")  # fmt: skip
    f = work / "plan-ok.json"
    f.write_text(json.dumps(_plan_doc()))
    for opt in ["--dev-dir", "--gres-conf", "--slurm-conf"]:
        for value in ["/dev\n", "/a b", "rel", "/a/../b", "/a=b", "/x\x1b[2J"]:
            check(tally, ["mig", "apply", "--dry-run", "--plan", str(f), opt, value], timeout,
                  _refused, what=f"mig apply {opt} {value!r}")  # fmt: skip
    return tally


# -- fake Slurm commands on PATH -------------------------------------------------------------


def _fake_bin(work: Path) -> Path:
    """``sinfo``, ``squeue``, ``sacct``, ``sacctmgr`` and ``scontrol`` that print the files named by FAKE_* variables."""
    bin_dir = work / "bin"
    bin_dir.mkdir(exist_ok=True)
    scripts = {
        "sinfo": '[ "$1" = --version ] && { echo "slurm 22.05.8"; exit 0; }\ncat "$FAKE_SINFO"',
        "squeue": 'cat "$FAKE_SQUEUE"; exit "${FAKE_SQUEUE_RC:-0}"',
        "sacct": 'cat "$FAKE_SACCT"',
        "sacctmgr": 'printf "scavenger|0.3\\n"',
        "scontrol": "exit 1",
    }
    for name, body in scripts.items():
        p = bin_dir / name
        p.write_text("#!/bin/sh\n" + body + "\n")
        p.chmod(0o755)
    return bin_dir


def _env(bin_dir: Path, **files: Path) -> dict[str, str]:
    return {"PATH": f"{bin_dir}:{os.environ.get('PATH', '')}", **{k: str(v) for k, v in files.items()}}


def prune_answers(work: Path, timeout: float) -> Tally:
    tally = Tally()
    bin_dir = _fake_bin(work)
    job = json.loads((DATA / "22.05" / "squeue-busy.json").read_text())["jobs"][0]
    answers: list[Any] = [
        {"errors": [{"error": "slurmctld down"}], "jobs": []},
        {"errors": ["x"], "jobs": [job]},
        {"jobs": [job, "x"]},
        {"jobs": [job, None]},
        {"jobs": {"0": job}},
        {"jobs": None},
        {},
        [job],
        {"jobs": [{**job, "job_id": "102\n"}]},
        {"jobs": [{**job, "job_id": True}]},
        {"jobs": [{**job, "job_id": "١٠٢"}]},
        {"jobs": [{**job, "job_id": 1.5}]},
    ]
    texts = [json.dumps(a) for a in answers] + ["", "not json", '{"jobs": [NaN]}', "\x1b[2J"]
    for i, text in enumerate(texts):
        base = work / f"ckpt-{i}"
        keep = base / "alice" / str(job["job_id"])
        keep.mkdir(parents=True)
        old = keep / "x"
        old.write_text("x")
        os.utime(old, (0, 0))
        os.utime(keep, (0, 0))
        answer = work / f"squeue-{i}.json"
        answer.write_text(text)

        def kept(res: Result, keep: Path = keep) -> str | None:
            return None if keep.is_dir() else "removed the directory of a job that is still queued"

        check(tally, ["checkpoints", "prune", "--base", str(base), "--keep-days", "0"], timeout, kept,
              env=_env(bin_dir, FAKE_SQUEUE=answer), what=f"prune with squeue answer {text[:60]!r}")  # fmt: skip
    return tally


def status_text(work: Path, k: int | None, rng: random.Random, timeout: float) -> Tally:
    tally = Tally()
    bin_dir = _fake_bin(work)
    nodes = json.loads((DATA / "22.05" / "nodes-busy.json").read_text())
    jobs = json.loads((DATA / "22.05" / "squeue-busy.json").read_text())
    sacct = json.loads((DATA / "22.05" / "sacct.json").read_text())
    docs = {"sinfo": nodes, "squeue": jobs, "sacct": sacct}
    cases = [
        (which, p, v)
        for which, doc in docs.items()
        for p in paths(doc)
        if p and isinstance(_at(doc, p), str)
        for v in HOSTILE_TEXT[:7] + ["[/]"]
    ]
    for i, (which, path, value) in enumerate(_sample(cases, k, rng)):
        files = {}
        for name, doc in docs.items():
            f = work / f"status-{i}-{name}.json"
            f.write_text(json.dumps(replaced(doc, path, value) if name == which else doc))
            files[f"FAKE_{name.upper()}"] = f
        where = f"{which} {'/'.join(map(str, path))}={value!r}"
        check(tally, ["status", "--state-dir", ""], timeout, env=_env(bin_dir, **files), what=f"status with {where}")
    return tally


# -- the simulator's sacct reader ----------------------------------------------------------


def _read_numbers(sacct: dict[str, Any]) -> list[tuple[Any, ...]]:
    """The numbers the simulator reads from sacct: each job's submit, start and end, and its GPU counts."""
    out = []
    for p in paths(sacct):
        if len(p) == 4 and p[0] == "jobs" and p[2] == "time" and p[3] in ("submission", "start", "end"):
            out.append(p)
        elif len(p) == 6 and p[2] == "tres" and p[5] == "count":
            entry = _at(sacct, p[:5])
            if entry.get("type") == "gres" and str(entry.get("name", "")).startswith("gpu"):
                out.append(p)
    return out


def simulate_numbers(work: Path, k: int | None, rng: random.Random, timeout: float) -> Tally:
    """A number the replay reads that is not a whole number >= 0 is refused (exit 2), never read kindly or dropped."""
    tally = Tally()
    sacct = json.loads((DATA / "22.05" / "sacct.json").read_text())
    unset: list[Any] = [None, {}]  # {}: the 23.02+ number object without "set", i.e. unset
    cases = [(p, v) for p in _read_numbers(sacct) for v in HOSTILE_NUMBERS if v not in unset]
    spec = REPO / "examples" / "pool.yaml"
    for i, (path, value) in enumerate(_sample(cases, k, rng)):
        f = work / f"sacct-{i}.json"
        f.write_text(json.dumps(replaced(sacct, path, value)))
        check(tally, ["simulate", "--spec", str(spec), "--sacct", str(f), "--json"], timeout,
              _refused, what=f"simulate with {'/'.join(map(str, path))}={value!r}")  # fmt: skip
    return tally


# -- the bridge's readers of Kubernetes objects ----------------------------------------------

GPU = "nvidia.com/gpu"
ISVC: dict[str, Any] = {
    "apiVersion": "serving.kserve.io/v1beta1",
    "kind": "InferenceService",
    "metadata": {"name": "llm", "namespace": "serve", "labels": {"app": "llm"}},
    "spec": {
        "predictor": {
            "minReplicas": 2,
            "maxReplicas": 4,
            "model": {
                "modelFormat": {"name": "huggingface"},
                "resources": {"limits": {GPU: "1", "cpu": "4", "memory": "16Gi"}, "requests": {GPU: "1"}},
            },
        }
    },
    "status": {"components": {"predictor": {"latestReadyRevision": "llm-predictor-1"}}},
}


def bridge_demand() -> Tally:
    """Every value of an InferenceService made hostile: it is unreadable (and said so, escaped) or its
    demand is what it was -- never lower (a lent node would be taken from inference's count) nor higher."""
    from slurm_pool.bridge.demand import isvc_demand
    from slurm_pool.bridge.objects import Unreadable

    tally = Tally()
    want = isvc_demand(ISVC, GPU)
    # Wrong types and hostile text and numbers; not a well-typed absence (null, {}), which is a valid object.
    absent: list[Any] = [None, {}, {"a": "b"}, 7]
    values = [v for v in HOSTILE_TEXT + WRONG_TYPES + HOSTILE_NUMBERS if v not in absent]
    for path in paths(ISVC):
        if not path:
            continue
        for value in values:
            tally.tried += 1
            what = f"InferenceService {'/'.join(map(str, path))}={value!r}"
            try:
                got = _timed(lambda v=value, p=path: isvc_demand(replaced(ISVC, p, v), GPU), 10.0)
            except Unreadable as exc:
                if RAW.search(str(exc)):
                    tally.failures.append(f"{what}: unreadable, but said so with a raw control character")
                else:
                    tally.clean += 1
                continue
            except BaseException as exc:  # noqa: BLE001
                tally.failures.append(f"{what}: raised {type(exc).__name__}: {exc}"[:300])
                continue
            if got == want:
                tally.clean += 1
            else:
                tally.failures.append(f"{what}: read as demand {got} (was {want})")
    return tally


# -- the epilog's outcome file (as root) ---------------------------------------------------


UID = 4242  # the job's user, as the epilog is told it (SLURM_JOB_UID)


def _planted(control: Path, kind: str, other: Path) -> None:
    """``control/outcome.json`` as ``kind``; ``other`` is root's file the user wants read as theirs."""
    target = control / "outcome.json"
    if kind == "hard link to another user's file":
        os.link(other, target)
    elif kind == "symlink to another user's file":
        target.symlink_to(other)
    elif kind == "FIFO":
        os.mkfifo(target)
        os.chown(target, UID, UID)
    elif kind == "directory":
        target.mkdir()
        os.chown(target, UID, UID)
    elif kind == "another user's file":
        shutil.copy(other, target)
    elif kind in ("hard link to the user's own file", "the user's own file"):
        own = control / "own.json"
        shutil.copy(other, own)
        os.chown(own, UID, UID)
        os.link(own, target) if kind.startswith("hard link") else os.rename(own, target)


def outcome_files(work: Path) -> Tally:
    """``read_outcome`` as the epilog calls it: a planted file is never read, the user's own one is (root only)."""
    from slurm_pool.node.jobdir import read_outcome

    tally = Tally()
    if os.geteuid() != 0:
        tally.failures.append("not run: planting another user's file needs root")
        return tally
    other = work / "root-outcome.json"
    other.write_text(json.dumps({"job_id": "42", "reason": "preempt", "restart_count": 9}))
    kinds = ["hard link to another user's file", "symlink to another user's file", "FIFO", "directory",
             "another user's file", "hard link to the user's own file", "the user's own file"]  # fmt: skip
    for i, kind in enumerate(kinds):
        tally.tried += 1
        job_dir = work / f"job-{i}"
        (job_dir / ".slurm-pool").mkdir(parents=True)
        for d in (job_dir, job_dir / ".slurm-pool"):
            os.chown(d, UID, UID)
        _planted(job_dir / ".slurm-pool", kind, other)
        said: list[str] = []
        try:
            got = _timed(lambda d=job_dir, s=said: read_outcome(str(d), UID, say=s.append), 10.0)
        except BaseException as exc:  # noqa: BLE001
            tally.failures.append(f"outcome.json as {kind}: raised {type(exc).__name__}: {exc}")
            continue
        if kind == "the user's own file":
            ok = got is not None  # the control: the reader does read a file it may
        else:
            ok = got is None and bool(said)
        if ok:
            tally.clean += 1
        else:
            tally.failures.append(f"outcome.json as {kind}: read {got!r}, said {said!r}")
    return tally


def _timed(fn: Callable[[], Any], timeout: float) -> Any:
    box: dict[str, Any] = {}

    def go() -> None:
        try:
            box["v"] = fn()
        except BaseException as exc:  # noqa: BLE001 -- raised again in the caller
            box["e"] = exc

    t = threading.Thread(target=go, daemon=True)
    t.start()
    t.join(timeout)
    if t.is_alive():
        raise TimeoutError(f"no answer within {timeout:g} s")
    if "e" in box:
        raise box["e"]
    return box.get("v")


# -- all of it ---------------------------------------------------------------------------


def run(per_target: int | None, seed: int, timeout: float) -> dict[str, Tally]:
    """Every target's tally (``per_target``: a random sample of each target's cases; None: all of them)."""
    rng = random.Random(seed)
    work = Path(tempfile.mkdtemp(prefix="slurm-pool-hostile-"))
    work.chmod(0o755)
    try:
        return dict(_targets(work, per_target, rng, timeout))
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _targets(work: Path, k: int | None, rng: random.Random, timeout: float) -> Iterator[tuple[str, Tally]]:
    yield "render: every spec string (from the schema)", spec_strings(work, k, rng, timeout)
    yield "render --slurm-version", slurm_versions(work, timeout)
    yield "mig emit gres / apply --dry-run: every plan value", mig_plans(work, k, rng, timeout)
    yield "mig plan --needs numbers; mig apply path options", mig_needs(work, timeout)
    yield "checkpoints prune: squeue answers that are not the queue", prune_answers(work, timeout)
    yield "status: every string of Slurm's JSON", status_text(work, k, rng, timeout)
    yield "simulate: every number of a sacct record", simulate_numbers(work, k, rng, timeout)
    yield "rebalance: every value of an InferenceService", bridge_demand()
    yield "epilog: outcome.json planted (root)", outcome_files(work)
