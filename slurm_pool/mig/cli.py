"""``slurm-pool mig``: check layouts, plan them from demand, apply a plan.

Bad input exits 2 with a message naming the bad value.  Every option that
reaches a file or a command is checked before anything changes; what the
commands print from data (node names, drain reasons, remote output) is shown
with its control characters escaped and never read as Rich markup.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import click
import yaml

from slurm_pool.clitypes import PositiveSeconds, Progress, StrictInt, slurm_version_option, target_version
from slurm_pool.cronexit import fail, for_cron
from slurm_pool.errors import InputError, PoolError
from slurm_pool.mig.catalogue import canonical_model, known_models
from slurm_pool.mig.cliparts import (
    MigFailed,
    MigInputError,
    check_options,
    controls_over_ssh,
    load_controls,
    print_report,
    progress,
)
from slurm_pool.mig.profiles import GEOMETRIES
from slurm_pool.text import matches, shown
from slurm_pool.textio import read_json, read_text
from slurm_pool.versions import SlurmVersion

#: ``--gpus`` at most: the GPUs of one node (``gpu:0`` to ``gpu:63``), as many as a plan file may name there and
#: the spec's ``gpus.count`` allows (planner.MAX_GPU_INDEX; the planner loads numpy, so it is not imported here);
#: a larger count would make a plan that ``mig apply --plan`` refuses.
MAX_GPUS = 64


def _model(model: str) -> str:
    name = canonical_model(model)
    if name is None or name not in GEOMETRIES:
        raise MigInputError(f"unknown MIG-capable GPU model {model!r} (known: {known_models(GEOMETRIES)})")
    return name


@click.group()
def mig() -> None:
    """Plan and apply MIG layouts (NVIDIA Multi-Instance GPU)."""


@mig.command()
@click.option("--model", required=True, help="GPU model, e.g. A100-40GB.")
@click.argument("layout")
def check(model: str, layout: str) -> None:
    """Exit 0 and print a placement when LAYOUT fits MODEL, else exit 2 and say why.

    LAYOUT is a comma list such as 3g.40gb,2g.20gb,1g.10gb; give every item
    as PROFILE@START (e.g. 3g.40gb@4) to check an explicit placement.
    """
    from slurm_pool.mig.placement import find_placement, layout_problem, placement_problem

    model = _model(model)
    items = [p.strip() for p in layout.split(",") if p.strip()]
    explicit = [i for i in items if "@" in i]
    if explicit and len(explicit) != len(items):
        raise MigInputError("give a start (PROFILE@START) for every item or for none")
    placement: list[tuple[str, int]] = []
    if explicit:
        for item in items:
            prof, _, slot = item.partition("@")
            if not (slot.isascii() and slot.isdigit()):
                raise MigInputError(f"bad start {slot!r} in {item!r} (expected a memory slot number)")
            placement.append((prof, int(slot)))
        problem = placement_problem(model, placement)
        profiles = [p for p, _ in placement]
    else:
        profiles = items
        problem = layout_problem(model, profiles)
        placement = list(find_placement(model, profiles) or ()) if not problem else []
    if problem:
        raise MigInputError(f"{shown(','.join(items)) or '(empty)'} is not a valid {model} layout: {problem}")
    click.echo(f"{model}: {','.join(profiles) or '(empty)'} is valid")
    click.echo(_diagram(model, placement))
    for prof, pos in sorted(placement, key=lambda t: t[1]):
        click.echo(f"  {prof} at memory slot {pos}")


def _diagram(model: str, placement: Any) -> str:
    geo = GEOMETRIES[model]
    cells = ["."] * geo.memory_slots
    for n, (prof, start) in enumerate(placement):
        for s in range(start, start + geo.profiles[prof].memory):
            cells[s] = chr(ord("A") + n)
    return "  slots |" + "|".join(cells) + "|"


def _parse_busy(text: str) -> set[tuple[str, int]]:
    out = set()
    for item in filter(None, (s.strip() for s in text.split(","))):
        node, sep, idx = item.rpartition(":")
        if not sep or not matches("node", node) or not (idx.isascii() and idx.isdigit()):
            raise MigInputError(f"bad --busy entry {item!r} (expected NODE:GPUINDEX)")
        out.add((node, int(idx)))
    return out


def _gpus_from_spec(path: str, model: str | None, busy: set[tuple[str, int]]) -> tuple[str, list[Any]]:
    from slurm_pool.errors import SpecError
    from slurm_pool.mig.planner import Gpu
    from slurm_pool.spec.hosts import expand
    from slurm_pool.spec.load import load_spec

    try:
        spec = load_spec(path)
    except SpecError as exc:
        raise MigInputError(shown(f"{path}: " + "; ".join(str(i) for i in exc.issues))) from None
    except OSError as exc:
        raise MigInputError(f"cannot read spec {path!r}: {exc}") from None
    models = sorted({g.gpus.model for g in spec.node_groups if g.gpus and g.gpus.model in GEOMETRIES})
    if model is not None:
        model = _model(model)
    if model is None:
        if len(models) != 1:
            raise MigInputError(f"pass --model (MIG-capable models in the spec: {', '.join(models) or 'none'})")
        model = models[0]
    gpus = []
    shared = [g.name for g in spec.node_groups if g.gpus and g.gpus.model == model and g.gpus.shards]
    for group in spec.node_groups:
        # A GPU shared by Slurm shards is never repartitioned: MIG and shards do not mix on one GPU.
        if group.gpus is None or group.gpus.model != model or group.gpus.shards:
            continue
        for node in expand(group.hosts):
            for i in range(group.gpus.count):
                cur = group.gpus.mig[i] if group.gpus.mig and i < len(group.gpus.mig) else None
                gpus.append(Gpu(node, i, None if cur is None else tuple(cur), (node, i) in busy))
    if not gpus and shared:
        raise MigInputError(f"the spec's {model} GPUs are shared by shards (node groups {', '.join(shared)}), not MIG")
    if not gpus:
        raise MigInputError(f"the spec has no {model} GPUs (models: {', '.join(models) or 'none'})")
    unknown = busy - {(g.node, g.index) for g in gpus}
    if unknown:
        n, i = sorted(unknown)[0]
        raise MigInputError(f"--busy names {n}:{i}, which is not a {model} GPU in the spec")
    return model, gpus


def _load_plan(plan_path: str) -> Any:
    from slurm_pool.mig.planner import PlanError, plan_from_dict

    try:
        return plan_from_dict(read_json(plan_path))
    except PlanError as exc:
        raise MigInputError(f"{plan_path}: {exc}") from None


@mig.command()
@click.option("--model", help="GPU model (default: the only MIG-capable model in --spec).")
@click.option("--gpus", "count", type=StrictInt(0, MAX_GPUS), help="Plan for N empty, idle GPUs.")
@click.option("--spec", "spec_path", help="Plan for the GPUs of a pool spec (its gpus.mig are the current layouts).")
@click.option("--busy", default="", help="GPUs with running jobs, never changed: NODE:IDX,...")
@click.option("--demand", "demand_text", help="Counts per profile: 1g.10gb=10,3g.40gb=3.")
@click.option("--needs", "needs_path", help="CSV/JSON of jobs' gpu_mem_gb, compute (0..1) and count.")
@click.option("--sacct", "sacct_path", help="File with `sacct --json` output (MIG GRES requests).")
@click.option("--json", "as_json", is_flag=True, help="Print the plan as JSON (input for `mig apply --plan`).")
@click.option("--out", "out_path", help="Also write the JSON plan to this file.")
@slurm_version_option
def plan(
    model: str | None,
    count: int | None,
    spec_path: str | None,
    busy: str,
    demand_text: str | None,
    needs_path: str | None,
    sacct_path: str | None,
    as_json: bool,
    out_path: str | None,
    slurm_version: str | None,
) -> None:
    """Per-GPU layouts covering the demand with the fewest changes."""
    from slurm_pool.mig.planner import gpus_from_count

    if (count is None) == (spec_path is None):
        raise MigInputError("give exactly one of --gpus N and --spec SPEC")
    if not (demand_text or needs_path or sacct_path):
        raise MigInputError("give the demand: --demand, --needs or --sacct")
    busy_set = _parse_busy(busy)
    if spec_path:
        model, gpus = _gpus_from_spec(spec_path, model, busy_set)
    else:
        if model is None:
            raise MigInputError("--model is required with --gpus")
        model = _model(model)
        gpus = gpus_from_count(count or 0)
        names = {(g.node, g.index) for g in gpus}
        for n, i in sorted(busy_set - names):
            raise MigInputError(f"--busy names {n}:{i}, but --gpus GPUs are gpu:0..gpu:{max((count or 0) - 1, 0)}")
        gpus = [type(g)(g.node, g.index, g.current, (g.node, g.index) in busy_set) for g in gpus]
    assert model is not None
    model = _model(model)
    notes: list[str] = []
    with Progress(shown=not as_json) as bars:
        done = bars.step(f"planning the MIG layouts of {len(gpus)} {model} GPUs")
        result, elapsed = _planned(model, gpus, demand_text, needs_path, sacct_path, notes)
        done(1, 1)
    result.notes.extend(notes)
    doc = result.to_dict()
    doc["notes"] = result.notes
    doc["outputs"] = _outputs(result, target_version(slurm_version))
    if out_path:
        _write_whole(out_path, json.dumps(doc, indent=2) + "\n")
    if as_json:
        click.echo(json.dumps(doc, indent=2))
        return
    _print_plan(result, elapsed)


def _planned(
    model: str,
    gpus: list[Any],
    demand_text: str | None,
    needs_path: str | None,
    sacct_path: str | None,
    notes: list[str],
) -> tuple[Any, float]:
    """The plan for the demand of ``--demand``, ``--needs`` and ``--sacct`` together, and the solver's seconds."""
    from slurm_pool.mig import demand as dem
    from slurm_pool.mig.planner import PlanError, parse_demand
    from slurm_pool.mig.planner import plan as make_plan

    try:
        parts = []
        if demand_text:
            parts.append(parse_demand(model, demand_text))
        if needs_path:
            d, too_big = dem.demand_from_needs_text(model, read_text(needs_path))
            parts.append(d)
            if too_big:
                notes.append(f"{too_big} job(s) in {needs_path} need more than a whole {model}; not planned")
        if sacct_path:
            d, other = dem.demand_from_sacct(model, read_text(sacct_path))
            parts.append(d)
            if other:
                notes.append("not MIG requests (ignored): " + ", ".join(f"{t}={n}" for t, n in sorted(other.items())))
        demand = dem.merge(parts)
        t0 = time.perf_counter()
        result = make_plan(model, gpus, demand)
        elapsed = time.perf_counter() - t0
    except (PlanError, json.JSONDecodeError, ValueError) as exc:
        raise MigInputError(str(exc)) from None
    return result, elapsed


