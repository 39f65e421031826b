"""The ``coexist`` section: the pool is part of a cluster the site already runs.

Without it, slurm-pool owns the cluster: it renders the whole slurm.conf, and
its job_submit.lua polices every job.  With it, slurm-pool owns only its own
node groups, partitions and projects:

* ``slurm-pool.conf`` holds the pool's nodes and partitions and nothing
  cluster-wide (a partition over ``ALL`` means all of the pool's nodes); the
  cluster-wide lines the pool needs go to ``site-settings.conf``, for the
  site's own slurm.conf (see :mod:`slurm_pool.render.required`);
* gres.conf comes as one fragment per node group (``gres-GROUP.conf``), for
  ``Include`` lines in the site's gres.conf; plugstack.conf as
  ``plugstack-slurm-pool.conf`` for an ``include`` line in the site's;
* job_submit.lua passes every job outside the pool untouched, and runs the
  site's own script (``job_submit.site_script``) before or after the pool's
  rules: Slurm loads one job_submit.lua, so the pool's chains the site's;
* prolog and epilog run from a glob (``Prolog=.../prolog.d/*``), Slurm's own
  form for several scripts since before 22.05 (slurm.conf(5), "Prolog");
  ``HealthCheckProgram`` names one program, so the pool's runs the site's
  (``health_check``) after its own checks.
"""

from __future__ import annotations

from typing import Literal, Optional

from slurm_pool.spec.base import PlainPath, Strict


class SiteJobSubmit(Strict):
    """The site's own job_submit.lua, moved aside so the pool's can take its name."""

    #: Absolute path of the site's script; it defines ``slurm_job_submit`` and ``slurm_job_modify``.
    script: PlainPath
    #: ``before``: the site's rules see the job first (a rejection stands); ``after``: they see the routed job.
    order: Literal["before", "after"] = "before"


class Coexist(Strict):
    """The pool shares its cluster with the site's own partitions, nodes, accounts and job policy."""

    job_submit: Optional[SiteJobSubmit] = None
    #: Where the site keeps its prolog and epilog scripts (``Prolog=<prolog_dir>/*``); the pool's hook is one of them.
    prolog_dir: PlainPath = "/etc/slurm/prolog.d"
    epilog_dir: PlainPath = "/etc/slurm/epilog.d"
    #: The site's own HealthCheckProgram (LBNL NHC, say).  Slurm runs one: the pool's health check runs this
    #: one after its GPU checks (node.conf ``site_health_check``), and either failing fails the check.
    health_check: Optional[PlainPath] = None
