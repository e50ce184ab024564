"""contrib/kubernetes/: the manifests parse and hold what docs/kubernetes.md says they hold.

No cluster runs here: these are the manifests as YAML, checked for hostPID, the read-only
/proc, /sys and /dev, the nvidia.com/gpu toleration, the state file on a hostPath shared by
the daemon (read-write) and node-problem-detector (read-only), resource requests and limits,
and no privilege beyond the two capabilities the docs name. The NPD ConfigMap's JSON is
``llm-doctor npd --config`` as it is, so the two cannot drift.
"""

from __future__ import annotations

import json
import re

import yaml

from doctor.daemon.state import DEFAULT_PATH
from doctor.fleet import npd
from tests.conftest import REPO

KUBE = REPO / "contrib" / "kubernetes"
DOCS = REPO / "docs" / "kubernetes.md"
STATE_DIR = DEFAULT_PATH.rsplit("/", 1)[0]


def _docs(name: str) -> list[dict]:
    return [d for d in yaml.safe_load_all((KUBE / name).read_text()) if d]


def _one(docs: list[dict], kind: str) -> dict:
    found = [d for d in docs if d["kind"] == kind]
    assert len(found) == 1, kind
    return found[0]


def _pod(name: str) -> dict:
    return _one(_docs(name), "DaemonSet")["spec"]["template"]["spec"]


def _mounts(container: dict, pod: dict) -> dict[str, tuple[dict, dict]]:
    volumes = {v["name"]: v for v in pod["volumes"]}
    return {m["mountPath"]: (m, volumes[m["name"]]) for m in container["volumeMounts"]}


def _limits_set(container: dict) -> None:
    resources = container["resources"]
    for part in ("requests", "limits"):
        assert set(resources[part]) == {"cpu", "memory"}, (container["name"], part)


def _no_privilege(context: dict) -> None:
    assert context["privileged"] is False and context["allowPrivilegeEscalation"] is False
    assert context["readOnlyRootFilesystem"] is True
    assert context["capabilities"]["drop"] == ["ALL"]
    assert context["seccompProfile"]["type"] == "RuntimeDefault"


def test_the_daemonset_reads_the_node_read_only_with_the_documented_privilege_only():
    pod = _pod("daemonset.yaml")
    assert pod["hostPID"] is True and pod.get("hostNetwork") is False
    assert not pod.get("hostIPC") and pod["automountServiceAccountToken"] is False
    (container,) = pod["containers"]
    mounts = _mounts(container, pod)
    for path in ("/proc", "/sys", "/dev"):
        mount, volume = mounts[path]
        assert mount["readOnly"] is True and volume["hostPath"]["path"] == path, path
    state_mount, state_volume = mounts[STATE_DIR]
    assert not state_mount.get("readOnly") and state_volume["hostPath"]["path"] == STATE_DIR
    writable_host = [p for p, (m, v) in mounts.items() if "hostPath" in v and not m.get("readOnly")]
    assert writable_host == [STATE_DIR]  # the one place on the node it writes
    _no_privilege(container["securityContext"])
    added = container["securityContext"]["capabilities"]["add"]
    assert sorted(added) == ["DAC_READ_SEARCH", "SYS_PTRACE"]
    docs = DOCS.read_text()
    for capability in added:  # each grant is explained where the page says what is needed
        assert f"`CAP_{capability}`" in docs
    _limits_set(container)
    assert "nvidia.com/gpu" not in json.dumps(container["resources"])  # takes no GPU away


def test_both_daemonsets_tolerate_the_gpu_taint():
    for name in ("daemonset.yaml", "node-problem-detector.yaml"):
        tolerations = _pod(name)["tolerations"]
        assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in tolerations


def test_the_daemon_writes_the_state_where_npd_reads_it():
    config = _one(_docs("daemonset.yaml"), "ConfigMap")["data"]["config.toml"]
    assert re.search(rf'^state_file = "{re.escape(DEFAULT_PATH)}"', config, re.M)
    pod = _pod("daemonset.yaml")
    (container,) = pod["containers"]
    assert container["args"] == ["daemon", "--config", "/etc/llm-doctor/config.toml"]
    assert "/etc/llm-doctor" in _mounts(container, pod)


def test_npd_runs_unprivileged_with_the_state_read_only_and_our_config():
    docs = _docs("node-problem-detector.yaml")
    pod = _pod("node-problem-detector.yaml")
    (container,) = pod["containers"]
    _no_privilege(container["securityContext"])
    assert "add" not in container["securityContext"]["capabilities"]
    assert container["securityContext"]["runAsNonRoot"] is True
    assert not pod.get("hostPID") and not pod.get("hostNetwork")
    _limits_set(container)
    mounts = _mounts(container, pod)
    state_mount, state_volume = mounts[STATE_DIR]
    assert state_mount["readOnly"] is True and state_volume["hostPath"]["path"] == STATE_DIR
    flag = next(a for a in container["command"] if a.startswith("--config.custom-plugin-monitor="))
    path = flag.split("=", 1)[1]
    assert path.rsplit("/", 1)[0] in mounts
    env = {e["name"] for e in container["env"]}
    assert "NODE_NAME" in env
    shipped = _one(docs, "ConfigMap")["data"][path.rsplit("/", 1)[1]]
    assert json.loads(shipped) == npd.plugin_config()  # 'llm-doctor npd --config' as it is


def test_the_npd_image_installs_the_binary_the_config_execs():
    dockerfile = (KUBE / "Dockerfile.npd").read_text()
    venv = npd.BINARY.rsplit("/bin/", 1)[0]
    assert f"python3 -m venv {venv}" in dockerfile and f"{venv}/bin/pip install" in dockerfile
    assert f"{venv}/bin/llm-doctor" in (KUBE / "Dockerfile").read_text()


def test_the_docs_say_plainly_that_npd_itself_is_not_run_in_the_tests():
    docs = DOCS.read_text()
    assert "not run in our tests" in docs and "tests/test_npd.py" in docs
    assert "draino" in docs and "cordon" in docs
