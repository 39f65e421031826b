"""The bridge's run Lease on a real API server: create, conflict, hold, give back (issue 10)."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from slurm_pool.bridge.k8s import K8sError, KubernetesAPI
from slurm_pool.bridge.lease import LeaseHeld
from slurm_pool.bridge.reconcile import give_back_lease, take_lease
from slurm_pool.spec.bridge import Bridge

pytestmark = pytest.mark.k8s


def test_lease_is_held_by_one_run_and_given_back(k8s_api, k8s_namespace):
    config = Bridge(lease_namespace=k8s_namespace, lease_name="rebalance-test")
    api = KubernetesAPI(k8s_api, config)
    now = datetime.now(timezone.utc)
    assert api.read_lease(k8s_namespace, "rebalance-test") is None
    stale = api.read_lease(k8s_namespace, "rebalance-test")
    take_lease(api, config, "run-a", now)
    got = api.read_lease(k8s_namespace, "rebalance-test")
    assert got["spec"]["holderIdentity"] == "run-a" and got["spec"]["leaseDurationSeconds"] == config.lease_seconds
    with pytest.raises(LeaseHeld, match=r"\(run-a\) holds Lease rebalance-test"):
        take_lease(api, config, "run-b", now)
    # A writer that read before run-a took it gets the API server's 409.
    from slurm_pool.bridge import lease

    with pytest.raises(K8sError) as exc:
        api.write_lease(k8s_namespace, lease.claim(stale, "rebalance-test", "run-c", now, 300))
    assert exc.value.status == 409
    give_back_lease(api, config, "run-b")  # not its Lease: left alone
    assert api.read_lease(k8s_namespace, "rebalance-test")["spec"]["holderIdentity"] == "run-a"
    give_back_lease(api, config, "run-a")
    assert api.read_lease(k8s_namespace, "rebalance-test")["spec"].get("holderIdentity") is None
    take_lease(api, config, "run-b", datetime.now(timezone.utc))
    assert api.read_lease(k8s_namespace, "rebalance-test")["spec"]["holderIdentity"] == "run-b"
