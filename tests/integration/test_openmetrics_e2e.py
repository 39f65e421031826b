"""slurmctld's own counts (its OpenMetrics endpoint) against the counts of the command reads, on the real daemons.

On a release that has the endpoint (25.11+), this module adds ``MetricsType=metrics/openmetrics`` to the
session cluster's slurm.conf and restarts slurmctld, and puts both back at its end.  With running, held,
cancelled jobs and a drained node, the exporter's ``--once`` scrape through the endpoint
(``--slurmctld-counts auto``) and through the commands (``--slurmctld-counts commands``) give the same
counts.  On an older release, and on a newer one with the endpoint off, the exporter counts the records.

``SLURM_POOL_RECORD_OPENMETRICS=DIR`` writes the endpoint's answers into DIR (how
``tests/data/slurm/26.05/openmetrics/`` was recorded).
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import pytest

from slurm_pool.adapters import openmetrics
from slurm_pool.metrics.openmetrics_source import EndpointReader, counts_from_records
from tests.support.patience import patience

pytestmark = [pytest.mark.slurm]

SLEEP = "#!/bin/bash\nsleep 600\n"
COMMON = ["-o", "/dev/null", "-D", "/tmp", "-t", "10"]
ENABLE = f"\nMetricsType={openmetrics.METRICS_TYPE}\n"
_SAMPLE = re.compile(r"(slurm_pool_slurm_(?:jobs|nodes|counts_source))\{([^}]*)\} ([0-9.e+]+)")


def _settled(c) -> bool:
    try:
        c.slurm.config()
    except Exception:  # noqa: BLE001 -- slurmctld not answering yet
        return False
    states = c.run(["sinfo", "-h", "-N", "-o", "%t"]).stdout.split()
    return bool(states) and not any(s.endswith(("*", "~", "#")) or s.startswith(("down", "unk")) for s in states)


def _restart(c) -> None:
    c.cluster.restart_controller()
    deadline = time.monotonic() + patience(90)
    while not _settled(c):
        assert time.monotonic() < deadline, "slurmctld did not come back with every node responding"
        time.sleep(0.5)


@pytest.fixture(scope="module")
def endpoint_on(slurm_cluster):
    """The session cluster with the endpoint served, where its release has it; None on older releases."""
    c = slurm_cluster
    if not openmetrics.served_by(c.version):
        yield None
        return
    conf = c.cluster.layout.slurm_conf
    before = conf.read_text()
    conf.write_text(before + ENABLE)
    try:
        _restart(c)
        config = c.slurm.config()
        where = openmetrics.endpoint(config)
        shown = {k: v for k, v in config.items() if k.startswith(("Metrics", "SlurmctldHost", "SlurmctldPort"))}
        assert where is not None, f"no endpoint in scontrol show config: {shown}"
        yield where
    finally:
        conf.write_text(before)
        _restart(c)


def scrape(c, mode: str) -> dict[tuple[str, str], float]:
    """The exporter's count families of one ``--once`` scrape: (family, labels) -> value, zeros left out."""
    res = c.cli("exporter", "--once", "--state-dir", "", "--reclaim-window", "0", "--slurmctld-counts", mode)
    assert res.returncode == 0, res.stderr
    return {(m[1], m[2]): float(m[3]) for m in _SAMPLE.finditer(res.stdout) if float(m[3]) != 0}


def busy(c) -> None:
    """Two running jobs, a held one, a cancelled one and a drained node."""
    for part, acct, user, node in (("scavenger", "proja", "alice", "a-gpu1"), ("shared", "projb", "bob", "b-gpu1")):
        job = c.sbatch("-p", part, f"--qos={part}", "-A", acct, "-w", node, "--gres=gpu:1", "--signal=B:USR1@30", *COMMON,
                       user=user, script=SLEEP)  # fmt: skip
        c.wait_state(job, ["RUNNING"], timeout=30)
    held = c.sbatch("-p", "shared", "--qos=shared", "-A", "projb", "--hold", *COMMON, user="bob", script=SLEEP)
    gone = c.sbatch("-p", "shared", "--qos=shared", "-A", "projb", "--hold", *COMMON, user="bob", script=SLEEP)
    c.wait_state(held, ["PENDING"], timeout=30)
    c.run(["scancel", str(gone)], check=True)
    c.wait_state(gone, ["CANCELLED"], timeout=30)
    c.run(["scontrol", "update", "NodeName=c-gpu1", "State=DRAIN", "Reason=openmetrics test"], check=True)


def test_falls_back_to_the_commands(cluster):
    """The session cluster's slurm.conf leaves the endpoint off (and 22.05 has none): the exporter counts the
    records, and says so.  Runs before the module turns the endpoint on."""
    assert openmetrics.METRICS_TYPE not in cluster.slurm.config().get("MetricsType", "")
    assert EndpointReader(cluster.slurm.config)() is None
    port = int(cluster.slurm.config()["SlurmctldPort"].split("-")[0])
    start = time.monotonic()
    with pytest.raises(openmetrics.Unavailable):  # 22.05: not HTTP; 26.05 without MetricsType: no counts
        openmetrics.read("127.0.0.1", port, timeout=2.0)
    assert time.monotonic() - start < patience(10)
    counts = scrape(cluster, "auto")
    assert counts.pop(("slurm_pool_slurm_counts_source", 'source="commands"')) == 1
    assert ("slurm_pool_slurm_counts_source", 'source="openmetrics"') not in counts
    assert counts == {k: v for k, v in scrape(cluster, "commands").items() if k[0] != "slurm_pool_slurm_counts_source"}


def test_endpoint_counts_equal_command_counts(cluster, endpoint_on):
    """Where the release serves the endpoint, its counts are the command reads' counts; elsewhere the
    exporter's ``auto`` is the command path."""
    assert (endpoint_on is not None) == openmetrics.served_by(cluster.version)
    busy(cluster)
    try:
        ours = counts_from_records(cluster.slurm.nodes(), cluster.slurm.jobs())
        assert ours.jobs.get(("shared", "running")) == 1 and ours.jobs.get(("shared", "pending")) == 1, ours
        assert ours.nodes.get("drain") == 1, ours
        if endpoint_on is not None:
            host, port = endpoint_on
            record = os.environ.get("SLURM_POOL_RECORD_OPENMETRICS")
            if record:
                for path in openmetrics.PATHS.values():
                    name = path.rsplit("/", 1)[1] + ".txt"
                    (Path(record) / name).write_text(openmetrics.fetch(host, port, path))
            theirs = EndpointReader(cluster.slurm.config)()
            assert theirs is not None and not theirs.refused
            assert ({k: v for k, v in theirs.jobs.items() if v}, {k: v for k, v in theirs.nodes.items() if v}) == (
                ours.jobs,
                ours.nodes,
            )
        via_auto, via_commands = scrape(cluster, "auto"), scrape(cluster, "commands")
        source = "openmetrics" if endpoint_on is not None else "commands"
        assert via_auto.pop(("slurm_pool_slurm_counts_source", f'source="{source}"')) == 1
        assert via_commands.pop(("slurm_pool_slurm_counts_source", 'source="commands"')) == 1
        assert via_auto == via_commands
        assert via_auto[("slurm_pool_slurm_jobs", 'partition="shared",state="running"')] == 1
    finally:
        cluster.run(["scontrol", "update", "NodeName=c-gpu1", "State=RESUME"])
