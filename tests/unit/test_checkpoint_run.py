"""``slurm-pool run`` with real processes: the wrapper, a real Python child and
a fake ``scontrol`` that answers from a JSON file and logs every argv."""

from __future__ import annotations

import json
import os
import re
import select
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from slurm_pool.checkpoint import control, store

ROOT = Path(__file__).resolve().parents[2]
TRAIN = ROOT / "examples" / "train_sim.py"

FAKE_SCONTROL = textwrap.dedent("""\
    import json, os, sys
    args = sys.argv[1:]
    with open(os.environ["FAKE_SCONTROL_LOG"], "a") as fh:
        fh.write(json.dumps(args) + "\\n")
    path = os.environ["FAKE_SCONTROL_STATE"]
    st = json.load(open(path))
    if st.get("down"):
        sys.exit("scontrol: error: Unable to contact slurm controller (connect failure)")
    if args == ["--version"]:
        print(st.get("version", "slurm 22.05.8"))
    elif args[:3] == ["--json", "show", "job"]:
        print(json.dumps({"jobs": [st["job"]]}))
    elif args[:1] == ["update"]:
        kv = dict(a.split("=", 1) for a in args[1:])
        st["job"]["comment"] = kv.get("Comment", st["job"].get("comment"))
        json.dump(st, open(path + ".tmp", "w")); os.replace(path + ".tmp", path)
    elif args[:1] == ["requeue"]:
        if st.get("requeue_kills"):  # as slurmd does: the requeue signals the whole job at once
            import signal; os.kill(os.getppid(), signal.SIGKILL)
        sys.exit(st.get("requeue_rc", 0))
    else:
        sys.exit("fake scontrol: unexpected " + " ".join(args))
""")


class Job:
    """One wrapper run inside a pretend Slurm job."""

    def __init__(self, tmp: Path, *, limit_min: int = 60, elapsed: float = 600, comment: str = "my run", **env):
        self.tmp = tmp
        self.ckdir = tmp / "ck"
        self.state = tmp / "scontrol.json"
        self.log = tmp / "scontrol.log"
        fake = tmp / "scontrol"
        fake.write_text(f"#!{sys.executable}\n" + FAKE_SCONTROL)
        fake.chmod(0o755)
        now = time.time()
        self.write_state(
            job={
                "job_id": 42,
                "job_state": "RUNNING",
                "state_reason": "None",
                "start_time": int(now - elapsed),
                "end_time": int(now - elapsed + limit_min * 60),
                "preempt_time": 0,
                "time_limit": limit_min,
                "restart_cnt": 0,
                "comment": comment,
                "requeue": True,
            }
        )
        self.env = dict(os.environ)
        for k in list(self.env):
            if k.startswith(("SLURM_", "SPANK_")):
                del self.env[k]
        self.env.update(
            {
                "SLURM_JOB_ID": "42",
                "SLURM_RESTART_COUNT": "0",
                "SLURM_JOB_USER": "alice",
                "SLURM_POOL_SCONTROL": str(fake),
                "SLURM_POOL_NODE_CONF": str(tmp / "absent.conf"),
                "SLURM_POOL_KILL_WAIT": "2",
                "FAKE_SCONTROL_STATE": str(self.state),
                "FAKE_SCONTROL_LOG": str(self.log),
                "PYTHONUNBUFFERED": "1",
            }
        )
        self.env.update(env)
        self.proc: subprocess.Popen | None = None
        self.out: list[str] = []

    def write_state(self, **st):
        old = json.loads(self.state.read_text()) if self.state.exists() else {}
        old.update(st)
        self.state.write_text(json.dumps(old))

    def update_job(self, **fields):
        st = json.loads(self.state.read_text())
        st["job"].update(fields)
        self.state.write_text(json.dumps(st))

    def start(self, *cmd, preexec=None):
        argv = [sys.executable, "-m", "slurm_pool", "run", "--checkpoint-dir", str(self.ckdir), "--", *cmd]
        self.proc = subprocess.Popen(
            argv, env=self.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=str(self.tmp), preexec_fn=preexec
        )
        return self

    def train(self, steps=100000, every=100000, step_time=0.01, **kw):
        return self.start(
            sys.executable,
            str(TRAIN),
            "--steps",
            str(steps),
            "--every",
            str(every),
            "--step-time",
            str(step_time),
            **kw,
        )

    def wait_line(self, prefix: str, timeout: float = 60) -> str:
        assert self.proc is not None and self.proc.stdout is not None
        end = time.time() + timeout
        while time.time() < end:
            r, _, _ = select.select([self.proc.stdout], [], [], 0.2)
            if r:
                line = self.proc.stdout.readline().decode()
                if not line:
                    break
                self.out.append(line)
                if line.startswith(prefix):
                    return line
        raise AssertionError(f"no line starting {prefix!r}; got {self.out!r}; stderr {self._err()}")

    def _err(self) -> str:
        return ""

    def signal(self, sig):
        assert self.proc is not None
        self.proc.send_signal(sig)

    def finish(self, timeout: float = 90) -> int:
        assert self.proc is not None
        out, err = self.proc.communicate(timeout=timeout)
        self.out += out.decode().splitlines(keepends=True)
        self.err = err.decode()
        return self.proc.returncode

    def calls(self) -> list[list[str]]:
        if not self.log.exists():
            return []
        return [json.loads(x) for x in self.log.read_text().splitlines()]

    def verbs(self) -> list[str]:
        return [c[0] if c[0] != "--json" else "query" for c in self.calls()]

    def outcome(self) -> dict:
        return control.read(str(self.ckdir), control.OUTCOME) or {}


