"""Issue 27, check 1: the console in a real browser, and the SDK, over the real cluster.

Alice logs in to the console in Debian's Chromium, sees the pool, and submits
a checkpointing scavenger job through the form that borrows one GPU of Bob's
idle server b-gpu1; it runs.  She submits the same job through the Python
SDK (with a token from ``scontrol token``) onto b-gpu1's other GPU.  Bob logs
in and submits to his guaranteed tier; both of Alice's jobs checkpoint inside
GraceTime, are requeued, resume and finish.  The browser's job page, and the
SDK's job detail, show each step with times.  One preemption serves both
(each costs about a minute of CI per Slurm version).  Screenshots of every
page go to ``test-artifacts/console/``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.browser import ARTIFACTS, usable
from tests.support.ckptjob import job_python, workdir
from tests.support.console import running_console
from tests.support.patience import patience, wait_for

pytestmark = pytest.mark.slurm

NODE = "b-gpu1"
STEPS, EVERY, STEP_TIME = 300, 25, 0.1
SCRIPT = """#!/bin/bash
export PYTHONPATH={lib}
exec {py} -m slurm_pool.checkpoint -- {py} {train} --steps {steps} --every {every} --step-time {dt}
"""
#: The life of a job preempted once, in order, as its page shows it.
LIFE = ["submitted", "started", "preempted", "checkpointed", "requeued", "resumed", "finished"]


def _script(work: Path) -> str:
    return SCRIPT.format(
        lib=work / "lib", py=job_python(), train=work / "train_sim.py", steps=STEPS, every=EVERY, dt=STEP_TIME
    )


def _base(cluster) -> Path:
    """Where the SPANK plugin's ``--checkpoint`` puts a job's checkpoints on this cluster (its spec's base_dir
    is rendered into plugstack.conf with the state directory's path)."""
    return cluster.cluster.layout.root / "checkpoints"


def _first_checkpoint(cluster, job_id: int) -> None:
    """Wait until the job has written a checkpoint, so the preemption has something to resume from."""
    d = _base(cluster) / "alice" / str(job_id)
    wait_for(lambda: d.is_dir() and any(d.iterdir()), 120, f"job {job_id}'s first checkpoint in {d}")


def _shot(driver, name: str, version: str) -> None:
    d = ARTIFACTS / "console"
    d.mkdir(parents=True, exist_ok=True)
    path = d / f"{name}-slurm-{version}.png"
    assert driver.save_screenshot(str(path)) and path.stat().st_size > 0


def _wait(driver, what: str, fn, timeout: float = 60):
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, patience(timeout), poll_frequency=0.25).until(fn, f"waiting for {what}")


def _login(driver, url: str, user: str, password: str) -> None:
    from selenium.webdriver.common.by import By

    driver.get(url + "/")
    for fid, value in (("login-user", user), ("login-password", password)):
        el = _wait(driver, f"the login form's {fid}", lambda d, fid=fid: usable(d, fid))
        el.clear()
        el.send_keys(value)
    _wait(driver, "the login button", lambda d: usable(d, "login-submit")).click()
    _wait(driver, f"{user} to be logged in", lambda d: user in d.find_element(By.ID, "whoami").text)


def _logout(driver) -> None:
    _wait(driver, "the logout button", lambda d: usable(d, "logout")).click()
    _wait(driver, "the login form again", lambda d: usable(d, "login-user"))


def _submit(driver, fields: dict[str, str], checkpoint: bool) -> int:
    from selenium.webdriver.common.by import By

    driver.get(driver.current_url.split("#")[0] + "#/submit")
    _wait(driver, "the submit form", lambda d: d.find_elements(By.ID, "f-script"))
    _fill(driver, fields)
    box = driver.find_element(By.ID, "f-checkpoint")
    if box.is_selected() != checkpoint:
        box.click()
    driver.find_element(By.ID, "f-explain").click()
    _wait(driver, "the policy's explanation", lambda d: d.find_element(By.ID, "explanation").text.strip())
    driver.find_element(By.ID, "f-submit").click()
    el = _wait(
        driver,
        "the new job's id",
        lambda d: (d.find_elements(By.CSS_SELECTOR, "#submit-result[data-job-id]") or [None])[0],
    )
    return int(el.get_attribute("data-job-id"))


def _row_state(driver, job_id: int) -> str:
    from selenium.webdriver.common.by import By

    rows = driver.find_elements(By.CSS_SELECTOR, f'#jobs-table tbody tr[data-job-id="{job_id}"] td.state')
    return rows[0].text.strip() if rows else ""


