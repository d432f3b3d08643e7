"""Each run's gradient clipping and update, written once for parameters stacked on a leading run
dimension R: a group that trains as one model (``stacked.StackedLanguageModels``) and a run alone, a
stack of one (``of_one``). Each run reads its learning rate from a tensor ``lrs`` ``(R,)``
(``step_graph.LearningRates``), so that a CUDA graph of the step follows a schedule.

- ``clip_``: global-norm clipping (Pascanu et al. 2013, as ``torch.nn.utils.clip_grad_norm_``),
  g <- g * min(1, c / (||g|| + 1e-6)), each run by the norm of its own gradients, where c > 0.
- ``SGD``: ``torch.optim.SGD`` without momentum or weight decay, p <- p - lr g.
- ``Adam``: ``torch.optim.Adam`` with its defaults (Kingma and Ba 2015, as torch defines it).

An update keeps each run's state in the run's own optimiser, so that its ``state_dict`` and checkpoint
are what they are alone; ``count`` is its host's part of a step (the step counts), ``update`` its
device's part, the one a CUDA graph replays.
"""
from __future__ import annotations

from typing import List, Sequence, Union

import torch
from torch import Tensor

from . import triton_kernels


def of_one(tensors: Sequence[Tensor]) -> List[Tensor]:
    """A run's own parameters (or their gradients) as a stack of one: views ``(1, ...)`` outside autograd."""
    return [t.detach().unsqueeze(0) for t in tensors]


def _check_grads(params: Sequence[Tensor], grads: Sequence[Tensor]) -> None:
    if len(grads) != len(params):
        raise ValueError(f"an update of {len(params)} parameters got {len(grads)} gradients: each parameter needs "
                         "its gradient")


def _per_run(x: Tensor, like: Tensor) -> Tensor:
    """``x`` ``(R,)`` shaped to scale each run's slice of ``like`` ``(R, ...)``."""
    return x.view((-1,) + (1,) * (like.dim() - 1))


def clip_(grads: Sequence[Tensor], clip_norms: Tensor) -> Tensor:
    """Scale each run's gradients ``grads`` ``(R, ...)`` to a global norm of ``clip_norms[r]`` where it is
    positive and exceeded; returns each run's norm before clipping ``(R,)``."""
    R = clip_norms.shape[0]
    norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g.reshape(R, -1), dim=1)
                                                 for g in grads]), dim=0)
    coef = torch.where(clip_norms > 0, (clip_norms / (norm + 1e-6)).clamp(max=1.0), torch.ones_like(norm))
    with torch.no_grad():
        for g in grads:
            g.mul_(_per_run(coef, g))
    return norm


def check_plain_sgd(optimizer: torch.optim.Optimizer) -> None:
    """Refuse an optimiser that ``SGD`` would not follow."""
    g = optimizer.param_groups[0] if optimizer.param_groups else {}
    plain = (type(optimizer) is torch.optim.SGD and len(optimizer.param_groups) == 1 and not g.get("momentum")
             and not g.get("weight_decay") and not g.get("nesterov") and not g.get("maximize"))
    if not plain:
        raise ValueError(f"an update from a tensor of learning rates is plain SGD; got {optimizer!r}")


class SGD:
    """Each run's plain SGD over its slice of ``params``, p <- p - lr_r g; ``optimizers`` (one a run, each
    plain SGD) hold the rates."""

    def __init__(self, params: Sequence[Tensor], optimizers: Sequence[torch.optim.Optimizer]):
        for o in optimizers:
            check_plain_sgd(o)
        self.params = list(params)

    def count(self) -> None:
        """Plain SGD keeps no count."""

    def update(self, grads: Sequence[Tensor], lrs: Tensor) -> None:
        _check_grads(self.params, grads)
        with torch.no_grad():
            for p, g in zip(self.params, grads):
                p.addcmul_(g, _per_run(lrs, p), value=-1)


