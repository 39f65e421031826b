"""Issue 14, check 1: notebooks on GPU slices, in a real browser, on the real cluster.

The example pool with a notebook tier (tests/support/notebooks.py): servers
run in partition ``notebook`` on c-gpu1's 1g.5gb MIG slices, with a 60 s idle
timeout.  JupyterHub 6.1.1 with batchspawner's SlurmSpawner, the idle culler
and configurable-http-proxy run beside the cluster (``cluster up
--with-notebooks``), configured by the fragment ``slurm-pool render`` made.
Debian's headless Chromium logs in, starts a server and sees JupyterLab load
through the proxy; the server is a Slurm job holding one slice with
``CUDA_VISIBLE_DEVICES`` set; once the browser is gone the culler ends it.
A screenshot of JupyterLab is kept in ``test-artifacts/``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_pool.adapters.records import parse_jobs
from tests.conftest import TEST_SLURM
from tests.support.browser import ARTIFACTS, usable
from tests.support.notebooks import notebook_spec_text
from tests.support.patience import wait_for

pytestmark = pytest.mark.slurm

REPO = Path(__file__).resolve().parents[2]
USER = "alice"
SLICE = "nvidia_a100_1g.5gb"


@pytest.fixture(scope="module")
def hub_cluster(tmp_path_factory):
    """A cluster of the pool with notebooks (its own: the session cluster runs the plain example), and its hub."""
    from tests.support.slurm_cluster import start_session_cluster, stop_session_cluster

    d = tmp_path_factory.mktemp("notebooks")
    d.chmod(0o755)
    spec = d / "pool.yaml"
    spec.write_text(notebook_spec_text())
    handle, state = start_session_cluster(spec, slurm=TEST_SLURM)
    try:
        hub = handle.cluster.up_notebooks(timeout=180)
    except BaseException:
        log = state / "hub" / "jupyterhub.log"
        tail = log.read_text(errors="replace")[-3000:] if log.is_file() else "(no hub log)"
        stop_session_cluster(handle, state)
        raise RuntimeError(f"JupyterHub did not start; its log:\n{tail}") from None
    yield handle, hub
    stop_session_cluster(handle, state)
    # Nothing of the hub outlives the cluster, and it wrote nothing into the checkout.
    wait_for(lambda: not hub.leftovers(), 30, "the hub's proxy and idle culler to stop")
    assert not (REPO / "jupyterhub-proxy.pid").exists()


ACTIVE = ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING")


def _server_job(handle) -> object | None:
    """The user's notebook server job while it is active (squeue --json also lists jobs that just ended)."""
    res = handle.run(["squeue", "--json", "-u", USER], check=True)
    jobs = [j for j in parse_jobs(res.stdout) if j.name == "spawner-jupyterhub" and j.state.base in ACTIVE]
    return jobs[0] if jobs else None


def _server_environ(job_id: int) -> dict[str, str]:
    """The environment of the user's jupyterhub-singleuser process that belongs to ``job_id``."""
    import pwd

    uid = pwd.getpwnam(USER).pw_uid
    for proc in Path("/proc").iterdir():
        if not (proc.name.isascii() and proc.name.isdigit()):
            continue
        try:
            if proc.stat().st_uid != uid or b"jupyterhub-singleuser" not in (proc / "cmdline").read_bytes():
                continue
            env = dict(item.split("=", 1) for item in (proc / "environ").read_text().split("\0") if "=" in item)
        except OSError:
            continue
        if env.get("SLURM_JOB_ID") == str(job_id):
            return env
    return {}


def _hub_log(hub) -> str:
    return (hub.root / "jupyterhub.log").read_text(errors="replace")


def test_a_notebook_server_on_a_mig_slice_in_a_real_browser_then_culled(hub_cluster, browser):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    handle, hub = hub_cluster
    browser.get(f"{hub.url}/hub/login")
    WebDriverWait(browser, 60).until(lambda d: usable(d, "username_input")).send_keys(USER)
    WebDriverWait(browser, 60).until(lambda d: usable(d, "password_input")).send_keys(hub.password())
    WebDriverWait(browser, 60).until(lambda d: usable(d, "login_submit")).click()
    # The hub spawns on login, shows its progress page, then sends the browser to JupyterLab.
    WebDriverWait(browser, 240).until(
        lambda d: f"/user/{USER}/lab" in d.current_url and d.find_elements(By.CSS_SELECTOR, ".jp-Launcher")
    )
    assert browser.current_url.startswith(hub.url), "JupyterLab is served through the proxy"
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shot = ARTIFACTS / f"notebook-jupyterlab-slurm-{handle.version.series}.png"
    assert browser.save_screenshot(str(shot)) and shot.stat().st_size > 0

    job = _server_job(handle)
    assert job is not None, "the server is a Slurm job of the user"
    assert (job.state.base, job.partition, job.qos) == ("RUNNING", "notebook", "notebook")
    assert job.nodes == "c-gpu1" and (job.gpus, dict(job.gpu_types)) == (1, {SLICE: 1}), job
    env = _server_environ(job.job_id)
    assert env.get("CUDA_VISIBLE_DEVICES", "") != "", f"the server of job {job.job_id} sees no GPU: {env}"
    # Slurm hands the job the slice's device: one of c-gpu1's emulated MIG devices.
    detail = handle.run([handle.scontrol, "show", "job", "-d", str(job.job_id)], check=True).stdout
    assert f"gpu:{SLICE}:1(IDX:" in detail, detail

    # Without the browser nothing keeps the server active: the culler ends it, and with it the job.
    browser.quit()
    seen: list[str] = []

    def ended() -> bool:
        seen.append(handle.sacct_state(job.job_id))
        return _server_job(handle) is None and seen[-1] not in ("", "RUNNING", "PENDING")

    try:
        wait_for(ended, 300, f"the culler to end notebook job {job.job_id}", interval=2)
    except TimeoutError as exc:
        raise AssertionError(f"{exc}; sacct said {seen[-3:]}; hub log:\n{_hub_log(hub)[-4000:]}") from None
    assert seen[-1] == "CANCELLED", seen[-5:]
    log = _hub_log(hub)
    assert f"Culling server {USER} (inactive for" in log


def test_the_hub_serves_only_the_spec_users(hub_cluster):
    """The fragment's allowed users: a spec user logs in, a Unix user outside the pool does not."""
    import http.cookiejar
    import urllib.error
    import urllib.parse
    import urllib.request

    _, hub = hub_cluster

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args, **kwargs):
            return None

    def login(user: str) -> str:
        jar = http.cookiejar.CookieJar()
        opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar), NoRedirect())
        with opener.open(f"{hub.url}/hub/login") as resp:
            page = resp.read().decode()
        xsrf = page.split('name="_xsrf" value="', 1)[1].split('"', 1)[0]
        data = urllib.parse.urlencode({"username": user, "password": hub.password(), "_xsrf": xsrf}).encode()
        try:
            with opener.open(f"{hub.url}/hub/login", data=data) as resp:
                return str(resp.status)
        except urllib.error.HTTPError as exc:
            return str(exc.code)

    assert login("bob") == "302"  # logged in, sent on
    assert login("slurmpool") == "403"  # the bridge's user is in the spec, but its project has no notebook tier
