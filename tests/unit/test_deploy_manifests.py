"""Static checks of deploy/: every YAML document parses and the manifests agree with each other.

No Docker engine or Kubernetes cluster is needed: the invariants are checked on the parsed files
(probes on the right ports, resources, image names, selectors, secrets, settings names).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from pathlib import PurePosixPath
from typing import Any

import pytest
import yaml

from common.grpc.readiness import LIVENESS_SERVICE
from common.kernel.config import Settings
from tests.unit.kubernetes_render import render

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
K8S = DEPLOY / "kubernetes"
NAMESPACE = "memory-service"

# component -> (gRPC port, metrics port, replicas)
COMPONENTS = {"ingest": (50051, 9101, 2), "query": (50052, 9102, 3)}
SERVICE_IMAGE_NAME = "memory-service"
DB_IMAGE_NAME = "memory-db"

Doc = dict[str, Any]


def _yaml_files() -> list[Path]:
    return sorted(p for p in DEPLOY.rglob("*") if p.suffix in {".yaml", ".yml"})


def _load(path: Path) -> list[Doc]:
    docs = [doc for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")) if doc is not None]
    for doc in docs:
        assert isinstance(doc, dict), f"{path}: every YAML document must be a mapping"
    return docs


def _k8s_docs() -> list[Doc]:
    """The objects of the production overlay, as `kubectl kustomize` renders them."""
    return list(render("overlays/production"))


def _of_kind(kind: str) -> list[Doc]:
    return [doc for doc in _k8s_docs() if doc["kind"] == kind]


def _one(kind: str) -> Doc:
    docs = _of_kind(kind)
    assert len(docs) == 1, f"expected exactly one {kind}, found {len(docs)}"
    return docs[0]


def _deployments() -> dict[str, Doc]:
    by_component = {}
    for doc in _of_kind("Deployment"):
        component = doc["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/component"]
        assert component not in by_component, f"two Deployments for {component}"
        by_component[component] = doc
    return by_component


def _container(deployment: Doc) -> Doc:
    containers = deployment["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1, f"{deployment['metadata']['name']}: one container expected"
    container: Doc = containers[0]
    return container


def _compose() -> Doc:
    (compose,) = _load(DEPLOY / "compose.yaml")
    return compose


def _config_map() -> Doc:
    (config_map,) = [
        doc for doc in _of_kind("ConfigMap") if doc["metadata"]["name"] == "memory-service-config"
    ]
    return config_map


def _cpu(quantity: str | float) -> float:
    text = str(quantity)
    return float(text[:-1]) / 1000 if text.endswith("m") else float(text)


_MEMORY_UNITS = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "K": 10**3, "M": 10**6, "G": 10**9}


def _memory(quantity: str | int) -> int:
    match = re.fullmatch(r"(\d+(?:\.\d+)?)([KMGT]i?)?", str(quantity))
    assert match, f"bad memory quantity {quantity!r}"
    return int(float(match.group(1)) * _MEMORY_UNITS.get(match.group(2) or "", 1))


def _image_refs() -> Iterator[tuple[str, str]]:
    for deployment in _of_kind("Deployment"):
        yield deployment["metadata"]["name"], _container(deployment)["image"]
    for cluster in _of_kind("Cluster"):
        yield cluster["metadata"]["name"], cluster["spec"]["imageName"]
    for name, service in _compose()["services"].items():
        yield f"compose {name}", service["image"]
    for dockerfile in DEPLOY.rglob("Dockerfile"):
        for line in dockerfile.read_text(encoding="utf-8").splitlines():
            if line.startswith("FROM "):
                yield str(dockerfile.relative_to(DEPLOY)), line.split()[1]


# --------------------------------------------------------------------------------------------------


def test_every_yaml_document_parses() -> None:
    files = _yaml_files()
    assert {p.relative_to(DEPLOY).as_posix() for p in files} >= {
        "compose.yaml",
        "kubernetes/base/kustomization.yaml",
        "kubernetes/base/configmap.yaml",
        "kubernetes/base/ingest.yaml",
        "kubernetes/base/query.yaml",
        "kubernetes/base/memory-db.yaml",
        "kubernetes/overlays/development/kustomization.yaml",
        "kubernetes/overlays/production/kustomization.yaml",
    }
    for path in files:
        assert _load(path), f"{path} has no YAML document"
    for doc in _k8s_docs():
        assert {"apiVersion", "kind", "metadata"} <= doc.keys(), doc
        assert doc["metadata"]["name"]
        if doc["kind"] != "Namespace":
            assert doc["metadata"]["namespace"] == NAMESPACE, doc["metadata"]


def test_kustomization_lists_every_manifest() -> None:
    for folder in ("base", "components/monitoring", "components/backup", "restore"):
        (kustomization,) = _load(K8S / folder / "kustomization.yaml")
        listed = set(kustomization.get("resources", [])) | {
            p["path"] for p in kustomization.get("patches", [])
        }
        present = {p.name for p in (K8S / folder).glob("*.yaml")} - {"kustomization.yaml"}
        assert listed == present, folder
    (base,) = _load(K8S / "base" / "kustomization.yaml")
    assert base["namespace"] == NAMESPACE


def test_resource_names_are_unique_per_kind() -> None:
    keys = [(doc["kind"], doc["metadata"]["name"]) for doc in _k8s_docs()]
    assert len(keys) == len(set(keys)), keys


@pytest.mark.parametrize("component", sorted(COMPONENTS))
def test_deployment_probes_ports_resources_and_image(component: str) -> None:
    grpc_port, metrics_port, replicas = COMPONENTS[component]
    deployment = _deployments()[component]
    spec = deployment["spec"]
    assert spec["replicas"] == replicas
    template_labels = spec["template"]["metadata"]["labels"]
    assert spec["selector"]["matchLabels"].items() <= template_labels.items()

    container = _container(deployment)
    assert container["args"] == [component], "the image's entrypoint is `cb serve`; args pick the service"
    ports = {port["name"]: port["containerPort"] for port in container["ports"]}
    # Worker process i of CB_QUERY_PROCESSES serves metrics on metrics_port + i (docs/decisions/0005-query-worker-processes.md).
    environment = {item["name"]: item.get("value") for item in container.get("env", [])}
    processes = int(environment.get("CB_QUERY_PROCESSES") or 1) if component == "query" else 1
    assert ports == {
        "grpc": grpc_port,
        "metrics": metrics_port,
        **{f"metrics-{index}": metrics_port + index for index in range(1, processes)},
    }

    for probe_name in ("readinessProbe", "livenessProbe", "startupProbe"):
        probe = container[probe_name]
        assert set(probe) & {"grpc", "httpGet", "tcpSocket", "exec"} == {"grpc"}, probe_name
        assert probe["grpc"]["port"] == grpc_port, probe_name
    # Readiness follows the database (overall health, empty service name); liveness and startup ask the
    # process only, so a database outage takes pods out of the Service but never restarts them.
    assert container["readinessProbe"]["grpc"].get("service", "") == ""
    for probe_name in ("livenessProbe", "startupProbe"):
        assert container[probe_name]["grpc"].get("service") == LIVENESS_SERVICE, probe_name

    resources = container["resources"]
    for kind in ("cpu", "memory"):
        assert kind in resources["requests"] and kind in resources["limits"], kind
    assert _cpu(resources["requests"]["cpu"]) <= _cpu(resources["limits"]["cpu"])
    assert _memory(resources["requests"]["memory"]) <= _memory(resources["limits"]["memory"])

    annotations = spec["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/port"] == str(metrics_port)


def test_worker_deployment_runs_cb_worker_on_the_primary_without_ports() -> None:
    worker = _deployments()["worker"]
    container = _container(worker)
    assert (container["command"], container["args"]) == (["cb"], ["worker"])
    assert "ports" not in container and not any(
        s["spec"]["selector"].get("app.kubernetes.io/component") == "worker" for s in _of_kind("Service")
    )
    assert "CB_READ_DATABASE_URL" not in {item["name"] for item in container["env"]}
    grace = float(_config_map()["data"]["CB_SHUTDOWN_GRACE_SECONDS"])
    assert grace < worker["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    resources = container["resources"]
    assert _cpu(resources["requests"]["cpu"]) <= _cpu(resources["limits"]["cpu"])
    assert _memory(resources["requests"]["memory"]) <= _memory(resources["limits"]["memory"])
    assert container["securityContext"]["readOnlyRootFilesystem"] is True


def test_all_service_containers_use_one_image() -> None:
    images = {_container(d)["image"] for d in _deployments().values()}
    assert len(images) == 1
    (image,) = images
    assert image.split(":")[0] == SERVICE_IMAGE_NAME
    compose = _compose()["services"]
    assert compose["ingest"]["image"] == compose["query"]["image"] == image


def test_deployments_read_settings_from_the_config_map_and_the_database_url_from_the_cnpg_secret() -> None:
    config_map = _config_map()
    cluster = _one("Cluster")
    for component, deployment in _deployments().items():
        container = _container(deployment)
        if component == "console":
            # The console is a client of the services: no settings of theirs, no database credentials.
            assert "envFrom" not in container
            assert not any("DATABASE" in item["name"] for item in container["env"]), component
            continue
        refs = [source["configMapRef"]["name"] for source in container["envFrom"] if "configMapRef" in source]
        assert refs == [config_map["metadata"]["name"]], component
        env = {item["name"]: item for item in container["env"]}
        database_url = env["CB_DATABASE_URL"]
        assert "value" not in database_url, "the database URL must not be written in a manifest"
        assert database_url["valueFrom"]["secretKeyRef"] == {
            "name": f"{cluster['metadata']['name']}-app",
            "key": "uri",
        }
    assert "CB_DATABASE_URL" not in config_map["data"]


def test_config_map_keys_are_real_settings_and_agree_with_the_ports(monkeypatch: pytest.MonkeyPatch) -> None:
    data = _config_map()["data"]
    fields = {f"CB_{name.upper()}" for name in Settings.model_fields}
    unknown = sorted(set(data) - fields)
    assert not unknown, f"ConfigMap keys that are no setting: {unknown}"
    for key, value in data.items():
        assert isinstance(value, str), f"{key}: ConfigMap values must be strings"
        monkeypatch.setenv(key, value)
    settings = Settings()
    assert settings.ingest_addr.rsplit(":", 1) == ["0.0.0.0", str(COMPONENTS["ingest"][0])]
    assert settings.query_addr.rsplit(":", 1) == ["0.0.0.0", str(COMPONENTS["query"][0])]
    assert settings.ingest_metrics_port == COMPONENTS["ingest"][1]
    assert settings.query_metrics_port == COMPONENTS["query"][1]


def test_services_select_the_deployment_pods_and_target_named_ports() -> None:
    deployments = _deployments()
    services = _of_kind("Service")
    assert services
    covered = set()
    for service in services:
        selector = service["spec"]["selector"]
        matches = [
            component
            for component, deployment in deployments.items()
            if selector.items() <= deployment["spec"]["template"]["metadata"]["labels"].items()
        ]
        assert len(matches) == 1, f"Service {service['metadata']['name']} selects {matches}"
        (component,) = matches
        covered.add(component)
        container_ports = {p["name"]: p["containerPort"] for p in _container(deployments[component])["ports"]}
        for port in service["spec"]["ports"]:
            target = port["targetPort"]
            assert target in container_ports or target in container_ports.values(), port
            resolved = container_ports.get(target, target)
            assert port["port"] == resolved, (
                f"{service['metadata']['name']}: keep the service port = container port"
            )
    assert covered == {*COMPONENTS, "console"}


def test_pod_disruption_budgets_select_deployments() -> None:
    deployments = _deployments()
    for pdb in _of_kind("PodDisruptionBudget"):
        selector = pdb["spec"]["selector"]["matchLabels"]
        assert any(
            selector.items() <= d["spec"]["template"]["metadata"]["labels"].items()
            for d in deployments.values()
        )


def test_query_hpa_scales_on_cpu_within_the_connection_budget() -> None:
    hpa = _one("HorizontalPodAutoscaler")
    query = _deployments()["query"]
    target = hpa["spec"]["scaleTargetRef"]
    assert (target["apiVersion"], target["kind"], target["name"]) == (
        "apps/v1",
        "Deployment",
        query["metadata"]["name"],
    )
    assert hpa["spec"]["minReplicas"] == query["spec"]["replicas"]
    assert hpa["spec"]["maxReplicas"] >= hpa["spec"]["minReplicas"]
    (metric,) = hpa["spec"]["metrics"]
    assert metric["type"] == "Resource"
    assert metric["resource"]["name"] == "cpu"
    assert metric["resource"]["target"]["type"] == "Utilization"
    assert 0 < metric["resource"]["target"]["averageUtilization"] <= 100

    pool = int(_config_map()["data"]["CB_POOL_MAX_SIZE"])
    ingest = _deployments()["ingest"]["spec"]["replicas"]
    workers = _deployments()["worker"]["spec"]["replicas"]
    # a worker: the Database pool and procrastinate's (CB_WORKER_CONCURRENCY + 2: listener, periodic tasks)
    worker_pool = pool + int(_config_map()["data"]["CB_WORKER_CONCURRENCY"]) + 2
    max_connections = int(_one("Cluster")["spec"]["postgresql"]["parameters"]["max_connections"])
    # Rolling updates add one surge pod per Deployment; keep 10 connections for the operator and admins.
    assert (ingest + 1 + hpa["spec"]["maxReplicas"] + 1) * pool + (workers + 1) * worker_pool <= (
        max_connections - 10
    )


def test_cnpg_cluster_uses_the_memory_db_image_with_age_vector_and_pg_trgm() -> None:
    cluster = _one("Cluster")
    assert cluster["apiVersion"] == "postgresql.cnpg.io/v1"
    spec = cluster["spec"]
    name, tag = spec["imageName"].split(":")
    assert name == DB_IMAGE_NAME
    assert re.match(r"17(\.\d+)?($|[^0-9])", tag), "CloudNativePG reads the major version from the tag"
    assert spec["imageName"] == _compose()["services"]["db"]["image"]
    assert spec["instances"] >= 2, "replicas serve reads and fail over"
    assert "age" in spec["postgresql"]["shared_preload_libraries"]

    dockerfile = (DEPLOY / "memory-db" / "Dockerfile").read_text(encoding="utf-8")
    uid = re.search(r"useradd [^;]*--uid (\d+)", dockerfile)
    gid = re.search(r"groupadd [^;]*--gid (\d+)", dockerfile)
    assert uid and gid
    assert (spec["postgresUID"], spec["postgresGID"]) == (int(uid.group(1)), int(gid.group(1)))

    initdb = spec["bootstrap"]["initdb"]
    statements = [s.strip().rstrip(";") for s in initdb["postInitApplicationSQL"]]
    assert all(";" not in s for s in statements), "one statement per item: a failure must not undo the others"
    for extension in ("age", "vector", "pg_trgm", "btree_gin"):
        assert f"CREATE EXTENSION IF NOT EXISTS {extension}" in statements
    assert f"GRANT USAGE ON SCHEMA ag_catalog TO {initdb['owner']}" in statements


def test_compose_wires_db_ingest_query_and_the_worker() -> None:
    services = _compose()["services"]
    assert set(services) == {"db", "ingest", "query", "worker"}
    worker = services["worker"]
    assert (worker["entrypoint"], worker["command"]) == (["cb"], ["worker"])
    assert worker["image"] == services["ingest"]["image"] and "ports" not in worker
    assert worker["depends_on"]["ingest"]["condition"] == "service_healthy"
    assert "@db:5432/" in worker["environment"]["CB_DATABASE_URL"]
    assert (DEPLOY / services["db"]["build"]["context"] / "Dockerfile").is_file()
    for component, (grpc_port, metrics_port, _replicas) in COMPONENTS.items():
        service = services[component]
        build = service["build"]
        assert (
            DEPLOY / build["context"] / build["dockerfile"]
        ).resolve() == DEPLOY / "service" / "Dockerfile"
        assert service["command"] == [component]
        assert service["depends_on"]["db"]["condition"] == "service_healthy"
        assert f"{grpc_port}:{grpc_port}" in " ".join(service["ports"])
        assert f"{metrics_port}:{metrics_port}" in " ".join(service["ports"])
        assert "@db:5432/" in service["environment"]["CB_DATABASE_URL"]
        assert str(grpc_port) in " ".join(service["healthcheck"]["test"])
    assert "healthcheck" in services["db"]


def test_dockerfiles_follow_the_recipe() -> None:
    db = (DEPLOY / "memory-db" / "Dockerfile").read_text(encoding="utf-8")
    assert re.search(r"^FROM debian:trixie-slim$", db, re.MULTILINE)
    assert re.search(r"^ARG PG_MAJOR=17$", db, re.MULTILINE)
    for package in (
        '"postgresql-${PG_MAJOR}"',
        '"postgresql-${PG_MAJOR}-age"',
        '"postgresql-${PG_MAJOR}-pgvector"',
    ):
        assert package in db
    entrypoint = (DEPLOY / "memory-db" / "docker-entrypoint.sh").read_text(encoding="utf-8")
    assert "shared_preload_libraries = 'age'" in entrypoint
    assert "for ext in age vector pg_trgm btree_gin" in entrypoint
    assert "COPY --chmod=0755 docker-entrypoint.sh" in db

    service = (DEPLOY / "service" / "Dockerfile").read_text(encoding="utf-8")
    assert re.findall(r"^FROM (\S+)", service, re.MULTILINE) == ["python:3.11-slim", "python:3.11-slim"]
    assert re.search(r"^EXPOSE 50051 50052 9101 9102$", service, re.MULTILINE)
    assert re.search(r'^ENTRYPOINT \["cb", "serve"\]$', service, re.MULTILINE)
    assert re.search(r'^CMD \["ingest"\]$', service, re.MULTILINE)
    assert re.search(r"^USER \d+", service, re.MULTILINE), "the services run as a non-root user"


def test_image_names_are_plain_without_a_registry_host() -> None:
    refs = list(_image_refs())
    assert refs
    for where, image in refs:
        assert "/" not in image and image.count(":") == 1, f"{where}: {image!r} must be a plain name:tag"


def test_no_urls_or_mirrors_in_image_recipes() -> None:
    for path in (DEPLOY / "memory-db").iterdir():
        assert "://" not in path.read_text(encoding="utf-8"), f"{path}: mirrors come from the base image"
    for path in (DEPLOY / "service").iterdir():
        assert "://" not in path.read_text(encoding="utf-8"), (
            f"{path}: indexes come from the build environment"
        )


def test_services_bound_to_all_interfaces_get_a_tokens_file() -> None:
    """A service without a tokens file refuses 0.0.0.0: both deployments mount the tokens Secret."""
    data = _config_map()["data"]
    assert data["CB_AUTH_MODE"] == "tokens"
    tokens_file = PurePosixPath(data["CB_TOKENS_FILE"])
    for component in COMPONENTS:  # the services; the worker serves no port
        deployment = _deployments()[component]
        spec = deployment["spec"]["template"]["spec"]
        volumes = {volume["name"]: volume for volume in spec["volumes"]}
        mounts = [
            m for m in _container(deployment)["volumeMounts"] if m["mountPath"] == str(tokens_file.parent)
        ]
        assert len(mounts) == 1 and mounts[0]["readOnly"] and "subPath" not in mounts[0], component
        assert volumes[mounts[0]["name"]]["secret"]["secretName"] == "memory-service-tokens", component
    compose = _compose()["services"]
    for component in COMPONENTS:
        environment = compose[component]["environment"]
        assert environment["CB_AUTH_MODE"] == "tokens"
        folder = str(PurePosixPath(environment["CB_TOKENS_FILE"]).parent)
        targets = [volume.rsplit(":", 2)[1:] for volume in compose[component]["volumes"]]
        assert [folder, "ro"] in targets, component


def test_the_service_image_installs_from_the_lock_and_its_context_holds_what_it_copies() -> None:
    """pip runs in the image only with --require-hashes or through install_from_lock.sh, and every file the
    Dockerfile copies is let through by its .dockerignore (which admits only what it names)."""
    service = DEPLOY / "service"
    dockerfile = (service / "Dockerfile").read_text(encoding="utf-8").replace("\\\n", " ")
    for line in dockerfile.splitlines():
        if "pip install" in line:
            assert "--require-hashes" in line, f"an unlocked install in the image: {line!r}"
    assert (
        "deploy/service/install_from_lock.sh /opt/memory-service/bin/python requirements/service.txt"
        in dockerfile
    )
    admitted = [
        line[1:].rstrip("/")
        for line in (service / "Dockerfile.dockerignore").read_text(encoding="utf-8").splitlines()
        if line.startswith("!")
    ]
    copied = [
        source.rstrip("/").removeprefix("./")
        for line in dockerfile.splitlines()
        if line.startswith("COPY ") and "--from=" not in line
        for source in line.split()[1:-1]
    ]
    assert "clients/python" in copied and "requirements/service.txt" in copied
    for source in copied:
        assert any(source == entry or source.startswith(entry + "/") for entry in admitted), (
            f"{source} is copied but Dockerfile.dockerignore keeps it out of the build context"
        )
        assert (DEPLOY.parent / source).exists()
