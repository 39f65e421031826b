"""The Slurm vocabulary layer on JSON recorded from the real daemons of 22.05.8 and 26.05.3.

The recordings (``tests/data/slurm/<version>/``) come from
``tests/record_slurm_fixtures.py``: an idle pool; then an owner job on a-gpu1,
a MIG-slice job on c-gpu1, a held shared job and a job waiting on a
dependency, a-gpu2 drained by slurm-pool and b-gpu1 by a person; then a
scavenger job preempted by its owner and requeued (job 5).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_pool.adapters.gres import (
    GresItem,
    gpu_counts,
    parse_gres,
    parse_indexes,
    parse_tres,
    split_top,
    tres_gpu_types,
    tres_gpus,
    tres_list_gpus,
)
from slurm_pool.adapters.records import (
    JobRecord,
    RecordError,
    State,
    job_record,
    job_state,
    node_command,
    node_state,
    parse_job_text,
    parse_jobs,
    parse_node_text,
    parse_nodes,
)
from slurm_pool.versions import SlurmVersion

DATA = Path(__file__).resolve().parent.parent / "data" / "slurm"
VERSIONS = ("22.05", "26.05")
A100 = "nvidia_a100-sxm4-80gb"


def recorded(version: str, name: str) -> str:
    return (DATA / version / name).read_text()


def nodes_of(version: str, tag: str):
    return {n.name: n for n in parse_nodes(recorded(version, f"nodes-{tag}.json"))}


def jobs_of(version: str, name: str):
    return {j.job_id: j for j in parse_jobs(recorded(version, name))}


# -- GRES and TRES strings ------------------------------------------------------


@pytest.mark.parametrize(
    "text, want",
    [
        ("", []),
        ("a,b", ["a", "b"]),
        ("gpu:a100:2(IDX:0,2),gpu:h100:1(IDX:1)", ["gpu:a100:2(IDX:0,2)", "gpu:h100:1(IDX:1)"]),
        ("gpu:x:1(S:0-1) , mps:100", ["gpu:x:1(S:0-1)", "mps:100"]),
        ("a,,b,", ["a", "b"]),
    ],
)
def test_split_top(text, want):
    assert split_top(text) == want


@pytest.mark.parametrize(
    "detail, want",
    [
        ("IDX:0", (0,)),
        ("IDX:0-1", (0, 1)),
        ("IDX:0,2-3", (0, 2, 3)),
        ("IDX:N/A", ()),
        ("S:0-1", None),
        ("S:0|IDX:1", (1,)),
        ("IDX:x", None),
    ],
)
def test_parse_indexes(detail, want):
    assert parse_indexes(detail) == want


@pytest.mark.parametrize(
    "text, want",
    [
        (None, []),
        ("", []),
        ("(null)", []),
        ("N/A", []),
        (f"gpu:{A100}:2", [GresItem("gpu", A100, 2)]),
        (f"gpu:{A100}:1(IDX:0)", [GresItem("gpu", A100, 1, (0,))]),
        (f"gpu:{A100}:2(IDX:0-1)", [GresItem("gpu", A100, 2, (0, 1))]),
        ("gpu:nvidia_a100_2g.10gb:0(IDX:N/A)", [GresItem("gpu", "nvidia_a100_2g.10gb", 0, ())]),
        ("gpu:4", [GresItem("gpu", "", 4)]),
        ("gpu", [GresItem("gpu", "", 1)]),
        ("gpu:a100", [GresItem("gpu", "a100", 1)]),
        ("gpu:a100:2(S:0-1)", [GresItem("gpu", "a100", 2, None)]),
        ("gpu:a100:no_consume:2", [GresItem("gpu", "a100", 2)]),
        ("gpu:a100:2(IDX:0,3),mps:200", [GresItem("gpu", "a100", 2, (0, 3)), GresItem("mps", "", 200)]),
        ("gpu:a100:x:y", []),
    ],
)
def test_parse_gres(text, want):
    assert parse_gres(text) == want


@pytest.mark.parametrize(
    "text, want",
    [
        (
            "gpu:nvidia_a100_3g.20gb:1,gpu:nvidia_a100_2g.10gb:1,gpu:nvidia_a100_1g.5gb:2,gpu:nvidia_a100-sxm4-40gb:1",
            {"nvidia_a100_3g.20gb": 1, "nvidia_a100_2g.10gb": 1, "nvidia_a100_1g.5gb": 2, "nvidia_a100-sxm4-40gb": 1},
        ),
        (
            "gpu:nvidia_a100_3g.20gb:1(IDX:0),gpu:nvidia_a100_2g.10gb:0(IDX:N/A),gpu:nvidia_a100_1g.5gb:1(IDX:2)",
            {"nvidia_a100_3g.20gb": 1, "nvidia_a100_2g.10gb": 0, "nvidia_a100_1g.5gb": 1},
        ),
        ("gpu:a:1,gpu:a:2,shard:a:8", {"a": 3}),
        ("mps:100", {}),
        ("gpu:2", {"": 2}),
    ],
)
def test_gpu_counts(text, want):
    assert gpu_counts(text) == want


@pytest.mark.parametrize(
    "text, want",
    [
        (
            "cpu=1,mem=1G,node=1,billing=1,gres/gpu=2,gres/gpu:a100=2",
            {"cpu": 1, "node": 1, "billing": 1, "gres/gpu": 2, "gres/gpu:a100": 2},
        ),
        ("", {}),
        (None, {}),
        ("junk,=3,x=", {}),
    ],
)
def test_parse_tres(text, want):
    assert parse_tres(text) == want


@pytest.mark.parametrize(
    "text, want",
    [
        ("cpu=2,gres/gpu=3,gres/gpu:a100=3", 3),
        ("cpu=2,gres/gpu:a100=1,gres/gpu:h100=2", 3),
        ("cpu=2", 0),
        ("", 0),
        (None, 0),
    ],
)
def test_tres_gpus(text, want):
    assert tres_gpus(text) == want


def test_tres_gpu_types_and_sacct_lists():
    assert tres_gpu_types("cpu=1,gres/gpu=2,gres/gpu:a100=1,gres/gpu:h100=1") == {"a100": 1, "h100": 1}
    items = [
        {"type": "cpu", "name": None, "count": 4},
        {"type": "gres", "name": "gpu", "count": 2},
        {"type": "gres", "name": "gpu:a100", "count": 2},
        {"type": "gres", "name": "shard", "count": None},  # not a GPU entry: its count is not read
    ]
    assert tres_list_gpus(items) == (2, {"a100": 2})
    assert tres_list_gpus([{"type": "gres", "name": "gpu:x", "count": {"set": True, "number": 3}}]) == (3, {"x": 3})
    assert tres_list_gpus(["junk", {"type": "gres"}]) == (0, {})


# -- states ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value, flags, base, want_flags",
    [
        ("idle", ["DRAIN"], "IDLE", {"DRAIN"}),  # 22.05 sinfo --json
        (["IDLE", "DRAIN"], None, "IDLE", {"DRAIN"}),  # 23.02+
        (["DRAIN", "IDLE"], None, "IDLE", {"DRAIN"}),  # the base is found, wherever it is
        ("MIXED+DRAIN", None, "MIXED", {"DRAIN"}),  # scontrol show node text
        ("down", ["NOT_RESPONDING", "DRAIN"], "DOWN", {"NOT_RESPONDING", "DRAIN"}),
        (None, None, "", set()),
    ],
)
def test_node_states(value, flags, base, want_flags):
    st = node_state(value, flags)
    assert (st.base, set(st.flags)) == (base, want_flags)


@pytest.mark.parametrize(
    "value, base, flags, on_node, waiting",
    [
        ("RUNNING", "RUNNING", set(), True, False),  # 22.05 squeue --json
        ("COMPLETING", "COMPLETING", set(), True, False),  # 22.05 prints the flag alone
        (["COMPLETED", "COMPLETING"], "COMPLETED", {"COMPLETING"}, True, False),
        (["PENDING", "REQUEUED"], "PENDING", {"REQUEUED"}, False, True),  # 23.02+ keeps the flags
        ("REQUEUED", "REQUEUED", set(), False, True),
        (["RUNNING", "CONFIGURING"], "RUNNING", {"CONFIGURING"}, True, False),
        (["PREEMPTED"], "PREEMPTED", set(), False, False),
    ],
)
def test_job_states_keep_their_flags(value, base, flags, on_node, waiting):
    rec = JobRecord(1, state=job_state(value))
    assert (rec.state.base, set(rec.state.flags)) == (base, flags)
    assert (rec.on_node, rec.waiting) == (on_node, waiting)


def test_state_reads_like_words():
    st = State("IDLE", frozenset({"DRAIN", "MAINT"}))
    assert "DRAIN" in st and "IDLE" in st and "DOWN" not in st
    assert list(st) == ["IDLE", "DRAIN", "MAINT"] and str(st) == "IDLE+DRAIN+MAINT"


# -- node records on both ends --------------------------------------------------------


@pytest.mark.parametrize(
    "version, command",
    [
        ("22.05", ["sinfo", "--json"]),
        ("23.02", ["scontrol", "show", "nodes", "--json"]),
        ("26.05", ["scontrol", "show", "nodes", "--json"]),
    ],
)
def test_node_command_per_version(version, command):
    assert node_command(SlurmVersion.parse(version)) == command


@pytest.mark.parametrize("version", VERSIONS)
def test_every_node_and_its_state(version):
    idle = nodes_of(version, "idle")
    assert sorted(idle) == ["a-gpu1", "a-gpu2", "b-gpu1", "c-gpu1"]
    assert all(n.state.base == "IDLE" and not n.state.flags for n in idle.values())
    busy = nodes_of(version, "busy")
    assert busy["a-gpu1"].state.base == "MIXED"
    assert busy["a-gpu2"].drained and busy["a-gpu2"].ours and busy["a-gpu2"].reason == "slurm-pool: ecc: GPU 1"
    assert busy["b-gpu1"].drained and not busy["b-gpu1"].ours and busy["b-gpu1"].reason == "disk check by ops"
    assert busy["a-gpu1"].gres == f"gpu:{A100}:2" and busy["a-gpu1"].gres_used == f"gpu:{A100}:1(IDX:0)"
    assert gpu_counts(busy["c-gpu1"].gres)["nvidia_a100_1g.5gb"] == 2
    assert busy["a-gpu1"].partitions == ("a-owner", "shared", "scavenger", "k8s-lend")
    assert busy["a-gpu1"].features == ("proja",) and busy["a-gpu1"].cpus == 4 and busy["a-gpu1"].memory_mb == 8000


def test_grouped_sinfo_of_23_02_on_is_refused_not_read_as_empty():
    with pytest.raises(RecordError, match="scontrol show nodes --json"):
        parse_nodes(recorded("26.05", "sinfo-busy.json"))
    with pytest.raises(RecordError, match="not JSON"):
        parse_nodes("sinfo: error")


def test_node_text_fallback():
    text = (
        "NodeName=a-gpu2 Arch=x86_64 CoresPerSocket=1\n   Gres=gpu:a100:2\n   State=IDLE+DRAIN ThreadsPerCore=1\n"
        "   Partitions=a-owner,shared\n   Reason=slurm-pool: ecc: GPU 1 [root@2026-01-01T00:00:00]\n"
    )
    rec = parse_node_text(text, "a-gpu2")
    assert rec is not None and rec.drained and rec.ours and rec.reason == "slurm-pool: ecc: GPU 1"
    assert rec.partitions == ("a-owner", "shared") and rec.gres == "gpu:a100:2"
    assert parse_node_text(text, "a-gpu1") is None


# -- job records on both ends ----------------------------------------------------------


@pytest.mark.parametrize("version", VERSIONS)
def test_jobs_of_the_busy_scene(version):
    jobs = jobs_of(version, "squeue-busy.json")
    owner, held, mig, waits = (jobs[i] for i in (1, 2, 3, 4))
    assert owner.state.base == "RUNNING" and owner.on_node and owner.nodes == "a-gpu1"
    assert (owner.gpus, dict(owner.gpu_types)) == (1, {A100: 1})
    assert (owner.user, owner.account, owner.partition, owner.qos) == ("alice", "proja", "a-owner", "guaranteed")
    assert owner.start_time and owner.submit_time and owner.preempt_time is None and owner.requeue is True
    assert (held.state.base, held.reason, held.time_limit) == ("PENDING", "JobHeldUser", 1800.0)
    assert held.waiting and not held.requeued and held.gpus == 2  # its request: it holds none
    assert (held.node_count, held.features) == (1, "")  # 22.05 a number, 26.05 {number, set, infinite}
    assert mig.gpu_types == {"nvidia_a100_1g.5gb": 1}
    assert waits.reason == "Dependency" and waits.time_limit is None


@pytest.mark.parametrize("version", VERSIONS)
def test_a_requeued_job_after_preemption(version):
    victim = jobs_of(version, "squeue-requeued.json")[5]
    assert victim.state.base == "PENDING" and victim.reason == "BeginTime"
    assert victim.restart_count == 1 and victim.requeued and victim.required_nodes == "a-gpu2"


@pytest.mark.parametrize("version, preempted_state", [("22.05", "REQUEUED"), ("26.05", "PREEMPTED")])
def test_sacct_records_the_preempted_run_per_version(version, preempted_state):
    """22.05: the job requeued itself in its grace time; 26.05: slurmctld recorded the run PREEMPTED."""
    runs = [j for j in parse_jobs(recorded(version, "sacct.json")) if j.name == "victim"]
    assert runs[0].state.base == preempted_state
    assert (runs[0].gpus, dict(runs[0].gpu_types)) == (2, {A100: 2})
    assert runs[0].account == "projb" and runs[0].qos == "scavenger" and runs[0].start_time


def test_scontrol_job_json_of_23_02_on():
    running = jobs_of("26.05", "scontrol-job-running.json")
    (rec,) = running.values()
    assert rec.running and rec.gpus == 1
    (victim,) = jobs_of("26.05", "scontrol-job-requeued.json").values()
    assert victim.requeued and victim.restart_count == 1


def test_job_text_fallback():
    text = (
        "JobId=7 JobName=x\n   JobState=PENDING Reason=BeginTime Dependency=(null)\n   Requeue=1 Restarts=2\n"
        "   TimeLimit=1-00:00:00 StartTime=2026-01-07T12:00:00 EndTime=Unknown PreemptTime=None\n"
    )
    rec = parse_job_text(text, 7)
    assert rec is not None and rec.requeued and rec.restart_count == 2 and rec.time_limit == 86400
    assert rec.requeue is True and rec.comment is None and rec.end_time is None
    assert parse_job_text(text, 8) is None


def test_a_job_name_cannot_forge_its_text_record():
    text = (
        "JobId=7 JobName=x JobState=PREEMPTED Restarts=7 Requeue=0\n"
        "   UserId=alice(1001) GroupId=alice(1001)\n   JobState=RUNNING Reason=None\n   Requeue=1 Restarts=0\n"
        "   Comment=y JobState=PREEMPTED\n   Command=/bin/x Restarts=9\n"
    )
    rec = parse_job_text(text, 7)
    assert rec is not None and rec.state.base == "RUNNING" and rec.restart_count == 0 and rec.requeue is True


@pytest.mark.parametrize(
    "doc",
    [
        '{"jobs": [{"job_id": {"set": true, "number": 9}, "comment": {"job": "c"}}]}',
        '{"jobs": [{"job_id": 9, "comment": "c"}]}',
    ],
)
def test_job_numbers_and_comments_of_either_shape(doc):
    (rec,) = parse_jobs(doc)
    assert (rec.job_id, rec.comment) == (9, "c")


def test_garbage_is_a_record_error():
    for text in ("[]", "{}", "not json"):
        with pytest.raises(RecordError):
            parse_jobs(text)
    assert job_record({"job_id": 1, "job_state": 5, "time_limit": "x"}).state.base == ""
