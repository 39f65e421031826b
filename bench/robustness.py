#!/usr/bin/env python3
"""Malformed input against every CLI that reads a file or option, every parser of outside data, and the REST API.

For each target, ``--per-target`` inputs are made from a real document (the
example spec, a real plan, JSON recorded from each Slurm) with one to three
values swapped for odd ones, plus fixed hard cases (not UTF-8, deep nesting,
huge numbers, NaN, duplicate keys, empty files).  An input is *handled
cleanly* when:

* a CLI exits 0, or exits 1 or 2 with an ``error:`` line, prints no
  traceback, finishes within ``--timeout`` seconds, and (``render``) writes
  nothing when it fails;
* a parser returns, or raises its own documented error type;
* a REST API request gets a status under 500 and JSON: for an error a Problem with a message,
  naming the field when one value was changed (``run_api``).

Anything else is a *failure*.  Writes docs/robustness.md (the table and the
command) and exits 1 on any failure.

    python3 bench/robustness.py [--per-target 200] [--seed 1] [--out docs/robustness.md]
"""

from __future__ import annotations

import argparse
import copy
import json
import logging
import random
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import yaml
from click.testing import CliRunner

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from slurm_pool.adapters.records import RecordError, parse_jobs, parse_nodes  # noqa: E402
from slurm_pool.adapters.runner import RecordingRunner, Result  # noqa: E402
from slurm_pool.adapters.slurm import SlurmClient  # noqa: E402
from slurm_pool.cli import cli  # noqa: E402
from slurm_pool.errors import InputError  # noqa: E402
from slurm_pool.mig.features import node_table  # noqa: E402
from slurm_pool.mig.planner import Gpu, plan, plan_from_dict  # noqa: E402
from slurm_pool.node import outcome  # noqa: E402
from slurm_pool.nodeconf import ConfigError  # noqa: E402
from slurm_pool.nodeconf import parse as parse_node_conf  # noqa: E402
from slurm_pool.spec import parse_spec  # noqa: E402
from slurm_pool.spec.load import load_spec_text  # noqa: E402
from slurm_pool.text import control_chars, shown  # noqa: E402
from slurm_pool.textio import parse_json  # noqa: E402
from slurm_pool.web import identity  # noqa: E402
from slurm_pool.web.actions import UserCommands  # noqa: E402
from slurm_pool.web.app import create_app  # noqa: E402
from slurm_pool.web.throttle import LoginThrottle  # noqa: E402
from tests.support.mutation import paths  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import hostile  # noqa: E402  -- the third round: hostile values, and what comes out

EXAMPLE_PATH = REPO / "examples" / "pool.yaml"
EXAMPLE = yaml.safe_load(EXAMPLE_PATH.read_text())
DATA = REPO / "tests" / "data" / "slurm"
ODD = [
    None, True, False, 0, -1, 10**400, 1e308, float("nan"), float("inf"), "", " ", "\n", "a\nNodeName=x",
    "x=y", "é", "\x00", "|", ",", "[1-100000000]", "-1", "Infinity", [], {}, [[[]]], {"a": {"b": None}},
]  # fmt: skip
HARD_TEXTS: list[bytes] = [
    b"",
    b"\xff\xfe\x00garbage",
    b"[" * 20_000 + b"]" * 20_000,
    b"{" * 5_000,
    b'{"a": 1' + b"0" * 5000 + b"}",
    b'{"version": NaN}',
    b"version: 1\nversion: 1\n",
    b"- - - - - - - - - -\n" * 50,
    b"&a [*a, *a]\n",
    b"!!python/object:os.system ['true']\n",
]


def mutate(rng: random.Random, doc: Any) -> Any:
    """``doc`` with one to three values replaced by odd ones (or keys dropped)."""
    out = copy.deepcopy(doc)
    for _ in range(rng.randint(1, 3)):
        path = rng.choice(paths(out))
        if not path:
            return rng.choice(ODD)
        parent = out
        for p in path[:-1]:
            parent = parent[p]
        if isinstance(parent, dict) and rng.random() < 0.3:
            del parent[path[-1]]
        else:
            parent[path[-1]] = copy.deepcopy(rng.choice(ODD))
    return out


