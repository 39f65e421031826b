# slurm-pool @VERSION@: (re)create the venv /opt/slurm-pool from the wheels this package ships.
# The same body is Debian's postinst (configure) and the RPM's %post.  It writes only under
# /opt/slurm-pool, /etc/slurm-pool (created empty) and /var/log/slurm-pool; never Slurm's own configuration.
set -e
# Job users run the venv's slurm-pool: whatever root's umask, it is readable by all.
umask 022
PREFIX=/opt/slurm-pool
WHEELS=/usr/share/slurm-pool/wheels
REQUIREMENT='slurm-pool[console,k8s]==@VERSION@'
# The first interpreter that is 3.11 or newer: Debian 12's python3, EL9's python3.11.
PY=
for cand in ${SLURM_POOL_PYTHON:-} python3.13 python3.12 python3.11 python3; do
    if command -v "$cand" >/dev/null 2>&1 && "$cand" -c 'import sys, venv; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
        PY=$(command -v "$cand")
        break
    fi
done
if [ -z "$PY" ]; then
    echo "slurm-pool: no Python 3.11 or newer with the venv module (Debian: python3-venv; EL9: python3.11)" >&2
    exit 1
fi
# A fresh venv on every install and upgrade, so that no old package lingers in it; the old one is
# kept aside until the new one works, and put back if it does not.
rm -rf "$PREFIX.old"
if [ -d "$PREFIX" ]; then mv "$PREFIX" "$PREFIX.old"; fi
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 PIP_NO_INPUT=1
if "$PY" -m venv "$PREFIX" \
    && { "$PREFIX/bin/python" -m pip install --quiet --no-index --find-links "$WHEELS" "$REQUIREMENT" \
         || { echo "slurm-pool: the bundled wheels do not fit $("$PY" -V 2>&1) on $(uname -m); trying pip's configured index" >&2
              "$PREFIX/bin/python" -m pip install --quiet --find-links "$WHEELS" "$REQUIREMENT"; }; }; then
    rm -rf "$PREFIX.old"
else
    echo "slurm-pool: could not install $REQUIREMENT into $PREFIX" >&2
    rm -rf "$PREFIX"
    if [ -d "$PREFIX.old" ]; then mv "$PREFIX.old" "$PREFIX"; fi
    exit 1
fi
# The site's spec and rendered files live here; logs in /var/log/slurm-pool (rotated by
# /etc/logrotate.d/slurm-pool).  Neither is removed with the package.
install -d -m 0755 /etc/slurm-pool
if getent group adm >/dev/null 2>&1; then LOGGROUP=adm; else LOGGROUP=root; fi
install -d -m 0750 -o root -g "$LOGGROUP" /var/log/slurm-pool
if [ -d /run/systemd/system ]; then
    systemctl daemon-reload >/dev/null 2>&1 || true
    # A running exporter picks up the new venv; units the site has not started stay stopped.
    systemctl try-restart slurm-pool-exporter.service >/dev/null 2>&1 || true
fi
