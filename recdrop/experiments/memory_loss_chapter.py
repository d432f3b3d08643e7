"""The measured memory of c_0, its figures and Section 3's predictions (Eqs. 17-19), from the stored
runs of the memory probe (``memory_loss``: its config and task)."""
from __future__ import annotations

import pandas as pd

from ..memory import predicted_trace
from ..report import seed_values
from ..verdicts import Claim, claim_verdict
from .memory_loss import KEYS, MemoryLossConfig


# -- tables and figures ----------------------------------------------------------------------------
def _name(r) -> str:
    return "no dropout" if r["scheme"] == "none" else f"{r['scheme']} {r['sampling']}, {r['scaling']} scaling"


def traces_frame(rows) -> "pd.DataFrame":
    """Long form: setting | phase (test / train) | step | memory | cell_norm | predicted (Moon's
    setting only: Eq. 17 at test with the paper scaling, Eq. 18 in training with inverted scaling)."""
    out = []
    for r in rows:
        if not r.record:
            continue
        cfg, probe = r.config, r.record.metrics["probe"]
        for phase, values in probe.items():
            steps = len(values["memory"])
            predicts = r["scheme"] == "moon" and (cfg.scaling == "paper") == (phase == "test")
            pred = (predicted_trace(steps, cfg.recurrent_dropout, phase == "train").tolist() if predicts
                    else [None] * steps)
            for t in range(steps):
                out.append({"setting": _name(r), **{k: r[k] for k in KEYS}, "seed": r.seed, "phase": phase,
                            "step": t + 1, "memory": values["memory"][t], "cell_norm": values["cell_norm"][t],
                            "predicted": pred[t]})
    return pd.DataFrame(out)


def plot_memory(rows):
    """The memory trace per step, at test and in training, one line per setting; dashed: what Eqs.
    17-18 predict for Moon with every gate at 1."""
    import matplotlib.pyplot as plt

    df = traces_frame(rows)
    if df.empty:
        return None
    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    colors = dict(zip(df["setting"].unique(), plt.rcParams["axes.prop_cycle"].by_key()["color"] * 2))
    for ax, phase in zip(axes, ("test", "train")):
        d = df[df["phase"] == phase]
        for setting, g in d.groupby("setting", sort=False):
            g = g.groupby("step")[["memory", "predicted"]].mean()
            ax.plot(g.index, g["memory"], color=colors[setting], label=setting)
            if g["predicted"].notna().any():
                ax.plot(g.index, g["predicted"], "--", color=colors[setting], lw=1,
                        label=f"Eq. {17 if phase == 'test' else 18}: {setting}")
        ax.set_yscale("log")
        ax.set_ylim(1e-12, 1e6)
        ax.set_xlabel("step t")
        ax.set_title("test (eval mode)" if phase == "test" else "training (masks on)")
    axes[0].set_ylabel("||c_t(c_0 = delta) - c_t(c_0 = 0)|| / ||delta||")
    handles = {line.get_label(): line for ax in axes for line in ax.lines}
    fig.legend(handles.values(), handles.keys(), fontsize=7, loc="center left", bbox_to_anchor=(1.0, 0.5))
    fig.tight_layout()
    return fig


def plot_cell_norm(rows):
    """Mean ||c_t|| per step over the probe sequences, at test and in training."""
    import seaborn as sns

    df = traces_frame(rows)
    if df.empty:
        return None
    g = sns.relplot(data=df, x="step", y="cell_norm", hue="setting", col="phase", kind="line", height=3.5,
                    aspect=1.2, errorbar=None)
    g.set(yscale="log")
    g.set_axis_labels("step t", "mean ||c_t||")
    return g


def memory_table(rows) -> "pd.DataFrame":
    """The memory trace at the training length and at the probe's last step T, at test and in
    training (mean over seeds), what Eqs. 17-18 predict for Moon at T with every gate at 1, the
    seeds, and each seed's trace at test at T (a mean over values orders of magnitude apart is
    one seed's; the claims judge each seed)."""
    df = traces_frame(rows)
    if df.empty:
        return pd.DataFrame(columns=["setting"])
    train_len, last = int(rows[0].config.length), int(df["step"].max())
    each, out = f"test, t={last}, each seed", []
    for setting, d in df.groupby("setting", sort=False):
        row = {"setting": setting}
        for phase in ("test", "train"):
            p = d[d["phase"] == phase].groupby("step")[["memory", "predicted"]].mean()
            row[f"{phase}, t={train_len}"] = p.loc[train_len, "memory"] if train_len in p.index else None
            row[f"{phase}, t={last}"] = p.loc[last, "memory"]
            if p["predicted"].notna().any():
                row[f"Eq. {17 if phase == 'test' else 18} at t={last}"] = p.loc[last, "predicted"]
        at_last = d[(d["phase"] == "test") & (d["step"] == last)].sort_values("seed")
        row["seeds"] = len(at_last)
        row[each] = ", ".join(f"{v:.2g}" for v in at_last["memory"])
        out.append(row)
    table = pd.DataFrame(out).set_index("setting")
    return table[[c for c in table if c not in ("seeds", each)] + ["seeds", each]]  # the equations beside the means