def _kinds(driver) -> list[str]:
    from selenium.webdriver.common.by import By

    return [li.get_attribute("data-kind") for li in driver.find_elements(By.CSS_SELECTOR, "#timeline li[data-kind]")]


def _no_browser_errors(driver) -> None:
    """Nothing the page did was refused by the CSP, and no script failed."""
    # fetch() cannot keep Chrome from logging an expected 401 (before the login) as a failed resource
    bad = [e for e in driver.get_log("browser")
           if e.get("level") == "SEVERE" and "Failed to load resource" not in e.get("message", "")]  # fmt: skip
    assert not bad, bad


def _in_order(seen: list[str], wanted: list[str]) -> bool:
    it = iter(seen)
    return all(k in it for k in wanted)


def test_alice_borrows_bobs_server_in_the_browser_and_through_the_sdk(cluster, node_conf, browser):
    """One preemption serves both: alice's browser job and her SDK job each hold one of b-gpu1's two GPUs, and
    bob's guaranteed job (submitted in the browser) takes both back."""
    from selenium.webdriver.common.by import By

    from slurm_pool.client import PoolClient

    work = workdir("console")
    state = work / "state"
    node_conf(state_dir=str(state), checkpoint_base_dir=str(_base(cluster)), gpus="none", warn_seconds="20")
    version = cluster.version.series
    with running_console(cluster, state_dir=str(state)) as svc:
        sdk = PoolClient(svc.url, svc.token("alice"))
        assert sdk.me().user == "alice"
        pool = sdk.status()
        assert pool.total > 0 and sum(pool.states.values()) == pool.total

        _login(browser, svc.url, "alice", svc.passwords["alice"])
        _wait(browser, "the pool's figures", lambda d: d.find_element(By.ID, "pool-total").text.strip())
        _shot(browser, "pool", version)
        fields = {"f-tier": "scavenger", "f-project": "proja", "f-gpus": "1", "f-nodes": NODE, "f-time": "20",
                  "f-name": "alice-train", "f-script": _script(work)}  # fmt: skip
        web_job = _submit(browser, fields, checkpoint=True)
        _shot(browser, "submit", version)
        sub = sdk.submit(_script(work), "scavenger", project="proja", gpus=1, nodes=NODE, time_limit="20",
                         name="sdk-train", checkpoint=True)  # fmt: skip
        assert sub.explanation.ok, sub.explanation
        sdk.wait(sub.job_id, "RUNNING", timeout=patience(120))
        browser.get(svc.url + "/#/jobs")
        _wait(browser, f"job {web_job} RUNNING in the table", lambda d: _row_state(d, web_job) == "RUNNING", 120)
        _shot(browser, "jobs", version)
        browser.get(svc.url + "/#/nodes")
        _wait(
            browser,
            f"{NODE}'s GPUs drawn",
            lambda d: (
                len(d.find_elements(By.CSS_SELECTOR, f'.node[data-node="{NODE}"] .unit[data-state="allocated"]')) == 2
            ),
        )
        _shot(browser, "nodes", version)
        _first_checkpoint(cluster, web_job)
        _first_checkpoint(cluster, sub.job_id)
        _logout(browser)

        # Bob takes his server back through his guaranteed tier.
        _login(browser, svc.url, "bob", svc.passwords["bob"])
        fields = {"f-tier": "guaranteed", "f-project": "projb", "f-gpus": "2", "f-time": "1", "f-name": "bob-owner",
                  "f-script": "#!/bin/bash\nsleep 5\n"}  # fmt: skip
        bob_job = _submit(browser, fields, checkpoint=False)
        for job in (web_job, sub.job_id):
            cluster.wait_state(job, ["PENDING", "REQUEUED"], timeout=90)
        cluster.wait_state(bob_job, ["COMPLETED"], timeout=120)
        _logout(browser)

        # While Slurm holds alice's requeued jobs, her job page says why they wait and when they start.
        _login(browser, svc.url, "alice", svc.passwords["alice"])
        browser.get(f"{svc.url}/#/job/{web_job}")
        _wait(browser, "why it waits", lambda d: "Predicted start: " in d.find_element(By.ID, "job-why").text, 60)
        why = sdk.why(web_job)
        assert why.job_id == web_job and why.predicted_start is not None, why
        assert why.predicted_start >= why.now, why
        for job in (web_job, sub.job_id):
            cluster.release_begin_time(job)
        done = sdk.wait(sub.job_id, "COMPLETED", timeout=patience(STEPS * STEP_TIME + 240))
        assert done.restart_count >= 1
        cluster.wait_state(web_job, ["COMPLETED"], timeout=STEPS * STEP_TIME + 240)
        browser.get(f"{svc.url}/#/job/{web_job}")
        _wait(browser, "the job page", lambda d: d.find_element(By.ID, "job-state").text.strip() == "COMPLETED", 60)
        _wait(browser, "the whole life on the timeline", lambda d: _in_order(_kinds(d), LIFE), 90)
        times = [li.find_element(By.CSS_SELECTOR, "time").get_attribute("datetime")
                 for li in browser.find_elements(By.CSS_SELECTOR, "#timeline li[data-kind]")]  # fmt: skip
        assert all(times), times
        _shot(browser, "job", version)
        _no_browser_errors(browser)

        # sacct and the epilog's record lag the job's end
        wait_for(lambda: _in_order([e.kind for e in sdk.job(sub.job_id).timeline], LIFE), 60, "the whole life")
        detail = sdk.job(sub.job_id)
        assert all(e.time for e in detail.timeline), detail.timeline
        assert detail.checkpoint_age_s is not None and detail.checkpoint_age_s <= EVERY * STEP_TIME + 5


