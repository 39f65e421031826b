#!/usr/bin/env python3
"""Latency of the node hooks as slurmd runs them: prolog + epilog, N times each.

Each sample runs the prolog and then the epilog of a fresh job as separate
processes -- the very ``/bin/sh`` scripts that
:func:`slurm_pool.nodeconf.render_hook` writes for slurm.conf (``python3
-I -S`` with an explicit ``sys.path``) -- with a replayed healthy 8-GPU
snapshot, so no NVML time is included.  The job is the running user's (a real
user of this machine, so the prolog creates its checkpoint directory and the
epilog records its outcome, as on a node); the epilog asks a stub ``squeue``
(a /bin/sh script printing a recorded 26.05 ``squeue --json`` record of that
job) about it, which stands in for one slurmctld RPC.  The bench fails unless
every epilog recorded an outcome with Slurm's answer in it and no hook wrote
anything on stderr, so that it never times an error path.

Beside them, in the same loop: the interpreter floor (the same ``/bin/sh``
script with the same ``sys.path``, importing nothing), the bare interpreter
(``python3 -I -S -c pass``), the hooks on a cluster shared with a site, the
same pair through the click CLI (``python3 -m slurm_pool prolog``), and with
``--baseline REV`` the hooks of the package at that git revision (``git
archive``), in the same conditions.  Budget: p95 of prolog + epilog <= 100 ms.

    python3 bench/prolog_latency.py [-n 50] [--baseline REV] [--out bench/results/prolog_latency.md]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import pwd
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SNAPSHOT = ROOT / "tests" / "data" / "nvml" / "h100x8_healthy.json"
#: A recorded ``squeue --json`` (26.05.3); its first job, renumbered, is the stub's answer.
SQUEUE = ROOT / "tests" / "data" / "slurm" / "26.05" / "squeue-busy.json"
BUDGET_MS = 100.0

#: The stubs' answer about a job (its id is the last argument): the file the bench wrote for it, one ``cat``.
STUB = """#!/bin/sh
eval "id=\\${{$#}}"
case "$*" in
  *"show node"*) exec cat "{node}" ;;
esac
exec cat "{answers}/$id.json"
"""


def job_document() -> str:
    """The recorded squeue document with one job, in the state an epilog sees; ``{id}``: its job id."""
    doc = json.loads(SQUEUE.read_text())
    job = dict(doc["jobs"][0], job_id=0, job_state=["COMPLETING"])
    return (
        json.dumps(dict(doc, jobs=[job]), indent=2)
        .replace("{", "{{")
        .replace("}", "}}")
        .replace('"job_id": 0', '"job_id": {id}')
    )


ANSWER = job_document()


def setup(tmp: Path) -> tuple[Path, dict[str, str]]:
    snap = tmp / "snapshot.json"
    shutil.copyfile(SNAPSHOT, snap)
    snap.chmod(0o644)
    (tmp / "node.json").write_text(json.dumps({"nodes": [{"name": "bench1", "state": "idle", "gres": "gpu:h100:8"}]}))
    bindir = tmp / "bin"
    bindir.mkdir()
    (tmp / "answers").mkdir()
    stub = STUB.format(answers=tmp / "answers", node=tmp / "node.json")
    for name in ("squeue", "scontrol"):
        (bindir / name).write_text(stub)
        (bindir / name).chmod(0o755)
    conf = tmp / "node.conf"
    conf.write_text(
        f"state_dir = {tmp / 'state'}\ncheckpoint_base_dir = {tmp / 'ckpt'}\n"
        f"gpus = replay:{snap}\nscontrol = {bindir / 'scontrol'}\nexpected_gpus = 8\nlog = stderr\n"
    )
    conf.chmod(0o644)
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "SLURMD_NODENAME": "bench1",
        "SLURM_JOB_USER": pwd.getpwuid(os.getuid()).pw_name,
        "SLURM_JOB_UID": str(os.getuid()),
        "SLURM_JOB_GID": str(os.getgid()),
        "SLURM_JOB_GPUS": "0,1",
        "CUDA_VISIBLE_DEVICES": "0,1",
    }
    return conf, env


def run_once(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Wall and CPU milliseconds of one run (CPU: user + system of the process and the children it waited for,
    which a loaded machine inflates far less than the wall time)."""
    t = time.perf_counter()
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    assert proc.stderr is not None
    err = proc.stderr.read()
    proc.stderr.close()
    _, status, usage = os.wait4(proc.pid, 0)
    dt = (time.perf_counter() - t) * 1000
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0 or err:
        raise SystemExit(f"{' '.join(argv)} exited {proc.returncode}: {err.decode()}")
    return dt, (usage.ru_utime + usage.ru_stime) * 1000


def pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, int(round(q / 100 * len(s) + 0.5)) - 1))]


def hook_scripts(
    tmp: Path, conf: Path, coexist: bool = False, tree: str | None = None, tag: str = ""
) -> dict[str, list[str]]:
    """The rendered hook scripts, as slurm.conf would name them; ``coexist``: a cluster shared with a site, whose
    wrappers decide whose job it is before Python runs (:mod:`slurm_pool.nodeconf.wrappers`); ``tree``: the
    package from that directory instead of this one."""
    from slurm_pool.nodeconf import NodeConfig, hook_paths, parse, render_hook

    values = parse(conf.read_text())
    if coexist:
        values.update(coexist="yes", pool_partitions="a-owner,shared,spot,k8s-lend", pool_accounts="proja,projb")
    cfg = NodeConfig(values, str(conf))
    paths = hook_paths()
    if tree is not None:
        paths = [tree, *paths[1:]]
    out = {}
    for kind in ("prolog", "epilog"):
        p = tmp / f"slurm-pool-{kind}{'-coexist' if coexist else ''}{tag}"
        p.write_text(render_hook(kind, sys.executable, str(conf), paths=paths, cfg=cfg))
        p.chmod(0o755)
        out[kind] = [str(p)]
    return out


#: The standard modules each hook needs whatever it is written like: JSON (the snapshot, the state files; it brings
#: ``re``), typing, the lock and the user database, and for the epilog's Slurm query a subprocess and the records'
#: dataclasses.
STDLIB = {
    "prolog": "json, typing, fcntl, pwd",
    "epilog": "json, typing, fcntl, pwd, dataclasses, subprocess",
}


def floor_script(tmp: Path, imports: str = "") -> list[str]:
    """The interpreter floor: the rendered hooks' ``/bin/sh`` script and ``sys.path``, importing nothing (or only
    ``imports``)."""
    from slurm_pool.nodeconf import hook_paths

    p = tmp / f"slurm-pool-floor{'-' + str(len(imports)) if imports else ''}"
    code = f"import sys; sys.path[:0] = {hook_paths()!r}" + (f"; import {imports}" if imports else "")
    p.write_text(f"#!/bin/sh\nexec {shlex.quote(sys.executable)} -I -S -c {shlex.quote(code)}\n")
    p.chmod(0o755)
    return [str(p)]


def click_cli(conf: Path) -> dict[str, list[str]]:
    return {k: [sys.executable, "-m", "slurm_pool", k, "--config", str(conf)] for k in ("prolog", "epilog")}


def pair(argv: dict[str, list[str]], env: dict[str, str], out: dict[str, list[float]], answer: Path) -> None:
    """One job's prolog, then its epilog (``answer``: where the stubs find what Slurm says about the job)."""
    answer.write_text(ANSWER.format(id=int(env["SLURM_JOB_ID"])))
    (p, p_cpu), (q, q_cpu) = run_once(argv["prolog"], env), run_once(argv["epilog"], env)
    for key, value in (("prolog", p), ("epilog", q), ("prolog+epilog", p + q), ("cpu", p_cpu + q_cpu)):
        out.setdefault(key, []).append(value)


Variants = dict[str, tuple[dict[str, list[str]], dict[str, str]]]


