"""A real PyTorch training on a real GPU, inside the sandbox (docs/operations.md#gpus-and-slurm).

Runs where NVML sees a GPU and the candidates' environment (program.python) has torch;
elsewhere it is skipped, saying which of the two is missing.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from ringflow.sandbox.gpus import machine_gpus
from ringflow.weights.keys import REPO as REPO_ROOT
from ringtools import locked_ring

pytestmark = pytest.mark.gpu

TRAINER = """\
import json, os, torch
assert torch.cuda.is_available(), "no CUDA inside the sandbox"
torch.manual_seed(0)
x = torch.randn(512, 16, device="cuda")
y = (x.sum(dim=1, keepdim=True) > 0).float()
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1)).cuda()
opt = torch.optim.Adam(model.parameters(), lr=0.01)
for _ in range(200):
    opt.zero_grad()
    loss = torch.nn.functional.binary_cross_entropy_with_logits(model(x), y)
    loss.backward()
    opt.step()
out = os.environ["RINGFLOW_OUTPUT_DIR"]
json.dump({"value": 1.0 - float(loss)}, open(os.path.join(out, "score.json"), "w"))
json.dump({"visible": os.environ["CUDA_VISIBLE_DEVICES"],
           "device": torch.cuda.get_device_name(0)}, open(os.path.join(out, "gpu.json"), "w"))
"""


def _program_python():
    return REPO_ROOT / ".venv-program" / "bin" / "python"


def test_a_pytorch_candidate_trains_on_its_own_gpu(tmp_path):
    gpus = machine_gpus()
    if not gpus:
        pytest.skip("no GPU visible to NVML here")
    has_torch = subprocess.run([str(_program_python()), "-c", "import torch"], check=False)
    if has_torch.returncode != 0:
        pytest.skip("torch is not installed in .venv-program")
    cands = tmp_path / "cands"
    (cands / "torch").mkdir(parents=True)
    (cands / "torch" / "run.py").write_text(TRAINER)
    ring = locked_ring(tmp_path, cands, "cuda")
    done = subprocess.run(
        [sys.executable, "-m", "ringflow", "step", "execute", str(ring), "n001-torch", "proxy",
         "s0", "--gpus", "1"],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    folder = ring / "nodes" / "n001-torch" / "exec" / "proxy" / "s0"
    result = json.loads((folder / "result.json").read_text())
    assert result["status"] == "ok", (folder / "stderr.log").read_text()[-3000:]
    seen = json.loads((folder / "output" / "gpu.json").read_text())
    assert seen["visible"] == result["gpus"][0]["uuid"]
    assert seen["visible"] in {gpu.uuid for gpu in gpus}
