"""``slurm-pool uninstall``: what slurm-pool created goes, the site's and the adopted objects stay as they are."""

from __future__ import annotations

import copy
import json
import os
import shutil
from pathlib import Path
from typing import Any, Callable

import pytest
import yaml
from click.testing import CliRunner

from slurm_pool.accounting.apply import apply_accounting
from slurm_pool.adapters.runner import RecordingRunner, Result
from slurm_pool.adapters.slurm import SlurmClient
from slurm_pool.errors import InputError
from slurm_pool.render.remove import cut_lines
from slurm_pool.render.render import render_all
from slurm_pool.spec import parse_spec
from slurm_pool.uninstall.files import CRON_FILES, UNIT_FILES, Paths
from slurm_pool.uninstall.run import StillInUse, build, execute
from tests.unit.test_accounting import FakeSacctmgr

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "pool-coexist.yaml"
CLUSTER = "pool"


class Sacctmgr(FakeSacctmgr):
    """The fake with clusters on associations and sacctmgr's deletions: a user goes with their last association,
    an account with its associations."""

    def show(self, argv, args):
        if args[3] == "assoc":
            fields = args[-1].split("=", 1)[1].split(",")
            rows = [{"Cluster": CLUSTER, "Account": a, "User": u, **f} for (a, u), f in self.assoc.items()]
            text = "\n".join("|".join(r.get(f, "") for f in fields) for r in rows)
            return Result(tuple(argv), 0, text + "\n" if text else "")
        return super().show(argv, args)

    def change(self, argv, args):
        if args[0] == "delete" and args[1] == "user":
            where = dict(i.split("=", 1) for i in args[3:])
            user = where["name"]
            if "account" in where:
                assert self.users[user] != where["account"] or sum(u == user for _, u in self.assoc) == 1, (
                    "sacctmgr: You can not remove the default account of a user"
                )
                del self.assoc[(where["account"], user)]
            else:
                for key in [k for k in self.assoc if k[1] == user]:
                    del self.assoc[key]
            if not any(u == user for _, u in self.assoc):
                del self.users[user]
            return Result(tuple(argv), 0, "")
        if args[0] == "delete" and args[1] == "account":
            name = args[3].split("=", 1)[1]
            assert not any(self.users.get(u) == name for a, u in self.assoc if a == name and u), "a default account"
            for key in [k for k in self.assoc if k[0] == name]:
                del self.assoc[key]
        return super().change(argv, args)


def site_objects(fake: Sacctmgr) -> None:
    """The brownfield site's own objects (tests/support/brownfield.py, SITE_ACCOUNTING)."""
    fake.clusters.add(CLUSTER)
    fake.qos["normal"] = {"Description": "normal qos", "Priority": "10", "GraceTime": "00:02:00"}
    fake.qos["site-normal"] = {"Description": "the site's own qos", "Priority": "5"}
    fake.qos["scavenger"] = {"Description": "the site's own scavenger", "Priority": "0", "PreemptMode": "cancel"}
    fake.accounts["physics"] = {"Descr": "physics department", "Org": "science"}
    fake.assoc[("physics", "")] = {"Fairshare": "3", "QOS": "normal,scavenger,site-normal", "ParentName": "root"}
    fake.assoc[("physics", "dave")] = {"QOS": "normal"}
    fake.assoc[("physics", "alice")] = {"QOS": "normal"}
    fake.users.update({"dave": "physics", "alice": "physics"})


def spec_data(tmp: Path) -> dict[str, Any]:
    data = yaml.safe_load(EXAMPLE.read_text())
    data["coexist"]["job_submit"]["script"] = str(tmp / "etc" / "site_job_submit.lua")
    data["coexist"]["prolog_dir"] = str(tmp / "etc" / "prolog.d")
    data["coexist"]["epilog_dir"] = str(tmp / "etc" / "epilog.d")
    return data


