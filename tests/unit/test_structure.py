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

from tests.support.imports import CORE, PKG, closure, component_graph, cycles, imports_of, is_cli, modules

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
}


def test_the_top_level_allow_list_is_short_and_says_why() -> None:
    assert len(TOP_LEVEL) <= 13
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
