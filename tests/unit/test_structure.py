"""The package's shape: imports between subpackages go one way, the core is pure, and no test code ships.

Walks every module of ``slurm_pool`` with :mod:`ast` (:mod:`tests.support.imports`) -- imports
inside functions included, ``if TYPE_CHECKING:`` blocks left out -- so a cycle hidden in a lazy
import fails here too.
"""

from __future__ import annotations

import pytest

from tests.support.imports import CORE, PKG, closure, component_graph, cycles, imports_of, modules

EDGE = (
    "slurm_pool.adapters",
    "slurm_pool.bridge",
    "slurm_pool.localcluster",
    "slurm_pool.node",
    "slurm_pool.metrics",
    "slurm_pool.checkpoint",
    "slurm_pool.cli",
    "slurm_pool.conf_cli",
    "subprocess",
    "kubernetes",
    "pynvml",
    "prometheus_client",
)
TEST_ONLY = ("tests", "pytest", "lupa", "hypothesis", "_pytest")


@pytest.mark.parametrize(
    "graph,want",
    [
        ({"a": {"b"}, "b": set()}, []),
        ({"a": {"b"}, "b": {"a"}}, [["a", "b"]]),
        ({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}, [["a", "b", "c"]]),
    ],
)
def test_cycle_finder(graph: dict[str, set[str]], want: list[list[str]]) -> None:
    assert cycles(graph) == want


def test_the_walk_sees_lazy_imports() -> None:
    # render.render imports the policy at module level; cli imports subcommands by name only.
    assert "slurm_pool.policy.lua" in imports_of("slurm_pool.render.render")
    assert "slurm_pool.checkpoint.slurmjob" in imports_of("slurm_pool.node.hooks")  # inside a function
    # The closure follows imports through modules: the CLI reaches the Runner and subprocess.
    assert {"slurm_pool.adapters.runner", "subprocess"} <= closure("slurm_pool.conf_cli")
    assert "slurm_pool.policy.tables" in closure("slurm_pool.render")


def test_no_import_cycle_between_subpackages() -> None:
    graph = component_graph()
    assert {"spec", "mig", "render", "policy", "adapters"} <= set(graph)
    assert cycles(graph) == [], "subpackages import each other in a cycle"


@pytest.mark.parametrize("module", [m for m in sorted(modules()) if any(m == c or m.startswith(c + ".") for c in CORE)])
def test_core_module_is_pure(module: str) -> None:
    bad = sorted(n for n in closure(module) if any(n == e or n.startswith(e + ".") for e in EDGE))
    assert bad == [], f"{module} (pure core) reaches {bad}"


@pytest.mark.parametrize("module", sorted(modules()))
def test_no_test_code_in_the_package(module: str) -> None:
    bad = sorted(n for n in imports_of(module) if any(n == t or n.startswith(t + ".") for t in TEST_ONLY))
    assert bad == [], f"{module} imports test code {bad}"
    leaf = module.rsplit(".", 1)[-1]
    assert leaf not in {"testing", "harness", "conftest", "fixtures"}, f"{module} looks like a test harness"


def test_digit_checks_are_ascii() -> None:
    # str.isdigit() is true for "²", which int() refuses: a user's directory named so stopped
    # `checkpoints prune` for everyone (issue 11, defect 1).  Every digit check pairs it with isascii().
    bad = [
        f"{path.relative_to(PKG.parent)}:{no}"
        for path in modules().values()
        for no, line in enumerate(path.read_text().splitlines(), 1)
        if ".isdigit()" in line and ".isascii()" not in line
    ]
    assert bad == []
