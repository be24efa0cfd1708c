"""docker-compose.yml cannot run here (no Docker engine); check what can be checked."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]


def test_compose_has_the_documented_services() -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    services = compose["services"]
    assert {"redis", "postgres", "migrate", "flower"} <= set(services)
    assert services["migrate"]["command"] == ["db", "upgrade"]


def test_flower_in_compose_has_no_default_password() -> None:
    flower = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]["flower"]
    assert not any("basic-auth" in part or ":-" in part for part in flower["command"])
    # ${VAR:?message}: compose refuses to start until the operator sets credentials.
    assert flower["environment"]["LLMQ_FLOWER_BASIC_AUTH"].startswith("${LLMQ_FLOWER_BASIC_AUTH:?")
    assert flower["environment"]["LLMQ_BROKER_URL"]  # the shared llmq settings still apply


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
    documents = yaml.safe_load_all((ROOT / "deploy/k8s/keda-scaledobjects.yaml").read_text())
    scaled = [d for d in documents if d["kind"] == "ScaledObject"]
    by_target = {s["spec"]["scaleTargetRef"]["name"]: s for s in scaled}
    assert set(by_target) == {f"llmq-worker-{t}" for t in ("small", "medium", "large")}
    for tier in ("small", "medium", "large"):
        lists = {
            t["metadata"]["listName"] for t in by_target[f"llmq-worker-{tier}"]["spec"]["triggers"]
        }
        assert lists == {f"llm.{tier}.interactive", f"llm.{tier}.batch"}


# Every manifest is checked against the real schemas: Kubernetes' own (bundled by
# kubernetes-validate, offline) for built-in kinds, KEDA's CRDs for KEDA's kinds.
K8S_VERSIONS = ("1.30", kubernetes_validate.latest_version())
KEDA_SCHEMA = json.loads((Path(__file__).with_name("keda_schema.json")).read_text())
# The redis-lists scaler's parameters (KEDA's pkg/scalers/redis_scaler.go).
REDIS_SCALER_METADATA = {
    "address", "addresses", "host", "hosts", "port", "ports", "username", "password",
    "listName", "listLength", "activationListLength", "databaseIndex", "enableTLS",
    "unsafeSsl", "addressFromEnv", "hostFromEnv", "portFromEnv", "passwordFromEnv",
}  # fmt: skip


def manifests() -> list[tuple[str, dict[str, Any]]]:
    return [
        (path.name, document)
        for path in sorted((ROOT / "deploy/k8s").glob("*.yaml"))
        for document in yaml.safe_load_all(path.read_text())
        if document is not None
    ]


def test_every_manifest_is_valid_against_its_schema() -> None:
    kinds = set()
    for name, document in manifests():
        kinds.add(document["kind"])
        if document["apiVersion"].startswith("keda.sh/"):
            schema = KEDA_SCHEMA["$defs"][document["kind"]]
            jsonschema.Draft202012Validator(schema).validate(document)
        else:
            for version in K8S_VERSIONS:
                kubernetes_validate.validate(document, version, strict=True)
        assert name  # every document came from a file
    assert kinds == {"Deployment", "Secret", "ScaledObject", "TriggerAuthentication"}


@pytest.mark.parametrize(
    "broken",
    [
        lambda d: d["spec"].update(replicaz=1),  # a typo in a Deployment
        lambda d: d["spec"]["template"]["spec"]["containers"][0].update(args="worker"),
    ],
)
def test_the_kubernetes_check_catches_mistakes(broken: Any) -> None:
    deployment = yaml.safe_load((ROOT / "deploy/k8s/worker-small.yaml").read_text())
    broken(deployment)
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, K8S_VERSIONS[-1], strict=True)


@pytest.mark.parametrize(
    "broken",
    [
        lambda d: d["spec"].pop("scaleTargetRef"),
        lambda d: d["spec"]["triggers"][0].update(authRef={"name": "x"}),
        lambda d: d["spec"]["triggers"][0]["metadata"].update(listLength=16),  # not a string
        lambda d: d["spec"].update(minReplicaCount="1"),
    ],
)
def test_the_keda_check_catches_mistakes(broken: Any) -> None:
    scaled = next(d for _, d in manifests() if d["kind"] == "ScaledObject")
    broken(scaled)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft202012Validator(KEDA_SCHEMA["$defs"]["ScaledObject"]).validate(scaled)


def test_keda_references_resolve_to_what_the_manifests_define() -> None:
    documents = [d for _, d in manifests()]
    by_kind: dict[str, dict[str, dict[str, Any]]] = {}
    for document in documents:
        by_kind.setdefault(document["kind"], {})[document["metadata"]["name"]] = document
    secret_keys = {
        name: set(secret.get("stringData", {})) | set(secret.get("data", {}))
        for name, secret in by_kind["Secret"].items()
    }
    deployments = by_kind["Deployment"]
    for deployment in deployments.values():
        (container,) = deployment["spec"]["template"]["spec"]["containers"]
        for source in container["envFrom"]:
            assert source["secretRef"]["name"] in secret_keys
    for scaled in by_kind["ScaledObject"].values():
        target = deployments[scaled["spec"]["scaleTargetRef"]["name"]]
        (container,) = target["spec"]["template"]["spec"]["containers"]
        env = {e["name"] for e in container.get("env", [])} | {
            key
            for source in container.get("envFrom", [])
            for key in secret_keys.get(source.get("secretRef", {}).get("name"), set())
        }
        for trigger in scaled["spec"]["triggers"]:
            assert trigger["type"] == "redis"
            metadata = trigger["metadata"]
            assert set(metadata) <= REDIS_SCALER_METADATA, set(metadata) - REDIS_SCALER_METADATA
            assert int(metadata["listLength"]) > 0
            # An *FromEnv parameter names a variable of the scaled container.
            for key, value in metadata.items():
                if key.endswith("FromEnv"):
                    assert value in env, f"{key}: {value} is not set in the target's container"
            params = set(metadata)
            auth = by_kind["TriggerAuthentication"][trigger["authenticationRef"]["name"]]
            for ref in auth["spec"]["secretTargetRef"]:
                assert ref["key"] in secret_keys[ref["name"]], ref
                params.add(ref["parameter"])
            assert params & {"address", "addresses", "host", "hosts", "addressFromEnv"}, (
                "the scaler has no Redis address"
            )
