"""The NVML adapter: replay, the pynvml mapping (against a fake NVML built from
each recorded snapshot), kernel-log XIDs and MIG capability minors."""

from __future__ import annotations

import json
import os
import shutil
import types
from pathlib import Path

import pytest

from slurm_pool.adapters import nvml
from slurm_pool.spec.model import core_indexes

DATA = Path(__file__).resolve().parents[1] / "data" / "nvml"
SNAPSHOTS = sorted(p.name for p in DATA.glob("*.json"))


class FakeError(Exception):
    """Stands in for pynvml.NVMLError."""


def _bus(pci: str) -> types.SimpleNamespace:
    return types.SimpleNamespace(busId=pci.encode())


def affinity_words(cpulist: str, size: int) -> list[int]:
    """NVML's affinity mask of a cpulist: ``size`` 64-bit words, CPU ``c`` is bit ``c % 64`` of word ``c // 64``."""
    words = [0] * size
    for cpu in core_indexes(cpulist):
        words[cpu // 64] |= 1 << (cpu % 64)
    return words


def fake_pynvml(snap: dict) -> types.SimpleNamespace:
    """A pynvml look-alike that serves one recorded snapshot."""
    gpus = {g["index"]: g for g in snap["gpus"]}
    m = types.SimpleNamespace(
        NVMLError=FakeError,
        NVML_MEMORY_ERROR_TYPE_UNCORRECTED=1,
        NVML_MEMORY_ERROR_TYPE_CORRECTED=0,
        NVML_VOLATILE_ECC=0,
        NVML_AGGREGATE_ECC=1,
        NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS=0,
        NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR=1,
        NVML_FEATURE_ENABLED=1,
        NVML_GPU_INSTANCE_PROFILE_COUNT=0x12,
        calls=[],
    )
    arch = {v: k for k, v in nvml._ARCH.items()}

    def need(v):
        if v is None:
            raise FakeError("Not Supported")
        return v

    def ecc(h, kind, counter):
        e = gpus[h]["ecc"]
        key = {(1, 0): "volatile_uncorrected", (0, 0): "volatile_corrected", (1, 1): "aggregate_uncorrected"}
        return need(e[key[(kind, counter)]])

    def rows(h):
        r = need(gpus[h]["remapped_rows"])
        return (r["correctable"], r["uncorrectable"], int(r["pending"]), int(r["failure"]))

    def pages(h, cause):
        p = need(gpus[h]["retired_pages"])
        return [0x1000 * i for i in range(p["single_bit" if cause == 0 else "double_bit"])]

    def mig_mode(h):
        g = gpus[h]
        if not g["mig_capable"]:
            raise FakeError("Not Supported")
        return [int(g["mig_enabled"]), int(g["mig_pending"])]

    def profile_info(h, p):  # the p-th profile in use stands in for NVML's profile enum
        ids = sorted({gi["profile_id"] for gi in gpus[h]["gpu_instances"]})
        if p >= len(ids):
            raise FakeError("Not Supported")
        gi = next(x for x in gpus[h]["gpu_instances"] if x["profile_id"] == ids[p])
        return types.SimpleNamespace(
            id=gi["profile_id"],
            sliceCount=gi["gi_slices"],
            memorySizeMB=gi["memory_mib"],
            instanceCount=7,
            name=f"MIG {gi['profile']}".encode(),
        )

    def mig_handle(h, i):
        devs = gpus[h]["mig_devices"]
        if i >= len(devs):
            raise FakeError("Not Found")
        return ("mig", h, i)

    def mig_field(key):
        return lambda mh: gpus[mh[1]]["mig_devices"][mh[2]][key]

    m.nvmlInit = lambda: m.calls.append("init")
    m.nvmlShutdown = lambda: m.calls.append("shutdown")
    m.nvmlSystemGetDriverVersion = lambda: snap["driver_version"]
    m.nvmlDeviceGetCount = lambda: len(gpus)
    m.nvmlDeviceGetHandleByIndex = lambda i: i
    m.nvmlDeviceGetName = lambda h: gpus[h]["name"].encode()
    m.nvmlDeviceGetUUID = lambda h: gpus[h]["uuid"] if isinstance(h, int) else mig_field("uuid")(h)
    m.nvmlDeviceGetPciInfo = lambda h: _bus(gpus[h]["pci_bus_id"])
    m.nvmlDeviceGetMemoryInfo = lambda h: types.SimpleNamespace(
        total=(gpus[h]["memory_mib"] if isinstance(h, int) else mig_field("memory_mib")(h)) * 2**20
    )
    m.nvmlDeviceGetArchitecture = lambda h: arch[gpus[h]["architecture"]]
    m.nvmlDeviceGetMinorNumber = lambda h: gpus[h]["minor"]
    m.nvmlDeviceGetEccMode = lambda h: [int(gpus[h]["ecc"]["enabled"]), int(gpus[h]["ecc"]["enabled"])]
    m.nvmlDeviceGetTotalEccErrors = ecc
    m.nvmlDeviceGetRemappedRows = rows
    m.nvmlDeviceGetRetiredPagesPendingStatus = lambda h: int(need(gpus[h]["retired_pages"])["pending"])
    m.nvmlDeviceGetRetiredPages = pages
    m.nvmlDeviceGetMigMode = mig_mode
    m.nvmlDeviceGetGpuInstanceProfileInfo = profile_info
    m.nvmlGpuInstanceGetInfo = lambda gi: types.SimpleNamespace(
        id=gi["gi_id"], profileId=gi["profile_id"], placement=types.SimpleNamespace(start=gi["start"], size=gi["size"])
    )
    m.nvmlDeviceGetCpuAffinity = lambda h, size: affinity_words(need(gpus[h].get("cpu_affinity")), size)
    m.nvmlDeviceGetMaxMigDeviceCount = lambda h: 7
    m.nvmlDeviceGetMigDeviceHandleByIndex = mig_handle
    m.nvmlDeviceGetGpuInstanceId = mig_field("gi_id")
    m.nvmlDeviceGetComputeInstanceId = mig_field("ci_id")
    return m


class FakeLib(nvml.PynvmlLib):
    """The real mapping code; only the ctypes array call is replaced."""

    def gpu_instances(self, h, profile_id, max_count):
        return [gi for gi in self.snap_gpus[h]["gpu_instances"] if gi["profile_id"] == profile_id]


def source_for(snap: dict, tmp_path: Path) -> nvml.NvmlSource:
    lib = FakeLib(fake_pynvml(snap))
    lib.snap_gpus = {g["index"]: g for g in snap["gpus"]}
    minors = []
    for g in snap["gpus"]:
        for gi in g["gpu_instances"]:
            minors.append(f"gpu{g['minor']}/gi{gi['gi_id']}/access {gi['access_minor']}")
        for d in g["mig_devices"]:
            minors.append(f"gpu{g['minor']}/gi{d['gi_id']}/ci{d['ci_id']}/access {d['ci_access_minor']}")
    (tmp_path / "mig-minors").write_text("config 1\nmonitor 2\n" + "\n".join(minors) + "\n")
    (tmp_path / "boot_id").write_text(snap["boot_id"] + "\n")
    kmsg = tmp_path / "kmsg"
    kmsg.write_text(
        "".join(
            f"6,{e['seq'] - 1},{e['time_us'] - 5},-;unrelated line\n"
            f"3,{e['seq']},{e['time_us']},-;{e['text']}\n SUBSYSTEM=pci\n DEVICE=+pci:0000:00:00.0\n"
            for e in snap["xid_events"]
        )
    )
    return nvml.NvmlSource(
        lib,
        kmsg=str(kmsg),
        mig_minors=str(tmp_path / "mig-minors"),
        boot_id=str(tmp_path / "boot_id"),
        host=snap["host"],
    )


@pytest.mark.parametrize("name", [n for n in SNAPSHOTS if n != "nvml_error.json"])
def test_pynvml_mapping_reproduces_each_recorded_snapshot(name, tmp_path):
    want = json.loads((DATA / name).read_text())
    got = source_for(want, tmp_path).snapshot()
    assert nvml.validate_snapshot(got) == []
    # A snapshot recorded before cpu_affinity existed reads as NVML not saying.
    assert got["gpus"] == [g if "cpu_affinity" in g else g | {"cpu_affinity": None} for g in want["gpus"]]
    assert got["xid_events"] == want["xid_events"]
    assert (got["boot_id"], got["driver_version"], got["error"]) == (want["boot_id"], want["driver_version"], None)


def test_init_failure_becomes_an_error_snapshot(tmp_path):
    fake = fake_pynvml({"gpus": [], "driver_version": None})

    def boom():
        raise FakeError("Driver Not Loaded")

    fake.nvmlInit = boom
    snap = nvml.NvmlSource(nvml.PynvmlLib(fake), kmsg=None, boot_id=str(tmp_path / "x")).snapshot()
    assert snap["gpus"] == [] and "Driver Not Loaded" in snap["error"]


def test_real_pynvml_never_raises(tmp_path):
    """With or without a GPU here, the real adapter returns a valid snapshot."""
    snap = nvml.NvmlSource(kmsg=None).snapshot()
    assert nvml.validate_snapshot(snap) == []
    if snap["error"]:
        assert snap["gpus"] == []


def test_replay_requires_a_private_file(tmp_path):
    p = tmp_path / "s.json"
    p.write_text((DATA / "h100x8_healthy.json").read_text())
    p.chmod(0o644)
    assert len(nvml.ReplaySource(str(p)).snapshot()["gpus"]) == 8
    p.chmod(0o666)
    with pytest.raises(nvml.SnapshotError, match="writable"):
        nvml.ReplaySource(str(p)).snapshot()
    assert nvml.ReplaySource(str(p), trusted=False).snapshot()["host"] == "b-gpu1"
    p.chmod(0o644)
    if os.geteuid() == 0:
        os.chown(p, 65534, 65534)
        with pytest.raises(nvml.SnapshotError, match="owned by uid 65534"):
            nvml.ReplaySource(str(p)).snapshot()
        os.chown(p, 0, 0)
    link = tmp_path / "link.json"
    link.symlink_to(p)
    with pytest.raises(nvml.SnapshotError, match="not a regular file"):
        nvml.ReplaySource(str(link)).snapshot()


@pytest.mark.parametrize(
    "text,problem",
    [
        ("[]", "JSON object"),
        ('{"schema": "x", "version": 1, "gpus": []}', "schema"),
        ('{"schema": "slurm-pool/gpu-snapshot", "version": 2, "gpus": []}', "version"),
        ('{"schema": "slurm-pool/gpu-snapshot", "version": 1, "gpus": [{}]}', "index"),
        ("{not json", "not JSON"),
    ],
)
def test_replay_rejects_malformed_snapshots(tmp_path, text, problem):
    p = tmp_path / "s.json"
    p.write_text(text)
    with pytest.raises(nvml.SnapshotError, match=problem):
        nvml.ReplaySource(str(p)).snapshot()


@pytest.mark.parametrize(
    "line,want",
    [
        ("NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus.", ("0000:3b:00", 79)),
        ("NVRM: Xid (PCI:0000:B1:00): 48, An uncorrectable double bit error", ("0000:b1:00", 48)),
        ("NVRM: Xid (PCI:00000000:18:00.0): 94, pid=7, Contained ECC error", ("0000:18:00", 94)),
        ("NVRM: GPU at PCI:0000:3b:00: GPU-abc", None),
        ("usb 1-1: new device", None),
    ],
)
def test_parse_xid(line, want):
    assert nvml.parse_xid(line) == want


def test_kmsg_records_and_pci_keys():
    assert nvml.parse_kmsg_record("3,1530,61234567,-;NVRM: Xid x") == (1530, 61234567, "NVRM: Xid x")
    assert nvml.parse_kmsg_record("garbage") is None
    assert nvml.pci_key("00000000:3B:00.0") == nvml.pci_key("0000:3b:00") == "0000:3b:00"


def test_mig_minors():
    got = nvml.parse_mig_minors(
        "config 1\nmonitor 2\ngpu0/gi2/access 21\ngpu0/gi2/ci0/access 22\ngpu1/gi7/access 201\n"
    )
    assert got == {(0, 2, None): 21, (0, 2, 0): 22, (1, 7, None): 201}


@pytest.mark.parametrize(
    "raw,slices,mib,want",
    [
        (b"MIG 3g.20gb", 3, 19968, "3g.20gb"),
        ("MIG 1g.10gb+me", 1, 9856, "1g.10gb+me"),
        (None, 2, 9856, "2g.10gb"),
        (b"", 7, 40192, "7g.39gb"),
    ],
)
def test_profile_names(raw, slices, mib, want):
    assert nvml.profile_name(raw, slices, mib) == want


def test_read_kmsg_on_a_dump_and_on_the_real_device(tmp_path):
    dump = tmp_path / "kmsg"
    dump.write_text(
        "6,1,10,-;hello\n3,2,20,-;NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.\n"
        " SUBSYSTEM=pci\n3,3,30,-;NVRM: Xid (PCI:0000:3b:00): 13, Graphics Exception"
    )
    assert [r[0] for r in nvml.read_kmsg(str(dump))] == [2, 3]
    assert nvml.read_kmsg(str(tmp_path / "absent")) is None
    real = nvml.read_kmsg()
    assert real is None or isinstance(real, list)


def test_processes_are_listed_only_when_asked_and_only_where_nvml_answers(tmp_path):
    want = json.loads((DATA / "h100x8_healthy.json").read_text())
    src = source_for(want, tmp_path)
    procs = {0: [types.SimpleNamespace(pid=31, usedGpuMemory=None), types.SimpleNamespace(pid=7)], 1: []}

    def running(h):
        if h not in procs:
            raise FakeError("Not Supported")
        return procs[h]

    src._lib.nv.nvmlDeviceGetComputeRunningProcesses = running
    assert all("processes" not in g for g in src.snapshot()["gpus"])  # not asked
    src.with_processes = True
    gpus = src.snapshot()["gpus"]
    assert gpus[0]["processes"] == [7, 31] and gpus[1]["processes"] == [] and "processes" not in gpus[2]
    assert nvml.gpu_processes({"gpus": gpus}) is None  # GPU 2 could not say


@pytest.mark.parametrize("swap", ["symlink", "rename"])
def test_replay_reads_the_file_it_checked(tmp_path, monkeypatch, swap):
    # A file swapped between the owner check and the open: before, open() followed the new link.
    p = tmp_path / "s.json"
    p.write_text((DATA / "h100x8_healthy.json").read_text())
    p.chmod(0o644)
    planted = tmp_path / "planted.json"
    planted.write_text((DATA / "ecc_failure.json").read_text())
    planted.chmod(0o666)
    checked = nvml.check_private_file

    def check_then_swap(path, **kw):
        st = checked(path, **kw)
        new = tmp_path / "new.json"
        if swap == "symlink":
            new.symlink_to(planted)
        else:
            shutil.copyfile(planted, new)
        os.replace(new, path)
        return st

    monkeypatch.setattr(nvml, "check_private_file", check_then_swap)
    with pytest.raises(nvml.SnapshotError):
        nvml.ReplaySource(str(p)).snapshot()


@pytest.mark.parametrize(
    "change,problem",
    [
        ({"xid_events": [{"seq": "nan", "xid": 79}]}, "xid_events"),
        ({"xid_events": [{"seq": "1_0", "xid": 79}]}, "xid_events"),
        ({"xid_events": [{"seq": 1}]}, "xid_events"),
        ({"xid_events": [{"seq": True, "xid": 79}]}, "xid_events"),
        ({"xid_events": ["79"]}, "xid_events"),
        ({"gpus": [{"index": True}]}, "index"),
        ({"gpus": [{"index": 0, "ecc": "x"}]}, "ecc"),
        ({"gpus": [{"index": 0, "remapped_rows": [1]}]}, "remapped_rows"),
        ({"gpus": [{"index": 0, "retired_pages": "pending"}]}, "retired_pages"),
        ({"gpus": [{"index": 0, "mig_enabled": True, "mig_devices": "abc"}]}, "mig_devices"),
    ],
)
def test_replay_refuses_wrong_types_the_checks_would_trip_on(tmp_path, change, problem):
    # Before: each one passed validation and then crashed the health check (ValueError, KeyError,
    # AttributeError), or counted a string of digits as a kernel sequence number.
    snap = {**json.loads((DATA / "h100x8_healthy.json").read_text()), "xid_source": "replay", **change}
    p = tmp_path / "s.json"
    p.write_text(json.dumps(snap))
    p.chmod(0o644)
    with pytest.raises(nvml.SnapshotError, match=problem):
        nvml.ReplaySource(str(p)).snapshot()
