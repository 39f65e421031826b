"""Write docs/architecture.md, and draw docs/architecture.png, from the code of slurm_pool.

    .venv/bin/python docs/architecture_graph.py            # writes docs/architecture.md
    .venv/bin/python docs/architecture_graph.py --png [OUT.png]

docs/architecture.md is docs/architecture.template.md (the hand-written prose) with its
``{{packages}}`` and ``{{where}}`` filled in from the code: every package with its purpose (the first
line of its docstring), what it imports and whether it is pure core, and where a new Slurm call, CLI
command, page or spec section goes (found by what the modules define, so a moved module moves here
too).  ``tests/unit/test_architecture_doc.py`` fails when the committed file is stale.

The graph is the one ``tests/unit/test_structure.py`` checks, read by
``tests/support/imports.py``: every run-time import of every module (lazy
imports inside functions included, ``if TYPE_CHECKING:`` blocks left out).
A subpackage that holds both pure-core modules (``CORE``) and modules that talk to
the outside is drawn as two boxes.  An arrow A -> B means A imports B; an
arrow that a longer path already implies is left out.  Dotted red arrows are
not imports: they show which box talks to which outside system.
"""

from __future__ import annotations

import ast
import sys
import textwrap
from functools import cache
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.support.imports import CORE, closure, component, component_graph, imports_of, is_cli, modules  # noqa: E402

TEMPLATE = ROOT / "docs" / "architecture.template.md"
DOC = ROOT / "docs" / "architecture.md"
COMMAND = ".venv/bin/python docs/architecture_graph.py"

#: Modules started by slurmctld/slurmd/cron or a user: the root command line (each package's own
#: command line, ``pkg/cli.py``, is an entry too: :func:`tests.support.imports.is_cli`).
ENTRY = {"__main__", "cli"}
#: Not drawn: the package face and ``python -m slurm_pool``.
SKIP = {"slurm_pool", "__main__"}
#: The boxes that talk to outside systems, and to which (drawn with a red frame).
OUTSIDE = {
    "adapters": "Slurm commands, NVML",
    "bridge": "Kubernetes API",
}
W, H = 1.1, 0.42  # half a box
GAP, STEP, RISE = 1.35, 2.5, 1.45  # first box from the middle, box to box, floor to floor
COLOURS = {"core": "#cfe3f7", "edge": "#fbe0c3", "entry": "#e4e4e4"}
OUTSIDE_EDGE = "#b22222"


def _listed(module: str) -> bool:
    return any(module == c or module.startswith(c + ".") for c in CORE)


@cache
def _core_modules() -> frozenset[str]:
    """The modules of ``CORE`` and every module they import (pure too: the structure test checks it); a core
    package's command line (``render/cli.py``) is its edge, as the structure test has it."""
    listed = [m for m in modules() if _listed(m) and not is_cli(m)]
    reached = {n for m in listed for n in closure(m) if n in modules() and n != "slurm_pool"}
    return frozenset(listed) | frozenset(reached)


def is_core(module: str) -> bool:
    return module in _core_modules()


def _mixed(comp: str) -> bool:
    """Whether a subpackage holds core modules and others (its ``__init__`` aside)."""
    kinds = {is_core(m) for m in modules() if component(m) == comp and modules()[m].name != "__init__.py"}
    return kinds == {True, False}


def _in_core(module: str) -> bool:
    """A core module, or the face (``__init__``) of a mixed package that imports nothing else of it."""
    if is_core(module):
        return True
    if modules()[module].name != "__init__.py" or not _mixed(component(module)):
        return False
    return all(is_core(n) for n in imports_of(module) if n.startswith(module + ".") and n in modules())


def box_of(module: str) -> str:
    """The picture's box for a module: its component, split into core and the rest when mixed."""
    comp = component(module)
    if not _mixed(comp):
        return comp
    return f"{comp} (core)" if _in_core(module) else comp


def role(box: str) -> str:
    if box in ENTRY or box.split(" ")[0].endswith("cli"):
        return "entry"
    return "core" if all(_in_core(m) for m in modules() if box_of(m) == box) else "edge"


