"""Which library computes a float32 product on a CPU: oneDNN (the kernels Inductor uses on CPUs) or MKL
(what ``torch.mm`` calls on x86). Which is the faster depends on the CPU and on the product, by up to a
factor of two either way, between CPUs of one maker too (``benchmarks/bench_matmul.py`` times both on
the products of the experiments; the Performance page shows them per machine). So each class of
product is timed both ways the first time it is computed on a machine, as
``torch.backends.cudnn.benchmark`` times a convolution's algorithms, and the faster computes it from
then on. The two are timed in turn, ``ROUNDS`` rounds, so that a load the machine carries meanwhile
(another run) weighs on both alike. oneDNN is the faster where it was in at least ``WINS`` of the
rounds, a sign test: two libraries at par pass it about one time in sixteen, and a product a few
percent faster passes it whenever the rounds' spread is smaller than that. Otherwise MKL, torch's
own, is kept.

The choice is kept in the cache folder (``paths.cache_dir``), one file per CPU model (``cpu_model``:
its generation too), torch version, thread count, class of product and rule of choice (``RULE``), with
the ratio it measured; every later process on the machine reads it, so that the library, and so the
rounding, is the same in each, as a run resumed in another process expects. Delete the folder's
``cpu_products`` to time again.

``RECDROP_CPU_PRODUCTS`` (``route.cpu_products_choice``) chooses otherwise: "onednn" or "mkl" for every
product ("measure" is the default). The libraries chosen are named in each record's ``path``
(``chosen``).
"""
from __future__ import annotations

import functools
import hashlib
import math
import os
import statistics
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Tuple

import torch

from .paths import cache_dir
from .route import cpu_products_choice

LIBRARIES = ("onednn", "mkl")
ROUNDS = 7  # timings of each library, in turn
WINS = 6  # rounds oneDNN must win to be chosen: at par, 8 chances in 128
TIMED_S = 2e-3  # each timing repeats a product for about this long: a per-step product takes microseconds
RULE = f"faster in {WINS} of {ROUNDS} paired timings"  # a choice kept under another rule is timed again

Product = Callable[[], Any]
_chosen: Dict[Tuple, str] = {}  # (how chosen, kind, shape class, threads) -> library, in this process


VECTOR_FLAGS = ("avx", "avx2", "fma", "avx512f", "avx512_bf16", "avx512_vnni", "amx_tile")  # they set the kernels


@functools.lru_cache(maxsize=None)
def cpu_fields(cpuinfo: Path = Path("/proc/cpuinfo")) -> Dict[str, str]:
    """The first processor's fields as the system gives them (``/proc/cpuinfo``); empty where it does not."""
    try:
        info = cpuinfo.read_text().split("\n\n", 1)[0]
    except OSError:
        return {}
    return {k.strip(): v.strip() for k, _, v in (line.partition(":") for line in info.splitlines())}


def cpu_name(fields: Dict[str, str], fallback: str = "") -> str:
    """The CPU's model name in ``fields`` (``cpu_fields``; else ``fallback``), with its family and model
    number where the system gives them: a name such as "AMD EPYC" covers generations several times apart
    in speed."""
    name = fields.get("model name") or fallback
    if "cpu family" in fields:
        name += f" family {fields['cpu family']} model {fields.get('model', '?')}"
    return name


def cpu_model(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """The CPU's name (``cpu_name``) and vector extensions, whose products differ ("" where the system
    says nothing)."""
    fields = cpu_fields(cpuinfo)
    if not fields:
        return ""
    flags = [f for f in VECTOR_FLAGS if f in fields.get("flags", "").split()]
    return " ".join(part for part in (cpu_name(fields), "+".join(flags)) if part)


def shape_class(*sizes: int) -> Tuple[int, ...]:
    """The class of a product's sizes: each rounded up to a power of two, so that an epoch's last, smaller
    batch is not timed again."""
    return tuple(1 << max(0, math.ceil(math.log2(max(1, s)))) for s in sizes)


def library(kind: str, sizes: Tuple[int, ...], ways: Callable[[], Tuple[Product, Product]]) -> str:
    """The library that computes the product ``kind`` (its name, and whatever else sets its speed) of
    ``sizes``: as ``RECDROP_CPU_PRODUCTS`` says, by default the faster of the two ``ways()`` gives, (MKL's,
    oneDNN's): the product each way, without side effects, timed once per machine (``kept``), kind,
    shape class and thread count; ``ways`` is called only then."""
    how = cpu_products_choice()
    key = (how, kind, shape_class(*sizes), torch.get_num_threads())
    if key not in _chosen:
        _chosen[key] = kept(key[1:], ways) if how == "measure" else how
    return _chosen[key]


def kept(key: Tuple, ways: Callable[[], Tuple[Product, Product]]) -> str:
    """The choice this machine made for ``key`` (kind, shape class, threads), read from the cache folder;
    where none is kept, timed now and kept. Of two processes that time one at once, the first to keep
    its choice wins and the other takes it."""
    name = f"{cpu_model()} | torch {torch.__version__} | {key} | {RULE}"
    path = cache_dir() / "cpu_products" / (hashlib.sha256(name.encode()).hexdigest()[:16] + ".txt")
    if not path.exists():
        with torch.no_grad():
            ratios = onednn_over_mkl(*ways())
        wins = sum(ratio < 1 for ratio in ratios)
        faster = "onednn" if wins >= WINS else "mkl"
        path.parent.mkdir(parents=True, exist_ok=True)
        draft = path.with_suffix(f".{os.getpid()}.draft")
        draft.write_text(f"{faster}\n{name}\noneDNN's time over MKL's: {statistics.median(ratios):.3f} (median), "
                         f"below 1 in {wins} of {ROUNDS} rounds\n")
        try:
            os.link(draft, path)  # whole, and only where no other process has kept one
        except FileExistsError:
            pass
        finally:
            draft.unlink()
    chosen_there = path.read_text().split("\n", 1)[0]
    if chosen_there not in LIBRARIES:
        raise ValueError(f"{path} does not name a library ({', '.join(LIBRARIES)}): delete it to time again")
    return chosen_there


def onednn_over_mkl(mkl: Product, onednn: Product) -> List[float]:
    """oneDNN's time over MKL's for one product, in each of ``ROUNDS`` rounds that time the two in turn."""
    ratios = []
    for _ in range(ROUNDS):
        mkl_s = seconds(mkl)
        ratios.append(seconds(onednn) / mkl_s)
    return ratios


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
    """Forget this process's choices: a group's training starts afresh, so that its records name its own
    (the machine's measured choices stay kept)."""
    _chosen.clear()
