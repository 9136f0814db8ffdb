"""The CMSWEB Helm chart (deploy/helm/ms-unmerged), one release per RSE partition, and the production image.

No `helm` can be installed on this machine (Debian does not package it, PyPI and npm have no helm
binary, the Go module proxy is out of reach), so `helm template` does not run here. Instead: the
templates are rendered by `render` below, a substitution of ONLY the template constructs the chart
uses (it refuses any other, so the chart cannot drift past what is checked); the rendered objects are
validated against the Kubernetes schemas by PyPI's kubernetes-validate, and the rendered configuration
is loaded by the service's own `load_config`.
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from MSUnmerged.config import load_config

from servers import run_script

REPO = Path(__file__).resolve().parents[3]
CHART = REPO / "deploy" / "helm" / "ms-unmerged"
PARTITIONS = {"t1": "/ms-unmerged", "t2t3": "/ms-unmerged/t2t3", "t2t3us": "/ms-unmerged/t2t3us"}
CMSWEB_SECRETS = {"proxy-secrets-ms-unmerged", "rucio-secrets", "token-secrets", "hmac-secrets"}
KUBERNETES = "1.30"
ACTION = re.compile(r"\{\{(-?)\s*(.*?)\s*(-?)\}\}", re.S)


def merged(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in over.items():
        out[k] = merged(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def scalar(value: Any) -> str:
    """A value as Go's text/template prints it."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def evaluate(expr: str, ctx: dict[str, Any]) -> Any:
    """One pipeline of the constructs the chart uses: .Values/.Chart paths, toYaml, toJson, quote,
    squote, nindent N. Anything else is refused."""
    stages = [s.strip() for s in expr.split("|")]
    first = stages[0].split()
    if first[0] == "toYaml" and len(first) == 2:
        value: Any = yaml.safe_dump(lookup(first[1], ctx), default_flow_style=False, sort_keys=False).rstrip("\n")
    elif len(first) == 1:
        value = lookup(first[0], ctx)
    else:
        raise AssertionError(f"template construct not checked here: {{{{ {expr} }}}}")
    for stage in stages[1:]:
        name, *args = stage.split()
        if name == "quote" and not args:
            value = json.dumps(scalar(value))
        elif name == "squote" and not args:
            assert "'" not in scalar(value), value
            value = f"'{scalar(value)}'"
        elif name == "toJson" and not args:
            value = json.dumps(value)
        elif name == "nindent" and len(args) == 1:
            value = "\n" + "\n".join(" " * int(args[0]) + line for line in str(value).splitlines())
        else:
            raise AssertionError(f"template function not checked here: {stage}")
    return value


def lookup(path: str, ctx: dict[str, Any]) -> Any:
    assert path.startswith((".Values.", ".Chart.")), f"template reference not checked here: {path}"
    value: Any = ctx
    for part in path[1:].split("."):
        assert isinstance(value, dict) and part in value, f"{path}: not set in the values"
        value = value[part]
    return value


def render(template: str, ctx: dict[str, Any]) -> str:
    """The template with `{{ pipeline }}`, `{{- if .Values.x }} ... {{- end }}` and whitespace trimming."""
    out: list[str] = []
    keep = [True]
    pos = 0
    trim_next = False
    for m in ACTION.finditer(template):
        text = template[pos:m.start()]
        if trim_next:
            text = text.lstrip()
        if m.group(1):
            text = text.rstrip()
        if all(keep):
            out.append(text)
        action = m.group(2)
        if action.startswith("if "):
            keep.append(bool(lookup(action[3:].strip(), ctx)))
        elif action == "end":
            keep.pop()
        elif all(keep):
            out.append(scalar(evaluate(action, ctx)))
        trim_next, pos = bool(m.group(3)), m.end()
    tail = template[pos:]
    out.append(tail.lstrip() if trim_next else tail)
    assert keep == [True], "unbalanced if/end"
    return "".join(out)


def manifests(partition: str) -> list[dict[str, Any]]:
    values = merged(yaml.safe_load((CHART / "values.yaml").read_text()),
                    yaml.safe_load((CHART / f"values-{partition}.yaml").read_text()))
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    ctx = {"Values": values, "Chart": {"AppVersion": chart["appVersion"], "Name": chart["name"]}}
    docs = []
    for template in sorted((CHART / "templates").glob("*.yaml")):
        docs += [d for d in yaml.safe_load_all(render(template.read_text(), ctx)) if d]
    return docs


