"""A one-minute demo: a tiny LSTM/GRU/RNN trained with each recurrent dropout scheme.

    python -m recdrop.demo

The task: classify a random +-1 sequence by the sign of its first element (a long-range
dependency). Prints the final training loss and the test accuracy of each model.
"""
import torch

import recdrop


def make_batch(n: int, steps: int, generator: torch.Generator):
    x = torch.randint(0, 2, (steps, n, 1), generator=generator).float() * 2 - 1
    return x, (x[0, :, 0] > 0).long()


def train_one(kind: str, scheme: str, p: float, steps: int = 8, hidden: int = 32, iters: int = 200, seed: int = 0):
    torch.manual_seed(seed)
    rnn = getattr(recdrop, kind)(1, hidden, recurrent_dropout=p, scheme=scheme)
    head = torch.nn.Linear(hidden, 2)
    opt = torch.optim.Adam([*rnn.parameters(), *head.parameters()], lr=3e-2)
    gen = torch.Generator().manual_seed(seed)
    for _ in range(iters):
        x, y = make_batch(64, steps, gen)
        out, _ = rnn(x)
        loss = torch.nn.functional.cross_entropy(head(out[-1]), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    rnn.eval()
    x, y = make_batch(1000, steps, gen)
    with torch.no_grad():
        acc = (head(rnn(x)[0][-1]).argmax(-1) == y).float().mean().item()
    return loss.item(), acc


def main():
    print(f"{'cell':5s} {'scheme':14s} {'p':>4s} {'train loss':>10s} {'test acc':>8s}")
    for kind in ("LSTM", "GRU"):
        for scheme, p in (("semeniuta", 0.0), ("semeniuta", 0.25), ("gal", 0.25), ("moon", 0.25),
                          ("gal+semeniuta", 0.25)):
            loss, acc = train_one(kind, scheme, p)
            print(f"{kind:5s} {scheme if p else 'none':14s} {p:4.2f} {loss:10.4f} {acc:8.3f}", flush=True)
    loss, acc = train_one("RNN", "semeniuta", 0.25)
    print(f"{'RNN':5s} {'eq. 2':14s} {0.25:4.2f} {loss:10.4f} {acc:8.3f}")


if __name__ == "__main__":
    main()