class Adam:
    """Each run's ``torch.optim.Adam`` (its defaults: no weight decay, AMSGrad or maximize) over its slice
    of ``params``, each at its own learning rate:

        m <- b1 m + (1 - b1) g,  v <- b2 v + (1 - b2) g^2,
        p <- p - lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)

    ``members[r]`` are run r's own parameters in the order of ``params``, ``optimizers[r]`` its optimiser.
    The moments are stacked like the parameters, and each optimiser's state holds views of its slice; an
    update made for runs that already stepped starts from their moments and step counts."""

    def __init__(self, params: Sequence[Tensor], members: Sequence[Sequence[Tensor]],
                 optimizers: Sequence[torch.optim.Optimizer]):
        if not len(optimizers) == len(members) == params[0].shape[0]:
            raise ValueError(f"an Adam of {params[0].shape[0]} runs needs one optimiser and one list of parameters "
                             f"a run: got {len(optimizers)} and {len(members)}")
        first = optimizers[0].param_groups[0] if optimizers[0].param_groups else {}
        for o in optimizers:
            g = o.param_groups[0] if o.param_groups else {}
            if (type(o) is not torch.optim.Adam or len(o.param_groups) != 1 or g.get("weight_decay") or g.get("amsgrad")
                    or g.get("maximize") or g.get("betas") != first.get("betas") or g.get("eps") != first.get("eps")):
                raise ValueError("a stacked Adam follows torch.optim.Adam with one group, no weight decay, AMSGrad or "
                                 f"maximize, and one betas and eps for all runs; got {o!r}")
        self.params = list(params)
        self.beta1, self.beta2 = first["betas"]
        self.eps = first["eps"]
        states = [[o.state.get(p, {}) for p in own] for o, own in zip(optimizers, members)]  # run, parameter

        def stacked(key: str) -> List[Tensor]:  # each parameter's moment, every run's (zeros before its first step)
            with torch.no_grad():
                return [torch.stack([s[i][key] if key in s[i] else torch.zeros_like(p[r])
                                     for r, s in enumerate(states)]) for i, p in enumerate(self.params)]
        self.exp_avg, self.exp_avg_sq = stacked("exp_avg"), stacked("exp_avg_sq")
        steps = [float(s[0].get("step", 0.0)) for s in states]
        # torch keeps the step as a tensor of the default float dtype on the CPU where it is not capturable
        self.steps = torch.tensor(steps, dtype=torch.get_default_dtype())
        # the bias corrections in float64, as torch computes them on the host: 1 - b2^t in float32 is off by
        # about 5e-5 of itself at the first steps
        self.device_steps = torch.tensor(steps, dtype=torch.float64, device=params[0].device)
        for r, (o, own) in enumerate(zip(optimizers, members)):  # each run's state: views of its slices
            for i, p in enumerate(own):
                o.state[p] = {"step": self.steps[r], "exp_avg": self.exp_avg[i][r], "exp_avg_sq": self.exp_avg_sq[i][r]}

    def count(self) -> None:
        """The host's part of a step: each optimiser's step count (its ``state_dict``'s), which a CUDA graph
        of ``update`` cannot advance."""
        self.steps.add_(1)

    def update(self, grads: Sequence[Tensor], lrs: Tensor) -> None:
        """The device's part of a step: each run's moments and weights, and the step count they read; one
        kernel a float32 parameter where the Triton kernels run (``triton_kernels.adam_step``)."""
        _check_grads(self.params, grads)
        with torch.no_grad():
            self.device_steps.add_(1)
            t = self.device_steps
            step_size = (lrs / (1 - self.beta1 ** t)).to(lrs.dtype)
            bias_correction2_sqrt = (1 - self.beta2 ** t).sqrt().to(lrs.dtype)
            # the kernel takes the betas and eps as float32 scalars: float64 keeps the torch ops' precision
            if all(triton_kernels.usable(p) and p.dtype == torch.float32 and g.is_contiguous()
                   for p, g in zip(self.params, grads)):
                for p, g, m, v in zip(self.params, grads, self.exp_avg, self.exp_avg_sq):  # one pass a parameter
                    triton_kernels.adam_step(p, g, m, v, step_size, bias_correction2_sqrt,
                                             self.beta1, self.beta2, self.eps)
                return
            for p, g, m, v in zip(self.params, grads, self.exp_avg, self.exp_avg_sq):
                m.lerp_(g, 1 - self.beta1)
                v.mul_(self.beta2).addcmul_(g, g, value=1 - self.beta2)
                denom = (v.sqrt() / _per_run(bias_correction2_sqrt, v)).add_(self.eps)
                p.addcmul_(m / denom, _per_run(step_size, p), value=-1)


Update = Union[SGD, Adam]

