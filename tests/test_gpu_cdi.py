"""gpu.cdi and cdi-spec-stale (issue 32, item 9) on the recorded hosts of
tests/fixtures/build_cdi_hosts.py: a real nvidia-ctk spec (tests/fixtures/cdi/PROVENANCE.md)
on a real T4 host, after a driver upgrade and after a GPU swap; hostile specs and configs."""

from __future__ import annotations

import json
import shutil

import pytest
import tomli_w
import yaml

from doctor._toml import tomllib
from doctor.inputs import NO_INPUTS
from doctor.model import Level, ScanOptions, Severity
from doctor.scan import scan
from doctor.seam.recorded import RecordedHost
from probes.gpu import cdi
from probes.helpers.cdi_spec import SpecError, parse
from probes.registry import PROBES
from tests.builtin_rules import builtin_rules
from tests.conftest import FIXTURE_HOSTS
from tests.fixtures.build_cdi_hosts import SPEC

RULES = [r for r in builtin_rules() if r.id == "cdi-spec-stale"]
CHOSEN = tuple(p for p in PROBES if p.name in ("gpu.inventory", "gpu.cdi"))
QUICK = ScanOptions(level=Level.QUICK)


def findings(root):
    report = scan(RecordedHost(root), QUICK, CHOSEN, RULES)
    assert report.rule_errors == []
    probe = {p.name: p for p in report.probes}["gpu.cdi"]
    return [(f.rule, f.severity.label) for f in report.findings if f.severity >= Severity.WARNING], probe


@pytest.mark.parametrize("name,expected", [
    ("t4-cdi-current", []),
    ("t4-cdi-driver-upgraded", [("cdi-spec-stale", "critical")]),
    ("t4-cdi-gpu-swapped", [("cdi-spec-stale", "warning")]),
])
def test_a_real_spec_judged_against_nvml(name, expected):
    found, probe = findings(FIXTURE_HOSTS / name)
    assert probe.status == "ok", probe.reason
    assert found == expected


def test_without_gpu_inventory_the_probe_reads_nvml_itself():
    record = cdi.probe(RecordedHost(FIXTURE_HOSTS / "t4-cdi-driver-upgraded"), QUICK, NO_INPUTS)
    assert record.driver_version == "570.172.08"
    (spec,) = record.specs
    assert (spec.driver_version, spec.driver_source, spec.driver_stale) == ("570.133.20", "libcuda", True)
    assert spec.device_names == ("0", "GPU-6cf00fa7-59ac-16f2-3e83-d24ccdc56f84", "all")


def test_json_and_yaml_specs_read_the_same():
    text = SPEC.read_text()
    assert parse(json.dumps(yaml.safe_load(text))) == parse(text)


def planted(tmp_path, spec: str | bytes | None, config: str | None = None):
    root = tmp_path / "host"
    shutil.copytree(FIXTURE_HOSTS / "t4-cdi-current", root, symlinks=True)
    manifest = tomllib.loads((root / "host.toml").read_text())
    target = root / "fs/etc/cdi/nvidia.yaml"
    if spec is None:
        shutil.rmtree(root / "fs/etc/cdi")
        del manifest["files"]["/etc/cdi"]
    else:
        data = spec.encode() if isinstance(spec, str) else spec
        target.write_bytes(data)
        manifest["files"]["/etc/cdi"] = {"nvidia.yaml": len(data)}
    (root / "host.toml").write_text(tomli_w.dumps(manifest))
    conf = root / "fs/etc/nvidia-container-runtime/config.toml"
    if config is None:
        conf.unlink()
    else:
        conf.write_text(config)
    return RecordedHost(root)


BOMB = "kind: nvidia.com/gpu\na: &a [x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a]\n" \
       "devices:\n- name: *b\n"


@pytest.mark.parametrize("text,said", [
    (BOMB, "alias"),
    ("kind: !!python/object:os.system nvidia.com/gpu\ndevices:\n- name: all\n", "tag"),
    ("kind: nvidia.com/gpu\ndevices:\n\t- name: all\n", "tab"),
    ("{" * 5000 + "}" * 5000, "nested deeper"),
    ('{"kind": "nvidia.com/gpu", "devices": [', "not valid JSON"),
    ("cdiVersion: 0.6.0\n", "no top-level 'kind'"),
    ("kind: nvidia.com/gpu\ndevices: []\n", "no device"),
    ("x" * ((1 << 20) + 1), "over the"),
])
def test_a_hostile_spec_is_one_line_and_no_finding(tmp_path, text, said):
    record = cdi.probe(planted(tmp_path, text, "[nvidia-container-runtime]\nmode = 'cdi'\n"), QUICK)
    (spec,) = record.specs
    assert spec.error is not None and said in spec.error and "\n" not in spec.error
    assert spec.driver_stale is None and spec.unknown_devices == ()


def test_a_spec_over_the_bound_is_not_read(tmp_path):
    record = cdi.probe(planted(tmp_path, b"\xff" * (2 << 20), None), QUICK)
    (spec,) = record.specs
    assert "over the 1024 KiB" in spec.error
    assert record.runtime_mode is None and record.missing["runtime_mode"] == "not-found"


