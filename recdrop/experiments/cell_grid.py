"""What Tables 4 and 5 share: one recurrent layer of each cell type (RNN, LSTM, GRU), without and
with 0.25 recurrent dropout (the layers themselves are built in ``recdrop.models``)."""
from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any, Dict, List, Tuple

import pandas as pd
import torch

from ..config import ExperimentConfig
from ..masks import check_choice
from ..optim import OPTIMIZERS, rmsprop
from ..paths import DATA_DIR
from ..report import PRECISION_NAMES, curves_frame
from ..records import hardware_as_written_now
from ..store import RunStore

CELLS = ("RNN", "LSTM", "GRU")
RATES = (0.0, 0.25)


def check_cell(cell: str) -> None:
    if cell not in CELLS:
        raise ValueError(f"cell={cell!r} is not valid; allowed values: {', '.join(map(repr, CELLS))}")


@dataclasses.dataclass(frozen=True)
class RMSPropConfig(ExperimentConfig):
    """The training fields of Tables 4 and 5 (paper Sec. 4.4; Sec. 4.5: "all the other settings are
    equivalent to the ones used in the NER task"): RMSProp with rho 0.9, its rate times 0.99 after
    every epoch, and global-norm clipping."""

    # Added with Lasagne's RMSProp and clipping: the records before were trained with torch's RMSprop and no
    # clipping (the ``torch-rmsprop`` ablation).
    ADDED = {"optimizer": "rmsprop-torch", "clip_norm": 0.0}

    lr: float = 0.01  # paper Sec. 4.4: RMSProp's learning rate (Sec. 4.5: 0.001)
    rho: float = 0.9  # paper Sec. 4.4
    lr_decay: float = 0.99  # paper Sec. 4.4: multiplied after every epoch
    # RMSProp as Lasagne 0.2 defined it (eps 1e-6 inside the root, from 0), the Theano library of the
    # authors' time; chosen over TF 1's form (from 1) and torch's (eps outside the root) by a probe of
    # NER's RNN (book/deviations.md, "The optimiser of Tables 4 and 5"; recdrop/optim.py)
    optimizer: str = "rmsprop-lasagne"
    # Global-norm clipping, 0: none. The paper names none for Secs. 4.4-4.5; the authors' code clips
    # wherever it trains, at 5 in its other classification task (Temporal Order, order.py). Without it the
    # sentiment RNN's gradient norm spikes (book/deviations.md)
    clip_norm: float = 5.0

    def validate(self) -> None:
        self._check_range("lr", 0, low_open=True, finite=True)
        self._check_range("rho", 0, 1, high_open=True)  # RMSProp's decay of the squared-gradient average
        self._check_range("lr_decay", 0, 1, low_open=True)  # multiplies the learning rate after every epoch
        check_choice(f"{type(self).__name__}.optimizer", self.optimizer, OPTIMIZERS)
        self._check_range("clip_norm", 0, finite=True)

    def make_optimizer(self, model: torch.nn.Module) -> torch.optim.Optimizer:
        """This config's RMSProp over ``model``'s trainable parameters (the static embeddings are not)."""
        return rmsprop([p for p in model.parameters() if p.requires_grad], self.optimizer, self.lr, self.rho)


def cell_rate_grid(scale: str, config_class, **overrides) -> List[Tuple[Dict[str, Any], Any]]:
    """Each cell without and with 0.25 recurrent dropout, labelled ``cell`` and ``rate``."""
    return [({"cell": cell, "rate": rate},
             config_class.at_scale(scale, **{"cell": cell, "recurrent_dropout": rate, **overrides}))
            for cell in CELLS for rate in RATES]


def with_torch_rmsprop(grid):
    """``grid`` trained with torch's RMSprop and no clipping: how Tables 4 and 5 were first trained,
    kept as an ablation of the optimiser (those runs' records keep their ids)."""
    def ablation(scale: str, **overrides):
        return grid(scale, **{**RMSPropConfig.ADDED, **overrides})
    return ablation


ABLATIONS = (("torch-rmsprop", "torch's RMSprop, no clipping"),)  # (grid, what it changes), the chapters' order

RATE_COLOURS = {0.0: "tab:blue", 0.25: "tab:red"}


def plot_cell_runs(rows):
    """Per epoch, of every stored run: the training loss (the mean over the epoch's batches, on a log
    scale, where a batch that blew up shows) and the validation F1; one column per cell, one line per
    seed, coloured by recurrent dropout; a dotted line where the training spans change (NER's stage 2).
    Only the cells ``rows``' grid holds (an ablation of the RNN's cells draws the RNN alone)."""
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    df = curves_frame(rows, ["cell", "rate"])
    cells = [cell for cell in CELLS if any(r["cell"] == cell for r in rows)] or list(CELLS)
    fig, axes = plt.subplots(2, len(cells), figsize=(4.2 * max(len(cells), 2), 5.6), sharex=True, sharey="row",
                             squeeze=False)
    for top, bottom, cell in zip(axes[0], axes[1], cells):
        top.set_title(cell)
        runs = df[df["cell"] == cell]
        if runs.empty:
            top.text(0.5, 0.5, "not yet run at this scale", transform=top.transAxes, ha="center", fontsize=8)
        for (rate, _), c in runs.groupby(["rate", "seed"]):
            top.plot(c["epoch"], c["train_loss"], color=RATE_COLOURS[rate], lw=1, alpha=0.8)
            bottom.plot(c["epoch"], c["valid_f1"], color=RATE_COLOURS[rate], lw=1, alpha=0.8)
            if "span_len" in c and c["span_len"].nunique() > 1:
                for ax in (top, bottom):
                    ax.axvline(c["epoch"][c["span_len"] != c["span_len"].iloc[0]].min() - 0.5, color="grey", ls=":")
        bottom.set_xlabel("epoch")
    axes[0][0].set_yscale("log")
    axes[0][0].set_ylabel("training loss (log scale)")
    axes[1][0].set_ylabel("validation F1")
    names = [f"recurrent dropout {rate:g}" if rate else "no recurrent dropout" for rate in RATE_COLOURS]
    fig.legend([Line2D([], [], color=c) for c in RATE_COLOURS.values()], names, loc="upper center", ncol=2, fontsize=8)
    fig.tight_layout(rect=(0, 0, 1, 0.94))
    return fig


