"""``slurm-pool status``: the status dict on JSON recorded from real Slurm 22.05 and 26.05, the outcome
tail, the rich tables and the command.  The scenes are described in ``test_metrics.py``."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from prometheus_client import CollectorRegistry

from slurm_pool.adapters.gres import gpu_counts
from slurm_pool.adapters.records import JobRecord, NodeRecord, job_state, node_state, parse_jobs, parse_nodes
from slurm_pool.adapters.runner import RecordingRunner
from slurm_pool.adapters.slurm import SlurmClient
from slurm_pool.cli import cli
from slurm_pool.metrics import status as st
from slurm_pool.metrics.collector import PoolCollector
from slurm_pool.metrics.status_cli import tail_preemptions, tier_usage
from slurm_pool.text import control_chars

pytestmark = pytest.mark.usefixtures("narrow_from_json")


REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "tests" / "data" / "slurm"
NODE_COMMAND = {"22.05": ["sinfo", "--json"], "26.05": ["scontrol", "show", "nodes", "--json"]}


def recorded(name: str, version: str) -> str:
    return (DATA / version / name).read_text()


def scene(version: str, tag: str) -> tuple[list[NodeRecord], list[JobRecord]]:
    return parse_nodes(recorded(f"nodes-{tag}.json", version)), parse_jobs(recorded(f"squeue-{tag}.json", version))


def replay(version: str, tag: str) -> RecordingRunner:
    r = RecordingRunner()
    r.on(["sinfo", "--version"], f"slurm {version}.0\n")
    r.on(NODE_COMMAND[version], recorded(f"nodes-{tag}.json", version))
    r.on(["squeue", "--json"], recorded(f"squeue-{tag}.json", version))
    return r


def states(allocated=0, lent=0, idle=0, drained=0, down=0):
    return {"allocated": allocated, "lent": lent, "idle": idle, "drained": drained, "down": down}


BUSY = {
    "states": states(allocated=2, idle=5, drained=4),
    "tiers": {"guaranteed": 2},
    "projects": {"proja": 1, "projc": 1},
    "pending": {"guaranteed": {"jobs": 1, "gpus": 1}, "shared": {"jobs": 1, "gpus": 2}},
    "lent": [],
    "jobs": {"running": 2, "pending": 2},
}
IDLE = {
    "states": states(idle=11),
    "tiers": {},
    "projects": {},
    "pending": {},
    "lent": [],
    "jobs": {"running": 0, "pending": 0},
}
REQUEUED = {
    "states": states(allocated=4, idle=5, drained=2),
    "tiers": {"guaranteed": 4},
    "projects": {"proja": 3, "projc": 1},
    "pending": {
        "guaranteed": {"jobs": 1, "gpus": 1},
        "scavenger": {"jobs": 1, "gpus": 2},
        "shared": {"jobs": 1, "gpus": 2},
    },
    "lent": [],
    "jobs": {"running": 3, "pending": 3},
}
LENT = {
    "states": states(allocated=4, lent=2, drained=5),
    "tiers": {"guaranteed": 4},
    "projects": {"proja": 2, "projc": 2},
    "pending": {"scavenger": {"jobs": 1, "gpus": 2}},
    "lent": ["b-gpu1"],
    "jobs": {"running": 4, "pending": 1},
}
SCENES = [
    ("22.05", "idle", IDLE),
    ("22.05", "busy", BUSY),
    ("22.05", "requeued", REQUEUED),
    ("22.05", "lent", LENT),
    ("26.05", "idle", IDLE),
    ("26.05", "busy", BUSY),
    ("26.05", "requeued", REQUEUED),
]


@pytest.mark.parametrize("version, tag, want", SCENES, ids=[f"{v}-{t}" for v, t, _ in SCENES])
def test_status_of_recorded_scenes(version, tag, want):
    nodes, jobs = scene(version, tag)
    s = st.build(nodes, jobs, now=5.0)
    assert s["schema"] == st.SCHEMA and s["time"] == 5.0 and s["lend_partition"] == "k8s-lend"
    assert s["gpus"]["states"] == want["states"]
    assert s["gpus"]["total"] == 11
    assert s["gpus"]["allocated_by_tier"] == want["tiers"]
    assert s["gpus"]["allocated_by_project"] == want["projects"]
    assert s["pending"] == want["pending"]
    assert s["lent_nodes"] == want["lent"]
    assert s["jobs"] == want["jobs"]
    assert [n["name"] for n in s["nodes"]] == ["a-gpu1", "a-gpu2", "b-gpu1", "c-gpu1"]


@pytest.mark.parametrize("version, tag, want", SCENES, ids=[f"{v}-{t}" for v, t, _ in SCENES])
def test_status_matches_the_node_records_unit_for_unit(version, tag, want):
    """Each node's units add up to its GRES, and its held units to its GRES in use, type by type."""
    nodes, jobs = scene(version, tag)
    s = st.build(nodes, jobs)
    by_name = {n["name"]: n for n in s["nodes"]}
    for node in nodes:
        row = by_name[node.name]
        assert row["state"] == str(node.state)
        assert row["total"] == sum(gpu_counts(node.gres).values())
        assert row["allocated"] + row["lent"] == sum(gpu_counts(node.gres_used).values())
        assert sum(row[x] for x in st.STATES) == row["total"]
        assert row["drain_owner"] == (("slurm-pool" if node.ours else "human") if node.drained else None)
        assert row["lent_out"] == (node.name in want["lent"])
    types: dict[str, int] = {}
    for node in nodes:
        for t, n in gpu_counts(node.gres).items():
            types[t] = types.get(t, 0) + n
    assert {t: row["total"] for t, row in s["gpus"]["by_type"].items()} == types
    for state in st.STATES:
        assert sum(row[state] for row in s["gpus"]["by_type"].values()) == s["gpus"]["states"][state]
    # What running jobs hold is what the nodes say is in use.
    assert sum(s["gpus"]["allocated_by_tier"].values()) == s["gpus"]["states"]["allocated"]
    assert sum(s["gpus"]["allocated_by_project"].values()) == s["gpus"]["states"]["allocated"]
    json.dumps(s)  # plain data