def child(tmp: Path, body: str) -> list[str]:
    p = tmp / "child.py"
    p.write_text(textwrap.dedent(body))
    return [sys.executable, str(p)]


@pytest.mark.parametrize(
    "body,want",
    [
        ("import sys; sys.exit(0)", 0),
        ("import sys; sys.exit(3)", 3),
        ("import os, signal; os.kill(os.getpid(), signal.SIGKILL)", 128 + 9),
    ],
)
def test_exit_status_of_the_child_passes_through(tmp_path, body, want):
    job = Job(tmp_path).start(*child(tmp_path, body))
    assert job.finish() == want
    assert "requeue" not in job.verbs()
    assert job.outcome()["exit_code"] == want and job.outcome()["reason"] is None


def test_missing_command_is_127(tmp_path):
    job = Job(tmp_path).start(str(tmp_path / "no-such-program"))
    assert job.finish() == 127


def test_preemption_checkpoints_and_requeues(tmp_path):
    job = Job(tmp_path).train()
    job.wait_line("train_sim: start")
    now = time.time()
    job.update_job(preempt_time=int(now), end_time=int(now + 20))
    job.signal(signal.SIGTERM)  # only the wrapper: as for a batch shell
    assert job.finish() == control.EXIT_REQUEUE, job.err
    text = "".join(job.out)
    assert "reason=preempt" in text and "train_sim: stop" in text
    assert ["requeue", "42"] in job.calls()
    oc = job.outcome()
    assert oc["reason"] == "preempt" and oc["checkpointed"] and oc["requeued"]
    info = store.latest(str(job.ckdir))
    assert info is not None and oc["checkpoint_step"] == info.step > 0


def test_preempted_on_24_05_and_later_leaves_the_requeue_to_slurm(tmp_path):
    """slurmctld 24.05+ requeues a job that exits after its grace signal (measured on 26.05.3:
    PREEMPTED, Restarts=1); a self-requeue there is recorded REQUEUED and kills the wrapper."""
    job = Job(tmp_path).train()
    job.write_state(version="slurm 26.05.3")
    job.wait_line("train_sim: start")
    now = time.time()
    job.update_job(preempt_time=int(now), end_time=int(now + 20))
    job.signal(signal.SIGUSR1)
    assert job.finish() == control.EXIT_REQUEUE, job.err
    assert "requeue" not in job.verbs() and ["--version"] in job.calls()
    oc = job.outcome()
    assert oc["reason"] == "preempt" and oc["checkpointed"] and oc["requeued"]
    assert "Slurm requeues job 42 itself" in job.err


def test_time_limit_on_24_05_and_later_still_self_requeues(tmp_path):
    job = Job(tmp_path, limit_min=60, elapsed=3600 - 100, SLURM_POOL_WARN_SECONDS="80").train()
    job.write_state(version="slurm 26.05.3")
    job.wait_line("train_sim: start")
    job.signal(signal.SIGUSR1)
    assert job.finish() == control.EXIT_REQUEUE, job.err
    assert ["requeue", "42"] in job.calls()