def test_the_consoles_cancel_of_task_n_2_cancels_that_task_alone(cluster, monkeypatch):
    """Issue 49: ``POST /jobs/N_2/cancel`` runs ``scancel N_2`` as the user (never ``scancel N2``): task 2 of
    array N (held, so all three wait in one record) goes, tasks 1 and 3 and another job of the user's stay; an id
    that is not Slurm's notation is refused before Slurm is asked."""
    import httpx

    from slurm_pool.web import actions
    from tests.support.console import running_console

    ran: list[list[str]] = []

    class Recording:
        def __init__(self, inner):
            self.inner = inner

        def run(self, argv, **kw):
            ran.append(list(argv))
            return self.inner.run(argv, **kw)

    real = actions.default_runner
    monkeypatch.setattr(actions, "default_runner", lambda user, env: Recording(real(user, env)))
    held = ("-p", "scavenger", "--qos=scavenger", "-A", "projc", "--signal=B:USR1@30", "--gres=gpu:1", "-t", "10",
            "-H", "-o", "/dev/null", "-D", "/tmp")  # fmt: skip
    sleep = "#!/bin/bash\nsleep 300\n"
    array = cluster.sbatch("--array=1-3", *held, user="carol", script=sleep)
    other = cluster.sbatch(*held, user="carol", script=sleep)

    def ids() -> list[str]:
        return sorted(cluster.run(["squeue", "-h", "-o", "%i"]).stdout.split())

    assert ids() == sorted([f"{array}_[1-3]", str(other)])
    with running_console(cluster) as svc:
        with httpx.Client(base_url=svc.url, headers={"Authorization": f"Bearer {svc.token('carol')}"},
                          timeout=60) as c:  # fmt: skip
            for bad in (f"{array}__2", f"+{other}", f"0{other}", f"{other}.0", f"{array}_02"):
                r = c.post(f"/api/v1/jobs/{bad}/cancel")
                assert r.status_code == 422 and r.json()["field"] == "path.job_id", (bad, r.text)
            assert ran == [] and ids() == sorted([f"{array}_[1-3]", str(other)])
            r = c.post(f"/api/v1/jobs/{array}_2/cancel")
            assert r.status_code == 200 and r.json()["job_id"] == f"{array}_2", r.text
    assert ran == [["scancel", f"{array}_2"]]
    wait_for(lambda: f"{array}_[1,3]" in ids(), 30, f"task 2 of array {array} to go")
    assert ids() == sorted([f"{array}_[1,3]", str(other)])
    assert cluster.job_field(other, "%T") == "PENDING"


