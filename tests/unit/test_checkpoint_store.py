"""Checkpoint store: atomic commits, torn checkpoints, retention, crash safety."""

from __future__ import annotations

import hashlib
import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from slurm_pool.checkpoint import store


def test_atomic_write_replaces_whole_file(tmp_path):
    p = tmp_path / "f.json"
    store.atomic_write(str(p), b"one")
    store.atomic_write(str(p), b"two" * 1000)
    assert p.read_bytes() == b"two" * 1000
    assert [x.name for x in tmp_path.iterdir()] == ["f.json"]  # no temp file left


def test_roundtrip_and_latest(tmp_path):
    d = str(tmp_path)
    assert store.latest(d) is None
    store.write(d, 10, {"state": b"ten"})
    info = store.write(d, 20, {"state": b"twenty", "extra.bin": lambda fh: fh.write(b"x" * 5000)}, meta={"why": "test"})
    assert info.step == 20 and info.meta == {"why": "test"}
    got = store.latest(d)
    assert got is not None and got.step == 20
    assert store.load(got) == b"twenty"
    assert store.load(got, "extra.bin") == b"x" * 5000
    assert store.verify(got)


def test_resaving_an_intact_step_is_a_noop(tmp_path):
    d = str(tmp_path)
    first = store.write(d, 5, {"state": b"a"})
    again = store.write(d, 5, {"state": b"b"})
    assert again.time == first.time and store.load(again) == b"a"


def test_damaged_step_is_replaced_on_resave(tmp_path):
    d = str(tmp_path)
    info = store.write(d, 5, {"state": b"aaaa"})
    with open(info.file(), "r+b") as fh:
        fh.write(b"X")  # same size, wrong hash
    new = store.write(d, 5, {"state": b"bbbb"})
    assert store.load(new) == b"bbbb"


def _corrupt_manifest(path):
    m = os.path.join(path, store.MANIFEST)
    doc = json.load(open(m))
    doc["step"] = doc["step"]  # unchanged body, broken checksum below
    doc["checksum"] = "0" * 64
    open(m, "w").write(json.dumps(doc))


