"""The package's shape: imports between subpackages go one way, the core is pure, and no test code ships.

Walks every module of ``slurm_pool`` with :mod:`ast` -- imports inside
functions included, ``if TYPE_CHECKING:`` blocks left out -- so a cycle
hidden in a lazy import fails here too.
"""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[2] / "slurm_pool"

# The pure core: spec, planners and renderers.  They import nothing that runs
# a command or talks to Slurm, Kubernetes or NVML (brief, anchor 1).
CORE = (
    "slurm_pool.errors",
    "slurm_pool.versions",
    "slurm_pool.spec",
    "slurm_pool.render",
    "slurm_pool.policy",
    "slurm_pool.accounting.plan",
    "slurm_pool.mig.catalogue",
    "slurm_pool.mig.profiles",
    "slurm_pool.mig.placement",
    "slurm_pool.mig.planner",
    "slurm_pool.mig.emit",
    "slurm_pool.sim.engine",
    "slurm_pool.sim.workload",
)
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


def _module_name(path: Path) -> str:
    rel = path.relative_to(PKG.parent).with_suffix("")
    name = ".".join(rel.parts)
    return name.removesuffix(".__init__")


@cache
def modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(PKG.rglob("*.py"))}


def _resolve(module: str, level: int, target: str | None) -> str:
    """The absolute name of a relative import inside ``module``."""
    if level == 0:
        return target or ""
    is_pkg = modules()[module].name == "__init__.py"
    base = module.split(".")
    base = base if is_pkg else base[:-1]
    base = base[: len(base) - (level - 1)]
    return ".".join(base + ([target] if target else []))


@cache
def imports_of(module: str) -> frozenset[str]:
    """Every module ``module`` imports at run time (absolute names, third-party included)."""
    tree = ast.parse(modules()[module].read_text())
    typing_only: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            typing_only.update(id(n) for n in ast.walk(node) if n is not node.test)
    out: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(module, node.level, node.module)
            out.add(base)
            # `from pkg import mod` imports the submodule pkg.mod when there is one.
            out.update(f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in modules())
    return frozenset(out)


def _ours(name: str) -> list[str]:
    """The package modules that importing ``name`` executes: its parents' __init__ and itself."""
    parts = name.split(".")
    return [m for m in (".".join(parts[:i]) for i in range(1, len(parts) + 1)) if m in modules()]


@cache
def closure(module: str) -> frozenset[str]:
    """Everything importing ``module`` can import, transitively (third-party names included)."""
    seen: set[str] = set()
    todo = [module]
    while todo:
        m = todo.pop()
        for name in imports_of(m):
            if name in seen:
                continue
            seen.add(name)
            todo.extend(o for o in _ours(name) if o not in seen or o == name)
    return frozenset(seen)


def component(module: str) -> str:
    """The subpackage (or top-level module) a module belongs to: ``slurm_pool.mig.planner`` -> ``mig``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def component_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {component(m): set() for m in modules()}
    for m in modules():
        for name in imports_of(m):
            if name == "slurm_pool" or name.startswith("slurm_pool."):
                a, b = component(m), component(name)
                if a != b and name != "slurm_pool":
                    graph[a].add(b)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one member (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


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