SITE_CONF = b"# the site's slurm.conf\nClusterName=pool\r\nPartitionName=batch Nodes=cpu[1-2] Default=YES\n"
SITE_GRES = b"# The site's gres.conf\n"
SITE_PLUGSTACK = b"# The site's SPANK plugins\nrequired /usr/lib/site.so"  # no newline at the end
SITE_JOB_SUBMIT = b"-- the site's job_submit.lua\nreturn slurm.SUCCESS\n"


class World:
    """A site's cluster (fake sacctmgr and squeue, files in ``tmp``) with the pool installed as the docs say."""

    def __init__(self, tmp: Path, edit: Callable[[dict[str, Any]], None] = lambda d: None, site=site_objects):
        self.tmp = tmp
        data = spec_data(tmp)
        edit(data)
        self.spec = parse_spec(data)
        self.fake = Sacctmgr()
        self.fake.register_gres()
        site(self.fake)
        self.jobs: list[dict[str, Any]] = []
        self.runner = RecordingRunner()
        self.runner.respond(["sacctmgr"], self.fake)
        self.runner.respond(["squeue", "--json"], lambda a, i: Result(tuple(a), 0, json.dumps({"jobs": self.jobs})))
        self.runner.on(["systemctl"], "")
        self.slurm = SlurmClient(self.runner)
        self.etc = tmp / "etc"
        self.site_files = self._site()
        self.before_install = self.files()
        self.site_state = self.state()
        self._install()

    def _site(self) -> dict[Path, bytes]:
        etc = self.etc
        files = {
            etc / "slurm.conf": SITE_CONF,
            etc / "gres.conf": SITE_GRES,
            etc / "plugstack.conf": SITE_PLUGSTACK,
            etc / "job_submit.lua": SITE_JOB_SUBMIT,
            etc / "prolog.d" / "10-site": b"#!/bin/sh\ntrue\n",
            etc / "epilog.d" / "10-site": b"#!/bin/sh\ntrue\n",
            self.tmp / "cron.d" / "site-backup": b"0 1 * * * root /usr/local/bin/backup\n",
            self.tmp / "units" / "site.service": b"[Service]\nExecStart=/bin/true\n",
        }
        for path, data in files.items():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
        return files

    def _install(self) -> None:
        """docs/adoption.md, "Installing, step by step"; docs/operations.md's cron entry and units."""
        etc = self.etc
        shutil.move(etc / "job_submit.lua", etc / "site_job_submit.lua")
        rendered = render_all(self.spec)
        for name, text in rendered.items():
            (etc / name).write_text(text)
        with (etc / "slurm.conf").open("ab") as f:
            f.write(f"Include {etc}/slurm-pool.conf\n".encode())
        with (etc / "gres.conf").open("ab") as f:
            for name in sorted(n for n in rendered if n.startswith("gres-")):
                f.write(f"Include {etc}/{name}\n".encode())
        with (etc / "plugstack.conf").open("ab") as f:
            f.write(f"\ninclude {etc}/plugstack-slurm-pool.conf\n".encode())
        for kind in ("prolog", "epilog"):
            (etc / f"{kind}.d" / "50-slurm-pool").write_text(f"#!/bin/sh\n# slurm-pool {kind}\nexit 0\n")
        for name in CRON_FILES:
            shutil.copy(REPO / "docs" / "cron" / name, self.tmp / "cron.d" / name)
        for name in UNIT_FILES:
            shutil.copy(REPO / "docs" / "systemd" / name, self.tmp / "units" / name)
        apply_accounting(self.spec, self.slurm, prune=True, echo=lambda _l: None)

    def paths(self) -> Paths:
        etc = self.etc
        tops = {n: etc / n for n in ("slurm.conf", "gres.conf", "plugstack.conf")}
        return Paths(etc, tops, self.tmp / "cron.d", self.tmp / "units")

    def files(self) -> dict[str, bytes]:
        return {str(p.relative_to(self.tmp)): p.read_bytes() for p in sorted(self.tmp.rglob("*")) if p.is_file()}

    def state(self) -> dict[str, Any]:
        return copy.deepcopy({k: getattr(self.fake, k) for k in ("clusters", "qos", "accounts", "assoc", "users")})

    def uninstall(self, dry_run: bool = False) -> list[str]:
        lines: list[str] = []
        execute(build(self.spec, self.slurm, self.paths()), self.slurm, self.runner, dry_run=dry_run, echo=lines.append)
        return lines

    def changes(self) -> list[tuple[str, ...]]:
        return [c for c in self.runner.commands("sacctmgr") if c[1] == "-i"]