@pytest.mark.parametrize("version, tag, want", SCENES, ids=[f"{v}-{t}" for v, t, _ in SCENES])
def test_exporter_project_metric_agrees_with_status(version, tag, want):
    """slurm_pool_project_allocated_gpus{project}: units held per account (lent ones included)."""
    reg = CollectorRegistry()
    reg.register(PoolCollector(SlurmClient(replay(version, tag))))
    got = {
        s.labels["project"]: s.value
        for fam in reg.collect()
        if fam.name == "slurm_pool_project_allocated_gpus"
        for s in fam.samples
    }
    lend = {"k8s-bridge": 2.0} if want["lent"] else {}
    assert got == {**{p: float(n) for p, n in want["projects"].items()}, **lend}


@pytest.mark.parametrize(
    "lend_partition, allocated, lent, lent_nodes, tiers",
    [
        ("k8s-lend", 4, 2, ["b-gpu1"], {"guaranteed": 4}),
        ("c-owner", 4, 2, ["c-gpu1"], {"guaranteed": 2, "k8s-lend": 2}),
        ("nothing", 6, 0, [], {"guaranteed": 4, "k8s-lend": 2}),
    ],
)
def test_lend_partition_is_configurable(lend_partition, allocated, lent, lent_nodes, tiers):
    s = st.build(*scene("22.05", "lent"), lend_partition=lend_partition)
    assert s["gpus"]["states"]["allocated"] == allocated
    assert s["gpus"]["states"]["lent"] == lent
    assert s["lent_nodes"] == lent_nodes
    assert s["gpus"]["allocated_by_tier"] == tiers


def _node(name: str, gres: str, used: str, state: str = "MIXED") -> NodeRecord:
    return NodeRecord(name=name, state=node_state(state), gres=gres, gres_used=used)


def _lend_job(nodes: str, gpus: int, types: dict[str, int], jid: int = 9) -> JobRecord:
    return JobRecord(
        jid,
        state=job_state("RUNNING"),
        partition="k8s-lend",
        qos="k8s-lend",
        account="k8s-bridge",
        nodes=nodes,
        gpus=gpus,
        gpu_types=types,
    )


