"""The service with its own checks replaced (``app.dependency_overrides``): Slurm alone decides, so a test
proves that Slurm refuses what the service would have refused first."""

from __future__ import annotations

from typing import Any, Sequence

from slurm_pool.adapters.records import JobRecord
from slurm_pool.jobid import JobId
from slurm_pool.web import models, submitting, views
from slurm_pool.web.service import Access, Service, access


class SlurmDecides(Access):
    """No check of the service's own: every job is seen, every submission and action goes to Slurm."""

    def may_see(self, me: views.Viewer, records: Sequence[JobRecord]) -> bool:
        return True

    def explain(self, svc: Service, me: views.Viewer, body: models.SubmitRequest) -> models.Explanation:
        return submitting.explain(svc.spec, svc.tables(), me, body)

    def check_submit(self, explanation: models.Explanation) -> None:
        return None

    def before_action(self, svc: Service, ref: JobId, me: views.Viewer) -> None:
        return None

    def job_to_move(self, svc: Service, ref: JobId, me: views.Viewer) -> JobRecord:
        return svc.reader.job(ref.job) or JobRecord(ref.job)

    def tier_move(self, svc: Service, me: views.Viewer, job: JobRecord, tier: str) -> tuple[str, str | None]:
        try:
            return tier, views.tier_route(svc.tables(), job, tier)
        except ValueError:
            return tier, None  # a tier the project may not use: Slurm says so


def slurm_decides(app: Any, check_access: bool = False) -> Any:
    """``app`` with the service's own checks off (unless ``check_access``)."""
    if not check_access:
        app.dependency_overrides[access] = SlurmDecides
    return app
