"""An emulated ``nvidia-smi`` for one node of the local cluster (the MIG commands only).

The local cluster's GPUs are emulated (``localcluster.mig``); this gives them the
command line that a remote ``mig apply`` drives over ssh on a real node, so that
path runs end to end here.  It answers the commands ``mig apply`` sends and no
others: ``--query-gpu=index,mig.mode.current``, ``-i N -mig 0|1`` and
``mig -lgi|-lci``, ``mig -i N -dci|-dgi|-cgi P:S,... -C``.  Tables are printed
in nvidia-smi's layout, so the same parser reads them.

It keeps device files where a real node has them (``nvidiaN`` and
``nvidia-caps/nvidia-capM``, minors as ``mig.emit.cap_minor`` derives them)
under ``<state>/nodedev/<node>``.  Fault injection: a file ``fail-cgi`` there
holding N makes the next N ``-cgi`` calls fail as the driver does.
"""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

from slurm_pool.localcluster.cluster import LocalCluster, saved_record
from slurm_pool.localcluster.mig import EmulatedMigBackend
from slurm_pool.mig.emit import cap_minor
from slurm_pool.mig.placement import find_placement
from slurm_pool.mig.profiles import geometry

_GPU_MAJOR, _CAPS_MAJOR = 195, 241


def device_dir(state: Path, node: str) -> Path:
    """Where a node's emulated device files are, as ``mig apply --dev-dir`` names them."""
    return state / "nodedev" / node


class EmulatedNode:
    """One node's emulated GPUs (an ``EmulatedMigBackend``) and its device directory."""

    def __init__(self, backend: EmulatedMigBackend, node: str, dev_dir: Path):
        self.backend = backend
        self.node = node
        self.model = backend.model(node)
        self.dir = dev_dir

    @classmethod
    def open(cls, state: Path, node: str) -> EmulatedNode:
        cluster = LocalCluster(saved_record(state)["spec"], state_dir=str(state))
        return cls(EmulatedMigBackend(cluster), node, device_dir(state, node))

    def layouts(self) -> dict:
        return self.backend.layouts(self.node)

    def set(self, gpu: int, layout: tuple[str, ...] | None) -> None:
        self.backend.apply(self.node, gpu, layout)
        self.sync_devices()

    def instances(self) -> list[tuple[int, int, str, int]]:
        """(gpu, gi id, profile, start) of every GPU instance."""
        out = []
        for idx, layout in sorted(self.layouts().items()):
            for gi, (prof, start) in enumerate(find_placement(self.model, list(layout)) or () if layout else ()):
                out.append((idx, gi + 1, prof, start))
        return out

    def sync_devices(self) -> None:
        want = {f"nvidia{i}": (_GPU_MAJOR, i) for i in self.layouts()}
        for gpu, gi, _, _ in self.instances():
            for ci in (None, 0):
                m = cap_minor(gpu, gi, ci)
                want[f"nvidia-caps/nvidia-cap{m}"] = (_CAPS_MAJOR, m)
        (self.dir / "nvidia-caps").mkdir(parents=True, exist_ok=True)
        for old in [*self.dir.glob("nvidia[0-9]*"), *(self.dir / "nvidia-caps").glob("nvidia-cap*")]:
            if str(old.relative_to(self.dir)) not in want:
                old.unlink()
        for rel, (major, minor) in want.items():
            path = self.dir / rel
            if not path.exists():
                os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(major, minor))

    def take_fault(self) -> bool:
        f = self.dir / "fail-cgi"
        if not f.is_file():
            return False
        left = int(f.read_text().strip() or 0)
        if left <= 0:
            return False
        f.write_text(str(left - 1))
        return True


def _tables(node: EmulatedNode, kind: str) -> str:
    geo = geometry(node.model)
    rows = node.instances()
    if not rows:
        return f"No {'GPU' if kind == 'gi' else 'compute'} instances found: Not Found\n"
    head = "GPU instances:" if kind == "gi" else "Compute instances:"
    out = ["+" + "-" * 68 + "+", f"| {head:<67}|", "|" + "=" * 68 + "|"]
    for gpu, gi, prof, start in rows:
        size = geo.profiles[prof].memory
        if kind == "gi":
            out.append(f"|   {gpu}  MIG {prof:<16} 0        {gi}          {start}:{size}     |")
        else:
            out.append(f"|   {gpu}      {gi}       MIG {prof:<16} 0         0          0:{size}     |")
        out.append("+" + "-" * 68 + "+")
    return "\n".join(out) + "\n"


def run(node: EmulatedNode, args: list[str]) -> tuple[int, str]:
    """One nvidia-smi call: (exit status, output)."""
    if args[:2] == ["--query-gpu=index,mig.mode.current", "--format=csv,noheader"]:
        return 0, "".join(f"{i}, {'Disabled' if lay is None else 'Enabled'}\n" for i, lay in node.layouts().items())
    if len(args) == 4 and args[0] == "-i" and args[2] == "-mig":
        gpu, on = int(args[1]), args[3] == "1"
        current = node.layouts()[gpu]
        if not on and current:
            return 6, "Unable to disable MIG Mode: In use by another client\n"
        node.set(gpu, (current or ()) if on else None)
        return 0, f"{'Enabled' if on else 'Disabled'} MIG Mode for GPU {gpu}\n"
    if args in (["mig", "-lgi"], ["mig", "-lci"]):
        text = _tables(node, "gi" if args[1] == "-lgi" else "ci")
        return (6 if text.startswith("No ") else 0), text
    if len(args) >= 4 and args[:2] == ["mig", "-i"]:
        gpu, op = int(args[2]), args[3]
        current = node.layouts()[gpu]
        if current is None:
            return 6, f"Unable to {op}: MIG mode is disabled on GPU {gpu}\n"
        if op in ("-dci", "-dgi"):
            if not current:
                return 6, "No instances found: Not Found\n"
            if op == "-dgi":
                node.set(gpu, ())
            return 0, f"Successfully destroyed {'compute' if op == '-dci' else 'GPU'} instances on GPU {gpu}\n"
        if op == "-cgi" and len(args) == 6 and args[5] == "-C":
            if node.take_fault():
                return 2, "Failed to create GPU instances: Insufficient Resources\n"
            want = tuple(current) + tuple(p.split(":")[0] for p in args[4].split(","))
            if find_placement(node.model, list(want)) is None:
                return 2, "Failed to create GPU instances: Insufficient Resources\n"
            node.set(gpu, want)
            return 0, f"Successfully created GPU instances on GPU {gpu}\n"
    return 2, f"emulated nvidia-smi: not supported: {' '.join(args)}\n"


def main(argv: list[str] | None = None) -> None:
    """``nvidia-smi-<node> ARGS``: the wrapper passes ``--node NODE`` first."""
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) < 2 or args[0] != "--node":
        sys.exit("usage: nvsmi --node NODE NVIDIA-SMI-ARGS...")
    state = os.environ.get("SLURM_POOL_STATE_DIR")
    if not state:
        sys.exit("set SLURM_POOL_STATE_DIR to the local cluster's state directory")
    try:
        rc, text = run(EmulatedNode.open(Path(state), args[1]), args[2:])
    except (KeyError, ValueError, IndexError) as exc:
        rc, text = 2, f"emulated nvidia-smi: {exc}\n"
    (sys.stdout if rc == 0 else sys.stderr).write(text)
    sys.exit(rc)
