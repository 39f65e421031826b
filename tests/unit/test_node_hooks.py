"""Prolog, epilog and health check over replayed snapshots, with scontrol recorded."""

from __future__ import annotations

import json
import os
import shutil
import stat
from pathlib import Path

import pytest

from slurm_pool import nodeconf as config
from slurm_pool.adapters.runner import RecordingRunner
from slurm_pool.checkpoint import control, store
from slurm_pool.node import jobdir
from slurm_pool.node.hooks import Hooks, Log
from slurm_pool.text import control_chars

DATA = Path(__file__).resolve().parents[1] / "data" / "nvml"
NOW = 1_764_700_000.0
NODE = "b-gpu1"
UID = GID = 65534
USERS = {"alice": UID, "bob": UID + 1}


def node_json(flags=("IDLE",), reason="", gres="gpu:h100:8(S:0-1)", name=NODE):
    return json.dumps(
        {
            "nodes": [
                {
                    "name": name,
                    "state": [f for f in flags if f != "DRAIN"][:1] or ["IDLE"],
                    "state_flags": [f for f in flags if f == "DRAIN"],
                    "reason": reason,
                    "gres": gres,
                }
            ]
        }
    )


class Node:
    """A node with a replayed GPU snapshot, a state dir and a recording scontrol."""

    def __init__(self, tmp: Path, snapshot: str, **values: str):
        self.tmp = tmp
        self.snapfile = tmp / "snapshot.json"
        self.use(snapshot)
        self.values = {
            "state_dir": str(tmp / "state"),
            "checkpoint_base_dir": str(tmp / "ckpt"),
            "gpus": f"replay:{self.snapfile}",
            "log": "none",
            **values,
        }
        self.runner = RecordingRunner()
        self.env = {
            "SLURMD_NODENAME": NODE,
            "SLURM_JOB_ID": "42",
            "SLURM_JOB_USER": "alice",
            "SLURM_JOB_UID": str(UID),
            "SLURM_JOB_GID": str(GID),
            "SLURM_JOB_GPUS": "0,1",
            "SLURM_JOB_NAME": "$(touch /tmp/x)",
            "SLURM_JOB_COMMENT": "; rm -rf ~",
        }

    def use(self, snapshot: str) -> None:
        shutil.copyfile(DATA / snapshot, self.snapfile)
        self.snapfile.chmod(0o644)

    def slurm_says(self, **kw) -> None:
        self.runner.on(["scontrol", "--json", "show", "node", NODE], node_json(**kw))

    def hooks(self, **env) -> Hooks:
        self.log = Log("none", "test")
        return Hooks(
            config.NodeConfig(self.values),
            {**self.env, **env},
            runner=self.runner,
            clock=lambda: NOW,
            log=self.log,
            users=USERS.get,  # this node's user database: alice is UID
        )

    def updates(self) -> list[tuple[str, ...]]:
        return [c for c in self.runner.calls if c[1:2] == ("update",)]

    def health(self) -> dict:
        return json.loads((self.tmp / "state" / NODE / "health.json").read_text())


ECC_REASON = (
    "slurm-pool: ecc: GPU 1 (00000000:4B:00.0) has 2 uncorrected volatile ECC errors; "
    "xid: GPU 1 reported critical XID 48"
)


def test_prolog_healthy_costs_no_slurm_call_and_prepares_the_dir(tmp_path):
    n = Node(tmp_path, "h100x8_healthy.json")
    assert n.hooks().prolog() == 0
    assert n.runner.calls == []
    d = tmp_path / "ckpt" / "alice" / "42"
    st = d.stat()
    assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (UID, GID, 0o700)
    assert (tmp_path / "ckpt" / "alice").stat().st_uid == UID
    assert (tmp_path / "ckpt").stat().st_uid == os.geteuid()


def test_prolog_drains_and_fails_on_ecc(tmp_path):
    n = Node(tmp_path, "ecc_failure.json")
    n.slurm_says(flags=("IDLE",), gres="gpu:a100:2")
    assert n.hooks().prolog() == 1
    assert n.updates() == [("scontrol", "update", f"NodeName={NODE}", "State=DRAIN", f"Reason={ECC_REASON}")]
    assert n.health()["healthy"] is False and n.health()["action"] == "drain"


