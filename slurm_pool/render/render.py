"""Render every configuration file of a pool.  A pure function of its inputs."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Mapping

import jinja2

from slurm_pool import __version__
from slurm_pool.accounting.plan import build_plan
from slurm_pool.mig.features import LAYOUTS_FILE
from slurm_pool.policy.lua import render_job_submit
from slurm_pool.render.context import Layouts, build_context
from slurm_pool.render.k8s_rbac import bridge_rbac, priority_classes
from slurm_pool.render.notebooks import notebook_context
from slurm_pool.render.required import settings_text
from slurm_pool.render.site import Site
from slurm_pool.render.templates import default_templates_dir, jinja_environment, render_template
from slurm_pool.spec.model import PoolSpec
from slurm_pool.versions import DEFAULT_VERSION, SlurmVersion

#: A sha256 digest as :func:`hashlib.sha256` ``hexdigest`` writes it.
SHA256_HEX = re.compile(r"[0-9a-f]{64}")


def render_all(
    spec: PoolSpec,
    site: Site | None = None,
    version: SlurmVersion = DEFAULT_VERSION,
    templates_dir: Path | None = None,
    node_layouts: Mapping[str, Layouts] | None = None,
    spec_sha256: str | None = None,
) -> dict[str, str]:
    """Every file of the pool's configuration, name -> text, manifest last.

    ``node_layouts`` overrides the spec's MIG layouts per node (see
    :func:`slurm_pool.render.context.build_context`).  ``spec_sha256`` is the
    hash of the spec file's bytes (:func:`slurm_pool.spec.load_spec_hashed`),
    recorded in ``manifest.json``; ``null`` there for a spec not read from a file.
    """
    if spec_sha256 is not None and not SHA256_HEX.fullmatch(spec_sha256):
        raise ValueError(f"spec_sha256 {spec_sha256!r} is not a sha256 in hex")
    site = site or Site()
    tdir = Path(templates_dir) if templates_dir else default_templates_dir()
    env = jinja_environment(tdir)
    ctx = build_context(spec, site, version, node_layouts)
    plugstack = render_template(
        env, "plugstack.conf.j2", {**ctx, "spank_plugin_path": site.spank_plugin, "spank_required": False}
    )
    if spec.coexist is None:
        files: dict[str, str] = {
            "slurm.conf": render_template(env, "slurm.conf.j2", ctx),
            "slurm-pool.conf": render_template(env, "slurm-pool.conf.j2", ctx),
            "gres.conf": render_template(env, "gres.conf.j2", ctx),
            "plugstack.conf": plugstack,
        }
    else:
        files = _shared_cluster_files(env, ctx, spec, version, plugstack)
    if ctx["mig_layout_table"] is not None:
        files["helpers.conf"] = render_template(env, "helpers.conf.j2", ctx)
        files[LAYOUTS_FILE] = json.dumps(ctx["mig_layout_table"], indent=2) + "\n"
    if spec.policy.job_submit:
        files["job_submit.lua"] = render_job_submit(spec, version)
    files["accounting.json"] = json.dumps(build_plan(spec).to_json(), indent=2, sort_keys=False) + "\n"
    if spec.notebooks is not None:
        files["jupyterhub_config.py"] = render_template(env, "jupyterhub_config.py.j2", notebook_context(spec, version))
    rbac = bridge_rbac(spec)
    if rbac is not None:
        files["k8s-bridge-rbac.yaml"] = rbac
    classes = priority_classes(spec)
    if classes is not None:
        files["k8s-priorityclasses.yaml"] = classes
    manifest = {
        "generator": "slurm-pool",
        "generator_version": __version__,
        "spec_sha256": spec_sha256,
        "slurm_version": str(version),
        "cluster": spec.cluster.name,
        "files": {name: hashlib.sha256(text.encode()).hexdigest() for name, text in files.items()},
    }
    files["manifest.json"] = json.dumps(manifest, indent=2) + "\n"
    return files


def _shared_cluster_files(
    env: jinja2.Environment, ctx: dict, spec: PoolSpec, version: SlurmVersion, plugstack: str
) -> dict[str, str]:
    """A pool in a site's cluster (``coexist``): fragments only, and the settings the site's slurm.conf needs.

    No slurm.conf, gres.conf or plugstack.conf: those are the site's, and include
    ``slurm-pool.conf``, ``gres-GROUP.conf`` and ``plugstack-slurm-pool.conf``.
    """
    files = {"slurm-pool.conf": render_template(env, "slurm-pool.conf.j2", ctx)}
    for group in ctx["groups"]:
        if group["gpu_count"]:
            one = {**ctx, "groups": [group], "fragment": True}
            files[f"gres-{group['name']}.conf"] = render_template(env, "gres.conf.j2", one)
    files["plugstack-slurm-pool.conf"] = plugstack
    files["site-settings.conf"] = settings_text(spec, version)
    return files
