"""``bridge.node_names``: a Slurm node's Kubernetes Node by name, by label or by rule (table-driven).

The spec's checks, the pure matching (:mod:`slurm_pool.bridge.names`), and the
bridge run end to end against the fakes of ``test_bridge_plan`` with Kubernetes
Nodes named unlike Slurm's nodes.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from slurm_pool.bridge.model import LENT_LABEL, build_snapshot
from slurm_pool.bridge.names import NodeNaming
from slurm_pool.bridge.plan import plan
from slurm_pool.bridge.reconcile import observe
from slurm_pool.bridge.slurm_side import placeholder_script, submit_identity
from slurm_pool.errors import SpecError
from slurm_pool.spec.bridge import Bridge, NodeNames
from slurm_pool.spec.load import parse_spec
from tests.support.k8s_fake import NODES, isvc, node_manifest, pod_manifest
from tests.support.spec_positions import BASE
from tests.unit.test_bridge_plan import CONFIG, NIGHT, NOON, World

pytestmark = pytest.mark.usefixtures("narrow_from_json")

LABEL = "slurm-pool/slurm-node"
SLURM = ("gpu01", "gpu02", "gpu03")

# -- the spec ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "names, field",
    [
        ({"by": "label", "label": "a/b/c"}, "label"),
        ({"by": "label", "label": "/x"}, "label"),
        ({"by": "label", "label": "-x"}, "label"),
        ({"by": "label", "label": "Example.com/x"}, "label"),
        ({"by": "label", "label": "slurm-pool/slurm-node\n"}, "label"),
        ({"by": "label", "label": "x" * 64}, "label"),
        ({"by": "label", "label": ("a" * 60 + ".") * 5 + "b/x"}, "label"),  # a prefix over 253
        ({"by": "rule", "slurm": "gpu"}, "slurm"),
        ({"by": "rule", "slurm": "{node}{node}"}, "slurm"),
        ({"by": "rule", "slurm": "gpu {node}"}, "slurm"),
        ({"by": "rule", "kubernetes": "K8s-{node}"}, "kubernetes"),
        ({"by": "rule", "kubernetes": "k8s_{node}"}, "kubernetes"),
        ({"by": "rule", "kubernetes": "k8s-{node}\u2028"}, "kubernetes"),
        ({"by": "regex"}, "by"),
        ({"by": "label", "value": "x"}, "value"),
    ],
)
def test_bad_node_names_are_refused_naming_the_field(names: dict[str, str], field: str) -> None:
    doc = copy.deepcopy(BASE)
    doc["bridge"]["node_names"] = names
    with pytest.raises(SpecError) as exc:
        parse_spec(doc)
    paths = [i.path for i in exc.value.issues]
    assert any(p.startswith(f"bridge.node_names.{field}") for p in paths), paths


@pytest.mark.parametrize(
    "names",
    [
        {},
        {"by": "label"},
        {"by": "label", "label": "example.org/slurm-node"},
        {"by": "label", "label": "node"},
        {"by": "rule", "slurm": "gpu{node}", "kubernetes": "k8s-{node}.example.org"},
        {"by": "rule", "slurm": "GPU_{node}", "kubernetes": "{node}"},
    ],
)
def test_good_node_names_load(names: dict[str, str]) -> None:
    doc = copy.deepcopy(BASE)
    doc["bridge"]["node_names"] = names
    spec = parse_spec(doc)
    assert spec.bridge is not None and spec.bridge.node_names == NodeNames(**names)


# -- the matching --------------------------------------------------------------------------

RULE = NodeNames(by="rule", slurm="gpu{node}", kubernetes="k8s-{node}.example.org")
BY_LABEL = NodeNames(by="label")


def _labelled(value: str | None) -> dict[str, str]:
    return {} if value is None else {LABEL: value}


@pytest.mark.parametrize(
    "rule, k8s, to_slurm, problems, doubtful",
    [
        # by name: each Node is the Slurm node of its own name, Slurm's or not (as before node_names)
        (NodeNames(), [("gpu01", None), ("infer1", None)], {"gpu01": "gpu01", "infer1": "infer1"}, [], []),
        # by rule: the Nodes that fit the rule, whether Slurm has such a node or not
        (
            RULE,
            [("k8s-01.example.org", None), ("k8s-09.example.org", None), ("infer1", None)],
            {"k8s-01.example.org": "gpu01", "k8s-09.example.org": "gpu09"},
            [],
            [],
        ),
        # by rule: nothing left for {node} does not fit
        (RULE, [("k8s-.example.org", None)], {}, [], []),
        # by label: a Node without the label is Kubernetes' own
        (BY_LABEL, [("a", "gpu01"), ("b", "gpu02"), ("infer1", None)], {"a": "gpu01", "b": "gpu02"}, [], []),
        # by label: a value naming no Slurm node, or no valid name at all, leaves its Node alone
        (BY_LABEL, [("a", "gpu09")], {}, ["Kubernetes Node a: label", "names no Slurm node"], []),
        (BY_LABEL, [("a", "gpu01\nx")], {}, ["'gpu01\\nx'", "is not a Slurm node name"], []),
        (BY_LABEL, [("a", "")], {}, ["is not a Slurm node name"], []),
        (BY_LABEL, [("a", "gpu01\x1b[2J")], {}, ["is not a Slurm node name"], []),
        # by label: a Slurm node two Nodes claim leaves both alone, and is in doubt
        (
            BY_LABEL,
            [("a", "gpu01"), ("b", "gpu01"), ("c", "gpu02")],
            {"c": "gpu02"},
            ["Slurm node gpu01: Kubernetes Nodes a, b all carry", "all left alone"],
            ["gpu01"],
        ),
    ],
)
def test_matching(
    rule: NodeNames, k8s: list[tuple[str, str | None]], to_slurm: dict[str, str], problems: list[str], doubtful: list
) -> None:
    got = NodeNaming(rule).match([(n, _labelled(v)) for n, v in k8s], SLURM)
    assert dict(got.to_slurm) == to_slurm
    assert dict(got.to_k8s) == {s: k for k, s in to_slurm.items()}
    text = "\n".join(got.problems)
    assert all(p in text for p in problems), text
    assert bool(problems) == bool(got.problems)
    assert "\n" not in "".join(got.problems) and "\x1b" not in text
    assert sorted(got.doubtful) == doubtful


@pytest.mark.parametrize(
    "rule, slurm, k8s",
    [
        (NodeNames(), "gpu01", "gpu01"),
        (RULE, "gpu01", "k8s-01.example.org"),
        (RULE, "cpu01", None),  # does not fit the Slurm template
        (RULE, "gpu", None),  # nothing left for {node}
        (RULE, "gpuAB", None),  # gives no Kubernetes name (upper case)
        (NodeNames(by="rule", slurm="{node}", kubernetes="{node}.x"), "n_1", None),
        (BY_LABEL, "gpu01", None),  # only the listed Nodes tell
    ],
)
def test_names_the_rule_alone_gives(rule: NodeNames, slurm: str, k8s: str | None) -> None:
    naming = NodeNaming(rule)
    assert naming.k8s_name(slurm) == k8s
    if k8s is not None:
        assert naming.slurm_name(k8s) == slurm


# -- whom placeholders are submitted as ------------------------------------------------------


@pytest.mark.parametrize(
    "user, euid, login, submit_as, noted",
    [
        ("slurmpool", 0, "root", "slurmpool", False),  # root: --uid, the one thing root is needed for
        ("slurmpool", 1001, "slurmpool", None, False),  # the bridge user itself: no --uid, no root
        ("slurmpool", 1002, "alice", None, True),  # someone else: submits as itself, and says so
        ("slurmpool", 1003, None, None, True),
        (None, 0, "root", None, False),  # no bridge user: whoever runs it
    ],
)
def test_submit_identity(user: str | None, euid: int, login: str | None, submit_as: str | None, noted: bool) -> None:
    got, notes = submit_identity(Bridge(user=user), euid, login)
    assert got == submit_as
    assert bool(notes) == noted


# -- the bridge, with Kubernetes Nodes named unlike Slurm's -----------------------------------


def k8s_of(slurm: str) -> str:
    return f"inference-{slurm}"


def renamed_world(**extra: Any) -> World:
    """The fakes' Slurm nodes, each with a Kubernetes Node ``inference-<name>`` labelled with it."""
    w = World(CONFIG.model_copy(update={"node_names": BY_LABEL, **extra}))
    w.k8s.nodes = {}
    for n in NODES:
        node = node_manifest(k8s_of(n))
        node["metadata"]["labels"][LABEL] = n
        w.k8s.nodes[k8s_of(n)] = node
    w.k8s.nodes["a-gpu1"] = node_manifest("a-gpu1")  # Kubernetes' own, named like a Slurm node
    assert w.run(now=NOON).ok
    return w