@pytest.fixture
def world(tmp_path: Path) -> World:
    return World(tmp_path)


def test_uninstall_leaves_the_site_as_it_was_before_the_pool(world: World) -> None:
    lines = world.uninstall()
    assert world.state() == world.site_state, "every site object as before, every pool object gone"
    assert world.files() == {
        **world.before_install,
        # the site's own script is back under its name; nothing else of the pool's is left
        "etc/job_submit.lua": SITE_JOB_SUBMIT,
        # only the Include line goes: the line end the admin gave the site's last line stays
        "etc/plugstack.conf": SITE_PLUGSTACK + b"\n",
    }
    assert [c for c in world.runner.calls if c[0] == "systemctl"] == [
        *(("systemctl", "disable", "--now", u) for u in UNIT_FILES),
        ("systemctl", "daemon-reload"),
    ]
    etc = world.etc
    for line in (
        f"removed 'Include {etc}/slurm-pool.conf' (line 4) from {etc}/slurm.conf",
        f"removed 'include {etc}/plugstack-slurm-pool.conf' (line 3) from {etc}/plugstack.conf",
        f"removed {etc}/slurm-pool.conf (rendered, listed in manifest.json)",
        f"removed {etc}/prolog.d/50-slurm-pool (the pool's hook)",
        f"moved the site's {etc}/site_job_submit.lua back to {etc}/job_submit.lua, in place of the pool's",
        f"removed {world.tmp}/cron.d/slurm-pool-rebalance (the pool's cron entry)",
        "stopped and disabled unit slurm-pool-rebalance.timer",
        f"removed {etc}/manifest.json",
        "removed user bob (every association in the pool's accounts: projb)",
        "removed user alice from account proja",
        "removed account proja",
        "removed qos k8s-lend",
    ):
        assert line in lines
    assert any(line.startswith(f"left: {etc}/slurm.conf: the settings you merged") for line in lines)


def test_dry_run_changes_nothing_and_names_every_step(world: World) -> None:
    files, state, n = world.files(), world.state(), len(world.changes())
    lines = world.uninstall(dry_run=True)
    assert (world.files(), world.state(), len(world.changes())) == (files, state, n)
    assert not [c for c in world.runner.calls if c[0] == "systemctl"]
    assert lines[-1].endswith("step(s) (dry run, nothing changed)")
    steps = [line for line in lines if not line.startswith(("left:", "uninstall:"))]
    assert steps and all(line.startswith(("would remove ", "would move ", "would stop and disable ")) for line in steps)
    # the same steps as the run itself, word for word but the verb
    done = [line for line in world.uninstall() if not line.startswith(("left:", "uninstall:"))]
    assert [_object(s) for s in steps] == [_object(d) for d in done]


VERBS = ("would stop and disable ", "stopped and disabled ", "would remove ", "removed ", "would move ", "moved ")


def _object(line: str) -> str:
    """A step's line without its verb."""
    verb = next(v for v in VERBS if line.startswith(v))
    return line[len(verb) :]


def test_a_second_run_has_nothing_to_do(world: World) -> None:
    world.uninstall()
    files, n, calls = world.files(), len(world.changes()), len(world.runner.calls)
    assert world.uninstall() == [line for line in world.uninstall(dry_run=True)], (
        "the same report, dry run or not, when there is nothing to do"
    )
    assert world.uninstall()[-1] == "uninstall: nothing to do"
    assert (world.files(), len(world.changes())) == (files, n)
    assert not [c for c in world.runner.calls[calls:] if c[0] == "systemctl" or c[1:2] == ("-i",)]


