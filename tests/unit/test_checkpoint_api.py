"""The training-side API: loading falls back past damage, optional torch helpers."""

from __future__ import annotations

import pickle
import sys
import types

import pytest

from slurm_pool.adapters.runner import RecordingRunner
from slurm_pool.checkpoint import api, store


def _ck(tmp_path, **env):
    base = {"SLURM_POOL_NODE_CONF": str(tmp_path / "absent.conf"), **env}
    return api.Checkpointer(str(tmp_path / "ck"), install=False, env=base, runner=RecordingRunner())


def test_load_falls_back_past_a_damaged_newest(tmp_path):
    ck = _ck(tmp_path)
    assert ck.latest() is None and ck.load() is None
    ck.save(1, b"one")
    bad = ck.save(2, b"two")
    with open(bad.file(), "r+b") as fh:
        fh.write(b"T")  # same size, wrong hash
    assert ck.load() == b"one"
    with pytest.raises(store.CorruptCheckpoint):
        ck.load(bad)


def test_default_directory_and_restart_count(tmp_path):
    conf = tmp_path / "node.conf"
    conf.write_text(f"checkpoint_base_dir = {tmp_path / 'base'}\n")
    ck = api.Checkpointer(
        install=False,
        env={
            "SLURM_JOB_ID": "77",
            "SLURM_JOB_USER": "carol",
            "SLURM_RESTART_COUNT": "3",
            "SLURM_POOL_NODE_CONF": str(conf),
        },
    )
    assert ck.directory == str(tmp_path / "base" / "carol" / "77") and ck.restart_count == 3
    assert api.restart_count({"SLURM_RESTART_COUNT": "2"}) == 2 and api.restart_count({}) == 0


def test_exit_code_means_requeue(tmp_path):
    with pytest.raises(SystemExit) as exc:
        _ck(tmp_path).exit()
    assert exc.value.code == 85


def test_torch_helpers_with_a_stand_in_torch(tmp_path, monkeypatch):
    fake = types.ModuleType("torch")
    fake.save = lambda obj, fh: pickle.dump(obj, fh)
    fake.load = lambda fh, map_location=None, weights_only=False: pickle.load(fh)
    monkeypatch.setitem(sys.modules, "torch", fake)
    from slurm_pool.checkpoint import torch_helpers

    ck = _ck(tmp_path)
    assert torch_helpers.load_torch(ck) is None
    torch_helpers.save_torch(ck, 10, {"model": [1, 2, 3], "step": 10})
    assert torch_helpers.load_torch(ck) == {"model": [1, 2, 3], "step": 10}
    assert ck.latest().files.keys() == {"state.pt"}


def test_package_exports_are_lazy():
    import slurm_pool.checkpoint as cp

    assert cp.EXIT_REQUEUE == 85 and cp.Checkpointer is api.Checkpointer and cp.latest is store.latest
    with pytest.raises(AttributeError):
        cp.nonexistent  # noqa: B018
