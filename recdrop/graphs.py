"""CUDA graphs of the fast path's time loops.

On a GPU a small layer's step is launch-bound: a step of ``recdrop.fused`` is about 8 kernels forward
and 5 backward, each a few microseconds of host work, so a sequence of 35 steps spends most of its time
launching. Here a loop (a forward or a backward of ``recdrop.fused``, a pure function of its tensors)
is captured as a CUDA graph and replayed: the tensors it reads, the masks and the states among
them, are copied into static buffers, the graph is replayed, and its outputs are copied out, so that
no result aliases the graph's memory and a graph can serve the next call at once (another layer,
another direction, another run of a group) with no bookkeeping of what is still in use.

Graphs are cached per loop, flags, shapes, dtypes and device (``LoopGraphs``), a signature captured at
its second call (a shape met once, as a tagger meets many, runs plainly). A compute-bound loop runs
plainly (``MAX_STEP_WORK``). A loop runs plainly,
silently, wherever capture cannot work (``graphs_usable``): off CUDA, while a capture is in progress
(the caller's own graph then records the plain loop), under torch.compile or tracing, and where a
capture failed once. Higher-order gradients and functorch never reach a loop: ``recdrop.fused`` replays
those through the reference steps. ``RECDROP_CUDA_GRAPHS=0`` turns graphs off. A fused grid runs its
groups' sequences through the same loops, so it is graphed by the same mechanism.
"""
from __future__ import annotations

import contextlib
import functools
import threading
from collections import OrderedDict
from typing import Callable, Dict, Optional, Sequence, Tuple

import torch
from torch import Tensor

from . import route

# At most this many graphs are kept (least recently used go first): each holds its own memory, about the
# size of its loop's buffers. A tagger meets one shape per distinct sentence length.
CACHE_SIZE = 128
CAPTURE_AT = 2  # a signature is captured at its second call: a shape met once runs plainly
# Multiply-adds of a step's recurrent product (all runs of a group) above which a loop runs plainly. A graph
# saves the host's launches (about 8 kernels a step, some 5 us each) but copies every tensor the loop reads
# and writes, once a call; where one step's product alone outlasts its launches (about 2**30 multiply-adds
# at a data-center GPU's float32 rate, from its data sheet) the loop is compute-bound, and the copies would
# cost more than the launches save: Table 3's char LMs at `paper` (2**28 a run) are graphed in groups of
# at most 4, Table 2's 26 word LMs together (about 2.2e8) are graphed. A whole training step captured
# as one graph (``recdrop.step_graph``) holds its loops, whatever their size.
MAX_STEP_WORK = 2**30


def graphs_usable(tensors: Sequence) -> bool:
    """Whether a loop over ``tensors`` runs as a CUDA graph: graphs not switched off
    (``RECDROP_CUDA_GRAPHS=0``) nor ``suspended``, every tensor on one CUDA device, no stream capture in
    progress, and neither torch.compile nor tracing at work."""
    if switched_off() or _SUSPENDED[0] or not _on_one_cuda_device(tensors):
        return False
    return not (torch.cuda.is_current_stream_capturing() or route.ops_recorded())


def switched_off() -> bool:
    """Whether ``RECDROP_CUDA_GRAPHS=0`` turns every CUDA graph off (the loops' and a whole step's)."""
    return not route.switched_on("RECDROP_CUDA_GRAPHS")


_SUSPENDED = [0]  # how many ``suspended`` blocks are open, in any thread (a backward runs on the engine's own)


@contextlib.contextmanager
def suspended():
    """Every loop runs plainly inside this block, in every thread: a caller that captures a whole
    training step as one graph (``recdrop.step_graph``) warms it up on the same plain loops it captures,
    and the loops' own graphs would only hold memory. Where the two nest, the caller's graph wins."""
    with _LOCK:
        _SUSPENDED[0] += 1
    try:
        yield
    finally:
        with _LOCK:
            _SUSPENDED[0] -= 1


_LOCK = threading.Lock()


def _on_one_cuda_device(tensors: Sequence) -> bool:
    """Whether ``tensors`` hold at least one tensor and all of them lie on one CUDA device."""
    devices = {t.device for t in tensors if isinstance(t, Tensor)}
    return len(devices) == 1 and next(iter(devices)).type == "cuda"


def _signature(t) -> object:
    """What a graph is specialised to: a tensor's shape, dtype and device; anything else's value."""
    return ("tensor", tuple(t.shape), t.dtype, t.device) if isinstance(t, Tensor) else ("value", t)


def _static_copy(t):
    """A tensor's own contiguous copy in fresh memory (a static buffer); anything else as it is."""
    return torch.empty(t.shape, dtype=t.dtype, device=t.device).copy_(t) if isinstance(t, Tensor) else t


# One side stream per device, for every warm-up and capture (cuBLAS keeps a workspace per stream).
_SIDE_STREAMS: dict = {}


