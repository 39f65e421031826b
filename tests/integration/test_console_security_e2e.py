"""Issue 27, check 2: the console's defences, each tried against the running service and the real Slurm.

Every row of ``docs/security.md``'s table is one case here.  Tokens come from
the cluster's own key (``scontrol token`` for good ones); Bob's job is a real
job that must keep running whatever Alice tries, both when the service
refuses first and, with the service's own check switched off, when only
Slurm stands in the way.
"""

from __future__ import annotations

import resource
import socket
import stat
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Iterator

import httpx
import jwt
import pytest

from slurm_pool.spec.console import Console
from tests.support.browser import usable
from tests.support.console import Service, running_console
from tests.support.patience import patience, wait_for

pytestmark = pytest.mark.slurm

SLEEP = "#!/bin/bash\nsleep 300\n"
XSS = '<img src=x onerror="document.title=1">'


def _bobs_job(cluster) -> int:
    job = cluster.sbatch("-p", "b-owner", "--qos=guaranteed", "-A", "projb", "-t", "10", "-o", "/dev/null",
                         user="bob", script=SLEEP)  # fmt: skip
    cluster.wait_state(job, ["RUNNING"], timeout=60)
    return job


def _client(svc: Service, token: str | None = None, **kw) -> httpx.Client:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.Client(base_url=svc.url, headers=headers, timeout=30, **kw)


def _login(svc: Service, user: str) -> tuple[httpx.Client, str]:
    c = _client(svc)
    r = c.post("/api/v1/login", json={"user": user, "password": svc.passwords[user]})
    assert r.status_code == 200, r.text
    return c, r.json()["csrf_token"]


def _forged(svc: Service, **claims) -> str:
    now = int(time.time())
    body = {"iat": now, "exp": now + 300, "sun": "alice", **claims}
    return jwt.encode(body, svc.key, algorithm="HS256")


def _alg_none() -> str:
    now = int(time.time())
    return jwt.encode({"iat": now, "exp": now + 300, "sun": "alice"}, None, algorithm="none")


def test_tokens_the_service_refuses(cluster):
    with running_console(cluster) as svc:
        cases = {
            "no token": None,
            "expired": _forged(svc, iat=int(time.time()) - 600, exp=int(time.time()) - 300),
            "another key": jwt.encode(
                {"iat": int(time.time()), "exp": int(time.time()) + 300, "sun": "alice"}, b"k" * 32, algorithm="HS256"
            ),  # fmt: skip
            "alg none": _alg_none(),
            "no such user": _forged(svc, sun="nosuchuser"),
            "garbage": "a.b.c",
        }
        for case, token in cases.items():
            with _client(svc, token) as c:
                for path in ("/api/v1/me", "/api/v1/jobs", "/api/v1/pool"):
                    r = c.get(path)
                    assert r.status_code == 401, (case, path, r.status_code, r.text)
        with _client(svc, svc.token("alice")) as c:  # and a real one is accepted
            assert c.get("/api/v1/me").json()["user"] == "alice"


@pytest.mark.parametrize("check_access", [True, False], ids=["service-refuses", "slurm-refuses"])
def test_alice_cannot_touch_bobs_job(cluster, check_access):
    bob_job = _bobs_job(cluster)
    with running_console(cluster, check_access=check_access) as svc:
        with _client(svc, svc.token("alice")) as c:
            if check_access:
                r = c.get(f"/api/v1/jobs/{bob_job}")
                assert r.status_code in (403, 404), r.text
                listed = c.get("/api/v1/jobs").json()
                assert bob_job not in [j["job_id"] for j in listed["jobs"]]
                assert sum(listed["hidden"].values()) >= 1
            for action in ("cancel", "hold", "requeue"):
                r = c.post(f"/api/v1/jobs/{bob_job}/{action}")
                assert r.status_code in (403, 404), (action, r.status_code, r.text)
                assert cluster.job_field(bob_job, "%T") == "RUNNING", action
            r = c.post(f"/api/v1/jobs/{bob_job}/tier", json={"tier": "scavenger"})
            assert r.status_code in (403, 404), r.text
    assert cluster.job_field(bob_job, "%T") == "RUNNING"
    assert cluster.job_field(bob_job, "%q") == "guaranteed"


