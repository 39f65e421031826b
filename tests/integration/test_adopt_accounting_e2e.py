"""Issue 33, check 1 (accounting): ``apply accounting --prune`` leaves a site's own objects byte-identical.

The site's QOS, account, its users' associations and a pool user's default
account are made first with sacctmgr, as a site that already runs Slurm has
them; after ``slurm-pool apply accounting --prune`` (the CLI, against the
running cluster) ``sacctmgr -n -P show`` prints their rows exactly as before.
The session cluster is shared: everything made here is removed again and the
pool user's default account restored.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slurm

#: The pool user (examples/pool.yaml: project proja) the site also has in its own account.
POOL_USER = "alice"
#: A user only the site has (a local account that exists on every Debian system).
SITE_USER = "nobody"
#: ``sacctmgr -n -P show ENTITY where ... format=...``: the site's rows, every field that a change could touch.
SNAPSHOTS = {
    "qos": (
        ["where", "name=site-normal"],
        "Name,Description,Flags,Priority,Preempt,PreemptMode,GraceTime,UsageFactor,GrpTRES,MaxTRES,MaxTRESPU,MaxWall",
    ),
    "account": (["where", "name=physics"], "Account,Descr,Org"),
    "assoc": (
        ["where", "account=physics"],
        "Cluster,Account,User,Partition,ParentName,Fairshare,QOS,DefaultQOS,GrpTRES,MaxTRES,MaxJobs,MaxWall",
    ),
    "user": (["where", f"name={POOL_USER},{SITE_USER}"], "User,DefaultAccount,Admin"),
}


def _sacctmgr(cluster, *args: str, check: bool = True) -> str:
    return cluster.run(["sacctmgr", *args], check=check).stdout


def _snapshot(cluster) -> dict[str, str]:
    return {
        entity: _sacctmgr(cluster, "-n", "-P", "show", entity, *where, f"format={fmt}")
        for entity, (where, fmt) in SNAPSHOTS.items()
    }


def _cli(cluster, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, **cluster.env, "SLURM_POOL_STATE_DIR": str(cluster.cluster.layout.root)}
    return subprocess.run(
        [sys.executable, "-m", "slurm_pool", *args], capture_output=True, text=True, env=env, timeout=300
    )


@pytest.fixture
def site(cluster):
    """The site's own accounting objects, made before slurm-pool runs; removed (and alice restored) after."""
    name = cluster.spec.cluster.name
    user_row = _sacctmgr(cluster, "-n", "-P", "show", "user", f"name={POOL_USER}", "format=User,DefaultAccount")
    original_default = user_row.strip().split("|")[1]
    try:
        _sacctmgr(cluster, "-i", "add", "qos", "site-normal", "Description=the site's own", "Priority=3")
        _sacctmgr(cluster, "-i", "modify", "qos", "where", "name=site-normal", "set", "Preempt=scavenger")
        _sacctmgr(
            cluster, "-i", "add", "account", "physics", f"Cluster={name}", "Description=physics", "Organization=physics"
        )
        _sacctmgr(
            cluster, "-i", "modify", "account", "where", "name=physics", f"cluster={name}", "set", "Fairshare=7",
            "QOS=normal,site-normal", "DefaultQOS=site-normal",
        )  # fmt: skip
        for user in (SITE_USER, POOL_USER):
            _sacctmgr(cluster, "-i", "add", "user", user, "Account=physics", f"Cluster={name}")
        _sacctmgr(cluster, "-i", "modify", "user", "where", f"name={POOL_USER}", "set", "DefaultAccount=physics")
        yield cluster
    finally:
        _sacctmgr(
            cluster, "-i", "modify", "user", "where", f"name={POOL_USER}", "set", f"DefaultAccount={original_default}",
            check=False,
        )  # fmt: skip
        _sacctmgr(cluster, "-i", "delete", "user", SITE_USER, check=False)
        _sacctmgr(cluster, "-i", "delete", "account", "physics", check=False)
        _sacctmgr(cluster, "-i", "delete", "qos", "site-normal", check=False)
    after = _sacctmgr(cluster, "-n", "-P", "show", "user", f"name={POOL_USER}", "format=User,DefaultAccount")
    assert after == user_row, "the pool user's default account is as the test found it"


def test_apply_accounting_prune_leaves_every_site_object_byte_identical(site):
    before = _snapshot(site)
    assert before["qos"].startswith("site-normal|") and f"|physics|{POOL_USER}|" in before["assoc"], before
    assert f"{POOL_USER}|physics|" in before["user"], before

    res = _cli(site, "apply", "accounting", str(site.cluster.spec_path), "--prune")
    assert res.returncode == 0, res.stdout + res.stderr
    kept = f"= user {POOL_USER}: keeps DefaultAccount physics "
    said = [line for line in res.stdout.splitlines() if line.startswith(kept)]
    assert len(said) == 1, res.stdout
    assert "site-normal" not in res.stdout and "physics" not in res.stdout.replace(kept, ""), res.stdout

    assert _snapshot(site) == before
    # and the pool's own association for the same user is there, untouched by the site's
    rows = _sacctmgr(site, "-n", "-P", "show", "assoc", f"user={POOL_USER}", "format=Account,User")
    assert f"proja|{POOL_USER}" in rows.splitlines(), rows