def test_a_lend_marks_the_labelled_node_not_the_one_of_the_same_name() -> None:
    w = renamed_world()
    assert all(w.k8s.fenced(k8s_of(n)) for n in NODES)
    assert not w.k8s.fenced("a-gpu1")  # Kubernetes' own node is never fenced
    w.k8s.isvcs.append(isvc("llm", 4))  # 2 GPUs beyond Kubernetes' own node's
    report = w.run()
    assert report.ok, report.text()
    lent = [n for n in NODES if w.k8s.lent(k8s_of(n))]
    assert len(lent) == 1 and set(w.placeholders()) == set(lent)
    assert not w.k8s.lent("a-gpu1") and LENT_LABEL not in w.k8s.node("a-gpu1")["metadata"]["labels"]
    assert {name for name, _ in w.k8s.patches} <= {k8s_of(n) for n in NODES}
    assert [e["involvedObject"]["name"] for _, e in w.k8s.events] == [k8s_of(lent[0])]
    assert f"{lent[0]} (Kubernetes Node {k8s_of(lent[0])})" in report.text()
    assert report.to_dict()["nodes"][0]["k8s_node"] == k8s_of(report.to_dict()["nodes"][0]["node"])
    # Its pods hold the Slurm node: a reclaim evicts them, from the Kubernetes Node.
    w.k8s.pods.append(pod_manifest("llm-0", k8s_of(lent[0])))
    w.k8s.pods.append(pod_manifest("other", "a-gpu1"))  # on Kubernetes' own node: never the Slurm node's
    w.k8s.isvcs.clear()
    report = w.run(now=NOON)
    assert report.ok, report.text()
    assert w.k8s.evictions == ["serve/llm-0"]
    assert w.k8s.fenced(k8s_of(lent[0])) and not w.placeholders()