def test_browser_sessions_are_guarded(cluster):
    with running_console(cluster) as svc:
        c, csrf = _login(svc, "alice")
        try:
            # missing session token (the cookie alone is no session), and a cross-site form POST
            assert c.post("/api/v1/jobs/1/hold").status_code == 401
            r = c.post("/api/v1/jobs/1/hold", headers={"X-CSRF-Token": csrf, "Origin": "https://evil.example"})
            assert r.status_code == 403, r.text
            r = c.post("/api/v1/logout", headers={"X-CSRF-Token": "x" + csrf})
            assert r.status_code == 401
            cookie = c.cookies.get("slurm_pool_session")
            assert cookie
            assert c.post("/api/v1/logout", headers={"X-CSRF-Token": csrf}).status_code in (200, 204)
        finally:
            c.close()
        with _client(svc) as replay:
            replay.cookies.set("slurm_pool_session", cookie)
            r = replay.get("/api/v1/me", headers={"X-CSRF-Token": csrf})
            assert r.status_code == 401  # the cookie replayed after logout, even with its token
        # a login form posted from another site
        with _client(svc) as other:
            r = other.post(
                "/api/v1/login",
                json={"user": "alice", "password": svc.passwords["alice"]},
                headers={"Origin": "https://evil.example", "Sec-Fetch-Site": "cross-site"},
            )
            assert r.status_code == 403, r.text
        # guessing: each wrong password slows the next try down; the right one still gets in (issue 49)
        with _client(svc) as brute:
            codes = [brute.post("/api/v1/login", json={"user": "bob", "password": f"guess{i}"}).status_code
                     for i in range(5)]  # fmt: skip
            assert codes == [401] * 5, codes
            r = brute.post("/api/v1/login", json={"user": "bob", "password": svc.passwords["bob"]})
            assert r.status_code == 200, r.text


def test_headers_static_files_and_bodies(cluster):
    with running_console(cluster) as svc, _client(svc, svc.token("alice")) as c:
        for path in ("/", "/api/v1/me", "/static/app.js"):
            h = c.get(path).headers
            csp = h["content-security-policy"]
            assert "'unsafe-inline'" not in csp and "script-src 'self'" in csp and "frame-ancestors 'none'" in csp
            assert h["x-content-type-options"] == "nosniff"
        assert "no-store" in c.get("/api/v1/me").headers["cache-control"]
        for path in ("/static/../../../etc/passwd", "/static/%2e%2e/%2e%2e/etc/passwd", "/static/..%2fweb%2fapp.py",
                     "/static//etc/passwd"):  # fmt: skip
            r = c.get(path)
            assert r.status_code in (400, 404), (path, r.status_code)
            assert "root:" not in r.text
        r = c.post("/api/v1/jobs/explain", content=b"{" + b" " * (2 * 1024 * 1024) + b"}",
                   headers={"Content-Type": "application/json"})  # fmt: skip
        assert r.status_code == 413
        r = c.post(
            "/api/v1/jobs/explain", content=b'{"tier": "\xff\xfe"}', headers={"Content-Type": "application/json"}
        )
        assert 400 <= r.status_code < 500, r.text


def test_slow_clients_do_not_stall_the_others(cluster):
    with running_console(cluster) as svc:
        host, port = svc.url.removeprefix("http://").split(":")
        slow = []
        for _ in range(20):  # each sends half a request line and stops
            s = socket.create_connection((host, int(port)), timeout=5)
            s.sendall(b"GET /api/v1/me HTTP/1.1\r\nHost: x\r\n")
            slow.append(s)
        try:
            with _client(svc, svc.token("alice")) as c:
                t0 = time.monotonic()
                for _ in range(10):
                    assert c.get("/api/v1/me").status_code == 200
                assert time.monotonic() - t0 < patience(10)
        finally:
            for s in slow:
                s.close()


