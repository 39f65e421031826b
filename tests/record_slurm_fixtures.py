"""Record the JSON that real Slurm daemons print, as unit-test fixtures.

Run as root against a local cluster of the example pool, once per Slurm::

    slurm-pool cluster up --state-dir /var/tmp/rec --slurm 26.05
    python3 tests/record_slurm_fixtures.py --state-dir /var/tmp/rec

It writes ``tests/data/slurm/<major.minor>/``: node records (``sinfo --json``
on 22.05, ``scontrol show nodes --json`` from 23.02) and ``sinfo --json``,
``squeue --json``, ``scontrol show job --json`` (23.02+) and ``sacct --json``
for a scripted scene -- an idle pool; then running, held and pending jobs, a
human drain and a slurm-pool drain; then a scavenger job preempted by its
owner and requeued.  Nothing in the output is edited.

At each scene it also records the narrow reads (:mod:`slurm_pool.adapters.narrow`:
``sinfo``/``squeue --Format`` with fixed separators, :data:`RECORD_TOKENS`) beside the
JSON of the same moment, into ``narrow/<scene>.json`` (``{"version", "commands": [{"argv",
"stdout"}], "nodes", "jobs", "now"}``), and a last scene, ``hostile``, of held jobs whose names
and comments hold newlines, a forged record, ``|``, tabs, control characters and unicode.
``--narrow-only`` records only those, leaving the JSON fixtures as they are.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from slurm_pool.adapters import narrow  # noqa: E402
from slurm_pool.adapters.records import node_command  # noqa: E402
from slurm_pool.localcluster.cluster import LocalCluster, saved_record  # noqa: E402
from slurm_pool.localcluster.procs import wait_for  # noqa: E402
from tests.support.slurm_cluster import ClusterHandle, self_requeue  # noqa: E402

OUT = REPO / "tests" / "data" / "slurm"
SLEEP = "#!/bin/sh\nsleep 600\n"
#: The separators of the recorded narrow reads (a real read draws fresh ones).
RECORD_TOKENS = narrow.Tokens("~sep5f3a9c1e7b2d", "~end8e4b0d6a2c1f")
#: Job names and comments no value may forge a record with.
HOSTILE = (
    ("line\n2~ab|c\t" + "99|forged|RUNNING", "comment|with\nnewline"),
    ("\x1b[31mred\x07 \u2028sep \u00e9\u4e2d", "~sep5f3a9c1e7b2"),
    (" lead and trail ", "%s %x ,:0"),
)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--state-dir", required=True, help="state directory of a running local cluster")
    ap.add_argument("--narrow-only", action="store_true", help="record only the narrow reads (narrow/*.json)")
    opts = ap.parse_args(argv)
    saved = saved_record(Path(opts.state_dir))
    c = ClusterHandle(LocalCluster(saved["spec"], state_dir=opts.state_dir))
    v = c.version
    out = OUT / v.series
    out.mkdir(parents=True, exist_ok=True)
    new_json = v.has("json_data_parser")

    def save(name: str, argv: list[str]) -> None:
        if opts.narrow_only:
            return
        res = c.run(argv, check=True)
        doc = json.loads(res.stdout)
        (out / name).write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
        print(f"{out / name}: {' '.join(argv)}")

    def save_narrow(tag: str) -> None:
        """The narrow reads and the JSON of the same moment (nothing changes between: the scene is still)."""
        commands = [*narrow.job_commands(v, RECORD_TOKENS), narrow.node_command(v, RECORD_TOKENS)]
        doc = {
            "version": str(v),
            "now": int(time.time()),  # squeue's clock decides EndTime NONE (print.c _print_job_time_end)
            "commands": [{"argv": a, "stdout": c.run(a, check=True).stdout} for a in commands],
            "nodes": json.loads(c.run(node_command(v), check=True).stdout),
            "jobs": json.loads(c.run(["squeue", "--json"], check=True).stdout),
        }
        (out / "narrow").mkdir(exist_ok=True)
        (out / "narrow" / f"{tag}.json").write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
        print(f"{out / 'narrow' / tag}.json: {len(commands)} narrow reads")

    def scene(tag: str) -> None:
        save(f"nodes-{tag}.json", ["scontrol", "show", "nodes", "--json"] if new_json else ["sinfo", "--json"])
        if new_json:
            save(f"sinfo-{tag}.json", ["sinfo", "--json"])
        save(f"squeue-{tag}.json", ["squeue", "--json"])
        save_narrow(tag)

    def sbatch(*args: str, user: str, script: str) -> int:
        return c.sbatch("--chdir=/tmp", "--output=/dev/null", *args, user=user, script=script)

    c.cancel_all()
    for node in ("b-gpu1", "c-gpu1"):
        c.run(["scontrol", "update", f"NodeName={node}", "State=RESUME"])
    scene("idle")
    owner = sbatch(
        "--account=proja",
        "--partition=a-owner",
        "--gres=gpu:1",
        "--job-name=owner-run",
        "--nodelist=a-gpu1",
        user="alice",
        script=SLEEP,
    )
    sbatch(
        "--account=projb",
        "--qos=shared",
        "--time=30",
        "--gres=gpu:2",
        "--job-name=shared-held",
        "--hold",
        "--checkpoint",
        user="bob",
        script=SLEEP,
    )
    mig = sbatch(
        "--account=projc",
        "--partition=c-owner",
        "--gres=gpu:nvidia_a100_1g.5gb:1",
        "--job-name=mig-slice",
        user="carol",
        script=SLEEP,
    )
    sbatch(
        "--account=proja",
        "--partition=a-owner",
        "--gres=gpu:nvidia_a100-sxm4-80gb:1",
        f"--dependency=afterok:{owner}",
        "--job-name=waits-on-owner",
        user="alice",
        script=SLEEP,
    )
    for job in (owner, mig):
        c.wait_state(job, ["RUNNING"])
    c.run(["scontrol", "update", "NodeName=b-gpu1", "State=DRAIN", "Reason=disk check by ops"], check=True)
    c.run(["scontrol", "update", "NodeName=a-gpu2", "State=DRAIN", "Reason=slurm-pool: ecc: GPU 1"], check=True)
    scene("busy")
    if new_json:
        save("scontrol-job-running.json", ["scontrol", "show", "job", str(owner), "--json"])
    c.run(["scontrol", "update", "NodeName=a-gpu2", "State=RESUME"], check=True)

    # preemption: a scavenger job with the checkpoint signal, then the owner takes its node.  It
    # leaves as `slurm-pool run` does: up to 23.11 it requeues itself (Slurm would record it
    # COMPLETED), from 24.05 Slurm requeues a job that exits after its grace signal.
    requeue = self_requeue(v)
    victim_script = f"#!/bin/sh\ntrap '{requeue}exit 0' USR1\nsleep 600 &\nwait\n"
    victim = sbatch(
        "--account=projb",
        "--partition=scavenger",
        "--nodelist=a-gpu2",
        "--exclusive",
        "--mem=0",
        "--gres=gpu:2",
        "--requeue",
        "--signal=B:USR1@60",
        "--job-name=victim",
        user="bob",
        script=victim_script,
    )
    c.wait_state(victim, ["RUNNING"])
    sbatch(
        "--account=proja",
        "--partition=a-owner",
        "--nodelist=a-gpu2",
        "--gres=gpu:2",
        "--job-name=owner-back",
        user="alice",
        script=SLEEP,
    )
    wait_for(
        lambda: c.job_field(victim, "%T") == "PENDING" and c.job_field(victim, "%r") != "None",
        120,
        f"job {victim} to be requeued",
    )
    scene("requeued")
    if new_json:
        save("scontrol-job-requeued.json", ["scontrol", "show", "job", str(victim), "--json"])
    time.sleep(1)
    c.wait_sacct(victim, "State", lambda s: bool(s))
    save("sacct.json", ["sacct", "--json", "-a", "-S", "now-1hour"])
    for name, comment in HOSTILE:
        sbatch(
            "--account=projb",
            "--qos=shared",
            "--time=30",
            "--hold",
            f"--job-name={name}",
            f"--comment={comment}",
            user="bob",
            script=SLEEP,
        )
    save_narrow("hostile")
    c.cancel_all()
    print(f"recorded Slurm {v} into {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
