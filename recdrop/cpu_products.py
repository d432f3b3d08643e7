"""Which library computes a float32 product on a CPU: oneDNN (the kernels Inductor uses on CPUs) or MKL
(what ``torch.mm`` calls on x86). Which is the faster depends on the CPU: oneDNN's reach about twice
MKL's rate on AMD's, and MKL's are the faster on Intel's, on every product of the experiments
(``benchmarks/bench_matmul.py`` times both; the Performance page shows them per machine). So by
default the CPU's maker chooses (``by_cpu``): the same library in every process on one machine, and
so the same rounding, which a resumed run's records rely on.

``RECDROP_CPU_PRODUCTS`` (``route.cpu_products_choice``) chooses otherwise: "onednn" or "mkl" for every
product, or "measure": each class of product is timed both ways the first time it is computed in a
process, as ``torch.backends.cudnn.benchmark`` times a convolution's algorithms, and the faster
computes it from then on (oneDNN only where it is faster by ``MARGIN``). A measured choice can differ
between processes where the two are close, and so can the last bits of a result. The libraries chosen
are named in each record's ``path`` (``chosen``).
"""
from __future__ import annotations

import functools
import math
import time
from pathlib import Path
from typing import Any, Callable, Dict, Tuple

import torch

from .route import cpu_products_choice

LIBRARIES = ("onednn", "mkl")
MARGIN = 1.15  # measured: oneDNN's time must be below MKL's by this factor to be chosen
TIMED_S = 2e-3  # each timing repeats a product for about this long: a per-step product takes microseconds

Product = Callable[[], Any]
_chosen: Dict[Tuple, str] = {}  # (how chosen, kind, shape class, threads) -> library, in this process


@functools.lru_cache(maxsize=None)
def cpu_maker() -> str:
    """The CPU's vendor string ("AuthenticAMD", "GenuineIntel", ...), "" where the system does not say."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("vendor_id"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return ""


def by_cpu() -> str:
    """oneDNN on an AMD CPU, where MKL's float32 kernels run at about half its rate; elsewhere torch's own
    ``mm`` (MKL on an Intel CPU, where it is the faster)."""
    return "onednn" if cpu_maker() == "AuthenticAMD" else "mkl"


def shape_class(*sizes: int) -> Tuple[int, ...]:
    """The class of a product's sizes: each rounded up to a power of two, so that an epoch's last, smaller
    batch is not timed again."""
    return tuple(1 << max(0, math.ceil(math.log2(max(1, s)))) for s in sizes)


def library(kind: str, sizes: Tuple[int, ...], ways: Callable[[], Tuple[Product, Product]]) -> str:
    """The library that computes the product ``kind`` (its name, and whatever else sets its speed) of
    ``sizes``: as ``RECDROP_CPU_PRODUCTS`` says (by default ``by_cpu``); where it says "measure", the faster
    of the two ``ways()`` gives, (MKL's, oneDNN's): the product each way, without side effects, timed once
    per process, kind, shape class and thread count (``ways`` is called only then)."""
    how = cpu_products_choice()
    key = (how, kind, shape_class(*sizes), torch.get_num_threads())
    if key not in _chosen:
        if how == "measure":
            mkl, onednn = ways()
            with torch.no_grad():
                _chosen[key] = "onednn" if seconds(onednn) * MARGIN < seconds(mkl) else "mkl"
        else:
            _chosen[key] = by_cpu() if how == "by-cpu" else how
    return _chosen[key]


def seconds(product: Product) -> float:
    """The time of one call of ``product``: after a warm-up, the best of three timings of as many calls as
    take about ``TIMED_S``."""
    start = time.perf_counter()
    product()
    calls = max(1, min(1000, int(TIMED_S / max(time.perf_counter() - start, 1e-7))))
    best = math.inf
    for _ in range(3):
        start = time.perf_counter()
        for _ in range(calls):
            product()
        best = min(best, (time.perf_counter() - start) / calls)
    return best


def chosen() -> str:
    """The libraries chosen so far in this process, for a record's ``path``: "onednn", "mkl", or both as
    "onednn+mkl"; "" where no CPU product has been chosen."""
    return "+".join(lib for lib in LIBRARIES if lib in _chosen.values())


def forget() -> None:
    """Forget every choice made: a group's training starts afresh, so that its records name its own."""
    _chosen.clear()