@pytest.mark.parametrize("config,mode,reason", [
    ("[nvidia-container-runtime]\nlog-level = 'info'\n", "auto", None),  # the toolkit's default
    ("[nvidia-container-runtime]\nmode = 5\n", None, "not a string"),
    ("[nvidia-container-runtime\nmode = 'cdi'\n", None, "not valid TOML"),
    ("a" + ".a" * 40 + " = 1\n", None, "more than 8 parts"),
])
def test_the_runtime_mode_or_why_not(tmp_path, config, mode, reason):
    record = cdi.probe(planted(tmp_path, SPEC.read_text(), config), QUICK)
    assert record.runtime_mode == mode
    assert reason is None or reason in record.missing["runtime_mode"]


def test_no_spec_and_no_toolkit_is_skipped(tmp_path):
    with pytest.raises(cdi.Skip):
        cdi.probe(planted(tmp_path, None, None), QUICK)


def test_an_amd_spec_is_not_judged_against_nvml(tmp_path):
    text = "cdiVersion: 0.6.0\nkind: amd.com/gpu\ndevices:\n- name: \"3\"\n  containerEdits:\n" \
           "    deviceNodes:\n    - path: /dev/dri/renderD131\n"
    (spec,) = cdi.probe(planted(tmp_path, text, None), QUICK).specs
    assert spec.kind == "amd.com/gpu" and spec.unknown_devices == () and spec.driver_stale is None


def test_spec_error_is_a_value_error():
    with pytest.raises(SpecError):
        parse("kind: *x\n")


@pytest.mark.parametrize("names,uuids,count,unknown", [
    (("0", "gpu1", "all"), ("GPU-a",), 1, ("gpu1",)),  # index and type-index names past the count
    (("GPU-A", "GPU-b"), ("GPU-a",), 1, ("GPU-b",)),  # UUIDs compared without case
    (("GPU-b", "3"), (), None, ()),  # NVML gave neither UUIDs nor a count: not judged
    (("MIG-1f2e", "0:1", "all"), ("GPU-a",), 1, ()),  # MIG devices are not judged
])
def test_device_names_nvml_does_not_list(names, uuids, count, unknown):
    assert cdi._unknown(names, uuids, count) == unknown


# The toolkit's own config, as `nvidia-ctk config default` writes its CDI part
# (NVIDIA/nvidia-container-toolkit internal/config/toml_test.go TestTomlSave, the keys and the
# default spec-dirs), with spec-dirs pointed where an operator keeps specs on a read-only /etc.
TOOLKIT_CONFIG = """#accept-nvidia-visible-devices-as-volume-mounts = false
disable-require = false

[nvidia-container-runtime]
log-level = "info"
mode = "cdi"
runtimes = ["docker-runc", "runc", "crun"]

[nvidia-container-runtime.modes]

[nvidia-container-runtime.modes.cdi]
annotation-prefixes = ["cdi.k8s.io/"]
default-kind = "nvidia.com/gpu"
spec-dirs = {dirs}

[nvidia-container-runtime.modes.csv]
mount-spec-path = "/etc/nvidia-container-runtime/host-files-for-container.d"
"""


def moved(tmp_path, host_name: str, dirs: str):
    """``host_name`` with its spec moved from /etc/cdi to /opt/cdi and spec-dirs set to ``dirs``."""
    root = tmp_path / "host"
    shutil.copytree(FIXTURE_HOSTS / host_name, root, symlinks=True)
    manifest = tomllib.loads((root / "host.toml").read_text())
    (root / "fs/opt").mkdir()
    shutil.move(root / "fs/etc/cdi", root / "fs/opt/cdi")
    manifest["files"]["/opt/cdi"] = manifest["files"].pop("/etc/cdi")
    (root / "host.toml").write_text(tomli_w.dumps(manifest))
    (root / "fs/etc/nvidia-container-runtime/config.toml").write_text(TOOLKIT_CONFIG.format(dirs=dirs))
    return root


def test_a_spec_in_a_directory_the_toolkit_config_names_is_read_and_judged(tmp_path):
    root = moved(tmp_path, "t4-cdi-driver-upgraded", '["/opt/cdi/"]')
    found, probe = findings(root)
    assert found == [("cdi-spec-stale", "critical")]
    assert probe.record.toolkit_spec_dirs == ("/opt/cdi",)
    assert probe.record.spec_dirs == ("/etc/cdi", "/var/run/cdi", "/opt/cdi")
    assert [s.path for s in probe.record.specs] == ["/opt/cdi/nvidia.yaml"]


@pytest.mark.parametrize("dirs,said", [
    ('["opt/cdi"]', "no absolute, normalised path"),
    ('["/etc/../opt/cdi"]', "no absolute, normalised path"),
    ("5", "not a list of 1 to 8"),
    ("[]", "not a list of 1 to 8"),
    (str([f"/d{i}" for i in range(9)]).replace("'", '"'), "not a list of 1 to 8"),
    ('["/opt/cdi", 7]', "no absolute, normalised path"),
])
def test_hostile_spec_dirs_fall_back_to_the_default_with_one_line(tmp_path, dirs, said):
    record = cdi.probe(RecordedHost(moved(tmp_path, "t4-cdi-current", dirs)), QUICK)
    assert record.toolkit_spec_dirs == cdi.SPEC_DIRS and record.specs == ()
    assert said in record.missing["toolkit_spec_dirs"] and "\n" not in record.missing["toolkit_spec_dirs"]