def label(box: str) -> str:
    """``pkg/`` or ``module.py``; a split package also names the modules in its box."""
    members = sorted(m for m in modules() if box_of(m) == box)
    comp = box.split(" ")[0]
    is_pkg = any(m.count(".") > 1 for m in members) or (ROOT / "slurm_pool" / comp).is_dir()
    name = f"{comp}/" if is_pkg else f"{comp}.py"
    if all(box_of(m) == box for m in modules() if component(m) == comp):
        return name
    leaves = [m.rsplit(".", 1)[-1] for m in members if m.count(".") > 1]
    return f"{name}{' (core)' if box.endswith('(core)') else ''}\n" + textwrap.fill(", ".join(leaves), 30)


def graph() -> dict[str, set[str]]:
    """Box -> the boxes it imports."""
    out: dict[str, set[str]] = {}
    for m in modules():
        a = box_of(m)
        if a in SKIP:
            continue
        out.setdefault(a, set())
        for name in imports_of(m):
            if name in modules() and box_of(name) not in SKIP:
                b = box_of(name)
                if b != a:
                    out[a].add(b)
    return out


def reach(g: dict[str, set[str]], start: str) -> set[str]:
    seen: set[str] = set()
    todo = list(g[start])
    while todo:
        n = todo.pop()
        if n not in seen:
            seen.add(n)
            todo.extend(g[n])
    return seen


def reduced(g: dict[str, set[str]]) -> dict[str, set[str]]:
    """The transitive reduction of a DAG: drop A -> B when A reaches B another way."""
    return {a: {b for b in bs if not any(b in reach(g, c) for c in bs - {b})} for a, bs in g.items()}


def floors(g: dict[str, set[str]]) -> dict[str, int]:
    """Longest path down to a box that imports nothing (0); raises on a cycle."""
    out: dict[str, int] = {}

    def visit(n: str, path: tuple[str, ...]) -> int:
        if n in path:
            raise SystemExit("import cycle: " + " -> ".join((*path, n)))
        if n not in out:
            out[n] = 1 + max((visit(d, (*path, n)) for d in g[n]), default=-1)
        return out[n]

    for n in g:
        visit(n, ())
    return out


def layout(g: dict[str, set[str]], floor: dict[str, int]) -> dict[str, tuple[float, float]]:
    """Floors bottom-up; on each floor the core boxes left of the middle, the rest right of it."""
    pos: dict[str, tuple[float, float]] = {}
    for f in range(max(floor.values()) + 1):
        row = [n for n in g if floor[n] == f]

        def where(n: str) -> float:
            xs = [pos[d][0] for d in g[n] if d in pos]
            return sum(xs) / len(xs) if xs else 0.0

        left = sorted((n for n in row if role(n) == "core"), key=lambda n: (-where(n), n))
        right = sorted((n for n in row if role(n) != "core"), key=lambda n: (where(n), n))
        for i, n in enumerate(left):
            pos[n] = (-GAP - i * STEP, f * RISE)
        for i, n in enumerate(right):
            pos[n] = (GAP + i * STEP, f * RISE)
    return pos


def arrow(ax: Any, a: tuple[float, float], b: tuple[float, float], **style: object) -> None:
    from matplotlib.patches import FancyArrowPatch

    ax.add_patch(FancyArrowPatch(a, b, arrowstyle="-|>", mutation_scale=12, shrinkA=2, shrinkB=2, **style))


def box(ax: Any, x: float, y: float, text: str, fc: str, ec: str = "#333333") -> None:
    from matplotlib.colors import to_rgba
    from matplotlib.patches import FancyBboxPatch

    lw = 2.2 if ec == OUTSIDE_EDGE else 1.0
    # See-through, so that an arrow passing behind a box is seen to pass, not to end there.
    face = to_rgba(fc, 0.7)
    ax.add_patch(
        FancyBboxPatch((x - W, y - H), 2 * W, 2 * H, boxstyle="round,pad=0.05", fc=face, ec=ec, lw=lw, zorder=2)
    )
    ax.text(x, y, text, ha="center", va="center", fontsize=8.5, zorder=3)


