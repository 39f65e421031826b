"""The whole ``squeue --json`` read, streamed: the fallback of a narrow job read that text cannot say.

When more jobs than :data:`~slurm_pool.adapters.narrow.FALLBACK_LIST_MAX` need their JSON, one whole
``squeue --json`` is read, and only those jobs' records are kept, one job at a time.
"""

from __future__ import annotations

from typing import IO, Any, Iterable, Iterator, Mapping

from slurm_pool.adapters.records import JobRecord, RecordSkipped, convert_record, job_record, skipped


def _json_job(job: Mapping[str, Any]) -> JobRecord:
    return job_record(job, keep_raw=False)  # 200,000 jobs' JSON is not worth keeping


def wanted_records(stream: IO[bytes], ids: Iterable[int], what: str) -> Iterator[JobRecord]:
    """The records of jobs ``ids`` in a whole ``squeue --json`` document read from ``stream``, one job at a time.

    Only those jobs are converted, and none keeps its JSON (``raw``), so a queue of
    200,000 jobs never stands in memory as a document (``sacct_stream``'s reader).
    """
    from slurm_pool.adapters.sacct_stream import sacct_jobs  # not at import: the node hooks never stream

    wanted = set(ids)
    for i, raw in sacct_jobs(stream, what):
        if raw.get("job_id") not in wanted:
            continue
        try:
            yield convert_record(_json_job, raw, f"{what}: jobs[{i}]")
        except RecordSkipped as problem:
            skipped(problem)