UNSTABLE_RATIO = 10.0  # stable: no epoch's mean training loss may be over 10 times the first epoch's


PROBES = DATA_DIR / "probes" / "issue-34"  # the shortened runs that chose the optimiser and the clipping


def optimiser_probes(experiment: str, folder: Path = PROBES) -> "pd.DataFrame":
    """The probes that chose the optimiser and the clipping (records of shortened runs at the paper's
    settings, kept outside the store, each from a clean commit): per run, its optimiser's form and
    clipping threshold, how its training went (first epoch's loss, the highest epoch loss over it, the
    largest ratio of an epoch's loss to the epoch's before, the highest epoch-mean gradient norm, the
    most steps of an epoch that were clipped) and its last epoch's validation and test F1 (sentiment:
    the mean over the six test sets); and where it ran: its seed, hardware, precision and commit."""
    out = []
    for path in sorted(folder.glob("*.json")):
        rec = RunStore.read(path)
        if rec.experiment != experiment:
            continue
        cfg, curves = rec.config, rec.curves
        last = curves[-1]
        tests = [v for k, v in last.items() if k.startswith("test_f1") and v is not None]
        losses = [c["train_loss"] for c in curves]
        rise = max([b / a for a, b in zip(losses, losses[1:])], default=float("nan"))
        out.append({"cell": cfg["cell"], "optimizer": cfg["optimizer"], "clip_norm": cfg["clip_norm"],
                    "epochs": len(curves), "first loss": float(f"{losses[0]:.3g}"),
                    "highest loss / first": float(f"{max(losses) / losses[0]:.3g}"),
                    "largest rise of the loss": float(f"{rise:.3g}"),
                    "highest grad norm": float(f"{max(c['grad_norm'] for c in curves):.3g}"),
                    "most clipped": round(max(c.get("clipped", 0.0) for c in curves), 3),
                    "last valid F1": round(last["valid_f1"], 2), "last test F1": round(sum(tests) / len(tests), 2),
                    "seed": rec.seed, "hardware": hardware_as_written_now(rec.hardware),
                    "precision": ", ".join(PRECISION_NAMES[p] for p in rec.precisions), "commit": rec.commit[:7]})
    return pd.DataFrame(out, columns=["cell", "optimizer", "clip_norm", "epochs", "first loss", "highest loss / first",
                                      "largest rise of the loss", "highest grad norm", "most clipped", "last valid F1",
                                      "last test F1", "seed", "hardware", "precision", "commit"])


def stability(losses: List[float], chance_loss: float) -> str:
    """Whether a run trained without blowing up, from its epochs' mean training losses: "yes", or why
    not. The first epoch's mean must not exceed ``chance_loss`` (the cross-entropy of a uniform guess,
    ln of the number of classes, where training starts: above it, the epoch blew up on the way), and no
    later epoch's may be over ``UNSTABLE_RATIO`` times the first's."""
    if not all(math.isfinite(x) for x in losses):
        return "NO: diverged (a loss not finite)"
    if losses[0] > chance_loss:
        return f"NO: epoch 1 above chance ({losses[0]:.3g} > {chance_loss:.3g})"
    ratio = max(losses) / losses[0]
    return "yes" if ratio <= UNSTABLE_RATIO else f"NO: loss rose {ratio:.4g}x"


def training_summary(rows, chance_loss: float) -> "pd.DataFrame":
    """One row per stored run: the epoch of its lowest training loss and of its highest validation F1,
    against the last epoch's (the model that is tested): whether training was still converging at the
    end, and how far the tested model is from the run's best on validation. *stable*: ``stability``
    against the task's ``chance_loss`` (the first epoch's loss and the highest over it beside). Losses
    to 3 significant digits, F1 to 2 decimals."""
    df = curves_frame(rows, ["cell", "rate"])
    out = []
    for (cell, rate, seed), c in df.groupby(["cell", "rate", "seed"], sort=False):
        c = c.sort_values("epoch")
        low, best, last = c.loc[c["train_loss"].idxmin()], c.loc[c["valid_f1"].idxmax()], c.iloc[-1]
        losses = c["train_loss"].tolist()
        out.append({"cell": cell, "rate": rate, "seed": seed, "epochs": int(last["epoch"]),
                    "first loss": float(f"{losses[0]:.3g}"),
                    "lowest loss": float(f"{low['train_loss']:.3g}"), "its epoch": int(low["epoch"]),
                    "last loss": float(f"{last['train_loss']:.3g}"),
                    "highest loss / first": float(f"{max(losses) / losses[0]:.3g}"),
                    "stable": stability(losses, chance_loss),
                    "best valid F1": round(best["valid_f1"], 2), "epoch of best": int(best["epoch"]),
                    "last valid F1": round(last["valid_f1"], 2)})
    table = pd.DataFrame(out, columns=["cell", "rate", "seed", "epochs", "first loss", "lowest loss", "its epoch",
                                       "last loss", "highest loss / first", "stable", "best valid F1", "epoch of best",
                                       "last valid F1"])
    return table.sort_values(["cell", "rate", "seed"],
                             key=lambda col: col.map(CELLS.index) if col.name == "cell" else col, ignore_index=True)