def _fill(driver, fields: dict[str, str]) -> None:
    """Fill the submit form (a select waits for its option)."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    for fid, value in fields.items():
        el = driver.find_element(By.ID, fid)
        if el.tag_name == "select":
            _wait(
                driver,
                f"{value} in {fid}",
                lambda d, el=el, v=value: v in [o.get_attribute("value") for o in Select(el).options],
            )
            Select(el).select_by_value(value)
        else:
            el.clear()
            el.send_keys(value)


def _explain(driver):
    """Press Explain and wait for the new explanation (the old one's content goes)."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.expected_conditions import staleness_of

    before = driver.find_elements(By.CSS_SELECTOR, "#explanation > *")
    driver.find_element(By.ID, "f-explain").click()
    if before:
        _wait(driver, "the old explanation to go", staleness_of(before[0]))
    _wait(driver, "a new explanation", lambda d: d.find_elements(By.CSS_SELECTOR, "#explanation > p.verdict"))
    return driver.find_element(By.ID, "explanation")


def _controls(driver) -> list[str]:
    """The job page's action buttons a user can see."""
    from selenium.webdriver.common.by import By

    buttons = driver.find_elements(By.CSS_SELECTOR, "#job-control .buttons button[data-action]")
    return sorted(b.get_attribute("data-action") for b in buttons if b.is_displayed())


def test_first_use_in_chromium(cluster, browser):
    """Issue 49, the console's first-use list: a job no node can hold is refused by the explanation before
    anything is submitted (the form's GPUs and the script's #SBATCH lines alike); Slurm's two-line refusal
    keeps its line break; the job page offers only what the job's state allows, and nothing once it ended."""
    from selenium.webdriver.common.by import By

    version = cluster.version.series
    queue = lambda: cluster.cluster.runner.run(["squeue", "-h", "-u", "alice", "-o", "%i"]).stdout.split()  # noqa: E731
    with running_console(cluster) as svc:
        _login(browser, svc.url, "alice", svc.passwords["alice"])
        browser.get(svc.url + "/#/submit")
        _wait(browser, "the submit form", lambda d: d.find_elements(By.ID, "f-script"))

        # a-owner's nodes hold 2 GPUs each: 4 on one node is refused, from the form or from the script
        for gpus, script in (("4", "#!/bin/bash\ntrue\n"), ("0", "#!/bin/bash\n#SBATCH --gres=gpu:4\ntrue\n")):
            _fill(browser, {"f-tier": "guaranteed", "f-gpus": gpus, "f-script": script})
            box = _explain(browser)
            assert box.get_attribute("data-ok") == "false"
            assert "no node of partition 'a-owner' holds 4 GPU(s)" in box.text and "the largest holds 2" in box.text
        _shot(browser, "refused", version)
        assert queue() == []  # nothing was submitted

        # Slurm's refusal of an unknown option is two lines: shown as two lines, not with \x0a
        _fill(browser, {"f-gpus": "1", "f-script": "#!/bin/bash\n#SBATCH --no-such-option\ntrue\n"})
        browser.find_element(By.ID, "f-submit").click()
        err = _wait(
            browser,
            "Slurm's refusal",
            lambda d: d.find_element(By.ID, "error").text.strip() and d.find_element(By.ID, "error"),
        )
        said = err.get_attribute("textContent")
        assert "--no-such-option" in said and "\n" in said.strip() and "\\x0a" not in said, said
        assert err.value_of_css_property("white-space") == "pre-wrap"
        assert len([ln for ln in err.text.splitlines() if ln.strip()]) >= 2, err.text
        _shot(browser, "error-lines", version)

        # a job that waits: cancel and hold; held: cancel and release; cancelled: nothing
        _fill(browser, {"f-script": "#!/bin/bash\n#SBATCH --begin=now+1hour\nsleep 600\n"})
        assert "~/slurm-%j.out" in _explain(browser).text  # where the output goes, before it is sent
        browser.find_element(By.ID, "f-submit").click()
        el = _wait(
            browser,
            "the new job",
            lambda d: (d.find_elements(By.CSS_SELECTOR, "#submit-result[data-job-id]") or [None])[0],
        )
        job = int(el.get_attribute("data-job-id"))
        assert f"slurm-{job}.out" in browser.find_element(By.ID, "submit-output").text
        browser.get(f"{svc.url}/#/job/{job}")
        _wait(browser, "the waiting job's controls", lambda d: _controls(d) == ["cancel", "hold"], 60)
        assert browser.find_element(By.ID, "job-tier-form").is_displayed()
        labels = [dt.text for dt in browser.find_elements(By.CSS_SELECTOR, "#job-fields dt")]
        assert "Started" not in labels and "Ended" not in labels and "Output file" in labels, labels
        browser.find_element(By.ID, "job-hold").click()
        _wait(browser, "the held job's controls", lambda d: _controls(d) == ["cancel", "release"], 60)
        browser.find_element(By.ID, "job-cancel").click()
        browser.find_element(By.ID, "job-cancel-confirm").click()
        _wait(
            browser, "the job cancelled", lambda d: d.find_element(By.ID, "job-state").text.strip() == "CANCELLED", 60
        )
        _wait(browser, "no controls left", lambda d: _controls(d) == [], 30)
        assert browser.find_element(By.ID, "job-no-actions").is_displayed()
        assert not browser.find_element(By.ID, "job-tier-form").is_displayed()
        _shot(browser, "ended", version)
        _no_browser_errors(browser)
