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
    pinned = {name: s for name, s in workers.items() if "profiles" not in s}
    assert len(pinned) >= 3
    seen_gpus = set()
    for service in workers.values():
        (device,) = service["deploy"]["resources"]["reservations"]["devices"]
        assert service["command"][:2] == ["worker", "--tier"]
        assert "--gpu" in service["command"]
        if service in pinned.values():
            (gpu,) = device["device_ids"]
            seen_gpus.add(gpu)
        else:
            assert device["count"] == 1  # scaled replicas: one GPU each
    assert len(seen_gpus) == len(pinned)


def test_kubernetes_workers_take_one_gpu_and_keda_scales_each_on_its_queues() -> None:
    for tier in ("small", "medium", "large"):
        deployment = yaml.safe_load((ROOT / f"deploy/k8s/worker-{tier}.yaml").read_text())
        (container,) = deployment["spec"]["template"]["spec"]["containers"]
        assert container["args"][:3] == ["worker", "--tier", tier]
        assert container["resources"]["limits"]["nvidia.com/gpu"] == 1
    scaled = list(yaml.safe_load_all((ROOT / "deploy/k8s/keda-scaledobjects.yaml").read_text()))
    by_target = {s["spec"]["scaleTargetRef"]["name"]: s for s in scaled}
    assert set(by_target) == {f"llmq-worker-{t}" for t in ("small", "medium", "large")}
    for tier in ("small", "medium", "large"):
        lists = {
            t["metadata"]["listName"] for t in by_target[f"llmq-worker-{tier}"]["spec"]["triggers"]
        }
        assert lists == {f"llm.{tier}.interactive", f"llm.{tier}.batch"}