def test_a_slurm_node_claimed_twice_is_left_alone_and_reported() -> None:
    w = renamed_world()
    twin = node_manifest("twin")
    twin["metadata"]["labels"][LABEL] = "a-gpu1"
    w.k8s.nodes["twin"] = twin
    w.k8s.isvcs.append(isvc("llm", 8))
    patched = len(w.k8s.patches)
    report = w.run()
    assert report.ok, report.text()
    assert "a-gpu1" not in {n.node for n in report.plan.nodes}
    assert not w.k8s.lent(k8s_of("a-gpu1")) and not w.k8s.lent("twin") and "a-gpu1" not in w.placeholders()
    assert any("Kubernetes Nodes inference-a-gpu1, twin all carry" in n for n in report.plan.notes)
    assert all(name not in ("twin", k8s_of("a-gpu1")) for name, _ in w.k8s.patches[patched:])


def test_a_lent_node_whose_label_goes_keeps_its_placeholder() -> None:
    w = renamed_world()
    w.k8s.isvcs.append(isvc("llm", 4))
    assert w.run().ok
    (node,) = w.placeholders()
    del w.k8s.nodes[k8s_of(node)]["metadata"]["labels"][LABEL]
    report = w.run()
    assert node in w.placeholders(), report.text()  # never given back to Slurm by a guess
    assert any("carries the bridge's marks" in n for n in report.plan.notes)
    assert "no listed Kubernetes Node can be told" in " ".join(report.plan.node(node).reasons)
    fenced = w.config.model_copy(update={"fence_kubeconfig": "/etc/k.conf"})
    with_fence = plan(observe(w.side, w.k8s, fenced), fenced, NIGHT)
    assert kinds_of(with_fence, node) == ["cancel"]  # with the fence, the placeholder fences as it ends


def kinds_of(p: Any, node: str) -> list[str]:
    return [s.kind for s in p.node(node).steps]


def test_the_fence_closes_the_kubernetes_node() -> None:
    cfg = Bridge(fence_kubeconfig="/etc/k.conf")
    assert "fence-node inference-gpu01 " in placeholder_script(cfg, "gpu01", "inference-gpu01")
    assert "fence-node gpu01 " in placeholder_script(cfg, "gpu01")
    with pytest.raises(ValueError, match="not a Kubernetes node name"):
        placeholder_script(cfg, "gpu01", "x;reboot")


def test_by_rule_maps_pods_and_nodes_without_a_listing() -> None:
    rule = NodeNames(by="rule", slurm="{node}", kubernetes="k8s-{node}")
    k8s = [node_manifest(f"k8s-{n}") for n in NODES] + [node_manifest("infer1", gpus=4)]
    pods = [pod_manifest("p", "k8s-a-gpu1"), pod_manifest("q", "infer1")]
    snap = build_snapshot(Bridge(node_names=rule), [], [], k8s, pods, [])
    assert sorted(snap.k8s_nodes) == sorted(NODES)
    assert snap.k8s_names["a-gpu1"] == "k8s-a-gpu1"
    assert [v.name for v in snap.k8s_only] == ["infer1"] and snap.base_gpus == 4 + 2 * len(NODES)
    assert [(p.name, p.node) for p in snap.pods] == [("p", "a-gpu1")]


def test_fence_rbac_names_the_kubernetes_node_by_rule() -> None:
    """Each fence may patch only its own Node: under ``by: rule`` that is the Kubernetes name."""
    from pathlib import Path

    from slurm_pool.render.k8s_rbac import bridge_rbac
    from slurm_pool.spec import load_spec_text

    text = (Path(__file__).resolve().parents[2] / "examples" / "pool.yaml").read_text()
    extra = "  fence_kubeconfig: /etc/slurm-pool/fence.kubeconfig\n"
    rule = "  node_names: {by: rule, slurm: '{node}', kubernetes: 'k8s-{node}'}\n"
    text = text.replace("    grace_time: 10\n", "    grace_time: 40\n")
    by_rule = bridge_rbac(load_spec_text(text.replace("  max_lent_nodes: 3\n", "  max_lent_nodes: 3\n" + extra + rule)))
    by_name = bridge_rbac(load_spec_text(text.replace("  max_lent_nodes: 3\n", "  max_lent_nodes: 3\n" + extra)))
    assert by_rule is not None and by_name is not None
    assert "  - k8s-a-gpu1\n" in by_rule and "  - k8s-a-gpu1\n" not in by_name
    assert "  - a-gpu1\n" in by_name