def test_outcome_is_on_disk_before_slurm_kills_the_requeued_job(tmp_path):
    job = Job(tmp_path).train()
    job.write_state(requeue_kills=True)
    job.wait_line("train_sim: start")
    now = time.time()
    job.update_job(preempt_time=int(now), end_time=int(now + 20))
    job.signal(signal.SIGTERM)
    assert job.finish() == -signal.SIGKILL
    assert ["requeue", "42"] in job.calls()
    oc = job.outcome()
    assert oc["reason"] == "preempt" and oc["checkpointed"] and oc["requeued"], oc


def test_user_signal_preemption_is_still_a_preemption(tmp_path):
    """With send_user_signal Slurm sends the job's --signal (USR1), not SIGTERM."""
    job = Job(tmp_path).train()
    job.wait_line("train_sim: start")
    now = time.time()
    job.update_job(preempt_time=int(now), end_time=int(now + 20))
    job.signal(signal.SIGUSR1)
    assert job.finish() == control.EXIT_REQUEUE, job.err
    assert job.outcome()["reason"] == "preempt"
    assert not [c for c in job.calls() if c[0] == "update"]  # no self-requeue counted


def test_time_limit_warning_self_requeues_and_counts_in_the_comment(tmp_path):
    job = Job(tmp_path, limit_min=60, elapsed=3600 - 100, SLURM_POOL_WARN_SECONDS="80").train()  # 100 s left
    job.wait_line("train_sim: start")
    job.signal(signal.SIGUSR1)
    assert job.finish() == control.EXIT_REQUEUE, job.err
    calls = job.calls()
    assert ["update", "JobId=42", "Comment=my run slurm-pool:self-requeues=1"] in calls
    assert calls.index(["update", "JobId=42", "Comment=my run slurm-pool:self-requeues=1"]) < calls.index(
        ["requeue", "42"]
    )
    assert job.outcome()["reason"] == "timeout" and job.outcome()["self_requeues"] == 1


def test_self_requeue_budget_is_enforced(tmp_path):
    job = Job(
        tmp_path,
        limit_min=60,
        elapsed=3600 - 100,
        comment="slurm-pool:self-requeues=2",
        SLURM_POOL_MAX_SELF_REQUEUES="2",
        SLURM_POOL_WARN_SECONDS="80",
    ).train()
    job.wait_line("train_sim: start")
    job.signal(signal.SIGUSR1)
    assert job.finish() == control.EXIT_REQUEUE_LIMIT, job.err
    assert "requeue" not in job.verbs() and "update" not in job.verbs()
    assert store.latest(str(job.ckdir)) is not None  # it still checkpointed


def test_timer_catches_the_time_limit_without_any_signal(tmp_path):
    # warn_seconds 120 and 123 s left: the wrapper's own timer fires in ~3 s.  On a loaded machine the child
    # may not have started by then, so the wrapper's own log says what fired, not the child's output.
    job = Job(tmp_path, limit_min=60, elapsed=3600 - 123, SLURM_POOL_WARN_SECONDS="120").train()
    assert job.finish(timeout=120) == control.EXIT_REQUEUE, job.err
    assert re.search(r"\]: timer: timeout \(the time limit is \d+s away\)", job.err), job.err
    assert "SIG" not in job.err, job.err  # no signal came into it
    if any(x.startswith("train_sim: start") for x in job.out):  # the child ran: it checkpointed for the timeout
        assert "reason=timeout" in "".join(job.out)
    assert ["requeue", "42"] in job.calls()


def test_scancel_terminates_without_requeue(tmp_path):
    job = Job(tmp_path).train()
    job.wait_line("train_sim: start")
    job.signal(signal.SIGTERM)  # not preempted, an hour to go
    assert job.finish() == 128 + signal.SIGTERM, job.err
    assert "requeue" not in job.verbs()
    assert job.outcome()["reason"] == "terminate"


def test_manual_usr1_checkpoints_and_keeps_running(tmp_path):
    job = Job(tmp_path).train(steps=400, step_time=0.01)
    job.wait_line("train_sim: start")
    job.signal(signal.SIGUSR1)
    job.wait_line("train_sim: checkpoint")
    assert job.finish() == 0, job.err
    text = "".join(job.out)
    assert "why=checkpoint" in text and "train_sim: done steps=400" in text
    assert "requeue" not in job.verbs()


