"""Accounting diff/apply against the recording fake: idempotence, prune, order."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_pool.accounting.apply import apply_accounting, diff
from slurm_pool.accounting.plan import build_plan
from slurm_pool.adapters.records import RecordError
from slurm_pool.adapters.runner import CommandError, RecordingRunner, Result
from slurm_pool.adapters.slurm import SlurmClient, parsable_rows, split_parsable
from slurm_pool.spec import load_spec

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "pool.yaml"


class FakeSacctmgr:
    """A tiny in-memory sacctmgr: enough to check that apply converges."""

    def __init__(self):
        self.clusters: set[str] = set()
        self.qos: dict[str, dict[str, str]] = {"normal": {"Description": "normal qos"}}
        self.accounts: dict[str, dict[str, str]] = {}
        self.assoc: dict[tuple[str, str], dict[str, str]] = {}
        self.users: dict[str, str] = {}
        # what slurmdbd has before slurmctld registers the cluster's GRES TRES
        self.tres: list[tuple[str, str]] = [("cpu", ""), ("mem", ""), ("energy", ""), ("node", ""), ("billing", "")]

    def register_gres(self) -> None:
        """What slurmctld does at start with AccountingStorageTRES=gres/gpu,..."""
        self.tres.append(("gres", "gpu"))

    def __call__(self, argv, _input):
        args = list(argv[1:])
        if args[:1] == ["-n"]:
            return self.show(argv, args)
        assert args[0] == "-i"
        return self.change(argv, args[1:])

    def show(self, argv, args):
        entity = args[3]
        fields = args[-1].split("=", 1)[1].split(",")
        if entity == "cluster":
            rows = [{"Cluster": c} for c in sorted(self.clusters)]
        elif entity == "qos":
            rows = [{"Name": n, **f} for n, f in self.qos.items()]
        elif entity == "account":
            rows = [{"Account": n, **f} for n, f in self.accounts.items()]
        elif entity == "assoc":
            rows = [{"Account": a, "User": u, **f} for (a, u), f in self.assoc.items()]
        elif entity == "user":
            rows = [{"User": u, "DefaultAccount": d} for u, d in self.users.items()]
        elif entity == "tres":
            rows = [{"Type": t, "Name": n} for t, n in self.tres]
        else:
            raise AssertionError(entity)
        text = "\n".join("|".join(r.get(f, "") for f in fields) for r in rows)
        return Result(tuple(argv), 0, text + "\n" if text else "")

    def change(self, argv, args):
        verb, entity = args[0], args[1]
        kv = lambda items: dict(i.split("=", 1) for i in items if "=" in i)  # noqa: E731
        if verb == "add" and entity == "cluster":
            self.clusters.add(args[2])
        elif verb == "add" and entity == "qos":
            self.qos[args[2]] = {}
        elif verb == "add" and entity == "account":
            f = kv(args[3:])
            self.accounts[args[2]] = {"Descr": f["Description"].lower(), "Org": f["Organization"].lower()}
            self.assoc[(args[2], "")] = {}
        elif verb == "add" and entity == "user":
            f = kv(args[3:])
            self.users.setdefault(args[2], f.get("DefaultAccount", f["Account"]))
            self.assoc[(f["Account"], args[2])] = {}
        elif verb == "modify":
            where = kv(args[args.index("where") + 1 : args.index("set")])
            sets = kv(args[args.index("set") + 1 :])
            if entity == "qos":
                for f in ("GrpTRES", "MaxTRESPU", "MaxTRES"):
                    for kv in (x for x in sets.get(f, "").split(",") if x):
                        assert kv.split("=")[0] in {f"{t}/{n}" if n else t for t, n in self.tres}, (
                            f"sacctmgr: error: Invalid TRES {kv}"
                        )
                self.qos[where["name"]].update(sets)
            elif entity == "account" and "cluster" in where:
                self.assoc[(where["name"], "")].update(sets)
            elif entity == "account":
                self.accounts[where["name"]]["Descr"] = sets["Description"].lower()
            elif entity == "user" and "account" in where:
                self.assoc[(where["account"], where["name"])].update(sets)
            elif entity == "user":
                self.users[where["name"]] = sets["DefaultAccount"]
        elif verb == "delete":
            where = kv(args[3:])
            if entity == "qos":
                del self.qos[where["name"]]
            elif entity == "account":
                del self.accounts[where["name"]]
            elif entity == "user":
                del self.assoc[(where["account"], where["name"])]
        else:
            raise AssertionError(args)
        return Result(tuple(argv), 0, "")


@pytest.fixture
def world():
    fake = FakeSacctmgr()
    fake.register_gres()
    runner = RecordingRunner()
    runner.respond(["sacctmgr"], fake)
    return fake, runner, SlurmClient(runner)


def _changes(runner):
    return [c for c in runner.commands("sacctmgr") if c[1] == "-i"]


def test_apply_reports_each_change_applied(world):
    _fake, runner, slurm = world
    seen: list[tuple[int, int]] = []
    changes = apply_accounting(
        load_spec(EXAMPLE), slurm, echo=lambda _m: None, progress=lambda d, n: seen.append((d, n))
    )
    assert seen == [(i + 1, len(changes)) for i in range(len(changes))] and len(_changes(runner)) == len(changes)
    seen.clear()
    apply_accounting(load_spec(EXAMPLE), slurm, echo=lambda _m: None, progress=lambda d, n: seen.append((d, n)))
    assert seen == []  # nothing to apply: no step


def test_apply_converges_and_second_run_is_a_noop(world):
    fake, runner, slurm = world
    spec = load_spec(EXAMPLE)
    first = apply_accounting(spec, slurm, echo=lambda _m: None)
    assert first, "the first run creates everything"
    assert ("sacctmgr", "-i", "add", "cluster", "pool") in runner.calls
    n = len(_changes(runner))
    lines: list[str] = []
    assert apply_accounting(spec, slurm, echo=lines.append) == []
    assert lines == ["accounting: no changes"]
    assert len(_changes(runner)) == n, "no modification on the second run"


def test_qos_created_before_preempt_lists_reference_them(world):
    _fake, runner, slurm = world
    apply_accounting(load_spec(EXAMPLE), slurm, echo=lambda _m: None)
    changes = _changes(runner)
    adds = max(i for i, c in enumerate(changes) if c[2:4] == ("add", "qos"))
    preempts = [i for i, c in enumerate(changes) if any(a.startswith("Preempt=") for a in c)]
    assert preempts and min(preempts) > adds


def test_dry_run_changes_nothing(world):
    _fake, runner, slurm = world
    lines: list[str] = []
    changes = apply_accounting(load_spec(EXAMPLE), slurm, dry_run=True, echo=lines.append)
    assert changes and not _changes(runner)
    assert "dry run" in lines[-1]


def test_prune_removes_only_tagged_objects(world):
    fake, _runner, slurm = world
    spec = load_spec(EXAMPLE)
    apply_accounting(spec, slurm, echo=lambda _m: None)
    fake.qos["old-tier"] = {"Description": "slurm-pool: retired"}
    fake.qos["site-qos"] = {"Description": "made by a human"}
    fake.accounts["human"] = {"Descr": "hand made", "Org": "physics"}
    plan = build_plan(spec)
    assert not any(c.summary.startswith("-") for c in diff(plan, slurm, prune=False))
    removed = {c.summary for c in diff(plan, slurm, prune=True) if c.summary.startswith("-")}
    assert removed == {"- qos old-tier"}


def test_changed_tier_is_a_modify_of_only_that_field(world):
    _fake, runner, slurm = world
    spec = load_spec(EXAMPLE)
    apply_accounting(spec, slurm, echo=lambda _m: None)
    data = spec.model_dump()
    data["tiers"][1]["grace_time"] = 45
    spec2 = type(spec).model_validate(data)
    changes = diff(build_plan(spec2), slurm)
    assert [c.summary for c in changes] == ["~ qos shared: GraceTime: 20 -> 45"]
    assert changes[0].argv[-1] == "GraceTime=45"


def test_sacctmgr_failure_surfaces(world):
    _fake, runner, slurm = world
    runner.fail(["sacctmgr", "-i", "add", "qos"], stderr="sacctmgr: error: Problem adding")
    with pytest.raises(CommandError, match="Problem adding"):
        apply_accounting(load_spec(EXAMPLE), slurm, echo=lambda _m: None)


def test_limits_on_unregistered_tres_wait_for_slurmctld():
    """The bootstrap: QOS before slurmctld (25.11+ needs them to start), TRES limits after it."""
    fake = FakeSacctmgr()
    runner = RecordingRunner()
    runner.respond(["sacctmgr"], fake)
    slurm, spec = SlurmClient(runner), load_spec(EXAMPLE)
    lines: list[str] = []
    apply_accounting(spec, slurm, echo=lines.append)
    assert {"guaranteed", "shared", "scavenger", "k8s-lend"} <= set(fake.qos)
    assert not fake.qos["shared"].get("MaxTRESPU")
    assert any(line.startswith("! qos shared: MaxTRESPU gres/gpu=4: deferred") for line in lines), lines
    fake.register_gres()
    again = apply_accounting(spec, slurm, echo=lambda _m: None)
    assert [c.summary for c in again] == ["~ qos shared: MaxTRESPU: - -> gres/gpu=4, MaxTRES: - -> gres/gpu=4"]
    assert apply_accounting(spec, slurm, echo=lambda _m: None) == []


def test_a_failure_partway_says_what_went_in_and_the_rerun_finishes(world):
    # Issue 11, defect 8: a failure partway through did not say which changes went in.
    _fake, runner, slurm = world
    runner.fail(["sacctmgr", "-i", "add", "account"], stderr="sacctmgr: error: Problem adding")
    lines: list[str] = []
    with pytest.raises(CommandError, match="Problem adding"):
        apply_accounting(load_spec(EXAMPLE), slurm, echo=lines.append)
    failed = next(i for i, line in enumerate(lines) if " change(s) applied; this one failed: + account" in line)
    assert lines[failed].startswith("accounting: ") and lines[failed + 1].startswith("  not applied: ")
    assert lines[-1].startswith("accounting: run `slurm-pool apply accounting` again")
    runner.respond(["sacctmgr"], _fake)  # the cause is fixed: sacctmgr answers again
    assert apply_accounting(load_spec(EXAMPLE), slurm, echo=lambda _m: None)
    assert apply_accounting(load_spec(EXAMPLE), slurm, echo=lambda _m: None) == []


@pytest.mark.parametrize(
    "line,fields,want",
    [
        ("a|b|c", ["Name", "Description", "Priority"], ["a", "b", "c"]),
        ("a|x|y|c", ["Name", "Description", "Priority"], ["a", "x|y", "c"]),
        ("a|x|y|z|c", ["Name", "Description", "Priority"], ["a", "x|y|z", "c"]),
        ("a|b", ["Name", "Description", "Priority"], ["a", "b"]),
        ("a|x|y", ["Account", "User"], ["a", "x", "y"]),  # no free-text field: left as it is
    ],
)
def test_a_bar_in_a_description_stays_in_its_field(line, fields, want):
    # Issue 11, defect 8: sacctmgr -P splits on "|"; a human's description with one shifted every column.
    assert split_parsable(line, fields) == want


def test_a_bar_a_human_put_in_a_description_does_not_break_the_next_apply(world):
    fake, _runner, slurm = world
    spec = load_spec(EXAMPLE)
    apply_accounting(spec, slurm, echo=lambda _m: None)
    fake.qos["shared"]["Description"] = "slurm-pool: gpu | cpu"  # edited by hand, keeping the ownership tag
    changes = apply_accounting(spec, slurm, echo=lambda _m: None)
    assert [c.summary.split(":")[0] for c in changes] == ["~ qos shared"]
    assert "Description: slurm-pool: gpu | cpu -> " in changes[0].summary
    assert apply_accounting(spec, slurm, echo=lambda _m: None) == []


@pytest.mark.parametrize(
    "text,fields,want",
    [
        ("a|b|c\n", ["Name", "Description", "Priority"], ["a|b|c"]),
        ("a|b|c\nd|e|f\n", ["Name", "Description", "Priority"], ["a|b|c", "d|e|f"]),
        ("\n\na|b|c\n\n", ["Name", "Description", "Priority"], ["a|b|c"]),
        # a line break a human put in a description: the record spans lines
        ("a|one\ntwo|c\nd|e|f\n", ["Name", "Description", "Priority"], ["a|one\ntwo|c", "d|e|f"]),
        ("a|one\n\ntwo|c\n", ["Name", "Description", "Priority"], ["a|one\n\ntwo|c"]),
        ("one\ntwo|acct\n", ["Descr", "Account"], ["one\ntwo|acct"]),
        # A "|" and a break in one description ("x|y\nz") print as two complete
        # rows: sacctmgr -P cannot tell them apart, so the account key comes last
        # and a bogus row names no account slurm-pool owns.
        ("cluster\n", ["Cluster"], ["cluster"]),
        ("", ["Cluster"], []),
    ],
)
def test_a_record_spans_lines_where_a_description_holds_a_line_break(text, fields, want):
    assert parsable_rows(text, fields) == want


@pytest.mark.parametrize(
    "text,fields",
    [
        ("a|b\n", ["Name", "Description", "Priority"]),  # short at the end: not a row of blanks
        ("a|one\ntwo\n", ["Name", "Description", "Priority"]),
        ("acct|one\ntwo\nb|x\n", ["Account", "Org"]),  # last field free: the break cannot be placed
    ],
)
def test_a_record_that_cannot_be_placed_is_refused(text, fields):
    with pytest.raises(RecordError, match="sacctmgr printed"):
        parsable_rows(text, fields)


def test_a_line_break_a_human_put_in_an_account_keeps_its_owner_and_the_next_account(world):
    # The third hardening round: a description or organisation with a line break
    # (sacctmgr prints it raw) shifted the next account's row, so apply tried to
    # add an account that exists and --prune read the wrong Org.
    fake, _runner, slurm = world
    spec = load_spec(EXAMPLE)
    apply_accounting(spec, slurm, echo=lambda _m: None)
    names = sorted(fake.accounts)
    fake.accounts[names[0]]["Descr"] = "first line\nsecond | line"
    fake.accounts["site"] = {"Descr": "the site's\naccount", "Org": "physics\ndept"}  # not ours: left alone
    changes = apply_accounting(spec, slurm, prune=True, echo=lambda _m: None)
    assert [c.summary for c in changes] == [f"~ account {names[0]}: Description"]
    assert fake.accounts["site"] == {"Descr": "the site's\naccount", "Org": "physics\ndept"}
    assert apply_accounting(spec, slurm, prune=True, echo=lambda _m: None) == []