def _dump(doc: Any, as_yaml: bool) -> bytes:
    try:
        text = yaml.safe_dump(doc, sort_keys=False) if as_yaml else json.dumps(doc)
    except (ValueError, OverflowError, yaml.YAMLError):
        text = repr(doc)
    return text.encode("utf-8", errors="surrogatepass")


@dataclass
class Tally:
    tried: int = 0
    clean: int = 0
    failures: list[str] = field(default_factory=list)


def _in_time(fn: Callable[[], Any], timeout: float) -> tuple[bool, Any]:
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 -- classified by the caller
            box["error"] = exc

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(timeout)
    if t.is_alive():
        return False, None
    if "error" in box:
        raise box["error"]
    return True, box.get("value")


def check_cli(tally: Tally, argv: list[str], timeout: float, out_dir: Path | None = None) -> None:
    tally.tried += 1
    what = " ".join(argv)[:160]
    try:
        done, res = _in_time(lambda: CliRunner().invoke(cli, argv), timeout)
    except BaseException as exc:  # noqa: BLE001
        tally.failures.append(f"{what}: raised {type(exc).__name__}")
        return
    if not done:
        tally.failures.append(f"{what}: no answer within {timeout:g} s")
        return
    out = res.output
    if res.exception is not None and not isinstance(res.exception, SystemExit):
        tally.failures.append(f"{what}: {type(res.exception).__name__}: {res.exception}"[:300])
    elif "Traceback" in out:
        tally.failures.append(f"{what}: printed a traceback")
    elif res.exit_code not in (0, 1, 2):
        tally.failures.append(f"{what}: exit {res.exit_code}")
    elif res.exit_code and "rror" not in out:
        tally.failures.append(f"{what}: exit {res.exit_code} without an error message")
    elif res.exit_code and out_dir is not None and out_dir.exists() and any(out_dir.iterdir()):
        tally.failures.append(f"{what}: failed but wrote files")
    else:
        tally.clean += 1


def check_parser(tally: Tally, name: str, fn: Callable[[], Any], allowed: tuple[type[BaseException], ...]) -> None:
    tally.tried += 1
    try:
        done, _ = _in_time(fn, 20.0)
    except allowed:
        tally.clean += 1
        return
    except BaseException as exc:  # noqa: BLE001
        tally.failures.append(f"{name}: {type(exc).__name__}: {exc}"[:300])
        return
    if done:
        tally.clean += 1
    else:
        tally.failures.append(f"{name}: no answer within 20 s")


def _plan_doc() -> dict[str, Any]:
    gpus = [Gpu("n1", 0, ()), Gpu("n1", 1, ("7g.40gb",), busy=True), Gpu("n2", 0, None)]
    return plan("A100-40GB", gpus, {"3g.20gb": 1, "1g.5gb": 2}).to_dict()


