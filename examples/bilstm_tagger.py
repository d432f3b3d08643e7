"""A bidirectional LSTM named-entity tagger on CoNLL-2003, written as one writes it with
``torch.nn.LSTM``, with ``recdrop.LSTM`` swapped in.

It shows that the swap is one line (see ``BiLSTMTagger.__init__``): the vocabulary, the padding
collate_fn, ``pack_padded_sequence(..., enforce_sorted=False)``, ``pad_packed_sequence``, the loss
and the state_dict stay as they are, and ``--layer torch`` runs the same script on ``torch.nn.LSTM``.
Recurrent dropout acts in ``train()`` only; in ``eval()`` the layer computes what torch.nn's does.

    RECDROP_DATA=/path/to/data python examples/bilstm_tagger.py --epochs 1 --batches 50

Needs CoNLL-2003 in ``$RECDROP_DATA/conll2003`` (see ``recdrop.data``) and tqdm; prints the dev
entity F1 when seqeval is installed (``pip install 'recdrop[experiments]'``), token accuracy always.
"""
import argparse
from collections import Counter
from itertools import islice

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence, pad_sequence
from torch.utils.data import DataLoader
from tqdm import tqdm

import recdrop
from recdrop.data.conll2003 import entity_f1, load_conll2003

PAD, UNK, IGNORE = 0, 1, -100  # word ids of padding and unknown words; the tag of padding (ignored by the loss)


def build_vocab(sentences):
    counts = Counter(w for s in sentences for w in s.words)
    return {w: i for i, w in enumerate(["<pad>", "<unk>"] + sorted(counts))}


def encode(sentences, words, tags):
    """(word ids, tag ids) per sentence; words not in the vocabulary map to <unk>."""
    return [(torch.tensor([words.get(w, UNK) for w in s.words]), torch.tensor([tags[t] for t in s.tags]))
            for s in sentences]


def collate(batch):
    """Pad a batch of sentences: tokens (B, T), tags (B, T), lengths (B,) on the CPU."""
    tokens, tags = zip(*batch)
    lengths = torch.tensor([len(t) for t in tokens])
    return (pad_sequence(tokens, batch_first=True, padding_value=PAD),
            pad_sequence(tags, batch_first=True, padding_value=IGNORE), lengths)


class BiLSTMTagger(nn.Module):
    def __init__(self, vocab_size, num_tags, emb=100, hidden=100, dropout=0.5, layer="recdrop",
                 recurrent_dropout=0.25):
        super().__init__()
        self.emb = nn.Embedding(vocab_size, emb, padding_idx=PAD)
        if layer == "torch":
            self.lstm = nn.LSTM(emb, hidden, batch_first=True, bidirectional=True)
        else:  # the swap: the same arguments, plus the recurrent dropout
            self.lstm = recdrop.LSTM(emb, hidden, batch_first=True, bidirectional=True,
                                     recurrent_dropout=recurrent_dropout)
        self.drop = nn.Dropout(dropout)
        self.out = nn.Linear(2 * hidden, num_tags)

    def forward(self, tokens, lengths):  # (B, T), (B,) -> tag scores (B, T, tags)
        x = self.drop(self.emb(tokens))
        packed = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
        out, _ = self.lstm(packed)
        out, _ = pad_packed_sequence(out, batch_first=True, total_length=tokens.shape[1])
        return self.out(self.drop(out))


def train_batches(model, loader, optimizer, batches, device="cpu"):
    """Train on up to ``batches`` batches of ``loader``; the loss of each."""
    model.train()
    losses = []
    bar = tqdm(islice(loader, batches), total=min(batches, len(loader)), desc="train")
    for tokens, tags, lengths in bar:
        scores = model(tokens.to(device), lengths)
        loss = nn.functional.cross_entropy(scores.flatten(0, 1), tags.to(device).flatten(), ignore_index=IGNORE)
        optimizer.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 5.0)
        optimizer.step()
        losses.append(loss.item())
        bar.set_postfix(loss=f"{loss.item():.3f}")
    return losses


@torch.no_grad()
def evaluate(model, loader, tag_names, device="cpu"):
    """Token accuracy and entity F1 (None without seqeval) over ``loader``."""
    model.eval()
    true, pred = [], []
    for tokens, tags, lengths in loader:
        best = model(tokens.to(device), lengths).argmax(-1).cpu()
        for t, p, n in zip(tags, best, lengths.tolist()):
            true.append([tag_names[i] for i in t[:n].tolist()])
            pred.append([tag_names[i] for i in p[:n].tolist()])
    accuracy = sum(a == b for t, p in zip(true, pred) for a, b in zip(t, p)) / sum(map(len, true))
    try:
        return accuracy, entity_f1(true, pred)
    except ImportError:
        return accuracy, None


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--batches", type=int, default=10**9, help="training batches per epoch (default: all)")
    ap.add_argument("--dev-batches", type=int, default=10**9,
                    help="dev batches evaluated after each epoch (default: all; 256 sentences a batch)")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--hidden", type=int, default=100)
    ap.add_argument("--recurrent-dropout", type=float, default=0.25)
    ap.add_argument("--layer", choices=["recdrop", "torch"], default="recdrop")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--compile", nargs="?", const="inductor", metavar="BACKEND",
                    help="torch.compile the tagger (dynamic shapes: every batch has its own length); a backend "
                         "such as 'eager' or 'aot_eager' compiles faster than Inductor's default")
    args = ap.parse_args(argv)
    torch.manual_seed(args.seed)

    data = load_conll2003()
    words = build_vocab(data["train"])
    tag_names = sorted({t for s in data["train"] for t in s.tags})
    tags = {t: i for i, t in enumerate(tag_names)}
    train = DataLoader(encode(data["train"], words, tags), args.batch_size, shuffle=True, collate_fn=collate)
    dev = DataLoader(encode(data["valid"], words, tags), 256, collate_fn=collate)

    model = BiLSTMTagger(len(words), len(tags), hidden=args.hidden, layer=args.layer,
                         recurrent_dropout=args.recurrent_dropout).to(args.device)
    print(model.lstm)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    if args.compile:
        torch._dynamo.config.allow_rnn = True  # else Dynamo runs torch.nn's RNNs (and recdrop's) eagerly
        model = torch.compile(model, dynamic=True, backend=args.compile)
    for epoch in range(1, args.epochs + 1):
        losses = train_batches(model, train, optimizer, args.batches, args.device)
        accuracy, f1 = evaluate(model, islice(dev, args.dev_batches), tag_names, args.device)
        print(f"epoch {epoch}: train loss {sum(losses) / len(losses):.4f} | dev token accuracy {100 * accuracy:.2f}%"
              + ("" if f1 is None else f" | dev entity F1 {f1:.2f}"))


if __name__ == "__main__":
    main()
