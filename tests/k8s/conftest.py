"""Session fixtures: one real Kubernetes control plane for every k8s test.

The fixtures live in :mod:`tests.support.k8s_fixtures` so that other test
directories (``tests/bridge``) share the same control plane:
``k8s_control_plane`` starts etcd, kube-apiserver, kube-controller-manager,
kube-scheduler and kwok on loopback (nodes mirror the example Slurm pool:
a-gpu1 a-gpu2 b-gpu1 c-gpu1, or ``$SLURM_POOL_K8S_NODES``), installs
KServe's CRDs and runs KServe's own controller (:mod:`tests.support.kserve`).  Tests talk to it with the official
``kubernetes`` client through ``k8s_kubeconfig``.
"""

from __future__ import annotations
