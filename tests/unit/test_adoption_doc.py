"""docs/adoption.md: every command it gives runs, and its table of global settings is complete.

The commands that need no Slurm daemons run here, in order, on a site laid out
in a temporary directory; the others run on the live brownfield site
(tests/integration/test_brownfield_seen_e2e.py).  A command added to the page
without a runner fails :func:`test_every_command_is_covered`.
"""

from __future__ import annotations

import ast
import glob
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from slurm_pool import nodeconf
from slurm_pool.errors import PoolError
from slurm_pool.render.required import cluster_settings
from slurm_pool.spec import load_spec
from slurm_pool.versions import SlurmVersion, VersionError
from tests.support.doccommands import (
    COVERED,
    DOC,
    ITEM_KEYS,
    REPO,
    cli_shim,
    commands,
    doc_commands,
    shell_env,
    substitute,
    table_rows,
)

E2E = REPO / "tests" / "integration" / "test_brownfield_seen_e2e.py"
REQUIRED = REPO / "slurm_pool" / "render" / "required.py"
RELEASES = ("22.05", "23.02", "23.11", "24.05", "24.11", "25.05", "25.11", "26.05")


def test_every_command_is_covered():
    found = doc_commands()
    assert [c for c in found if c not in COVERED] == [], "a documented command no test runs: add it to COVERED"
    assert [c for c in COVERED if c not in found] == [], "COVERED names a command the page no longer gives"
    assert set(COVERED.values()) <= {"unit", "site", "uninstall"}


@pytest.mark.parametrize(
    "text, want",
    [
        ("```sh\nmv a b\n# a comment\n\ninstall -d x\n```\n", ["mv a b", "install -d x"]),
        ("```yaml\nslurm-pool: x\n```\n", []),
        ("```\nslurm-pool validate x\n```\n", []),  # only sh blocks hold commands
        ("Run `slurm-pool validate pool.yaml` first.", ["slurm-pool validate pool.yaml"]),
        ("Add `Include /etc/slurm/x.conf`, then `touch` it.", []),  # a config line; one word
        ("`sacctmgr show qos` and `sacctmgr show qos` again", ["sacctmgr show qos"]),
    ],
)
def test_commands_are_found(text, want):
    assert commands(text) == want


@pytest.mark.parametrize(
    "command, want",
    [
        ("slurm-pool render pool.yaml -o stage/", "slurm-pool render /s/p.yaml -o /t/stage/"),
        ("mv /etc/slurm/a /etc/slurm/b", "mv /e/a /e/b"),
        ("install /usr/local/bin/x /etc/slurm/prolog.d/y", "install /b/x /e/prolog.d/y"),
        ("cat my-pool.yaml /x/etc/slurm/a", "cat my-pool.yaml /x/etc/slurm/a"),  # only whole paths
    ],
)
def test_substitute(command, want):
    paths = {"/etc/slurm": "/e", "/usr/local/bin": "/b", "stage/": "/t/stage/", "pool.yaml": "/s/p.yaml"}
    assert substitute(command, paths) == want


def _site(tmp_path: Path) -> dict[str, str]:
    """A site before the pool: its job_submit.lua and prolog, the pool's hooks installed, the spec."""
    etc, bindir = tmp_path / "etc", tmp_path / "bin"
    etc.mkdir()
    (etc / "job_submit.lua").write_text("-- the site's\nreturn slurm.SUCCESS\n")
    (etc / "prolog.sh").write_text("#!/bin/sh\nexit 0\n")
    cli_shim(bindir)
    for kind in ("prolog", "epilog"):
        (bindir / f"slurm-pool-{kind}").write_text(nodeconf.render_hook(kind, "/usr/bin/python3"))
    spec = tmp_path / "spec" / "pool.yaml"
    spec.parent.mkdir()
    shutil.copy(REPO / "examples" / "pool-coexist.yaml", spec)
    return {
        "/etc/slurm": str(etc),
        "/usr/local/bin": str(bindir),
        "stage/": f"{tmp_path}/stage/",
        "pool.yaml": str(spec),
    }