def test_slurm_down_sigterm_is_treated_as_preemption(tmp_path):
    job = Job(tmp_path).train()
    job.wait_line("train_sim: start")
    job.write_state(down=True)
    job.signal(signal.SIGTERM)
    # requeue fails too, so the wrapper waits for Slurm's own requeue (KillWait 2 s + 5 s)
    assert job.finish(timeout=120) == control.EXIT_REQUEUE, job.err
    assert "reason=preempt" in "".join(job.out)
    assert store.latest(str(job.ckdir)).step > 0
    assert "scontrol requeue failed" in job.err


def test_sigterm_ignored_by_the_parent_still_works(tmp_path):
    """A launcher that ignores SIGTERM (nohup-style) must not disarm the wrapper or the child."""
    job = Job(tmp_path).train(preexec=lambda: signal.signal(signal.SIGTERM, signal.SIG_IGN))
    job.wait_line("train_sim: start")
    now = time.time()
    job.update_job(preempt_time=int(now), end_time=int(now + 20))
    job.signal(signal.SIGTERM)
    assert job.finish() == control.EXIT_REQUEUE, job.err
    assert "train_sim: stop" in "".join(job.out)


def test_other_signals_are_forwarded(tmp_path):
    cmd = child(
        tmp_path,
        """
        import signal, sys, time
        got = []
        for s in (signal.SIGHUP, signal.SIGCONT, signal.SIGUSR2):
            signal.signal(s, lambda n, f: got.append(signal.Signals(n).name))
        print("ready", flush=True)
        while "SIGUSR2" not in got:
            time.sleep(0.01)
        print("got " + ",".join(got), flush=True)
    """,
    )
    job = Job(tmp_path).start(*cmd)
    job.wait_line("ready")
    for s in (signal.SIGHUP, signal.SIGCONT):
        job.signal(s)
        time.sleep(0.3)
    job.signal(signal.SIGUSR2)
    assert job.finish() == 0
    got = [x for x in job.out if x.startswith("got ")][0].split()[1].split(",")
    assert got == ["SIGHUP", "SIGCONT", "SIGUSR2"]


def test_srun_follower_never_talks_to_slurm(tmp_path):
    job = Job(tmp_path, SLURM_PROCID="1").train()
    job.wait_line("train_sim: start")
    now = time.time()
    job.update_job(preempt_time=int(now), end_time=int(now + 20))
    job.signal(signal.SIGTERM)
    assert job.finish() == control.EXIT_REQUEUE, job.err
    assert "requeue" not in job.verbs()
    assert all(c[:1] == ["--json"] for c in job.calls())  # only the child's own query


def test_hostile_comment_travels_as_one_argv_element(tmp_path):
    bad = f"$(touch {tmp_path}/pwned-a); rm -rf ~ `touch {tmp_path}/pwned-b`"
    job = Job(
        tmp_path,
        limit_min=60,
        elapsed=3600 - 100,
        comment=bad,
        SLURM_POOL_WARN_SECONDS="80",
        SLURM_JOB_NAME=f"$(touch {tmp_path}/pwned-c)",
    ).train()
    job.wait_line("train_sim: start")
    job.signal(signal.SIGUSR1)
    assert job.finish() == control.EXIT_REQUEUE, job.err
    assert ["update", "JobId=42", f"Comment={bad} slurm-pool:self-requeues=1"] in job.calls()
    assert not list(tmp_path.glob("pwned*"))


def test_click_free_entry_point(tmp_path):
    job = Job(tmp_path)
    cmd = child(
        tmp_path, "import os, sys; sys.exit(0 if os.environ['SLURM_POOL_CHECKPOINT_DIR'].endswith('ck2') else 9)"
    )
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "slurm_pool.checkpoint",
            "--checkpoint-dir",
            str(tmp_path / "ck2"),
            "--warn-seconds=30",
            "--",
            *cmd,
        ],
        env=job.env,
        capture_output=True,
        timeout=60,
    )
    assert res.returncode == 0, res.stderr


@pytest.mark.parametrize(
    "argv,ok",
    [
        (["--", "true"], True),
        (["true", "--x"], True),
        (["--poll", "5", "--", "a", "b"], True),
        (["--warn-seconds", "x", "--", "true"], False),
        (["--bogus", "--", "true"], False),
        (["--"], False),
        ([], False),
    ],
)
def test_click_free_entry_point_arguments(argv, ok):
    from slurm_pool.checkpoint.__main__ import parse

    if ok:
        opts, cmd = parse(argv)
        assert cmd and cmd[0] in ("true", "a")
    else:
        with pytest.raises(ValueError):
            parse(argv)


