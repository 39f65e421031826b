"""Render every configuration file of a pool.  A pure function of its inputs."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Mapping

import jinja2

from slurm_pool.accounting.plan import build_plan
from slurm_pool.errors import SpecError
from slurm_pool.render.context import Layouts, build_context
from slurm_pool.render.site import Site
from slurm_pool.spec.model import PoolSpec
from slurm_pool.versions import DEFAULT_VERSION, SlurmVersion


def default_templates_dir() -> Path:
    """``conf_templates/`` of the source tree, else of the installed data files."""
    env = os.environ.get("SLURM_POOL_TEMPLATES")
    if env:
        return Path(env)
    here = Path(__file__).resolve().parent.parent.parent / "conf_templates"
    if here.is_dir():
        return here
    import sys

    return Path(sys.prefix) / "share" / "slurm-pool" / "conf_templates"


def jinja_environment(templates_dir: Path) -> jinja2.Environment:
    """The Jinja2 environment every slurm-pool template renders in."""
    if not templates_dir.is_dir():
        raise SpecError(f"--templates: {templates_dir} is not a directory")
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(templates_dir)),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,
    )


def _template(env: jinja2.Environment, name: str, ctx: dict[str, object]) -> str:
    try:
        return env.get_template(name).render(**ctx)
    except jinja2.TemplateNotFound as exc:
        raise SpecError(f"--templates: template {exc.name!r} not found in {env.loader.searchpath}") from None  # type: ignore[union-attr]
    except jinja2.TemplateError as exc:
        raise SpecError(f"template {name}: {exc}") from None


def render_all(
    spec: PoolSpec,
    site: Site | None = None,
    version: SlurmVersion = DEFAULT_VERSION,
    templates_dir: Path | None = None,
    node_layouts: Mapping[str, Layouts] | None = None,
) -> dict[str, str]:
    """Every file of the pool's configuration, name -> text, manifest last.

    ``node_layouts`` overrides the spec's MIG layouts per node (see
    :func:`slurm_pool.render.context.build_context`).
    """
    site = site or Site()
    tdir = Path(templates_dir) if templates_dir else default_templates_dir()
    env = jinja_environment(tdir)
    ctx = build_context(spec, site, version, node_layouts)
    files: dict[str, str] = {
        "slurm.conf": _template(env, "slurm.conf.j2", ctx),
        "slurm-pool.conf": _template(env, "slurm-pool.conf.j2", ctx),
        "gres.conf": _template(env, "gres.conf.j2", ctx),
        "plugstack.conf": _template(
            env, "plugstack.conf.j2", {**ctx, "spank_plugin_path": site.spank_plugin, "spank_required": False}
        ),
    }
    if spec.policy.job_submit:
        from slurm_pool.policy.lua import render_job_submit

        files["job_submit.lua"] = render_job_submit(spec, version, templates_dir=tdir)
    files["accounting.json"] = json.dumps(build_plan(spec).to_json(), indent=2, sort_keys=False) + "\n"
    manifest = {
        "generator": "slurm-pool",
        "slurm_version": str(version),
        "cluster": spec.cluster.name,
        "files": {name: hashlib.sha256(text.encode()).hexdigest() for name, text in files.items()},
    }
    files["manifest.json"] = json.dumps(manifest, indent=2) + "\n"
    return files
