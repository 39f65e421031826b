"""Cross-field rules of the site's own GRES type names (``node_groups[*].gpus.type``).

A site whose users type ``--gres=gpu:a100`` names its whole GPUs' Type in the spec;
everything the pool renders, plans or checks then uses that name for the group's
whole GPUs (:meth:`~slurm_pool.spec.model.Gpus.gres_type`).  For that to mean one
thing everywhere:

* a name stands for one GPU model, and a model has one name across the spec (the
  job_submit rules, the guarantees' ``gres/gpu:<type>`` and the console's fit all
  key on the Type, so two names for one model would split its GPUs);
* a name differs, in more than case, from every Type the catalogue's GPUs take on a
  supported release (Slurm compares Types case-insensitively: ``_match_type`` in
  src/interfaces/gres.c), so it cannot be read as another model or a MIG instance.
"""

from __future__ import annotations

from typing import Iterator

from slurm_pool.errors import Issue
from slurm_pool.mig.catalogue import GPU_MODELS
from slurm_pool.mig.profiles import known_gres_types
from slurm_pool.spec.model import PoolSpec


def check_gpu_types(spec: PoolSpec) -> Iterator[Issue]:
    """Every problem with the node groups' ``gpus.type`` names."""
    first_name: dict[str, tuple[str, str]] = {}  # model -> (its name, the group that named it first)
    first_model: dict[str, tuple[str, str]] = {}  # name (lower case) -> (its model, that group)
    known = known_gres_types()
    for gi, group in enumerate(spec.node_groups):
        gpus = group.gpus
        if gpus is None or gpus.model not in GPU_MODELS:
            continue
        path = f"node_groups[{gi}].gpus.type"
        name = gpus.gres_type()
        if gpus.type is not None and (gpus.mig is not None or gpus.layouts is not None):
            yield Issue(
                path,
                "a site's type name is for whole GPUs without MIG (`mig apply` writes the model's own Type on "
                "its nodes): put the MIG GPUs in a group of their own, without type",
            )
            continue
        own = gpus.type is not None and gpus.type == GPU_MODELS[gpus.model].slurm_type.lower()
        if gpus.type is not None and not own and (other := known.get(gpus.type.lower())) is not None:
            whose = "the model's own" if other == gpus.model else f"{other}'s"
            yield Issue(
                path,
                f"{gpus.type!r} is {whose} GRES Type on some Slurm release; a site's name must differ from every "
                "catalogue Type (leave type out to use the model's own)",
            )
            continue
        seen = first_name.setdefault(gpus.model, (name, group.name))
        if seen[0] != name:
            yield Issue(
                path,
                f"{gpus.model} is named {seen[0]!r} in node group {seen[1]!r} and {name!r} here; "
                "name a model the same way in every group",
            )
        taken = first_model.setdefault(name.lower(), (gpus.model, group.name))
        if taken[0] != gpus.model:
            yield Issue(
                path,
                f"{name!r} already names {taken[0]} in node group {taken[1]!r}; a GRES type names one GPU model",
            )