HOSTILE_JOB_ENV = [
    ("SLURM_JOB_ID", "42\n"),
    ("SLURM_JOB_ID", "../../etc"),
    ("SLURM_JOB_ID", "42\nPartition=admin"),
    ("SLURM_JOB_ID", "4\x1b[2J2"),
    ("SLURM_JOB_ID", "٤٢"),
    ("SLURM_JOB_ID", "-1"),
    ("SLURM_JOB_USER", "../root"),
    ("SLURM_JOB_USER", "alice\n"),
    ("SLURM_JOB_USER", "a/b"),
    ("SLURM_JOB_USER", ".."),
    ("SLURM_JOB_USER", "al\u202eice"),
    ("SLURM_POOL_WARN_SECONDS", "nan"),
    ("SLURM_POOL_WARN_SECONDS", "inf"),
    ("SLURM_POOL_WARN_SECONDS", "1_0"),
    ("SLURM_POOL_WARN_SECONDS", "-5"),
    ("SLURM_POOL_WARN_SECONDS", "1e400"),
    ("SLURM_POOL_MAX_SELF_REQUEUES", "١٢"),
    ("SLURM_POOL_MAX_SELF_REQUEUES", "2.5"),
    ("SLURM_POOL_KILL_WAIT", "abc"),
    ("SLURM_POOL_KILL_WAIT", "[/]"),
    ("SLURM_POOL_CHECKPOINT_SIGNAL", "KILL"),
    ("SLURM_POOL_CHECKPOINT_SIGNAL", "STOP"),
    ("SLURM_POOL_CHECKPOINT_SIGNAL", "99"),
    ("SLURM_POOL_CHECKPOINT_SIGNAL", "USR1\x1b[31m"),
]


@pytest.mark.parametrize("var,value", HOSTILE_JOB_ENV)
def test_wrapper_refuses_hostile_job_environment(monkeypatch, tmp_path, var, value):
    # Before: SLURM_JOB_ID=../../etc put the checkpoints outside the base, nan and 1_0 were
    # read as numbers, KILL crashed signal.signal() and abc raised a traceback.
    from click.testing import CliRunner

    from slurm_pool.checkpoint.__main__ import main
    from slurm_pool.checkpoint.settings import resolve
    from slurm_pool.cli import cli

    for k in list(os.environ):
        if k.startswith(("SLURM_", "SPANK_")):
            monkeypatch.delenv(k)
    env = {"SLURM_JOB_ID": "42", "SLURM_JOB_USER": "alice", "SLURM_POOL_NODE_CONF": str(tmp_path / "absent")}
    env[var] = value
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    with pytest.raises(ValueError, match=var):
        resolve(checkpoint_dir=None)
    res = CliRunner().invoke(cli, ["run", "--", "true"])
    assert res.exit_code == 2, res.output
    assert res.output.startswith(f"error: {var}"), res.output
    assert not [c for c in res.output.rstrip("\n") if not c.isprintable()], res.output
    assert main(["--", "true"]) == 2
    assert not (tmp_path / "ck").exists()


def test_wrapper_log_shows_slurm_text_as_one_line():
    from slurm_pool.checkpoint.settings import resolve
    from slurm_pool.checkpoint.supervisor import Supervisor

    lines: list[str] = []
    st = resolve({"SLURM_POOL_NODE_CONF": "/nonexistent"}, checkpoint_dir="/tmp/ck")
    sup = Supervisor(["true"], st, env={}, runner=object(), log=lines.append)
    sup.log("job state RUNNING, reason \x1b]0;owned\x07\nslurm-pool run: requeued\u2028")
    assert len(lines) == 1 and all(c.isprintable() for c in lines[0]), lines


@pytest.mark.parametrize(
    "argv",
    [
        ["--warn-seconds", "1_0", "--", "true"],
        ["--warn-seconds", "١٢", "--", "true"],
        ["--max-self-requeues", "-1", "--", "true"],
        ["--poll", "nan", "--", "true"],
        ["--poll", "inf", "--", "true"],
        ["--poll", "-1", "--", "true"],
    ],
)
def test_click_free_entry_point_refuses_kind_numbers(argv):
    from slurm_pool.checkpoint.__main__ import parse

    with pytest.raises(ValueError):
        parse(argv)
