"""slurm-pool: one shared, preemptible GPU pool on Slurm.

One home per concept: each package keeps its own command line (``pkg/cli.py``).
The top level holds only the root command (``cli.py``), the SDK (``client.py``,
the path its users import) and leaf utilities every layer uses (errors, text,
textio, jobid, versions, outfiles, clitypes, cronexit, findings);
``tests/unit/test_structure.py`` lists them, each with why.
"""

__version__ = "0.1.0"