def run(per_target: int, seed: int, timeout: float) -> dict[str, Tally]:
    """Every target's tally; the inputs live in a temporary directory removed afterwards."""
    work = Path(tempfile.mkdtemp(prefix="slurm-pool-robustness-"))
    try:
        return _run(work, per_target, seed, timeout)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _run(work: Path, per_target: int, seed: int, timeout: float) -> dict[str, Tally]:
    rng = random.Random(seed)
    results: dict[str, Tally] = {}
    plan_doc = _plan_doc()
    sacct = json.loads((DATA / "22.05" / "sacct.json").read_text())
    recorded = {v: (DATA / v / "nodes-busy.json", DATA / v / "squeue-busy.json") for v in ("22.05", "26.05")}

    def inputs(doc: Any, as_yaml: bool) -> list[bytes]:
        return HARD_TEXTS + [_dump(mutate(rng, doc), as_yaml) for _ in range(per_target - len(HARD_TEXTS))]

    def cli_on_files(name: str, doc: Any, as_yaml: bool, argv_for: Callable[[Path, int], list[str]]) -> None:
        tally = results.setdefault(name, Tally())
        for i, data in enumerate(inputs(doc, as_yaml)):
            f = work / f"{name.replace(' ', '-')}-{i}"
            f.write_bytes(data)
            out = work / f"out-{name.replace(' ', '-')}-{i}"
            check_cli(tally, argv_for(f, i), timeout, out if "render" in name else None)

    cli_on_files("slurm-pool validate", EXAMPLE, True, lambda f, _i: ["validate", str(f)])
    cli_on_files(
        "slurm-pool render",
        EXAMPLE,
        True,
        lambda f, i: ["render", str(f), "-o", str(work / f"out-slurm-pool-render-{i}"), "--slurm-version", "26.05"],
    )
    cli_on_files(
        "slurm-pool mig apply --dry-run", plan_doc, False, lambda f, _i: ["mig", "apply", "--dry-run", "--plan", str(f)]
    )
    cli_on_files("slurm-pool mig emit", plan_doc, False, lambda f, _i: ["mig", "emit", "commands", "--plan", str(f)])
    cli_on_files(
        "slurm-pool simulate",
        sacct,
        False,
        lambda f, _i: ["simulate", "--spec", str(EXAMPLE_PATH), "--sacct", str(f), "--json"],
    )
    layouts = node_table([(["n1"], "A100-40GB", 2, {"mig_7x1g": [["1g.5gb"] * 7, None], "mig_off": [None, None]})])
    cli_on_files(
        "slurm-pool mig helper --layouts",
        layouts,
        False,
        lambda f, _i: ["mig", "helper", "--node", "n1", "--layouts", str(f)],
    )
    cli_on_files(
        "slurm-pool mig plan --sacct",
        sacct,
        False,
        lambda f, _i: ["mig", "plan", "--gpus", "2", "--model", "A100-40GB", "--sacct", str(f)],
    )

    # Options: random words in every value position.
    words = ["", "nan", "inf", "-1", "1e400", "0", "A100-40GB", "A30-24GB", "NVIDIA A30", "V100", "1g.5gb=-1",
             "9g.99gb=1", "1g.5gb=4", "3g.20gb@x", "4g.20gb,3g.20gb", "n1:99", "é", "a\nb", "1" * 30]  # fmt: skip
    tally = results.setdefault("slurm-pool mig check / plan options", Tally())
    for _ in range(per_target):
        if rng.random() < 0.5:
            argv = ["mig", "check", "--model", rng.choice(words), rng.choice(words)]
        else:
            argv = ["mig", "plan", "--gpus", rng.choice(["2", "-1", "x", "100000", "0"]), "--model", rng.choice(words)]
            argv += ["--demand", rng.choice(words), "--busy", rng.choice(words)][: rng.choice([2, 4])]
        check_cli(tally, argv, timeout)
    tally = results.setdefault("slurm-pool simulate options", Tally())
    good_sacct = work / "sacct.json"
    good_sacct.write_text(json.dumps(sacct))
    for _ in range(per_target // 4):
        opt = rng.choice(["--grace", "--checkpoint-interval", "--restart-overhead"])
        argv = ["simulate", "--spec", str(EXAMPLE_PATH), "--sacct", str(good_sacct), opt, rng.choice(words)]
        check_cli(tally, argv, timeout)

    # Parsers of outside data, in process.
    spec_t = results.setdefault("parser: pool spec (parse_spec)", Tally())
    for _ in range(per_target):
        doc = mutate(rng, EXAMPLE)
        check_parser(spec_t, "parse_spec", lambda d=doc: parse_spec(d), (InputError,))
    for version, (nodes_f, jobs_f) in recorded.items():
        for label, fn, path in (("nodes", parse_nodes, nodes_f), ("jobs", parse_jobs, jobs_f)):
            t = results.setdefault(f"parser: Slurm {version} {label} JSON", Tally())
            base = json.loads(path.read_text())
            for data in inputs(base, False):
                text = data.decode("utf-8", errors="replace")
                check_parser(t, f"parse_{label}", lambda s=text, f=fn: f(s), (RecordError,))
    plan_t = results.setdefault("parser: MIG plan (plan_from_dict)", Tally())
    for data in inputs(plan_doc, False):
        text = data.decode("utf-8", errors="replace")
        check_parser(plan_t, "plan_from_dict", lambda s=text: plan_from_dict(parse_json(s, "plan")), (InputError,))
    out_t = results.setdefault("parser: outcome.json (epilog)", Tally())
    wrapper = {"job_id": "42", "restart_count": 1, "reason": "preempt", "signal_time": 1.8e9, "time": 1.8e9}

    def build(w: Any) -> None:
        rec = outcome.build(job_id="42", user="u", node="n", now=1.8e9, info=None, wrapper=w, newest=None)
        json.dumps(rec, allow_nan=False)

    for _ in range(per_target):
        w = mutate(rng, wrapper)
        check_parser(out_t, "outcome.build", lambda w=w: build(w if isinstance(w, dict) else None), ())
    conf_t = results.setdefault("parser: node.conf", Tally())
    for data in HARD_TEXTS + [bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 200))) for _ in range(per_target)]:
        text = data.decode("utf-8", errors="replace")
        check_parser(conf_t, "nodeconf.parse", lambda s=text: parse_node_conf(s), (ConfigError,))
    return results