def test_prolog_leaves_a_human_drain_alone(tmp_path):
    n = Node(tmp_path, "ecc_failure.json")
    n.slurm_says(flags=("IDLE", "DRAIN"), reason="swapping PSU -- bob")
    assert n.hooks().prolog() == 1
    assert n.updates() == []


def test_prolog_fail_job_scope_on_the_bad_gpu(tmp_path):
    n = Node(tmp_path, "row_remap_pending.json", prolog_fail="job", expected_gpus="8")
    n.slurm_says()
    assert n.hooks(SLURM_JOB_GPUS="4,5").prolog() == 1
    assert n.hooks(SLURM_JOB_GPUS="0,1").prolog() == 0  # GPU 5 is bad, not the job's
    assert n.hooks(SLURM_JOB_GPUS="").prolog() == 0
    assert all(u[3] == "State=DRAIN" for u in n.updates()) and n.updates()  # drained all the same


HEALTHCHECK_TABLE = [
    # name, snapshot, node flags, node reason, expected scontrol update (None: no update), exit
    ("healthy, idle", "h100x8_healthy.json", ("IDLE",), "", None, 0),
    (
        "healthy, our drain cleared",
        "h100x8_healthy.json",
        ("IDLE", "DRAIN"),
        "slurm-pool: ecc: old",
        "State=UNDRAIN",
        0,
    ),
    ("healthy, human drain survives", "h100x8_healthy.json", ("IDLE", "DRAIN"), "bios update", None, 0),
    ("remap pending drains", "row_remap_pending.json", ("MIXED",), "", "State=DRAIN", 1),
    ("xid 79 drains", "xid_critical.json", ("IDLE",), "", "State=DRAIN", 1),
    ("app xids only", "xid_app_only.json", ("IDLE",), "", None, 0),
    ("missing gpu vs GRES", "gpu_missing.json", ("IDLE",), "", "State=DRAIN", 1),
    ("unhealthy, human drain kept", "gpu_missing.json", ("DRAIN",), "rma", None, 1),
]


@pytest.mark.parametrize(
    "name,snapshot,flags,reason,update,rc", HEALTHCHECK_TABLE, ids=[t[0] for t in HEALTHCHECK_TABLE]
)
def test_healthcheck(tmp_path, name, snapshot, flags, reason, update, rc):
    n = Node(tmp_path, snapshot)
    n.slurm_says(flags=flags, reason=reason)
    assert n.hooks().healthcheck() == rc
    ups = n.updates()
    if update is None:
        assert ups == []
    else:
        assert len(ups) == 1 and ups[0][2] == f"NodeName={NODE}" and ups[0][3] == update
        if update == "State=DRAIN":
            assert ups[0][4].startswith("Reason=slurm-pool: ")


def test_gres_count_is_cached_for_the_prolog(tmp_path):
    n = Node(tmp_path, "h100x8_healthy.json")
    n.slurm_says(gres="gpu:h100:8(S:0-1)")
    assert n.hooks().healthcheck() == 0
    n.use("gpu_missing.json")
    assert n.hooks(SLURM_JOB_GPUS="").prolog() == 1  # knows the node should have 8
    assert "gpu-count: NVML sees 7 GPUs, the node's GRES has 8" in n.updates()[-1][4]


def test_sticky_xid_until_acknowledged(tmp_path):
    n = Node(tmp_path, "xid_critical.json")
    n.slurm_says()
    assert n.hooks().healthcheck() == 1
    drain_reason = n.updates()[0][4][len("Reason=") :]
    n.use("h100x8_healthy.json")
    n.runner = RecordingRunner()
    n.slurm_says(flags=("IDLE", "DRAIN"), reason=drain_reason)
    assert n.hooks().healthcheck() == 1 and n.updates() == []  # still failing: no undrain
    assert n.hooks().healthcheck(ack_xids=True) == 0
    assert n.updates() == [("scontrol", "update", f"NodeName={NODE}", "State=UNDRAIN")]