def accuracy_by_length(rows) -> "pd.DataFrame":
    """Test accuracy (%) at each test length, one row per setting (mean over seeds), and how many seeds."""
    out = []
    for r in rows:
        if r.record:
            for length, acc in r.record.metrics["test_acc_by_length"].items():
                out.append({"setting": _name(r), "seed": r.seed, "test length": int(length), "accuracy (%)": 100 * acc})
    if not out:
        return pd.DataFrame(columns=["setting"])
    df = pd.DataFrame(out)
    wide = df.pivot_table(index="setting", columns="test length", values="accuracy (%)", aggfunc="mean",
                          sort=False).round(1)
    wide = wide[sorted(wide.columns)]
    wide["seeds"] = df.groupby("setting", sort=False)["seed"].nunique()
    return wide


def claims(rows) -> "pd.DataFrame":
    """Sec. 3's predictions, each judged on the measured traces against the seed noise
    (``verdicts.claim_verdict``), at the training length L or at the probe's last step T. With
    per-step masks in training a unit's memory is lost whenever it is dropped, so the growth the note
    after Eq. 18 predicts is checked on per-sequence masks, where the kept units keep theirs."""
    def traces(r, _):
        """One run's memory trace, (scheme, sampling, scaling, phase, step) -> memory, and Eq. 17-18's."""
        out = {}
        for t in traces_frame([r]).itertuples(index=False):
            key = (t.scheme, t.sampling, t.scaling, t.phase, t.step)
            out[key], out[(*key, "predicted")] = t.memory, t.predicted
        return out

    by_seed = seed_values(rows, traces)
    length = int(rows[0].config.length) if rows else MemoryLossConfig.length
    last = max((k[4] for v in by_seed.values() for k in v), default=length)
    inverted = ("moon", "per-sequence", "inverted")
    none_at_l = ("none", "-", "-", "test", length)
    claims = []
    for sampling in ("per-step", "per-sequence"):
        moon = ("moon", sampling, "paper", "test", length)
        claims.append(Claim(f"Moon {sampling}, paper scaling: at test the memory of c_0 fades by orders of magnitude "
                            f"over the training length (below 1% of the no-dropout model's at t = {length}; Eq. 17)",
                            [moon, none_at_l], lambda v, moon=moon: v[moon] < 0.01 * v[none_at_l]))
        claims.append(Claim(f"Moon {sampling}, paper scaling: ... at about Eq. 17's rate (within 10x of q^t at "
                            f"t = {length})", [moon, (*moon, "predicted")],
                            lambda v, m=moon: v[(*m, "predicted")] / 10 <= v[m] <= 10 * v[(*m, "predicted")]))
    # train/test at T above train/test at step 2, without dividing by a trace at 0
    grows = [(*inverted, phase, t) for phase in ("train", "test") for t in (2, last)]
    claims.append(Claim("Moon per-sequence, inverted scaling: the same weights keep more of c_0 in training than at "
                        "test, and the gap widens with t (the note after Eq. 18)", grows,
                        lambda v: v[(*inverted, "train", last)] > v[(*inverted, "test", last)] and
                        v[(*inverted, "train", last)] * v[(*inverted, "test", 2)] >
                        v[(*inverted, "train", 2)] * v[(*inverted, "test", last)]))
    named = {"semeniuta": "Ours (Semeniuta)", "gal": "Gal"}
    why = {"semeniuta": "Eq. 19: only the update vector g_t is dropped, never c",
           "gal": "the end of Sec. 3: Gal's is not affected either; it drops h_{t-1} where it enters the gates, "
                  "never c"}
    moon_at_t = ("moon", "per-step", "paper", "test", last)
    for scheme, sampling in (("semeniuta", "per-step"), ("semeniuta", "per-sequence"), ("gal", "per-step")):
        kept = (scheme, sampling, "paper", "test", last)
        claims.append(Claim(f"{named[scheme]} {sampling}: no such decay ({why[scheme]}): at test it keeps more of c_0 "
                            f"than Moon per-step, by at least 100x at t = {last}", [kept, moon_at_t],
                            lambda v, kept=kept: v[kept] > 100 * v[moon_at_t]))
    out = [(c.text, claim_verdict(c, by_seed)) for c in claims]
    return pd.DataFrame(out, columns=["prediction (paper Sec. 3)", "on ours"])
