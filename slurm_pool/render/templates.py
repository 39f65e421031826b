"""Where the Jinja2 templates live and the environment they render in.

A leaf module: it imports nothing else from slurm_pool but the error type, so
both the renderer and the policy layer can use it without importing each other.
"""

from __future__ import annotations

import os
from importlib import metadata
from pathlib import Path

import jinja2

from slurm_pool.errors import SpecError

DIST_NAME = "slurm-pool"
DATA_DIR = "share/slurm-pool/conf_templates"


def _installed_templates_dir() -> Path | None:
    """The templates the wheel installed as data files, found through its RECORD."""
    try:
        dist = metadata.distribution(DIST_NAME)
    except metadata.PackageNotFoundError:
        return None
    for f in dist.files or ():
        if f.name == "slurm.conf.j2" and "conf_templates" in f.parts:
            return Path(str(dist.locate_file(f))).resolve().parent
    return None


def default_templates_dir() -> Path:
    """``$SLURM_POOL_TEMPLATES``, else the source tree's ``conf_templates/``, else the installed copy."""
    env = os.environ.get("SLURM_POOL_TEMPLATES")
    if env:
        return Path(env)
    here = Path(__file__).resolve().parent.parent.parent / "conf_templates"
    if (here / "slurm.conf.j2").is_file():
        return here
    installed = _installed_templates_dir()
    if installed is not None:
        return installed
    raise SpecError(
        f"slurm-pool's templates are not installed (looked in {here} and the {DIST_NAME} data files); give --templates"
    )


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


def render_template(env: jinja2.Environment, name: str, ctx: dict[str, object]) -> str:
    """Render one template; a missing or broken template is a user-facing error."""
    try:
        return env.get_template(name).render(**ctx)
    except jinja2.TemplateNotFound as exc:
        raise SpecError(f"--templates: template {exc.name!r} not found in {env.loader.searchpath}") from None  # type: ignore[union-attr]
    except jinja2.TemplateError as exc:
        raise SpecError(f"template {name}: {exc}") from None
