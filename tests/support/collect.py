"""How the suite is collected: daemon tests marked by the fixtures they use, builds' users last.

* A test that uses the real Slurm cluster or the Kubernetes control plane,
  directly or through another fixture, is marked ``slurm`` or ``k8s`` even if
  its module forgot to say so: ``make test``'s unit stream (``-m "not slurm
  and not k8s"``, over several workers) must never boot daemons.
* Modules that take a shared session fixture apart and put it back (:data:`LAST_MODULES`) run last.
* Modules with a test that waits for a cached build (:data:`LATE_FIXTURES`)
  run after every other module of their stream: ``make test`` starts the
  builds beside the streams, so the rest of a stream runs while they build.
  Modules move whole, keeping their order, so module fixtures stay shared.
* Spread over pytest-xdist workers with ``--dist loadgroup`` (each worker
  boots its own cluster, and its own control plane once it meets a test that
  needs one), a module's tests stay on one worker: its module fixtures, such
  as a cluster of its own, start once.
"""

from __future__ import annotations

import pytest

#: A test using one of these (or a fixture that uses one) needs the named daemons.
DAEMON_FIXTURES = {"slurm_cluster": "slurm", "brownfield_site": "slurm", "k8s_control_plane": "k8s"}
#: Modules that share one session fixture of their own run on one worker: the site's cluster with the
#: pool installed (``brownfield_site``) boots once per stream.
SHARED_GROUPS = {"tests/integration/test_brownfield": "brownfield"}
#: Fixtures that wait for a cached build: the control plane (Kubernetes, KServe, Volcano), the notebook
#: environment (``hub_cluster``), torch (``torchrun``), the newer Slurm's headers beside Debian's
#: (``other_include``) and Slurm without Lua (``nolua``).
LATE_FIXTURES = frozenset({"k8s_control_plane", "k8s_crds", "hub_cluster", "torchrun", "other_include", "nolua"})
#: Modules that take a shared session fixture apart and put it back: they run after the other modules of their
#: stream.  `uninstall` on the brownfield site puts the pool back as installed, but slurmctld drops the usage of
#: the associations it deleted, so the site users' fairshare factors (sprio) are not what they were.
LAST_MODULES = frozenset({"tests/integration/test_brownfield_uninstall_e2e.py"})


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark daemon tests by their fixtures, before ``-m`` deselects."""
    for item in items:
        names = set(getattr(item, "fixturenames", ()))
        for fixture, mark in DAEMON_FIXTURES.items():
            if fixture in names and item.get_closest_marker(mark) is None:
                item.add_marker(mark)
    if getattr(config.option, "dist", "no") == "loadgroup":
        for item in items:
            module = item.nodeid.split("::")[0]
            group = next((g for prefix, g in SHARED_GROUPS.items() if module.startswith(prefix)), module)
            item.add_marker(pytest.mark.xdist_group(group))


@pytest.hookimpl(tryfirst=True)
def pytest_collection_finish(session: pytest.Session) -> None:
    """Move the modules that wait for a build to the end, whole and in order."""
    late = {
        item.nodeid.split("::")[0] for item in session.items if LATE_FIXTURES & set(getattr(item, "fixturenames", ()))
    }
    if late:
        session.items.sort(key=lambda item: item.nodeid.split("::")[0] in late)
    # after the builds' modules too: one of those may share the fixture (stable sort: the rest keep their order)
    session.items.sort(key=lambda item: item.nodeid.split("::")[0] in LAST_MODULES)
