"""The bridge against hostile answers from Kubernetes and Slurm (issue 30).

Every reader of Kubernetes objects takes what it can and treats the rest
cautiously: an object it cannot read never makes the bridge lend more, think a
node emptier or lower inference demand, and never ends a run in a traceback.
Where no safe plan is possible the run stops before it changes anything.  Text
from either side reaches the report terminal-safe.
"""

from __future__ import annotations

import copy
from datetime import datetime, timezone
from typing import Any, Callable

import pytest
from click.testing import CliRunner

from slurm_pool.adapters.runner import CommandError, RecordingRunner
from slurm_pool.adapters.slurm import SlurmClient
from slurm_pool.bridge.demand import isvc_demand, total_demand
from slurm_pool.bridge.fence import fence_node
from slurm_pool.bridge.lease import LeaseHeld
from slurm_pool.bridge.model import PendingJob, SlurmNodeView
from slurm_pool.bridge.objects import Unreadable
from slurm_pool.bridge.slurm_side import SlurmSide
from slurm_pool.errors import InputError
from slurm_pool.text import control_chars
from tests.support.k8s_fake import FakeK8s, isvc, pod_manifest
from tests.unit.test_bridge_plan import CONFIG, EXAMPLE_SPEC, World, world

pytestmark = pytest.mark.usefixtures("narrow_from_json")

GPU = "nvidia.com/gpu"
ESC = "\x1b[31m"


def safe(text: str) -> bool:
    """No line of ``text`` holds a control character."""
    return not any(control_chars(line) for line in text.splitlines())


def _svc(predictor: Any, name: str = "llm", **more: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "serve"}, "spec": {"predictor": predictor, **more}}


def _limit(value: Any) -> dict[str, Any]:
    return {"minReplicas": 1, "model": {"resources": {"limits": {GPU: value}}}}


def _named(name: str, **body: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "serve"}, **body}


# -- quantities and counts (defect 2) --------------------------------------------------


QUANTITIES: list[tuple[str, Any, int | None]] = [
    # (case, nvidia.com/gpu limit, GPUs read; None: the service cannot be read)
    ("plain string", "2", 2),
    ("plain int", 2, 2),
    ("exponent, read by Kubernetes' parser", "1e1", 10),
    ("negative string", "-1", None),
    ("negative int", -2, None),
    ("non-ASCII digit", "\u0661", None),
    ("underscore", "1_0", None),
    ("NaN", "NaN", None),
    ("infinity", "Infinity", None),
    ("boolean", True, None),
    ("fraction of a device", "500m", None),
    ("trailing newline", "2\n", None),
    ("surrounding space", " 2", None),
    ("beyond int64", "1e30", None),
    ("a list", ["2"], None),
    ("null", None, None),
]


@pytest.mark.parametrize(("value", "want"), [c[1:] for c in QUANTITIES], ids=[c[0] for c in QUANTITIES])
def test_gpu_quantities_are_read_by_the_kubernetes_rules(value: Any, want: int | None) -> None:
    svc = _svc(_limit(value))
    if want is not None:
        assert isvc_demand(svc) == {GPU: want}
        return
    with pytest.raises(Unreadable, match=r"InferenceService serve/llm: spec\.predictor\.model\.resources\.limits"):
        isvc_demand(svc)
    problems: list[str] = []
    assert total_demand([svc, _svc(_limit("1"), name="ok")], problems=problems) == {GPU: 1}
    assert len(problems) == 1 and "serve/llm" in problems[0] and safe(problems[0])