def by_kind(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    kinds = {d["kind"]: d for d in docs}
    assert len(kinds) == len(docs), "one object of each kind per partition"
    return kinds


@pytest.fixture(scope="module")
def kubernetes_validate() -> str:
    """PYTHONPATH of PyPI's kubernetes-validate (the Kubernetes object schemas, offline)."""
    return run_script("pip-target.sh", "kubernetes-validate", "kubernetes_validate", "kubernetes-validate==1.37.0",
                      timeout=900).strip().splitlines()[-1]


VALIDATE = """
import json, sys
import kubernetes_validate
errors = []
for doc in json.load(sys.stdin):
    try:
        kubernetes_validate.validate(doc, sys.argv[1], strict=True)
    except kubernetes_validate.ValidationError as exc:
        errors.append(f"{doc['kind']} {doc['metadata']['name']}: {exc.message} at {list(exc.path)}")
print(json.dumps(errors))
"""


@pytest.mark.parametrize("partition", sorted(PARTITIONS))
def test_rendered_objects_match_the_kubernetes_schemas(partition: str, kubernetes_validate: str) -> None:
    docs = manifests(partition)
    assert set(by_kind(docs)) == {"ConfigMap", "Deployment", "Service", "PersistentVolumeClaim", "Ingress"}
    out = subprocess.run([sys.executable, "-c", VALIDATE, KUBERNETES], input=json.dumps(docs), text=True,
                         capture_output=True, timeout=300, env={"PYTHONPATH": kubernetes_validate})
    assert out.returncode == 0, out.stderr[-3000:]
    assert json.loads(out.stdout) == []


def test_schema_validation_catches_a_broken_object(kubernetes_validate: str) -> None:
    """The validator is not a rubber stamp: a port as text and an unknown field are errors."""
    service = by_kind(manifests("t1"))["Service"]
    service["spec"]["ports"][0]["port"] = "8242"
    service["spec"]["colour"] = "red"
    out = subprocess.run([sys.executable, "-c", VALIDATE, KUBERNETES], input=json.dumps([service]), text=True,
                         capture_output=True, timeout=300, env={"PYTHONPATH": kubernetes_validate})
    assert len(json.loads(out.stdout)) == 1


@pytest.mark.parametrize("partition, base", sorted(PARTITIONS.items()))
def test_each_partition_as_cmsweb_runs_it(partition: str, base: str, tmp_path: Path) -> None:
    kinds = by_kind(manifests(partition))
    deployment, service, ingress = kinds["Deployment"], kinds["Service"], kinds["Ingress"]
    pod = deployment["spec"]["template"]
    assert service["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]
    assert service["spec"]["selector"]["partition"] == partition == pod["metadata"]["labels"]["partition"]
    assert {p["port"] for p in service["spec"]["ports"]} == {8242, 18242}
    assert pod["metadata"]["annotations"]["prometheus.io/port"] == "18242"
    (container,) = pod["spec"]["containers"]
    repository, tag = container["image"].rsplit(":", 1)
    assert tag and tag != "latest" and re.fullmatch(r"[0-9][0-9A-Za-z.\-]*", tag)
    assert pod["spec"]["securityContext"]["runAsNonRoot"] is True and pod["spec"]["securityContext"]["runAsUser"] > 0
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    for probe in ("livenessProbe", "readinessProbe"):
        assert container[probe]["httpGet"]["path"].startswith(base + "/data/")
    assert container["readinessProbe"]["httpGet"]["path"] == f"{base}/data/status?detail=false"
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    assert {v["secret"]["secretName"] for v in volumes.values() if "secret" in v} >= CMSWEB_SECRETS
    claim = volumes["data"]["persistentVolumeClaim"]["claimName"]
    assert claim == kinds["PersistentVolumeClaim"]["metadata"]["name"]
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    (path,) = ingress["spec"]["rules"][0]["http"]["paths"]
    assert path["path"] == base and path["backend"]["service"]["name"] == service["metadata"]["name"]

    toml = tmp_path / "msunmerged.toml"
    toml.write_text(kinds["ConfigMap"]["data"]["msunmerged.toml"])
    config = load_config(toml, env={})  # the service's own validation of every key
    expression = yaml.safe_load((CHART / f"values-{partition}.yaml").read_text())["rseExpression"]
    assert config.planner.rse_expression == expression and config.rest.base == base
    assert config.rest.port == 8242 and config.rest.metrics_port == 18242
    assert config.service.state_dir == mounts["data"] and config.service.dry_run is True
    assert config.mongo.url and Path(config.rest.hmac_key_file).parent.as_posix() == mounts["hmac-secrets"]
    assert Path(config.auth.proxy).parent.as_posix() == mounts["proxy-secrets"]
    assert config.rucio.auth_type == "x509_proxy"  # Rucio sees the same service proxy
    assert Path(config.auth.ca_path).parent.as_posix() == mounts["etc-grid-security"]


def test_partitions_are_distinct() -> None:
    objects = [(d["kind"], d["metadata"]["name"]) for p in PARTITIONS for d in manifests(p)]
    assert len(objects) == len(set(objects)) == 5 * len(PARTITIONS)  # no two releases own the same object
    expressions = {yaml.safe_load((CHART / f"values-{p}.yaml").read_text())["rseExpression"] for p in PARTITIONS}
    assert len(expressions) == len(PARTITIONS)
    services = {by_kind(manifests(p))["Service"]["metadata"]["name"] for p in PARTITIONS}
    assert len(services) == len(PARTITIONS)


def test_render_refuses_constructs_it_does_not_check() -> None:
    with pytest.raises(AssertionError, match="not checked"):
        render("{{ .Values.x | upper }}", {"Values": {"x": "a"}})
    with pytest.raises(AssertionError, match="not checked"):
        render('{{ include "name" . }}', {"Values": {}})


def test_production_image_has_no_embedded_database() -> None:
    """The Dockerfile installs requirements.txt less secantusdb, and checks it is absent."""
    dockerfile = (REPO / "deploy" / "Dockerfile").read_text()
    (line,) = [ln for ln in dockerfile.splitlines() if "requirements.txt >" in ln]
    command = line.split("RUN ", 1)[-1].split(">")[0].strip()
    kept = subprocess.run(["bash", "-c", command], cwd=REPO, capture_output=True, text=True, check=True).stdout
    wanted = [ln for ln in (REPO / "requirements.txt").read_text().splitlines() if ln and not ln.startswith("#")]
    assert "secantusdb" in wanted and "secantusdb" not in kept
    assert all(req in kept for req in wanted if req != "secantusdb")
    assert '! python -c "import secantusdb"' in dockerfile and "USER 1000" in dockerfile
    assert not (REPO / "deploy" / "k8s").exists()
