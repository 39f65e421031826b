"""``cluster up`` beside a running cluster (issue 49): name the cluster that holds a port, or pick free ports."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Iterator

import pytest

from slurm_pool.localcluster import ports
from slurm_pool.localcluster.cluster import ClusterError, LocalCluster

REPO = Path(__file__).resolve().parents[2]
SPEC = REPO / "examples" / "pool.yaml"


@pytest.fixture
def listening() -> Iterator[socket.socket]:
    """A socket listening on a free loopback port (stands for another cluster's MariaDB)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen()
    yield s
    s.close()


def _record(root: Path, name: str, base: int) -> None:
    root.mkdir(parents=True)
    (root / "cluster.json").write_text(json.dumps({"cluster": name, "port_base": base, "spec": "x"}))


def test_busy(listening: socket.socket) -> None:
    port = listening.getsockname()[1]
    assert ports.busy(port)
    listening.close()
    assert not ports.busy(port)


@pytest.mark.parametrize(
    ("offset", "recorded", "holder"),
    [
        (6, True, "the local cluster 'demo' (state {root}, port base {base})"),
        (199, True, "the local cluster 'demo'"),
        (200, True, "another program"),
        (6, False, "another program"),
    ],
)
def test_holder(tmp_path: Path, offset: int, recorded: bool, holder: str) -> None:
    root = tmp_path / "demo"
    base = 30000
    if recorded:
        _record(root, "demo", base)
    found = ports.clusters([tmp_path / "mine"])
    assert ports.holder(base + offset, found, tmp_path / "mine").startswith(holder.format(root=root, base=base))


def test_up_names_the_cluster_that_holds_mariadbs_port(tmp_path: Path, listening: socket.socket) -> None:
    port = listening.getsockname()[1]
    base = port - 6  # this cluster's MariaDB port is the listening one
    _record(tmp_path / "demo", "demo", base)
    c = LocalCluster(SPEC, state_dir=tmp_path / "other", port_base=base)
    with pytest.raises(ClusterError) as exc:
        c.check_ports()
    said = str(exc.value)
    assert f"port {port} (mysql) is in use by the local cluster 'demo'" in said
    assert "--port-base" in said and "cluster down" in said


def test_a_new_cluster_takes_free_ports(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SLURM_POOL_PORT_BASE", raising=False)
    monkeypatch.setenv("SLURM_POOL_STATE_DIR", str(tmp_path / "pool"))
    _record(tmp_path / "demo", "demo", 16800)  # the demo cluster holds the default base
    c = LocalCluster(SPEC, state_dir=tmp_path / "other")
    assert c.layout.port_base != 16800 and c.layout.port_base >= 16800 + ports.SPAN
    assert (c.layout.port_base - 16800) % ports.SPAN == 0
    c.check_ports()  # none of its ports is taken
    assert LocalCluster(SPEC, state_dir=tmp_path / "other", port_base=16800).layout.port_base == 16800  # as asked


@pytest.mark.parametrize(
    ("held", "wanted", "offset"),
    [
        ({6}, [6], 1),  # the base's MariaDB port is held: the next span
        ({6}, [7], 0),  # a port it does not want is held: this base
        ({6, ports.SPAN + 6}, [6], 2),  # the next span's is held too
        (set(), [6, 7], 0),
    ],
)
def test_free_base_skips_busy_ports(
    monkeypatch: pytest.MonkeyPatch, held: set[int], wanted: list[int], offset: int
) -> None:
    # Which ports are busy is the test's, not the machine's: other programs take ephemeral ports at any time.
    start = 30000
    monkeypatch.setattr(ports, "busy", lambda port: port - start in held)
    assert ports.free_base(start, [], wanted) == start + offset * ports.SPAN