COUNTS: list[tuple[str, dict[str, Any], dict[str, Any], str]] = [
    # (case, predictor fields, objects beside the service, the field named)
    ("negative minReplicas", {"minReplicas": -3}, {}, "minReplicas"),
    ("boolean minReplicas", {"minReplicas": True}, {}, "minReplicas"),
    ("non-ASCII minReplicas", {"minReplicas": "\u0662"}, {}, "minReplicas"),
    (
        "negative HPA desiredReplicas",
        {},
        {"hpas": [_named("llm-predictor", status={"desiredReplicas": -5})]},
        "desiredReplicas",
    ),
    (
        "boolean HPA desiredReplicas",
        {},
        {"hpas": [_named("llm-predictor", status={"desiredReplicas": True})]},
        "desiredReplicas",
    ),
    (
        "underscore Deployment replicas",
        {},
        {"deployments": [_named("llm-predictor", spec={"replicas": "1_0"})]},
        "spec.replicas",
    ),
    ("underscore pipelineParallelSize", {"workerSpec": {"pipelineParallelSize": "1_0"}}, {}, "pipelineParallelSize"),
    (
        "negative tensorParallelSize",
        {"workerSpec": {"pipelineParallelSize": 2, "tensorParallelSize": -1}},
        {},
        "tensorParallelSize",
    ),
]


@pytest.mark.parametrize(("fields", "observed", "field"), [c[1:] for c in COUNTS], ids=[c[0] for c in COUNTS])
def test_counts_are_whole_non_negative_numbers(fields: dict, observed: dict, field: str) -> None:
    svc = _svc({"model": {"resources": {"limits": {GPU: "1"}}}} | fields)
    with pytest.raises(Unreadable, match=field):
        isvc_demand(svc, **observed)


SHAPES: list[tuple[str, Any, dict[str, Any]]] = [
    # (case, the service, objects beside it): each raised a traceback before
    ("service is a string", "llm", {}),
    ("predictor is a list", _svc([{"model": {}}]), {}),
    ("resources is a string", _svc({"model": {"resources": "lots"}}), {}),
    ("limits is a list", _svc({"model": {"resources": {"limits": [GPU]}}}), {}),
    ("containers is a string", _svc({"containers": "main"}), {}),
    ("status is a list", _svc({"model": {"modelFormat": {"name": "hf"}}}) | {"status": ["Ready"]}, {}),
    ("workerSpec is a string", _svc({"model": {}, "workerSpec": "big"}), {}),
    ("HPA status is a list", _svc(_limit("1")), {"hpas": [_named("llm-predictor", status=[3])]}),
    (
        "runtime formats are a map",
        _svc({"model": {"modelFormat": {"name": "hf"}}}),
        {"cluster_runtimes": [{"metadata": {"name": "rt"}, "spec": {"supportedModelFormats": {"name": "hf"}}}]},
    ),
    ("name with a control character", _svc(_limit("1"), name=f"llm{ESC}"), {}),
    ("MIG resource with an escape", _svc({"model": {"resources": {"limits": {f"nvidia.com/mig-1g{ESC}": "1"}}}}), {}),
]


@pytest.mark.parametrize(("svc", "observed"), [c[1:] for c in SHAPES], ids=[c[0] for c in SHAPES])
def test_a_service_of_the_wrong_shape_is_unreadable_not_a_traceback(svc: Any, observed: dict) -> None:
    with pytest.raises(Unreadable) as exc:
        isvc_demand(svc, **observed)
    assert safe(str(exc.value))


OTHERS: list[tuple[str, dict[str, Any]]] = [
    # (case, objects beside the services): one that cannot be named may be any service's
    ("pod labels are a list", {"pods": [{"metadata": {"name": "p", "namespace": "serve", "labels": ["x"]}}]}),
    ("pod is a string", {"pods": ["p"]}),
    ("Deployment without a name", {"deployments": [{"metadata": {"namespace": "serve"}, "spec": {"replicas": 9}}]}),
    ("HPA metadata is a list", {"hpas": [{"metadata": ["llm-predictor"]}]}),
]


@pytest.mark.parametrize("observed", [c[1] for c in OTHERS], ids=[c[0] for c in OTHERS])
def test_an_unreadable_object_beside_the_services_is_listed(observed: dict) -> None:
    problems: list[str] = []
    assert total_demand([isvc("llm", 2)], problems=problems, **observed) == {GPU: 2}
    assert len(problems) == 1
    with pytest.raises(Unreadable):
        total_demand([isvc("llm", 2)], **observed)  # the exporter's reader: a gap, not a lower demand