def test_slurm_unreachable(tmp_path):
    n = Node(tmp_path, "ecc_failure.json")
    n.runner.fail(["scontrol"], stderr="Unable to contact slurm controller")
    assert n.hooks().healthcheck() == 1
    assert [c[3] for c in n.updates()] == ["State=DRAIN"]  # tried anyway
    n.use("h100x8_healthy.json")
    n.runner = RecordingRunner()
    n.runner.fail(["scontrol"])
    assert n.hooks().healthcheck() == 0 and n.updates() == []


def test_untrusted_snapshot_is_refused_not_obeyed(tmp_path):
    n = Node(tmp_path, "ecc_failure.json")
    n.snapfile.chmod(0o666)  # anyone could have written it
    n.slurm_says()
    h = n.hooks()
    assert h.prolog() == 0 and n.updates() == []
    assert any("writable by group or others" in line for line in n.log.lines)


def test_gpus_none_skips_checks(tmp_path):
    n = Node(tmp_path, "ecc_failure.json", gpus="none")
    assert n.hooks().prolog() == 0 and n.runner.calls == []


def _job_json(**over):
    j = {
        "job_id": 42,
        "job_state": ["COMPLETING", "REQUEUED"],
        "state_reason": "None",
        "start_time": int(NOW - 300),
        "end_time": int(NOW + 10),
        "preempt_time": int(NOW - 10),
        "time_limit": 60,
        "restart_cnt": 2,
        "comment": "$(touch /tmp/pwned)",
        "requeue": True,
    }
    j.update(over)
    return json.dumps({"jobs": [j]})


def _written_by_the_user(job_dir: Path, uid: int = UID) -> None:
    """What the job wrote (checkpoints, the wrapper's outcome) is the job user's (the tests run as root)."""
    for p in [job_dir, *job_dir.rglob("*")]:
        os.chown(p, uid, uid, follow_symlinks=False)


def test_epilog_records_a_preemption(tmp_path):
    n = Node(tmp_path, "h100x8_healthy.json")
    n.runner.on(["scontrol", "--json", "show", "job", "42"], _job_json())
    d = tmp_path / "ckpt" / "alice" / "42"
    assert n.hooks().prolog() == 0
    info = store.write(str(d), 380, {"state": b"s"})
    os.utime(os.path.join(info.path, store.MANIFEST), (NOW - 25, NOW - 25))  # 15 s before PreemptTime
    control.write(
        str(d),
        control.OUTCOME,
        {
            "job_id": "42",
            "restart_count": 1,
            "reason": "preempt",
            "checkpointed": False,
            "requeued": True,
            "exit_code": 85,
            "self_requeues": "lots",
            "signal_time": NOW - 9,
            "time": NOW,
        },
    )
    _written_by_the_user(d)
    assert n.hooks().epilog() == 0
    lines = (tmp_path / "state" / NODE / "outcomes.jsonl").read_text().splitlines()
    rec = json.loads(lines[-1])
    assert rec["preempted"] and rec["reason"] == "preempt" and rec["event_time"] == NOW - 10
    assert rec["checkpoint_step"] == 380 and rec["checkpoint_age_s"] == 15.0 and not rec["checkpointed"]
    assert rec["requeued"] is True and rec["self_requeues"] is None and rec["exit_code"] == 85
    assert rec["restart_count"] == 2 and rec["sources"] == ["slurm", "wrapper", "checkpoint_dir"]
    assert rec["run_start"] == NOW and not (tmp_path / "state" / NODE / "runs" / "42").exists()
    mode = stat.S_IMODE((tmp_path / "state" / NODE / "outcomes.jsonl").stat().st_mode)
    assert mode == 0o644


def test_epilog_ignores_an_outcome_from_an_earlier_run(tmp_path):
    n = Node(tmp_path, "h100x8_healthy.json")
    n.runner.on(
        ["scontrol", "--json", "show", "job", "42"], _job_json(job_state=["COMPLETED"], preempt_time=0, restart_cnt=3)
    )
    d = tmp_path / "ckpt" / "alice" / "42"
    n.hooks().prolog()
    control.write(
        str(d), control.OUTCOME, {"job_id": "42", "restart_count": 2, "reason": "preempt", "time": NOW - 3600}
    )
    n.hooks().epilog()
    rec = json.loads((tmp_path / "state" / NODE / "outcomes.jsonl").read_text().splitlines()[-1])
    assert rec["preempted"] is False and rec["reason"] is None and rec["sources"] == ["slurm"]