def _truncate_file(path):
    f = os.path.join(path, "state")
    os.truncate(f, os.path.getsize(f) // 2)


def _drop_manifest(path):
    os.unlink(os.path.join(path, store.MANIFEST))


def _garbage_manifest(path):
    open(os.path.join(path, store.MANIFEST), "wb").write(b'{"format": "slurm-pool-chec')


def _wrong_step(path):
    m = os.path.join(path, store.MANIFEST)
    doc = json.load(open(m))
    body = {k: v for k, v in doc.items() if k != "checksum"}
    body["step"] = 999
    open(m, "wb").write(store._manifest_bytes(body))


@pytest.mark.parametrize("damage", [_corrupt_manifest, _truncate_file, _drop_manifest, _garbage_manifest, _wrong_step])
def test_latest_skips_torn_checkpoints(tmp_path, damage):
    d = str(tmp_path)
    store.write(d, 1, {"state": b"good" * 100})
    bad = store.write(d, 2, {"state": b"newer" * 100})
    damage(bad.path)
    got = store.latest(d)
    assert got is not None and got.step == 1
    assert store.load(got) == b"good" * 100


def test_bit_flip_is_caught_by_full_verify_and_load(tmp_path):
    d = str(tmp_path)
    store.write(d, 1, {"state": b"good"})
    bad = store.write(d, 2, {"state": b"newer"})
    with open(bad.file(), "r+b") as fh:
        fh.write(b"N")  # same size
    assert store.latest(d).step == 2  # manifest-level check cannot see it ...
    assert store.latest(d, verify_data=True).step == 1  # ... a full verify can
    with pytest.raises(store.CorruptCheckpoint):
        store.load(bad)


def test_temp_dirs_are_ignored_and_cleaned(tmp_path):
    d = str(tmp_path)
    os.mkdir(tmp_path / ".tmp-ckpt-7-otherhost-1-abcd")  # a writer elsewhere, still fresh: kept
    dead = tmp_path / ".tmp-ckpt-8-{}-999999999-abcd".format(store.socket.gethostname().split(".")[0].replace("-", "_"))
    os.mkdir(dead)
    (dead / "state").write_bytes(b"partial")
    assert store.latest(d) is None
    store.write(d, 3, {"state": b"x"})
    names = sorted(os.listdir(d))
    assert dead.name not in names  # its pid is gone: removed
    assert ".tmp-ckpt-7-otherhost-1-abcd" in names
    assert store.latest(d).step == 3


def test_failed_payload_leaves_nothing(tmp_path):
    d = str(tmp_path)
    store.write(d, 1, {"state": b"ok"})

    def boom(fh):
        fh.write(b"half")
        raise RuntimeError("writer crashed")

    with pytest.raises(RuntimeError):
        store.write(d, 2, {"state": boom})
    assert store.steps(d) == [1]
    assert not [n for n in os.listdir(d) if n.startswith(".tmp")]


def test_retention_keeps_newest(tmp_path):
    d = str(tmp_path)
    for s in range(1, 7):
        store.write(d, s * 10, {"state": str(s).encode()}, keep=3)
    assert store.steps(d) == [40, 50, 60]
    store.write(d, 70, {"state": b"7"}, keep=0)
    assert store.steps(d) == [40, 50, 60, 70]


@pytest.mark.parametrize("damage", [_corrupt_manifest, _truncate_file, _drop_manifest, _garbage_manifest, _wrong_step])
def test_retention_never_counts_torn_checkpoints(tmp_path, damage):
    # Issue 11, defect 5: keep=2 with two torn higher-numbered steps deleted the resume point and the new save.
    d = str(tmp_path)
    store.write(d, 10, {"state": b"old"}, keep=0)
    store.write(d, 20, {"state": b"resume point"}, keep=0)
    for step in (80, 90):
        damage(store.write(d, step, {"state": b"torn" * 10}, keep=0).path)
    new = store.write(d, 30, {"state": b"new save"}, keep=2)
    assert store.load(new) == b"new save"
    assert {20, 30} <= set(store.steps(d)) and 10 not in store.steps(d)
    assert [c.step for c in store.list_checkpoints(d)] == [30, 20]


def test_retention_without_a_complete_checkpoint_removes_nothing(tmp_path):
    d = str(tmp_path)
    for step in (1, 2, 3):
        _drop_manifest(store.write(d, step, {"state": b"x"}, keep=0).path)
    store.prune(d, 1)
    assert store.steps(d) == [1, 2, 3]


@pytest.mark.parametrize("name", ["../x", ".hidden", "MANIFEST.json", "a/b", ""])
def test_bad_file_names_rejected(tmp_path, name):
    with pytest.raises(ValueError):
        store.write(str(tmp_path), 1, {name: b"x"})


def test_step_range():
    with pytest.raises(ValueError):
        store.ckpt_name(-1)
    assert store.ckpt_name(12) == "ckpt-000000000012"


WRITER = textwrap.dedent("""
    import hashlib, sys
    from slurm_pool.checkpoint import store

    def payload(step):
        size = 50_000 + (step * 7919) % 600_000
        seed = hashlib.sha256(str(step).encode()).digest()
        return (seed * (size // 32 + 1))[:size]

    d, start = sys.argv[1], int(sys.argv[2])
    print("ready", flush=True)
    step = start
    while True:
        step += 1
        store.write(d, step, {"state": payload(step), "small": str(step).encode()}, keep=2)
""")


def _payload(step: int) -> bytes:
    size = 50_000 + (step * 7919) % 600_000
    seed = hashlib.sha256(str(step).encode()).digest()
    return (seed * (size // 32 + 1))[:size]


def test_sigkill_during_writes_never_leaves_a_bad_latest(tmp_path):
    """Kill a real writer at random moments; latest() must always load and match."""
    d = str(tmp_path / "ck")
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    rng = random.Random(1234)
    start = 0
    for _ in range(25):
        proc = subprocess.Popen([sys.executable, str(script), d, str(start)], stdout=subprocess.PIPE)
        assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
        time.sleep(rng.uniform(0.0, 0.25))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        info = store.latest(d)
        if info is None:
            continue
        assert store.load(info) == _payload(info.step)
        assert store.load(info, "small") == str(info.step).encode()
        assert store.latest(d, verify_data=True).step == info.step
        start = info.step + 1000  # later runs write fresh steps above it
    assert store.latest(d) is not None  # the writer got at least one checkpoint in


# -- issue 30: names matched in full, numbers that are numbers ------------------------------------


@pytest.mark.parametrize(
    "odd",
    ["ckpt-000000000009\n", "ckpt-٠٠٠٠٠٠٠٠٠٠٠٩", "ckpt-00000000000９", "ckpt-000000000009 ", "xckpt-000000000009"],
)
def test_only_ascii_checkpoint_names_matched_in_full_are_steps(tmp_path, odd):
    # Issue 30, defect 6: "$" matched before a trailing newline, and \d took any script's digits.
    store.write(str(tmp_path), 5, {"state": b"five"})
    (tmp_path / odd).mkdir()
    assert store.steps(str(tmp_path)) == [5]
    assert store.read_manifest(str(tmp_path / odd)) is None


@pytest.mark.parametrize("name", ["state\n", "stat٣", "state "])
def test_file_names_are_matched_in_full(tmp_path, name):
    with pytest.raises(ValueError, match="bad checkpoint file name"):
        store.write(str(tmp_path), 1, {name: b"x"})


def _forge(path, **changes):
    """Rewrite a manifest with ``changes`` and a checksum that matches them (what a user could do)."""
    doc = json.loads((path / store.MANIFEST).read_text())
    body = {k: v for k, v in doc.items() if k != "checksum"}
    body.update(changes)
    (path / store.MANIFEST).write_bytes(store._manifest_bytes(body))


@pytest.mark.parametrize(
    "changes",
    [
        {"step": True},
        {"time": float("nan")},
        {"time": "soon"},
        {"files": {"state": {"size": True, "sha256": "0"}}},
        {"files": {"state": {"size": 1.0, "sha256": "0"}}},
    ],
    ids=["step-true", "time-nan", "time-text", "size-true", "size-float"],
)
def test_a_manifest_with_numbers_that_are_not_numbers_is_not_a_checkpoint(tmp_path, changes):
    info = store.write(str(tmp_path), 1, {"state": b"x"})
    _forge(tmp_path / os.path.basename(info.path), **changes)
    assert store.read_manifest(info.path) is None


@pytest.mark.parametrize("value, want", [("3", 3), ("", 0), ("1_0", None), ("٣", None), ("x", None)])
def test_the_restart_count_in_a_manifest_is_read_strictly(tmp_path, monkeypatch, value, want):
    monkeypatch.setenv("SLURM_RESTART_COUNT", value)
    info = store.write(str(tmp_path), 1, {"state": b"x"})
    assert json.loads((tmp_path / os.path.basename(info.path) / store.MANIFEST).read_text())["restart_count"] == want
