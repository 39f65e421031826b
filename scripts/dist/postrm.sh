# slurm-pool: after the package has gone (not on upgrade), remove the venv it created.
# /etc/slurm-pool (the site's spec and renders) and /var/log/slurm-pool stay.
rm -rf /opt/slurm-pool /opt/slurm-pool.old
if [ -d /run/systemd/system ]; then systemctl daemon-reload >/dev/null 2>&1 || true; fi
