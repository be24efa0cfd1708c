"""docker-compose.yml cannot run here (no Docker engine); check what can be checked."""

from __future__ import annotations

from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


def test_compose_has_the_documented_services() -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    services = compose["services"]
    assert {"redis", "postgres", "migrate", "flower"} <= set(services)
    assert services["migrate"]["command"] == ["db", "upgrade"]


def test_every_worker_is_pinned_to_exactly_one_gpu() -> None:
    services = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
    workers = {name: s for name, s in services.items() if name.startswith("worker-")}
    assert len(workers) >= 3
    seen_gpus = set()
    for service in workers.values():
        (device,) = service["deploy"]["resources"]["reservations"]["devices"]
        (gpu,) = device["device_ids"]
        seen_gpus.add(gpu)
        assert service["command"][:2] == ["worker", "--tier"]
        assert "--gpu" in service["command"]
    assert len(seen_gpus) == len(workers)
