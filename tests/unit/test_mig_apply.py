"""mig apply orchestration with fakes (fault injection) and the nvidia-smi backend."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import pytest

from slurm_pool.adapters.runner import RecordingRunner, Result
from slurm_pool.mig.apply import REASON, NodeStatus, NvidiaSmiBackend, apply_plan, parse_lci, parse_lgi
from slurm_pool.mig.emit import MigDevice
from slurm_pool.mig.placement import Layout
from slurm_pool.mig.planner import Gpu, plan


@dataclass
class FakeNodes:
    """NodeControl fake recording every call; ``fail`` maps a method to an error."""

    drained: dict[str, str] = field(default_factory=dict)
    idle: dict[str, bool] = field(default_factory=dict)
    calls: list[tuple[str, ...]] = field(default_factory=list)
    fail: dict[str, str] = field(default_factory=dict)
    written: dict[str, tuple[list[str], str]] = field(default_factory=dict)

    def _maybe_fail(self, what: str) -> None:
        if what in self.fail:
            raise RuntimeError(self.fail[what])

    def status(self, node: str) -> NodeStatus:
        return NodeStatus(node in self.drained, self.drained.get(node, ""))

    def drain(self, node: str, reason: str) -> None:
        self.calls.append(("drain", node, reason))
        self.drained[node] = reason

    def resume(self, node: str) -> None:
        self.calls.append(("resume", node))
        self._maybe_fail("resume")
        self.drained.pop(node, None)

    def wait_idle(self, node: str, timeout: float) -> bool:
        self.calls.append(("wait_idle", node))
        return self.idle.get(node, True)

    def write_gres(self, node: str, gres_conf: Sequence[str], gres: str) -> None:
        self.calls.append(("write_gres", node))
        self._maybe_fail("write_gres")
        self.written[node] = (list(gres_conf), gres)

    def restart_slurmd(self, node: str) -> None:
        self.calls.append(("restart_slurmd", node))
        self._maybe_fail("restart_slurmd")


@dataclass
class FakeBackend:
    state: dict[str, dict[int, Layout | None]]
    fail_on: set[tuple[str, int]] = field(default_factory=set)
    fail_once: set[tuple[str, int]] = field(default_factory=set)
    calls: list[tuple[str, int, Layout | None]] = field(default_factory=list)
    silently_wrong: bool = False

    def layouts(self, node: str) -> dict[int, Layout | None]:
        return dict(self.state[node])

    def apply(self, node: str, gpu: int, layout: Layout | None) -> None:
        self.calls.append((node, gpu, layout))
        if (node, gpu) in self.fail_on:
            self.state[node][gpu] = ()
            raise RuntimeError("nvidia-smi: Insufficient resources")
        if (node, gpu) in self.fail_once:
            self.fail_once.discard((node, gpu))
            self.state[node][gpu] = ()  # the old instances are gone: create failed after destroy
            raise RuntimeError("nvidia-smi: Insufficient resources")
        self.state[node][gpu] = () if self.silently_wrong else layout

    def mig_minors(self, node: str) -> dict[str, int] | None:
        return None  # no driver: minors are derived from the GPU and instance ids

    def devices(self, node: str) -> list[MigDevice]:
        out = []
        for idx, lay in sorted(self.state[node].items()):
            for gi, prof in enumerate(lay or ()):
                out.append(MigDevice(idx, gi + 1, 0, prof))
        return out


def _setup() -> tuple[object, FakeNodes, FakeBackend]:
    gpus = [Gpu("n1", 0, ()), Gpu("n1", 1, ("7g.40gb",), busy=True), Gpu("n2", 0, ("7g.40gb",)), Gpu("n3", 0, ())]
    p = plan("A100-40GB", gpus, {"3g.20gb": 2, "1g.5gb": 4})
    state = {g.node: {} for g in gpus}
    for g in gpus:
        state[g.node][g.index] = g.current
    return p, FakeNodes(), FakeBackend(state)


def test_applies_changed_nodes_in_safe_order() -> None:
    p, nodes, backend = _setup()
    changed_nodes = {p.gpus[i].node for i in p.changed()}
    report = apply_plan(p, nodes, backend)
    assert report.ok
    assert {r.node for r in report.results} == changed_nodes
    for node in changed_nodes:
        seq = [c[0] for c in nodes.calls if c[1] == node]
        assert seq == ["drain", "wait_idle", "write_gres", "restart_slurmd", "resume"]
        assert ("drain", node, REASON) in nodes.calls
        assert node not in nodes.drained
    for i, g in enumerate(p.gpus):
        assert backend.state[g.node][g.index] == p.layouts[i]
    node = sorted(changed_nodes)[0]
    lines, gres = nodes.written[node]
    assert all(line.startswith(f"NodeName={node} Name=gpu Type=nvidia_a100") for line in lines)
    assert gres.startswith("gpu:nvidia_a100")


def test_idempotent_second_run_changes_nothing() -> None:
    p, nodes, backend = _setup()
    apply_plan(p, nodes, backend)
    nodes.calls.clear()
    backend.calls.clear()
    report = apply_plan(p, nodes, backend)
    assert report.ok and all(r.status == "unchanged" for r in report.results)
    assert nodes.calls == [] and backend.calls == []


def test_dry_run_touches_nothing() -> None:
    p, nodes, backend = _setup()
    report = apply_plan(p, nodes, backend, dry_run=True)
    assert all(r.status == "dry-run" for r in report.results)
    assert nodes.calls == [] and backend.calls == []
    assert any("would run: nvidia-smi mig" in a for r in report.results for a in r.actions)


def test_node_drained_by_someone_else_is_left_alone() -> None:
    p, nodes, backend = _setup()
    target = p.gpus[p.changed()[0]].node
    nodes.drained[target] = "disk failure (alice)"
    report = apply_plan(p, nodes, backend)
    r = next(r for r in report.results if r.node == target)
    assert r.status == "skipped" and "disk failure" in r.error
    assert not [c for c in nodes.calls if c[1] == target]
    assert not [c for c in backend.calls if c[0] == target]
    assert nodes.drained[target] == "disk failure (alice)"


@pytest.mark.parametrize("fault", ["device", "wait", "write_gres", "restart_slurmd", "wrong_layout"])
def test_failure_leaves_node_drained_with_reason(fault: str) -> None:
    p, nodes, backend = _setup()
    target = p.gpus[p.changed()[0]].node
    if fault == "device":
        backend.fail_on = {(p.gpus[i].node, p.gpus[i].index) for i in p.changed()}
    elif fault == "wait":
        nodes.idle[target] = False
    elif fault == "wrong_layout":
        backend.silently_wrong = True
    else:
        nodes.fail[fault] = "injected failure"
    report = apply_plan(p, nodes, backend, timeout=5)
    assert not report.ok
    r = next(r for r in report.results if r.node == target)
    assert r.status == "failed" and r.error
    assert nodes.drained[target].startswith(f"{REASON} failed:")
    assert ("resume", target) not in nodes.calls


def test_rerun_after_failure_picks_the_node_up_again() -> None:
    p, nodes, backend = _setup()
    nodes.fail["restart_slurmd"] = "slurmd did not start"
    assert not apply_plan(p, nodes, backend).ok
    nodes.fail.clear()
    nodes.calls.clear()
    report = apply_plan(p, nodes, backend)
    assert report.ok and all(r.status == "applied" for r in report.results)
    assert not any(c[0] == "drain" for c in nodes.calls)  # still drained by us: no second drain
    assert nodes.drained == {}


def test_resume_failure_is_reported() -> None:
    p, nodes, backend = _setup()
    nodes.fail["resume"] = "scontrol: error"
    report = apply_plan(p, nodes, backend)
    assert not report.ok


# ---------------------------------------------------------------- nvidia-smi

LGI = """\
+-------------------------------------------------------+
| GPU instances:                                        |
| GPU   Name             Profile  Instance   Placement  |
|                          ID       ID       Start:Size |
|=======================================================|
|   0  MIG 3g.40gb          9        1          4:4     |
+-------------------------------------------------------+
|   0  MIG 4g.40gb          5        2          0:4     |
+-------------------------------------------------------+
"""
LCI = """\
+--------------------------------------------------------------------+
| Compute instances:                                                 |
| GPU     GPU       Name             Profile   Instance   Placement  |
|       Instance                       ID        ID       Start:Size |
|         ID                                                         |
|====================================================================|
|   0      1       MIG 3g.40gb          2         0          0:3     |
+--------------------------------------------------------------------+
|   0      2       MIG 4g.40gb          3         0          0:4     |
+--------------------------------------------------------------------+
"""


def test_parsers() -> None:
    assert parse_lgi(LGI) == [(0, "3g.40gb", 1, 4), (0, "4g.40gb", 2, 0)]
    assert parse_lci(LCI) == [(0, 1, 0), (0, 2, 0)]


def _runner() -> RecordingRunner:
    r = RecordingRunner()
    r.on(["ssh", "n1", "nvidia-smi", "--query-gpu=index,mig.mode.current"], "0, Enabled\n1, Disabled\n")
    r.on(["ssh", "n1", "nvidia-smi", "mig", "-lgi"], LGI)
    r.on(["ssh", "n1", "nvidia-smi", "mig", "-lci"], LCI)
    r.on(["ssh", "n1", "cat"], "config 1\nmonitor 2\ngpu0/gi1/access 12\ngpu0/gi1/ci0/access 13\n")
    return r


def test_nvidia_smi_backend_reads_layouts_and_devices() -> None:
    backend = NvidiaSmiBackend(_runner(), "H100-80GB", remote=lambda n: ["ssh", n])
    assert backend.layouts("n1") == {0: ("4g.40gb", "3g.40gb"), 1: None}
    assert backend.devices("n1") == [MigDevice(0, 1, 0, "3g.40gb", start=4), MigDevice(0, 2, 0, "4g.40gb", start=0)]
    assert backend.mig_minors("n1") == {"config": 1, "monitor": 2, "gpu0/gi1/access": 12, "gpu0/gi1/ci0/access": 13}


def test_nvidia_smi_backend_apply_runs_the_commands() -> None:
    runner = _runner()
    runner.fail(["ssh", "n1", "nvidia-smi", "mig", "-i", "1", "-dci"], stderr="No compute instances found")
    backend = NvidiaSmiBackend(runner, "H100-80GB", remote=lambda n: ["ssh", n])
    backend.apply("n1", 1, ("3g.40gb", "2g.20gb"))
    sent = [c[2:] for c in runner.calls if "-i" in c]
    assert sent[0] == ("nvidia-smi", "-i", "1", "-mig", "1")  # MIG was off
    assert sent[-1] == ("nvidia-smi", "mig", "-i", "1", "-cgi", "3g.40gb:4,2g.20gb:0", "-C")  # leaves 2-3 for a 2g


def test_nvidia_smi_backend_create_failure_raises() -> None:
    runner = _runner()
    runner.fail(["ssh", "n1", "nvidia-smi", "mig", "-i", "0", "-cgi"], stderr="Insufficient Resources")
    backend = NvidiaSmiBackend(runner, "H100-80GB", remote=lambda n: ["ssh", n])
    with pytest.raises(Exception, match="Insufficient Resources"):
        backend.apply("n1", 0, ("7g.80gb",))


def test_apply_with_nvidia_smi_backend_and_failing_device() -> None:
    """End to end through the Runner: the GPU refuses, the node stays drained."""
    runner = _runner()
    runner.respond(
        ["ssh", "n1", "nvidia-smi", "mig", "-i", "0", "-cgi"],
        lambda argv, _in: Result(argv, 2, "", "In use by another client"),
    )
    backend = NvidiaSmiBackend(runner, "H100-80GB", remote=lambda n: ["ssh", n])
    p = plan("H100-80GB", [Gpu("n1", 0, ("4g.40gb", "3g.40gb")), Gpu("n1", 1, None, busy=True)], {"1g.10gb": 7})
    nodes = FakeNodes()
    report = apply_plan(p, nodes, backend)
    assert not report.ok and "In use by another client" in report.results[0].error
    assert nodes.drained["n1"].startswith(REASON)


@dataclass
class AdminDrainsDuringWait(FakeNodes):
    """An admin drains the node (their own reason) while apply waits for it to go idle."""

    admin_reason: str = "bad fan, ticket 123"

    def wait_idle(self, node: str, timeout: float) -> bool:
        self.calls.append(("wait_idle", node))
        self.drained[node] = self.admin_reason
        return True


def test_a_drain_set_by_an_admin_during_the_wait_is_never_undone() -> None:
    # Issue 11, defect 3: the final resume cleared the admin's drain.
    p, _, backend = _setup()
    nodes = AdminDrainsDuringWait()
    report = apply_plan(p, nodes, backend)
    assert report.ok
    for r in report.results:
        assert ("resume", r.node) not in nodes.calls
        assert nodes.drained[r.node] == "bad fan, ticket 123"
        assert any(a.startswith("not resumed: drained by someone else meanwhile: bad fan") for a in r.actions)


def test_a_failed_step_keeps_the_admins_reason() -> None:
    # Issue 11, defect 3: on a failure our reason overwrote the admin's.
    p, _, backend = _setup()
    nodes = AdminDrainsDuringWait(fail={"write_gres": "disk full"})
    report = apply_plan(p, nodes, backend)
    assert not report.ok
    for r in report.results:
        assert r.status == "failed" and "disk full" in (r.error or "")
        assert nodes.drained[r.node] == "bad fan, ticket 123"
        assert [c for c in nodes.calls if c[0] == "drain" and c[1] == r.node] == [("drain", r.node, REASON)]


# ------------------------------------------------- roll back, budget, concurrency


def test_a_failed_repartition_is_rolled_back_and_the_node_left_drained() -> None:
    p, nodes, backend = _setup()
    before = {n: dict(g) for n, g in backend.state.items()}
    node, gpu = next((p.gpus[i].node, p.gpus[i].index) for i in p.changed() if p.gpus[i].current)
    backend.fail_once.add((node, gpu))
    report = apply_plan(p, nodes, backend)
    res = next(r for r in report.results if r.node == node)
    assert res.status == "failed" and res.error.startswith(f"set GPU {gpu}")
    assert any(a.startswith(f"rolled back GPU {gpu}") for a in res.actions), res.actions
    assert backend.state[node] == before[node]
    assert nodes.drained[node].startswith(f"{REASON} failed: set GPU {gpu}")
    assert ("write_gres", node) not in nodes.calls


def test_a_roll_back_that_fails_says_so() -> None:
    p, nodes, backend = _setup()
    node, gpu = next((p.gpus[i].node, p.gpus[i].index) for i in p.changed())
    backend.fail_on.add((node, gpu))
    backend.state[node][gpu] = ("1g.5gb",)  # differs from the plan's current: a roll back is due
    res = next(r for r in apply_plan(p, nodes, backend).results if r.node == node)
    assert res.status == "failed" and f"rolling back GPU {gpu} failed" in res.error, res.error


def test_a_failure_after_gres_is_written_is_not_rolled_back() -> None:
    p, nodes, backend = _setup()
    nodes.fail["restart_slurmd"] = "slurmd would not start"
    report = apply_plan(p, nodes, backend)
    assert not report.ok
    assert not any("rolled back" in a for r in report.results for a in r.actions)


@pytest.mark.parametrize(
    ("budget", "applied"),
    [(None, None), (0, 0), (1, 1), (100, None)],
)
def test_churn_budget_defers_whole_nodes(budget: int | None, applied: int | None) -> None:
    p, nodes, backend = _setup()
    changed = sorted({p.gpus[i].node for i in p.changed()})
    report = apply_plan(p, nodes, backend, max_gpus=budget)
    done = [r.node for r in report.results if r.status == "applied"]
    deferred = [r for r in report.results if r.status == "deferred"]
    assert len(done) == (len(changed) if applied is None else min(applied, len(changed)))
    assert report.ok
    for r in deferred:
        assert "churn budget" in r.error and not any(c[1] == r.node for c in nodes.calls)
    assert sum(r.gpus for r in report.results if r.status == "applied") <= (budget if budget is not None else 99)


@pytest.mark.parametrize("limit", [1, 2, 3])
def test_at_most_max_drained_nodes_change_at_once_and_restarts_never_overlap(limit: int) -> None:
    import threading
    import time

    gpus = [Gpu(f"n{i}", 0, ()) for i in range(6)]
    p = plan("A100-40GB", gpus, {"3g.20gb": 12})
    backend = FakeBackend({g.node: {0: ()} for g in gpus})
    lock = threading.Lock()
    live: set[str] = set()
    peak = {"nodes": 0, "restarts": 0}
    restarting = [0]

    class Counting(FakeNodes):
        def drain(self, node: str, reason: str) -> None:
            with lock:
                live.add(node)
                peak["nodes"] = max(peak["nodes"], len(live))
            super().drain(node, reason)

        def restart_slurmd(self, node: str) -> None:
            with lock:
                restarting[0] += 1
                peak["restarts"] = max(peak["restarts"], restarting[0])
            time.sleep(0.01)
            with lock:
                restarting[0] -= 1

        def resume(self, node: str) -> None:
            super().resume(node)
            with lock:
                live.discard(node)

    nodes = Counting()
    report = apply_plan(p, nodes, backend, max_drained=limit)
    assert report.ok and sum(r.status == "applied" for r in report.results) == len(p.changed())
    assert 1 <= peak["nodes"] <= limit
    assert peak["restarts"] == 1


def test_progress_hook_sees_every_step_in_order() -> None:
    p, nodes, backend = _setup()
    seen: list[tuple[str, str]] = []
    report = apply_plan(p, nodes, backend, on_step=lambda n, label: seen.append((n, label)))
    for r in report.results:
        assert [label for n, label in seen if n == r.node] == r.actions


@pytest.mark.parametrize(("kw", "value"), [("max_drained", 0), ("max_gpus", -1)])
def test_bad_bounds_are_refused(kw: str, value: int) -> None:
    p, nodes, backend = _setup()
    with pytest.raises(ValueError, match=kw):
        apply_plan(p, nodes, backend, **{kw: value})  # type: ignore[arg-type]