@pytest.mark.parametrize(
    "nodes, job, want",
    [
        # A two-node lend job: its typed units are taken from its nodes in order.
        (
            [_node("n1", "gpu:a:2", "gpu:a:2(IDX:0-1)"), _node("n2", "gpu:a:2", "gpu:a:2(IDX:0-1)")],
            _lend_job("n[1-2]", 4, {"a": 4}),
            {"n1": 2, "n2": 2},
        ),
        # Untyped units come from whatever its node has in use.
        ([_node("n1", "gpu:b:1,gpu:c:1", "gpu:b:1(IDX:0),gpu:c:0(IDX:N/A)")], _lend_job("n1", 1, {}), {"n1": 1}),
        # Never more than the node has in use.
        ([_node("n1", "gpu:a:2", "gpu:a:1(IDX:0)")], _lend_job("n1", 2, {"a": 2}), {"n1": 1}),
        # A node the job names but that is gone from the records.
        ([_node("n1", "gpu:a:2", "gpu:a:1(IDX:0)")], _lend_job("n[1-2]", 2, {"a": 2}), {"n1": 1}),
    ],
)
def test_lent_units_per_node(nodes, job, want):
    s = st.build(nodes, [job])
    assert {n["name"]: n["lent"] for n in s["nodes"]} == want
    assert all(n["allocated"] == 0 for n in s["nodes"])


# -- preemptions from the outcome records ----------------------------------------------


def rec(**kw) -> str:
    base = {
        "v": 1,
        "time": 100.0,
        "node": "x",
        "job_id": "7",
        "user": "alice",
        "reason": "preempt",
        "preempted": True,
        "event_time": 90.0,
        "checkpointed": True,
        "checkpoint_age_s": 1.5,
        "requeued": True,
    }
    base.update(kw)
    return json.dumps(base)


@pytest.mark.parametrize(
    "line, want",
    [
        (
            rec(),
            {
                "time": 90.0,
                "node": "a-gpu1",
                "job_id": "7",
                "user": "alice",
                "checkpointed": True,
                "checkpoint_age_s": 1.5,
                "requeued": True,
            },
        ),
        (
            rec(event_time=None, checkpointed=False, checkpoint_age_s=None, requeued="yes"),
            {
                "time": 100.0,
                "node": "a-gpu1",
                "job_id": "7",
                "user": "alice",
                "checkpointed": False,
                "checkpoint_age_s": None,
                "requeued": None,
            },
        ),
        (
            rec(job_id="7; rm -rf /", user="[bold]x", time="now", event_time=float("nan")),
            {
                "time": None,
                "node": "a-gpu1",
                "job_id": "",
                "user": "",
                "checkpointed": True,
                "checkpoint_age_s": 1.5,
                "requeued": True,
            },
        ),
        (rec(job_id="12_3"), "12_3"),
        (rec(preempted=False, reason="timeout"), None),
        (rec(v=2), None),
        ("not json", None),
    ],
)
def test_preemption_entry(line, want):
    got = st.preemption("a-gpu1", line)
    if isinstance(want, str):
        assert got is not None and got["job_id"] == want
    else:
        assert got == want


def test_recent_is_newest_first_and_limited():
    entries = [{"time": t} for t in (5.0, None, 9.0, 1.0)]
    assert st.recent(entries, 2) == [{"time": 9.0}, {"time": 5.0}]
    assert st.recent(entries, 10)[-1] == {"time": None}
    assert st.recent(entries, 0) == []


def test_tail_reads_every_node_skipping_links_partial_lines_and_odd_names(tmp_path):
    (tmp_path / "a-gpu1").mkdir()
    (tmp_path / "a-gpu1" / "outcomes.jsonl").write_text(
        rec(job_id="1") + "\n" + rec(preempted=False) + "\n" + "garbage\n" + rec(job_id="2")  # no newline yet
    )
    (tmp_path / "b-gpu1").mkdir()
    big = "".join(rec(job_id=str(i), time=float(i), event_time=None) + "\n" for i in range(10, 4000))
    (tmp_path / "b-gpu1" / "outcomes.jsonl").write_text(big)
    (tmp_path / "c-gpu1").mkdir()
    (tmp_path / "c-gpu1" / "outcomes.jsonl").symlink_to(tmp_path / "a-gpu1" / "outcomes.jsonl")
    (tmp_path / "..x").mkdir()
    (tmp_path / "stray-file").write_text("x")
    got = list(tail_preemptions(str(tmp_path), tail=4096))
    a = [e["job_id"] for e in got if e["node"] == "a-gpu1"]
    b = [e for e in got if e["node"] == "b-gpu1"]
    assert a == ["1"]
    assert b and b[-1]["job_id"] == "3999" and all(e["job_id"] for e in b)  # the cut first line is dropped
    assert len(b) < 100
    assert not [e for e in got if e["node"] == "c-gpu1"]
    assert list(tail_preemptions(str(tmp_path / "missing"))) == []
    assert st.recent(got, 3)[0]["job_id"] == "3999"