@pytest.mark.parametrize("wrapper_restart,slurm_restart,accepted", [(3, 3, True), (2, 3, True), (1, 3, False)])
def test_outcome_run_matching_without_a_prolog_note(wrapper_restart, slurm_restart, accepted):
    from slurm_pool.adapters.records import JobRecord, job_state
    from slurm_pool.node import outcome

    info = JobRecord(
        42,
        state=job_state("COMPLETED"),
        reason="None",
        start_time=NOW - 100,
        end_time=NOW,
        time_limit=3600.0,
        restart_count=slurm_restart,
        comment="",
        requeue=True,
    )
    rec = outcome.build(
        job_id="42",
        user="alice",
        node=NODE,
        now=NOW,
        info=info,
        newest=None,
        wrapper={"job_id": "42", "restart_count": wrapper_restart, "reason": "timeout"},
    )
    assert (rec["reason"] == "timeout") is accepted


def test_epilog_drains_but_never_fails(tmp_path):
    n = Node(tmp_path, "xid_critical.json")
    n.slurm_says()
    n.runner.fail(["scontrol", "--json", "show", "job"])
    n.runner.fail(["scontrol", "show", "job"])
    assert n.hooks().epilog() == 0
    assert [u[3] for u in n.updates()] == ["State=DRAIN"]


def test_epilog_without_valid_identity_still_exits_0(tmp_path):
    n = Node(tmp_path, "h100x8_healthy.json")
    assert n.hooks(SLURM_JOB_USER="; rm -rf ~").epilog() == 0
    assert any("SLURM_JOB_USER" in line for line in n.log.lines)


# -- the checkpoint directory, as root ------------------------------------------


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to chown")
def test_planted_symlink_is_not_followed(tmp_path):
    base = tmp_path / "ckpt"
    victim = tmp_path / "victim"
    victim.mkdir()
    (base / "alice").mkdir(parents=True)
    os.chown(base / "alice", UID, GID)
    (base / "alice" / "42").symlink_to(victim)
    with pytest.raises(OSError):
        jobdir.prepare(str(base), str(base / "alice" / "42"), "alice", UID, GID)
    assert victim.stat().st_uid == 0


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to chown")
def test_someone_elses_dir_is_refused(tmp_path):
    base = tmp_path / "ckpt"
    (base / "alice" / "42").mkdir(parents=True)
    os.chown(base / "alice" / "42", 1234, 1234)
    with pytest.raises(jobdir.JobDirError, match="owned by uid 1234"):
        jobdir.prepare(str(base), str(base / "alice" / "42"), "alice", UID, GID)


@pytest.mark.parametrize(
    "chosen,what",
    [
        ("{base}/alice/exp1/run7", "created"),
        ("/scratch/alice/ck", "left to the job"),
        ("{base}/bob/42", "left to the job"),
    ],
)
def test_spank_directory(tmp_path, chosen, what):
    base = str(tmp_path / "ckpt")
    path = chosen.format(base=base)
    env = {"SLURM_JOB_ID": "42", "SLURM_JOB_USER": "alice", "SPANK_SLURM_POOL_CHECKPOINT_DIR": path}
    got, user_chosen = jobdir.checkpoint_dir(base, env)
    assert got == path and user_chosen
    assert jobdir.prepare(base, path, "alice", UID, GID) == what
    assert os.path.isdir(path) == (what == "created")


@pytest.mark.parametrize("path", ["relative/dir", "/tmp/../etc", "/a/./b"])
def test_unsafe_paths_are_refused(tmp_path, path):
    with pytest.raises(jobdir.JobDirError):
        jobdir.prepare(str(tmp_path), path, "alice", UID, GID)


