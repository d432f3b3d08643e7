"""The Triton kernels of recdrop.triton_kernels, run on CPU by Triton's interpreter."""
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from recdrop import triton_kernels

HERE = Path(__file__).parent


def test_triton_kernels_equal_the_torch_path_in_the_interpreter():
    pytest.importorskip("triton")
    env = {**os.environ, "TRITON_INTERPRET": "1", "RECDROP_CPU_KERNELS": "0"}  # without Triton: the torch path
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(HERE / "triton_cases.py")],
                       env=env, capture_output=True, text=True, cwd=HERE.parent)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    assert " passed" in r.stdout and "skipped" not in r.stdout


def test_triton_is_not_used_where_it_cannot_run(monkeypatch):
    pytest.importorskip("triton")
    x = torch.zeros(2, 3)
    assert not triton_kernels.usable(x)  # a CPU tensor outside the interpreter
    monkeypatch.setattr(triton_kernels, "_interpreting", lambda: True)  # as under TRITON_INTERPRET=1
    assert triton_kernels.usable(x)  # where it can run: so that each refusal below is the switch's or the dtype's
    assert not triton_kernels.usable(x.half())
    monkeypatch.setenv("RECDROP_TRITON", "0")
    assert not triton_kernels.usable(x)