def _write_whole(path: str, text: str) -> None:
    """Write ``--out`` whole (a temporary file renamed over it) or not at all."""
    from slurm_pool.outfiles import write_all

    target = Path(path)
    write_all(target.parent, {target.name: text}, option="--out", make_dir=False)


def _outputs(result: Any, version: SlurmVersion) -> dict[str, Any]:
    from slurm_pool.mig.emit import gres_conf_autodetect, mig_parted_config, nvidia_smi_commands, slurm_gres

    by_node: dict[str, dict[int, Any]] = {}
    for g, lay in zip(result.gpus, result.layouts, strict=False):
        by_node.setdefault(g.node, {})[g.index] = lay
    cmds: dict[str, list[str]] = {}
    for i in result.changed():
        g = result.gpus[i]
        for cmd in nvidia_smi_commands(result.model, g.index, result.layouts[i], g.current is not None):
            cmds.setdefault(g.node, []).append(" ".join(cmd))
    return {
        "mig_parted": mig_parted_config(by_node),
        "nvidia_smi": cmds,
        "slurm_gres": {
            n: slurm_gres(result.model, [lays[i] for i in sorted(lays)], version) for n, lays in by_node.items()
        },
        "gres_conf_autodetect": gres_conf_autodetect(),
    }


def _fmt(layout: Any) -> str:
    return "MIG off" if layout is None else (",".join(layout) or "[]")