# -- the REST API of ``slurm-pool serve`` (issue 27) ------------------------------------------
API_KEY = b"k" * 32
API_CONSOLE = "\nconsole:\n  operators: [olga]\n  refresh_seconds: 10\n"
API_USERS = {"alice", "bob", "olga"}
SUBMIT = {
    "tier": "scavenger", "project": "proja", "gpus": 1, "gpu_type": None, "mig": None, "shards": None,
    "time_limit": "01:00:00", "nodes": "b-gpu1", "name": "sweep", "script": "#!/bin/sh\nsleep 1\n", "checkpoint": True,
}  # fmt: skip
#: Each POST endpoint: its path (``{job_id}``, ``{action}`` filled from ``API_PATH``) and a body it takes.
API_POSTS: dict[str, tuple[str, dict[str, Any] | None]] = {
    "REST API: POST /api/v1/login body": ("/api/v1/login", {"user": "alice", "password": "pw-alice"}),
    "REST API: POST /api/v1/jobs/explain body": ("/api/v1/jobs/explain", SUBMIT),
    "REST API: POST /api/v1/jobs (submit) body": ("/api/v1/jobs", SUBMIT),
    "REST API: POST /api/v1/jobs/{id}/tier body and id": ("/api/v1/jobs/{job_id}/tier", {"tier": "shared"}),
    "REST API: POST /api/v1/jobs/{id}/{action} path": ("/api/v1/jobs/{job_id}/{action}", None),
}
API_PATH = {"job_id": "4", "action": "hold"}
API_QUERY = {"state": "RUNNING", "sort": "-job_id", "user": "alice", "project": "proja", "tier": "shared"}
API_ODD = [
    *ODD, "a" * 1_000_000, "a" * 5000, "x\x1b[2J", "a\u2028b", "\u202e", "1_0", "١٢", "\ud800", 2**63, -(2**63), 1.5,
    {"$gt": ""}, ["shared"], "shared", "proja", "01:00:00", "1g.5gb", "b-gpu1",
]  # fmt: skip
#: Values for a path segment or a query parameter, as sent (already percent-encoded).
API_WORDS = [
    *(quote(w, safe="") for w in ["", "0", "-1", "4294967296", "9" * 40, "abc", "1.5", "nan", "١٢", "1_0", " 1",
                                  "+1", "0x10", "a" * 5000, "é", "a\nb", "x\x1b[2J", "__class__", "RUNNING",
                                  "-job_id", "cancel", "requeue", "shared", "alice", "proja"]),
    "%FF", "%00", "%C0%AF", "1%0A", "%2e%2e", "%", "%%", "%zz",
]  # fmt: skip
JSON = "application/json"
API_HARD: list[tuple[bytes, str | None]] = [
    (b"", JSON), (b"\xff\xfe\x00garbage", JSON), (b'{"tier": "\xff\xfe", "user": "\xc0\xaf"}', JSON), (b"{", JSON),
    (b"[" * 20_000 + b"]" * 20_000, JSON), (b'{"a":' * 3000 + b"1" + b"}" * 3000, JSON), (b"[1, 2]", JSON),
    (b"null", JSON), (b"1e400", JSON), (b'"x"', JSON), (b'{"tier": NaN, "gpus": Infinity, "user": -Infinity}', JSON),
    (b'{"tier": "shared", "tier": 5}', JSON), (b'{"tier": "\\udc00", "\\ud800": 1}', JSON),
    (b'{"tier": "shared"}', "text/plain"), (b"tier=shared&user=alice", "application/x-www-form-urlencoded"),
    (b'{"tier": "shared"}', None),
    (b'{"tier": "shared"}', "application/json; charset=latin-1"), (b"\x00" * 300_000, JSON),
]  # fmt: skip


