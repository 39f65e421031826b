"""The submit API against hostile values (issue 49, class 1): Slurm's time format and range, the policy's
reading of ``--time=0``, and JSON bodies in UTF-8 only."""

from __future__ import annotations

import codecs
import json
from typing import Any

import pytest
from pydantic import ValidationError

from slurm_pool.policy.tables import build_tables
from slurm_pool.versions import SlurmVersion
from slurm_pool.web import models, submitting, views
from slurm_pool.web.bodies import NotUtf8Error, decode_json
from tests.unit.test_web_app import SUBMIT, bearer, make
from tests.unit.test_web_views import example_spec, req

pytestmark = pytest.mark.usefixtures("narrow_from_json")

BAD_TIMES = [
    "99999999999999999999",  # past every integer Slurm reads: never handed to sbatch
    "24856-0",  # 2147558400 s: past time_str2secs' int
    "9" * 70,  # longer than any time
    "35791395",  # minutes: 2147483700 s
    "1h",
    "-1",
    "1:2:3:4",
    "1-2-3",
    "１０",  # non-ASCII digits
    " 10",
    "10\n",
    "",
]
GOOD_TIMES = ["0:30", "10", "1:00:00", "2-12", "2-12:30", "2-12:30:00", "24855-0", "UNLIMITED"]


@pytest.mark.parametrize("value", BAD_TIMES, ids=ascii)
def test_the_submit_model_refuses_a_time_slurm_cannot_read(value: str) -> None:
    with pytest.raises(ValidationError) as exc:
        req(time_limit=value)
    assert exc.value.errors()[0]["loc"] == ("time_limit",)


@pytest.mark.parametrize("value", GOOD_TIMES)
def test_the_submit_model_takes_slurm_times(value: str) -> None:
    assert req(time_limit=value).time_limit == value


@pytest.mark.parametrize(("value", "ok"), [("0", False), ("0:00", False), ("0-0", False), ("00:00:00", False),
                                           ("UNLIMITED", False), ("INFINITE", False), ("0:01", True), ("1", True)])  # fmt: skip
def test_a_tier_that_requires_a_time_limit_refuses_zero_as_job_submit_lua_does(value: str, ok: bool) -> None:
    # sbatch(1): "A time limit of zero requests that no time limit be imposed"; job_submit.lua refuses tl == 0.
    spec = example_spec()
    tables = build_tables(spec, SlurmVersion(22, 5))
    assert next(t for t in tables.tiers if t.name == "shared").require_time
    out = submitting.explain(spec, tables, views.viewer(spec, "alice"), req(tier="shared", time_limit=value))
    assert out.ok is ok, out
    if not ok:
        assert any("finite time limit" in r and value in r for r in out.refusals), out.refusals


def test_a_tier_without_the_rule_takes_zero() -> None:
    spec = example_spec()
    tables = build_tables(spec, SlurmVersion(22, 5))
    assert not next(t for t in tables.tiers if t.name == "guaranteed").require_time
    assert submitting.explain(spec, tables, views.viewer(spec, "alice"), req(time_limit="0")).ok


ENCODED = {
    "utf-16": codecs.BOM_UTF16_LE + json.dumps(SUBMIT).encode("utf-16-le"),
    "utf-16-be": json.dumps(SUBMIT).encode("utf-16-be"),
    "utf-32": json.dumps(SUBMIT).encode("utf-32"),
    "utf-8 with a BOM": codecs.BOM_UTF8 + json.dumps(SUBMIT).encode(),
    "latin-1": json.dumps({**SUBMIT, "name": "café"}, ensure_ascii=False).encode("latin-1"),
}


@pytest.mark.parametrize("what", list(ENCODED))
def test_a_body_in_another_encoding_than_utf8_is_refused(what: str) -> None:
    with pytest.raises((NotUtf8Error, ValueError)):
        decode_json(ENCODED[what])
    client = make()[0]
    for path in ("/api/v1/jobs/explain", "/api/v1/jobs", "/api/v1/login"):
        res = client.post(path, headers={**bearer("alice"), "Content-Type": "application/json"}, content=ENCODED[what])
        assert res.status_code == 400, (path, res.status_code, res.text[:300])
        assert res.json()["field"] == "body"


def test_a_utf8_body_is_read() -> None:
    body = json.dumps({**SUBMIT, "name": "café"}, ensure_ascii=False).encode()
    assert decode_json(body)["name"] == "café"
    res = make()[0].post(
        "/api/v1/jobs/explain", headers={**bearer("alice"), "Content-Type": "application/json"}, content=body
    )
    assert res.status_code == 200, res.text[:300]


@pytest.mark.parametrize("path", ["/api/v1/jobs/explain", "/api/v1/jobs"])
@pytest.mark.parametrize("value", ["99999999999999999999", "24856-0"])
def test_the_api_names_the_bad_time_and_runs_nothing(path: str, value: str) -> None:
    client, _, slurm, _ = make()
    body: dict[str, Any] = {**SUBMIT, "time_limit": value}
    res = client.post(path, headers={**bearer("alice"), "Content-Type": "application/json"}, content=json.dumps(body))
    assert res.status_code == 422 and res.json()["field"] == "body.time_limit", res.text[:300]
    assert not slurm.ran
    assert models.SubmitRequest.model_fields["time_limit"].default == "01:00:00"


@pytest.mark.parametrize("value", ["0", "0:00", "UNLIMITED"])
def test_the_api_submits_no_job_without_a_limit_to_a_tier_that_requires_one(value: str) -> None:
    client, _, slurm, _ = make()
    body = {**SUBMIT, "tier": "shared", "time_limit": value}
    res = client.post("/api/v1/jobs", headers={**bearer("alice"), "Content-Type": "application/json"},
                      content=json.dumps(body))  # fmt: skip
    assert res.status_code == 400 and "finite time limit" in res.json()["message"], res.text[:300]
    assert not slurm.ran