# -- the planner holds still while something cannot be read (defect 1) ---------------


def _lent(node: str = "a-gpu1") -> World:
    w = world(2)
    assert w.run().ok and w.k8s.lent(node)
    return w


def _bad_service(w: World) -> None:
    w.k8s.isvcs.append(_svc(_limit("-2"), name="bad"))


def _bigger_bad_service(w: World) -> None:
    w.k8s.isvcs.append(_svc(_limit("1_0"), name="bad"))


def _taints_string(w: World) -> None:
    w.k8s.nodes["a-gpu2"]["spec"]["taints"] = "slurm-pool/reclaimed"


def _labels_list(w: World) -> None:
    w.k8s.nodes["a-gpu2"]["metadata"]["labels"] = ["slurm-pool/lent"]


def _negative_allocatable(w: World) -> None:
    w.k8s.nodes["b-gpu1"]["status"]["allocatable"][GPU] = "-4"


def _unschedulable_text(w: World) -> None:
    w.k8s.nodes["a-gpu2"]["spec"]["unschedulable"] = "false"


def _pod_owner_refs_string(w: World) -> None:
    w.k8s.pods.append(pod_manifest("odd", "b-gpu1", ownerReferences="DaemonSet"))


HOLDS: dict[str, tuple[Callable[[World], None], str]] = {
    # name: (what goes wrong, what the notes name)
    "a negative GPU limit does not lower demand": (_bad_service, "InferenceService serve/bad"),
    "an unreadable GPU limit does not raise demand": (_bigger_bad_service, "InferenceService serve/bad"),
    "Node taints are a string": (_taints_string, "Node a-gpu2: spec.taints"),
    "Node labels are a list": (_labels_list, "Node a-gpu2: metadata.labels"),
    "Node allocatable is negative": (_negative_allocatable, "Node b-gpu1: status.allocatable"),
    "Node unschedulable is text": (_unschedulable_text, "Node a-gpu2: spec.unschedulable"),
    "pod ownerReferences are a string": (_pod_owner_refs_string, "Pod serve/odd: metadata.ownerReferences"),
}


@pytest.mark.parametrize("name", list(HOLDS))
def test_an_unreadable_object_makes_the_run_hold_still(name: str) -> None:
    """a-gpu1 is lent for 2 GPUs; while something cannot be read it stays lent, and nothing more is."""
    spoil, named = HOLDS[name]
    w = _lent()
    spoil(w)
    w.k8s.isvcs.append(isvc("more", 2))  # more demand: would lend a second node
    report = w.run()
    text = report.text()
    assert report.exit_code == 1 and not report.failed, text
    assert any(named in n for n in report.plan.notes), text
    assert [n for n in w.k8s.nodes if w.k8s.lent(n)] == ["a-gpu1"], text
    assert list(w.placeholders()) == ["a-gpu1"], text
    assert w.k8s.fenced("a-gpu2") or "a-gpu2" in named  # the rest stays closed


def test_an_unreadable_node_is_reclaimed_when_lent() -> None:
    w = _lent()
    w.k8s.nodes["a-gpu1"]["metadata"]["annotations"] = "reclaim"
    w.k8s.pods.append(pod_manifest("llm-0", "a-gpu1"))
    report = w.run()
    node = report.plan.node("a-gpu1")
    assert node.intent == "reclaim" and "cannot read the Node" in node.reasons[0], report.text()
    assert "a-gpu1" not in w.placeholders() and w.k8s.evictions == ["serve/llm-0"]