def draw(out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from slurm_pool.cli import COMMANDS

    full = graph()
    floor = floors(full)
    # The root command loads every subcommand by name (cli.COMMANDS): draw it above them all.
    lazy = {box_of(t.split(":")[0]) for t in COMMANDS.values() if t.split(":")[0] in modules()}
    floor["cli"] = max(floor[b] for b in lazy) + 1
    g = reduced(full)
    # What a subcommand already reaches needs no arrow from the root command either.
    g["cli"] = {b for b in g["cli"] if not any(b == t or b in reach(full, t) for t in lazy)}
    pos = layout(full, floor)
    pos["cli"] = (0.0, pos["cli"][1])
    fig, ax = plt.subplots(figsize=(16, 13))
    ax.set_axis_off()
    for a, bs in g.items():
        for b in bs:
            (x1, y1), (x2, y2) = pos[a], pos[b]
            arrow(ax, (x1, y1 - H), (x2, y2 + H), color="#555555", lw=0.9, zorder=1)
    cx, cy = pos["cli"]
    for b in sorted(lazy):
        x, y = pos[b]
        arrow(ax, (cx, cy - H), (x, y + H), color="#999999", lw=0.8, ls="--", zorder=1)
    xs = [x for x, _ in pos.values()]
    for n, (x, y) in pos.items():
        if n in OUTSIDE:
            box(ax, x, y, f"{label(n)}\n-> {OUTSIDE[n]}", COLOURS[role(n)], OUTSIDE_EDGE)
        else:
            box(ax, x, y, label(n), COLOURS[role(n)])
    top = max(y for _, y in pos.values())
    ax.axvline(0, color="#bbbbbb", lw=0.8, ls="-", zorder=0)
    ax.text(-GAP, top + 0.9, "pure core: data in, data or text out", ha="center", fontsize=10, weight="bold")
    ax.text(GAP + STEP, top + 0.9, "adapters, and the code that uses them", ha="center", fontsize=10, weight="bold")
    ax.set_title(
        "slurm_pool, who imports whom: A -> B means A imports B (an arrow a longer path implies is left out).\n"
        "Dashed: the root command loads its subcommands by name.  Red frame: talks to an outside system.\n"
        "Drawn by docs/architecture_graph.py from the imports tests/unit/test_structure.py checks.",
        fontsize=10,
    )
    ax.set_xlim(min(xs) - W - 0.3, max(xs) + W + 0.3)
    ax.set_ylim(-H - 0.3, top + 1.3)
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    print(out)


# -- docs/architecture.md -----------------------------------------------------------------
def _path(module: str) -> str:
    """``slurm_pool/x/y.py`` of a module (a package's ``__init__.py`` as the package's folder)."""
    rel = modules()[module].relative_to(ROOT).as_posix()
    return rel.removesuffix("__init__.py")


@cache
def _tree(module: str) -> ast.Module:
    return ast.parse(modules()[module].read_text())


def purpose(module: str) -> str:
    """The first line of a module's docstring ("" without one)."""
    doc = ast.get_docstring(_tree(module)) or ""
    return " ".join(doc.split("\n\n", 1)[0].split())


def _defines(module: str, kind: type, name: str) -> bool:
    """Whether ``module`` defines ``name`` at its top: a class or function (``kind``), or a variable (ast.Assign)."""
    tree = _tree(module)
    for n in tree.body:
        if kind is ast.Assign and isinstance(n, (ast.Assign, ast.AnnAssign)):
            targets = n.targets if isinstance(n, ast.Assign) else [n.target]
            if any(isinstance(t, ast.Name) and t.id == name for t in targets):
                return True
        elif isinstance(n, kind) and getattr(n, "name", None) == name:
            return True
    return False


def _defining(kind: type, name: str) -> list[str]:
    return sorted(m for m in modules() if _defines(m, kind, name))


def _calls(module: str, name: str) -> bool:
    tree = _tree(module)
    return any(
        isinstance(n, ast.Call)
        and isinstance(n.func, (ast.Name, ast.Attribute))
        and (n.func.id if isinstance(n.func, ast.Name) else n.func.attr) == name
        for n in ast.walk(tree)
    )


def packages_section() -> str:
    """Every package (and top-level module) of slurm_pool: purpose, imports, pure core or not."""
    graph = component_graph()
    rows = []
    for comp in sorted(c for c in graph if c not in SKIP):
        name = f"slurm_pool.{comp}"
        members = [m for m in modules() if component(m) == comp]
        core = sum(is_core(m) for m in members)
        kind = "core" if core == len(members) else ("part core" if core else "")
        what = purpose(name) if name in modules() else ""
        uses = ", ".join(f"`{d}`" for d in sorted(graph[comp] - SKIP)) or "-"
        shown = f"`{comp}/`" if modules()[name].name == "__init__.py" else f"`{comp}.py`"
        rows.append(f"| {shown} | {what.replace('|', '/')} | {kind} | {uses} |")
    return "\n".join(
        [
            "## Packages",
            "",
            "Each package of `slurm_pool/` (and each module at its top) with the first line of its",
            "docstring, whether it is pure core (`tests/support/imports.py`'s `CORE` and what that imports) and the packages it",
            "imports (lazy imports included). Generated from the code; the test fails when this is stale.",
            "",
            "| package | purpose | core | imports |",
            "|---|---|---|---|",
            *rows,
        ]
    )


def where_section() -> str:
    """Where a new thing goes, from what the modules define now."""
    slurm = _defining(ast.ClassDef, "SlurmClient")
    versions = _defining(ast.ClassDef, "SlurmVersion")
    clis = sorted(m for m in modules() if m.endswith(".cli") and m.count(".") == 2)
    root = [m for m in _defining(ast.Assign, "COMMANDS") if m.rsplit(".", 1)[-1] == "cli"]
    routers = sorted(m for m in modules() if m.startswith("slurm_pool.web.") and _calls(m, "APIRouter"))
    app = routers or _defining(ast.FunctionDef, "create_app")
    spec = _defining(ast.ClassDef, "PoolSpec")
    rules = [m for m in modules() if m.startswith("slurm_pool.spec.") and _defines(m, ast.FunctionDef, "check")]

    def files(ms: list[str]) -> str:
        return ", ".join(f"`{_path(m)}`" for m in ms) or "(none yet)"

    return "\n".join(
        [
            "## Where do I put ...",
            "",
            f"* **a new Slurm call**: a typed method of `SlurmClient` in {files(slurm)}, the only code that",
            "  knows Slurm's commands, flags and output; what differs between releases is data in",
            f"  {files(versions)}. Everything else asks `SlurmClient` in the pool's words.",
            f"* **a new CLI command**: the `cli.py` of the package it drives ({files(clis)}), registered",
            f"  by name in `COMMANDS` of {files(root)} (subcommands are imported on first use).",
            f"* **a new page or API resource**: the console's routes, in {files(app)}; what a page",
            "  shows is built by pure functions (`web/views.py`; what the submit policy makes of a request, `web/submitting.py`), and its request and response models",
            "  live in `web/models.py`.",
            "* **a new spec section**: a module of its own in `slurm_pool/spec/` (a `Strict` model, as",
            f"  the sections there are), a field of `PoolSpec` in {files(spec)}, and its cross-field",
            f"  checks in {files(rules)}.",
        ]
    )


def markdown() -> str:
    """docs/architecture.md as the code makes it now."""
    head = f"<!-- Written by `{COMMAND}` from docs/architecture.template.md and the code; do not edit. -->\n\n"
    text = TEMPLATE.read_text()
    return head + text.replace("{{packages}}", packages_section()).replace("{{where}}", where_section())


if __name__ == "__main__":
    args = sys.argv[1:]
    if args[:1] == ["--png"]:
        draw(Path(args[1]) if len(args) > 1 else ROOT / "docs" / "architecture.png")
    else:
        DOC.write_text(markdown())
        print(DOC)
