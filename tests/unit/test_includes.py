"""Include lines followed as Slurm follows them (parse_config.c, spank.c), and doctor's ``includes`` check."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_pool.doctor.diagnose import CHECKS, Facts, diagnose
from slurm_pool.doctor.includes import follow, include_targets, logical_lines, read_text
from slurm_pool.doctor.installed import IncludeFacts, findings, gather_includes
from slurm_pool.spec import load_spec

REPO = Path(__file__).resolve().parents[2]
COEXIST = load_spec(REPO / "examples" / "pool-coexist.yaml")
OWNED = load_spec(REPO / "examples" / "pool.yaml")


def reader(files: dict[str, str]):
    return files.get


@pytest.mark.parametrize(
    "text, syntax, want",
    [
        ("Include /a/x.conf\n", "slurm", [(1, "/a/x.conf")]),
        ("INCLUDE x.conf # the pool\n", "slurm", [(1, "x.conf")]),
        ("include\tx.conf\n", "slurm", [(1, "x.conf")]),
        ("Includes=x\n", "slurm", []),  # "include" then no white space: a key, not a directive
        ("  Include x.conf\n", "slurm", []),  # Slurm matches at the line's start only
        ("# Include x.conf\n", "slurm", []),
        ("Include \\\n  x.conf\n", "slurm", [(1, "x.conf")]),  # a continued line
        ("include /p/*.conf\n", "spank", [(1, "/p/*.conf")]),
        ("  include x.conf\n", "spank", [(1, "x.conf")]),  # spank splits words: leading blanks are fine
        ("Include x.conf\n", "spank", []),  # spank's keyword is case-sensitive
        ("optional /x.so include=1\n", "spank", []),
    ],
)
def test_include_targets(text, syntax, want):
    assert include_targets(text, syntax) == want


def test_logical_lines_escaped_hash_and_continuations():
    assert list(logical_lines("A=1\\#2 # c\nB=x\\\ny\n")) == [(1, "A=1\\#2 "), (2, "B=xy")]


@pytest.mark.parametrize(
    "files, cluster, want_files, want_problems",
    [
        # A relative Include is taken from slurm.conf's directory, not the including file's.
        (
            {"/e/gres.conf": "Include sub/a.conf\n", "/e/sub/a.conf": "Include b.conf\n", "/e/b.conf": "Name=gpu\n"},
            None,
            ["/e/gres.conf", "/e/sub/a.conf", "/e/b.conf"],
            [],
        ),
        (
            {"/e/gres.conf": "Include /e/missing.conf\n"},
            None,
            ["/e/gres.conf"],
            ["/e/gres.conf:1: include /e/missing.conf: /e/missing.conf is missing or unreadable"],
        ),
        (
            {"/e/gres.conf": "Include a.conf\n", "/e/a.conf": "\nInclude /e/gres.conf\n"},
            None,
            ["/e/gres.conf", "/e/a.conf"],
            ["/e/a.conf:2: include /e/gres.conf: a cycle (/e/gres.conf -> /e/a.conf -> /e/gres.conf)"],
        ),
        (
            {"/e/gres.conf": "Include /e/./gres.conf\n"},
            None,
            ["/e/gres.conf"],
            ["/e/gres.conf:1: include /e/./gres.conf: a cycle (/e/gres.conf -> /e/gres.conf)"],
        ),
        (
            {"/e/gres.conf": "Include gres-*.conf\n"},
            None,
            ["/e/gres.conf"],
            ["/e/gres.conf:1: include gres-*.conf: Slurm does not expand globs here"],
        ),
        ({"/e/gres.conf": "Include %c.conf\n", "/e/pool.conf": ""}, "Pool", ["/e/gres.conf", "/e/pool.conf"], []),
        (
            {"/e/gres.conf": "Include %c.conf\n"},
            None,
            ["/e/gres.conf"],
            ["/e/gres.conf:1: include %c.conf: %c needs ClusterName"],
        ),
    ],
)
def test_follow_slurm(files, cluster, want_files, want_problems):
    got = follow("/e/gres.conf", "slurm", "/e", reader(files), cluster)
    assert [p for p, _ in got.files] == want_files
    assert len(got.problems) == len(want_problems)
    for problem, want in zip(got.problems, want_problems, strict=True):
        assert problem.line().startswith(want), problem.line()


def test_follow_spank_relative_to_the_including_file_and_globs():
    files = {"/e/plugstack.conf": "include p/*.conf\n", "/e/p/1.conf": "include 2.conf\n", "/e/p/2.conf": ""}
    got = follow(
        "/e/plugstack.conf",
        "spank",
        "/e",
        files.get,
        expand=lambda pat: ["/e/p/1.conf"] if pat == "/e/p/*.conf" else [],
    )
    assert [p for p, _ in got.files] == ["/e/plugstack.conf", "/e/p/1.conf", "/e/p/2.conf"]
    assert got.problems == []
    # A glob that matches nothing loads nothing, silently; a plain missing path is reported (its plugins are gone).
    files = {"/e/plugstack.conf": "include none/*.conf\ninclude /e/gone.conf\n"}
    got = follow("/e/plugstack.conf", "spank", "/e", files.get, expand=lambda pat: [])
    assert [p.line() for p in got.problems] == [
        "/e/plugstack.conf:2: include /e/gone.conf: /e/gone.conf is missing or unreadable: the plugins in it are not loaded"
    ]


def _site(etc: Path, gres: str, plugstack: str = "include plugstack-slurm-pool.conf\n") -> Path:
    etc.mkdir(exist_ok=True)
    (etc / "slurm.conf").write_text(f"ClusterName=pool\nInclude {etc}/slurm-pool.conf\n")
    (etc / "slurm-pool.conf").write_text("")
    (etc / "gres.conf").write_text(gres)
    (etc / "plugstack.conf").write_text(plugstack)
    (etc / "plugstack-slurm-pool.conf").write_text("")
    for g in ("a", "b", "c"):
        (etc / f"gres-{g}.conf").write_text(f"NodeName={g}-gpu1 AutoDetect=nvml\n" if g == "c" else "")
    return etc / "slurm.conf"


@pytest.mark.parametrize(
    "gres, want",
    [
        ("Include gres-a.conf\nInclude gres-b.conf\nInclude gres-c.conf\n", []),
        ("Include gres-a.conf\nInclude gres-bc.conf\n", ["gres-bc.conf", "gres-b.conf", "gres-c.conf"]),
        ("Include gres-a.conf\nInclude gres-b.conf\n", ["gres-c.conf"]),
        ("Include gres-a.conf\nInclude gres-b.conf\nInclude gres-c.conf\nInclude gres-gone.conf\n", ["gres-gone.conf"]),
    ],
)
def test_the_includes_check_on_installed_files(tmp_path, gres, want):
    conf = _site(tmp_path / "etc", gres)
    (tmp_path / "etc" / "gres-bc.conf").unlink(missing_ok=True)
    got = findings(COEXIST, gather_includes(str(conf), {"ClusterName": "pool"}))
    assert len(got) == len(want), got
    for finding, name in zip(got, want, strict=True):
        assert finding.check == "includes" and name in finding.problem, finding


def test_a_site_without_the_pools_plugstack_include_and_an_owned_pool(tmp_path):
    conf = _site(tmp_path / "etc", "Include gres-a.conf\nInclude gres-b.conf\nInclude gres-c.conf\n", "")
    [f] = findings(COEXIST, gather_includes(str(conf), {}))
    assert "plugstack-slurm-pool.conf" in f.problem and f"include {tmp_path}/etc/plugstack-slurm-pool.conf" in f.fix
    # A pool that owns its cluster renders no fragments: only broken Includes count.
    assert findings(OWNED, gather_includes(str(conf), {})) == []


def test_doctor_runs_the_check_and_reads_gres_through_includes(tmp_path):
    from slurm_pool.adapters.runner import Result
    from slurm_pool.doctor import diagnose as doctor
    from slurm_pool.versions import SlurmVersion

    conf = _site(tmp_path / "etc", "Include gres-gone.conf\nInclude gres-c.conf\n")
    assert "includes" in CHECKS
    help_res = Result(("sbatch", "--help"), 0, "--checkpoint")
    facts = Facts(SlurmVersion.parse("22.05"), None, {}, [], help_res, includes=gather_includes(str(conf), {}))
    assert [f.check for f in diagnose(OWNED, facts) if f.check == "includes"] == ["includes"]
    assert doctor.asks_nvml_beside(str(conf)) is True  # AutoDetect=nvml is in an included file
    assert doctor.asks_nvml_beside(str(tmp_path / "nowhere" / "slurm.conf")) is None


def test_nothing_to_follow_where_the_files_are_not():
    assert gather_includes("/nowhere/slurm.conf", {}) == IncludeFacts()
    assert gather_includes("slurm.conf", {}) == IncludeFacts()
    assert read_text("/nowhere") is None


@pytest.mark.parametrize(
    "spec, key, values, ok",
    [
        (OWNED, "Prolog", ["/usr/local/bin/slurm-pool-prolog"], True),
        (OWNED, "Prolog", ["/etc/slurm/prolog.d/*"], False),
        (OWNED, "Prolog", [], False),
        (COEXIST, "Prolog", ["/etc/slurm/prolog.d/*"], True),  # the glob the hook is installed in
        (COEXIST, "Prolog", ["/etc/slurm/other.d/*"], False),
        (COEXIST, "Epilog", ["/etc/slurm/epilog.d/*"], True),
        (COEXIST, "HealthCheckProgram", ["/etc/slurm/prolog.d/*"], False),
        (COEXIST, "Prolog", ["/site/prolog", "/usr/local/bin/slurm-pool-prolog"], True),  # 26.05: Prolog[0], [1]
    ],
)
def test_doctor_finds_the_hooks_in_a_coexist_glob(spec, key, values, ok):
    from slurm_pool.doctor.diagnose import hook_in_place

    program = {"Prolog": "slurm-pool-prolog", "Epilog": "slurm-pool-epilog"}.get(key, "slurm-pool-healthcheck")
    assert hook_in_place(spec, key, program, values) is ok
