#!/usr/bin/env bash
# A narrated preemption demo on the embedded local cluster (examples/pool.yaml).
#
# Alice (project A) borrows idle GPUs on Bob's server in the preemptible
# scavenger tier, running a deterministic "training" job that checkpoints.
# Bob submits to his guaranteed tier: Alice's job checkpoints inside
# GraceTime, is requeued, Bob starts at once, and Alice later resumes from her
# checkpoint and finishes with exactly the state of an uninterrupted run.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$(pwd)
SP="$REPO/.venv/bin/slurm-pool"
PY="$REPO/.venv/bin/python"
# SLURM=26.05 (make demo SLURM=26.05) runs it on that cached build instead of Debian's Slurm.
SLURM=${SLURM:-}
STATE=${SLURM_POOL_STATE_DIR:-/var/tmp/slurm-pool/demo${SLURM:+-$SLURM}}
export SLURM_POOL_STATE_DIR=$STATE

say() { printf '\n\033[1;34m== %s\033[0m\n' "$*"; }
run() { printf '\033[2m$ %s\033[0m\n' "$*"; "$@"; }
state_of() { squeue -h -j "$1" -o %T 2>/dev/null || true; }
wait_state() {  # job, wanted state, timeout
  local t=0
  while [ $t -lt "$3" ]; do
    s=$(state_of "$1"); [ -z "$s" ] && s=$(sacct -n -X -P -j "$1" -o State | tail -1 | cut -d' ' -f1)
    [ "$s" = "$2" ] && return 0
    sleep 1; t=$((t+1))
  done
  echo "job $1 did not reach $2 (now: $s)" >&2; return 1
}

say "1. Bring up the pool: munge, MariaDB, slurmdbd, slurmctld and one slurmd per node"
run "$SP" cluster up --spec examples/pool.yaml --state-dir "$STATE" ${SLURM:+--slurm "$SLURM"}
eval "$("$SP" cluster env --state-dir "$STATE")"
run "$SP" cluster status --state-dir "$STATE"

WORK=$(mktemp -d /tmp/slurm-pool-demo.XXXXXX); chmod 777 "$WORK"
cp examples/train_sim.py "$WORK/"
STEPS=300
EXPECT=$("$PY" "$WORK/train_sim.py" --steps $STEPS --expect | grep -o 'final=[0-9a-f]*' | cut -d= -f2)
cat > "$WORK/train.sh" <<EOS
#!/bin/bash
#SBATCH --requeue
exec "$SP" run -- "$PY" "$WORK/train_sim.py" --steps $STEPS --every 25 --step-time 0.1
EOS

say "2. Bob's server b-gpu1 is idle. Alice borrows both its GPUs in the scavenger tier"
echo "   (--checkpoint comes from the slurm-pool SPANK plugin; job_submit.lua requires it here)"
JA=$(sbatch --parsable --uid=alice -p scavenger -A proja -w b-gpu1 --gres=gpu:2 --checkpoint \
     --signal=B:USR1@60 --open-mode=append -o "$WORK/alice-%j.out" "$WORK/train.sh")
wait_state "$JA" RUNNING 60
sleep 8
run squeue

say "3. Bob needs his server back: he submits to his guaranteed tier"
T0=$(date +%s)
JB=$(sbatch --parsable --uid=bob -p b-owner -A projb --gres=gpu:2 -t 1 -o "$WORK/bob-%j.out" \
     --wrap 'echo "bob: running on $SLURMD_NODENAME with GPUs $CUDA_VISIBLE_DEVICES"; sleep 10')
wait_state "$JB" RUNNING 60
echo "   Bob's job started $(( $(date +%s) - T0 )) s after submission (GraceTime is 20 s)."
run squeue
echo "   Alice's job log so far:"
grep -E "signal|checkpoint step|stop" "$WORK"/alice-"$JA".out | tail -4 | sed 's/^/     /'

say "4. Alice's job is requeued; Slurm holds requeued jobs 120 s, we release it now"
wait_state "$JB" COMPLETED 60
run scontrol update JobId="$JA" StartTime=now
wait_state "$JA" COMPLETED 300

say "5. Alice resumed from her checkpoint and finished"
grep -E "start|signal|stop|done" "$WORK"/alice-"$JA".out | sed 's/^/     /'
GOT=$(grep -o 'final=[0-9a-f]*' "$WORK"/alice-"$JA".out | cut -d= -f2)
if [ "$GOT" = "$EXPECT" ]; then
  echo "   Final state equals an uninterrupted run: $GOT"
else
  echo "   MISMATCH: got $GOT, expected $EXPECT" >&2; exit 1
fi
run sacct -j "$JA","$JB" -X -o JobID,User,Partition,QOS,State,Start,End

if "$PY" -c "import slurm_pool.web.app" 2>/dev/null; then
  say "6. The web console: every user has a password; Slurm decides what each may do"
  "$SP" cluster up --state-dir "$STATE" --with-console ${SLURM:+--slurm "$SLURM"} | grep '^console:' \
    || echo "   (the console did not start: see $STATE/log/console.out)"
fi

say "Done.  The cluster keeps running: '$SP cluster down --state-dir $STATE' stops it."