@pytest.mark.parametrize(
    "pod",
    [
        {"metadata": "llm-0", "spec": {"nodeName": "a-gpu1"}},
        {"metadata": {"name": f"llm{ESC}", "namespace": "serve"}, "spec": {"nodeName": "a-gpu1"}},
        {"metadata": {"name": ["llm-0"], "namespace": "serve"}, "spec": {"nodeName": "a-gpu1"}},
    ],
    ids=["metadata is a string", "name with an escape", "name is a list"],
)
def test_a_pod_that_cannot_be_named_keeps_its_node_with_kubernetes(pod: dict) -> None:
    w = _lent()
    w.k8s.pods += [pod, pod_manifest("llm-1", "a-gpu1")]
    w.slurm.drains["a-gpu1"] = "disk"  # Slurm wants the node back
    report = w.run()
    text = report.text()
    assert report.exit_code == 1 and "cannot be named, so the node stays with Kubernetes" in text, text
    assert "a-gpu1" in w.placeholders(), "the placeholder must stay"
    assert w.k8s.evictions == ["serve/llm-1"] and w.k8s.fenced("a-gpu1")  # what can be done is done
    assert safe(text)


STOPS: dict[str, tuple[Callable[[World], None], str]] = {
    # name: (what goes wrong, the error): no safe plan, nothing changed
    "a Node without a name": (lambda w: w.k8s.nodes["a-gpu2"].pop("metadata"), "Node"),
    "a Node named with an escape": (
        lambda w: w.k8s.nodes["a-gpu2"]["metadata"].update(name=f"a-gpu2{ESC}"),
        "metadata.name",
    ),
    "a Node that is a list": (lambda w: w.k8s.nodes.update({"a-gpu2": ["a-gpu2"]}), "Node"),  # type: ignore[dict-item]
    "a pod's nodeName is a list": (
        lambda w: w.k8s.pods.append({"metadata": {"name": "p", "namespace": "serve"}, "spec": {"nodeName": ["x"]}}),
        "which node the pod holds cannot be told",
    ),
    "a pod's spec is a string": (
        lambda w: w.k8s.pods.append({"metadata": {"name": "p", "namespace": "serve"}, "spec": "a-gpu1"}),
        "which node the pod holds cannot be told",
    ),
    "the Lease spec is a list": (
        lambda w: w.k8s.leases.update({("default", "slurm-pool-rebalance"): {"metadata": {}, "spec": []}}),
        "Lease",
    ),
    "the Lease duration is a boolean": (
        lambda w: w.k8s.leases.update(
            {
                ("default", "slurm-pool-rebalance"): {
                    "metadata": {"name": "slurm-pool-rebalance", "resourceVersion": "1"},
                    "spec": {
                        "holderIdentity": "other",
                        "renewTime": "2020-01-01T00:00:00Z",
                        "leaseDurationSeconds": True,
                    },
                }
            }
        ),
        "leaseDurationSeconds",
    ),
}


@pytest.mark.parametrize("name", list(STOPS))
def test_no_safe_plan_stops_the_run_before_it_acts(name: str) -> None:
    spoil, message = STOPS[name]
    w = _lent()
    w.k8s.isvcs.clear()  # no demand: a-gpu1 would be reclaimed
    before = (copy.deepcopy(w.k8s.patches), len(w.runner.calls))
    spoil(w)
    with pytest.raises(Unreadable, match=message) as exc:
        w.run()
    assert isinstance(exc.value, InputError) and safe(str(exc.value))
    assert w.k8s.patches == before[0], "no Node was changed"
    assert [c for c in w.runner.calls[before[1] :] if c[0] in ("sbatch", "scancel")] == [], "no job was changed"
    assert w.k8s.lent("a-gpu1") and "a-gpu1" in w.placeholders()


def test_a_list_that_is_not_a_list_stops_the_run() -> None:
    w = _lent()
    w.k8s.list_nodes = lambda: {"items": []}  # type: ignore[method-assign,assignment,return-value]
    with pytest.raises(Unreadable, match="list of Nodes"):
        w.run()


# -- steps that meet a hostile answer -------------------------------------------------


def test_a_fence_on_a_node_of_the_wrong_shape_fails_its_step_only() -> None:
    w = world(0)
    for n in ("a-gpu1", "a-gpu2"):
        w.k8s.nodes[n]["spec"] = {}  # open: both get fenced
    real = w.k8s.read_node

    def read_node(name: str) -> dict:
        node = real(name)
        if name == "a-gpu1":
            node["spec"]["taints"] = "garbage"
        return node

    w.k8s.read_node = read_node  # type: ignore[method-assign]
    report = w.run()
    by_node = {r.node: r for r in report.results}
    assert not by_node["a-gpu1"].ok and "spec.taints" in by_node["a-gpu1"].errors[0]
    assert by_node["a-gpu2"].ok and w.k8s.fenced("a-gpu2")


