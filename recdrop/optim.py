"""RMSProp as the paper's frameworks of 2016 defined it (paper Secs. 4.4 and 4.5: "the RMSProp
algorithm [Dauphin et al. 2015] with rho fixed at 0.9").

Every form keeps a running mean of squared gradients and divides the step by its root:

    r_t = rho * r_{t-1} + (1 - rho) * g_t^2
    theta_t = theta_{t-1} - lr * g_t / D(r_t)

They differ in where the small constant sits and what r starts at, and at the paper's lr of 0.01
that decides whether the first step is bounded:

- ``rmsprop-lasagne``: D = sqrt(r_t + 1e-6), r_0 = 0. Lasagne 0.2's ``lasagne.updates.rmsprop``
  (Theano, as is the authors' public code); the first step is lr * g / sqrt(0.1 g^2 + 1e-6), at most
  sqrt(10) * lr, and much less where g is small against 1e-3.
- ``rmsprop-tf1``: D = sqrt(r_t + 1e-10), r_0 = 1. TensorFlow 1's ``tf.train.RMSPropOptimizer``
  (its "rms" slot starts at ones); the first steps are about lr * g.
- ``rmsprop-torch``: D = sqrt(r_t) + 1e-8, r_0 = 0. ``torch.optim.RMSprop``, the form of Tables 4 and
  5's ``torch-rmsprop`` ablation: the first step is sqrt(10) * lr * sign(g)
  on every weight whose gradient is above about 1e-8, whatever its size.
"""
from __future__ import annotations

from typing import Dict, Iterable, Tuple

import torch

# form -> (epsilon, where it sits, the mean square's start)
RMSPROP_FORMS: Dict[str, Tuple[float, str, float]] = {
    "rmsprop-lasagne": (1e-6, "inside", 0.0),  # Lasagne 0.2, lasagne/updates.py: rmsprop(..., epsilon=1e-6)
    "rmsprop-tf1": (1e-10, "inside", 1.0),  # TF 1.x, training/rmsprop.py: epsilon=1e-10, "rms" slot of ones
    "rmsprop-torch": (1e-8, "outside", 0.0),  # torch.optim.RMSprop's defaults
}
OPTIMIZERS = tuple(RMSPROP_FORMS)


class RMSProp2016(torch.optim.Optimizer):
    """RMSProp with the constant inside the root, r_t = rho r_{t-1} + (1 - rho) g_t^2 and
    theta_t = theta_{t-1} - lr g_t / sqrt(r_t + eps), from a mean square of ``initial`` (Lasagne:
    eps 1e-6 from 0; TF 1: eps 1e-10 from 1). No momentum, no centring, no weight decay: the paper
    names none. Dense gradients only."""

    def __init__(self, params: Iterable, lr: float, rho: float = 0.9, eps: float = 1e-6, initial: float = 0.0):
        for name, value, ok in (("lr", lr, lr > 0), ("rho", rho, 0 <= rho < 1), ("eps", eps, eps >= 0),
                                ("initial", initial, initial >= 0)):
            if not ok:
                raise ValueError(f"RMSProp2016: {name}={value!r} is out of range (lr > 0, 0 <= rho < 1, eps >= 0, "
                                 "initial >= 0)")
        super().__init__(params, dict(lr=lr, rho=rho, eps=eps, initial=initial))

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            lr, rho, eps = group["lr"], group["rho"], group["eps"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                if p.grad.is_sparse:
                    raise RuntimeError("RMSProp2016 does not support sparse gradients")
                state = self.state[p]
                if not state:
                    state["square_avg"] = torch.full_like(p, group["initial"], memory_format=torch.preserve_format)
                square_avg = state["square_avg"]
                square_avg.mul_(rho).addcmul_(p.grad, p.grad, value=1 - rho)
                p.addcdiv_(p.grad, square_avg.add(eps).sqrt_(), value=-lr)
        return loss


def rmsprop(params: Iterable, form: str, lr: float, rho: float) -> torch.optim.Optimizer:
    """The optimiser ``form`` (one of ``OPTIMIZERS``) at ``lr`` and ``rho``."""
    if form not in RMSPROP_FORMS:
        raise ValueError(f"optimizer={form!r} is not valid; allowed values: {', '.join(map(repr, OPTIMIZERS))}")
    eps, where, initial = RMSPROP_FORMS[form]
    if where == "outside":
        return torch.optim.RMSprop(params, lr=lr, alpha=rho, eps=eps)
    return RMSProp2016(params, lr=lr, rho=rho, eps=eps, initial=initial)