def capture_cuda(loop: Callable, static_inputs: tuple):
    """``(graph, static outputs)``: ``loop(*static_inputs)`` captured as a CUDA graph, after one run
    (PyTorch's recipe: lazy initialisation, cuBLAS's workspace and Triton's compilation happen outside
    the capture). Both run on a side stream of the device, and the capture is ended whatever happens
    in it (``torch.cuda.graph`` leaves its stream current where ending the capture fails), in
    ``thread_local`` mode: a backward captures on the autograd engine's thread while others may run."""
    device = next(t.device for t in static_inputs if isinstance(t, Tensor))
    with torch.cuda.device(device):
        side = _SIDE_STREAMS.get(device)
        if side is None:
            side = _SIDE_STREAMS[device] = torch.cuda.Stream()
        caller = torch.cuda.current_stream()
        side.wait_stream(caller)  # the static buffers were filled on the caller's stream
        try:
            with torch.cuda.stream(side):
                loop(*static_inputs)
                graph = torch.cuda.CUDAGraph()
                graph.capture_begin(capture_error_mode="thread_local")
                try:
                    static_outputs = loop(*static_inputs)
                finally:
                    graph.capture_end()
        finally:
            caller.wait_stream(side)  # nothing the caller does next overtakes the side stream
    return graph, static_outputs


def _release(entry: tuple) -> None:
    """Before a graph's memory goes back to the allocator: its device has finished every replay."""
    for t in entry[2]:
        if isinstance(t, Tensor) and t.device.type == "cuda":
            torch.cuda.synchronize(t.device)
            return


class LoopGraphs:
    """A cache of captured loops: ``run(loop, tensors, flags)`` equals ``loop(*tensors, *flags)``, through
    a graph captured by ``capture`` (``capture_cuda``; tests give another) at the ``capture_at``-th call
    of each signature (a shape met once, as a tagger meets many, is not worth a capture) and replayed
    from then on; inference mode is part of the signature (its static buffers would be inference
    tensors). A signature whose capture failed runs plainly from then on. Thread-safe: the autograd
    engine runs each GPU's backward on its own thread."""

    def __init__(self, capture: Callable = capture_cuda, size: int = CACHE_SIZE, capture_at: int = CAPTURE_AT):
        self.capture, self.size, self.capture_at = capture, size, capture_at
        self.graphs: "OrderedDict[tuple, Tuple[object, tuple, tuple]]" = OrderedDict()
        self.calls: Dict[tuple, int] = {}  # the signatures not captured yet: how often each was met
        self.failed: set = set()
        self.lock = threading.RLock()

    def run(self, loop: Callable, tensors: tuple, flags: tuple = ()) -> tuple:
        key = (loop, flags, torch.is_inference_mode_enabled(), *map(_signature, tensors))
        with self.lock:
            entry = self._graph(key, loop, tensors, flags)
            if entry is not None:
                graph, static_inputs, static_outputs = entry
                for static, t in zip(static_inputs, tensors):
                    if isinstance(t, Tensor):
                        static.copy_(t)
                graph.replay()
                return tuple(None if o is None else o.clone() for o in static_outputs)
        return loop(*tensors, *flags)

    def _graph(self, key: tuple, loop: Callable, tensors: tuple, flags: tuple):
        """The cached ``(graph, static inputs, static outputs)`` of ``key``, captured now at its
        ``capture_at``-th call; None where it runs plainly (met fewer times, or its capture failed)."""
        entry = self.graphs.get(key)
        if entry is not None:
            self.graphs.move_to_end(key)
            return entry
        if key in self.failed:
            return None
        met = self.calls[key] = self.calls.get(key, 0) + 1
        if met < self.capture_at:
            if len(self.calls) > 16 * self.size:  # many shapes met once: forget them, not the graphs
                self.calls = {key: met}
            return None
        del self.calls[key]
        static_inputs = tuple(map(_static_copy, tensors))
        try:
            graph, static_outputs = self.capture(functools.partial(_with_flags, loop, flags), static_inputs)
        except Exception:  # capture cannot work here: run plainly, and do not try this signature again
            self.failed.add(key)
            return None
        entry = self.graphs[key] = (graph, static_inputs, static_outputs)
        while len(self.graphs) > self.size:
            _release(self.graphs.popitem(last=False)[1])
        return entry


def _with_flags(loop: Callable, flags: tuple, *tensors):
    return loop(*tensors, *flags)


LOOPS = LoopGraphs()


def step_work(h0: Tensor, w_hh: Tensor) -> int:
    """Multiply-adds of one step's recurrent product: a state ``([R,] B, H)`` by ``([R,] G, H)`` weights."""
    return h0.numel() * w_hh.shape[-2]


def loop_graphed(tensors: Sequence, work: int) -> bool:
    """Whether a loop over ``tensors`` whose step's product is ``work`` multiply-adds (``step_work``) runs
    as a CUDA graph: ``graphs_usable``, and ``work`` at most ``MAX_STEP_WORK``."""
    return work <= MAX_STEP_WORK and graphs_usable(tensors)


def run_loop(loop: Callable, tensors: tuple, flags: tuple = (), work: int = 0) -> tuple:
    """``loop(*tensors, *flags)``, as a CUDA graph where ``loop_graphed``. ``loop`` reads nothing but its
    arguments and returns a tuple of tensors (or Nones); ``flags`` are values it is specialised to."""
    if not loop_graphed(tensors, work):
        return loop(*tensors, *flags)
    return LOOPS.run(loop, tensors, flags)


def cached_graphs() -> int:
    """How many loops are held as graphs now."""
    return len(LOOPS.graphs)


def clear(graphs: Optional[LoopGraphs] = None) -> None:
    """Drop every cached graph (and the memory each holds, once its device has finished them)."""
    graphs = graphs or LOOPS
    with graphs.lock:
        if graphs.graphs:
            _release(next(iter(graphs.graphs.values())))
        graphs.graphs.clear()
        graphs.calls.clear()
        graphs.failed.clear()
