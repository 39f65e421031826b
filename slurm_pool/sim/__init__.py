"""A trace-driven simulator of a GPU pool (pure: no Slurm, no files).

It answers the question the project exists for: when per-project GPU
servers become one preemptible pool, how much of the hardware does useful
work, and how long do owners wait?  :mod:`.workload` turns public traces
into jobs and sizes each project's servers; :mod:`.engine` replays the jobs
under a :class:`~.engine.Policy` (dedicated servers, a pool without
preemption, a pool with checkpoint-on-preempt) and returns a
:class:`~.engine.Result`.  :mod:`.nodes` replays on whole nodes and their
MIG instances as Slurm places jobs, :mod:`.sizing` finds the smallest pool
that keeps the owners' promise, :mod:`.slices` replays fractional-GPU jobs
on MIG slices the project's MIG planner lays out, and :mod:`.lending`
replays the bridge's lending on the idle GPUs.
"""
