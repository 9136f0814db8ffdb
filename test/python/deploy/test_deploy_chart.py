"""The CMSWEB Helm chart (deploy/helm/ms-unmerged), one release per RSE partition, and the production image.

`helm` cannot be installed on this machine: Debian packages none, PyPI and npm have no helm binary, and
building it needs the Go module proxy, which this machine cannot reach (tried: a Debian trixie chroot with its
golang-go and GOTOOLCHAIN; the proxy's name does not resolve). So the templates are rendered by `render`
below, which implements ONLY the template constructs the chart uses (it refuses any other, so the chart cannot
drift past what is checked); the rendered objects are validated against the Kubernetes schemas by PyPI's
kubernetes-validate, and the rendered configuration is loaded by the service's own `load_config`, then used
as the service would: its batch backend pings the real HTCondor pool of the tests with the chart's token mount.
"""
from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Optional

import pytest
import yaml

from MSUnmerged.config import ConfigError, Config, load_config
from MSUnmerged.jobs.backend import credential_for, job_environment
from MSUnmerged.logfiles import file_name
from MSUnmerged.sources.wmstats import WMStatsClient
from MSUnmerged.wiring import make_router

from servers import run_script

REPO = Path(__file__).resolve().parents[3]
CHART = REPO / "deploy" / "helm" / "ms-unmerged"
PARTITIONS = {"t1": "/ms-unmerged", "t2t3": "/ms-unmerged/t2t3", "t2t3us": "/ms-unmerged/t2t3us"}
CMSWEB_SECRETS = {"proxy-secrets-ms-unmerged", "rucio-secrets", "token-secrets", "hmac-secrets"}
# CMSWEB's production RSE expressions (dmwm/CMSKubernetes argocd/base/reqmgr2ms-unmerged-<partition>.yaml).
PRODUCTION_EXPRESSIONS = {
    "t1": "(cms_type=real|cms_type=int)&rse_type=DISK&tier=1",
    "t2t3": "(((cms_type=real|cms_type=int)&rse_type=DISK&(tier=2|tier=3))\\country=US)",
    "t2t3us": "(((cms_type=real|cms_type=int)&rse_type=DISK&(tier=2|tier=3))&country=US)",
}
KUBERNETES = "1.30"
ACTION = re.compile(r"\{\{(-?)\s*(.*?)\s*(-?)\}\}", re.S)


