"""The site-scale bench's pieces (issue 32): the generated Slurm documents read like the recorded ones,
the fake Slurm answers a narrow read whose token changed, and the driver's table."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from bench import scale_slurm as ss
from bench import site_scale as drv
from bench import slurm_docs as sd
from slurm_pool.adapters.records import parse_jobs, parse_nodes
from slurm_pool.metrics.parse import node_gpu_states
from slurm_pool.spec import load_spec


@pytest.fixture(scope="module")
def small(tmp_path_factory) -> Path:
    where = tmp_path_factory.mktemp("scale")
    sd.generate(where, 60, 400, seed=5, projects=30, partitions=10)
    return where


def test_generated_documents_read_as_slurm_records(small):
    nodes = parse_nodes((small / "nodes-60n.json").read_text())
    jobs = parse_jobs((small / "squeue-60n-400j.json").read_text())
    assert len(nodes) == 60 and len({n.name for n in nodes}) == 60
    assert len(jobs) == 400 and len({j.job_id for j in jobs}) == 400
    states = Counter(j.state.base for j in jobs)
    assert states["RUNNING"] > 0 and states["PENDING"] > 0 and any(j.restart_count for j in jobs)
    # the GPUs in use on each node are the running jobs' GPUs there
    held = Counter()
    for j in jobs:
        if j.on_node:
            held[j.nodes] += j.gpus
    for n in nodes:
        allocated = sum(row["allocated"] for row in node_gpu_states(n.state, n.gres, n.gres_used).values())
        assert held[n.name] == allocated or n.drained, n.name
    assert any(n.drained and n.ours for n in nodes) or len(nodes) < 100


def test_the_generated_spec_covers_every_node(small):
    spec = load_spec(small / "spec-60n.yaml")
    assert len(spec.projects) == 30 and len(spec.partitions) == 10


def test_the_same_seed_makes_the_same_documents(small, tmp_path):
    sd.generate(tmp_path, 60, 400, seed=5, projects=30, partitions=10)
    for name in ("nodes-60n.json", "squeue-60n-400j.json"):
        assert (tmp_path / name).read_bytes() == (small / name).read_bytes()
    json.loads((tmp_path / "squeue-60n-400j.json").read_text())


@pytest.mark.parametrize(
    "argv, known, text, want",
    [
        (
            ["a", "--F=x:0~1111aaaa2222,y:0~3333bbbb4444"],
            ["a", "--F=x:0~9999cccc8888,y:0~7777dddd6666"],
            "1~9999cccc8888 2~7777dddd6666\n",
            "1~1111aaaa2222 2~3333bbbb4444\n",
        ),
        (["a", "--F=x"], ["a", "--F=x"], "same", "same"),
        (["a", "--F=x:0~1111aaaa2222"], ["a", "--F=y:0~1111aaaa2222,z"], "t", None),  # another format
        (["a", "--F=x:0~1111aaaa2222"], ["a", "--F=x:0~1111aaaa2223"], "t", None),  # too short a difference
        (["a", "b"], ["a"], "t", None),
    ],
)
def test_a_recorded_answer_serves_a_read_with_another_token(argv, known, text, want):
    assert ss._swapped(argv, known, text) == (None if want is None else want)


def test_the_fake_slurm_answers_json_reads_from_the_files(small):
    runner = ss.DocRunner(small / "nodes-60n.json", small / "squeue-60n-400j.json")
    assert runner.run(["squeue", "--json"]).stdout == (small / "squeue-60n-400j.json").read_text()
    assert runner.run(["scontrol", "show", "nodes", "--json"]).stdout == (small / "nodes-60n.json").read_text()
    some = json.loads(runner.run(["squeue", "--json", "--jobs=1000,1001,77"]).stdout)
    assert [j["job_id"] for j in some["jobs"]] == [1000, 1001]
    assert not runner.run(["scontrol", "reboot"], check=False).ok


@pytest.mark.parametrize(
    "seconds, want",
    [(None, "-"), (12e-6, "12.0 us"), (0.25, "250 ms"), (23.04, "23.0 s")],
)
def test_times_are_shown_in_their_unit(seconds, want):
    assert drv.fmt_time(seconds) == want


def test_the_table_gives_medians_ratios_peaks_and_failures():
    rec = {"path": "`status --json`", "size": "10 nodes"}
    ok = drv.Row(
        "slurm",
        "status-10n",
        [drv.Run(s, 2000, rec) for s in (3.0, 1.0, 2.0)],
        [drv.Run(s, 1000, rec) for s in (1.0, 1.0, 1.0)],
    )
    bad = drv.Row("slurm", "status-20n", [drv.Run(None, 10, error="stopped after 5 s")], [drv.Run(1.0, 10, rec)])
    lines, notes = drv.table([ok, bad])
    assert lines[2] == "| `status --json` | 10 nodes | 2.0 s | 2.00x | 2 MB | 1.0 s | 1 MB |"
    assert lines[3].startswith("| | ") and "| stopped after 5 s |" in lines[3]
    assert notes == ["status-20n: stopped after 5 s"]
