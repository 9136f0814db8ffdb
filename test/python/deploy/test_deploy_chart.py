"""The CMSWEB Helm chart (deploy/helm/ms-unmerged), one release per RSE partition, and the production image.

The chart is linted and rendered by Helm itself: PyPI's helm-python-sdk (module helm_python) is Helm's Go SDK
built as a C library, so `lint` and `Chart.load(...).render(...)` here are what `helm lint` and `helm template`
do. The rendered objects are validated against the Kubernetes schemas by PyPI's kubernetes-validate, checked
against what CMSWEB runs (test/fixtures/cmskubernetes/ms-unmerged.yaml, read from dmwm/CMSKubernetes), and the
rendered configuration is loaded by the service's own `load_config`, then used as the service would: its batch
backend pings the real HTCondor pool of the tests with the chart's token mount.
"""
from __future__ import annotations

import dataclasses
import json
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import helm_python as helm
import pytest
import yaml

from MSUnmerged.config import ConfigError, Config, load_config
from MSUnmerged.jobs.backend import credential_for, job_environment
from MSUnmerged.ledger.connect import client_options
from MSUnmerged.logfiles import file_name
from MSUnmerged.sources.wmstats import WMStatsClient
from MSUnmerged.wiring import make_router

from servers import run_script

REPO = Path(__file__).resolve().parents[3]
CHART = REPO / "deploy" / "helm" / "ms-unmerged"
CMSWEB = yaml.safe_load((REPO / "test" / "fixtures" / "cmskubernetes" / "ms-unmerged.yaml").read_text())
PARTITIONS = {"t1": "/ms-unmerged", "t2t3": "/ms-unmerged/t2t3", "t2t3us": "/ms-unmerged/t2t3us"}
KUBERNETES = "1.30"
# What an operator gives with --set at install (README): no default points at a schedd or database of CMSWEB's.
OPERATOR = {"condor": {"schedd": "vocms0001.cern.ch"},
            "mongo": {"url": "mongodb://mongodb-0-service.default:27017,mongodb-1-service.default:27017/",
                      "username": "msunmerged"}}
KINDS = {"ConfigMap", "FilebeatConfig", "Deployment", "Service", "PersistentVolumeClaim", "NetworkPolicy"}

helm.disable_logging()  # lint's warnings come back in its report