def test_wait_empty_counts_a_pod_it_cannot_read() -> None:
    w = _lent()
    w.k8s.pods.append(pod_manifest("llm-0", "a-gpu1"))
    w.k8s.isvcs.clear()
    real = w.k8s.list_pods

    def list_pods(node: str | None = None) -> list:
        pods = real(node)
        if node:  # the executor's and the fence's list, after the eviction
            pods.append({"metadata": ["odd"], "spec": {"nodeName": []}})
        return pods

    w.k8s.list_pods = list_pods  # type: ignore[method-assign]
    report = w.run()
    wait = next(r for r in report.results if r.kind == "wait-empty")
    assert not wait.ok and "1 pod(s) still there" in wait.detail, report.text()
    assert "a-gpu1" in w.placeholders()  # not given back to Slurm


@pytest.mark.parametrize(
    "pod",
    [
        {"metadata": {"name": f"llm{ESC}\u202e", "namespace": "serve"}, "spec": {"nodeName": "a-gpu1"}},
        {"metadata": "llm-0", "spec": {"nodeName": "a-gpu1"}},
    ],
    ids=["name with escapes", "metadata is a string"],
)
def test_the_placeholders_fence_reports_a_pod_it_cannot_delete(pod: dict) -> None:
    k8s = FakeK8s()
    k8s.pods = [pod_manifest("llm-1", "a-gpu1"), pod]
    t = [0.0]
    res = fence_node(k8s, "a-gpu1", 2, clock=lambda: t[0], sleep=lambda s: t.__setitem__(0, t[0] + s))
    assert not res.ok and "cannot be named" in res.detail and safe(res.detail)
    assert k8s.deletions == ["serve/llm-1"]


# -- Slurm's side ---------------------------------------------------------------------------


@pytest.mark.parametrize("out", ["\u0661\u0662\u0663\n", "1_0\n", "-5\n", "0\n", "12;cluster\x1b\n"])
def test_a_job_id_sbatch_did_not_print_fails_the_submit(out: str) -> None:
    runner = RecordingRunner()
    runner.on(["sbatch"], out)
    runner.on(["sinfo", "--version"], "slurm 22.05.8\n")
    side = SlurmSide(SlurmClient(runner), CONFIG, submit_as="slurmpool")
    if out.startswith("12;"):
        assert side.submit_placeholder("a-gpu1") == 12
        return
    with pytest.raises(CommandError):
        side.submit_placeholder("a-gpu1")


@pytest.mark.parametrize("node", ["a-gpu1\n--uid=0", "a-gpu1 --uid=0", "", "-a", f"a{ESC}"])
def test_no_placeholder_for_a_name_slurm_cannot_have(node: str) -> None:
    side = SlurmSide(SlurmClient(RecordingRunner()), CONFIG, submit_as="slurmpool")
    with pytest.raises(InputError, match="not a valid Slurm node name") as exc:
        side.placeholder_argv(node)
    assert safe(str(exc.value))


@pytest.mark.parametrize(
    ("comment", "account"),
    [(f"slurm-pool:lend node=a-gpu2{ESC}", ""), ("slurm-pool:lend node=a-gpu2", "proja")],
    ids=["node with an escape", "another account"],
)
def test_a_job_that_only_looks_like_a_placeholder_is_an_ordinary_job(comment: str, account: str) -> None:
    w = world(0)
    job = w.slurm.add("RUNNING", "k8s-lend", "a-gpu2", comment, account=account)
    w.k8s.isvcs.append(isvc("llm", 4))
    report = w.run()
    assert job not in [j for s in report.plan.steps for j in s.job_ids], report.text()
    assert next(j for j in w.slurm.jobs if j["job_id"] == job)["job_state"] == "RUNNING"
    assert "job(s) " + str(job) in " ".join(report.plan.node("a-gpu2").reasons)
    assert safe(report.text())


