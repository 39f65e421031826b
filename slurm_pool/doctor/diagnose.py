"""``slurm-pool doctor``: a running cluster against what the pool spec renders.

:func:`gather` asks Slurm (through a Runner) what is installed and running;
:func:`diagnose` is pure and turns that into findings, each with its fix:

* version    -- the commands, slurmctld, every slurmd and the rendered configs
                (``manifest.json`` beside slurm.conf) agree on one release;
* spank      -- ``sbatch --help`` loads the SPANK plugin and it was built for
                this Slurm (a plugin built for another release is refused with
                "Incompatible Slurm plugin ... version (X)" and ``--checkpoint``
                is gone);
* job_submit -- job_submit/lua is loaded when the spec has a policy;
* gres       -- every node's GRES types and counts as the spec renders them
                for this release (MIG type names changed in 23.02.6), and no
                node refused at registration;
* accounting -- QOS, accounts and users as ``apply accounting`` would make them,
                and no tier or project named like a site's QOS or account
                the spec does not adopt (one finding per collision);
* hooks      -- Prolog, Epilog and HealthCheckProgram are slurm-pool's;
* plugins    -- PluginDir holds ``job_submit_lua.so`` when the spec has a
                policy and ``gpu_nvml.so`` when gres.conf says
                ``AutoDetect=nvml`` (SchedMD's ``slurm.spec`` builds neither
                unless asked: ``%bcond_with lua``, ``%bcond_with nvml``).
                When Slurm cannot be asked (slurmctld stops at start on
                ``JobSubmitPlugins=lua`` without the plugin) this check alone
                runs, on the PluginDir of slurm.conf or beside ``scontrol``;
* settings   -- every cluster-wide setting the spec needs
                (``render.required.cluster_settings``) is in force, as
                ``scontrol show config`` shows it; each missing one with the
                line to put in the site's slurm.conf;
* site_script, site_partitions -- (a spec with ``coexist`` only) the site's
                job_submit script loads, and the site's partitions that hold
                pool nodes deny the pool's QOS (:mod:`slurm_pool.doctor.coexist`);
* node_attrs -- (a spec with ``coexist`` only) every pool node's attributes
                as slurmctld reports them are the rendered ones
                (:mod:`slurm_pool.doctor.nodes`);
* includes   -- slurm.conf, gres.conf and plugstack.conf with their Includes
                followed as Slurm follows them: none missing, none in a cycle,
                and a pool in a site's cluster reaches its fragments
                (:mod:`slurm_pool.doctor.installed`);
* guarantees -- (a spec with ``guarantees`` only) the floating guarantees fit
                ``overcommit`` x the GPUs the partition's usable nodes have
                now, and each guarantee's QOS is in Slurm with its GrpTRES
                (:mod:`slurm_pool.guarantees.check`).
"""

from __future__ import annotations

import json
import os
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from slurm_pool.adapters.gres import gpu_counts
from slurm_pool.adapters.records import NodeRecord
from slurm_pool.adapters.runner import CommandError, Result, Runner
from slurm_pool.adapters.slurm import SlurmClient
from slurm_pool.doctor.coexist import CHECKS as COEXIST_CHECKS
from slurm_pool.doctor.coexist import CoexistFacts
from slurm_pool.doctor.coexist import findings as coexist_findings
from slurm_pool.doctor.coexist import gather as gather_coexist
from slurm_pool.doctor.includes import follow, read_text
from slurm_pool.doctor.installed import IncludeFacts, gather_includes
from slurm_pool.doctor.nodes import CHECKS as NODE_CHECKS
from slurm_pool.doctor.nodes import NodeAttrFacts
from slurm_pool.doctor.nodes import findings as node_findings
from slurm_pool.doctor.nodes import gather as gather_nodes
from slurm_pool.findings import Finding
from slurm_pool.render.required import Setting, cluster_settings, config_values, missing
from slurm_pool.spec.hosts import expand
from slurm_pool.spec.model import PoolSpec
from slurm_pool.versions import SlurmVersion, VersionError

