#!/usr/bin/env python3
"""Site-scale cases of the Slurm reads: exporter scrape, ``status --json``, ``doctor``, job_submit.lua.

A case module of :mod:`bench.site_scale` (see its docstring for the interface).
The inputs scale up what the real 26.05 daemons printed
(``tests/data/slurm/26.05/nodes-busy.json``, ``squeue-requeued.json``): the
same records with new node names and job ids, GPU types, partitions and
projects, running jobs placed on nodes with free GPUs (GRES in use to match),
the rest pending, some requeued; a few nodes drained by slurm-pool or a human,
a few down.  A spec (300 projects, 50 partitions, a node group per owner
partition covering every node) goes with them.  Documents are written the way
Slurm prints them (one-space indentation), by :mod:`bench.slurm_docs`.

The paths run against :class:`DocRunner`, a Runner that answers each Slurm
command from the generated files as a subprocess's captured stdout would: the
file's text, read on each call.  A narrow read (``sinfo``/``squeue`` with a
format) is answered by ``tests.support.narrow_text.answer`` when that module
exists: ``--generate`` runs each case once to record those answers (so the
measured child never parses the JSON it does not read), and a later call whose
argv differs only by the per-read token gets the recorded text with the token
swapped.  The baseline of each read case is ``json.loads`` of the same
documents; of job_submit.lua, the same call on ``examples/pool.yaml``'s policy.

    python3 bench/scale_slurm.py --list [--quick]
    python3 bench/scale_slurm.py --generate DIR [--seed N] [--quick]
    python3 bench/scale_slurm.py --case NAME --inputs DIR [--baseline]
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import importlib.util
import json
import os
import re
import sys
import time
from pathlib import Path
from typing import Any, Callable, Sequence

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.slurm_docs import (  # noqa: E402
    FULL,
    PARTITIONS,
    PROJECTS,
    QUICK,
    RELEASE,
    generate,
    size_name,
    spec_document,
)
from slurm_pool.adapters.runner import CommandError, Result  # noqa: E402

CONFIG = f"""Configuration data as of 2026-12-02T18:00:00
JobSubmitPlugins        = lua
PlugStackConfig         = /etc/slurm/plugstack.conf
Prolog[0]               = /usr/local/bin/slurm-pool-prolog
Epilog[0]               = /usr/local/bin/slurm-pool-epilog
HealthCheckProgram      = /usr/local/bin/slurm-pool-healthcheck
PrologFlags             = Alloc
SLURM_VERSION           = {RELEASE}
"""
HELP = "      --checkpoint=[DIR]      The job checkpoints when preempted\n"


def cases(quick: bool) -> list[str]:
    n, j = QUICK if quick else FULL
    projects, parts = (30, 10) if quick else (PROJECTS, PARTITIONS)
    return [
        f"exporter-{size_name(n, j)}",
        f"status-{size_name(n, j)}",
        f"doctor-{size_name(n)}",
        f"job-submit-{projects}p-{parts}part",
    ]


# -- answering Slurm's commands ------------------------------------------------------------------


def _narrow() -> Any:
    """``tests.support.narrow_text`` when it exists, else None."""
    if importlib.util.find_spec("tests.support.narrow_text") is None:
        return None
    import tests.support.narrow_text as narrow

    return narrow


_PIECES = re.compile(r"([^A-Za-z0-9~_-]+)")


def _swapped(argv: Sequence[str], known: Sequence[str], text: str) -> str | None:
    """``text`` (the answer to ``known``) for ``argv`` when the two differ only by random tokens in some arguments."""
    if len(argv) != len(known):
        return None
    swaps: dict[str, str] = {}
    for new, old in zip(argv, known, strict=True):
        if new == old:
            continue
        a, b = _PIECES.split(old), _PIECES.split(new)
        if len(a) != len(b) or a[1::2] != b[1::2]:
            return None  # another format, not another token
        for x, y in zip(a[::2], b[::2], strict=True):
            if x == y:
                continue
            lead = len(os.path.commonprefix([x, y]))
            x, y = x[lead:], y[lead:]
            if len(x) < 6 or len(x) != len(y):
                return None
            swaps[x] = y
    for x, y in swaps.items():
        text = text.replace(x, y)
    return text


class DocRunner:
    """A Runner that answers Slurm's read commands from generated documents.

    JSON reads get the file's text, read on each call (a subprocess's captured
    stdout); narrow reads get recorded answers (``answers``: argv -> text) or,
    failing those, ``narrow_text.answer`` on the parsed documents (parsed once,
    on first need; ``parsed_late`` says it happened).
    """

    def __init__(self, nodes: Path, jobs: Path | None, answers: list[tuple[list[str], str]] | None = None):
        self.nodes, self.jobs = nodes, jobs
        self.answers = answers or []
        self.recorded: list[tuple[list[str], str]] = []
        self.record = False
        self.parsed_late = False
        self.json_reads: list[str] = []  # the JSON reads answered, as "command --json [--jobs=N ids]"
        self._docs: tuple[Any, Any] | None = None

    def docs(self) -> tuple[Any, Any]:
        """The parsed documents; each job keeps only the keys the narrow formatter names (a tenth of the memory)."""
        if self._docs is None:
            self.parsed_late = True
            narrow = _narrow()
            named = set(re.findall(r'"([a-z_]+)"', Path(narrow.__file__).read_text())) if narrow else set()

            def lean(obj: dict[str, Any]) -> dict[str, Any]:
                if not named or "job_id" not in obj or "job_state" not in obj:
                    return obj
                return {k: v for k, v in obj.items() if k in named or k.startswith("tres_per_")}

            self._docs = (
                json.loads(self.nodes.read_text()),
                json.loads(self.jobs.read_text(), object_hook=lean) if self.jobs else {"jobs": []},
            )
        return self._docs

    def answer(self, argv: list[str]) -> str | None:
        if argv == ["sinfo", "--version"]:
            return f"slurm {RELEASE}\n"
        if argv[:3] == ["scontrol", "show", "config"]:
            return CONFIG
        if argv[:2] == ["sbatch", "--help"]:
            return HELP
        if argv[0] == "sacctmgr":
            return ""
        if "--json" in argv:
            ids = [a.count(",") + 1 for a in argv if a.startswith("--jobs=")]
            shown = " ".join(a for a in argv if not a.startswith("--jobs="))
            self.json_reads.append(shown + (f" --jobs=({ids[0]} ids)" if ids else ""))
        for known, text in self.answers:
            got = text if known == argv else _swapped(argv, known, text)
            if got is not None:
                return got
        if "--json" in argv:
            picked = [a.split("=", 1)[1] for a in argv if a.startswith("--jobs=")]
            if argv[0] == "squeue" and picked:  # the JSON of some jobs only, whole
                ids = {int(i) for i in picked[0].split(",") if i.isdigit()}
                jobs = json.loads(self.jobs.read_text()) if self.jobs else {"jobs": []}
                text = json.dumps({**jobs, "jobs": [j for j in jobs["jobs"] if j.get("job_id") in ids]}, indent=1)
                self.parsed_late = True
            elif argv[0] == "squeue":
                return self.jobs.read_text() if self.jobs else '{"jobs": [], "errors": []}'
            elif argv[0] in ("scontrol", "sinfo"):
                return self.nodes.read_text()
            elif argv[0] == "sacct":
                return '{"jobs": [], "errors": []}'
            else:
                return None
        else:
            narrow = _narrow()
            text = None if narrow is None else narrow.answer(argv, *self.docs())
        if text is not None and self.record:
            self.recorded.append((list(argv), text))
        return text

    def run(
        self, argv: Sequence[str], *, check: bool = True, input: str | None = None, timeout: float | None = None
    ) -> Result:
        argv = list(argv)
        text = self.answer(argv)
        res = Result(tuple(argv), 0, text) if text is not None else Result(tuple(argv), 1, "", "not answered here")
        if check and not res.ok:
            raise CommandError(res)
        return res


def answers_path(where: Path, name: str) -> Path:
    return where / f"narrow-{name}.json"


def narrow_stamp() -> str:
    """What the recorded narrow answers depend on: the formatter's and the readers' source."""
    h = hashlib.sha256()
    for rel in ("tests/support/narrow_text.py", "slurm_pool/adapters/slurm.py", "slurm_pool/adapters/records.py"):
        p = ROOT / rel
        h.update(p.read_bytes() if p.exists() else b"-")
    for p in sorted((ROOT / "slurm_pool" / "adapters").glob("narrow*.py")):
        h.update(p.read_bytes())
    return h.hexdigest()


def load_answers(where: Path, name: str) -> list[tuple[list[str], str]]:
    p = answers_path(where, name)
    if not p.exists():
        return []
    data = json.loads(p.read_text())
    return [(a, t) for a, t in data["answers"]] if data.get("stamp") == narrow_stamp() else []


# -- the cases -----------------------------------------------------------------------------------


def parse_case(name: str) -> tuple[str, dict[str, int]]:
    m = re.fullmatch(r"(exporter|status|doctor)-([0-9]+)n(?:-([0-9]+)j)?|(job-submit)-([0-9]+)p-([0-9]+)part", name)
    if m is None:
        raise SystemExit(f"--case {name!r}: not a case of this module (see --list)")
    if m.group(4):
        return "job-submit", {"projects": int(m.group(5)), "partitions": int(m.group(6))}
    sizes = {"nodes": int(m.group(2))}
    if m.group(3):
        sizes["jobs"] = int(m.group(3))
    return m.group(1), sizes


def files(where: Path, sizes: dict[str, int]) -> tuple[Path, Path | None, Path]:
    n = sizes["nodes"]
    jobs = where / f"squeue-{size_name(n, sizes['jobs'])}.json" if "jobs" in sizes else None
    return where / f"nodes-{size_name(n)}.json", jobs, where / f"spec-{size_name(n)}.yaml"


def path_exporter(runner: DocRunner, spec: Path) -> Callable[[], dict[str, Any]]:
    """One scrape of a fresh collector (its deadline lifted, so the whole read is timed)."""
    from slurm_pool.adapters.slurm import SlurmClient
    from slurm_pool.metrics.collector import PoolCollector

    def scrape() -> dict[str, Any]:
        collector = PoolCollector(SlurmClient(runner), state_dir=None, deadline=24 * 3600.0)
        families = list(collector.collect())
        up = next(f.samples[0].value for f in families if f.name == "slurm_pool_up")
        collector._pool.shutdown(wait=True)
        if up != 1:
            errors = {s.labels["source"]: s.value for f in families for s in f.samples if "source" in s.labels}
            raise SystemExit(f"the scrape answered slurm_pool_up 0 (errors by source: {errors})")
        return {"up": up, "families": len(families)}

    return scrape


def path_status(runner: DocRunner, spec: Path) -> Callable[[], dict[str, Any]]:
    """``status --json --usage-hours 0 --state-dir ''`` through its click command, Slurm answered by ``runner``."""
    import slurm_pool.adapters.records  # noqa: F401 -- imported here, not in the timed call
    import slurm_pool.adapters.runner as runners
    import slurm_pool.metrics.cli  # noqa: F401
    from slurm_pool.metrics.status_cli import status

    runners.SubprocessRunner = lambda *a, **k: runner  # type: ignore[assignment,misc]

    def show() -> dict[str, Any]:
        with open(os.devnull, "w") as sink, contextlib.redirect_stdout(sink):
            status.main(["--json", "--usage-hours", "0", "--state-dir", ""], standalone_mode=False)
        return {}

    return show


def path_doctor(runner: DocRunner, spec: Path) -> Callable[[], dict[str, Any]]:
    """``doctor``'s gather, diagnosis and report on the loaded spec (loading it is not timed)."""
    import slurm_pool.accounting.apply  # noqa: F401
    import slurm_pool.accounting.plan  # noqa: F401
    import slurm_pool.render.context  # noqa: F401
    from slurm_pool.doctor import diagnose as doctor
    from slurm_pool.spec import load_spec

    loaded = load_spec(spec)
    os.environ.pop("SLURM_CONF", None)

    def check() -> dict[str, Any]:
        findings, _ = doctor.run(loaded, runner)
        return {"findings": len(findings)}

    return check


