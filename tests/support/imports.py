"""The import graph of ``slurm_pool``, read from the source with :mod:`ast`.

Every run-time import of every module -- imports inside functions included,
``if TYPE_CHECKING:`` blocks left out -- by module and by subpackage.  Used by
``tests/unit/test_structure.py`` (no cycles between packages or modules, a pure
core, no private name imported across modules) and by ``docs/architecture_graph.py``
(docs/architecture.md and the picture of the same graph).
"""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

PKG = Path(__file__).resolve().parents[2] / "slurm_pool"

# The pure core: spec, planners and renderers.  They import nothing that runs
# a command or talks to Slurm, Kubernetes or NVML (brief, anchor 1).
CORE = (
    "slurm_pool.errors",
    "slurm_pool.versions",
    "slurm_pool.wellknown",
    "slurm_pool.spec",
    "slurm_pool.render",
    "slurm_pool.policy",
    "slurm_pool.accounting.plan",
    "slurm_pool.mig.catalogue",
    "slurm_pool.mig.profiles",
    "slurm_pool.mig.placement",
    "slurm_pool.mig.planner",
    "slurm_pool.mig.emit",
    "slurm_pool.mig.confedit",
    "slurm_pool.sim.engine",
    "slurm_pool.sim.workload",
)


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


def is_cli(module: str) -> bool:
    """A package's command line: ``slurm_pool.mig.cli``, ``slurm_pool.metrics.status_cli``."""
    parts = module.split(".")
    return len(parts) > 2 and (parts[-1] == "cli" or parts[-1].endswith("_cli"))


def component(module: str) -> str:
    """The subpackage (or top-level module) a module belongs to: ``slurm_pool.mig.planner`` -> ``mig``.

    A package's command line is a layer of its own above the package (``slurm_pool.mig.cli`` -> ``mig.cli``):
    it may read the spec that the package's rules sit below; an import back into it is still a cycle.
    """
    parts = module.split(".")
    if is_cli(module):
        return f"{parts[1]}.{parts[-1]}"
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


def private_imports(module: str, source: str | None = None) -> list[tuple[int, str, str]]:
    """Private names (a leading underscore) ``module`` takes from another ``slurm_pool`` module.

    ``from slurm_pool.x import _name`` and ``from slurm_pool import x`` (or ``import slurm_pool.x as x``)
    followed by ``x._name``; each as (line, the other module, the name).  ``source``: the text to read
    instead of the module's file (for testing the finder).
    """
    tree = ast.parse(modules()[module].read_text() if source is None else source)
    out: list[tuple[int, str, str]] = []
    bound: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = _resolve(module, node.level, node.module)
            for a in node.names:
                if f"{base}.{a.name}" in modules():
                    bound[a.asname or a.name] = f"{base}.{a.name}"
                elif _private(a.name) and _ours_name(base) and base != module:
                    out.append((node.lineno, base, a.name))
        elif isinstance(node, ast.Import):
            for a in node.names:
                if _ours_name(a.name) and a.asname:
                    bound[a.asname] = a.name
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr) and isinstance(node.value, ast.Name):
            other = bound.get(node.value.id)
            if other is not None and other != module:
                out.append((node.lineno, other, node.attr))
    return sorted(out)


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _ours_name(name: str) -> bool:
    return name == "slurm_pool" or name.startswith("slurm_pool.")


def module_graph() -> dict[str, set[str]]:
    """Module -> the ``slurm_pool`` modules it imports at run time (lazy imports included)."""
    return {m: {n for n in imports_of(m) if n in modules() and n != m} for m in modules()}