def _print_plan(result: Any, elapsed: float) -> None:
    s = result.score
    click.echo(
        f"{result.model}: {len(result.gpus)} GPUs, {s.changed} changed, {s.used} in use ({elapsed * 1000:.0f} ms)"
    )
    for g, lay in zip(result.gpus, result.layouts, strict=False):
        tag = "busy" if g.busy else ("CHANGE" if lay != g.current else "keep")
        arrow = f"{_fmt(g.current)} -> {_fmt(lay)}" if lay != g.current else _fmt(lay)
        click.echo(f"  {shown(g.node)}:{g.index}  {tag:6}  {arrow}")
    for p in sorted(result.demand):
        line = f"  demand {p}: {result.demand[p]}, covered {result.covered[p]}"
        if result.unmet[p]:
            line += f", UNMET {result.unmet[p]}"
        click.echo(line)
    if any(result.unmet.values()):
        click.echo("unmet demand: " + ", ".join(f"{p}={n}" for p, n in sorted(result.unmet.items()) if n), err=True)
    for note in result.notes:
        click.echo(f"note: {shown(note)}", err=True)


@mig.command()
@click.option("--plan", "plan_path", required=True, help="Plan file from `mig plan --json`.")
@click.option("--dry-run", is_flag=True, help="Say what would happen; change nothing.")
@click.option(
    "--controls",
    envvar="SLURM_POOL_MIG_CONTROLS",
    help="`ssh` (the nodes over ClusterShell's ssh, Slurm from here), or MODULE:FACTORY returning "
    "(NodeControl, MigBackend) for a plan.",
)
@click.option(
    "--timeout",
    type=PositiveSeconds(),
    default=3600.0,
    show_default=True,
    help="Seconds to wait for a drained node to become idle.",
)
@click.option("--gres-mode", type=click.Choice(["explicit", "autodetect"]), default="explicit", show_default=True)
@click.option(
    "--max-drained", type=StrictInt(1, 1024), default=1, show_default=True, help="Nodes drained for the change at once."
)
@click.option(
    "--max-gpus",
    type=StrictInt(0),
    help="Churn budget: GPUs repartitioned in this run at most (others deferred).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.option(
    "--config-managed",
    is_flag=True,
    help="Config management owns slurm.conf and gres.conf: write neither. Nodes whose files do not carry "
    "the planned lines yet are left untouched and the change is printed as a unified diff per file (exit 3); "
    "nodes whose files carry it are drained, repartitioned, reconfigured and resumed; files carrying "
    "something else are refused, nothing done (exit 2). Exit 0: all done or nothing to do.",
)
@slurm_version_option
@click.option("--ssh-options", default="-o BatchMode=yes", show_default=True, help="ssh: options for ssh.")
@click.option("--nvidia-smi", default="nvidia-smi", show_default=True, help="ssh: nvidia-smi on the nodes.")
@click.option("--dev-dir", default="/dev", show_default=True, help="ssh: the nodes' device directory (gres.conf).")
@click.option("--gres-conf", default="/etc/slurm/gres.conf", show_default=True, help="ssh: gres.conf on the nodes.")
@click.option(
    "--slurm-conf",
    multiple=True,
    default=["/etc/slurm/slurm.conf"],
    show_default=True,
    help="ssh: file(s) holding the NodeName lines, on the controller (repeat for each).",
)
@click.option("--controller", help="ssh: host holding --slurm-conf and running slurmctld (default: this host).")
@click.option(
    "--reconfigure/--restart",
    default=None,
    help="ssh: `scontrol reconfigure`, or restart the daemons (default: reconfigure from Slurm 23.11).",
)
@click.option(
    "--restart-slurmctld", default="systemctl restart slurmctld", show_default=True, help="ssh: on the controller."
)
@click.option("--restart-slurmd", default="systemctl restart slurmd", show_default=True, help="ssh: on the node.")
@for_cron
def apply(
    plan_path: str,
    dry_run: bool,
    controls: str | None,
    timeout: float,
    gres_mode: str,
    max_drained: int,
    max_gpus: int | None,
    as_json: bool,
    config_managed: bool,
    slurm_version: str | None,
    **ssh: Any,
) -> None:
    """Drain the affected nodes, repartition, rewrite GRES, restart slurmd, resume.

    Exit 0: done (or nothing to do); 1: a node failed (left drained, the reason says why);
    2: bad input, or files that cannot be used; 3 (--config-managed only): nodes wait for
    config management to carry the printed change.
    """
    from slurm_pool.mig.apply import apply_plan
    from slurm_pool.mig.emit import nvidia_smi_commands

    check_options(ssh)
    result = _load_plan(plan_path)
    if controls is None:
        if config_managed:
            raise MigInputError("--config-managed needs --controls ssh (or MODULE:FACTORY) to read the site's files")
        if not dry_run:
            raise MigInputError("no node control configured: pass --controls ssh or MODULE:FACTORY (or --dry-run)")
        for i in result.changed():
            g = result.gpus[i]
            click.echo(f"{g.node}: GPU {g.index}: {_fmt(g.current)} -> {_fmt(result.layouts[i])}")
            for cmd in nvidia_smi_commands(result.model, g.index, result.layouts[i], g.current is not None):
                click.echo("  would run: " + " ".join(cmd))
        if not result.changed():
            click.echo("nothing to change")
        return
    version = target_version(slurm_version)
    if controls == "ssh":
        nodes, backend = controls_over_ssh(result.model, version, ssh)
    else:
        nodes, backend = load_controls(controls, result)
    if config_managed:
        _apply_managed(
            result, nodes, backend, dry_run, timeout, gres_mode, version, max_drained, max_gpus, as_json, ssh
        )
    try:
        report = apply_plan(
            result,
            nodes,
            backend,
            dry_run=dry_run,
            timeout=timeout,
            gres_mode=gres_mode,  # type: ignore[arg-type]
            version=version,
            max_drained=max_drained,
            max_gpus=max_gpus,
            on_step=None if as_json else progress(),
            dev_dir=ssh["dev_dir"],
        )
    except InputError as exc:  # a file it must edit, checked before anything changed
        raise MigInputError(shown(exc)) from None
    except PoolError as exc:  # a file it cannot replace, or a command that failed while checking
        raise MigFailed(shown(exc)) from None
    if as_json:
        click.echo(json.dumps(report.to_dict(), indent=2))
    else:
        print_report(report)
    if not report.ok:
        fail(f"mig apply: {report.failure()}")