def _as_user(_user: str, _env: Any) -> RecordingRunner:
    """Slurm as the users' commands meet it: every command succeeds; sbatch prints a job id."""
    r = RecordingRunner()
    r.respond([], lambda argv, _in: Result(argv, 0, "4242\n" if argv[0] == "sbatch" else ""))
    return r


def api_client() -> Any:
    """The service over the example pool (with a console section) and Slurm 26.05 replayed from tests/data."""
    from fastapi.testclient import TestClient

    spec = load_spec_text(EXAMPLE_PATH.read_text() + API_CONSOLE, "pool.yaml")
    assert spec.console is not None
    runner = RecordingRunner()
    runner.on(["sinfo", "--version"], "slurm 26.05.0\n")
    runner.on(["scontrol", "show", "nodes", "--json"], (DATA / "26.05" / "nodes-requeued.json").read_text())
    runner.on(["squeue", "--json"], (DATA / "26.05" / "squeue-requeued.json").read_text())
    runner.on(["sacctmgr"], "carol|projb\n")
    runner.on(["sacct"], json.dumps({"jobs": []}))
    auth = identity.Authenticator(
        API_KEY, spec.console, check_password=lambda u, p: p == f"pw-{u}", user_exists=lambda u: u in API_USERS,
        throttle=LoginThrottle(time.time, waits=False),  # hostile inputs, not guessing: the waits are tested apart
    )  # fmt: skip
    commands = UserCommands(API_KEY, runner_for=_as_user)
    app = create_app(spec, slurm=SlurmClient(runner), auth=auth, commands=commands)
    return TestClient(app, raise_server_exceptions=False)


def http_verdict(status: int, body: bytes, field: str | None) -> str | None:
    """Why an answer is not clean (None when it is); ``field``: what a 422 must name, when one value changed."""
    if status >= 500:
        return f"HTTP {status}"
    if b"Traceback" in body:
        return f"HTTP {status} with a traceback"
    try:
        got = json.loads(body)
    except ValueError:
        return f"HTTP {status} with a body that is not JSON"
    if status < 400:
        return None
    if not isinstance(got, dict) or not isinstance(got.get("message"), str) or not got["message"]:
        return f"HTTP {status} without a Problem's message"
    if len(body) > 4000:
        return f"HTTP {status} echoing {len(body)} bytes back"
    if any(isinstance(v, str) and control_chars(v) for v in got.values()):
        return f"HTTP {status} with a raw control character in its Problem"
    named, want = got.get("field"), shown(field or "")  # a field the client named is shown, and cut when long
    cut = isinstance(named, str) and named.endswith("...") and want.startswith(named[:-3])
    if status == 422 and field is not None and named != want and not cut:
        return f"HTTP 422 names {named!r}, not the changed {want[:80]!r}"
    return None


def check_http(tally: Tally, client: Any, method: str, url: str, body: bytes | None, ctype: str | None,
               field: str | None, timeout: float) -> None:  # fmt: skip
    tally.tried += 1
    what = f"{method} {url[:100]} {(body or b'')[:100]!r}"
    headers = {"Authorization": f"Bearer {identity.mint(API_KEY, 'alice', lifespan=3600)}"}
    if ctype is not None:
        headers["Content-Type"] = ctype

    def send() -> Any:
        try:
            return client.request(method, url, headers=headers, content=body)
        finally:
            client.cookies.clear()  # a login's session must not carry over to the next request

    try:
        done, res = _in_time(send, timeout)
    except BaseException as exc:  # noqa: BLE001
        tally.failures.append(f"{what}: raised {type(exc).__name__}: {exc}"[:300])
        return
    if not done:
        tally.failures.append(f"{what}: no answer within {timeout:g} s")
        return
    problem = http_verdict(res.status_code, res.content, field)
    if problem:
        tally.failures.append(f"{what}: {problem}"[:300])
    else:
        tally.clean += 1


def _api_mutate(rng: random.Random, body: dict[str, Any], keys: list[str]) -> tuple[dict[str, Any], set[str]]:
    """``body`` with one to three fields given odd values, dropped, or added; and the fields changed."""
    out = dict(body)
    changed: set[str] = set()
    for _ in range(rng.randint(1, 3)):
        roll = rng.random()
        if roll < 0.1:
            name = rng.choice(["evil", "__class__", "tier ", "Tier", "k" * 100_000, "", "x\x1b[2J", "\ud800"])
            out[name] = rng.choice(API_ODD)
        else:
            name = rng.choice(keys)
            if roll < 0.25:
                out.pop(name, None)
            else:
                out[name] = copy.deepcopy(rng.choice(API_ODD))
        changed.add(name)
    return out, changed