def _adopted_physics(data: dict[str, Any]) -> None:
    data["projects"].append({"name": "physics", "users": ["alice", "erin"], "tiers": ["spot"]})
    data["adopt"] = {"accounts": [{"name": "physics", "fields": ["QOS"]}], "qos": []}


def _adopted_qos(data: dict[str, Any]) -> None:
    data["tiers"][2]["name"] = "scavenger"  # spot, as the site's QOS
    for p in data["projects"]:
        p["tiers"] = ["scavenger" if t == "spot" else t for t in p["tiers"]]
    data["partitions"] = [{**p, "tier": "scavenger"} if p["tier"] == "spot" else p for p in data["partitions"]]
    data["tiers"][1]["preempt"] = ["scavenger", "k8s-lend"]
    data["tiers"][0]["preempt"] = ["shared", "scavenger", "k8s-lend"]
    data["policy"]["default_tier"] = "scavenger"
    data["adopt"] = {"qos": [{"name": "scavenger", "fields": ["GraceTime"]}]}


def _site_preempts_spot(fake: Sacctmgr) -> None:
    site_objects(fake)
    fake.qos["spot"] = {"Description": "slurm-pool: made by the pool", "Priority": "2"}
    fake.qos["site-normal"]["Preempt"] = "spot"


def _default_in_pool(fake: Sacctmgr) -> None:
    site_objects(fake)
    fake.accounts["projb"] = {"Descr": "slurm-pool", "Org": "slurm-pool"}
    fake.assoc[("projb", "")] = {"ParentName": "root"}
    fake.assoc[("projb", "bob")] = {}
    fake.assoc[("physics", "bob")] = {"QOS": "normal"}
    fake.users["bob"] = "projb"  # the pool made bob, the site added him to physics later


# (case, spec edit, site objects, what stays after the uninstall besides the site's, a line that says why)
KEPT = [
    (
        "an adopted account keeps every field and the pool's users in it",
        _adopted_physics,
        site_objects,
        {"assoc": [("physics", "erin")], "users": ["erin"], "qos": ["spot"]},
        "left: user alice in adopted account physics: left (slurm-pool cannot tell",
    ),
    (
        "an adopted QOS keeps every field, the one the pool set too",
        _adopted_qos,
        site_objects,
        {},
        "removed qos k8s-lend",
    ),
    (
        "a pool QOS a site QOS names in Preempt",
        lambda d: None,
        _site_preempts_spot,
        {"qos": ["spot"]},
        "left: qos spot: kept, qos site-normal still name it",
    ),
    (
        "a user's default account of the pool's, with the site's associations too",
        lambda d: None,
        _default_in_pool,
        {"accounts": ["projb"], "assoc": [("projb", ""), ("projb", "bob")], "qos": ["guaranteed", "shared", "spot"]},
        "left: user bob in projb: kept, it is the user's default account",
    ),
]


@pytest.mark.parametrize("case,edit,site,stays,why", KEPT, ids=[k[0] for k in KEPT])
def test_what_is_not_the_pools_stays_as_it_is(
    tmp_path: Path, case: str, edit: Callable, site: Callable, stays: dict[str, list], why: str
) -> None:
    w = World(tmp_path, edit, site)
    installed = w.state()
    lines = w.uninstall()
    assert any(line.startswith(why) for line in lines), lines
    after = w.state()
    want = copy.deepcopy(w.site_state)
    for what, keys in stays.items():
        for k in keys:
            want[what][k] = installed[what][k]
    if case.startswith("an adopted"):  # the fields the pool set in the adopted object stay as they are now
        for what in ("qos", "accounts", "assoc"):
            for k in w.site_state[what]:
                want[what][k] = installed[what][k]
    assert after == want
    assert w.uninstall()[-1] == "uninstall: nothing to do"


