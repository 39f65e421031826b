"""The narrow reads on the real daemons give the JSON readers' records, hostile job names included.

On the session cluster: a running job, held jobs whose names and comments hold
a newline and a forged record, ``|``, tabs and control characters; then
``SlurmClient().jobs()`` and ``nodes()`` (the narrow ``squeue``/``sinfo
--Format`` reads) against ``jobs_json()`` and ``nodes_json()``, taken when two
JSON reads around the narrow one agree.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from slurm_pool.adapters.slurm import SlurmClient
from tests.support.patience import wait_for

pytestmark = pytest.mark.slurm

SLEEP = "#!/bin/sh\nsleep 300\n"
HOSTILE = (
    ("evil\n99~x|forged|RUNNING\tx", "c|1\n2"),
    ("\x1b[31m\u2028\u00e9", "|"),
)


def values(records: list[Any], key: str) -> dict[Any, dict[str, Any]]:
    return {
        getattr(r, key): {f.name: getattr(r, f.name) for f in dataclasses.fields(r) if f.name != "raw"} for r in records
    }


def test_narrow_reads_equal_json_on_the_real_daemons(cluster):
    owner = cluster.sbatch(
        "--chdir=/tmp",
        "--output=/dev/null",
        "--account=proja",
        "--partition=a-owner",
        "--gres=gpu:1",
        "--job-name=owner|run",
        user="alice",
        script=SLEEP,
    )
    held = [
        cluster.sbatch(
            "--chdir=/tmp",
            "--output=/dev/null",
            "--account=projb",
            "--qos=shared",
            "--time=30",
            "--gres=gpu:1",
            "--hold",
            f"--job-name={name}",
            f"--comment={comment}",
            user="bob",
            script=SLEEP,
        )
        for name, comment in HOSTILE
    ]
    cluster.wait_state(owner, ["RUNNING"])
    client = SlurmClient(cluster.cluster.runner, version=cluster.version)
    seen: dict[str, Any] = {}

    def agree() -> bool:
        before = values(client.jobs_json(), "job_id"), values(client.nodes_json(), "name")
        narrow = values(client.jobs(), "job_id"), values(client.nodes(), "name")
        after = values(client.jobs_json(), "job_id"), values(client.nodes_json(), "name")
        seen.update(json=after, narrow=narrow)
        return before == after and narrow == after

    wait_for(agree, 60, "the narrow and JSON reads to agree on a still pool")
    jobs, nodes = seen["narrow"]
    assert {owner, *held} <= set(jobs)
    assert [jobs[j]["name"] for j in held] == [name for name, _ in HOSTILE]
    assert [jobs[j]["comment"] for j in held] == [comment for _, comment in HOSTILE]
    assert jobs[owner]["gpus"] == 1 and str(jobs[owner]["state"]) == "RUNNING"
    assert 99 not in jobs
    assert len(nodes) == 4
