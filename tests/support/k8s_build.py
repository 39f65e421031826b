"""Build and cache the Go programs of the test control plane.

The versions are pinned by two wrapper modules under ``tests/k8s/go``:
``kube`` requires ``k8s.io/kubernetes`` (its staging modules replaced with the
matching ``v0.X.Y``) and ``go.etcd.io/etcd/server/v3``; ``kwok`` requires
``sigs.k8s.io/kwok``, which is built against its own Kubernetes libraries.  One
``go build`` per module compiles its programs, so the packages they share are
compiled once.  The binaries are cached outside the repository, under
``$SLURM_POOL_K8S_CACHE`` (default ``~/.cache/slurm-pool``), in a directory
named after the pinned versions and a hash of the module files, so a changed
pin builds afresh and an unchanged one is reused.

KServe's controller manager (``github.com/kserve/kserve/cmd/manager``) has a
third wrapper module, ``kserve`` (which copies kserve's own ``replace`` lines),
and a cache directory of its own (:func:`kserve_toolset`): its YAML (CRDs,
ConfigMap, runtimes) is read from the Go module cache at run time
(:attr:`Toolset.module_source`), never copied into the repository.

Volcano's scheduler and controller manager (``volcano.sh/volcano``) have a
fourth wrapper module, ``volcano`` (:func:`volcano_toolset`).  Its API module
``volcano.sh/apis`` is not served by the Go module proxy, so the wrapper
replaces it with ``./apis``, which is never committed: the build copies the
wrapper into its staging directory, unpacks ``volcano/volcano-apis-*.tar.gz``
from the shared folder (:func:`shared_dir`) there after checking its sha256,
and builds in that copy.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
from dataclasses import dataclass, field
from pathlib import Path

#: Wrapper module (subdirectory) -> binary name -> Go main package.
MODULES: dict[str, dict[str, str]] = {
    "kube": {
        "kube-apiserver": "k8s.io/kubernetes/cmd/kube-apiserver",
        "kube-controller-manager": "k8s.io/kubernetes/cmd/kube-controller-manager",
        "kube-scheduler": "k8s.io/kubernetes/cmd/kube-scheduler",
        "etcd": "go.etcd.io/etcd/server/v3",
    },
    "kwok": {"kwok": "sigs.k8s.io/kwok/cmd/kwok"},
}
PROGRAMS: dict[str, str] = {name: pkg for progs in MODULES.values() for name, pkg in progs.items()}
#: ``go build -o DIR`` names a binary after its package path's last element
#: (the element before a ``/vN`` suffix).
_GO_OUTPUT_NAME = {"etcd": "server"}
#: Component -> (wrapper module, Go module whose version is the pin).
_PINNED = {
    "k8s": ("kube", "k8s.io/kubernetes"),
    "etcd": ("kube", "go.etcd.io/etcd/server/v3"),
    "kwok": ("kwok", "sigs.k8s.io/kwok"),
}
#: KServe's wrapper module, its program and pin.
KSERVE_MODULES: dict[str, dict[str, str]] = {"kserve": {"kserve-manager": "github.com/kserve/kserve/cmd/manager"}}
KSERVE_MODULE = "github.com/kserve/kserve"
_KSERVE_PINNED = {"kserve": ("kserve", KSERVE_MODULE)}
_GO_OUTPUT_NAME["kserve-manager"] = "manager"
#: Volcano's wrapper module, its programs and pin.
VOLCANO_MODULES: dict[str, dict[str, str]] = {
    "volcano": {
        "vc-scheduler": "volcano.sh/volcano/cmd/scheduler",
        "vc-controller-manager": "volcano.sh/volcano/cmd/controller-manager",
    }
}
VOLCANO_MODULE = "volcano.sh/volcano"
_VOLCANO_PINNED = {"volcano": ("volcano", VOLCANO_MODULE)}
_GO_OUTPUT_NAME["vc-scheduler"] = "scheduler"
_GO_OUTPUT_NAME["vc-controller-manager"] = "controller-manager"
#: Wrapper module -> the Go module whose files (YAML) the tests read from the module cache.
_SOURCE_MODULE = {"kserve": KSERVE_MODULE, "volcano": VOLCANO_MODULE}
_STAMP = "build.json"


class BuildError(RuntimeError):
    """The Go programs could not be built or found."""


def cache_root() -> Path:
    """The cache root: ``$SLURM_POOL_K8S_CACHE`` or ``~/.cache/slurm-pool``."""
    env = os.environ.get("SLURM_POOL_K8S_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "slurm-pool"


def shared_dir() -> Path:
    """The shared folder: ``$SLURM_POOL_SHARED``, else ``shared/`` beside the checkout."""
    env = os.environ.get("SLURM_POOL_SHARED")
    return Path(env) if env else Path(__file__).resolve().parents[3] / "shared"


def default_module_dir() -> Path:
    """The wrapper Go module, found relative to a source checkout."""
    env = os.environ.get("SLURM_POOL_K8S_GOMOD")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[1] / "k8s" / "go"


def pinned_versions(module_dir: Path, pinned: dict[str, tuple[str, str]] | None = None) -> dict[str, str]:
    """Read the pinned versions of the components from the wrappers' go.mod files."""
    versions: dict[str, str] = {}
    for key, (sub, module) in (pinned or _PINNED).items():
        gomod = module_dir / sub / "go.mod"
        try:
            text = gomod.read_text()
        except OSError as exc:
            raise BuildError(f"cannot read the wrapper module {gomod}: {exc}") from exc
        found = re.search(rf"^\s*(?:require\s+)?{re.escape(module)}\s+(v\S+)\s*$", text, re.MULTILINE)
        if not found:
            raise BuildError(f"{gomod} does not require {module}")
        versions[key] = found.group(1)
    return versions