def _apply_managed(
    result: Any,
    nodes: Any,
    backend: Any,
    dry_run: bool,
    timeout: float,
    gres_mode: str,
    version: SlurmVersion,
    max_drained: int,
    max_gpus: int | None,
    as_json: bool,
    ssh: dict[str, Any],
) -> None:
    """``mig apply --config-managed``: exits with :attr:`ManagedResult.code`."""
    from slurm_pool.mig.managed import apply_managed

    try:
        done = apply_managed(
            result,
            nodes,
            backend,
            gres_mode=gres_mode,
            version=version,
            dev_dir=ssh["dev_dir"],
            dry_run=dry_run,
            timeout=timeout,
            max_drained=max_drained,
            max_gpus=max_gpus,
            on_step=None if as_json else progress(),
        )
    except InputError as exc:
        raise MigInputError(shown(exc)) from None
    except PoolError as exc:  # a file or a node that cannot be read
        raise MigFailed(shown(exc)) from None
    if as_json:
        click.echo(json.dumps(done.to_dict(), indent=2))
    else:
        for line in done.lines():
            click.echo(line, err=done.code == 2)
        if done.report is not None:
            print_report(done.report)
    if done.code:
        fail(f"mig apply: {done.failure()}", done.code)
    sys.exit(0)


@mig.command("emit")
@click.option("--plan", "plan_path", required=True, help="Plan file from `mig plan --json`.")
@click.argument("what", type=click.Choice(["mig-parted", "commands", "gres"]))
@slurm_version_option
def emit_cmd(plan_path: str, what: str, slurm_version: str | None) -> None:
    """Print one output of a plan: mig-parted YAML, nvidia-smi commands or slurm.conf Gres."""
    result = _load_plan(plan_path)
    out = _outputs(result, target_version(slurm_version))
    if what == "mig-parted":
        click.echo(yaml.safe_dump(out["mig_parted"], sort_keys=False), nl=False)
    elif what == "commands":
        for node, cmds in sorted(out["nvidia_smi"].items()):
            click.echo(f"# {shown(node)}")
            for c in cmds:
                click.echo(c)
    else:
        for node, gres in sorted(out["slurm_gres"].items()):
            click.echo(f"NodeName={node} Gres={gres}")


@mig.command("helper")
@click.argument("feature", required=False)
@click.option("--node", envvar="SLURM_POOL_NODE", help="This node's Slurm name (default: the short host name).")
@click.option("--layouts", "layouts_path", help="Layout table (default: slurm-pool-mig-layouts.json by $SLURM_CONF).")
@click.option("--backend", help="MODULE:FACTORY returning a HelperDevice for a node (default: nvidia-smi here).")
def helper_cmd(feature: str | None, node: str | None, layouts_path: str | None, backend: str | None) -> None:
    """The helpers.conf Helper: no FEATURE prints the active MIG layout; FEATURE applies that layout.

    Exit 0 on success; non-zero (the GPUs as they were) when the layout is
    unknown, the GPUs are in use, or applying fails or would overrun ExecTime.
    """
    from slurm_pool.mig.helper import main

    result = main(feature, node, layouts_path, backend)
    for line in result.out:
        click.echo(shown(line))
    for line in result.err:
        click.echo(shown(f"error: {line}" if result.code else line), err=True)
    sys.exit(result.code)