def test_a_hostile_job_name_renders_inert_in_chromium(cluster, browser):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    job = cluster.sbatch("-p", "a-owner", "--qos=guaranteed", "-A", "proja", "-t", "5", "-J", XSS, "-o", "/dev/null",
                         "--comment", "<script>document.title=2</script>", user="alice", script=SLEEP)  # fmt: skip
    with running_console(cluster) as svc:
        browser.get(svc.url + "/")
        WebDriverWait(browser, patience(60)).until(lambda d: usable(d, "login-user")).send_keys("alice")
        WebDriverWait(browser, patience(60)).until(lambda d: usable(d, "login-password")).send_keys(
            svc.passwords["alice"]
        )
        WebDriverWait(browser, patience(60)).until(lambda d: usable(d, "login-submit")).click()
        for page in ("#/jobs", f"#/job/{job}"):
            browser.get(f"{svc.url}/{page}")
            WebDriverWait(browser, patience(60)).until(lambda d: XSS in d.find_element(By.TAG_NAME, "main").text)
            assert not browser.find_elements(By.CSS_SELECTOR, "main img"), page  # shown as text, not an element
            assert "slurm-pool" in browser.title and browser.title not in ("1", "2"), page  # no handler ran


# -- issue 49: availability, stolen cookies, logs -------------------------------------------
def _raise_open_files(need: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < need:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(need, hard), hard))


@contextmanager
def _real_serve(cluster) -> Iterator[str]:
    """``slurm-pool serve`` as its own process, as ``cluster up --with-console`` starts it."""
    from slurm_pool.localcluster.console import start_console, stop_console

    url = start_console(cluster.cluster).rstrip("/")
    try:
        yield url
    finally:
        stop_console(cluster.cluster)


def test_idle_connections_and_the_access_log(cluster):
    _raise_open_files(4096)
    log = cluster.cluster.layout.log / "console.out"
    with _real_serve(cluster) as url:
        host, port = url.removeprefix("http://").split(":")
        idle = []
        try:
            for _ in range(1100):  # connections that never send a byte
                idle.append(socket.create_connection((host, int(port)), timeout=10))
            token = Service(url, {}, b"", cluster).token("alice")
            with httpx.Client(base_url=url, timeout=30) as c:
                t0 = time.monotonic()
                r = c.get("/api/v1/me", headers={"Authorization": f"Bearer {token}"})
                took = time.monotonic() - t0
                assert r.status_code == 200, r.text
                # Served before the idle connections' deadline could have freed a slot for it.
                assert took < (cluster.spec.console or Console()).request_seconds, took
                # a token in the query string: refused, and never written to the log
                r = c.get("/api/v1/pool", params={"token": "SECRETQUERYTOKEN"})
                assert r.status_code == 401
        finally:
            for s in idle:
                s.close()
        wait_for(lambda: '"GET /api/v1/pool HTTP/1.1" 401' in log.read_text(errors="replace"), 30,
                 "the refused request in the access log")  # fmt: skip
    text = log.read_text(errors="replace")
    assert "SECRETQUERYTOKEN" not in text and "?token" not in text
    assert stat.S_IMODE(log.stat().st_mode) == 0o640


def test_failed_logins_from_one_address_lock_nobody_out(cluster):
    with running_console(cluster) as svc:
        # mixed names: real users, root, and names that do not exist; each once, so none waits for another
        names = ["alice", "carol", "root"] + [f"nosuchuser{i}" for i in range(22)]

        def wrong(name: str) -> int:
            with _client(svc) as c:
                return c.post("/api/v1/login", json={"user": name, "password": "wrong"}).status_code

        with ThreadPoolExecutor(8) as pool:  # PAM answers a failure slowly; tried in parallel like an attacker
            codes = list(pool.map(wrong, names))
        assert codes == [401] * 25, codes
        with _client(svc) as c:
            t0 = time.monotonic()
            r = c.post("/api/v1/login", json={"user": "bob", "password": svc.passwords["bob"]})
            assert r.status_code == 200, r.text
            assert time.monotonic() - t0 < patience(5)  # not held back by the others' failures
            assert c.get("/api/v1/me", headers={"X-CSRF-Token": r.json()["csrf_token"]}).json()["user"] == "bob"


