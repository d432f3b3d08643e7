"""SemEval Twitter sentiment, message-level polarity (paper Section 4.5, Table 5).

Training: SemEval-2013 train; validation: SemEval-2013 dev (both de-duplicated by id, with every
test id removed). Tests, the paper's six columns: Twitter13 (only the 3,545 of its 3,810 tweets
whose text could still be downloaded), LiveJournal14, Twitter15, Twitter14, SMS13 and Sarcasm14.
Labels: positive / neutral / negative. The score is SemEval's: the mean of the F1 of the positive
and the negative class. See ``$RECDROP_DATA/semeval/SOURCE.md`` for where each file comes from.
"""
from __future__ import annotations

import functools
import html
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence

from .files import DatasetError, verified_files

SOURCE = ("the SemEval-2017 Task 4 re-release, https://github.com/cbaziotis/datastories-semeval2017-task4 "
          "(dataset/Subtask_A/downloaded/), and the SemEval-2014 Task 9 test release, "
          "https://github.com/AnthonyMRios/Sentiment-Classification-Example (sentimentData/)")
GOLD_2014 = "SemEval2014-task9-test-B-gold-NEED-TWEET-DOWNLOAD.txt"
FILES = ["twitter-2013train-A.tsv", "twitter-2013dev-A.tsv", "twitter-2013test-A.tsv", "twitter-2014test-A.tsv",
         "twitter-2015test-A.tsv", GOLD_2014]
# The paper's Table 5 columns, in its order: (file, 2014-gold source prefix or None)
TEST_SETS = {"Twitter13": ("twitter-2013test-A.tsv", None), "LiveJournal14": (GOLD_2014, "LJ"),
             "Twitter15": ("twitter-2015test-A.tsv", None), "Twitter14": ("twitter-2014test-A.tsv", None),
             "SMS13": (GOLD_2014, "SM"), "Sarcasm14": (GOLD_2014, "TS")}
PARTIAL = {"Twitter13": "3,545 of its 3,810 tweets: the copy scored here lacks the others' text"}
LABELS = ("negative", "neutral", "positive")
_LABEL = {"positive": "positive", "negative": "negative", "neutral": "neutral", "objective": "neutral",
          "objective-OR-neutral": "neutral"}


@dataclass
class Message:
    id: str
    text: str
    label: str


def clean_text(text: str) -> str:
    """One enclosing pair of CSV quotes stripped, ``\\uXXXX`` escapes decoded, HTML entities
    unescaped and double-encoded UTF-8 repaired (the quirks SOURCE.md lists)."""
    text = text.strip()
    if len(text) >= 2 and text[0] == '"' and text[-1] == '"':
        text = text[1:-1].replace('""', '"')
    text = re.sub(r"\\u([0-9a-fA-F]{4})", lambda m: chr(int(m.group(1), 16)), text)
    text = html.unescape(text)
    if "Ã" in text or "â€" in text:
        try:
            text = text.encode("latin-1").decode("utf-8")
        except (UnicodeEncodeError, UnicodeDecodeError):
            pass
    return text


def read_task_a(path: Path) -> List[Message]:
    """A ``tweet_id <tab> label <tab> text`` file (the 2017 re-release's naming, message level)."""
    out = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        if line.strip():
            tweet_id, label, text = line.split("\t", 2)
            out.append(Message(tweet_id, clean_text(text), _LABEL[label.strip()]))
    return out


def read_gold_2014(path: Path, prefix: str) -> List[Message]:
    """The rows of the SemEval-2014 gold file whose ``sid`` starts with ``prefix`` and that carry text."""
    out = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        fields = line.rstrip("\r").split("\t")
        if len(fields) >= 4 and fields[1].startswith(prefix):
            out.append(Message(fields[1], clean_text("\t".join(fields[3:])), _LABEL[fields[2].strip()]))
    return out


def _unique(messages: Sequence[Message], exclude: Optional[set] = None) -> List[Message]:
    seen = set(exclude or ())
    out = []
    for m in messages:
        if m.id not in seen:
            seen.add(m.id)
            out.append(m)
    return out


@dataclass
class SemEval:
    train: List[Message]
    valid: List[Message]
    tests: Dict[str, List[Message]]  # the paper's columns, in its order
    notes: Dict[str, str]  # test set -> what is incomplete about it