def test_a_constraint_with_a_trailing_newline_is_assumed_to_fit() -> None:
    node = SlurmNodeView("a-gpu1", state=None, partitions=("shared",), gpus=(("", 2),), features=("a-node",))  # type: ignore[arg-type]
    assert PendingJob(1, ("shared",), features="b-node\n").fits(node)  # not simple: it may fit, so it claims


def test_the_report_shows_slurm_and_kubernetes_text_terminal_safe() -> None:
    w = world(2)
    w.slurm.drains["a-gpu1"] = f"bad{ESC}reason\u202e"
    w.k8s.nodes["a-gpu2"]["spec"]["taints"] = [{"key": f"k{ESC}", "effect": "NoSchedule"}]
    report = w.run()
    text = report.text()
    assert "bad\\x1b[31mreason\\u202e" in text
    assert safe(text)


def test_a_held_lease_names_its_holder_terminal_safe() -> None:
    w = world(0)
    w.k8s.leases[("default", "slurm-pool-rebalance")] = {
        "metadata": {"name": "slurm-pool-rebalance", "resourceVersion": "1"},
        "spec": {
            "holderIdentity": f"x{ESC}",
            "renewTime": datetime.now(timezone.utc).isoformat(),
            "leaseDurationSeconds": 600,
        },
    }
    with pytest.raises(LeaseHeld) as exc:
        w.run()
    assert "x\\x1b[31m" in str(exc.value) and safe(str(exc.value))


# -- the commands ----------------------------------------------------------------------------


def _cli(monkeypatch: pytest.MonkeyPatch, w: World, *args: str):
    from slurm_pool.adapters import runner as runner_mod
    from slurm_pool.bridge import k8s as k8s_mod
    from slurm_pool.cli import cli

    w.k8s.close = lambda: None  # type: ignore[attr-defined]
    monkeypatch.setattr(runner_mod, "SubprocessRunner", lambda: w.runner)
    monkeypatch.setattr(k8s_mod.KubernetesAPI, "connect", classmethod(lambda cls, config, kubeconfig=None: w.k8s))
    return CliRunner().invoke(cli, ["rebalance", "--spec", EXAMPLE_SPEC, "--now", "2026-01-07T02:00:00Z", *args])


@pytest.mark.parametrize(
    ("spoil", "code", "said"),
    [
        (lambda w: w.k8s.nodes["a-gpu2"]["metadata"].update(name=f"x{ESC}"), 2, "error: Node x\\x1b[31m"),
        (lambda w: w.k8s.pods.append(pod_manifest(f"p{ESC}", "a-gpu1")), 1, "cannot read Pod serve/p\\x1b[31m"),
        (lambda w: w.k8s.isvcs.append(_svc(_limit("-1"), name="neg")), 1, "cannot read InferenceService serve/neg"),
    ],
    ids=["node name: stop, exit 2", "pod name: hold still, exit 1", "negative GPUs: hold still, exit 1"],
)
def test_rebalance_command_on_hostile_kubernetes(monkeypatch: pytest.MonkeyPatch, spoil, code: int, said: str) -> None:
    w = World(CONFIG.model_copy(update={"timezone": None}))
    w.k8s.isvcs.append(isvc("llm", 2))
    spoil(w)
    result = _cli(monkeypatch, w)
    assert result.exit_code == code, result.output
    assert said in result.output and "Traceback" not in result.output
    assert safe(result.output)


@pytest.mark.parametrize("node", [f"a-gpu1{ESC}", "a-gpu1\n", "A_GPU", ""])
def test_fence_node_refuses_a_name_kubernetes_cannot_have(tmp_path, node: str) -> None:
    from slurm_pool.cli import cli

    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("{}\n")
    result = CliRunner().invoke(cli, ["fence-node", node, "--kubeconfig", str(kubeconfig)])
    assert result.exit_code == 2 and "is not a Kubernetes node name" in result.output, result.output
    assert safe(result.output)
