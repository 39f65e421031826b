"""The whole test suite as concurrent streams, with the cached builds beside them (``make test``).

Most of the daemon tests wait rather than compute (a job to start, a node to
register, a pod to go), so one pytest after another leaves the CPUs idle.
Here the suite runs as three streams side by side, each a plain pytest with
its own real daemons (clusters on free ports in private state directories):

* ``unit``: every test that needs no daemon, over both cores (pytest-xdist,
  one file per worker at a time, so a module's fixtures keep their order);
* ``daemons-22.05``: every daemon test on Debian's Slurm (``slurm`` or ``k8s``);
* ``daemons-<new>``: the ``slurm`` tests again on the newer Slurm built from
  ``../shared/slurm`` (``--slurm-new``, default 26.05).

Each daemon stream runs over two workers with a cluster each (:data:`DAEMON_WORKERS`).

The cached builds (:data:`BUILDS`, make targets) start at once as well.  A
stream waits only for the builds it cannot start without (the newer Slurm);
tests that need another build (the control plane, KServe, Volcano, the
notebook and torch environments) wait for it inside their fixtures, which
take the build's lock, and run last in their stream (``tests/support/collect.py``).
A build already cached is a quick no-op.

Each phase's output goes to ``<logs>/<phase>.log`` and is printed whole when
the phase ends; at the end come each phase's times (also in
``<logs>/phases.json``) and one line adding up every stream's counts.  The
exit status is non-zero if any phase failed.

    python3 -m tests.support.streams [--logs DIR] [--slurm-new 26.05] [-- PYTEST_ARGS...]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Sequence

REPO = Path(__file__).resolve().parents[2]
#: How many of the slowest tests each stream lists.
DURATIONS = 30
#: The make targets of the cached builds (each a quick no-op when cached) -> the builds each starts after.  The
#: newer Slurm goes first (a stream waits for it); the compiling builds then share the CPUs, the downloads start at once.
BUILDS: dict[str, tuple[str, ...]] = {
    "slurm-build-plain": (),
    "notebooks-build": (),
    "elastic-build": (),
    "k8s-build": ("slurm-build-plain",),
    "slurm-build-nolua": ("slurm-build-plain",),
}


#: Each daemon stream over two workers, each with its own cluster and, once it needs one, its own control
#: plane (a module's tests on one worker: ``tests/support/collect.py``): the daemon tests mostly wait, so four
#: clusters share two cores.
DAEMON_WORKERS = ("-n", "2", "--dist", "loadgroup")


@dataclass(frozen=True)
class Stream:
    """One pytest run: its arguments, environment, niceness and the builds it starts after."""

    name: str
    args: tuple[str, ...]
    env: tuple[tuple[str, str], ...] = ()
    after: tuple[str, ...] = ()
    #: The unit tests compute; a higher niceness keeps them from slowing the daemons the other streams wait on,
    #: and from the Slurm build a stream waits for (nice 10); the Go builds, needed last, run at nice 19.
    nice: int = 0


def streams(slurm_new: str) -> tuple[Stream, ...]:
    """The streams of ``make test`` (together: every test, and the daemon tests once more on ``slurm_new``)."""
    return (
        Stream("unit", ("-n", "2", "--dist", "loadfile", "-m", "not slurm and not k8s"), nice=15),
        Stream("daemons-22.05", (*DAEMON_WORKERS, "-m", "slurm or k8s")),
        Stream(
            f"daemons-{slurm_new}",
            (*DAEMON_WORKERS, "-m", "slurm"),
            env=(("SLURM_POOL_TEST_SLURM", slurm_new),),
            after=("slurm-build-plain",),
        ),
    )


@dataclass
class Phase:
    """A running or finished build or stream."""

    name: str
    argv: list[str]
    log: Path
    after: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    nice: int = 0
    started: float | None = None
    ended: float | None = None
    returncode: int | None = None
    proc: subprocess.Popen | None = None

    def start(self, t0: float) -> None:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        out = open(self.log, "wb")  # noqa: SIM115 - closed when the phase ends
        argv = (["nice", "-n", str(self.nice)] if self.nice else []) + self.argv
        self.proc = subprocess.Popen(
            argv,
            cwd=REPO,
            env={**os.environ, **self.env},
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: stopped whole on an interrupt
        )
        out.close()
        self.started = time.monotonic() - t0

    def poll(self, t0: float) -> bool:
        """True once the phase has ended (recording when and how)."""
        if self.returncode is not None:
            return True
        if self.proc is None or self.proc.poll() is None:
            return False
        self.returncode = self.proc.returncode
        self.ended = time.monotonic() - t0
        return True

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
                self.proc.wait(timeout=30)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                try:
                    os.killpg(self.proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass

    @property
    def ok(self) -> bool:
        return self.returncode == 0


#: pytest's closing line, e.g. "== 3 failed, 7022 passed, 2 skipped in 366.05s (0:06:06) ==" or "7060 passed in 1.2s".
_SUMMARY = re.compile(r"^=*\s*((?:\d+ [a-z]+(?:, )?)+) in [0-9.]+s\b")
_COUNT = re.compile(r"(\d+) ([a-z]+)")


def counts(log_text: str) -> dict[str, int]:
    """The counts of pytest's last closing line in ``log_text`` ({} when it has none)."""
    found: dict[str, int] = {}
    for line in log_text.splitlines():
        m = _SUMMARY.match(line.strip())
        if m:
            found = {}
            for n, what in _COUNT.findall(m.group(1)):
                key = {"error": "errors", "warning": "warnings"}.get(what, what)
                found[key] = found.get(key, 0) + int(n)
    return found


