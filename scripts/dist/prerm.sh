# slurm-pool: before the package goes (not on upgrade), stop and disable its units; the site's
# cron entries copied to /etc/cron.d and everything under /etc/slurm-pool stay.
if [ -d /run/systemd/system ]; then
    for unit in slurm-pool-rebalance.timer slurm-pool-rebalance.service slurm-pool-exporter.service slurm-pool-serve.service; do
        systemctl disable --now "$unit" >/dev/null 2>&1 || true
    done
fi
