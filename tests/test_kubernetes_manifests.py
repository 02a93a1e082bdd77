"""packaging/kubernetes/: the DaemonSet and its companions pass the Kubernetes schemas of the
newest minor version kubernetes-validate knows (strict: no unknown fields) and yamllint.

Beyond the schemas, the properties the deployment depends on are checked on the parsed
objects, so an edit that keeps the YAML valid but drops one of them fails here.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import kubernetes_validate
import pytest
import yaml
from kubernetes_validate.utils import latest_version

from tests.support import ROOT

MANIFESTS = sorted((ROOT / "packaging" / "kubernetes").glob("*.yaml"))
BIN = ROOT / ".venv" / "bin"


def _docs(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


@pytest.mark.parametrize("path", MANIFESTS, ids=lambda p: p.name)
def test_each_manifest_passes_the_current_kubernetes_schemas(path: Path) -> None:
    version = latest_version()
    for doc in _docs(path):
        kubernetes_validate.validate(doc, version, strict=True)


def test_a_broken_manifest_is_refused() -> None:
    """The check above can fail: an unknown field and a wrong type are refused."""
    daemonset = _docs(ROOT / "packaging" / "kubernetes" / "daemonset.yaml")[0]
    daemonset["spec"]["template"]["spec"]["hostPid"] = True  # misspelt
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(daemonset, latest_version(), strict=True)


def test_yamllint_is_clean() -> None:
    done = subprocess.run([BIN / "yamllint", "-s", *MANIFESTS], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout


def test_the_daemon_gets_the_host_views_and_only_the_capabilities_it_uses() -> None:
    pod = _docs(ROOT / "packaging" / "kubernetes" / "daemonset.yaml")[0]["spec"]["template"]["spec"]
    assert pod["hostPID"] is True
    assert pod["automountServiceAccountToken"] is False
    (daemon,) = pod["containers"]
    context = daemon["securityContext"]
    assert context["privileged"] is False
    assert context["capabilities"]["drop"] == ["ALL"]
    assert set(context["capabilities"]["add"]) == {
        "BPF", "PERFMON", "NET_ADMIN", "SYS_ADMIN", "SYS_RESOURCE", "SETUID", "SETGID", "KILL", "CHOWN",
        "DAC_READ_SEARCH",
    }  # fmt: skip
    mounts = {m["mountPath"]: m["name"] for m in daemon["volumeMounts"]}
    host = {v["name"]: v["hostPath"]["path"] for v in pod["volumes"] if "hostPath" in v}
    for path in ("/run/assay-runner", "/var/lib/assay-runner", "/var/cache/assay-runner", "/sys/fs/cgroup"):
        assert host[mounts[path]] == path, path
    account = _docs(ROOT / "packaging" / "kubernetes" / "serviceaccount.yaml")[0]
    assert account["automountServiceAccountToken"] is False