CHECKS = (
    "version",
    "spank",
    "job_submit",
    "gres",
    "accounting",
    "hooks",
    "plugins",
    "settings",
    *COEXIST_CHECKS,
    *NODE_CHECKS,
    "includes",
    "guarantees",
)
_INCOMPATIBLE = re.compile(r"Incompatible Slurm plugin (\S+) version \(([^)]*)\)")


@dataclass
class Facts:
    """What the cluster says about itself."""

    commands: SlurmVersion
    controller: SlurmVersion | None
    config: dict[str, str]
    nodes: list[NodeRecord]
    sbatch_help: Result
    accounting: list[str] = field(default_factory=list)
    deferred: list[str] = field(default_factory=list)
    rendered_for: str | None = None
    include_dir: str | None = None
    #: PluginDir (``:``-separated) and the file names found there (None: not listed).
    plugin_dir: str = ""
    plugins: frozenset[str] | None = None
    #: gres.conf beside slurm.conf asks for ``AutoDetect=nvml`` (None: not read; the spec decides).
    autodetect_nvml: bool | None = None
    #: Cluster-wide settings the spec needs that ``scontrol show config`` does not carry.
    missing_settings: list[Setting] = field(default_factory=list)
    #: GrpTRES of every QOS by name, read when the spec has guarantees (None: not read; that part is left out).
    qos: dict[str, str] | None = None
    #: The spec has floating guarantees: the ``guarantees`` check runs and is reported.
    guarantees: bool = False
    #: (problem, fix) per name the spec shares with a site's object it does not adopt, or that cannot be planned.
    owned: list[tuple[str, str]] = field(default_factory=list)
    #: The site's script and partitions (None: the spec has no ``coexist``; those checks are left out).
    coexist: CoexistFacts | None = None
    #: slurm.conf, gres.conf and plugstack.conf with their Includes followed (empty: none read).
    includes: IncludeFacts = field(default_factory=IncludeFacts)
    #: What slurmctld reports of each node's attributes (None: the spec has no ``coexist``; not checked).
    node_attrs: NodeAttrFacts | None = None


def gather(spec: PoolSpec, runner: Runner) -> Facts:
    """Ask the running cluster; raises CommandError when slurmctld cannot be reached."""
    slurm = SlurmClient(runner)
    commands = slurm.version()
    config = slurm.config()
    try:
        controller: SlurmVersion | None = SlurmVersion.parse(
            config.get("SLURM_VERSION", ""), what="slurmctld", output=True
        )
    except VersionError:
        controller = None
    deferred: list[str] = []
    changes, owned = _accounting_diff(spec, slurm, deferred)
    help_res = slurm.submit_help()
    conf = os.environ.get("SLURM_CONF") or config.get("SLURM_CONF", "")
    rendered_for = None
    if conf:
        try:
            rendered_for = json.loads((Path(conf).parent / "manifest.json").read_text()).get("slurm_version")
        except (OSError, ValueError, AttributeError):
            rendered_for = None
    prefix = SlurmClient.install_prefix()
    include = str(Path(prefix) / "include") if prefix else None
    plugin_dir = config.get("PluginDir", "")
    facts = Facts(
        commands,
        controller,
        config,
        slurm.nodes(),
        help_res,
        changes,
        deferred,
        rendered_for,
        include,
        plugin_dir,
        list_plugins(runner, plugin_dir),
        asks_nvml_beside(conf),
        missing(cluster_settings(spec, controller or commands), config),
        _qos_limits(slurm) if spec.guarantees is not None else None,
        spec.guarantees is not None,
        owned,
        coexist=gather_coexist(spec, runner),
    )
    facts.includes = gather_includes(conf, config)
    facts.node_attrs = gather_nodes(spec, runner)
    return facts


def _accounting_diff(
    spec: PoolSpec, slurm: SlurmClient, deferred: list[str]
) -> tuple[list[str], list[tuple[str, str]]]:
    """``apply accounting --dry-run``'s changes, or the collisions (or the priority misfit) that stop it."""
    from slurm_pool.accounting.apply import cluster_plan, diff
    from slurm_pool.accounting.owned import NameCollision
    from slurm_pool.accounting.priority import PriorityFitError

    try:
        return [c.summary for c in diff(cluster_plan(spec, slurm), slurm, deferred=deferred)], []
    except NameCollision as exc:
        return [], exc.collisions
    except PriorityFitError as exc:
        return [], [
            (
                str(exc),
                "fewer distinct tier priorities, a higher site QOS Priority, or PriorityFlags=NO_NORMAL_QOS "
                "(docs/adoption.md, 'The tiers' QOS priorities')",
            )
        ]