PATHS: dict[str, tuple[str, Callable[[DocRunner, Path], Callable[[], dict[str, Any]]]]] = {
    "exporter": ("exporter, one scrape", path_exporter),
    "status": ("`status --json`", path_status),
    "doctor": ("`doctor`", path_doctor),
}


def size_text(sizes: dict[str, int], jobs_path: Path | None) -> str:
    text = f"{sizes['nodes']:,} nodes"
    if "jobs" in sizes:
        text += f", {sizes['jobs']:,} jobs"
    return text


def run_read_case(kind: str, sizes: dict[str, int], where: Path, baseline: bool) -> dict[str, Any]:
    nodes, jobs, spec = files(where, sizes)
    for p in (nodes, spec, *([jobs] if jobs else [])):
        if not p.exists():
            raise SystemExit(f"{p}: not generated (run --generate first)")
    label, fn = PATHS[kind]
    out: dict[str, Any] = {"path": label, "size": size_text(sizes, jobs), "baseline": baseline}
    if baseline:
        texts = [nodes.read_text(), *([jobs.read_text()] if jobs else [])]
        start = time.perf_counter()
        for t in texts:
            json.loads(t)
        out["seconds"] = time.perf_counter() - start
        out["bytes"] = sum(len(t) for t in texts)
        return out
    runner = DocRunner(nodes, jobs, load_answers(where, f"{kind}-{size_name(sizes['nodes'], sizes.get('jobs'))}"))
    work = fn(runner, spec)
    start = time.perf_counter()
    extra = work()
    out["seconds"] = time.perf_counter() - start
    out.update(extra)
    notes = []
    if runner.parsed_late:
        notes.append("a narrow read had no recorded answer: the JSON was parsed in the measured run")
    if kind != "status" and runner.json_reads:
        notes.append(f"read as JSON too: {', '.join(sorted(set(runner.json_reads)))}")
    if notes:
        out["note"] = "; ".join(notes)
    out["json_reads"] = runner.json_reads
    return out