def measure(n: int, variants: Variants, start_job: int, answers: Path) -> dict[str, dict[str, list[float]]]:
    """Every variant once per sample, in turn (so that a change in load falls on all of them alike)."""
    out: dict[str, dict[str, list[float]]] = {name: {} for name in variants}
    job = start_job
    for _ in range(n):
        for name, (argv, env) in variants.items():
            job += 1
            pair(argv, dict(env, SLURM_JOB_ID=str(job)), out[name], answers / f"{job}.json")
    return out


def check_outcomes(state: Path, epilogs: int) -> None:
    """Every epilog recorded an outcome with Slurm's answer in it (the bench timed the real path)."""
    recs = [json.loads(line) for line in (state / "bench1" / "outcomes.jsonl").read_text().splitlines()]
    bad = [r["job_id"] for r in recs if "slurm" not in r["sources"] or r["state"] != ["COMPLETING"]]
    if len(recs) != epilogs or bad:
        raise SystemExit(f"{len(recs)} outcomes recorded for {epilogs} epilogs; without Slurm's answer: {bad[:5]}")


def table(title: str, res: dict[str, list[float]]) -> list[str]:
    lines = [f"**{title}**", "", "| hook | p50 ms | p95 ms | max ms |", "|---|---:|---:|---:|"]
    for k, xs in res.items():
        if k == "cpu":
            continue
        lines.append(f"| {k} | {statistics.median(xs):.1f} | {pct(xs, 95):.1f} | {max(xs):.1f} |")
    return lines + [""]