def load_semeval(root: Optional[Path] = None, download: bool = False) -> SemEval:
    """Training, validation and the six test sets, every file verified against its checksum."""
    if download:
        raise NotImplementedError("the SemEval files are research copies without a stable download URL; "
                                  f"get them from {SOURCE}")
    paths = _files(root)
    tests, notes = {}, dict(PARTIAL)
    for name, (file, prefix) in TEST_SETS.items():
        rows = read_gold_2014(paths[file], prefix) if prefix else read_task_a(paths[file])
        tests[name] = _unique(rows)
        if len(tests[name]) < len(rows):  # a tweet listed twice is scored once (Twitter15's file repeats some)
            notes[name] = "; ".join(filter(None, (notes.get(name), repeats_note(rows, tests[name]))))
    test_ids = {m.id for rows in tests.values() for m in rows}
    train = _unique(read_task_a(paths["twitter-2013train-A.tsv"]), exclude=test_ids)
    valid = _unique(read_task_a(paths["twitter-2013dev-A.tsv"]), exclude=test_ids | {m.id for m in train})
    return SemEval(train, valid, tests, notes)


def repeats_note(rows: Sequence[Message], kept: Sequence[Message]) -> str:
    """What a test set's note says of the tweets its file lists more than once (``rows``, of which ``kept``
    are the first of each): how many, how many of them with another label in another row, and that each
    is scored once, with its first row's label."""
    labels: Dict[str, List[str]] = {}  # each id's labels, a row each
    for m in rows:
        labels.setdefault(m.id, []).append(m.label)
    repeated = [labels[m.id] for m in kept if len(labels[m.id]) > 1]
    differ = sum(1 for ids_labels in repeated if len(set(ids_labels)) > 1)
    return (f"its file lists {len(repeated)} tweet{'s' if len(repeated) > 1 else ''} more than once ({differ} with "
            f"different labels): each is scored once, with its first row's label")


def _files(root: Optional[Path]) -> Dict[str, Path]:
    return verified_files("semeval", FILES, SOURCE, root)


@functools.lru_cache(maxsize=None)
def notes_on_test_sets() -> Dict[str, str]:
    """What a table of the test sets says of each that is incomplete or repeats tweets (``load_semeval``'s
    notes); where the data is not here, the known gaps alone (``PARTIAL``)."""
    try:
        return load_semeval().notes
    except DatasetError:
        return dict(PARTIAL)


def check_semeval(root: Optional[Path] = None) -> None:
    """The six files verified, not read: a ``DatasetError`` naming a missing or corrupt one."""
    _files(root)


def tokenize(text: str) -> List[str]:
    """NLTK's tweet tokenizer, lower-cased, elongations shortened ("sooooo" -> "sooo")."""
    from nltk.tokenize import TweetTokenizer

    return TweetTokenizer(preserve_case=False, reduce_len=True).tokenize(text)


def semeval_f1(true: Sequence[str], predicted: Sequence[str]) -> float:
    """SemEval's score, in percent: the mean of the F1 of the positive and the negative class."""
    from sklearn.metrics import f1_score

    if len(true) != len(predicted):
        raise ValueError(f"true and predicted must have the same length, got {len(true)} and {len(predicted)}")
    return float(100.0 * f1_score(list(true), list(predicted), labels=["positive", "negative"], average="macro",
                                  zero_division=0))


POSITIVE_EMOTICONS = (":)", ":-)", ": )", ":D", "=)", ";)", ":]", "(:")
NEGATIVE_EMOTICONS = (":(", ":-(", ": (", "):", ":'(", ":[")


def distant_label(text: str) -> Optional[Message]:
    """Distant supervision from emoticons (Go et al. 2009; Severyn and Moschitti 2015), for the
    pre-training step: a text with only positive (or only negative) emoticons gets that label,
    with the emoticons removed so the model must learn from the words; others give None."""
    pos = any(e in text for e in POSITIVE_EMOTICONS)
    neg = any(e in text for e in NEGATIVE_EMOTICONS)
    if pos == neg:
        return None
    for e in POSITIVE_EMOTICONS + NEGATIVE_EMOTICONS:
        text = text.replace(e, " ")
    return Message("", " ".join(text.split()), "positive" if pos else "negative")