def merged(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in over.items():
        out[k] = merged(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def values(partition: str, /, **over: Any) -> dict[str, Any]:
    """What `helm install -f values-<partition>.yaml --set ...` gives the chart: the values file, the operator's
    values, then `over` (Helm merges them over values.yaml itself; a null removes a default, as in Helm)."""
    return merged(merged(yaml.safe_load((CHART / f"values-{partition}.yaml").read_text()), OPERATOR), over)


def rendered(partition: str, /, name: str = "", **over: Any) -> dict[str, str]:
    """The chart rendered by Helm for release `name` (default ms-unmer-<partition>) in namespace dmwm."""
    with helm.Chart.load(CHART) as chart:
        return chart.render(values(partition, **over), name=name or f"ms-unmer-{partition}", namespace="dmwm")


def manifests(partition: str, /, **over: Any) -> list[dict[str, Any]]:
    docs = []
    for _, text in sorted(rendered(partition, **over).items()):
        docs += [d for d in yaml.safe_load_all(text) if d]
    return docs


def by_kind(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The objects by kind; the filebeat ConfigMap as "FilebeatConfig"."""
    kinds = {("FilebeatConfig" if d["metadata"]["name"].endswith("-filebeat-config") else d["kind"]): d for d in docs}
    assert len(kinds) == len(docs), "one object of each kind per partition"
    return kinds


def render_error(partition: str, /, **over: Any) -> str:
    """The message of Helm's refusal to render."""
    with pytest.raises(helm.HelmRenderError) as refused:
        rendered(partition, **over)
    return str(refused.value)


def service_config(partition: str, tmp_path: Path, /, **over: Any) -> tuple[Config, dict[str, dict[str, Any]]]:
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
    assert set(by_kind(docs)) == KINDS
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


@pytest.mark.parametrize("partition", [None, *sorted(PARTITIONS)])
def test_helm_lint_strict_passes_with_and_without_a_values_file(partition: str | None) -> None:
    """`helm lint --strict` (warnings are errors) as CI would run it: bare, and with each partition's file."""
    report = helm.lint(CHART, values(partition) if partition else None, strict=True, namespace="dmwm",
                       kube_version=f"v{KUBERNETES}.0")
    assert report["errors"] == [] and [m for m in report["messages"] if m["severity"] >= 2] == []


def test_helm_lint_finds_a_broken_chart(tmp_path: Path) -> None:
    """Lint is not a rubber stamp: an object named after an empty value is an error."""
    broken = Path(helm.Chart.load(CHART).save_dir(tmp_path))
    (broken / "templates" / "extra.yaml").write_text("apiVersion: v1\nkind: ConfigMap\nmetadata:\n"
                                                     "  name: ms-unmer-{{ .Values.nothing }}\n")
    assert helm.lint(broken, strict=True)["errors"]


@pytest.mark.parametrize("over, key", [
    ({"partition": None}, "partition"),
    ({"condor": {"schedd": None}}, "condor.schedd"),
    ({"condor": {"schedd": ""}}, "condor.schedd"),
    ({"mongo": {"url": None}}, "mongo.url"),
    ({"mongo": {"username": None}}, "mongo.username"),
    ({"tokenFile": None}, "tokenFile"),
    ({"intervalSeconds": None}, "intervalSeconds"),
    ({"wmstats": {"t0Url": None}}, "wmstats.t0Url"),
    ({"rest": {"operatorLogins": None}}, "rest.operatorLogins"),
    ({"rest": {"operatorLogins": [1]}}, "rest.operatorLogins"),
    ({"jobs": {"sites": {"T2_XX_A": {"schedd": None}}}}, "jobs.sites.T2_XX_A.schedd"),
    ({"image": {"repository": ""}}, "image.repository"),
])
def test_an_empty_or_null_value_fails_the_render_naming_it(over: dict[str, Any], key: str) -> None:
    """A values file that empties a key (`schedd:`, `tokenFile: ~`) stops the release with the key's name: never
    a TOML line without a value (the pod would crash-loop) nor the text "None"."""
    assert re.search(rf"{re.escape(key)}: ", render_error("t2t3", **over))


def test_the_release_must_carry_cmsweb_s_name() -> None:
    with pytest.raises(helm.HelmRenderError, match="must be ms-unmer-t1"):
        rendered("t1", name="unmerged")


def test_values_reach_the_service_as_written(tmp_path: Path) -> None:
    """Numbers stay whole (Helm reads 1000000 as a float64, printed 1e+06 by default), text keeps <>&, and a
    list of logins stays a list."""
    requirements = 'stringListMember(TARGET.GLIDEIN_CMSSite, MY.DESIRED_Sites) && TARGET.Memory >= 2000 && "<x>"'
    config, _ = service_config("t1", tmp_path, jobs={"submitBatch": 1000000}, condor={"requirements": requirements},
                               rest={"operatorLogins": ["alice", "bob"]}, alerts={"stallDays": 2.5})
    assert config.jobs.submit_batch == 1000000 and config.condor.requirements == requirements
    assert config.rest.operator_logins == ["alice", "bob"] and config.alerts.stall_days == 2.5


@pytest.mark.parametrize("partition, base", sorted(PARTITIONS.items()))
def test_each_partition_as_cmsweb_runs_it(partition: str, base: str, tmp_path: Path) -> None:
    config, kinds = service_config(partition, tmp_path)
    deployment, service = kinds["Deployment"], kinds["Service"]
    pod = deployment["spec"]["template"]
    assert "Ingress" not in kinds  # CMSWEB's ing-dmwm routes, with the front ends' source addresses only
    assert service["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"] == {"app": f"ms-unmer-{partition}"}
    assert pod["metadata"]["labels"] == {"app": f"ms-unmer-{partition}"}  # Prometheus copies them to every series
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
    assert volumes["service-secrets"]["secret"]["secretName"] == f"reqmgr2ms-unmerged-{partition}-secrets"
    claim = volumes["data"]["persistentVolumeClaim"]["claimName"]
    assert claim == kinds["PersistentVolumeClaim"]["metadata"]["name"]
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}

    # The configuration as the service loads it.
    assert config.planner.rse_expression == CMSWEB["partitions"][partition]["rse_expression"]
    assert config.rest.base == base
    assert config.rest.port == 8242 and config.rest.metrics_port == 18242
    assert config.service.state_dir == mounts["data"] and config.service.dry_run is True
    assert config.service.instance == f"ms-unmer-{partition}" and config.service.partition == partition
    assert config.alerts.service == "ms-unmerged"  # the Prometheus rules' `service`: one name per outage
    assert config.mongo.url == OPERATOR["mongo"]["url"] and config.mongo.replica_set == CMSWEB["mongodb"]["replica_set"]
    assert Path(config.mongo.password_file).parent.as_posix() == mounts["service-secrets"]
    assert Path(config.rest.hmac_key_file).parent.as_posix() == mounts["hmac-secrets"]
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
    assert "ingress.sourceRange" in render_error("t2t3", ingress={"enabled": True})
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
    schedd = condor_pool.run("condor_status", "-schedd", "-af", "Name", timeout=20).split()[0]  # the chart requires one
    config, _ = service_config("t1", tmp_path, condor={"pool": condor_pool.pool, "schedd": schedd,
                                                      "tokenDir": str(tokens)})
    router = make_router(config)
    assert type(router.for_rse(condor_pool.site)).__name__ == "CondorBackend"
    router.preflight(condor_pool.site)  # raises BackendError when the pool refuses or cannot be reached


def test_partitions_are_distinct() -> None:
    objects = [(d["kind"], d["metadata"]["name"]) for p in PARTITIONS for d in manifests(p)]
    assert len(objects) == len(set(objects)) == len(KINDS) * len(PARTITIONS)  # no two releases own the same object
    assert len({values(p)["rseExpression"] for p in PARTITIONS}) == len(PARTITIONS)


@pytest.mark.parametrize("partition", sorted(PARTITIONS))
def test_an_install_over_cmsweb_s_objects_changes_no_immutable_field(partition: str) -> None:
    """Side by side with what CMSWEB's ArgoCD app owns (README, "CMSWEB side by side"): the objects of the same
    kind and name are taken over with the same selector and port; the chart's new objects clash with none."""
    cmsweb = CMSWEB["partitions"][partition]
    ours = {(d["kind"], d["metadata"]["name"]): d for d in manifests(partition)}
    theirs = {(o["kind"], o["name"]): o for o in cmsweb["objects"]}
    assert set(theirs) <= set(ours)  # each one taken over, none left to ArgoCD
    for key, obj in theirs.items():
        spec = ours[key].get("spec", {})
        if key[0] == "Deployment":
            assert spec["selector"]["matchLabels"] == obj["selector"]  # immutable
            assert obj["selector"].items() <= spec["template"]["metadata"]["labels"].items()
        if key[0] == "Service":
            assert spec["selector"] == obj["selector"] and set(obj["ports"]) <= {p["port"] for p in spec["ports"]}
    assert {obj["metadata"]["namespace"] for obj in ours.values()} == {CMSWEB["namespace"]}
    new = set(ours) - set(theirs)
    assert {kind for kind, _ in new} == {"PersistentVolumeClaim", "NetworkPolicy"}
    assert ("NetworkPolicy", cmsweb["network_policy"]["name"]) not in new
    # CMSWEB's routes and its NetworkPolicy reach the pods on the port the service listens on.
    pod = ours[("Deployment", f"ms-unmer-{partition}")]["spec"]["template"]
    ports = {p["containerPort"] for c in pod["spec"]["containers"] for p in c.get("ports", [])}
    policy = cmsweb["network_policy"]
    assert policy["pods"].items() <= pod["metadata"]["labels"].items() and policy["port"] in ports
    for route in cmsweb["routes"]:
        service = ours[("Service", route["service"])]["spec"]
        assert route["port"] in {p["port"] for p in service["ports"]}
    # Secrets: the partition's own and CMSWEB's shared ones; any other is optional (absent until created).
    secrets = {v["secret"]["secretName"]: v["secret"].get("optional", False)
               for v in pod["spec"]["volumes"] if "secret" in v}
    assert {name for name, optional in secrets.items() if not optional} <= {cmsweb["secret"], *CMSWEB["shared_secrets"]}
    image = next(c["image"] for c in pod["spec"]["containers"] if c["name"] == "ms-unmerged")
    assert image.startswith(CMSWEB["image_registry"])


@pytest.mark.parametrize("partition", sorted(PARTITIONS))
def test_cmsweb_s_prometheus_may_scrape_the_metrics_port(partition: str) -> None:
    """CMSWEB's Prometheus finds the pod by its annotations and, besides CMSWEB's own NetworkPolicy (8242 from
    ingress-nginx only), the chart's admits it to that port."""
    kinds = by_kind(manifests(partition))
    pod = kinds["Deployment"]["spec"]["template"]
    annotations = pod["metadata"]["annotations"]
    assert set(CMSWEB["prometheus"]["annotations"]) <= set(annotations) and annotations["prometheus.io/scrape"] == "true"
    port = int(annotations["prometheus.io/port"])
    assert port in {p["containerPort"] for c in pod["spec"]["containers"] for p in c.get("ports", [])}
    spec = kinds["NetworkPolicy"]["spec"]
    assert spec["podSelector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    (rule,) = spec["ingress"]
    assert rule["ports"] == [{"protocol": "TCP", "port": port}]
    (source,) = rule["from"]
    assert source["namespaceSelector"]["matchLabels"] == {"kubernetes.io/metadata.name": CMSWEB["prometheus"]["namespace"]}
    assert source["podSelector"]["matchLabels"] == CMSWEB["prometheus"]["pods"]
    assert "NetworkPolicy" not in by_kind(manifests(partition, metricsNetworkPolicy={"enabled": False}))


def test_the_claim_takes_the_cluster_s_default_class_unless_one_is_named() -> None:
    """An explicit storageClassName "" asks for a volume of no class, which dynamic provisioning never binds."""
    claim = by_kind(manifests("t1"))["PersistentVolumeClaim"]["spec"]
    assert "storageClassName" not in claim
    named = by_kind(manifests("t1", persistence={"storageClassName": "cephfs"}))["PersistentVolumeClaim"]["spec"]
    assert named["storageClassName"] == "cephfs"


def test_what_must_survive_a_restart_is_on_the_claim(tmp_path: Path) -> None:
    """Plans, job work areas and the audit log (README, "State") live under service.state_dir, which is the
    claim's mount; the logs go to their own volume, /tmp is scratch."""
    config, kinds = service_config("t1", tmp_path)
    pod = kinds["Deployment"]["spec"]["template"]["spec"]
    (container,) = [c for c in pod["containers"] if c["name"] == "ms-unmerged"]
    on_claim = [m["mountPath"] for m in container["volumeMounts"] if m["name"] == "data"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["data"]["persistentVolumeClaim"]["claimName"] == kinds["PersistentVolumeClaim"]["metadata"]["name"]
    assert on_claim == [config.service.state_dir]
    assert Path(config.rest.audit_log).parent.as_posix() == config.service.state_dir


def test_the_ledger_password_is_read_from_cmsweb_s_wmcore_configuration(tmp_path: Path) -> None:
    """The partition's secret holds WMCore's config-unmerged.py (its MongoDB settings in it); the rendered
    configuration takes the password from it, without running it."""
    config, _ = service_config("t2t3", tmp_path)
    secret = tmp_path / "secrets"
    secret.mkdir()
    wmcore = secret / Path(config.mongo.password_file).name
    wmcore.write_text('from WMCore.Configuration import Configuration\nconfig = Configuration()\n'
                      'data = config.section_("views").section_("data")\ndata.mongoDBUser = "msunmerged"\n'
                      'data.mongoDBPassword = "not-this"\ndata.mongoDBPassword = "s3cr\\"et"\n')
    mongo = dataclasses.replace(config.mongo, password_file=str(wmcore))
    opts = client_options(dataclasses.replace(config, mongo=mongo))
    assert (opts["username"], opts["password"], opts["replicaSet"]) == ("msunmerged", 's3cr"et', "cms-rs")
    wmcore.write_text("data.mongoDBPassword = PASSWORD\n")
    with pytest.raises(ConfigError, match="mongo.password_setting.*not a string literal"):
        client_options(dataclasses.replace(config, mongo=mongo))
    wmcore.write_text("data.mongoDBUser = 'x'\n")
    with pytest.raises(ConfigError, match="assigns no mongoDBPassword"):
        client_options(dataclasses.replace(config, mongo=mongo))


@pytest.fixture(scope="module")
def kubectl() -> str:
    """A kubectl with kustomize v4 or newer (test/scripts/kubectl.sh)."""
    return run_script("kubectl.sh", timeout=900).strip().splitlines()[-1]


def kustomization(**fields: Any) -> str:
    return yaml.safe_dump({"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization", **fields})


@pytest.mark.integration
@pytest.mark.parametrize("environment, claim", [("production", "logs-cephfs-claim-prod-dmwm"),
                                                 ("preproduction", "logs-cephfs-claim-preprod-dmwm")])
def test_the_argocd_form_builds_in_cmsweb_s_layout(environment: str, claim: str, kubectl: str, tmp_path: Path,
                                                   kubernetes_validate: str) -> None:
    """Through ArgoCD (README, "Through ArgoCD"): each partition rendered into argocd/base/reqmgr2ms-unmerged-<p>.yaml
    and deploy/argocd/<environment>/ms-unmerged-logs.yaml as the overlay's one patch, built by kustomize as
    ArgoCD builds CMSKubernetes: every Deployment's logs on the environment's claim, nothing else changed, and
    the objects still pass the schemas."""
    base, overlay = tmp_path / "argocd" / "base", tmp_path / "argocd" / "overlays" / environment
    base.mkdir(parents=True)
    overlay.mkdir(parents=True)
    files = []
    for partition in sorted(PARTITIONS):
        files.append(f"reqmgr2ms-unmerged-{partition}.yaml")
        (base / files[-1]).write_text("\n---\n".join(t for _, t in sorted(rendered(partition).items()) if t.strip()))
    (base / "kustomization.yaml").write_text(kustomization(resources=files))
    patch = REPO / "deploy" / "argocd" / environment / "ms-unmerged-logs.yaml"
    (overlay / patch.name).write_text(patch.read_text())
    (overlay / "kustomization.yaml").write_text(kustomization(
        resources=["../../base"], patches=[{"path": patch.name, "target": {"kind": "Deployment", "name": "ms-unmer-.*"}}]))
    out = subprocess.run([kubectl, "kustomize", str(overlay)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    built = [d for d in yaml.safe_load_all(out.stdout) if d]
    plain = [d for p in sorted(PARTITIONS) for d in manifests(p)]
    assert sorted((d["kind"], d["metadata"]["name"]) for d in built) == sorted((d["kind"], d["metadata"]["name"]) for d in plain)
    for doc in built:
        if doc["kind"] != "Deployment":
            continue
        volumes = {v["name"]: v for v in doc["spec"]["template"]["spec"]["volumes"]}
        assert volumes["logs"] == {"name": "logs", "persistentVolumeClaim": {"claimName": claim}}
        before = next(d for d in plain if d["kind"] == "Deployment" and d["metadata"]["name"] == doc["metadata"]["name"])
        assert doc["spec"]["template"]["spec"]["containers"] == before["spec"]["template"]["spec"]["containers"]
        assert doc["spec"]["selector"] == before["spec"]["selector"]
    assert validate(built, kubernetes_validate) == []


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