def checkout(rev: str, where: Path) -> str:
    """The package at git revision ``rev`` under ``where`` (``git archive``); its commit's short hash."""
    commit = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", f"{rev}^{{commit}}"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    where.mkdir()
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", commit, "slurm_pool"], check=True, capture_output=True)
    subprocess.run(["tar", "-x", "-C", str(where)], input=archive.stdout, check=True)
    return commit


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", type=int, default=50)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "prolog_latency.md"))
    ap.add_argument("--no-click", action="store_true", help="skip the click-CLI comparison")
    ap.add_argument("--baseline", metavar="REV", help="also time the hooks of the package at this git revision")
    args = ap.parse_args()
    py = sys.executable
    sys.path.insert(0, str(ROOT))
    load_before = load_average()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        conf, env = setup(tmp)
        variants: Variants = {
            "floor": ({"prolog": floor_script(tmp), "epilog": floor_script(tmp)}, env),
            "stdlib": ({k: floor_script(tmp, STDLIB[k]) for k in ("prolog", "epilog")}, env),
            "bare": ({"prolog": [py, "-I", "-S", "-c", "pass"], "epilog": [py, "-I", "-S", "-c", "pass"]}, env),
            "hooks": (hook_scripts(tmp, conf), env),
            "pooled": (
                hook_scripts(tmp, conf, coexist=True),
                dict(env, SLURM_JOB_PARTITION="shared", SLURM_JOB_ACCOUNT="proja"),
            ),
            "sited": (
                hook_scripts(tmp, conf, coexist=True),
                dict(env, SLURM_JOB_PARTITION="site-gpu", SLURM_JOB_ACCOUNT="physics"),
            ),
        }
        commit = ""
        if args.baseline:
            commit = checkout(args.baseline, tmp / "baseline")
            variants["baseline"] = (hook_scripts(tmp, conf, tree=str(tmp / "baseline"), tag="-baseline"), env)
        if not args.no_click:
            variants["click"] = (click_cli(conf), env)
        epilogs = sum(1 for name in variants if name not in ("floor", "stdlib", "bare"))
        measure(3, variants, 900000, tmp / "answers")  # warm the page cache and the .pyc files
        res = measure(args.n, variants, 1000, tmp / "answers")
        check_outcomes(tmp / "state", (args.n + 3) * epilogs)
    load_after = load_average()
    p95 = pct(res["hooks"]["prolog+epilog"], 95)
    floor_p95 = pct(res["floor"]["prolog+epilog"], 95)
    verdict = "within" if p95 <= BUDGET_MS else "OVER"

    def cpu(name: str) -> float:
        return statistics.median(res[name]["cpu"])

    base = "baseline" if "baseline" in res else "click" if "click" in res else None
    revision = commit if args.baseline in (None, commit) else f"{args.baseline} ({commit})"
    command = f"python3 bench/prolog_latency.py -n {args.n}" + (f" --baseline {args.baseline}" if args.baseline else "")
    names = {
        "bare": "bare interpreter (`python3 -I -S -c pass`)",
        "floor": "interpreter floor (the hooks' /bin/sh script and sys.path, importing nothing)",
        "stdlib": "the same, importing the standard modules the hooks need (table below)",
        "hooks": "**the rendered hook scripts**",
        "baseline": f"the same scripts with the package at {revision}",
        "click": "the click CLI (`python3 -m slurm_pool <hook>`)",
    }
    summary = [
        "| prolog + epilog | prolog p50 ms | epilog p50 ms | pair p50 ms | pair p95 ms | pair CPU p50 ms"
        + (f" | pair p95 / the {base} row's | pair CPU p50 / the {base} row's |" if base else " |"),
        "|---|---:|---:|---:|---:|---:|" + ("---:|---:|" if base else ""),
    ]
    for name, what in names.items():
        if name in res:
            r = res[name]
            row = f"| {what} | {statistics.median(r['prolog']):.1f} | {statistics.median(r['epilog']):.1f} | "
            row += f"{statistics.median(r['prolog+epilog']):.1f} | {pct(r['prolog+epilog'], 95):.1f} | "
            row += f"{statistics.median(r['cpu']):.1f} |"
            if base:
                row += f" {pct(r['prolog+epilog'], 95) / pct(res[base]['prolog+epilog'], 95):.2f}x |"
                row += f" {statistics.median(r['cpu']) / statistics.median(res[base]['cpu']):.2f}x |"
            summary.append(row)
    lines = [
        "## Prolog + epilog latency",
        "",
        f"N={args.n} runs of each hook as a separate process on {os.cpu_count()} CPUs, "
        f"Python {platform.python_version()}, load average {load_before} before and {load_after} after "
        "(the machine is shared); replayed healthy 8-GPU snapshot (no NVML time); the prolog creates the job's "
        "checkpoint directory, the epilog asks a stub squeue (/bin/sh, one `cat`) about the job once and records "
        "its outcome.  Each sample runs every row below once, in turn, so that the load falls on all alike; CPU is "
        "the user + system time of the two processes and of the children they waited for (the stub).",
        "",
        f"p95 of prolog + epilog through the rendered hook scripts: **{p95:.1f} ms** "
        f"({verdict} the {BUDGET_MS:.0f} ms budget), beside the interpreter floor of the pair (the same two "
        f"scripts importing nothing): **{floor_p95:.1f} ms** at p95.  Where a pair's CPU time goes (p50): the "
        f"interpreter {cpu('floor'):.1f} ms, the standard modules the hooks need {cpu('stdlib') - cpu('floor'):.1f} ms, "
        f"the hooks' own modules and work (and the stub) {cpu('hooks') - cpu('stdlib'):.1f} ms.",
        "",
        *summary,
        "",
        *table("Interpreter floor: the hooks' /bin/sh script and sys.path, importing nothing", res["floor"]),
        *table("Bare interpreter: python3 -I -S -c pass", res["bare"]),
        *table(
            f"Standard-module floor: the floor script importing {STDLIB['prolog']} (prolog); "
            f"{STDLIB['epilog']} (epilog)",
            res["stdlib"],
        ),
        *table("Rendered hook scripts (/bin/sh exec python3 -I -S, slurm_pool.node)", res["hooks"]),
        *table("A cluster shared with a site (coexist): a pool job (its hook exec'd after two `case`)", res["pooled"]),
        *table(
            "A cluster shared with a site (coexist): a site job (the hook run, its status not passed on)", res["sited"]
        ),
    ]
    if "baseline" in res:
        lines += table(f"The hooks at {revision}: the same scripts, that commit's package", res["baseline"])
    if "click" in res:
        lines += table("Through the click CLI: python3 -m slurm_pool <hook>", res["click"])
    lines += [f"Command: `{command}`.", ""]
    text = "\n".join(lines)
    print(text)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