def _qos_limits(slurm: SlurmClient) -> dict[str, str]:
    """GrpTRES of every QOS, by name (``sacctmgr show qos``)."""
    return {r["Name"]: r["GrpTRES"] for r in slurm.sacctmgr_show("qos", ["Name", "GrpTRES"])}


def diagnose(spec: PoolSpec, facts: Facts) -> list[Finding]:
    """Every finding, in :data:`CHECKS` order (empty: all is well)."""
    version = facts.controller or facts.commands
    return [
        *_versions(facts),
        *_spank(facts),
        *_job_submit(spec, facts),
        *_gres(spec, facts, version),
        *_accounting(facts),
        *_hooks(spec, facts),
        *_plugins(spec, facts),
        *_settings(facts),
        *coexist_findings(spec, facts.coexist),
        *node_findings(spec, facts.node_attrs),
        *_includes(spec, facts),
        *_guarantees(spec, facts),
    ]


def _versions(f: Facts) -> list[Finding]:
    out = []
    ctld = f.controller
    if ctld is None:
        out.append(
            Finding(
                "version",
                "scontrol show config does not say which Slurm slurmctld is",
                "check that slurmctld answers (scontrol ping)",
            )
        )
        return out
    if f.commands.series != ctld.series:
        out.append(
            Finding(
                "version",
                f"the commands are Slurm {f.commands}, slurmctld is {ctld}",
                f"put Slurm {ctld}'s bin directory first on PATH",
            )
        )
    for n in f.nodes:
        if n.version and not n.version.startswith(ctld.series):
            out.append(
                Finding(
                    "version",
                    f"slurmd on {n.name} is Slurm {n.version}, slurmctld is {ctld}",
                    f"upgrade slurmd on {n.name} to {ctld.series}",
                )
            )
    if f.rendered_for and not f.rendered_for.startswith(ctld.series):
        out.append(
            Finding(
                "version",
                f"the configs beside slurm.conf were rendered for Slurm {f.rendered_for}, slurmctld is {ctld}",
                f"slurm-pool render SPEC -o DIR --slurm-version {ctld}, install them, scontrol reconfigure",
            )
        )
    return out


def _spank(f: Facts) -> list[Finding]:
    err, out = f.sbatch_help.stderr, f.sbatch_help.stdout
    stale = _INCOMPATIBLE.search(err)
    build = f"make -C spank SLURM_INCLUDE={f.include_dir or 'PREFIX/include'}"
    if stale:
        path, built_for = stale.groups()
        return [
            Finding(
                "spank",
                f"the SPANK plugin {path} was built for Slurm {built_for}, not for "
                f"{f.controller or f.commands}; sbatch refuses it, so --checkpoint does not exist",
                f"rebuild it against this Slurm's headers ({build}) and copy slurm_pool_spank.so to {path}",
            )
        ]
    if "--checkpoint" not in out:
        plugstack = f.config.get("PlugStackConfig") or "plugstack.conf"
        return [
            Finding(
                "spank",
                f"sbatch --help offers no --checkpoint: the SPANK plugin is not loaded ({plugstack})",
                f"install the rendered plugstack.conf as {plugstack} and the plugin it names ({build})",
            )
        ]
    return []


def _job_submit(spec: PoolSpec, f: Facts) -> list[Finding]:
    if spec.policy.job_submit and "lua" not in f.config.get("JobSubmitPlugins", "").split(","):
        return [
            Finding(
                "job_submit",
                f"JobSubmitPlugins is {f.config.get('JobSubmitPlugins') or 'empty'}, "
                "so the pool's job_submit.lua does not run",
                "set JobSubmitPlugins=lua, put the rendered job_submit.lua beside slurm.conf, scontrol reconfigure",
            )
        ]
    return []