def test_an_include_line_unlike_the_documented_one_is_left_with_its_fragment(world: World) -> None:
    conf = world.etc / "slurm.conf"
    conf.write_bytes(
        conf.read_bytes().replace(f"Include {world.etc}/slurm-pool.conf".encode(), b"include slurm-pool.conf")
    )
    edited = conf.read_bytes()
    lines = world.uninstall()
    assert f"left: {conf}: line 4 'include slurm-pool.conf' includes the pool's slurm-pool.conf but is not the " in (
        "\n".join(lines)
    )
    assert conf.read_bytes() == edited
    assert (world.etc / "slurm-pool.conf").exists() and (world.etc / "manifest.json").exists()
    assert not (world.etc / "plugstack-slurm-pool.conf").exists(), "the rest goes"
    again = world.uninstall()
    assert again[-1] == "uninstall: nothing to do" and any("include slurm-pool.conf" in line for line in again)


# (case, what is done to a listed file, the line that says it is left)
LISTED = [
    (
        "changed since rendered",
        lambda p: p.write_text(p.read_text() + "# a human's line\n"),
        "changed since it was rendered",
    ),
    ("a link", lambda p: (p.unlink(), p.symlink_to(p.with_name("site-settings.conf"))), "not a regular file: left"),
]


@pytest.mark.parametrize("case,spoil,why", LISTED, ids=[c[0] for c in LISTED])
def test_a_listed_file_that_is_not_as_rendered_is_left(world: World, case: str, spoil: Callable, why: str) -> None:
    target = world.etc / "accounting.json"
    spoil(target)
    lines = world.uninstall()
    assert any(line.startswith(f"left: {target}") and why in line for line in lines), lines
    assert os.path.lexists(target) and (world.etc / "site-settings.conf").exists() is False


# (case, the job, the words of the refusal)
BUSY = [
    ("a running pool job", {"partition": "shared", "qos": "shared", "account": "proja"}, "job 7 (RUNNING) of user"),
    ("a pending pool job", {"partition": "a-owner,shared", "job_state": "PENDING"}, "job 7 (PENDING) of user"),
    ("a pool QOS elsewhere", {"partition": "batch", "qos": "spot"}, "job 7 (RUNNING)"),
    ("a node lent to Kubernetes", {"partition": "k8s-lend", "nodes": "a-gpu1"}, "holds nodes lent to Kubernetes"),
]


@pytest.mark.parametrize("case,job,words", BUSY, ids=[b[0] for b in BUSY])
def test_refused_while_the_pool_has_jobs(world: World, case: str, job: dict[str, Any], words: str) -> None:
    files, n = world.files(), len(world.changes())
    world.jobs = [
        {"job_id": 7, "job_state": "RUNNING", "user_name": "alice", "qos": "normal", "account": "physics", **job},
        {"job_id": 8, "job_state": "RUNNING", "user_name": "dave", "partition": "batch", "qos": "normal"},
        {"job_id": 9, "job_state": "COMPLETED", "user_name": "bob", "partition": "shared", "qos": "shared"},
    ]
    with pytest.raises(StillInUse) as exc:
        world.uninstall()
    assert words in exc.value.lines()[0] and len(exc.value.lines()) == 2, exc.value.lines()
    assert (world.files(), len(world.changes())) == (files, n)
    world.jobs = world.jobs[1:]  # the site's and finished jobs do not hold it up
    assert world.uninstall()[-1].startswith("uninstall: done")


@pytest.mark.parametrize(
    "manifest,field",
    [
        ('{"generator": "x", "files": {}}', '"generator"'),
        ('{"generator": "slurm-pool", "files": []}', '"files"'),
        ('{"generator": "slurm-pool", "files": {"../slurm.conf": "' + "0" * 64 + '"}}', "not a plain file name"),
        ('{"generator": "slurm-pool", "files": {"a.conf": "zz"}}', '"files.a.conf"'),
        ("not json", "not JSON"),
    ],
)
def test_a_bad_manifest_is_refused_naming_the_field(world: World, manifest: str, field: str) -> None:
    (world.etc / "manifest.json").write_text(manifest)
    files, n = world.files(), len(world.changes())
    with pytest.raises(InputError, match=field):
        world.uninstall()
    assert (world.files(), len(world.changes())) == (files, n)


