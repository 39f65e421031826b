"""The pool's health check runs the site's own HealthCheckProgram after its GPU checks (a shared cluster).

Slurm runs one HealthCheckProgram, so the pool's chains the site's (LBNL NHC,
say): node.conf ``site_health_check``, from the spec's ``coexist.health_check``.
It runs as root, so only a root-owned program no one else can write, reached
through no link, is run.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_pool import nodeconf
from slurm_pool.spec import load_spec_text
from tests.unit.test_node_hooks import Node

ROOT = Path(__file__).resolve().parents[2]


def _program(d: Path, body: str, mode: int = 0o755) -> Path:
    d.mkdir(mode=0o755, exist_ok=True)
    p = d / "nhc"
    p.write_text("#!/bin/sh\n" + body + "\n")
    p.chmod(mode)
    return p


# name, program body, mode, GPU snapshot, expected health check status, site program ran
CASES = [
    ("healthy site program", "touch {mark}; exit 0", 0o755, "h100x8_healthy.json", 0, True),
    ("site program fails", "touch {mark}; exit 3", 0o755, "h100x8_healthy.json", 1, True),
    ("pool check fails, site runs too", "touch {mark}; exit 0", 0o755, "xid_critical.json", 1, True),
    ("group-writable program refused", "touch {mark}; exit 0", 0o775, "h100x8_healthy.json", 1, False),
    ("not executable refused", "touch {mark}; exit 0", 0o644, "h100x8_healthy.json", 1, False),
]


@pytest.mark.parametrize("name,body,mode,snapshot,rc,ran", CASES, ids=[c[0] for c in CASES])
def test_site_program_is_chained(tmp_path: Path, name: str, body: str, mode: int, snapshot: str, rc: int, ran: bool):
    mark = tmp_path / "ran"
    prog = _program(tmp_path / "site", body.format(mark=mark), mode)
    n = Node(tmp_path, snapshot, site_health_check=str(prog))
    n.slurm_says(flags=("IDLE",), reason="")
    assert n.hooks().healthcheck() == rc
    assert mark.exists() is ran


def test_a_link_on_the_way_is_refused(tmp_path: Path) -> None:
    mark = tmp_path / "ran"
    prog = _program(tmp_path / "site", f"touch {mark}")
    (tmp_path / "via").symlink_to(tmp_path / "site")
    n = Node(tmp_path, "h100x8_healthy.json", site_health_check=str(tmp_path / "via" / "nhc"))
    n.slurm_says(flags=("IDLE",), reason="")
    assert n.hooks().healthcheck() == 1 and not mark.exists()
    assert prog.exists()


def test_a_directory_others_may_write_is_refused(tmp_path: Path) -> None:
    mark = tmp_path / "ran"
    prog = _program(tmp_path / "site", f"touch {mark}")
    (tmp_path / "site").chmod(0o777)
    n = Node(tmp_path, "h100x8_healthy.json", site_health_check=str(prog))
    n.slurm_says(flags=("IDLE",), reason="")
    assert n.hooks().healthcheck() == 1 and not mark.exists()


def test_no_site_program_changes_nothing(tmp_path: Path) -> None:
    n = Node(tmp_path, "h100x8_healthy.json")
    n.slurm_says(flags=("IDLE",), reason="")
    assert n.hooks().healthcheck() == 0


def test_node_conf_carries_the_spec_setting() -> None:
    text = (ROOT / "examples" / "pool-coexist.yaml").read_text()
    with_nhc = text.replace("coexist:\n", "coexist:\n  health_check: /usr/sbin/nhc\n")
    conf = nodeconf.parse(nodeconf.render(load_spec_text(with_nhc)))
    assert conf["site_health_check"] == "/usr/sbin/nhc"
    assert "site_health_check" not in nodeconf.parse(nodeconf.render(load_spec_text(text)))
