"""What ``bridge.gangs`` adds to the rendered files: PriorityClasses, and the RBAC for gangs (issue 31).

The RBAC is read back as Kubernetes would bind it (a pure evaluator of the rules
each user is bound to), so a right is asserted, not a line of YAML.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from slurm_pool.cli import main
from slurm_pool.render.k8s_rbac import bridge_rbac, priority_classes
from slurm_pool.spec import load_spec

REPO = Path(__file__).resolve().parents[2]
GANGS = REPO / "examples" / "pool-gangs.yaml"
PLAIN = REPO / "examples" / "pool.yaml"
REB = "slurm-pool-rebalancer"
FENCE = "slurm-pool-node:a-gpu1"


def allowed(rbac: str, user: str, group: str, resource: str, verb: str, name: str = "", ns: str = "") -> bool:
    """Whether the rendered RBAC lets ``user`` do ``verb`` on ``resource`` (``name`` in ``ns``)."""
    docs = [d for d in yaml.safe_load_all(rbac) if d]
    roles = {(d["kind"], d["metadata"].get("namespace", ""), d["metadata"]["name"]): d for d in docs}
    for b in docs:
        if not b["kind"].endswith("Binding") or user not in [s["name"] for s in b["subjects"]]:
            continue
        bns = b["metadata"].get("namespace", "")
        if bns and bns != ns:
            continue
        role = roles[(b["roleRef"]["kind"], bns if b["roleRef"]["kind"] == "Role" else "", b["roleRef"]["name"])]
        for r in role["rules"]:
            names = r.get("resourceNames")
            if group in r["apiGroups"] and resource in r["resources"] and verb in r["verbs"]:
                if not names or name in names:
                    return True
    return False


@pytest.fixture(scope="module")
def gang_rbac() -> str:
    text = bridge_rbac(load_spec(GANGS))
    assert text is not None
    return text


RIGHTS = [
    # who, api group, resource, verb, object name, granted with bridge.gangs
    (REB, "scheduling.volcano.sh", "podgroups", "list", "", True),
    (REB, "scheduling.volcano.sh", "podgroups", "watch", "", True),
    (REB, "batch.volcano.sh", "jobs", "list", "", True),
    (REB, "batch.volcano.sh", "jobs", "get", "", True),
    (REB, "bus.volcano.sh", "commands", "create", "", True),
    (REB, "scheduling.k8s.io", "priorityclasses", "list", "", True),
    (REB, "scheduling.k8s.io", "priorityclasses", "create", "", False),
    (REB, "batch.volcano.sh", "jobs", "delete", "", False),
    (REB, "scheduling.volcano.sh", "podgroups", "patch", "", False),
    # the fence stops the whole group: it lists and patches every node, reads the vcjob, makes the Command
    (FENCE, "", "nodes", "list", "", True),
    (FENCE, "", "nodes", "patch", "b-gpu1", True),
    (FENCE, "", "nodes", "delete", "b-gpu1", False),
    (FENCE, "batch.volcano.sh", "jobs", "get", "", True),
    (FENCE, "batch.volcano.sh", "jobs", "list", "", False),
    (FENCE, "bus.volcano.sh", "commands", "create", "", True),
    (FENCE, "scheduling.volcano.sh", "podgroups", "list", "", False),
]


@pytest.mark.parametrize("user, group, resource, verb, name, granted", RIGHTS)
def test_gang_rights(gang_rbac: str, user: str, group: str, resource: str, verb: str, name: str, granted: bool) -> None:
    assert allowed(gang_rbac, user, group, resource, verb, name) is granted


@pytest.mark.parametrize("user, group, resource, verb, name, granted", [r for r in RIGHTS if r[5]])
def test_no_gang_rights_without_gangs(
    tmp_path: Path, user: str, group: str, resource: str, verb: str, name: str, granted: bool
) -> None:
    """The same spec without ``gangs``: none of those rights (bar a fence's patch of its own node)."""
    data = yaml.safe_load(GANGS.read_text())
    del data["bridge"]["gangs"]
    path = tmp_path / "no-gangs.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    spec = load_spec(path)
    text = bridge_rbac(spec)
    assert text is not None and priority_classes(spec) is None
    assert not allowed(text, user, group, resource, verb, name)
    assert allowed(text, FENCE, "", "nodes", "patch", "a-gpu1")


def test_priority_classes() -> None:
    text = priority_classes(load_spec(GANGS))
    assert text is not None and text.startswith("# ")
    docs = [d for d in yaml.safe_load_all(text) if d]
    got = [(d["kind"], d["metadata"]["name"], d["value"], d["preemptionPolicy"], d["globalDefault"]) for d in docs]
    assert got == [
        ("PriorityClass", "training-high", 100000, "PreemptLowerPriority", False),
        ("PriorityClass", "batch-low", 1000, "Never", False),
    ]
    assert {d["apiVersion"] for d in docs} == {"scheduling.k8s.io/v1"}
    assert docs[1]["description"] == "Batch pods; they wait rather than preempt."


@pytest.mark.parametrize(
    "description",
    ["a: b # not a comment", "- [x] {y}", "'quoted' \"twice\"", "---", "&anchor *alias !tag", "…unicode…"],
)
def test_description_is_data_not_yaml(tmp_path: Path, description: str) -> None:
    data = yaml.safe_load(GANGS.read_text())
    data["bridge"]["gangs"]["priority_classes"][0]["description"] = description
    path = tmp_path / "pool.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    text = priority_classes(load_spec(path))
    assert text is not None
    docs = [d for d in yaml.safe_load_all(text) if d]
    assert len(docs) == 2 and docs[0]["description"] == description


@pytest.mark.parametrize(
    "change, written",
    [
        (lambda g: None, True),
        (lambda g: g.update(priority_classes=[]), False),
        (lambda g: g.clear(), False),  # gangs: {} : gangs with defaults, no classes
    ],
)
def test_render_writes_the_file_only_with_classes(tmp_path: Path, capsys, change, written: bool) -> None:
    data = yaml.safe_load(GANGS.read_text())
    change(data["bridge"]["gangs"])
    spec = tmp_path / "pool.yaml"
    spec.write_text(yaml.safe_dump(data, sort_keys=False))
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as exc:
        main(["render", str(spec), "-o", str(out), "--slurm-version", "24.11"])
    assert exc.value.code == 0, capsys.readouterr().err
    assert (out / "k8s-priorityclasses.yaml").is_file() is written
    assert (out / "k8s-bridge-rbac.yaml").is_file()


def test_the_plain_example_has_no_gangs() -> None:
    """examples/pool.yaml (the goldens' spec) renders neither gang rights nor PriorityClasses."""
    spec = load_spec(PLAIN)
    text = bridge_rbac(spec)
    assert text is not None and "volcano" not in text and priority_classes(spec) is None


def test_gangs_example_validates(capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["validate", str(GANGS)])
    out = capsys.readouterr()
    assert exc.value.code == 0, out.err
    assert ": valid (" in out.out


@pytest.mark.parametrize(
    "grace, fence, code",
    [(30, 45, 0), (40, 45, 0), (41, 45, 2), (45, 45, 2), (20, 24, 2)],
)
def test_validate_checks_the_gangs_grace(tmp_path: Path, capsys, grace: int, fence: int, code: int) -> None:
    """``grace_seconds`` + 5 must fit in ``fence_seconds``: exit 2 naming the field otherwise."""
    data = yaml.safe_load(GANGS.read_text())
    data["bridge"]["gangs"]["grace_seconds"] = grace
    data["bridge"]["fence_seconds"] = fence
    path = tmp_path / "pool.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    with pytest.raises(SystemExit) as exc:
        main(["validate", str(path)])
    err = capsys.readouterr().err
    assert exc.value.code == code, err
    if code:
        assert f"bridge.gangs.grace_seconds: {grace}" in err
        assert "Traceback" not in err
