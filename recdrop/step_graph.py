"""A group's whole training step as one CUDA graph.

The host's work for one step of a fused group grows with its runs: each run's clipping, update, mask
draws and weight stacking are so many small launches, and a group of word LMs on a GPU waits on its
host, not on its GPU. Captured once and replayed for every batch, the step costs the host a few copies
and one launch, whatever the number of runs.

``StepGraph(load, body, generators, device)`` is a step as a function of its batch: ``load(batch)``
copies the batch (and whatever the host changed between steps, a learning rate) into static buffers,
and ``body()`` is the whole step on them (forward, backward, clipping, update, the masks drawn from
each run's own generator, the carried state written back into its buffer), returning its outputs. On a
CUDA device the first ``WARMUP`` calls run ``body`` eagerly on a side stream (cuBLAS's workspaces,
Triton's compilation), the next one captures it (each run's generator registered with the graph, so
that a replay advances it as an eager step does and draws what that step would draw) and every call
from then on replays it. Off CUDA, with ``RECDROP_CUDA_GRAPHS=0`` or ``RECDROP_STEP_GRAPH=0``, on a
torch whose graphs cannot hold a generator of one's own, or where a capture failed, ``body`` runs
eagerly at every call: one function, the same step.

A step whose last batch of an epoch is smaller replays its graph for the full batches and runs the
last one eagerly (``FullBatches``).

Where a step graph and the loops' own graphs (``recdrop.graphs``) would nest, the step graph wins: its
warm-up and capture run the plain loops (``graphs.suspended``).
"""
from __future__ import annotations

import warnings
from typing import Any, Callable, Sequence

import torch

from . import graphs, route

WARMUP = 2  # eager steps before the capture (PyTorch's recipe warms up on a side stream first)


def capturable(device) -> bool:
    """Whether a step on ``device`` can be captured: a CUDA device, graphs not switched off
    (``RECDROP_CUDA_GRAPHS=0`` all of them, ``RECDROP_STEP_GRAPH=0`` the step's), and a torch whose
    graphs register generators of one's own."""
    return (torch.device(device).type == "cuda" and not graphs.switched_off()
            and route.switched_on("RECDROP_STEP_GRAPH")
            and hasattr(torch.cuda.CUDAGraph, "register_generator_state"))


class StepGraph:
    """A training step, ``batch -> outputs``, replayed as one CUDA graph where ``capturable`` (above)."""

    def __init__(self, load: Callable[[Any], None], body: Callable[[], Any], generators: Sequence[torch.Generator],
                 device, enabled: bool = True):
        self.load, self.body = load, body
        self.generators = list({id(g): g for g in generators}.values())
        self.backend = CudaGraphs(torch.device(device)) if enabled and capturable(device) else None
        self.calls = 0
        self.graph = None
        self.failure = ""  # why the capture failed, where it did: the step then runs eagerly

    @property
    def enabled(self) -> bool:
        return self.backend is not None

    @property
    def captured(self) -> bool:
        return self.graph is not None

    def __call__(self, batch):
        self.load(batch)
        if self.backend is None:
            return self.body()
        self.calls += 1
        if self.graph is None:
            if self.calls <= WARMUP:
                return self.backend.warm(self.body)
            self._capture()
            if self.graph is None:
                return self.body()
        return self.backend.replay(self.graph)

    def _capture(self) -> None:
        """Capture ``body`` (nothing runs: the replay that follows is the step), or record why not, put
        the generators back where they stood, and run eagerly from then on."""
        states = [g.get_state() for g in self.generators]
        try:
            self.graph = self.backend.capture(self.body, self.generators)
        except Exception as e:  # the step runs eagerly from now on, as it would off CUDA
            self.failure = f"{type(e).__name__}: {' '.join(str(e).split())[:300]}"
            self.backend.settle()
            self.backend = None
            for g, s in zip(self.generators, states):
                g.set_state(s)
            warnings.warn(f"the training step could not be captured as a CUDA graph ({self.failure}); it runs "
                          "eagerly (RECDROP_STEP_GRAPH=0 says so at the start)")

    def release(self) -> None:
        """Give the graph's memory back once the device has finished its replays."""
        if self.graph is not None:
            self.backend.settle()
        self.graph = None


class CudaGraphs:
    """How ``StepGraph`` warms up, captures and replays on a CUDA device (a test gives another)."""

    def __init__(self, device: torch.device):
        self.device = device
        self.stream = torch.cuda.Stream(device)

    def warm(self, fn):
        """``fn()`` on the side stream, the loops plain, ordered after and before the caller's work."""
        caller = torch.cuda.current_stream(self.device)
        self.stream.wait_stream(caller)
        with torch.cuda.stream(self.stream), graphs.suspended():
            out = fn()
        caller.wait_stream(self.stream)
        return out

    def capture(self, body, generators):
        """(the graph, its static outputs): ``body`` captured, each generator registered with the graph."""
        graph = torch.cuda.CUDAGraph()
        for g in generators:
            graph.register_generator_state(g)
        torch.cuda.synchronize(self.device)
        with torch.cuda.device(self.device), graphs.suspended():
            with torch.cuda.graph(graph, stream=self.stream):
                outputs = body()
        return graph, outputs

    def replay(self, captured):
        graph, outputs = captured
        graph.replay()
        return outputs

    def settle(self) -> None:
        torch.cuda.synchronize(self.device)


class FullBatches:
    """A step whose full batches replay ``graph`` (a ``StepGraph`` of static buffers of a full batch's
    shape) and whose other batches (an epoch's last, smaller one) run ``eager``: the same step, its
    generators advanced between replays as a replay advances them."""

    def __init__(self, graph: StepGraph, full: Callable[[Any], bool], eager: Callable[[Any], Any]):
        self.graph, self.full, self.eager = graph, full, eager

    @property
    def enabled(self) -> bool:
        return self.graph.enabled

    @property
    def captured(self) -> bool:
        return self.graph.captured

    def __call__(self, batch):
        return self.graph(batch) if self.full(batch) else self.eager(batch)

    def release(self) -> None:
        self.graph.release()


class LearningRates:
    """Each run's learning rate (its optimiser's first group's) as a tensor a graph reads, refreshed from
    the optimisers when the host has changed one (a schedule, between epochs); the update that reads it
    (``updates.SGD``, ``updates.Adam``) checks the optimisers' rule."""

    def __init__(self, optimizers: Sequence[torch.optim.Optimizer], device):
        self.optimizers = list(optimizers)
        self.dtype = self.optimizers[0].param_groups[0]["params"][0].dtype  # the parameters' own
        self.tensor = torch.zeros(len(self.optimizers), dtype=self.dtype, device=device)
        self.values: tuple = ()
        self.refresh()

    def refresh(self) -> None:
        values = tuple(float(o.param_groups[0]["lr"]) for o in self.optimizers)
        if values != self.values:
            self.tensor.copy_(torch.tensor(values, dtype=self.dtype))
            self.values = values
