#!/usr/bin/env bash
# Bring the pool up from SPEC (default: the seed example), then stay in the foreground.
set -euo pipefail
SPEC=${SPEC:-/opt/slurm-pool/examples/pool.yaml}
slurm-pool cluster up --spec "$SPEC"
trap 'slurm-pool cluster down; exit 0' TERM INT
while sleep 3600 & wait $!; do :; done