@pytest.mark.parametrize(
    "env,field",
    [
        ({"SLURM_JOB_ID": "42; rm -rf ~", "SLURM_JOB_USER": "alice", "SLURM_JOB_UID": "1"}, "SLURM_JOB_ID"),
        ({"SLURM_JOB_ID": "42", "SLURM_JOB_USER": "../root", "SLURM_JOB_UID": "1"}, "SLURM_JOB_USER"),
        ({"SLURM_JOB_ID": "42", "SLURM_JOB_USER": "$(id)", "SLURM_JOB_UID": "1"}, "SLURM_JOB_USER"),
        ({"SLURM_JOB_ID": "42", "SLURM_JOB_USER": "alice", "SLURM_JOB_UID": "x"}, "SLURM_JOB_UID"),
    ],
)
def test_job_identity_is_validated(env, field):
    with pytest.raises(jobdir.JobDirError, match=field):
        jobdir.job_identity(env)


def test_root_side_reads_refuse_fifos_links_and_big_files(tmp_path):
    d = tmp_path / "job"
    ctl = d / ".slurm-pool"
    ctl.mkdir(parents=True)
    os.mkfifo(ctl / "outcome.json")
    assert jobdir.read_outcome(str(d)) is None  # would block forever if opened plainly
    os.unlink(ctl / "outcome.json")
    (tmp_path / "secret").write_text('{"job_id": "42"}')
    (ctl / "outcome.json").symlink_to(tmp_path / "secret")
    assert jobdir.read_outcome(str(d)) is None
    os.unlink(ctl / "outcome.json")
    (ctl / "outcome.json").write_text(json.dumps({"job_id": "42", "x": "y" * 70000}))
    assert jobdir.read_outcome(str(d)) is None
    (ctl / "outcome.json").write_text('{"job_id": "42"}')
    assert jobdir.read_outcome(str(d)) == {"job_id": "42"}
    # a checkpoint whose manifest is a link is not counted
    store.write(str(d), 5, {"state": b"x"})
    (d / "ckpt-000000000009").mkdir()
    (d / "ckpt-000000000009" / store.MANIFEST).symlink_to(tmp_path / "secret")
    assert jobdir.newest_checkpoint(str(d))[0] == 5
    link = tmp_path / "linked-job"
    link.symlink_to(d)
    assert jobdir.newest_checkpoint(str(link)) is None


def test_root_reads_only_what_the_jobs_user_owns(tmp_path):
    # Issue 11, defect 10: a checkpoint directory pointed at another user's private directory had
    # its newest step and time copied into the world-readable outcomes.jsonl.
    other = tmp_path / "someone-else"
    store.write(str(other), 7, {"state": b"private"})
    control.write(str(other), control.OUTCOME, {"job_id": "42", "reason": "preempt"})
    _written_by_the_user(other, 4242)
    assert jobdir.newest_checkpoint(str(other), UID) is None
    assert jobdir.read_outcome(str(other), UID) is None
    assert jobdir.newest_checkpoint(str(other), 4242)[0] == 7  # its owner's job may read it
    # a ckpt-N that is a symlink is not followed, even to a complete checkpoint
    mine = tmp_path / "mine"
    mine.mkdir()
    os.chown(mine, UID, GID)
    (mine / "ckpt-000000000009").symlink_to(other / "ckpt-000000000007")
    assert jobdir.newest_checkpoint(str(mine), UID) is None


def test_gpus_auto_skips_a_machine_without_nvml_but_nvml_is_strict(tmp_path):
    class NoLibrary:
        def snapshot(self):
            from slurm_pool.adapters.nvml import empty_snapshot

            return empty_snapshot("NVMLError_LibraryNotFound: NVML Shared Library Not Found")

    for kind, rc in (("auto", 0), ("nvml", 1)):
        (tmp_path / kind).mkdir()
        n = Node(tmp_path / kind, "h100x8_healthy.json", gpus=kind)
        n.slurm_says()
        h = n.hooks()
        h._source = NoLibrary()
        h.gpu_kind = kind
        assert h.prolog() == rc, kind  # the job has GPUs 0,1