# -- tables and the command ------------------------------------------------------------


def render(status: dict) -> str:
    from rich.console import Console

    console = Console(width=160, record=True, file=open(os.devnull, "w"))
    for part in st.tables(status):
        console.print(part)
    return console.export_text()


@pytest.mark.parametrize("version, tag", [("22.05", "lent"), ("26.05", "busy"), ("26.05", "idle")])
def test_tables_name_every_state_node_and_tier(version, tag):
    s = st.build(*scene(version, tag), [st.preemption("a-gpu1", rec())])
    text = render(s)
    lines = text.splitlines()
    for state in (*st.STATES, "total"):
        assert any(line.startswith(f"│ {state} ") for line in lines), state
    for node in s["nodes"]:
        assert any(node["name"] in line and node["state"] in line for line in lines), node["name"]
    for tier in s["pending"]:
        assert tier in text
    for gtype in s["gpus"]["by_type"]:
        assert gtype in text
    assert "Lent nodes (k8s-lend): " + (", ".join(s["lent_nodes"]) or "none") in text
    assert "alice" in text


def test_tables_print_reasons_literally():
    node = _node("n1", "gpu:a:1", "", state="IDLE+DRAIN")
    node = NodeRecord(name=node.name, state=node.state, gres=node.gres, reason="[bold red]fan[/] [link=x]y")
    text = render(st.build([node], []))
    assert "[bold red]fan[/] [link=x]y (human)" in text


@pytest.fixture
def slurm_replay(monkeypatch):
    def use(version: str, tag: str) -> RecordingRunner:
        r = replay(version, tag)
        monkeypatch.setattr("slurm_pool.adapters.runner.SubprocessRunner", lambda **kw: r)
        return r

    return use


@pytest.mark.parametrize("version", ["22.05", "26.05"])
def test_status_json_command(slurm_replay, tmp_path, version):
    slurm_replay(version, "busy")
    (tmp_path / "a-gpu1").mkdir()
    (tmp_path / "a-gpu1" / "outcomes.jsonl").write_text(
        rec(job_id="3") + "\n" + rec(job_id="4", event_time=95.0) + "\n"
    )
    res = CliRunner().invoke(
        cli, ["status", "--json", "--state-dir", str(tmp_path), "--last", "1", "--usage-hours", "0"]
    )
    assert res.exit_code == 0, res.output
    got = json.loads(res.output)
    want = st.build(*scene(version, "busy"), [st.preemption("a-gpu1", rec(job_id="4", event_time=95.0))], now=0)
    got["time"] = 0
    assert got == want
    assert [p["job_id"] for p in got["preemptions"]] == ["4"]


def test_status_text_command_and_spec(slurm_replay, tmp_path):
    slurm_replay("22.05", "lent")
    spec = (REPO / "examples" / "pool.yaml").read_text()
    res = CliRunner().invoke(cli, ["status", "--state-dir", "", "--spec", str(REPO / "examples" / "pool.yaml")])
    assert res.exit_code == 0, res.output
    assert "GPU units by state" in res.output and "Lent nodes (k8s-lend): b-gpu1" in res.output
    other = tmp_path / "pool.yaml"
    other.write_text(
        spec.replace("{name: k8s-lend,", "{name: lend2,").replace(
            "bridge:\n  partition: k8s-lend", "bridge:\n  partition: lend2"
        )
    )
    res = CliRunner().invoke(cli, ["status", "--json", "--state-dir", "", "--spec", str(other)])
    assert res.exit_code == 0, res.output
    got = json.loads(res.output)
    assert got["lend_partition"] == "lend2" and got["lent_nodes"] == []
    assert got["gpus"]["states"]["lent"] == 0 and got["gpus"]["allocated_by_tier"]["k8s-lend"] == 2