def clock(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    s = int(round(seconds))
    return f"{s // 60}:{s % 60:02d}"


def table(phases: Sequence[Phase]) -> str:
    """Each phase's start, end and length (minutes:seconds from the start) and its result."""
    rows = [f"{'phase':<22} {'start':>6} {'end':>6} {'took':>6}  result"]
    for p in phases:
        took = p.ended - p.started if p.started is not None and p.ended is not None else None
        result = "not started" if p.started is None else ("ok" if p.ok else f"exit {p.returncode}")
        rows.append(f"{p.name:<22} {clock(p.started):>6} {clock(p.ended):>6} {clock(took):>6}  {result}")
    return "\n".join(rows)


def run(slurm_new: str, logs: Path, pytest_args: Sequence[str], out: IO[str] = sys.stdout) -> int:
    """Run the builds and the streams; print each phase's log as it ends, then the times and the totals."""
    t0 = time.monotonic()
    py = sys.executable
    # ``-o deps``: make test has just run it; the builds must not run install-deps.sh side by side.
    builds = [Phase(b, ["make", "-s", "-o", "deps", b], logs / f"{b}.log", after) for b, after in BUILDS.items()]
    tests = [
        Phase(
            s.name,
            [py, "-m", "pytest", "-q", f"--durations={DURATIONS}", *s.args, *pytest_args],
            logs / f"{s.name}.log",
            s.after,
            env=dict(s.env),
            nice=s.nice,
        )
        for s in streams(slurm_new)
    ]
    phases = [*builds, *tests]
    by_name = {p.name: p for p in phases}
    say = lambda msg: print(f"[{clock(time.monotonic() - t0)}] {msg}", file=out, flush=True)  # noqa: E731
    reported: set[str] = set()

    def handle(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, handle)
    try:
        while True:
            for p in phases:
                if p.started is not None and p.name not in reported and p.poll(t0):
                    reported.add(p.name)
                    say(
                        f"{p.name}: {'ok' if p.ok else f'FAILED (exit {p.returncode})'} after {clock(p.ended - p.started)}"
                    )  # type: ignore[operator]
                    print(f"----- {p.name} ({p.log.name}) -----", file=out)
                    print(p.log.read_text(errors="replace").rstrip(), file=out)
                    print(f"----- end of {p.name} -----", file=out, flush=True)
            for p in phases:
                if p.started is not None:
                    continue
                needs = [by_name[b] for b in p.after]
                if any(b.returncode not in (None, 0) for b in needs):
                    p.returncode, p.ended = 1, time.monotonic() - t0
                    p.started = p.ended
                    reported.add(p.name)
                    say(f"{p.name}: not run, a build it needs failed")
                elif all(b.ok for b in needs):
                    p.start(t0)
                    say(f"{p.name}: started ({shlex.join(p.argv)}{''.join(f' {k}={v}' for k, v in p.env.items())})")
            if len(reported) == len(phases):
                break
            time.sleep(1)
    except KeyboardInterrupt:
        for p in phases:
            p.stop()
        raise
    total: dict[str, int] = {}
    for p in tests:
        if p.log.exists():
            for k, v in counts(p.log.read_text(errors="replace")).items():
                total[k] = total.get(k, 0) + v
    print(f"\n== phases of make test (minutes:seconds from its start; logs in {logs})", file=out)
    print(table(phases), file=out)
    record = {
        "phases": [{"name": p.name, "start": p.started, "end": p.ended, "returncode": p.returncode} for p in phases],
        "counts": {p.name: counts(p.log.read_text(errors="replace")) if p.log.exists() else {} for p in tests},
    }
    (logs / "phases.json").write_text(json.dumps(record, indent=2) + "\n")
    failed = total.get("failed", 0) + total.get("errors", 0)
    extra = "".join(f", {total[k]} {k}" for k in ("skipped", "xfailed") if total.get(k))
    print(f"total: {total.get('passed', 0)} passed, {failed} failed{extra}", file=out, flush=True)
    return 0 if all(p.ok for p in phases) and failed == 0 and total.get("passed", 0) > 0 else 1


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m tests.support.streams", description=__doc__)
    ap.add_argument("--slurm-new", default="26.05", help="the newer Slurm the daemon tests run on again")
    ap.add_argument("--logs", type=Path, default=REPO / "build" / "test-logs", help="where each phase's log goes")
    ap.add_argument("pytest_args", nargs="*", help="more pytest arguments, for every stream (after --)")
    args = ap.parse_args(argv)
    try:
        return run(args.slurm_new, args.logs, args.pytest_args)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