def test_config_found_beside_slurm_conf(tmp_path):
    etc = tmp_path / "etc"
    etc.mkdir()
    (etc / "slurm.conf").write_text("")
    assert config.default_path({"SLURM_CONF": str(etc / "slurm.conf")}) == config.DEFAULT_PATH
    (etc / config.BESIDE_SLURM_CONF).write_text("warn_seconds = 77\n")
    (etc / config.BESIDE_SLURM_CONF).chmod(0o644)
    assert config.default_path({"SLURM_CONF": str(etc / "slurm.conf")}) == str(etc / config.BESIDE_SLURM_CONF)
    assert config.load(env={"SLURM_CONF": str(etc / "slurm.conf")}).integer("warn_seconds") == 77
    assert config.default_path({"SLURM_CONF": "relative/slurm.conf"}) == config.DEFAULT_PATH


@pytest.mark.parametrize(
    "text",
    [
        '{"job_id": "42", "restart_count": 1, "time": 1' + "0" * 400 + ', "reason": "preempt"}',
        '{"job_id": "42", "restart_count": 1, "signal_time": 1'
        + "0" * 400
        + ', "reason": "preempt", "exit_code": 1'
        + "0" * 400
        + "}",
        '{"job_id": "42", "restart_count": 1, "signal_time": Infinity, "time": NaN, "reason": "preempt"}',
        '{"job_id": "42", "x": ' + "[" * 20_000 + "]" * 20_000 + "}",
        "[" * 20_000,
    ],
    ids=["400-digit-time", "400-digit-everything", "infinity-nan", "deep-nesting", "deep-broken"],
)
def test_what_the_job_wrote_never_stops_the_epilog_health_check(tmp_path, text):
    # Issue 11, defect 2: OverflowError / RecursionError escaped the outcome parsing; no health check, no drain.
    n = Node(tmp_path, "h100x8_healthy.json")
    n.slurm_says()
    n.runner.on(["scontrol", "--json", "show", "job", "42"], _job_json())
    assert n.hooks().prolog() == 0  # prepares the job's directory, owned by the job's user
    d = tmp_path / "ckpt" / "alice" / "42"
    control.write(str(d), control.OUTCOME, {"job_id": "42"})
    (d / ".slurm-pool" / "outcome.json").write_text(text)
    _written_by_the_user(d)
    n.use("xid_critical.json")  # the GPU failed during the job
    assert n.updates() == []
    assert n.hooks().epilog() == 0
    assert [u[3] for u in n.updates()] == ["State=DRAIN"]  # the GPU's XID still drains the node
    lines = (tmp_path / "state" / NODE / "outcomes.jsonl").read_text().splitlines()
    rec = json.loads(lines[-1])  # the run is still recorded, with only the believable values
    assert rec["job_id"] == "42" and rec["event_time"] in (None, NOW - 10)
    for key in ("restart_count", "exit_code", "self_requeues", "checkpoint_age_s", "event_time"):
        assert rec[key] is None or abs(rec[key]) < 2**53


# -- issue 30: a root hook trusts a file's owner, not its place ---------------------------------------

OTHER = 4242


def _plant(kind: str, target: Path, tmp: Path, payload: str) -> None:
    """Put ``kind`` of thing at ``target`` (inside the job user's directory)."""
    if kind in ("link-to-others", "link-to-own", "link-to-roots"):
        src = tmp / f"elsewhere-{kind}"
        src.write_text(payload)
        os.chown(src, {"link-to-others": OTHER, "link-to-own": UID, "link-to-roots": 0}[kind], GID)
        os.link(src, target)
    elif kind == "roots":
        target.write_text(payload)
        os.chown(target, 0, 0)
    elif kind == "others":
        target.write_text(payload)
        os.chown(target, OTHER, OTHER)
    elif kind == "fifo":
        os.mkfifo(target)
        os.chown(target, UID, GID)
    elif kind == "directory":
        target.mkdir()
        os.chown(target, UID, GID)
    elif kind == "symlink":
        (tmp / "secret").write_text(payload)
        os.symlink(tmp / "secret", target)
        os.chown(target, UID, GID, follow_symlinks=False)


