"""A GPU's own NVLink count (nvmlDeviceGetFieldValues, NVML_FI_DEV_NVLINK_LINK_COUNT) bounds
the per-link loops of gpu.fabric and gpu.topology: through the seam's NVML (a fake binding
module holding pynvml's real ctypes structures) and against recorded answers."""

from __future__ import annotations

import json
import types

import pytest

from doctor.seam import nvml
from doctor.seam.host import HostReadError
from doctor.seam.recorded import RecordedHost
from probes.gpu import fabric
from probes.helpers import nvlinks
from tests.conftest import FIXTURE_HOSTS

pynvml = pytest.importorskip("pynvml")


def _binding(answers: dict[int, tuple[int, int, str, object]]):
    """A binding module whose nvmlDeviceGetFieldValues fills pynvml's own structures:
    field id -> (nvmlReturn, valueType, union member, value)."""
    def field_values(handle, ids):
        out = (pynvml.c_nvmlFieldValue_t * len(ids))()
        for slot, field in zip(out, ids):
            ret, kind, member, value = answers[field]
            slot.fieldId, slot.nvmlReturn, slot.valueType = field, ret, kind
            setattr(slot.value, member, value)
        return out
    return types.SimpleNamespace(NVMLError=pynvml.NVMLError, nvmlDeviceGetHandleByIndex=lambda i: i,
                                 nvmlDeviceGetFieldValues=field_values)


@pytest.fixture
def binding():
    def use(answers):
        nvml._reset_for_tests(_binding(answers))
    yield use
    nvml._reset_for_tests(None)


def test_the_seam_reads_a_field_by_its_value_type(binding):
    binding({91: (0, pynvml.NVML_VALUE_TYPE_UNSIGNED_INT, "uiVal", 18)})
    assert nvml.query("nvmlDeviceGetFieldValues", 0, 91) == {"fieldId": 91, "valueType": 1, "value": 18}


def test_a_field_the_driver_does_not_support_is_the_calls_error(binding):
    binding({91: (pynvml.NVML_ERROR_NOT_SUPPORTED, 0, "dVal", 0.0)})
    with pytest.raises(HostReadError) as err:
        nvml.query("nvmlDeviceGetFieldValues", 0, 91)
    assert err.value.reason == "not-supported"
    with pytest.raises(HostReadError):
        nvml.query("nvmlDeviceGetFieldValues", 0, -1)  # no such field id: refused before the call


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """GPU 0's recorded fabric answers from h100-sxm-8x-nvswitch, with ``extra`` answers for
    its links and its link count in place of the recording's."""
    answers = [e for e in json.loads((FIXTURE_HOSTS / "h100-sxm-8x-nvswitch/nvml.json").read_text())
               if e["args"][:1] == [0] and e["call"] != "nvmlDeviceGetNvLinkState"]
    made = iter(range(100))

    def host(extra: list[dict]) -> RecordedHost:
        root = tmp_path_factory.mktemp(f"links{next(made)}")
        (root / "host.toml").write_text('[host]\nformat = 2\nhostname = "tray"\nlevel = "quick"\n'
                                        'captured_at = "2026-12-07T07:00:00Z"\nllm_doctor_version = "0.1.0"\n')
        (root / "nvml.json").write_text(json.dumps(answers + extra))
        return RecordedHost(root)
    return host


def _links(states: dict[int, int | str]) -> list[dict]:
    return [{"call": "nvmlDeviceGetNvLinkState", "args": [0, link], **({"value": s} if isinstance(s, int) else {"error": s})}
            for link, s in states.items()]


# GPU 0 of a GB200 tray: 18 links, link 3 trained down and not answering (not-supported), and
# indexes 18-35 answering INVALID_ARGUMENT as NVIDIA/TensorRT-LLM#17060 shows
TRAY = {**{link: 1 for link in range(18)}, 3: "not-supported", **{link: "failed" for link in range(18, 36)}}
COUNT = {"call": "nvmlDeviceGetFieldValues", "args": [0, 91], "value": {"fieldId": 91, "valueType": 1, "value": 18}}


def test_the_devices_own_count_asks_every_link_it_has(recorded):
    host = recorded(_links(TRAY) + [COUNT])
    assert nvlinks.link_count(host, 0) == 18
    assert nvlinks.link_states(host, 0) == (17, 17)  # link 3 left out, the loop goes on
    gpu = fabric.read_gpu(host, 0)
    assert (gpu.nvlinks_up, gpu.nvlinks_total) == (17, 17)


def test_without_the_count_the_loop_stops_at_the_first_link_that_does_not_answer(recorded):
    unsupported = {**COUNT, "value": None, "error": "not-supported"}
    host = recorded(_links(TRAY) + [unsupported])
    assert nvlinks.link_count(host, 0) is None
    assert nvlinks.link_states(host, 0) == (3, 3)  # today's behaviour: links 0-2


@pytest.mark.parametrize("value", [37, -1, True, 2.5, "18", None])
def test_a_count_that_is_no_link_count_is_no_count(recorded, value):
    host = recorded(_links(TRAY) + [{**COUNT, "value": {"fieldId": 91, "valueType": 1, "value": value}}])
    assert nvlinks.link_count(host, 0) is None
