"""The GPUs an execution is given enter its weights key (one key per GPU model), and nothing
GPU-related enters it without GPUs. No GPU exists on the development machines, so NVML is
a stand-in here (pynvml's own exceptions); the `gpu`-marked test uses the real NVML."""

from __future__ import annotations

import hashlib

import pynvml
import pytest

from ringflow.core.errors import RingflowError
from ringflow.core.jsonio import sha256_json
from ringflow.core.state import Ring
from ringflow.weights.environment import gpu_component
from ringflow.weights.keys import key_for_gpus, weights_key


class ModelNvml:
    """NVML's system and device-name calls over a list of GPU models."""

    NVMLError = pynvml.NVMLError

    def __init__(self, models, driver="550.54.15", cuda=12040):
        self.models, self.driver, self.cuda = list(models), driver, cuda

    def nvmlInit(self):
        pass

    def nvmlSystemGetDriverVersion(self):
        return self.driver

    def nvmlSystemGetCudaDriverVersion(self):
        return self.cuda

    def nvmlDeviceGetCount(self):
        return len(self.models)

    def nvmlDeviceGetHandleByIndex(self, index):
        return index

    def nvmlDeviceGetUUID(self, handle):
        return f"GPU-{handle:04d}-uuid"

    def nvmlDeviceGetName(self, handle):
        return self.models[handle].encode()  # older pynvml returns bytes


ENV = {"python": "CPython 3.11.7", "packages": ["numpy==2.4.6"], "gpu": []}


def ring_with(environment: dict) -> Ring:
    return Ring.from_record({"ring_id": "g", "ring_dir": "/runs/g", "environment": environment})


BASE_KEY, BASE = weights_key(
    tree_hash=hashlib.sha256(b"t").hexdigest(),
    train_seed=0,
    view_hash=hashlib.sha256(b"v").hexdigest(),
    env_key=sha256_json(ENV),
    train_args=[],
)


def test_without_gpus_the_component_is_empty_and_the_key_unchanged():
    nvml = ModelNvml(["NVIDIA H100"])
    for visible in (None, "", "-1", "NoDevFiles"):
        env = {} if visible is None else {"CUDA_VISIBLE_DEVICES": visible}
        assert gpu_component(env, nvml=nvml) == []
    assert key_for_gpus(BASE_KEY, BASE, ENV, []) == (BASE_KEY, BASE, ENV)


def test_each_gpu_model_gives_a_key_of_its_own():
    nvml = ModelNvml(["NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-40GB"])
    h100 = gpu_component({"CUDA_VISIBLE_DEVICES": "0"}, nvml=nvml)
    a100 = gpu_component({"CUDA_VISIBLE_DEVICES": "GPU-0001"}, nvml=nvml)
    assert h100 == [{"model": "NVIDIA H100 80GB HBM3", "driver": "550.54.15", "cuda": "12.4"}]
    assert a100[0]["model"] == "NVIDIA A100-SXM4-40GB"
    key_h, components_h, env_h = key_for_gpus(BASE_KEY, BASE, ENV, h100)
    key_a, _, _ = key_for_gpus(BASE_KEY, BASE, ENV, a100)
    assert len({BASE_KEY, key_h, key_a}) == 3
    assert env_h["gpu"] == h100 and components_h["env_key"] == sha256_json(env_h)
    # The same model on another node of the partition: the same key, so it replays.
    again = gpu_component({"CUDA_VISIBLE_DEVICES": "0"}, nvml=ModelNvml(["NVIDIA H100 80GB HBM3"]))
    assert key_for_gpus(BASE_KEY, BASE, ENV, again)[0] == key_h
    # Another driver on the same model trains its own weights too.
    newer_driver = ModelNvml(["NVIDIA H100 80GB HBM3"], driver="560.28.03")
    newer = gpu_component({"CUDA_VISIBLE_DEVICES": "0"}, nvml=newer_driver)
    assert key_for_gpus(BASE_KEY, BASE, ENV, newer)[0] != key_h


def test_gpus_nvml_cannot_describe_refuse_with_the_reason():
    class Broken(ModelNvml):
        def nvmlInit(self):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_DRIVER_NOT_LOADED)

    with pytest.raises(RingflowError, match="NVML cannot describe them"):
        gpu_component({"CUDA_VISIBLE_DEVICES": "0"}, nvml=Broken(["x"]))
    with pytest.raises(RingflowError, match="names '3'"):
        gpu_component({"CUDA_VISIBLE_DEVICES": "3"}, nvml=ModelNvml(["x"]))


@pytest.mark.gpu
def test_the_real_gpu_enters_the_key():
    try:
        pynvml.nvmlInit()
        count = pynvml.nvmlDeviceGetCount()
    except pynvml.NVMLError:
        count = 0
    if not count:
        pytest.skip("no GPU visible (nvmlInit failed or no device)")
    gpus = gpu_component({"CUDA_VISIBLE_DEVICES": "0"})
    assert len(gpus) == 1 and gpus[0]["model"] and gpus[0]["driver"]
    assert gpus[0]["cuda"].count(".") == 1
    assert key_for_gpus(BASE_KEY, BASE, ENV, gpus)[0] != BASE_KEY


def test_an_execution_spec_without_gpus_keeps_its_key():
    from ringflow.weights.keys import spec_given_gpus

    spec = {"key": BASE_KEY, "key_components": BASE}
    ring = ring_with(ENV)
    assert spec_given_gpus(ring, spec, env={}) is spec
    assert spec_given_gpus(ring, {"key": None}, env={"CUDA_VISIBLE_DEVICES": "0"}) == {"key": None}


def test_an_execution_given_a_gpu_gets_the_key_of_its_model(monkeypatch):
    from ringflow.weights.keys import spec_given_gpus

    # The process's NVML session (what open_nvml() hands out), over one H100.
    monkeypatch.setattr("ringflow.supervisor.gpu._default", (ModelNvml(["NVIDIA H100"]), ""))
    spec = {"key": BASE_KEY, "key_components": BASE, "seed": 0}
    given = spec_given_gpus(ring_with(ENV), spec, env={"CUDA_VISIBLE_DEVICES": "0"})
    assert given["base_key"] == BASE_KEY and given["key"] != BASE_KEY
    assert given["environment"]["gpu"][0]["model"] == "NVIDIA H100"
    assert given["key"] == key_for_gpus(BASE_KEY, BASE, ENV, given["environment"]["gpu"])[0]
