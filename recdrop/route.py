"""Which path a recurrent layer's call runs, whether a group of runs computes as one stacked model, and
the environment switches that steer them.

A layer's call runs one of three bodies, chosen by ``layers.RecurrentLayer.route`` (the one function
that chooses, at each call):

- ``torch.nn``: torch.nn's own forward (cuDNN, oneDNN), where no recurrent dropout acts;
- ``loop``: the reference loop over ``recdrop.cells``' steps, recorded by autograd step by step (under
  tracing, torch.compile's tracing, export, functorch transforms and forward-mode AD; with
  ``proj_size``; with ``module.fused = False``);
- ``fused``: ``recdrop.fused``'s sequence Functions (under autocast too, with their products in its
  dtype), on a GPU with each step's pointwise part in one Triton kernel (``triton``) and each loop
  captured as a CUDA graph (``graphs``) where they can run, on a CPU with the LSTM's loop or a GRU
  step's pointwise part in C++ (``cpp``, ``recdrop.cpu_kernels``) where it is built.

Above the layer, a group of runs computes as one stacked model where ``stacks`` says so (``layers.run_group``,
``recdrop.stacked``), and its whole training step may be one CUDA graph
(``recdrop.step_graph``; a record's ``step``). Each record names the route of its
training and the switches set when it ran (``switches``).
"""
from __future__ import annotations

import dataclasses
import os
from typing import Dict

import torch

# The switches, each on unless set to "0": every CUDA graph (the loops' and a whole step's), the whole
# step's graph alone, the Triton kernels and the C++ kernels of the CPU.
SWITCHES = ("RECDROP_CUDA_GRAPHS", "RECDROP_STEP_GRAPH", "RECDROP_TRITON", "RECDROP_CPU_KERNELS")


def switched_on(name: str) -> bool:
    """Whether switch ``name`` (one of ``SWITCHES``) is on: unset, or set to anything but "0"."""
    if name not in SWITCHES:
        raise ValueError(f"{name!r} is not one of recdrop's switches: {', '.join(SWITCHES)}")
    return os.environ.get(name, "1") != "0"


# The library of a CPU's float32 products (``recdrop.cpu_products``): the faster, measured once per machine
# and class of product ("measure", unset), or one for every product.
CPU_PRODUCTS = "RECDROP_CPU_PRODUCTS"
CPU_PRODUCTS_CHOICES = ("measure", "onednn", "mkl")


def cpu_products_choice() -> str:
    """``RECDROP_CPU_PRODUCTS``: "measure" where unset; a ValueError for a value not in ``CPU_PRODUCTS_CHOICES``."""
    value = os.environ.get(CPU_PRODUCTS, "measure")
    if value not in CPU_PRODUCTS_CHOICES:
        raise ValueError(f"{CPU_PRODUCTS}={value!r} is not valid; allowed values: "
                         f"{', '.join(map(repr, CPU_PRODUCTS_CHOICES))}")
    return value


# "1": a group's runs compute as one stacked model on a CPU too, as on a GPU (to check or time that path
# on a machine without one).
STACK_ON_CPU = "RECDROP_STACK_ON_CPU"


def switches() -> Dict[str, str]:
    """The switches set in the environment now, with their values (what a record keeps)."""
    return {name: os.environ[name] for name in (*SWITCHES, CPU_PRODUCTS, STACK_ON_CPU) if name in os.environ}


def stacks(device) -> bool:
    """Whether a group of runs computes as one model on ``device``, its weights stacked on a run dimension:
    off the CPU, where one run's step is bound by its kernel launches. On a CPU the products are
    compute-bound and each run's weights stay in cache over its own steps, so each run computes on its
    own unless ``RECDROP_STACK_ON_CPU`` is "1" (``benchmarks/bench_groups.py`` times both ways)."""
    return torch.device(device).type != "cpu" or os.environ.get(STACK_ON_CPU) == "1"


def ops_recorded() -> bool:
    """Whether torch.compile, torch.export or torch.jit.trace is recording ops now: there a call runs on
    plain ops, and reading a tensor's values would break the graph or is not defined."""
    return torch.compiler.is_compiling() or torch.jit.is_tracing()


@dataclasses.dataclass(frozen=True)
class Route:
    """The path of one call: its ``body`` ("torch.nn", "loop" or "fused"), on the fused path whether its
    pointwise parts run in Triton or C++ (``cpp``) and whether its loops are to run as CUDA graphs
    (``graphs.loop_graphed``; ``graphs.run_loop`` runs a loop's first calls plainly before it captures it,
    and plainly for good where a capture fails), and how many runs' weights it stacks."""

    body: str
    triton: bool = False
    graphs: bool = False
    runs: int = 1  # a group's runs stacked on a leading dimension (``recdrop.stacked``, ``layers.run_group``)
    cpp: bool = False

    @property
    def step_kernels(self):
        """The name of the kernels of a step's pointwise part ("triton", "cpp"; ``fused.STEP_KERNELS``), or None."""
        return "triton" if self.triton else "cpp" if self.cpp else None

    def __str__(self) -> str:
        path = "+".join([self.body] + ["triton"] * self.triton + ["cpp"] * self.cpp + ["graphs"] * self.graphs)
        return path + (f", {self.runs} runs stacked" if self.runs > 1 else "")
