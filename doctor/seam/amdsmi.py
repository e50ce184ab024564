"""The AMD SMI layer: the only module that imports ``amdsmi`` (AMD's Python bindings, PyPI
``amdsmi``, which load ``libamd_smi.so`` from ROCm through ctypes).

``query(name, *args)`` runs one read-only amdsmi call by its Python name, device by index,
and returns a JSON-able value, so that the live host (``LiveHost.amdsmi``), a recording
(``amdsmi.json``) and a replay hand probes the same thing; doctor/seam/nvml.py does the same
for NVIDIA. What it does once, here:

* imports the bindings lazily and quietly: ``import amdsmi`` on a machine without ROCm
  prints two lines to stdout (it cannot find libamd_smi.so) and then fails with a
  ``KeyError``; both are caught and become one "library-missing" reason with advice;
* initialises once (``amdsmi_init``), remembers a failed initialisation (the amdgpu driver
  not loaded, no permission on /dev/kfd) so every later call answers at once;
* turns device indexes into processor handles (``amdsmi_get_processor_handles``, cached);
  ``amdsmi_get_processor_handles`` itself answers the number of GPUs, as handles are
  pointers and mean nothing in a recording;
* takes enum arguments by member name (``"EDGE"``, ``"CURRENT"``, ``"VRAM"``), so that a
  recording says what it asked for (``ENUM_ARGS``);
* maps every ``AmdSmiLibraryException`` status onto the seam's read-failure reasons;
* calls only getters: a name must start with ``amdsmi_get_`` or ``amdsmi_topo_get_``
  (nothing that sets, resets or writes the GPU can be reached through the seam).

Privilege: none for the getters used here when the user may open /dev/kfd and /dev/dri
(the ``render`` and ``video`` groups); amdsmi_init answers "no permission" otherwise.
Manual equivalent: ``amd-smi static --json``, ``amd-smi metric --json``.
"""

from __future__ import annotations

import contextlib
import io
import threading
from typing import Any, ClassVar

from doctor.seam.ctypes_json import to_json
from doctor.seam.host import HostReadError

# amdsmi_status_t (amdsmi.h) -> the seam's reason; anything else is "failed".
_ERROR_REASONS = {
    2: "not-supported",     # AMDSMI_STATUS_NOT_SUPPORTED
    3: "not-supported",     # AMDSMI_STATUS_NOT_YET_IMPLEMENTED
    4: "library-missing",   # AMDSMI_STATUS_FAIL_LOAD_MODULE
    5: "not-found",         # AMDSMI_STATUS_FAIL_LOAD_SYMBOL: the library predates the call
    8: "timeout",           # AMDSMI_STATUS_TIMEOUT
    10: "no-permission",    # AMDSMI_STATUS_NO_PERM
    18: "library-missing",  # AMDSMI_STATUS_INIT_ERROR
    31: "not-found",        # AMDSMI_STATUS_NOT_FOUND: no such device
    32: "library-missing",  # AMDSMI_STATUS_NOT_INIT
    34: "library-missing",  # AMDSMI_STATUS_DRIVER_NOT_LOADED
    40: "not-supported",    # AMDSMI_STATUS_NO_DATA
    52: "not-found",        # AMDSMI_STATUS_FILE_NOT_FOUND: the sysfs file behind the call
}

NO_LIBRARY = ("no AMD driver / ROCm library: libamd_smi.so not found; install ROCm's "
              "amd-smi-lib (or set ROCM_PATH), or run where the AMD GPU is")
NO_PACKAGE = "the amdsmi package is not installed: `pip install amdsmi`"

# What to tell a person for an initialisation failure, by amdsmi status.
_INIT_ADVICE = {
    34: "AMD GPU driver not loaded: the amdgpu kernel module is not there; load it with "
        "`sudo modprobe amdgpu` or install ROCm's amdgpu-dkms",
    10: "amdsmi refused this user: give it access to /dev/kfd and /dev/dri (the `render` "
        "and `video` groups, or the container's --device flags)",
    4: NO_LIBRARY,
}

# Enum arguments by call: a recording passes the member's name, the seam the member.
ENUM_ARGS: dict[str, tuple[str, ...]] = {
    "amdsmi_get_temp_metric": ("AmdSmiTemperatureType", "AmdSmiTemperatureMetric"),
    "amdsmi_get_clock_info": ("AmdSmiClkType",),
    "amdsmi_get_gpu_memory_usage": ("AmdSmiMemoryType",),
    "amdsmi_get_gpu_memory_total": ("AmdSmiMemoryType",),
}

COUNT_CALL = "amdsmi_get_processor_handles"
_PAIR_CALLS = frozenset({"amdsmi_topo_get_link_type", "amdsmi_topo_get_p2p_status"})
_GETTERS = ("amdsmi_get_", "amdsmi_topo_get_")


