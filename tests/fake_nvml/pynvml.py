"""A stand-in for nvidia-ml-py's `pynvml` on machines without a GPU (tests only).

Put this folder first on PYTHONPATH and `import pynvml` finds it, in the test process and
in every job a test ring starts. It shows RINGFLOW_FAKE_GPUS GPUs (default 2), named
"Fake GPU", with minor numbers 0..n-1 and UUIDs GPU-fake-<i>; no process ever runs on
them. Errors and constants are the real module's, so code under test handles them alike.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys
from types import SimpleNamespace


def _real_pynvml():
    here = os.path.dirname(os.path.abspath(__file__))
    path = [p for p in sys.path if os.path.abspath(p or ".") != here]
    found = importlib.machinery.PathFinder.find_spec("pynvml", path)
    spec = importlib.util.spec_from_file_location("_real_pynvml", found.origin)
    module = importlib.util.module_from_spec(spec)
    sys.modules["_real_pynvml"] = module  # it looks itself up by name while loading
    spec.loader.exec_module(module)
    return module


_real = _real_pynvml()
NVMLError = _real.NVMLError
NVML_SUCCESS = _real.NVML_SUCCESS
NVML_ERROR_NOT_FOUND = _real.NVML_ERROR_NOT_FOUND
NVML_ERROR_FUNCTION_NOT_FOUND = _real.NVML_ERROR_FUNCTION_NOT_FOUND
NVML_ERROR_NOT_SUPPORTED = _real.NVML_ERROR_NOT_SUPPORTED


def _count() -> int:
    return int(os.environ.get("RINGFLOW_FAKE_GPUS", "2"))


def nvmlInit():
    return None


def nvmlShutdown():
    return None


def nvmlDeviceGetCount():
    return _count()


def nvmlDeviceGetHandleByIndex(index):
    if not 0 <= index < _count():
        raise NVMLError(_real.NVML_ERROR_INVALID_ARGUMENT)
    return index


def nvmlDeviceGetUUID(handle):
    return f"GPU-fake-{handle}"


def nvmlDeviceGetMinorNumber(handle):
    return handle


def nvmlDeviceGetName(handle):
    return "Fake GPU"


def nvmlSystemGetDriverVersion():
    return "999.99"


def nvmlSystemGetCudaDriverVersion():
    return 12040


def nvmlDeviceGetComputeRunningProcesses_v3(handle):
    return []


nvmlDeviceGetComputeRunningProcesses_v2 = nvmlDeviceGetComputeRunningProcesses_v3
nvmlDeviceGetComputeRunningProcesses = nvmlDeviceGetComputeRunningProcesses_v3


def nvmlDeviceGetProcessUtilization(handle, last_seen):
    raise NVMLError(NVML_ERROR_NOT_FOUND)


def nvmlDeviceGetUtilizationRates(handle):
    return SimpleNamespace(gpu=0, memory=0)


def nvmlDeviceGetMemoryInfo(handle):
    return SimpleNamespace(used=0, total=80 * 2**30, free=80 * 2**30)