def _gres(spec: PoolSpec, f: Facts, version: SlurmVersion) -> list[Finding]:
    from slurm_pool.render.context import gres_string

    by_name = {n.name: n for n in f.nodes}
    out = []
    for group in spec.node_groups:
        want = Counter(gpu_counts(gres_string(group, version)))
        for name in expand(group.hosts):
            node = by_name.get(name)
            if node is None:
                out.append(
                    Finding(
                        "gres",
                        f"node {name} of group {group.name} is not in Slurm",
                        "install the rendered slurm.conf and scontrol reconfigure",
                    )
                )
                continue
            have = Counter(gpu_counts(node.gres))
            if have != want:
                out.append(
                    Finding(
                        "gres",
                        f"{name}: Slurm has {_fmt(have)}, the spec renders {_fmt(want)} for Slurm {version.series}",
                        "render for this release and install gres.conf and slurm.conf, then restart slurmd on the node "
                        "(or, after a deliberate `mig apply`, write the new layout into gpus.mig of the spec)",
                    )
                )
            if "INVALID_REG" in node.state or "gres" in node.reason.lower():
                out.append(
                    Finding(
                        "gres",
                        f"{name} was refused at registration: {node.reason or node.state}",
                        "make gres.conf match the devices the node has (slurmd -C on the node), "
                        "restart its slurmd and scontrol update NodeName=... State=RESUME",
                    )
                )
    return out


def _fmt(counts: Counter[str]) -> str:
    return ",".join(f"gpu:{t}:{n}" for t, n in sorted(counts.items())) or "no GPUs"


def _accounting(f: Facts) -> list[Finding]:
    out = [Finding("accounting", problem, fix) for problem, fix in f.owned]
    if f.accounting:
        shown = "; ".join(f.accounting[:6]) + (f" (+{len(f.accounting) - 6} more)" if len(f.accounting) > 6 else "")
        out.append(
            Finding(
                "accounting",
                f"accounting differs from the spec: {shown}",
                "slurm-pool apply accounting SPEC (--dry-run first to see the diff)",
            )
        )
    if f.deferred:
        out.append(
            Finding(
                "accounting",
                "limits wait for TRES slurmdbd does not know: " + "; ".join(f.deferred[:6]),
                "list them in AccountingStorageTRES (the rendered slurm.conf does), restart slurmctld, "
                "then slurm-pool apply accounting SPEC",
            )
        )
    return out


def _hooks(spec: PoolSpec, f: Facts) -> list[Finding]:
    wanted = [
        ("Prolog", "slurm-pool-prolog", spec.health.prolog),
        ("Epilog", "slurm-pool-epilog", spec.health.epilog),
        ("HealthCheckProgram", "slurm-pool-healthcheck", bool(spec.health.health_check_interval)),
    ]
    out = []
    for key, program, on in wanted:
        value = ",".join(config_values(f.config, key))
        if on and not hook_in_place(spec, key, program, config_values(f.config, key)):
            out.append(
                Finding(
                    "hooks",
                    f"{key} is {value or 'not set'}, not slurm-pool's {program}",
                    f"set {key}= to the rendered {program} on every node, scontrol reconfigure",
                )
            )
    if spec.health.prolog and "Alloc" not in f.config.get("PrologFlags", ""):
        out.append(
            Finding(
                "hooks",
                "PrologFlags lacks Alloc: the prolog would run only at the first job step",
                "set PrologFlags=Alloc, scontrol reconfigure",
            )
        )
    return out


def hook_in_place(spec: PoolSpec, key: str, program: str, values: list[str]) -> bool:
    """``key`` (Prolog, Epilog, HealthCheckProgram) runs ``program``: named, or (a pool in a site's
    cluster) the glob of the spec's ``coexist`` directory the hook is installed in, as docs/adoption.md says."""
    if any(program in v for v in values):
        return True
    if spec.coexist is None:
        return False
    directory = {"Prolog": spec.coexist.prolog_dir, "Epilog": spec.coexist.epilog_dir}.get(key)
    return directory is not None and any(v.strip() == f"{directory}/*" for v in values)


