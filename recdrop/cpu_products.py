"""Which library computes a float32 product on a CPU: oneDNN (the kernels Inductor uses on CPUs) or MKL
(what ``torch.mm`` calls). Which is the faster depends on the CPU, by a factor of two either way
(``benchmarks/bench_matmul.py`` times both on the products of the experiments). So each class of
product is timed both ways the first time it is computed in a process, as
``torch.backends.cudnn.benchmark`` times a convolution's algorithms, and the faster library computes
it from then on. oneDNN is chosen only where it is faster by ``MARGIN``: near parity the choice is
MKL's, whatever the timing noise, so that the route is the same in every process on one machine.

``RECDROP_CPU_PRODUCTS`` (``route.cpu_products_choice``) sets the choice instead: "onednn" or "mkl" for
every product, or "measure" (the default). The libraries chosen are named in each record's ``path``
(``chosen``).
"""
from __future__ import annotations

import math
import time
from typing import Any, Callable, Dict, Tuple

import torch

from .route import cpu_products_choice

LIBRARIES = ("onednn", "mkl")
MARGIN = 1.15  # oneDNN's time must be below MKL's by this factor to be chosen
TIMED_S = 2e-3  # each timing repeats a product for about this long: a per-step product takes microseconds

_chosen: Dict[Tuple, str] = {}  # (kind, shape class, threads) -> library, once measured in this process


def shape_class(*sizes: int) -> Tuple[int, ...]:
    """The class of a product's sizes: each rounded up to a power of two, so that an epoch's last, smaller
    batch is not timed again."""
    return tuple(1 << max(0, math.ceil(math.log2(max(1, s)))) for s in sizes)


Product = Callable[[], Any]


def library(kind: str, sizes: Tuple[int, ...], ways: Callable[[], Tuple[Product, Product]]) -> str:
    """The library that computes the product ``kind`` (its name, and whatever else sets its speed) of
    ``sizes``: the switch's, or the faster of the two ``ways()`` gives, (MKL's, oneDNN's): the product
    each way, without side effects. They are timed once per process, kind, shape class and thread count;
    ``ways`` is called only then."""
    forced = cpu_products_choice()
    if forced != "measure":
        return forced
    key = (kind, shape_class(*sizes), torch.get_num_threads())
    if key not in _chosen:
        mkl, onednn = ways()
        with torch.no_grad():
            faster = seconds(onednn) * MARGIN < seconds(mkl)
        _chosen[key] = "onednn" if faster else "mkl"
    return _chosen[key]


def seconds(product: Callable[[], Any]) -> float:
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
    """The libraries chosen so far in this process, for a record's ``path``: "onednn", "mkl", both as
    "onednn+mkl", or the switch's; "" where no CPU product has been chosen."""
    forced = cpu_products_choice()
    if forced != "measure":
        return forced
    return "+".join(lib for lib in LIBRARIES if lib in _chosen.values())


def forget() -> None:
    """Forget every choice measured (tests; a process whose thread count changes keys them apart anyway)."""
    _chosen.clear()
