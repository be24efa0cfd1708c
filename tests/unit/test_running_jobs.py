"""Which running jobs give way to interactive work."""

from __future__ import annotations

from workers.running_jobs import RunningJob, RunningJobs, StopReason


def _track(jobs: RunningJobs, job_id: str, priority: str, started: float) -> RunningJob:
    job = jobs.start(job_id, RunningJob(started=started), priority=priority)
    return job


def test_the_youngest_batch_jobs_beyond_the_share_give_way() -> None:
    jobs = RunningJobs()
    old = _track(jobs, "old", "batch", 1.0)
    young = _track(jobs, "young", "batch", 3.0)
    middle = _track(jobs, "middle", "batch", 2.0)
    person = _track(jobs, "person", "interactive", 4.0)
    assert jobs.yield_batch(keep=1) == ["middle", "young"]
    assert (young.reason, middle.reason) == (StopReason.YIELDED, StopReason.YIELDED)
    assert young.stop.is_set() and middle.stop.is_set()
    assert old.reason is None and not old.stop.is_set()
    assert person.reason is None


def test_a_job_already_stopping_is_not_asked_twice() -> None:
    jobs = RunningJobs()
    cancelled = _track(jobs, "cancelled", "batch", 1.0)
    cancelled.halt(StopReason.CANCELLED)
    _track(jobs, "b", "batch", 2.0)
    assert jobs.yield_batch(keep=0) == ["b"]
    assert cancelled.reason is StopReason.CANCELLED
    assert jobs.yield_batch(keep=0) == []