#: What each plugin is built from, and how to get a Slurm that has it.
#: File names: ``pkglib_LTLIBRARIES`` of src/plugins/job_submit/lua/Makefile.am
#: and src/plugins/gpu/nvml/Makefile.am.
RPM_REBUILD = (
    "on EL9 rebuild SchedMD's RPMs with both: dnf install rpm-build lua-devel mariadb-devel munge-devel pam-devel "
    "readline-devel perl-ExtUtils-MakeMaker (lua-devel from CRB; nvml.h and libnvidia-ml from CUDA's "
    "cuda-nvml-devel), then rpmbuild -ta slurm-VERSION.tar.bz2 --with lua --with nvml and install the rebuilt "
    "slurm, slurm-slurmctld, slurm-slurmd and slurm-devel RPMs (docs/el9.md)"
)
PLUGIN_FIXES = {
    "job_submit_lua.so": f"{RPM_REBUILD}; on Debian/Ubuntu apt install slurm-wlm-basic-plugins; "
    "from source, install Lua's headers (liblua5.x-dev / lua-devel) and configure again without --without-lua",
    "gpu_nvml.so": f"{RPM_REBUILD}; from source, ./configure --with-nvml=CUDA_DIR (Debian main's packages "
    "build no gpu/nvml); on every GPU node",
}


def list_plugins(runner: Runner, plugin_dir: str) -> frozenset[str] | None:
    """File names in the directories of ``plugin_dir`` (None when none could be listed)."""
    found: set[str] | None = None
    for d in (x for x in plugin_dir.split(":") if x):
        res = runner.run(["ls", "-1", "--", d], check=False)
        if res.returncode == 0:
            found = (found or set()) | {n for n in res.stdout.splitlines() if re.fullmatch(r"[\w.+-]+", n)}
    return None if found is None else frozenset(found)


def asks_nvml(gres_conf: str) -> bool:
    """Whether gres.conf text has an ``AutoDetect=nvml`` line (comments aside)."""
    return any(
        word.lower() == "autodetect=nvml" for line in gres_conf.splitlines() for word in line.split("#", 1)[0].split()
    )


def asks_nvml_beside(slurm_conf: str) -> bool | None:
    """gres.conf beside ``slurm_conf``, with the files it includes: asks for NVML (None: not read)."""
    if not slurm_conf.startswith("/"):
        return None
    conf_dir = str(Path(slurm_conf).parent)
    gres = follow(str(Path(conf_dir) / "gres.conf"), "slurm", conf_dir, read_text)
    return asks_nvml(gres.text()) if gres.files else None


def _includes(spec: PoolSpec, f: Facts) -> list[Finding]:
    from slurm_pool.doctor.installed import findings

    return findings(spec, f.includes)


def _plugins(spec: PoolSpec, f: Facts) -> list[Finding]:
    return plugin_findings(spec, f.plugin_dir, f.plugins, f.autodetect_nvml)


def plugin_findings(
    spec: PoolSpec, plugin_dir: str, plugins: frozenset[str] | None, nvml: bool | None
) -> list[Finding]:
    """The ``plugins`` check: what the spec needs that ``plugins`` (PluginDir's files) lacks."""
    if plugins is None:
        return []
    if nvml is None:  # gres.conf not read: real sites' MIG groups render AutoDetect=nvml
        nvml = any(g.gpus and g.gpus.mig and any(lay is not None for lay in g.gpus.mig) for g in spec.node_groups)
    out = []
    # The quoted log lines: src/interfaces/job_submit.c (job_submit_g_init), src/slurmctld/controller.c.
    lua = spec.policy.job_submit or (spec.coexist is not None and spec.coexist.job_submit is not None)
    if lua and "job_submit_lua.so" not in plugins:
        out.append(
            Finding(
                "plugins",
                f"PluginDir {plugin_dir} has no job_submit_lua.so: this Slurm was built without Lua, so "
                "JobSubmitPlugins=lua cannot load the pool's job_submit.lua (slurmctld logs \"cannot create "
                'job_submit context for job_submit/lua" and stops: "failed to initialize job_submit plugin")',
                PLUGIN_FIXES["job_submit_lua.so"],
            )
        )
    if nvml and "gpu_nvml.so" not in plugins:
        out.append(
            Finding(
                "plugins",
                f"PluginDir {plugin_dir} has no gpu_nvml.so: this Slurm was built without NVML, so "
                "gres.conf's AutoDetect=nvml finds no GPUs or MIG instances",
                PLUGIN_FIXES["gpu_nvml.so"],
            )
        )
    return out