@pytest.mark.parametrize(
    "args, setup, code, message",
    [
        (["--spec", "SPEC"], "broken: [", 2, "broken YAML"),
        (["--last", "-1"], None, 2, "--last"),
        ([], "fail", 1, "Unable to contact slurm controller"),
    ],
)
def test_status_errors(slurm_replay, tmp_path, args, setup, code, message):
    r = slurm_replay("22.05", "idle")
    if setup == "fail":
        r.fail(["squeue", "--json"], stderr="slurm_load_jobs error: Unable to contact slurm controller")
    elif setup is not None:
        (tmp_path / "spec.yaml").write_text(setup)
    args = [str(tmp_path / "spec.yaml") if a == "SPEC" else a for a in args]
    res = CliRunner().invoke(cli, ["status", "--state-dir", "", *args])
    assert res.exit_code == code, res.output
    assert message in res.output
    assert "Traceback" not in res.output


# -- issue 30: Slurm's text never drives the terminal; unreadable output is exit 2 ------------------

HOSTILE = "\x1b[2J\x1b]0;pwned\x07\x9b31m\u202eevil\u2028x\x1b[0m"


def _node_doc(name="n1", reason="", gtype="a100", flags=("DRAIN",)):
    return {
        "nodes": [
            {
                "name": name,
                "state": ["IDLE"],
                "state_flags": list(flags),
                "reason": reason,
                "gres": f"gpu:{gtype}:2",
                "gres_used": f"gpu:{gtype}:1(IDX:0)",
                "partitions": ["p"],
            }
        ]
    }


def _job(**over):
    job = {"job_id": 7, "job_state": "RUNNING", "qos": "q", "account": "a", "partition": "p", "nodes": "n1"}
    job.update({"tres_alloc_str": "gres/gpu=1", "user_name": "u"}, **over)
    return job


def _sacct(**over):
    now = int(time.time())  # a run inside --usage-hours of now
    run = {"job_id": 9, "qos": "q", "state": {"current": "COMPLETED"}, "time": {"start": now - 99, "end": now - 9}}
    run.update({"tres": {"allocated": [{"type": "gres", "name": "gpu", "count": 1}]}}, **over)
    return {"jobs": [run]}


SCENES = {
    "node name": (_node_doc(name=HOSTILE), [_job(nodes=HOSTILE, partition="k8s-lend")], None),
    "drain reason": (_node_doc(reason=HOSTILE), [_job()], None),
    "GRES type": (_node_doc(gtype=HOSTILE), [_job()], None),
    "running job's QOS": (_node_doc(), [_job(qos=HOSTILE)], None),
    "running job's account": (_node_doc(), [_job(account=HOSTILE)], None),
    "pending job's QOS": (_node_doc(), [_job(qos=HOSTILE, job_state="PENDING", nodes="")], None),
    "sacct's errors": (_node_doc(), [_job()], {"jobs": [], "errors": [{"error": HOSTILE}]}),
    "sacct run's QOS": (_node_doc(), [_job()], _sacct(qos=HOSTILE)),
}


def _hostile_replay(monkeypatch, scene: str) -> RecordingRunner:
    nodes, jobs, sacct = SCENES[scene]
    r = RecordingRunner()
    r.on(["sinfo", "--version"], "slurm 22.05.8\n")
    r.on(["sinfo", "--json"], json.dumps(nodes))
    r.on(["squeue", "--json"], json.dumps({"jobs": jobs}))
    r.on(["sacct", "--json"], json.dumps(sacct or {"jobs": []}))
    r.on(["sacctmgr"], "q|1.000000\n")
    monkeypatch.setattr("slurm_pool.adapters.runner.SubprocessRunner", lambda **kw: r)
    return r


@pytest.mark.parametrize("scene", SCENES)
def test_status_tables_show_slurms_text_and_never_pass_it_to_the_terminal(monkeypatch, scene):
    # Issue 30, defect 2: escape sequences in a QOS, node name, drain reason... reached the terminal raw.
    _hostile_replay(monkeypatch, scene)
    res = CliRunner().invoke(cli, ["status", "--state-dir", "", "--usage-hours", "24"])
    assert res.exit_code == 0, res.output
    assert control_chars(res.output.replace("\n", "")) == [], res.output
    assert "\\x1b" in res.output  # shown, so the reader sees something odd is there