def merged(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in over.items():
        out[k] = merged(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def scalar(value: Any) -> str:
    """A value as Go's text/template prints it (helm reads every YAML number as a float64)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def split_pipeline(expr: str) -> list[str]:
    """The stages of a pipeline: split on | outside double quotes."""
    stages, current, quoted = [], "", False
    for ch in expr:
        quoted = not quoted if ch == '"' else quoted
        if ch == "|" and not quoted:
            stages.append(current.strip())
            current = ""
        else:
            current += ch
    return stages + [current.strip()]


class RenderError(Exception):
    """A `required` value is missing: helm refuses the release with this message."""


def lookup(path: str, ctx: dict[str, Any], scope: Optional[dict[str, Any]] = None) -> Any:
    """.Values/.Chart paths, a range variable ($v) and its fields ($v.x), a "string" literal."""
    if path.startswith('"'):
        return json.loads(path)
    if path.startswith("$"):
        name, _, rest = path[1:].partition(".")
        assert scope is not None and name in scope, f"template variable not set: {path}"
        value, parts = scope[name], (rest.split(".") if rest else [])
    else:
        assert path.startswith((".Values.", ".Chart.")), f"template reference not checked here: {path}"
        value, parts = ctx, path[1:].split(".")
    for part in parts:
        assert isinstance(value, dict) and part in value, f"{path}: not set in the values"
        value = value[part]
    return value


def evaluate(expr: str, ctx: dict[str, Any], scope: Optional[dict[str, Any]] = None) -> Any:
    """One pipeline of the constructs the chart uses: a value (lookup), required, toYaml; then quote,
    squote, toJson, nindent N. Anything else is refused."""
    stages = split_pipeline(expr)
    first = shlex.split(stages[0], posix=False)
    if first[0] == "toYaml" and len(first) == 2:
        value: Any = yaml.safe_dump(lookup(first[1], ctx, scope), default_flow_style=False,
                                    sort_keys=False).rstrip("\n")
    elif first[0] == "required" and len(first) == 3:
        value = lookup(first[2], ctx, scope)
        if not value:
            raise RenderError(json.loads(first[1]))
    elif len(first) == 1:
        value = lookup(first[0], ctx, scope)
    else:
        raise AssertionError(f"template construct not checked here: {{{{ {expr} }}}}")
    for stage in stages[1:]:
        name, *args = stage.split()
        if name == "quote" and not args:
            value = json.dumps(scalar(value), ensure_ascii=False)
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


RANGE = re.compile(r"range \$(\w+), \$(\w+) := (\S+)")


def parse(template: str) -> list[Any]:
    """The template as a tree: text, ("expr", pipeline), ["if", pipeline, then, else], ["range", k, v, what,
    body]; `{{-` and `-}}` trim the whitespace beside them, as Go's text/template does."""
    root: list[Any] = []
    stack: list[tuple[list[Any], Any]] = [(root, None)]
    pos, trim_next = 0, False
    for m in ACTION.finditer(template):
        text = template[pos:m.start()]
        text = text.lstrip() if trim_next else text
        stack[-1][0].append(text.rstrip() if m.group(1) else text)
        action = m.group(2)
        if action.startswith("if "):
            node: list[Any] = ["if", action[3:].strip(), [], []]
            stack[-1][0].append(node)
            stack.append((node[2], node))
        elif action == "else":
            _, node = stack.pop()
            assert node is not None and node[0] == "if", "else without if"
            stack.append((node[3], node))
        elif action.startswith("range "):
            r = RANGE.fullmatch(action)
            assert r, f"template construct not checked here: {{{{ {action} }}}}"
            node = ["range", r.group(1), r.group(2), r.group(3), []]
            stack[-1][0].append(node)
            stack.append((node[4], node))
        elif action == "end":
            stack.pop()
            assert stack, "end without if/range"
        else:
            stack[-1][0].append(("expr", action))
        trim_next, pos = bool(m.group(3)), m.end()
    tail = template[pos:]
    stack[-1][0].append(tail.lstrip() if trim_next else tail)
    assert len(stack) == 1, "unbalanced if/range/end"
    return root


def run(nodes: list[Any], ctx: dict[str, Any], scope: dict[str, Any]) -> str:
    out = []
    for node in nodes:
        if isinstance(node, str):
            out.append(node)
        elif node[0] == "expr":
            out.append(scalar(evaluate(node[1], ctx, scope)))
        elif node[0] == "if":
            out.append(run(node[2] if evaluate(node[1], ctx, scope) else node[3], ctx, scope))
        else:  # range over a map (sorted keys, as Go does) or a list
            _, k, v, what, body = node
            items = lookup(what, ctx, scope)
            pairs = sorted(items.items()) if isinstance(items, dict) else list(enumerate(items or []))
            out += [run(body, ctx, {**scope, k: key, v: value}) for key, value in pairs]
    return "".join(out)


def render(template: str, ctx: dict[str, Any]) -> str:
    return run(parse(template), ctx, {})


def values(partition: str, **over: Any) -> dict[str, Any]:
    """values.yaml, then values-<partition>.yaml, then `over` (as `helm -f ... --set ...`)."""
    out = merged(yaml.safe_load((CHART / "values.yaml").read_text()),
                 yaml.safe_load((CHART / f"values-{partition}.yaml").read_text()))
    return merged(out, over)


def manifests(partition: str, **over: Any) -> list[dict[str, Any]]:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    ctx = {"Values": values(partition, **over), "Chart": {"AppVersion": chart["appVersion"], "Name": chart["name"]}}
    docs = []
    for template in sorted((CHART / "templates").glob("*.yaml")):
        docs += [d for d in yaml.safe_load_all(render(template.read_text(), ctx)) if d]
    return docs


def by_kind(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The objects by kind; the filebeat ConfigMap as "FilebeatConfig"."""
    kinds = {("FilebeatConfig" if d["metadata"]["name"].endswith("-filebeat-config") else d["kind"]): d for d in docs}
    assert len(kinds) == len(docs), "one object of each kind per partition"
    return kinds


def service_config(partition: str, tmp_path: Path, **over: Any) -> tuple[Config, dict[str, dict[str, Any]]]:
    """The partition's rendered objects and its configuration loaded as the service loads it, the mounted
    HTCondor token folder standing at the chart's condor.tokenDir (given here as a folder of the test)."""
    tokens = Path(over.get("condor", {}).get("tokenDir") or tmp_path / "tokens")
    tokens.mkdir(parents=True, exist_ok=True)
    over = merged({"condor": {"tokenDir": str(tokens)}}, over)
    kinds = by_kind(manifests(partition, **over))
    toml = tmp_path / f"{partition}.toml"
    toml.write_text(kinds["ConfigMap"]["data"]["msunmerged.toml"])
    return load_config(toml, env={}), kinds


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


def validate(docs: list[dict[str, Any]], pythonpath: str) -> list[str]:
    out = subprocess.run([sys.executable, "-c", VALIDATE, KUBERNETES], input=json.dumps(docs), text=True,
                         capture_output=True, timeout=300, env={"PYTHONPATH": pythonpath})
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout)


@pytest.mark.parametrize("partition", sorted(PARTITIONS))
def test_rendered_objects_match_the_kubernetes_schemas(partition: str, kubernetes_validate: str) -> None:
    docs = manifests(partition)
    assert set(by_kind(docs)) == {"ConfigMap", "FilebeatConfig", "Deployment", "Service", "PersistentVolumeClaim"}
    assert validate(docs, kubernetes_validate) == []
    with_ingress = manifests(partition, ingress={"enabled": True, "sourceRange": "188.185.101.116/32"},
                             logs={"claimName": "logs-cephfs-claim-prod-dmwm"}, filebeat={"enabled": False})
    assert "Ingress" in by_kind(with_ingress) and validate(with_ingress, kubernetes_validate) == []


def test_schema_validation_catches_a_broken_object(kubernetes_validate: str) -> None:
    """The validator is not a rubber stamp: a port as text and an unknown field are errors."""
    service = by_kind(manifests("t1"))["Service"]
    service["spec"]["ports"][0]["port"] = "8242"
    service["spec"]["colour"] = "red"
    assert len(validate([service], kubernetes_validate)) == 1


@pytest.mark.parametrize("partition, base", sorted(PARTITIONS.items()))
def test_each_partition_as_cmsweb_runs_it(partition: str, base: str, tmp_path: Path) -> None:
    config, kinds = service_config(partition, tmp_path)
    deployment, service = kinds["Deployment"], kinds["Service"]
    pod = deployment["spec"]["template"]
    assert "Ingress" not in kinds  # CMSWEB's ing-dmwm routes, with the front ends' source addresses only
    assert service["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]
    assert service["spec"]["selector"]["partition"] == partition == pod["metadata"]["labels"]["partition"]
    assert {p["port"] for p in service["spec"]["ports"]} == {8242, 18242}
    assert pod["metadata"]["annotations"]["prometheus.io/port"] == "18242"
    containers = {c["name"]: c for c in pod["spec"]["containers"]}
    container = containers["ms-unmerged"]
    repository, tag = container["image"].rsplit(":", 1)
    assert tag and tag != "latest" and re.fullmatch(r"[0-9][0-9A-Za-z.\-]*", tag)
    assert pod["spec"]["securityContext"]["runAsNonRoot"] is True and pod["spec"]["securityContext"]["runAsUser"] > 0
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    for probe in ("livenessProbe", "readinessProbe"):  # the page and data/ under the partition's own path
        assert container[probe]["httpGet"]["path"].startswith(base + "/data/")
    assert container["readinessProbe"]["httpGet"]["path"] == f"{base}/data/status?detail=false"
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    assert {v["secret"]["secretName"] for v in volumes.values() if "secret" in v} >= CMSWEB_SECRETS
    claim = volumes["data"]["persistentVolumeClaim"]["claimName"]
    assert claim == kinds["PersistentVolumeClaim"]["metadata"]["name"]
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}

    # The configuration as the service loads it.
    assert config.planner.rse_expression == PRODUCTION_EXPRESSIONS[partition] and config.rest.base == base
    assert config.rest.port == 8242 and config.rest.metrics_port == 18242
    assert config.service.state_dir == mounts["data"] and config.service.dry_run is True
    assert config.service.instance == f"ms-unmer-{partition}" == config.alerts.service
    assert config.mongo.url and Path(config.rest.hmac_key_file).parent.as_posix() == mounts["hmac-secrets"]
    assert Path(config.auth.proxy).parent.as_posix() == mounts["proxy-secrets"]
    assert config.rucio.auth_type == "x509_proxy"  # Rucio sees the same service proxy
    assert Path(config.auth.ca_path).parent.as_posix() == mounts["etc-grid-security"]
    assert config.alerts.page_url == f"https://cmsweb.cern.ch{base}"
    # Tier-0 output lands at Tier-1s: its WMStats protects too on t1, and only there.
    t0 = [url for name, url in WMStatsClient(config.wmstats, config.auth).sources if name == "wmstats-t0"]
    assert t0 == (["https://cmsweb.cern.ch/t0_reqmon"] if partition == "t1" else [])

    # The jobs: HTCondor at the sites, the service proxy as their storage credential, SITECONF from CVMFS.
    assert config.jobs.backend == "condor" and config.condor.pool and config.condor.token_dir == mounts["condor-token"]
    assert volumes["condor-token"]["secret"]["optional"] is True
    credential = credential_for(config.jobs, "T2_XX_Any")
    assert (credential.kind, Path(credential.source).parent.as_posix()) == ("proxy", mounts["proxy-secrets"])
    assert job_environment(config.jobs, "T2_XX_Any")["SITECONFIG_PATH"] == "/cvmfs/cms.cern.ch/SITECONF/local"

    # Log files for the filebeat side-car, which reads exactly the files the service writes.
    assert config.service.log_dir == mounts["logs"]
    filebeat = containers[f"ms-unmer-{partition}-filebeat"]
    assert {m["name"]: m["mountPath"] for m in filebeat["volumeMounts"]}["logs"] == mounts["logs"]
    beat = yaml.safe_load(kinds["FilebeatConfig"]["data"]["filebeat.yml"])
    (pattern,) = beat["filebeat.inputs"][0]["paths"]
    pod_name = f"ms-unmer-{partition}-7d9f8c6b5-x2x4q"
    written = file_name(config.service.log_dir, pod_name, time.time())
    assert Path(written).match(pattern.replace("${MY_POD_NAME}", pod_name))
    assert volumes["filebeat-config"]["configMap"]["name"] == kinds["FilebeatConfig"]["metadata"]["name"]


def test_per_site_overrides_reach_the_jobs(tmp_path: Path) -> None:
    sites = {"T2_US_Purdue": {"siteconfig": "/cvmfs/cms.cern.ch/SITECONF/T2_US_Purdue", "schedd": "schedd2.example"},
             "T1_US_FNAL_Disk": {"site": "T1_US_FNAL", "credential": "none"}}
    config, _ = service_config("t2t3us", tmp_path, jobs={"sites": sites})
    assert config.jobs.for_rse("T2_US_Purdue").schedd == "schedd2.example"
    assert job_environment(config.jobs, "T2_US_Purdue")["SITECONFIG_PATH"] == "/cvmfs/cms.cern.ch/SITECONF/T2_US_Purdue"
    assert config.jobs.for_rse("T1_US_FNAL_Disk").site == "T1_US_FNAL"
    assert credential_for(config.jobs, "T1_US_FNAL_Disk").kind == "none"
    assert credential_for(config.jobs, "T2_US_Purdue").kind == "proxy"
    with pytest.raises(ConfigError, match=r"jobs\.sites\.T2_US_Purdue\.colour': unknown key"):
        service_config("t2t3us", tmp_path, jobs={"sites": {"T2_US_Purdue": {"colour": "red"}}})


def test_the_ingress_is_off_and_never_open_to_all() -> None:
    with pytest.raises(RenderError, match="sourceRange"):
        manifests("t2t3", ingress={"enabled": True})
    ingress = by_kind(manifests("t2t3", ingress={"enabled": True, "sourceRange": "188.185.101.116/32"}))["Ingress"]
    assert ingress["metadata"]["annotations"]["nginx.ingress.kubernetes.io/whitelist-source-range"] == \
        "188.185.101.116/32"
    (path,) = ingress["spec"]["rules"][0]["http"]["paths"]
    assert (path["path"], path["pathType"]) == ("/ms-unmerged/t2t3", "Prefix")  # page, data/ and metrics


@pytest.mark.integration
@pytest.mark.slow
def test_the_rendered_backend_reaches_a_real_pool_with_the_mounted_token(condor_pool: Any, tmp_path: Path) -> None:
    """The chart's HTCondor values and token mount, loaded as the service loads them, reach a real schedd:
    the preflight authenticates with the mounted IDTOKEN at WRITE level."""
    tokens = condor_pool.token_dir("submitter")
    config, _ = service_config("t1", tmp_path, condor={"pool": condor_pool.pool, "tokenDir": str(tokens)})
    router = make_router(config)
    assert type(router.for_rse(condor_pool.site)).__name__ == "CondorBackend"
    router.preflight(condor_pool.site)  # raises BackendError when the pool refuses or cannot be reached


def test_partitions_are_distinct() -> None:
    objects = [(d["kind"], d["metadata"]["name"]) for p in PARTITIONS for d in manifests(p)]
    assert len(objects) == len(set(objects)) == 5 * len(PARTITIONS)  # no two releases own the same object
    assert len({values(p)["rseExpression"] for p in PARTITIONS}) == len(PARTITIONS)


def test_render_refuses_constructs_it_does_not_check() -> None:
    with pytest.raises(AssertionError, match="not checked"):
        render("{{ .Values.x | upper }}", {"Values": {"x": "a"}})
    with pytest.raises(AssertionError, match="not checked"):
        render('{{ include "name" . }}', {"Values": {}})
    assert render("{{- range $k, $v := .Values.m }}[{{ $k }}={{ $v.a | quote }}]{{- end }}",
                  {"Values": {"m": {"b": {"a": "2"}, "a": {"a": "1"}}}}) == '[a="1"][b="2"]'
    assert render("{{ if .Values.x }}y{{ else }}n{{ end }}", {"Values": {"x": ""}}) == "n"


def test_the_dockerfile_builds_from_the_repository() -> None:
    """Docker cannot run here: every file it copies exists, its install line is requirements.txt less
    secantusdb (the test-only embedded database, checked absent), it runs as a non-root user."""
    dockerfile = (REPO / "deploy" / "Dockerfile").read_text()
    ignore = (REPO / ".dockerignore").read_text().splitlines()
    copied = [src for line in dockerfile.splitlines() if line.startswith("COPY ") and "--from=" not in line
              for src in shlex.split(line)[1:-1]]
    assert copied == ["requirements.txt", "setup.py", "src", "etc", "requirements.txt"]
    for source in copied:  # in the repository and let through by .dockerignore
        assert (REPO / source).exists(), f"COPY {source}: not in the repository"
        assert any(rule.startswith(f"!{source}") for rule in ignore), f"COPY {source}: excluded by .dockerignore"
    # The package's files: everything under src/python/MSUnmerged but build output, and the default config.
    assert "src/python/MSUnmerged/_planfast*.so" in ignore and "!etc/msunmerged.toml" in ignore
    assert (REPO / "src/python/MSUnmerged/msunmerged.toml").resolve() == REPO / "etc/msunmerged.toml"
    (line,) = [ln for ln in dockerfile.splitlines() if "requirements.txt >" in ln]
    command = line.split("RUN ", 1)[-1].split(">")[0].strip()
    kept = subprocess.run(["bash", "-c", command], cwd=REPO, capture_output=True, text=True, check=True).stdout
    wanted = [ln for ln in (REPO / "requirements.txt").read_text().splitlines() if ln and not ln.startswith("#")]
    assert "secantusdb" in wanted and "secantusdb" not in kept
    assert all(req in kept for req in wanted if req != "secantusdb")
    assert '! python -c "import secantusdb"' in dockerfile and "USER 1000" in dockerfile
    assert "pip wheel --no-cache-dir --no-deps --wheel-dir /wheels ." in dockerfile  # with the C extension
    assert 'python -c "import MSUnmerged._planfast"' in dockerfile
    assert re.search(r"^EXPOSE 8242 18242$", dockerfile, re.M) and '"serve"' in dockerfile