def _settings(f: Facts) -> list[Finding]:
    return [
        Finding(
            "settings",
            f"{s.key} is {_shown_setting(f.config, s.key)}, not {s.value} as the pool needs: {s.why}",
            f"put {s.line} in slurm.conf"
            + (" (beside the site's own items)" if s.match == "contains" else "")
            + ", then scontrol reconfigure",
        )
        for s in f.missing_settings
    ]


def _guarantees(spec: PoolSpec, f: Facts) -> list[Finding]:
    if spec.guarantees is None:
        return []
    from slurm_pool.guarantees.check import findings

    return findings(spec, f.nodes, f.qos)


def _shown_setting(config: dict[str, str], key: str) -> str:
    return ",".join(v for v in config_values(config, key) if v) or "not set"


def offline_plugin_dir(slurm_conf: str | None, prefix: str | None) -> str:
    """PluginDir without slurmctld: slurm.conf's ``PluginDir=``, else where Slurm's default
    (``<libdir>/slurm``; Debian: ``<libdir>/<triplet>/slurm-wlm``) is under the commands' install ``prefix``."""
    if slurm_conf:
        try:
            for line in Path(slurm_conf).read_text().splitlines():
                m = re.fullmatch(r"\s*PluginDir\s*=\s*(\S+)\s*", line.split("#", 1)[0], re.IGNORECASE)
                if m:
                    return m.group(1)
        except (OSError, UnicodeDecodeError):
            pass
    if not prefix:
        return ""
    root = Path(prefix)
    for cand in [root / "lib64" / "slurm", root / "lib" / "slurm", *sorted(root.glob("lib/*/slurm-wlm"))]:
        if cand.is_dir():
            return str(cand)
    return ""


def report(findings: list[Finding], facts: Facts) -> list[str]:
    """Human-readable lines: one per check, then each finding with its fix."""
    head = f"slurm-pool doctor: Slurm {facts.controller or facts.commands}, {len(facts.nodes)} node(s)"
    shown_all = facts.guarantees or any(x.check == "guarantees" for x in findings)
    shared = (*COEXIST_CHECKS, *NODE_CHECKS)
    shown_coexist = facts.coexist is not None or any(x.check in shared for x in findings)
    checks = tuple(c for c in CHECKS if (shown_all or c != "guarantees") and (shown_coexist or c not in shared))
    return _report_lines(head, findings, checks)


def _report_lines(head: str, findings: list[Finding], checks: tuple[str, ...]) -> list[str]:
    """``head``, one line per check, each finding with its fix, and the count."""
    lines = [head]
    bad = {x.check for x in findings}
    for check in checks:
        lines.append(f"  {'FAIL' if check in bad else 'ok  '}  {check}")
        for x in (x for x in findings if x.check == check):
            lines.append(f"        problem: {x.problem}")
            lines.append(f"        fix:     {x.fix}")
    lines.append(f"{len(findings)} problem(s)" if findings else "no problems found")
    return lines


def run(spec: PoolSpec, runner: Runner) -> tuple[list[Finding], list[str]]:
    """Gather, diagnose and report; CommandError when Slurm cannot be asked and
    its installed plugins show nothing missing either."""
    try:
        facts = gather(spec, runner)
    except CommandError as exc:
        conf = os.environ.get("SLURM_CONF") or "/etc/slurm/slurm.conf"
        plugin_dir = offline_plugin_dir(conf, SlurmClient.install_prefix())
        findings = plugin_findings(spec, plugin_dir, list_plugins(runner, plugin_dir), asks_nvml_beside(conf))
        if not findings:
            raise
        head = f"slurm-pool doctor: Slurm cannot be asked ({str(exc).strip()[:200]}); checked the plugins only"
        return findings, _report_lines(head, findings, ("plugins",))
    findings = diagnose(spec, facts)
    return findings, report(findings, facts)