def _ldflags(k8s_version: str) -> str:
    """Link flags: strip symbols and stamp the Kubernetes version into the binaries."""
    major, minor = k8s_version.lstrip("v").split(".")[:2]
    flags = ["-s", "-w"]
    for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        flags += [
            f"-X {pkg}.gitVersion={k8s_version}",
            f"-X {pkg}.gitMajor={major}",
            f"-X {pkg}.gitMinor={minor}",
            f"-X {pkg}.gitTreeState=clean",
        ]
    return " ".join(flags)


@dataclass(frozen=True)
class Toolset:
    """One cached build: where the binaries are and what they were built from."""

    module_dir: Path
    versions: dict[str, str]
    directory: Path
    modules: dict[str, dict[str, str]] = field(default_factory=lambda: MODULES)

    @classmethod
    def for_module(
        cls,
        module_dir: Path | None = None,
        modules: dict[str, dict[str, str]] | None = None,
        pinned: dict[str, tuple[str, str]] | None = None,
    ) -> "Toolset":
        """The toolset pinned by the wrapper modules in ``module_dir`` (default: the checkout's)."""
        module_dir = module_dir or default_module_dir()
        modules = modules or MODULES
        versions = pinned_versions(module_dir, pinned)
        digest = hashlib.sha256()
        for sub in modules:
            for name in ("go.mod", "go.sum"):
                path = module_dir / sub / name
                digest.update(path.read_bytes() if path.exists() else b"")
        if "k8s" in versions:
            digest.update(_ldflags(versions["k8s"]).encode())
        tag = "_".join(f"{k}-{v}" for k, v in versions.items())
        return cls(module_dir, versions, cache_root() / f"{tag}-{digest.hexdigest()[:10]}", modules)

    @property
    def programs(self) -> dict[str, str]:
        return {name: pkg for progs in self.modules.values() for name, pkg in progs.items()}

    @property
    def module_source(self) -> Path:
        """The Go module cache directory of the pinned KServe or Volcano module (its YAML), recorded at build time."""
        recorded = self.build_info().get("module_source")
        if recorded and Path(recorded).is_dir():
            return Path(recorded)
        sub = next((s for s in self.modules if s in _SOURCE_MODULE), "kserve")
        return module_dir_of(self.module_dir / sub, _SOURCE_MODULE[sub])

    @property
    def bin_dir(self) -> Path:
        return self.directory / "bin"

    def binary(self, name: str) -> Path:
        return self.bin_dir / name

    def is_built(self) -> bool:
        return (self.directory / _STAMP).is_file() and all(os.access(self.binary(n), os.X_OK) for n in self.programs)

    def build_info(self) -> dict:
        """What the stamp records (versions, go version, build seconds)."""
        try:
            return json.loads((self.directory / _STAMP).read_text())
        except (OSError, ValueError):
            return {}

    def build(self, force: bool = False, log=sys.stderr) -> dict:
        """Build the programs unless cached; returns the build record."""
        self.directory.parent.mkdir(parents=True, exist_ok=True)
        lock_path = self.directory.parent / (self.directory.name + ".lock")
        with open(lock_path, "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # one build at a time; waiters reuse it
            if self.is_built() and not force:
                return self.build_info()
            return self._build_locked(log)

    def _build_locked(self, log) -> dict:
        go = shutil.which("go")
        if not go:
            raise BuildError("the Go toolchain (`go`) is not on PATH; it is needed to build the control plane")
        staging = self.directory.with_name(self.directory.name + ".partial")
        shutil.rmtree(staging, ignore_errors=True)
        (staging / "bin").mkdir(parents=True)
        env = dict(os.environ, CGO_ENABLED="0")
        print(f"building the test control plane ({self.versions}) into {self.directory}", file=log, flush=True)
        started = time.monotonic()
        sources: dict[str, Path] = {}
        for sub, programs in self.modules.items():
            ldflags = _ldflags(self.versions["k8s"]) if sub == "kube" else "-s -w"
            workdir = self.module_dir / sub
            if sub == "volcano":
                try:
                    workdir = stage_volcano(workdir, staging / "src" / sub)
                except BuildError:
                    shutil.rmtree(staging, ignore_errors=True)
                    raise
            cmd = [
                "nice",
                "-n",
                "19",
                go,
                "build",
                "-trimpath",
                f"-ldflags={ldflags}",
                "-o",
                str(staging / "bin") + os.sep,
                *programs.values(),
            ]
            print(f"  (cd {workdir} && {' '.join(cmd)})", file=log, flush=True)
            done = subprocess.run(cmd, cwd=workdir, env=env, stdout=log, stderr=subprocess.STDOUT)
            if done.returncode != 0:
                shutil.rmtree(staging, ignore_errors=True)
                raise BuildError(f"go build failed with exit status {done.returncode} in {workdir}: {' '.join(cmd)}")
            if sub in _SOURCE_MODULE:
                sources[sub] = module_dir_of(workdir, _SOURCE_MODULE[sub])
        seconds = round(time.monotonic() - started, 1)
        for name, out_name in _GO_OUTPUT_NAME.items():
            if name in self.programs:
                (staging / "bin" / out_name).rename(staging / "bin" / name)
        go_version = subprocess.run([go, "version"], capture_output=True, text=True).stdout.strip()
        record = {
            "versions": self.versions,
            "go": go_version,
            "build_seconds": seconds,
            "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        for source in sources.values():
            record["module_source"] = str(source)
        shutil.rmtree(staging / "src", ignore_errors=True)
        (staging / _STAMP).write_text(json.dumps(record, indent=2) + "\n")
        shutil.rmtree(self.directory, ignore_errors=True)
        staging.rename(self.directory)
        print(f"built in {seconds}s", file=log, flush=True)
        return record


def built(tools: Toolset, what: str) -> Toolset:
    """``tools`` once built: at once when cached, else after the build that holds its lock (``make test``
    starts the builds beside the tests), else built now; a BuildError says why it cannot be built."""
    if not tools.is_built():
        print(f"\n{what}: not in the cache yet, waiting for its build ({tools.directory})", file=sys.__stderr__)
        try:
            tools.build(log=sys.__stderr__)
        except BuildError as exc:
            raise BuildError(
                f"{what} is not built and could not be built: {exc} (build it with `python3 -m tests.support.k8s build`; "
                "needs Go and the Go module proxy)"
            ) from None
    return tools


def require_binaries(module_dir: Path | None = None) -> Toolset:
    """The control plane's cached toolset (a cold build takes about 10 minutes on 2 cores)."""
    return built(Toolset.for_module(module_dir), "the test Kubernetes control plane")


def module_dir_of(wrapper: Path, module: str) -> Path:
    """Where the Go module cache holds ``module`` as the wrapper module ``wrapper`` pins it."""
    go = shutil.which("go")
    if not go:
        raise BuildError(
            "the Go toolchain (`go`) is not on PATH; it locates KServe's and kwok's files in the module cache"
        )
    done = subprocess.run(
        [go, "list", "-m", "-f", "{{.Dir}}", module], cwd=wrapper, capture_output=True, text=True, check=False
    )
    path = Path(done.stdout.strip())
    if done.returncode != 0 or not done.stdout.strip() or not path.is_dir():
        raise BuildError(f"cannot find {module} in the Go module cache (go list: {done.stderr.strip()[:300]})")
    return path


def kserve_toolset(module_dir: Path | None = None) -> Toolset:
    """KServe's controller manager, pinned by the ``kserve`` wrapper module."""
    return Toolset.for_module(module_dir, KSERVE_MODULES, _KSERVE_PINNED)


def require_kserve(module_dir: Path | None = None) -> Toolset:
    """The cached KServe build (about 5 minutes on 2 cores when cold)."""
    return built(kserve_toolset(module_dir), "KServe's controller")


VOLCANO_APIS = "volcano-apis-{version}.tar.gz"


def stage_volcano(wrapper: Path, dest: Path) -> Path:
    """Copy the Volcano wrapper module to ``dest`` and unpack ``volcano.sh/apis`` (sha256 checked) into it."""
    version = pinned_versions(wrapper.parent, _VOLCANO_PINNED)["volcano"]
    archive = shared_dir() / "volcano" / VOLCANO_APIS.format(version=version)
    try:
        expected = archive.with_name(archive.name + ".sha256").read_text().split()[0]
        actual = hashlib.sha256(archive.read_bytes()).hexdigest()
    except (OSError, IndexError) as exc:
        raise BuildError(f"cannot read Volcano's API module archive {archive} or its .sha256: {exc}") from exc
    if not re.fullmatch(r"[0-9a-f]{64}", expected) or actual != expected:
        raise BuildError(f"{archive}: sha256 {actual} does not match its .sha256 file ({expected[:64]!r})")
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    for name in ("go.mod", "go.sum", "tools.go"):
        shutil.copyfile(wrapper / name, dest / name)
    with tarfile.open(archive) as tar:
        members = tar.getmembers()
        for m in members:
            if not (m.isfile() or m.isdir()) or not re.fullmatch(r"apis(/[\w.+@-]+)*/?", m.name) or ".." in m.name:
                raise BuildError(f"{archive}: unexpected member {m.name!r} (only files and folders under apis/)")
        tar.extractall(dest, members=members)  # noqa: S202 - members checked above
    return dest


def volcano_toolset(module_dir: Path | None = None) -> Toolset:
    """Volcano's scheduler and controller manager, pinned by the ``volcano`` wrapper module."""
    return Toolset.for_module(module_dir, VOLCANO_MODULES, _VOLCANO_PINNED)


def require_volcano(module_dir: Path | None = None) -> Toolset:
    """The cached Volcano build (about 8 minutes on 2 cores when cold; needs the shared volcano-apis archive)."""
    return built(volcano_toolset(module_dir), "Volcano")
