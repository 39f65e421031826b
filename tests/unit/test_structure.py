"""The package's shape: imports between subpackages go one way, the core is pure, and no test code ships.

Walks every module of ``slurm_pool`` with :mod:`ast` (:mod:`tests.support.imports`) -- imports
inside functions included, ``if TYPE_CHECKING:`` blocks left out -- so a cycle hidden in a lazy
import fails here too.
"""

from __future__ import annotations

import ast
import re
from typing import Iterator

import pytest

from tests.support.imports import (
    CORE,
    PKG,
    closure,
    component_graph,
    cycles,
    imports_of,
    is_cli,
    module_graph,
    modules,
    private_imports,
)

EDGE = (
    "slurm_pool.adapters",
    "slurm_pool.bridge",
    "slurm_pool.localcluster",
    "slurm_pool.node",
    "slurm_pool.metrics",
    "slurm_pool.checkpoint",
    "slurm_pool.cli",
    "slurm_pool.doctor",
    "slurm_pool.diff",
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
    assert {"slurm_pool.adapters.runner", "subprocess"} <= closure("slurm_pool.doctor.cli")
    assert "slurm_pool.policy.tables" in closure("slurm_pool.render")


def test_no_import_cycle_between_subpackages() -> None:
    graph = component_graph()
    assert {"spec", "mig", "render", "policy", "adapters"} <= set(graph)
    assert cycles(graph) == [], "subpackages import each other in a cycle"


def test_no_import_cycle_between_modules() -> None:
    # A circle of files (localcluster's cluster and console once) makes an import order matter and a
    # module unreadable alone; lazy imports count (the walk sees them), ``if TYPE_CHECKING:`` ones do not.
    graph = module_graph()
    assert {"slurm_pool.localcluster.cluster", "slurm_pool.localcluster.console"} <= set(graph)
    assert cycles(graph) == [], "modules import each other in a cycle"


@pytest.mark.parametrize(
    "source,found",
    [
        ("from slurm_pool.mig.apply import _same, apply_plan", [(1, "slurm_pool.mig.apply", "_same")]),
        ("from slurm_pool.mig.apply import same_layout as _same", []),
        ("from slurm_pool.mig import apply\napply._targets(p)", [(2, "slurm_pool.mig.apply", "_targets")]),
        ("import slurm_pool.mig.apply as ap\nap._targets(p)", [(2, "slurm_pool.mig.apply", "_targets")]),
        ("from . import apply as a\na._x", [(2, "slurm_pool.mig.apply", "_x")]),
        ("from .apply import _x", [(1, "slurm_pool.mig.apply", "_x")]),
        ("from slurm_pool.mig.apply import __all__", []),
        ("from os import _exit", []),
        ("self._cache.get(k)", []),
    ],
)
def test_the_private_import_finder(source: str, found: list[tuple[int, str, str]]) -> None:
    assert private_imports("slurm_pool.mig.managed", source) == found


@pytest.mark.parametrize("module", sorted(modules()))
def test_no_private_name_imported_across_modules(module: str) -> None:
    # A name with a leading underscore is its module's own: one that another module needs is made public there.
    assert private_imports(module) == []


#: Well-known names, defined once in slurm_pool/wellknown.py; any other module imports them.
WELLKNOWN = {"k8s-lend", "k8s-bridge", "slurmpool", "slurm_pool.remote", "X-CSRF-Token", "build.json"}


def _string_constants(tree: ast.AST) -> Iterator[tuple[int, str]]:
    """String constants that are not docstrings."""
    docs = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            yield node.lineno, node.value


def test_wellknown_names_are_defined_once() -> None:
    defined = {v for _, v in _string_constants(ast.parse(modules()["slurm_pool.wellknown"].read_text()))}
    assert WELLKNOWN <= defined
    bad = [
        f"{path.relative_to(PKG.parent)}:{no}: {value!r}"
        for name, path in modules().items()
        if name != "slurm_pool.wellknown"
        for no, value in _string_constants(ast.parse(path.read_text()))
        if value in WELLKNOWN
    ]
    assert bad == [], "import the name from slurm_pool.wellknown"


def test_wellknown_is_a_leaf() -> None:
    # The node hooks (stdlib only, on their fast path) and the root command import it.
    assert imports_of("slurm_pool.wellknown") <= {"__future__"}


@pytest.mark.parametrize(
    "module", [m for m in sorted(modules()) if any(m == c or m.startswith(c + ".") for c in CORE) and not is_cli(m)]
)
def test_core_module_is_pure(module: str) -> None:
    # A core package's command line (render.cli asks for the installed Slurm) is its edge, and nothing in the core
    # reaches any command line.
    bad = sorted(n for n in closure(module) if any(n == e or n.startswith(e + ".") for e in EDGE) or is_cli(n))
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


#: The ``re`` functions whose first argument is a pattern.
_RE_CALLS = frozenset({"compile", "match", "fullmatch", "search", "sub", "subn", "split", "findall", "finditer"})
#: A ``$`` anchor: at the end, or before ``)`` or ``|``, and not escaped (``\$``) -- in a class (``[$]``) it is a character.
_DOLLAR_ANCHOR = re.compile(r"(?<!\\)\$(?=\)|\||\Z)")


def _patterns(tree: ast.AST) -> Iterator[tuple[int, str]]:
    """String constants used as regular expressions: ``re.X(pattern, ...)``, ``pattern=``, ``*_RE = ...``."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            if (
                isinstance(func, ast.Attribute)
                and func.attr in _RE_CALLS
                and isinstance(func.value, ast.Name)
                and func.value.id == "re"
                and node.args
            ):
                arg = node.args[0]
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                    yield node.lineno, arg.value
            for kw in node.keywords:
                if kw.arg == "pattern" and isinstance(kw.value, ast.Constant) and isinstance(kw.value.value, str):
                    yield node.lineno, kw.value.value
        elif (
            isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)
        ):
            if any(isinstance(t, ast.Name) and t.id.endswith("_RE") for t in node.targets):
                yield node.lineno, node.value.value


@pytest.mark.parametrize(
    "source,found",
    [
        ('X_RE = re.compile(r"^a$")', 1),
        ('re.match(r"(a$|b)", s)', 1),
        ('Field(pattern=r"^x$")', 1),
        ('NAME_RE = r"[a-z]+$"', 1),
        ('re.fullmatch(r"[a-z]+", s)', 0),
        ('re.compile(r"a\\Z")', 0),
        ('re.compile(r"[$&]+")', 0),
        ('re.compile(r"costs \\$")', 0),
    ],
)
def test_the_dollar_finder(source: str, found: int) -> None:
    assert sum(bool(_DOLLAR_ANCHOR.search(p)) for _, p in _patterns(ast.parse(source))) == found


def test_no_pattern_anchors_with_dollar() -> None:
    # Issue 30, class 2: `$` also matches before a trailing newline, so re.match(r"...$") took "n1\n" and the
    # name split the gres.conf line it reached.  Patterns match in full (re.fullmatch) or end with \Z.
    bad = [
        f"{path.relative_to(PKG.parent)}:{no}: {pattern!r}"
        for path in modules().values()
        for no, pattern in _patterns(ast.parse(path.read_text()))
        if _DOLLAR_ANCHOR.search(pattern)
    ]
    assert bad == []


#: The only modules at the top of ``slurm_pool``, each with why it has no package: entry points, and leaf
#: utilities that every layer uses (a package for one of them would sit below all the others anyway).
TOP_LEVEL = {
    "__init__": "the package",
    "__main__": "python -m slurm_pool",
    "cli": "the root command group: its lazy table of subcommands, which live in their packages",
    "client": "the SDK's public import path (slurm_pool.client), a re-export of slurm_pool.client",
    "errors": "the one error hierarchy every layer raises",
    "text": "the one text rule for everything written out",
    "textio": "reading the files users hand to any command",
    "jobid": "the job id type every entry point takes",
    "versions": "Slurm's releases as data, read by adapters, spec and renderers",
    "outfiles": "writing a set of output files all or none, for every command that writes files",
    "clitypes": "option types and --slurm-version, shared by every package's command line",
    "cronexit": "how the commands meant for cron end, shared by every package's command line",
    "findings": "what a doctor check reports, shared by doctor/ and guarantees/ (below both)",
    "wellknown": "names several packages share (k8s-lend, the remote key), a stdlib-only leaf the node hooks import",
}


def test_the_top_level_allow_list_is_short_and_says_why() -> None:
    assert len(TOP_LEVEL) <= 14
    assert all(len(why) > 10 for why in TOP_LEVEL.values())


@pytest.mark.parametrize(
    "names,bad",
    [
        ({"cli", "errors"}, []),
        ({"cli", "mig_cli"}, ["mig_cli"]),
        ({"cli", "doctor", "clitypes"}, ["doctor"]),
    ],
)
def test_the_top_level_finder(names: set[str], bad: list[str]) -> None:
    assert _misplaced(names) == bad


def _misplaced(names: set[str]) -> list[str]:
    """Top-level modules that belong in a package: every ``*_cli`` module, and any module not allowed by name."""
    return sorted(n for n in names if n.endswith("_cli") or n not in TOP_LEVEL)


def test_every_module_has_a_package_home() -> None:
    # Issue 46: a command line lives in its package (mig/cli.py, not mig_cli.py); a concept in one package.
    top = {p.stem for p in PKG.glob("*.py")}
    assert _misplaced(top) == [], "move these into the package of what they drive (and update cli.COMMANDS)"
    assert set(TOP_LEVEL) <= top, "an allowed top-level module no longer exists: drop it from TOP_LEVEL"


def test_every_subcommand_lives_in_a_package() -> None:
    from slurm_pool.cli import COMMANDS, REMOTE_COMMANDS

    for name, target in {**COMMANDS, **REMOTE_COMMANDS}.items():
        module = target.split(":")[0]
        assert module in modules(), f"{name}: {module} does not exist"
        assert module.count(".") >= 2, f"{name}: {module} is not in a package"