def record_answers(kind: str, sizes: dict[str, int], where: Path) -> None:
    """Run a read case once with narrow_text answering, and keep its answers for the measured runs."""
    name = f"{kind}-{size_name(sizes['nodes'], sizes.get('jobs'))}"
    if _narrow() is None or load_answers(where, name):
        return
    nodes, jobs, spec = files(where, sizes)
    runner = DocRunner(nodes, jobs)
    runner.record = True
    PATHS[kind][1](runner, spec)()
    answers_path(where, name).write_text(json.dumps({"stamp": narrow_stamp(), "answers": runner.recorded}))


def run_submit_case(sizes: dict[str, int], where: Path, baseline: bool, calls: int = 20000) -> dict[str, Any]:
    from slurm_pool.policy.lua import render_job_submit
    from slurm_pool.spec import load_spec
    from slurm_pool.versions import SlurmVersion
    from tests.support.lua_policy import LuaPolicy, unset_job

    spec_path = where / f"spec-{sizes['projects']}p-{sizes['partitions']}part.yaml"
    if baseline:
        spec_path = ROOT / "examples" / "pool.yaml"
    elif not spec_path.exists():
        raise SystemExit(f"{spec_path}: not generated (run --generate first)")
    spec = load_spec(spec_path)
    version = SlurmVersion.parse(RELEASE)
    policy = LuaPolicy(render_job_submit(spec, version))
    owner = next(p for p in spec.projects if p.owns)
    borrower = [p for p in spec.projects if not p.owns and p.tiers][-1]
    requests = [
        unset_job(account=owner.name),
        unset_job(account=borrower.name, qos="shared", time_limit=60, tres_per_node="gres:gpu:1"),
        unset_job(account=owner.name, qos="no-such-tier"),
    ]
    loop = """function(n, job)
        for i = 1, n do
            local copy = {}
            for k, v in pairs(job) do copy[k] = v end
            slurm_job_submit(copy, nil, 1000)
            reset_log()
        end
    end"""
    run = policy.lua.eval(loop)
    total = 0.0
    for req in requests:
        desc = policy.table(req)
        start = time.perf_counter()
        run(calls, desc)
        total += time.perf_counter() - start
    return {
        "path": "job_submit.lua per call",
        "size": f"{len(spec.projects)} projects, {len(spec.partitions)} partitions",
        "baseline": baseline,
        "seconds": total / (calls * len(requests)),
        "note": "per call, mean of an owner's default route, a borrower's GPU request and a rejection; "
        "baseline: the same calls on examples/pool.yaml's policy",
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    what = ap.add_mutually_exclusive_group(required=True)
    what.add_argument("--list", action="store_true", help="print the case names")
    what.add_argument("--generate", type=Path, metavar="DIR", help="write every case's inputs under DIR")
    what.add_argument("--case", metavar="NAME", help="run one case; prints one JSON line")
    ap.add_argument("--inputs", type=Path, help="where --generate wrote the inputs (with --case)")
    ap.add_argument("--baseline", action="store_true", help="time the baseline instead")
    ap.add_argument("--seed", type=int, default=32)
    ap.add_argument("--quick", action="store_true", help="small sizes (a smoke run)")
    args = ap.parse_args(argv)
    if args.list:
        print("\n".join(cases(args.quick)))
        return 0
    if args.generate:
        where = args.generate
        where.mkdir(parents=True, exist_ok=True)
        n, j = QUICK if args.quick else FULL
        projects, parts = parse_case(cases(args.quick)[-1])[1].values()
        generate(where, n, j, args.seed, PROJECTS, PARTITIONS)
        submit_spec = where / f"spec-{projects}p-{parts}part.yaml"
        if not submit_spec.exists():
            import yaml

            submit_spec.write_text(yaml.safe_dump(spec_document(n, projects, parts), sort_keys=False))
        for case in cases(args.quick):
            kind, sizes = parse_case(case)
            if kind in PATHS:
                record_answers(kind, sizes, where)
        return 0
    if args.inputs is None:
        ap.error("--case needs --inputs DIR")
    kind, sizes = parse_case(args.case)
    if kind == "job-submit":
        out = run_submit_case(sizes, args.inputs, args.baseline)
    else:
        out = run_read_case(kind, sizes, args.inputs, args.baseline)
    print(json.dumps({"case": args.case, **out}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
