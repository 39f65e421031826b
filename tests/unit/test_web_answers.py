"""Answers built once per read and shared: ready before requests see the read, built by one thread when
missing, and sent again only when they changed (ETag / 304) -- the caller still checked on every request."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from slurm_pool.web import views
from slurm_pool.web.service import AnswerCache
from tests.unit.test_web_app import bearer, make

pytestmark = pytest.mark.usefixtures("narrow_from_json")


@pytest.mark.parametrize("path", ["/api/v1/pool", "/api/v1/jobs", "/api/v1/jobs?state=running&sort=-job_id"])
def test_an_unchanged_answer_is_304_and_the_caller_still_checked(path: str) -> None:
    client, _runner, _slurm, clock = make()
    first = client.get(path, headers=bearer("alice"))
    tag = first.headers["etag"]
    assert first.status_code == 200 and tag.startswith('"') and first.content
    again = client.get(path, headers={**bearer("alice"), "If-None-Match": tag})
    assert (again.status_code, again.content, again.headers["etag"]) == (304, b"", tag)
    assert "content-security-policy" in again.headers and again.headers["cache-control"] == "no-store"
    listed = client.get(path, headers={**bearer("alice"), "If-None-Match": f'"other", W/{tag}'})
    assert listed.status_code == 304
    anonymous = client.get(path, headers={"If-None-Match": tag})
    assert anonymous.status_code == 401 and anonymous.json()["status"] == 401
    operator = client.get(path, headers={**bearer("olga"), "If-None-Match": tag})  # sees more: her own answer
    assert operator.status_code == 200 and operator.headers["etag"] != tag
    clock.now += 10  # the next read: the pool's time moves, the job lists stay as they were
    client.get(path, headers=bearer("alice"))
    client.app.state.reader.wait_idle()  # type: ignore[attr-defined]
    later = client.get(path, headers={**bearer("alice"), "If-None-Match": tag})
    assert later.status_code == (200 if path.endswith("pool") else 304)


def test_another_users_tag_gets_their_own_answer() -> None:
    client, *_ = make()
    tag = client.get("/api/v1/jobs", headers=bearer("alice")).headers["etag"]
    bob = client.get("/api/v1/jobs", headers={**bearer("bob"), "If-None-Match": tag})
    assert bob.status_code == 200 and [j["job_id"] for j in bob.json()["jobs"]] == [2, 5]


def test_answers_are_ready_before_requests_see_a_read(monkeypatch: pytest.MonkeyPatch) -> None:
    """After a read, polling costs no build: the pool's answers (both roles) and the job index were made
    in the reader's thread before the read was published."""
    client, _runner, _slurm, clock = make()
    for user in ("alice", "bob", "olga"):  # the job lists asked of one read are made for the next before it shows
        client.get("/api/v1/pool", headers=bearer(user))
        client.get("/api/v1/jobs", headers=bearer(user))
    clock.now += 10
    client.get("/api/v1/pool", headers=bearer("alice"))  # starts the next read
    client.app.state.reader.wait_idle()  # type: ignore[attr-defined]
    built: list[str] = []
    real_pool, real_index = views.pool, views.JobIndex

    def pool(*a: Any, **k: Any) -> Any:
        built.append("pool")
        return real_pool(*a, **k)

    def index(*a: Any, **k: Any) -> Any:
        built.append("index")
        return real_index(*a, **k)

    real_list = views.JobIndex.job_list

    def listed(self: Any, *a: Any, **k: Any) -> Any:
        built.append("list")
        return real_list(self, *a, **k)

    monkeypatch.setattr(views, "pool", pool)
    monkeypatch.setattr(views, "JobIndex", index)
    monkeypatch.setattr(real_index, "job_list", listed)
    for user in ("alice", "bob", "olga", "alice"):
        assert client.get("/api/v1/pool", headers=bearer(user)).status_code == 200
        assert client.get("/api/v1/jobs", headers=bearer(user)).status_code == 200
    assert built == []


def test_prepared_answers_are_the_ones_built_on_demand() -> None:
    client, *_ = make()
    client.get("/api/v1/pool", headers=bearer("alice"))
    svc, reader = client.app.state.service, client.app.state.reader  # type: ignore[attr-defined]
    reader.wait_idle()
    snap, version = reader.latest(), reader.version
    bodies = {op: svc.cache.pool_hit(op, snap, version).body for op in (False, True)}
    built = {op: svc.pool_body(op, snap, reader.history, reader.last_reclaims()) for op in (False, True)}
    assert bodies == built and bodies[False] != bodies[True]


def test_a_failed_preparation_leaves_the_read_and_builds_on_demand(caplog: pytest.LogCaptureFixture) -> None:
    client, _runner, _slurm, clock = make()
    reader = client.app.state.reader  # type: ignore[attr-defined]

    def broken(*_a: Any) -> None:
        raise RuntimeError("boom")

    reader.prepare = broken
    res = client.get("/api/v1/pool", headers=bearer("alice"))
    assert res.status_code == 200 and res.json()["total"] == 11
    assert "preparing the answers of a read failed" in caplog.text


def test_a_missing_answer_is_built_once_for_all_who_wait() -> None:
    cache = AnswerCache()
    store: dict[str, int] = {}
    builds: list[int] = []
    start = threading.Barrier(8)

    def build() -> int:
        builds.append(1)
        threading.Event().wait(0.05)  # long enough for the others to queue behind it
        store["k"] = 42
        return 42

    got: list[int] = []

    def ask() -> None:
        start.wait()
        got.append(cache.once("k", lambda: store.get("k"), build))

    threads = [threading.Thread(target=ask) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert (got, builds) == ([42] * 8, [1])