HOSTILE_FILES = [
    ("link-to-others", f"owned by uid {OTHER}, not by the job's user (uid {UID})"),
    ("link-to-own", "2 hard links"),
    ("link-to-roots", "owned by uid 0"),
    ("roots", "owned by uid 0"),
    ("others", f"owned by uid {OTHER}"),
    ("fifo", "not a regular file"),
    ("directory", "not a regular file"),
    ("symlink", "symbolic links"),
]


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to chown")
@pytest.mark.parametrize("kind,why", HOSTILE_FILES)
def test_the_outcome_file_is_read_only_when_the_jobs_user_owns_it_alone(tmp_path, kind, why):
    # Issue 30, defect 4: the epilog checked who owns the job's directories, not the file inside:
    # a hard link to another user's outcome.json was read and its values recorded under this job.
    d = tmp_path / "ckpt" / "alice" / "42"
    (d / ".slurm-pool").mkdir(parents=True)
    _written_by_the_user(d)
    _plant(kind, d / ".slurm-pool" / "outcome.json", tmp_path, json.dumps({"job_id": "42", "reason": "preempt"}))
    said: list[str] = []
    assert jobdir.read_outcome(str(d), UID, said.append) is None
    assert len(said) == 1 and "outcome.json: ignored (" in said[0] and why in said[0], said


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to chown")
@pytest.mark.parametrize("kind,why", HOSTILE_FILES)
def test_a_checkpoint_counts_only_when_the_jobs_user_owns_its_manifest_alone(tmp_path, kind, why):
    d = tmp_path / "ckpt" / "alice" / "42"
    store.write(str(d), 5, {"state": b"x"})
    (d / "ckpt-000000000009").mkdir()
    _written_by_the_user(d)
    _plant(kind, d / "ckpt-000000000009" / store.MANIFEST, tmp_path, "{}")
    why = "not a regular file" if kind == "symlink" else why  # lstat'ed, never opened
    said: list[str] = []
    assert jobdir.newest_checkpoint(str(d), UID, said.append)[0] == 5  # the older, honest one
    assert len(said) == 1 and "ckpt-000000000009/MANIFEST.json: ignored (" in said[0] and why in said[0], said


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to chown")
def test_a_checkpoint_directory_of_another_user_inside_the_jobs_directory_is_not_counted(tmp_path):
    d = tmp_path / "ckpt" / "alice" / "42"
    store.write(str(d), 5, {"state": b"x"})
    store.write(str(d), 9, {"state": b"y"})
    _written_by_the_user(d)
    os.chown(d / "ckpt-000000000009", OTHER, OTHER)
    said: list[str] = []
    assert jobdir.newest_checkpoint(str(d), UID, said.append)[0] == 5
    assert said and f"owned by uid {OTHER}" in said[0]


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to chown")
def test_the_epilog_records_nothing_from_a_hard_linked_outcome_and_logs_why(tmp_path):
    n = Node(tmp_path, "h100x8_healthy.json", epilog_query="no")
    assert n.hooks().prolog() == 0
    d = tmp_path / "ckpt" / "alice" / "42"
    (d / ".slurm-pool").mkdir()
    _written_by_the_user(d)
    theirs = tmp_path / "bobs-outcome.json"  # bob's job 42 on another cluster, say
    theirs.write_text(json.dumps({"job_id": "42", "reason": "preempt", "exit_code": 3, "time": NOW}))
    os.chown(theirs, OTHER, OTHER)
    os.link(theirs, d / ".slurm-pool" / "outcome.json")
    h = n.hooks()
    assert h.epilog() == 0
    rec = json.loads((tmp_path / "state" / NODE / "outcomes.jsonl").read_text().splitlines()[-1])
    assert rec["sources"] == [] and rec["reason"] is None and rec["exit_code"] is None
    assert any(f"outcome.json: ignored (owned by uid {OTHER}" in line for line in n.log.lines), n.log.lines


@pytest.mark.parametrize("path", ["/ckpt/\x1b]0;owned\x07", "/ckpt/a\nepilog: forged line", "/ckpt/\u202eevil"])
def test_the_hooks_log_shows_job_supplied_text_on_one_line(tmp_path, path):
    # A user-chosen checkpoint directory reaches the log (syslog, slurmd's log): never raw.
    n = Node(tmp_path, "h100x8_healthy.json", epilog_query="no")
    n.hooks(SPANK_SLURM_POOL_CHECKPOINT_DIR=path).prolog()
    assert n.log.lines and all(not control_chars(line) for line in n.log.lines), n.log.lines
