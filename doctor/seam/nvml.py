"""The NVML layer: the only module that imports pynvml (the ``nvidia-ml-py`` bindings).

``query(name, *args)`` runs one NVML call by its C name, device by index, and returns a
JSON-able value, so that the live host (``LiveHost.nvml``), a recording (``nvml.json``) and
a replay hand probes the same thing. What it does once, here, so no probe has to:

* initialises NVML lazily, on the first query, and remembers a failed initialisation so a
  host without the driver answers every later query at once;
* turns device indexes into handles (cached) for ``nvmlDevice*`` calls, both devices for
  the pair calls (topology, P2P);
* maps every ``NVMLError`` onto the seam's read-failure reasons (``doctor.seam.host.Reason``):
  not supported, no permission, function not found (an older driver), GPU lost, library or
  driver missing, else failed;
* falls back across renamed calls (clock "event" reasons were "throttle" reasons before
  R535; the old name is gone from CUDA 14 era bindings);
* converts ctypes structures, arrays and pynvml's friendly objects to dicts and lists,
  bytes to str, and shapes tuple answers into named fields (``SHAPES``).

Privilege: none for the calls used here (NVML reads are unprivileged; some, like
retired pages on old drivers, answer "no permission" to users, which is a reason, not a
crash). Manual equivalent: ``nvidia-smi -q``.
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Callable
from typing import Any, ClassVar

from doctor.seam.ctypes_json import to_json
from doctor.seam.host import HostReadError

# NVML return codes (nvml.h) -> the seam's reason; anything else is "failed".
_ERROR_REASONS = {
    3: "not-supported",     # NVML_ERROR_NOT_SUPPORTED
    4: "no-permission",     # NVML_ERROR_NO_PERMISSION
    13: "not-found",        # NVML_ERROR_FUNCTION_NOT_FOUND: the driver predates the call
    15: "device-lost",      # NVML_ERROR_GPU_IS_LOST: fell off the bus (XID 79)
    12: "library-missing",  # NVML_ERROR_LIBRARY_NOT_FOUND
    9: "library-missing",   # NVML_ERROR_DRIVER_NOT_LOADED
    1: "library-missing",   # NVML_ERROR_UNINITIALIZED
}

# What to tell a person for an initialisation failure, by NVML return code.
_INIT_ADVICE = {
    12: "NVIDIA driver not loaded: libnvidia-ml.so.1 not found; install the driver or run "
        "where the GPU is",
    9: "NVIDIA driver not loaded: libnvidia-ml.so.1 is there but the kernel module is not "
       "(`nvidia-smi` fails too); load it with `sudo modprobe nvidia` or reinstall the driver",
    4: "NVML refused this user: give it access to /dev/nvidia* (the `video` group, or the "
       "container's --gpus flag)",
}

# Calls renamed across driver generations: try the others when one is missing.
RENAMED: dict[str, tuple[str, ...]] = {
    "nvmlDeviceGetCurrentClocksEventReasons": ("nvmlDeviceGetCurrentClocksThrottleReasons",),
    "nvmlDeviceGetCurrentClocksThrottleReasons": ("nvmlDeviceGetCurrentClocksEventReasons",),
    "nvmlDeviceGetSupportedClocksEventReasons": ("nvmlDeviceGetSupportedClocksThrottleReasons",),
    # R550 added the versioned call (with healthMask); R525-R535 have the first one only
    "nvmlDeviceGetGpuFabricInfoV": ("nvmlDeviceGetGpuFabricInfo",),
}

# Calls that fill a structure the caller hands them: the binding's ctypes class for it and,
# for versioned structures, the binding's name of the version word to set first
# (nvml.h: nvmlGpuFabricInfo_v2 = NVML_STRUCT_VERSION(GpuFabricInfo, 2)).
OUT_STRUCTS: dict[str, tuple[str, str | None]] = {
    "nvmlDeviceGetGpuFabricInfo": ("c_nvmlGpuFabricInfo_t", None),
    "nvmlDeviceGetGpuFabricInfoV": ("c_nvmlGpuFabricInfoV_t", "nvmlGpuFabricInfo_v2"),
}

# C calls the bindings reach only through another wrapper's argument: the versioned memory
# call (R510+: "reserved" apart, "used" as nvidia-smi prints it) is
# ``nvmlDeviceGetMemoryInfo(handle, version=nvmlMemory_v2)`` in nvidia-ml-py. A driver without
# it answers FUNCTION_NOT_FOUND (not-found), and the probe falls back to the first call.
VIA: dict[str, Callable[[Any, Any], Any]] = {
    "nvmlDeviceGetMemoryInfo_v2": lambda pynvml, handle: pynvml.nvmlDeviceGetMemoryInfo(
        handle, version=pynvml.nvmlMemory_v2),
}

# nvmlDeviceGetFieldValues, one field at a time: ``query("nvmlDeviceGetFieldValues", index,
# field_id)``. The answer is {"fieldId", "valueType", "value"}, the union read by its type
# (nvml.h nvmlValueType_t, in the union's order); a field the driver does not support answers
# in its own nvmlReturn, raised as the call's error (NOT_SUPPORTED: not-supported).
_FIELD_UNION = ("dVal", "uiVal", "ulVal", "ullVal", "sllVal", "siVal", "usVal")


def _field_value(pynvml: Any, handle: Any, field: Any) -> dict:
    if not isinstance(field, int) or isinstance(field, bool) or not 0 <= field < 1 << 16:
        raise HostReadError(f"nvml field {field!r}", "failed", "a field id is an int in [0, 65536)")
    (got,) = pynvml.nvmlDeviceGetFieldValues(handle, [field])
    if got.nvmlReturn != 0:
        raise pynvml.NVMLError(got.nvmlReturn)
    if got.valueType >= len(_FIELD_UNION):
        raise HostReadError(f"nvml field {field}", "failed", f"value type {got.valueType} unknown")
    return {"fieldId": got.fieldId, "valueType": got.valueType,
            "value": getattr(got.value, _FIELD_UNION[got.valueType])}


# Calls that take two devices (both arguments are indexes).
_PAIR_CALLS = frozenset({"nvmlDeviceGetTopologyCommonAncestor", "nvmlDeviceGetP2PStatus"})

# Tuple answers given names, so a recording says what each number is.
SHAPES: dict[str, Callable[[list], dict]] = {
    "nvmlDeviceGetRemappedRows": lambda v: dict(
        zip(("corrected", "uncorrected", "pending", "failure"), v)),
    "nvmlDeviceGetMigMode": lambda v: dict(zip(("current", "pending"), v)),
    "nvmlDeviceGetEccMode": lambda v: dict(zip(("current", "pending"), v)),
    "nvmlDeviceGetPowerManagementLimitConstraints": lambda v: dict(zip(("min", "max"), v)),
    # (major, minor): (12, 0) on an RTX 5090; drivers before R450 lack the call (not-found)
    "nvmlDeviceGetCudaComputeCapability": lambda v: dict(zip(("major", "minor"), v)),
}


class _State:
    lock = threading.Lock()
    initialised = False
    init_error: HostReadError | None = None
    handles: ClassVar[dict[int, Any]] = {}
    pynvml: Any = None


def _import() -> Any:
    try:
        import pynvml  # the only import of pynvml in llm-doctor
    except ImportError:
        raise HostReadError("nvml", "library-missing",
                            "the nvidia-ml-py package is not installed: "
                            "`pip install nvidia-ml-py`") from None
    return pynvml


def _init() -> Any:
    """pynvml, initialised once; a failed initialisation is remembered and re-raised."""
    with _State.lock:
        if _State.init_error is not None:
            # A fresh exception each time: re-raising the stored one would grow its
            # __traceback__ by a frame chain per call, a leak in the daemon (~4.5 KB a call).
            err = _State.init_error
            raise HostReadError(err.path, err.reason, err.detail) from None
        if _State.initialised:
            return _State.pynvml
        try:
            pynvml = _import()
        except HostReadError as exc:
            _State.init_error = HostReadError(exc.path, exc.reason, exc.detail)
            raise
        try:
            pynvml.nvmlInit()
        except (pynvml.NVMLError, OSError) as exc:  # OSError: ctypes failed to load the .so
            value = getattr(exc, "value", None)
            code = value if isinstance(value, int) else -1
            reason = _ERROR_REASONS.get(code, "library-missing")
            advice = _INIT_ADVICE.get(code, f"NVML could not start: {exc}")
            _State.init_error = HostReadError("nvml nvmlInit", reason, advice)
            raise HostReadError("nvml nvmlInit", reason, advice) from None
        _State.pynvml, _State.initialised = pynvml, True
        return pynvml


def _handle(pynvml: Any, index: Any) -> Any:
    if not isinstance(index, int) or isinstance(index, bool) or index < 0:
        raise HostReadError(f"nvml device {index!r}", "failed", "a device index is an int >= 0")
    with _State.lock:
        if index not in _State.handles:
            _State.handles[index] = pynvml.nvmlDeviceGetHandleByIndex(index)
        return _State.handles[index]


def _call(pynvml: Any, name: str, args: tuple) -> Any:
    if name == "nvmlDeviceGetFieldValues" and len(args) == 2:
        if not hasattr(pynvml, name):
            raise AttributeError(name)  # bindings older than the call
        return _field_value(pynvml, _handle(pynvml, args[0]), args[1])
    if name in VIA and len(args) == 1:
        if not hasattr(pynvml, "nvmlMemory_v2"):
            raise AttributeError(name)  # bindings older than the call
        return VIA[name](pynvml, _handle(pynvml, args[0]))
    fn = getattr(pynvml, name, None)
    if fn is None or not name.startswith("nvml"):
        raise AttributeError(name)
    if name.startswith("nvmlDevice") and args:
        devices = 2 if name in _PAIR_CALLS else 1
        handles = [_handle(pynvml, a) for a in args[:devices]]
        args = (*handles, *args[devices:])
    if name in OUT_STRUCTS:
        struct_name, version = OUT_STRUCTS[name]
        struct_type = getattr(pynvml, struct_name, None)
        if struct_type is None:
            raise AttributeError(struct_name)  # bindings older than the call
        out = struct_type()
        if version is not None:
            out.version = getattr(pynvml, version)
        fn(*args, ctypes.byref(out))
        return out
    return fn(*args)


def query(name: str, *args: int | str) -> Any:
    """Run NVML call ``name`` (its C name) with device indexes for handles; JSON-able result.

    Raises ``HostReadError(f"nvml {name}{args}", reason, detail)``.
    """
    path = f"nvml {name}{tuple(args)}"
    pynvml = _init()
    candidates = (name, *RENAMED.get(name, ()))
    for candidate in candidates:
        try:
            value = _call(pynvml, candidate, args)
        except AttributeError:
            continue  # this binding lacks the name: try the other spelling
        except HostReadError:
            raise
        except pynvml.NVMLError as exc:
            reason = _ERROR_REASONS.get(exc.value, "failed")
            if reason == "not-found" and candidate != candidates[-1]:
                continue  # the driver lacks this spelling: try the other
            raise HostReadError(path, reason, str(exc)) from None
        except (TypeError, ValueError, OSError) as exc:  # bad arguments, a binding mismatch
            raise HostReadError(path, "failed", f"{type(exc).__name__}: {exc}") from None
        shaped = to_json(value)
        shape = SHAPES.get(name)
        return shape(shaped) if shape and isinstance(shaped, list) else shaped
    raise HostReadError(path, "not-found", "neither this driver nor nvidia-ml-py has the call")


def _reset_for_tests(pynvml: Any = None) -> None:
    """Forget initialisation and handles; ``pynvml`` replaces the module (a test fake)."""
    with _State.lock:
        _State.initialised = pynvml is not None
        _State.init_error = None
        _State.handles = {}
        _State.pynvml = pynvml


NVML_ERROR_TIMEOUT = 10
XID_POLL_MS = 50


def watch_xids(seconds: float) -> list[dict]:
    """XID critical-error events raised while watching for ``seconds`` (at most 30).

    Registers ``nvmlEventTypeXidCriticalError`` on every GPU that supports it, one event set
    per GPU so each event's device is known, and polls the sets with ``nvmlEventSetWait_v2``
    (50 ms each) until the window ends. Returns ``[{"gpu": index, "xid": code}]``. Raises
    ``HostReadError`` as ``query`` does; ``not-supported`` when no GPU can report events
    (some virtualised and MIG setups). Manual equivalent: ``dcgmi health`` or watching
    ``dmesg -w | grep Xid``.
    """
    import time

    pynvml = _init()
    count = query("nvmlDeviceGetCount")
    sets: dict[int, Any] = {}
    path = "nvml xid events"
    try:
        for index in range(count):
            event_set = pynvml.nvmlEventSetCreate()
            try:
                pynvml.nvmlDeviceRegisterEvents(_handle(pynvml, index),
                                                pynvml.nvmlEventTypeXidCriticalError, event_set)
            except pynvml.NVMLError:
                pynvml.nvmlEventSetFree(event_set)
                continue
            sets[index] = event_set
        if not sets:
            raise HostReadError(path, "not-supported", "no GPU reports XID events")
        events: list[dict] = []
        deadline = time.monotonic() + min(max(seconds, 0.0), 30.0)
        while time.monotonic() < deadline:
            for index, event_set in sets.items():
                try:
                    data = pynvml.nvmlEventSetWait_v2(event_set, XID_POLL_MS)
                except pynvml.NVMLError as exc:
                    if exc.value == NVML_ERROR_TIMEOUT:
                        continue
                    raise HostReadError(path, _ERROR_REASONS.get(exc.value, "failed"), str(exc)) from None
                events.append({"gpu": index, "xid": int(data.eventData)})
        return events
    except pynvml.NVMLError as exc:
        raise HostReadError(path, _ERROR_REASONS.get(exc.value, "failed"), str(exc)) from None
    finally:
        for event_set in sets.values():
            pynvml.nvmlEventSetFree(event_set)