class _State:
    lock = threading.Lock()
    initialised = False
    init_error: HostReadError | None = None
    handles: ClassVar[list[Any]] = []
    amdsmi: Any = None


def _import() -> Any:
    """The bindings, imported with their stdout/stderr chatter kept out of ours."""
    quiet = io.StringIO()
    try:
        with contextlib.redirect_stdout(quiet), contextlib.redirect_stderr(quiet):
            import amdsmi  # the only import of amdsmi in llm-doctor
    except ImportError as exc:
        if getattr(exc, "name", None) == "amdsmi":
            raise HostReadError("amdsmi", "library-missing", NO_PACKAGE) from None
        raise HostReadError("amdsmi", "library-missing", NO_LIBRARY) from None
    except (KeyError, OSError, AttributeError):
        # amdsmi_wrapper: CDLL failed, printed why, then _libraries['libamd_smi.so'] → KeyError
        raise HostReadError("amdsmi", "library-missing", NO_LIBRARY) from None
    return amdsmi


def _status(exc: BaseException) -> int:
    code = getattr(exc, "err_code", None)
    return code if isinstance(code, int) and not isinstance(code, bool) else -1


def _init() -> Any:
    """amdsmi, initialised once; a failed initialisation is remembered and re-raised."""
    with _State.lock:
        if _State.init_error is not None:
            err = _State.init_error  # a fresh exception each time (see nvml._init)
            raise HostReadError(err.path, err.reason, err.detail) from None
        if _State.initialised:
            return _State.amdsmi
        try:
            amdsmi = _import()
            amdsmi.amdsmi_init()
            handles = list(amdsmi.amdsmi_get_processor_handles())
        except HostReadError as exc:
            _State.init_error = HostReadError(exc.path, exc.reason, exc.detail)
            raise
        except Exception as exc:  # AmdSmiLibraryException, or ctypes' own errors
            code = _status(exc)
            reason = _ERROR_REASONS.get(code, "library-missing")
            advice = _INIT_ADVICE.get(code, f"amdsmi could not start: {type(exc).__name__}: "
                                            f"{str(exc).strip()[:200]}")
            _State.init_error = HostReadError("amdsmi amdsmi_init", reason, advice)
            raise HostReadError("amdsmi amdsmi_init", reason, advice) from None
        _State.amdsmi, _State.handles, _State.initialised = amdsmi, handles, True
        return amdsmi


def _handle(index: Any) -> Any:
    if not isinstance(index, int) or isinstance(index, bool) or index < 0:
        raise HostReadError(f"amdsmi device {index!r}", "failed", "a device index is an int >= 0")
    if index >= len(_State.handles):
        raise HostReadError(f"amdsmi device {index}", "not-found",
                            f"amdsmi lists {len(_State.handles)} GPUs")
    return _State.handles[index]


def _arguments(amdsmi: Any, name: str, args: tuple) -> list[Any]:
    devices = 2 if name in _PAIR_CALLS else 1
    out = [_handle(a) for a in args[:devices]]
    for position, arg in enumerate(args[devices:]):
        kinds = ENUM_ARGS.get(name, ())
        if position < len(kinds) and isinstance(arg, str):
            enum_type = getattr(amdsmi, kinds[position], None)
            member = getattr(enum_type, arg, None) if enum_type is not None else None
            if member is None:
                raise HostReadError(f"amdsmi {name}{args}", "failed",
                                    f"{arg!r} is not a member of {kinds[position]}")
            out.append(member)
        else:
            out.append(arg)
    return out


def query(name: str, *args: int | str) -> Any:
    """Run amdsmi getter ``name`` with device indexes for handles; JSON-able result.

    Raises ``HostReadError(f"amdsmi {name}{args}", reason, detail)``.
    """
    path = f"amdsmi {name}{tuple(args)}"
    if not name.startswith(_GETTERS):
        raise HostReadError(path, "failed", "only amdsmi getters are called through the seam")
    amdsmi = _init()
    if name == COUNT_CALL:
        return len(_State.handles)
    fn = getattr(amdsmi, name, None)
    if fn is None:
        raise HostReadError(path, "not-found", "this amdsmi package has no such call")
    try:
        value = fn(*_arguments(amdsmi, name, args))
    except HostReadError as exc:  # a bad device index or enum name: said under the call's path
        raise HostReadError(path, exc.reason, exc.detail) from None
    except Exception as exc:  # AmdSmiLibraryException, AmdSmiParameterException, ctypes errors
        code = _status(exc)
        raise HostReadError(path, _ERROR_REASONS.get(code, "failed"),
                            f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}") from None
    return to_json(value)


def _reset_for_tests(amdsmi: Any = None, handles: list | None = None) -> None:
    """Forget initialisation; ``amdsmi`` replaces the module (a test fake) with ``handles``."""
    with _State.lock:
        _State.initialised = amdsmi is not None
        _State.init_error = None
        _State.handles = list(handles or [])
        _State.amdsmi = amdsmi