def test_the_command_exits_2_without_a_traceback(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    from slurm_pool.cli import cli

    world.runner.on(["scontrol", "show", "config"], f"SLURM_CONF = {world.etc}/slurm.conf\n")
    monkeypatch.setattr("slurm_pool.adapters.runner.SubprocessRunner", lambda: world.runner)
    spec = world.tmp / "pool.yaml"
    spec.write_text(yaml.safe_dump(spec_data(world.tmp)))
    args = ["uninstall", "--spec", str(spec), "--cron-dir", str(world.tmp / "cron.d"), "--unit-dir", str(world.tmp)]
    world.jobs = [{"job_id": 7, "job_state": "RUNNING", "user_name": "bob", "partition": "shared"}]
    res = CliRunner().invoke(cli, args)
    assert res.exit_code == 2 and "Traceback" not in res.output
    assert res.stderr.startswith("error: job 7 (RUNNING) of user bob: partition shared")
    world.jobs = []
    res = CliRunner().invoke(cli, [*args, "--dry-run"])
    assert res.exit_code == 0 and f"would remove {world.etc}/slurm-pool.conf" in res.stdout, res.output


@pytest.mark.parametrize(
    "text,removed,left",
    [
        (b"A=1\nInclude /e/p.conf\nB=2\n", [(2, "Include /e/p.conf")], []),
        (b"A=1\r\nInclude /e/p.conf\r\nB=2", [(2, "Include /e/p.conf")], []),
        (b"Include /e/p.conf", [(1, "Include /e/p.conf")], []),
        (b"Include /e/p.conf # the pool\n", [], [(1, "Include /e/p.conf # the pool", "p.conf")]),
        (b"  include p.conf\n", [], [(1, "  include p.conf", "p.conf")]),
        (b"#Include /e/p.conf\nInclude /e/other.conf\n", [], []),
        (b"Include /e/p.conf\nInclude /e/p.conf\n", [(1, "Include /e/p.conf"), (2, "Include /e/p.conf")], []),
    ],
)
def test_cut_lines_keeps_every_other_byte(text: bytes, removed: list, left: list) -> None:
    cut = cut_lines(text, {"p.conf": "Include /e/p.conf"})
    assert (cut.removed, cut.left) == (removed, left)
    kept = [line for no, line in enumerate(text.splitlines(keepends=True), 1) if no not in {n for n, _ in removed}]
    assert cut.text == b"".join(kept)


def test_the_documented_cron_entries_and_units_are_the_ones_uninstall_knows() -> None:
    assert sorted(CRON_FILES) == sorted(p.name for p in (REPO / "docs" / "cron").iterdir())
    assert sorted(UNIT_FILES) == sorted(p.name for p in (REPO / "docs" / "systemd").iterdir())


def test_a_site_job_under_an_adopted_account_does_not_hold_it_up(tmp_path: Path) -> None:
    w = World(tmp_path, _adopted_physics)
    w.jobs = [{"job_id": 5, "job_state": "RUNNING", "user_name": "alice", "partition": "batch", "account": "physics"}]
    assert w.uninstall()[-1].startswith("uninstall: done")
    w2 = World(tmp_path / "again", _adopted_physics)
    w2.jobs = [{**w.jobs[0], "partition": "spot"}]  # the same account in a pool partition: the pool's job
    with pytest.raises(StillInUse, match="job 5 "):
        w2.uninstall()


def test_a_pool_that_owns_its_cluster_is_refused_naming_coexist(world: World) -> None:
    data = yaml.safe_load((REPO / "examples" / "pool.yaml").read_text())
    files, n = world.files(), len(world.changes())
    with pytest.raises(InputError, match="^coexist: the spec has no coexist section"):
        build(parse_spec(data), world.slurm, world.paths())
    assert (world.files(), len(world.changes())) == (files, n)