def test_the_commands_that_need_no_daemons_run_in_order(tmp_path):
    paths = _site(tmp_path)
    env = shell_env(Path(paths["/usr/local/bin"]))
    for command in (c for c in doc_commands() if COVERED[c] == "unit"):
        line = substitute(command, paths)
        res = subprocess.run(["/bin/sh", "-c", line], cwd=tmp_path, env=env, capture_output=True, text=True)
        assert res.returncode == 0, f"{command!r} ({line}) failed:\n{res.stdout}{res.stderr}"
    etc = Path(paths["/etc/slurm"])
    stage = tmp_path / "stage"
    assert (etc / "site_job_submit.lua").read_text().startswith("-- the site's")
    assert (etc / "job_submit.lua").read_text() == (stage / "job_submit.lua").read_text()
    for name in ("slurm-pool.conf", "plugstack-slurm-pool.conf", "gres-a.conf", "gres-b.conf", "gres-c.conf"):
        assert (etc / name).read_text() == (stage / name).read_text(), name
    assert (etc / "prolog.d" / "10-site").read_text() == "#!/bin/sh\nexit 0\n"
    for kind in ("prolog", "epilog"):
        assert (etc / f"{kind}.d" / "50-slurm-pool").stat().st_mode & 0o777 == 0o755
    assert "for Slurm 24.11" in (stage / "site-settings.conf").read_text()


# -- the table ------------------------------------------------------------------------------------


def _specs():
    for path in sorted(glob.glob(str(REPO / "examples" / "*.yaml"))):
        yield load_spec(path)


def emitted() -> set[tuple[str, str]]:
    """``(setting, item)`` every example spec needs on every release (item only for :data:`ITEM_KEYS`)."""
    out: set[tuple[str, str]] = set()
    for release in RELEASES:
        try:
            version = SlurmVersion.parse(release)
        except VersionError:
            continue
        for spec in _specs():
            try:
                settings = cluster_settings(spec, version)
            except PoolError:
                continue
            for s in settings:
                if s.key in ITEM_KEYS:
                    out |= {(s.key, item.split("=", 1)[0]) for item in s.value.split(",") if item}
                else:
                    out.add((s.key.split("=", 1)[0], ""))  # PartitionName=NAME: one row for all
    return out


def written_keys() -> set[str]:
    """Every setting name required.py can write (``Setting("Key", ...)``), whichever spec would need it."""
    return set(re.findall(r'Setting\(\s*f?"([A-Za-z.]+)', REQUIRED.read_text()))


def test_the_table_lists_exactly_the_settings_the_render_can_write():
    rows = table_rows(DOC.read_text())
    listed = {(key, item) for key, item, _ in rows}
    assert len(listed) == len(rows), "a setting has two rows"
    missing = emitted() - listed
    assert not missing, f"settings without a row in docs/adoption.md: {sorted(missing)}"
    keys = {key for key, _ in listed}
    assert written_keys() <= keys, f"settings without a row: {sorted(written_keys() - keys)}"
    extra = {(k, i) for k, i in listed if (k, i) not in emitted() and k not in written_keys() - ITEM_KEYS}
    assert not extra, f"rows for settings the render never writes: {sorted(extra)}"
    assert all(item for key, item in listed if key in ITEM_KEYS), "a list setting's row must name its item"


def test_each_row_marked_e2e_has_its_live_check():
    marked = {
        key if not item else f"{key} {item}" for key, item, checked in table_rows(DOC.read_text()) if checked == "e2e"
    }
    tree = ast.parse(E2E.read_text())
    checks = next(
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.AnnAssign) and getattr(node.target, "id", "") == "SITE_JOB_EFFECTS"
    )
    assert isinstance(checks, ast.Dict)
    assert {ast.literal_eval(k) for k in checks.keys if k is not None} == marked
    assert {checked for _, _, checked in table_rows(DOC.read_text())} <= {"unit", "e2e"}
