"""Start-time prediction: when will each pending job start, and why is it waiting (``slurm-pool why``).

:mod:`.runtimes` (each user's recent runtimes), :mod:`.pool` (the spec as the
node engine's model), :mod:`.forward` (the live queue run forward) and
:mod:`.explain` (causes and alternatives) are pure; :mod:`.live` reads Slurm.
"""