def _is_text(value: str) -> bool:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def run_api(per_target: int, seed: int, timeout: float) -> dict[str, Tally]:
    """Every REST API target's tally: the POST bodies and path values, and the GET paths and queries."""
    rng = random.Random(seed)
    results: dict[str, Tally] = {}
    quiet = logging.getLogger("slurm_pool.web")
    level = quiet.level
    quiet.setLevel(logging.CRITICAL)  # 429s and Slurm's refusals are logged; a 500 is caught by its status
    try:
        client = api_client()
        for name, (template, good) in API_POSTS.items():
            tally = results.setdefault(name, Tally())
            segments = [k for k in API_PATH if "{" + k + "}" in template]
            as_sent = json.dumps(good).encode()
            hard = [*API_HARD, (as_sent, "text/plain"), (as_sent, None), (as_sent, "multipart/form-data; boundary=x")]
            cases = hard[: per_target // 2] if good is not None else []
            for data, ctype in cases:
                check_http(tally, client, "POST", template.format(**API_PATH), data, ctype, None, timeout)
            for _ in range(per_target - len(cases)):
                path = dict(API_PATH)
                if good is None or (segments and rng.random() < 0.2):
                    for k in rng.sample(segments, rng.randint(1, len(segments))):
                        path[k] = rng.choice(API_WORDS)
                    body, changed = good, {f"path.{k}" for k in segments if path[k] != API_PATH[k]}
                else:
                    body, fields = _api_mutate(rng, good, list(good))
                    # A key that is no Unicode text (a lone surrogate) makes the body itself the bad value.
                    changed = {f"body.{f}" if _is_text(f) else "body" for f in fields}
                sent = None if body is None else json.dumps(body).encode("utf-8", "surrogatepass")
                one = next(iter(changed)) if len(changed) == 1 else None
                check_http(tally, client, "POST", template.format(**path), sent, JSON, one, timeout)
        tally = results.setdefault("REST API: GET /api/v1/jobs/{id} and /api/v1/jobs?query", Tally())
        for _ in range(per_target):
            if rng.random() < 0.3:
                word = rng.choice(API_WORDS)
                check_http(tally, client, "GET", f"/api/v1/jobs/{word}", None, None, "path.job_id", timeout)
                continue
            query = dict(API_QUERY)
            changed_q = rng.sample(list(query), rng.randint(1, 3))
            for k in changed_q:
                query[k] = rng.choice(API_WORDS)
            shown = "&".join(f"{k}={v if k in changed_q else quote(v, safe='')}" for k, v in query.items())
            one = f"query.{changed_q[0]}" if len(changed_q) == 1 else None
            check_http(tally, client, "GET", f"/api/v1/jobs?{shown}", None, None, one, timeout)
    finally:
        quiet.setLevel(level)
    return results


#: The hand-written part of the doc, from this heading on, is kept when the tables are written again.
KEPT = "### Beyond the sweep"


def write(
    results: dict[str, Tally],
    argv: list[str],
    out: Path,
    seconds: float,
    round3: dict[str, hostile.Tally],
    api: dict[str, Tally] | None = None,
) -> None:
    lines = [
        "# Robustness: malformed input",
        "",
        "Every CLI that reads a file or option, and every parser of outside data, fed real documents with",
        "values swapped for odd ones plus fixed hard cases (not UTF-8, deep nesting, huge numbers, NaN,",
        "duplicate keys).  *Clean*: a CLI exits 0, or 1/2 with an `error:` line, no traceback, in time, and",
        "writes nothing when it fails; a parser returns or raises its own error type.",
        "",
        f"Made by `python3 bench/{Path(__file__).name} {' '.join(argv)}` ({seconds:.0f} s).",
        "",
    ]
    lines += _table(results)
    if api:
        lines += ["", *_api_intro(), "", *_table(api)]
    lines += ["", *_round3_intro(), "", *_table(round3)]
    old = out.read_text() if out.exists() else ""
    kept = old[old.index(KEPT) :] if KEPT in old else ""
    out.write_text("\n".join(lines).rstrip() + "\n" + ("\n" + kept if kept else ""))


def _api_intro() -> list[str]:
    return [
        "## The REST API of `slurm-pool serve` (issue 27)",
        "",
        "The service in-process (FastAPI's test client) over the example pool and Slurm 26.05 replayed from",
        "recorded JSON; the user's commands (sbatch, scontrol, scancel) answer from a recording, so nothing runs.",
        "Each POST endpoint gets a valid body with one to three fields given odd values (wrong types, null,",
        "huge numbers, NaN, 1 MB strings, control characters, nested objects), dropped, or added (unknown",
        "fields), and odd path values; plus fixed hard cases (empty, not UTF-8, not JSON, 20,000 deep, a",
        "duplicate key, a wrong or missing content type, a body over the size cap).  The GET endpoints get odd",
        "job ids (huge, negative, not a number, percent-escapes that are not UTF-8) and odd `state`, `sort`,",
        "`user`, `project` and `tier` queries.  *Clean*: a status under 500 (a valid request's success",
        "counts), a JSON body, for an error a Problem with a `message` (never the input echoed back), and for a",
        "422 after one changed value, a `field` naming that value (`body.gpus`, `path.job_id`, `query.sort`).",
        "Its first run found one: an unknown key came back whole as the Problem's `field` (100 KB of it, or",
        "a terminal escape raw); the field is now shown with escapes and cut (`test_web_app.py`, `BAD`).",
    ]


def _table(results: dict[str, Any]) -> list[str]:
    """One round's table (tallies with ``tried``, ``clean``, ``failures``), then its first failures."""
    lines = ["| target | inputs tried | handled cleanly | failures |", "|---|---:|---:|---:|"]
    for name, t in results.items():
        lines.append(f"| {name} | {t.tried} | {t.clean} | {len(t.failures)} |")
    total = sum(t.tried for t in results.values())
    bad = sum(len(t.failures) for t in results.values())
    lines += [f"| **all** | **{total}** | **{total - bad}** | **{bad}** |", ""]
    for name, t in results.items():
        for f in t.failures[:20]:
            lines.append(f"- {name}: `{f}`")
    return lines


def _round3_intro() -> list[str]:
    return [
        "## Third round: hostile values, and what comes out (issue 30)",
        "",
        "Every place a value can reach -- each string of the spec (found from the schema), each value of a MIG",
        "plan and a needs file, each string of Slurm's JSON, each number the simulator reads -- given a trailing",
        "newline, a whole `KEY=value` line, terminal escapes, NEL and U+2028, bidi controls, Rich markup, wrong",
        "JSON types, and numbers Python reads too kindly (`1_0`, `١٢`, `nan`, `1e400`, `true`); and the",
        "root-side readers given planted files.  *Clean* as above, and also: no raw control character on the",
        "terminal; a refused spec names the field and writes nothing; an accepted one renders only `KEY=value`",
        "lines of keys the example has; `mig emit gres` writes only `NodeName=<plan node>` lines;",
        "`checkpoints prune` keeps a queued job's directory whatever `squeue` prints; the simulator refuses a",
        "number it cannot trust; the epilog reads only the job user's own singly-linked regular file.",
        "Fake `sinfo`/`squeue`/`sacct` scripts first on PATH play Slurm.  The same sweep on the code before",
        "this round (`git checkout ceaca54`) mishandled 800 of the 7,208.",
    ]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--per-target", type=int, default=200)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=30.0, help="Seconds one CLI run may take.")
    ap.add_argument("--out", default=str(REPO / "docs" / "robustness.md"))
    args = ap.parse_args()
    start = time.monotonic()
    results = run(args.per_target, args.seed, args.timeout)
    api = run_api(args.per_target, args.seed, args.timeout)
    round3 = hostile.run(None, args.seed, args.timeout)
    shown = [a for a in sys.argv[1:]]
    write(results, shown, Path(args.out), time.monotonic() - start, round3, api)
    bad = sum(len(t.failures) for t in [*results.values(), *api.values()]) + sum(
        len(h.failures) for h in round3.values()
    )
    for name, t in [*results.items(), *api.items(), *round3.items()]:
        print(f"{name}: {t.tried} tried, {t.clean} clean, {len(t.failures)} failures")
        for f in t.failures[:5]:
            print(f"  {f}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
