"""Names the pool's parts agree on, defined once.  Standard library only, imports nothing.

The node hooks read :data:`LEND_PARTITION` on their fast path and the root command reads
:data:`REMOTE_KEY` on every call, so this module stays a leaf that loads nothing else.
"""

from __future__ import annotations

#: The partition and QOS of the bridge's placeholder jobs, which hold a node lent to Kubernetes
#: (the defaults of the spec's ``bridge:`` section; the exporter and the node hooks assume them).
LEND_PARTITION = "k8s-lend"
LEND_QOS = "k8s-lend"
#: The Slurm account and user the bridge's placeholder jobs run as (the spec's defaults).
BRIDGE_ACCOUNT = "k8s-bridge"
BRIDGE_USER = "slurmpool"
#: Where the root command leaves ``--remote URL`` and ``--token`` for a subcommand (``click`` context meta).
REMOTE_KEY = "slurm_pool.remote"
#: The header a console session's requests carry their CSRF token in (the service and the SDK).
CSRF_HEADER = "X-CSRF-Token"
#: The name of the stamp file a finished cached build (Slurm, an environment) writes last.
BUILD_STAMP = "build.json"