def test_a_replayed_session_cookie_cannot_act_or_read_the_token(cluster):
    with running_console(cluster) as svc:
        alice, token = _login(svc, "alice")
        cookie = alice.cookies.get("slurm_pool_session")
        alice.close()
        with _client(svc) as bob:  # bob's server on another port of the host received the cookie
            bob.cookies.set("slurm_pool_session", cookie)
            for method, path, body in (("GET", "/api/v1/me", None), ("GET", "/api/v1/jobs", None),
                                       ("POST", "/api/v1/jobs", {"tier": "scavenger", "script": SLEEP})):  # fmt: skip
                r = bob.request(method, path, json=body)
                assert r.status_code == 401, (method, path, r.text)
                assert token not in r.text
        with _client(svc) as again:  # alice's own page, with her token, still works
            again.cookies.set("slurm_pool_session", cookie)
            me = again.get("/api/v1/me", headers={"X-CSRF-Token": token}).json()
            assert me["user"] == "alice" and me["csrf_token"] is None


def test_serve_as_its_own_user_logs_in_submits_and_cancels(cluster):
    """Issue 45, check 6: ``slurm-pool serve`` runs as the system user ``slurm-pool`` (not root) with the grants
    docs/security.md lists; alice logs in (PAM, through the ``shadow`` group), submits (sudo and ``slurm-pool-as``)
    and cancels (her token, from the service's uid): the job is alice's, in her home, and ends CANCELLED."""
    from slurm_pool.localcluster.console import set_passwords
    from tests.support.console import TEST_USERS_STATE
    from tests.support.service_user import SERVICE_USER, serve_as_service_user

    users = sorted({u for p in cluster.spec.projects for u in p.users})
    passwords = set_passwords(users, TEST_USERS_STATE)
    with serve_as_service_user(cluster) as svc:
        ps = subprocess.run(["ps", "-o", "user=", "-p", str(svc.pid)], capture_output=True, text=True, check=True)
        assert ps.stdout.strip() == SERVICE_USER, ps.stdout
        with httpx.Client(base_url=svc.url, timeout=90) as c:
            r = c.post("/api/v1/login", json={"user": "alice", "password": "wrong" + passwords["alice"]})
            assert r.status_code == 401, r.text
            r = c.post("/api/v1/login", json={"user": "alice", "password": passwords["alice"]})
            assert r.status_code == 200, (r.text, svc.log.read_text(errors="replace"))
            csrf = {"X-CSRF-Token": r.json()["csrf_token"]}
            body = {"tier": "guaranteed", "project": "proja", "gpus": 1, "time_limit": "5", "name": "as-service",
                    "script": SLEEP}  # fmt: skip
            r = c.post("/api/v1/jobs", json=body, headers=csrf)
            assert r.status_code in (200, 201), (r.text, svc.log.read_text(errors="replace"))
            job = r.json()["job_id"]
            cluster.wait_state(job, ["RUNNING"], timeout=60)
            assert cluster.job_field(job, "%u") == "alice"
            assert cluster.job_field(job, "%Z") == "/home/alice"  # sbatch ran in her home, as her
            r = c.post(f"/api/v1/jobs/{job}/cancel", headers=csrf)
            assert r.status_code == 200, r.text
            cluster.wait_state(job, ["CANCELLED"], timeout=60)
    rows = cluster.run(["sacct", "-X", "-n", "-P", "-j", str(job), "-o", "User,State"]).stdout.split()
    assert rows and rows[0].split("|")[0] == "alice" and rows[0].split("|")[1].startswith("CANCELLED"), rows


def test_the_exporter_needs_no_privilege(cluster):
    """Issue 45, check 6: ``slurm-pool exporter`` as its unit's ``DynamicUser`` would run it (no groups, no
    capabilities, NoNewPrivileges): ``ps`` shows it is not root, and a scrape reads the pool from Slurm."""
    from tests.support.service_user import exporter_as_nobody

    with exporter_as_nobody(cluster) as exp:
        ps = subprocess.run(["ps", "-o", "user=", "-p", str(exp.pid)], capture_output=True, text=True, check=True)
        assert ps.stdout.strip() == "nobody", ps.stdout
        r = httpx.get(exp.url + "/metrics", timeout=60)
        assert r.status_code == 200, r.text
        lines = r.text.splitlines()
        assert "slurm_pool_up 1.0" in lines, r.text[:2000]
        assert any(ln.startswith("slurm_pool_gpus{") for ln in lines), r.text[:2000]
