"""The data of the jupyterhub_config.py fragment for the spec's notebook tier.

Every value is decided here and handed to the template as a Python literal
(``repr``), so the template only places them.  The fragment sets what the
pool decides: where batchspawner's SlurmSpawner submits servers, what each
holds, how long it may run and when the idle culler ends it.  The site's own
jupyterhub_config.py keeps the rest (authenticator, ``exec_prefix``, TLS).
"""

from __future__ import annotations

from typing import Any

from slurm_pool.errors import Issue, SpecError
from slurm_pool.render.context import unit_type
from slurm_pool.spec.model import PoolSpec
from slurm_pool.spec.notebooks import limit_seconds, notebook_users
from slurm_pool.spec.rules import group_profiles, partition_groups
from slurm_pool.versions import SlurmVersion

#: The idle culler's service name, also its role's.
CULLER = "slurm-pool-idle-culler"
#: Scopes jupyterhub-idle-culler 2.0 needs (its README) to find idle servers and stop them.
CULLER_SCOPES = ["list:users", "read:users:activity", "read:servers", "delete:servers"]
#: The batch script of a server, a batchspawner (Jinja2) template filled from the ``req_*`` settings.  The
#: stock SlurmSpawner script has no --qos line and asks --get-user-env=L, which newer sbatch refuses.
BATCH_SCRIPT = """#!/bin/bash
#SBATCH --output={{homedir}}/jupyterhub_slurmspawner_%j.log
#SBATCH --job-name=spawner-jupyterhub
#SBATCH --chdir={{homedir}}
#SBATCH --export={{keepvars}}
#SBATCH --get-user-env@MODE@
#SBATCH --partition={{partition}}
#SBATCH --qos={{qos}}
#SBATCH --time={{runtime}}
#SBATCH --mem={{memory}}
#SBATCH --cpus-per-task={{nprocs}}
{% if gres %}#SBATCH --gres={{gres}}
{% endif %}{% if account %}#SBATCH --account={{account}}
{% endif %}{% if reservation %}#SBATCH --reservation={{reservation}}
{% endif %}{% if options %}#SBATCH {{options}}
{% endif %}
set -euo pipefail

trap 'echo SIGTERM received' TERM
{{prologue}}
{% if srun %}{{srun}} {% endif %}{{cmd}}
echo "jupyterhub-singleuser ended gracefully"
{{epilogue}}
"""
#: Activity is reported to the hub at most this often, however long the timeout.
MAX_ACTIVITY_INTERVAL = 300


def _hms(seconds: int) -> str:
    """Slurm's ``[days-]HH:MM:SS``."""
    days, rest = divmod(seconds, 86400)
    text = f"{rest // 3600:02d}:{rest % 3600 // 60:02d}:{rest % 60:02d}"
    return f"{days}-{text}" if days else text


def notebook_gres(spec: PoolSpec, version: SlurmVersion) -> str:
    """The ``--gres`` of one server: a MIG slice's GRES type as ``version`` names it, or shards."""
    nb = spec.notebooks
    assert nb is not None
    if nb.gpu is None:
        return ""
    if nb.gpu.shards is not None:
        if not version.has("shard_excludes_gpu"):
            raise SpecError([Issue("notebooks.gpu.shards", f"GPU shards need Slurm 23.11.5 or later, not {version}")])
        return f"shard:{nb.gpu.shards}"
    profile = nb.gpu.mig
    assert profile is not None
    part = next(p for p in spec.partitions if p.name == nb.partition)
    group = next(
        g for g in spec.node_groups if g.name in partition_groups(spec, part.nodes) and profile in group_profiles(g)
    )
    return f"gpu:{unit_type(group, profile, version)}:1"


def notebook_context(spec: PoolSpec, version: SlurmVersion) -> dict[str, Any]:
    """Python literals for ``jupyterhub_config.py.j2`` (the spec must have a notebook tier)."""
    nb = spec.notebooks
    assert nb is not None
    part = next(p for p in spec.partitions if p.name == nb.partition)
    limit = limit_seconds(nb.time_limit)
    assert limit is not None
    interval = min(MAX_ACTIVITY_INTERVAL, max(10, nb.idle_timeout // 4))
    users = notebook_users(spec, part.tier)
    culler = {
        "name": CULLER,
        "command": ["@PYTHON@", "-m", "jupyterhub_idle_culler", f"--timeout={nb.idle_timeout}"]
        + [f"--cull-every={interval}"],
    }
    values: dict[str, Any] = {
        "partition": part.name,
        "qos": part.tier,
        "batch_script": BATCH_SCRIPT.replace("@MODE@", "" if version.has("get_user_env_takes_no_mode") else "=L"),
        "gres": notebook_gres(spec, version),
        "runtime": _hms(limit),
        "nprocs": str(nb.cpus),
        "memory": f"{nb.memory_mb}M",
        "users": set(users),
        "interval": interval,
        "environment": {"JUPYTERHUB_ACTIVITY_INTERVAL": str(interval)},
        "role": {"name": CULLER, "scopes": CULLER_SCOPES, "services": [CULLER]},
    }
    py = {
        k: repr(v) if not isinstance(v, set) else "{" + ", ".join(map(repr, sorted(v))) + "}" for k, v in values.items()
    }
    py["culler"] = repr(culler).replace("'@PYTHON@'", "sys.executable")
    return {
        "cluster": spec.cluster.name,
        "slurm_version": str(version),
        "tier": part.tier,
        "preemptible": nb.preemptible,
        "idle_timeout": nb.idle_timeout,
        "py": py,
    }