@pytest.mark.parametrize("scene", [s for s in SCENES if "sacct" not in s])
def test_status_json_keeps_slurms_text_exact(monkeypatch, scene):
    _hostile_replay(monkeypatch, scene)
    res = CliRunner().invoke(cli, ["status", "--json", "--state-dir", "", "--usage-hours", "0"])
    assert res.exit_code == 0, res.output
    assert "\x1b" not in res.output and HOSTILE in _strings(json.loads(res.output))


def _strings(data) -> set:
    """Every key and string value in a JSON document, exactly as it was."""
    if isinstance(data, dict):
        return set(data) | {s for v in data.values() for s in _strings(v)}
    if isinstance(data, list):
        return {s for v in data for s in _strings(v)}
    return {data} if isinstance(data, str) else set()


SQUEUE = ["env", "SLURM_TIME_FORMAT=%s", "squeue"]
SINFO = ["env", "SLURM_TIME_FORMAT=%s", "sinfo"]


@pytest.mark.parametrize(
    "command, stdout, returncode, code, message",
    [
        (SQUEUE, "slurm_load_jobs error", 0, 2, "squeue --Format printed no readable job records"),
        (SQUEUE, "x" * 300, 0, 2, "output ends inside a record: 'xxx"),
        (SINFO, "\x1b[2J", 0, 2, "sinfo --Format printed no readable node records: output ends inside a record"),
        (SQUEUE, "", 1, 1, "squeue --Format exited 1: \\x1b[2J"),
        (SINFO, "", 1, 1, "sinfo --Format exited 1: \\x1b[2J"),
        (["sinfo", "--version"], "", 1, 1, "sinfo --version exited 1: \\x1b[2J"),
    ],
)
def test_status_says_what_is_wrong_with_slurms_answer(slurm_replay, command, stdout, returncode, code, message):
    # Issue 30, defect 3: unreadable output was reported as a failed command (exit 1).
    r = slurm_replay("22.05", "idle")
    r.on(command, stdout, returncode, "\x1b[2Jslurmctld down" if returncode else "")
    res = CliRunner().invoke(cli, ["status", "--state-dir", "", "--usage-hours", "0"])
    assert res.exit_code == code, res.output
    assert message in res.output and "Traceback" not in res.output
    assert len(res.output.splitlines()) == 1 and "\x1b" not in res.output


@pytest.mark.parametrize(
    "factor, why",
    [("nan", "'nan'"), ("inf", "'inf'"), ("١", "'١'"), ("1_0", "'1_0'"), ("", "''"), ("-0.5", "negative")],
)
def test_usage_refuses_a_usage_factor_that_is_not_a_number(factor, why):
    r = RecordingRunner()
    r.on(["sacct"], json.dumps(_sacct()))
    r.on(["sacctmgr"], f"q|{factor}\n")
    usage = tier_usage(SlurmClient(r), 24, now=10)
    assert "tiers" not in usage and usage["error"].startswith("sacctmgr show qos printed no readable UsageFactor")
    assert why in usage["error"]


@pytest.mark.parametrize("stdout", ["", "{", '{"jobs": [], "errors": [{"error": "x"}]}', '{"jobs": [true]}'])
def test_usage_says_sacct_printed_nothing_readable_instead_of_failed(stdout):
    r = RecordingRunner()
    r.on(["sacct"], stdout)
    usage = tier_usage(SlurmClient(r), 24, now=10)
    assert "printed no readable job records" in usage["error"] and "failed" not in usage["error"]


@pytest.mark.parametrize(
    "field, value, kept",
    [
        ("job_id", "42\n", ""),
        ("job_id", "42\x1b[2J", ""),
        ("job_id", "42_3", "42_3"),
        ("user", "alice\n", ""),
        ("user", "alice", "alice"),
    ],
)
def test_preemption_entries_take_ids_and_users_matched_in_full(field, value, kept):
    assert st.preemption("a-gpu1", rec(**{field: value}))[field] == kept
