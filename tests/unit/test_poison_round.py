"""The fault bench's poison round with a stand-in lab: which workers it waits for."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from bench.faults import poison_job
from schemas.jobs import JobStatus


@dataclass
class _Process:
    pid: int


@dataclass
class _Lab:
    """Attempt N of the poison job runs on ``attempt_pids[N - 1]``; a worker the round
    killed cannot warm (as a real one killed with SIGKILL cannot)."""

    attempt_pids: list[int]
    max_attempts: int = 3
    processes: dict[int, _Process] = field(default_factory=dict)
    started: int = 100
    attempt: int = 0
    warmed: list[int] = field(default_factory=list)

    def job(self, client: Any, job_id: str) -> Any:
        if self.attempt >= self.max_attempts:
            return SimpleNamespace(status=JobStatus.DEAD_LETTER.value)
        self.attempt += 1
        worker = f"small-{self.attempt_pids[self.attempt - 1]}@host"
        return SimpleNamespace(
            status=JobStatus.RUNNING.value, attempts=self.attempt, worker_id=worker
        )

    def kill(self, worker_id: str) -> None:
        self.processes.pop(int(worker_id.removeprefix("small-").removesuffix("@host")))

    def start_worker(self) -> _Process:
        self.started += 1
        self.processes[self.started] = _Process(self.started)
        return self.processes[self.started]

    def wait_warm(self, process: _Process) -> str:
        assert process.pid in self.processes, f"waited for worker {process.pid}, killed"
        self.warmed.append(process.pid)
        return f"small-{process.pid}@host"


def test_a_replacement_that_took_a_later_attempt_is_not_waited_for() -> None:
    # Attempt 1 on an old worker (1); attempts 2 and 3 on the first two replacements.
    lab = _Lab(attempt_pids=[1, 101, 102], processes={1: _Process(1), 2: _Process(2)})
    client = SimpleNamespace(submit=lambda request, tier: SimpleNamespace(job_id="j"))
    assert poison_job(lab, client, max_tokens=4)  # type: ignore[arg-type]
    assert lab.warmed == [103]  # the one replacement that never met the job
