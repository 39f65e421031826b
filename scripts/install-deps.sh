#!/usr/bin/env bash
# Install everything slurm-pool's demo and tests need on a fresh Debian 12
# machine, as root.  Idempotent: a second run only checks.
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(
  slurm-wlm slurmctld slurmd slurmdbd slurm-client slurm-wlm-basic-plugins slurm-wlm-mysql-plugin
  libslurm-dev munge
  # auth/jwt for slurmctld (the console's tokens); 26.05 builds its own from libjwt-dev
  slurm-wlm-jwt-plugin mariadb-server mariadb-client lua5.1 lua-check prometheus
  python3 python3-venv python3-dev gcc make valgrind openssl procps iproute2 passwd
  # the ssh path of `mig apply` is tested against a real sshd on a loopback port
  openssh-server openssh-client
  # to build Slurm 26.05 from ../shared/slurm (slurm_pool.localcluster.slurmbuild.BUILD_PACKAGES)
  build-essential pkg-config libmunge-dev libmariadb-dev libjson-c-dev libyaml-dev liblua5.1-0-dev
  libhttp-parser-dev libjwt-dev
  # the notebook tier: configurable-http-proxy runs on node; browser tests drive Debian's chromium
  nodejs chromium chromium-driver
  # `slurm-pool serve` as its own user submits through sudo and slurm-pool-as (docs/security.md)
  sudo
)
# make dist: the .deb with dpkg-deb under fakeroot, the EL9 .rpm with Debian's rpmbuild
APT_PACKAGES+=(fakeroot rpm)
# npm comes with some nodejs builds (NodeSource's); Debian's nodejs needs Debian's npm.
command -v npm >/dev/null 2>&1 || APT_PACKAGES+=(npm)

missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "install-deps: need root to install: ${missing[*]}" >&2
    exit 1
  fi
  echo "install-deps: installing ${missing[*]}"
  # Our scripts start the daemons themselves: keep the packages from starting theirs.
  created_policy=0
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
    chmod +x /usr/sbin/policy-rc.d
    created_policy=1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  apt-get install -y -q --no-install-recommends "${missing[@]}"
  [ "$created_policy" = 1 ] && rm -f /usr/sbin/policy-rc.d
fi

# Python environment for the package and its tests.  Debian's python3 is
# preferred: jobs run as the pool's users, who must be able to execute the
# venv's interpreter (a python under /root would not be reachable for them).
VENV_PY=/usr/bin/python3
[ -x "$VENV_PY" ] || VENV_PY=python3
if [ ! -x .venv/bin/python ]; then
  "$VENV_PY" -m venv .venv
fi
if ! .venv/bin/python -c "import slurm_pool, xdist, lupa, kubernetes, hypothesis, pytest, ruff, mypy, rich, matplotlib, pre_commit, wheel, selenium, fastapi, uvicorn, jwt, pamela, httpx, ijson" 2>/dev/null; then
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -e ".[test,k8s,console]"
fi

# The SPANK plugin, built against Debian's libslurm-dev.
make -s -C spank
