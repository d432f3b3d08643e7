"""Bad arguments and bad input get a clear error: a ValueError naming the argument and the allowed values
for recdrop's own arguments; torch.nn's own error, word for word, for what a torch.nn layer checks."""
import re

import numpy as np
import pytest
import torch
from torch.nn.utils.rnn import pack_padded_sequence, pack_sequence

import recdrop
from recdrop.config import run_id
from recdrop.experiments.char_lm import CharLMConfig
from recdrop.experiments.ner import NERConfig
from recdrop.experiments.sentiment import SentimentConfig
from recdrop.experiments.temporal_order import TemporalOrderConfig
from recdrop.experiments.word_lm import WordLMConfig

LAYERS = [recdrop.LSTM, recdrop.GRU, recdrop.RNN]
CELLS = [recdrop.LSTMCell, recdrop.GRUCell, recdrop.RNNCell]


@pytest.mark.parametrize("cls", LAYERS + CELLS)
@pytest.mark.parametrize("rate", [-0.1, 1.0, 1.5, "0.5", None, True])
def test_rate_outside_range(cls, rate):
    with pytest.raises(ValueError, match=r"recurrent_dropout.*\[0, 1\)"):
        cls(3, 4, recurrent_dropout=rate)


@pytest.mark.parametrize("cls", LAYERS + CELLS)
@pytest.mark.parametrize("arg,value,allowed", [
    ("scheme", "zaremba", "'semeniuta'"), ("sampling", "per_step", "'per-sequence'"),
    ("scaling", "none", "'inverted'"), ("nonlinearity", "sigmoid", "'relu'")])
def test_unknown_choice(cls, arg, value, allowed):
    with pytest.raises(ValueError, match=f"{arg}='{value}'.*allowed values:.*{allowed}"):
        cls(3, 4, recurrent_dropout=0.25, **{arg: value})


@pytest.mark.parametrize("cls", [recdrop.RNN, recdrop.RNNCell])
def test_rnn_rejects_combined_scheme(cls):
    with pytest.raises(ValueError, match="scheme='gal\\+semeniuta'"):
        cls(3, 4, recurrent_dropout=0.25, scheme="gal+semeniuta")


@pytest.mark.parametrize("cls", LAYERS)
def test_forward_dropout_and_sizes(cls):
    with pytest.raises(ValueError, match="dropout"):
        cls(3, 4, 2, dropout=1.2)
    with pytest.raises(ValueError, match="hidden_size"):
        cls(3, 0)
    with pytest.raises(ValueError, match="num_layers must be greater than zero"):
        cls(3, 4, 0)


@pytest.mark.parametrize("cls", LAYERS)
@pytest.mark.parametrize("rate", [0.0, 0.25], ids=["torch.nn's forward", "recdrop's"])
def test_wrong_input_rank_and_features_are_torch_nns_errors(cls, rate):
    m = cls(3, 4, recurrent_dropout=rate)  # the same errors whichever forward runs
    with pytest.raises(ValueError) as ours:
        m(torch.randn(2, 5, 3, 1))
    with pytest.raises(ValueError) as torch_nns:
        getattr(torch.nn, m.kind)(3, 4)(torch.randn(2, 5, 3, 1))
    assert str(ours.value) == str(torch_nns.value)  # torch.nn's words, which differ by layer
    with pytest.raises(ValueError, match="Expected input to be 2D or 3D, got 1D"):
        m(torch.randn(3))
    for x in (torch.randn(5, 2, 4), pack_sequence([torch.randn(3, 4)])):  # torch.nn's packed forward: a matmul's
        with pytest.raises(RuntimeError, match="input.size\\(-1\\) must be equal to input_size. Expected 3, got 4"):
            m(x)
    with pytest.raises(ValueError, match="input dtype \\(torch.float64\\) does not match weight dtype"):
        m(torch.randn(5, 2, 3, dtype=torch.float64))
    with pytest.raises(TypeError, match="input must be a torch.Tensor or a PackedSequence, got list"):
        m([[1.0, 2.0, 3.0]])


@pytest.mark.parametrize("cls", LAYERS)
@pytest.mark.parametrize("rate", [0.0, 0.25], ids=["torch.nn's forward", "recdrop's"])
def test_initial_state_wrong_shape_is_torch_nns_error(cls, rate):
    m = cls(3, 4, 2, recurrent_dropout=rate)
    x = torch.randn(5, 2, 3)
    bad = torch.zeros(1, 2, 4)  # one layer's worth, for a two-layer module: no broadcasting
    hx = (bad, torch.zeros(2, 2, 4)) if cls is recdrop.LSTM else bad
    with pytest.raises(RuntimeError, match=r"Expected hidden(\[0\])? size \(2, 2, 4\), got \[1, 2, 4\]"):
        m(x, hx)
    with pytest.raises(RuntimeError, match="For batched 3-D input, hx"):
        m(x, (bad[0], bad[0]) if cls is recdrop.LSTM else bad[0])
    packed = pack_padded_sequence(x, torch.tensor([5, 3]))
    # torch.nn's own LSTM words it "Expected more hidden states in stacked_rnn"
    with pytest.raises(RuntimeError, match=r"Expected hidden(\[0\])? size \(2, 2, 4\), got \[1, 2, 4\]|"
                                           r"Expected more hidden states in stacked_rnn"):
        m(packed, hx)


@pytest.mark.parametrize("cls", LAYERS)
@pytest.mark.parametrize("rate", [0.0, 0.25], ids=["torch.nn's forward", "recdrop's"])
def test_an_unsorted_packs_initial_state_of_another_batch_is_refused_before_the_sort(cls, rate):
    """torch.nn sorts hx into the pack's order first, and so takes 2 rows of a batch of 5 silently."""
    packed = pack_sequence([torch.randn(2, 3), torch.randn(3, 3)], enforce_sorted=False)  # batch 2
    m = cls(3, 4, recurrent_dropout=rate)
    bad = torch.zeros(1, 5, 4)
    with pytest.raises(RuntimeError, match=r"Expected hidden size \(1, 2, 4\), got \[1, 5, 4\]"):
        m(packed, (bad, bad) if cls is recdrop.LSTM else bad)


@pytest.mark.parametrize("cls", LAYERS)
@pytest.mark.parametrize("rate", [0.0, 0.25], ids=["torch.nn's forward", "recdrop's"])
def test_an_initial_state_of_another_dtype_is_refused_by_name(cls, rate):
    """Not a matmul's "mat1 and mat2 must have the same dtype" from deep inside recdrop's forward, nor
    oneDNN's "unsupported data type" from torch.nn's: one error, whether or not recurrent dropout acts."""
    m = cls(3, 4, recurrent_dropout=rate)
    bad = torch.zeros(1, 2, 4, dtype=torch.float64)
    for x in (torch.randn(5, 2, 3), pack_padded_sequence(torch.randn(5, 2, 3), torch.tensor([5, 3]))):
        with pytest.raises(RuntimeError, match="hx must have the input's dtype, torch.float32; got torch.float64"):
            m(x, (bad, bad) if cls is recdrop.LSTM else bad)


@pytest.mark.parametrize("cls", LAYERS)
@pytest.mark.parametrize("batched", [True, False])
def test_an_initial_state_of_the_wrong_rank_is_torch_nns_error(cls, batched):
    x = torch.randn(5, 2, 3) if batched else torch.randn(5, 3)
    h = torch.zeros(2, 4) if batched else torch.zeros(1, 2, 4)
    hx = (h, h) if cls is recdrop.LSTM else h
    with pytest.raises(RuntimeError) as theirs:
        getattr(torch.nn, cls.__name__)(3, 4)(x, hx)
    with pytest.raises(RuntimeError, match=re.escape(str(theirs.value))):
        cls(3, 4, recurrent_dropout=0.25)(x, hx)


@pytest.mark.parametrize("cls", [recdrop.GRU, recdrop.RNN])
def test_proj_size_on_a_gru_or_rnn_is_torch_nns_error(cls):
    for size in (2, 0):  # as torch.nn's own GRU and RNN, even 0
        with pytest.raises(ValueError, match="proj_size argument is only supported for LSTM, not RNN or GRU"):
            cls(3, 4, proj_size=size)


@pytest.mark.parametrize("cls", LAYERS + CELLS)
def test_a_numpy_rate_is_a_rate_as_for_torch_nns_dropout(cls):
    assert cls(3, 4, recurrent_dropout=np.float32(0.25)).rdrop.p == 0.25
    assert type(cls(3, 4, recurrent_dropout=np.float64(0.5)).rdrop.p) is float


@pytest.mark.parametrize("rate", [0.0, 0.25], ids=["torch.nn's forward", "recdrop's"])
def test_lstm_hx_must_be_a_pair(rate):
    m = recdrop.LSTM(3, 4, recurrent_dropout=rate)  # torch.nn's own: an IndexError
    with pytest.raises(ValueError, match=r"hx must be a tuple \(h_0, c_0\)"):
        m(torch.randn(5, 2, 3), (torch.zeros(1, 2, 4),))


@pytest.mark.parametrize("cls", CELLS)
@pytest.mark.parametrize("rate", [0.0, 0.25], ids=["torch.nn's forward", "recdrop's"])
def test_cell_bad_input_is_torch_nns_error(cls, rate):
    cell = cls(3, 4, recurrent_dropout=rate)
    with pytest.raises(ValueError, match=f"{cls.__name__}: Expected input to be 1D or 2D, got 3D instead"):
        cell(torch.randn(2, 2, 3))
    with pytest.raises(RuntimeError, match="input has inconsistent input_size: got 5 expected 3"):
        cell(torch.randn(2, 5))
    bad = torch.zeros(3, 4)
    with pytest.raises(RuntimeError, match="Input batch size 2 doesn't match hidden0 batch size 3"):
        cell(torch.randn(2, 3), (bad, bad) if cls is recdrop.LSTMCell else bad)
    bad = torch.zeros(2, 5)
    with pytest.raises(RuntimeError, match="hidden0 has inconsistent hidden_size: got 5, expected 4"):
        cell(torch.randn(2, 3), (bad, bad) if cls is recdrop.LSTMCell else bad)



@pytest.mark.parametrize("cls", CELLS)
def test_a_cells_bad_states_or_input_get_one_error_whether_or_not_dropout_acts(cls):
    """torch.nn's cell forward (where no recurrent dropout acts) would raise other errors than recdrop's own
    for these, or fail deep inside: recdrop's checks come first on both paths."""
    cell = cls(3, 4, recurrent_dropout=0.3)
    x, h = torch.randn(2, 3), torch.zeros(2, 4)
    if cls is recdrop.LSTMCell:
        bad_calls = [((x, (h,)), ValueError, "hx must be a tuple \\(h_0, c_0\\), got 1 tensors"),
                     ((x, (h, h, h)), ValueError, "got 3 tensors"),
                     ((x, (h, [0.0])), TypeError, "hx: c_0 must be a torch.Tensor, got list")]
    else:
        bad_calls = [((x, (h,)), TypeError, "hx: h_0 must be a torch.Tensor, got tuple"),
                     ((x, [0.0]), TypeError, "hx: h_0 must be a torch.Tensor, got list")]
    bad_calls.append((([[1.0, 2.0, 3.0]], None), TypeError, "input must be a torch.Tensor, got list"))
    for args, error, message in bad_calls:
        for mode in (cell.train, cell.eval):
            mode()
            with pytest.raises(error, match=message):
                cell(*args)

def test_given_masks_checked():
    m = recdrop.LSTM(3, 4, recurrent_dropout=0.5, scheme="semeniuta", sampling="per-step")
    x = torch.randn(5, 2, 3)
    with pytest.raises(ValueError, match=r"masks\['semeniuta'\] must have shape \(5, 2, 4\)"):
        m(x, masks=[{"semeniuta": torch.ones(2, 4)}])
    with pytest.raises(ValueError, match="keys \\['semeniuta'\\]"):
        m(x, masks=[{"moon": torch.ones(5, 2, 4)}])
    with pytest.raises(ValueError, match="masks must be a list of 1 dicts"):  # one layer's dict, not in a list
        m(x, masks={"semeniuta": torch.ones(5, 2, 4)})
    cell = recdrop.LSTMCell(3, 4, recurrent_dropout=0.5, scheme="semeniuta")
    with pytest.raises(ValueError, match=r"masks\['semeniuta'\] must have shape \(2, 4\)"):
        cell(torch.randn(2, 3), masks={"semeniuta": torch.ones(5, 2, 4)})


@pytest.mark.parametrize("value", [0.5, 2.0, -1.0, float("nan")])
def test_given_masks_hold_only_zeros_and_ones(value):
    """Raw masks: the layer scales them itself, so a scaled or soft mask would act twice or not as a mask."""
    m = recdrop.LSTM(3, 4, recurrent_dropout=0.5)
    mask = torch.ones(5, 2, 4)
    mask[2, 1, 3] = value
    with pytest.raises(ValueError, match=rf"masks\['semeniuta'\] must hold only 0s and 1s .*got {value}"):
        m(torch.randn(5, 2, 3), masks=[{"semeniuta": mask}])
    cell = recdrop.GRUCell(3, 4, recurrent_dropout=0.5)
    with pytest.raises(ValueError, match="must hold only 0s and 1s"):
        cell(torch.randn(2, 3), masks={"semeniuta": mask[2]})
    m(torch.randn(5, 2, 3), masks=[{"semeniuta": mask.ne(value)}])  # a bool mask is a 0/1 mask


def test_given_masks_values_are_not_read_under_a_transform():
    """Under vmap a mask is a batched tensor whose values no Python check may read."""
    m = recdrop.LSTM(3, 4, recurrent_dropout=0.5)
    x = torch.randn(5, 2, 3)
    mask = m.draw_masks(5, 2)[0]["semeniuta"]
    out = torch.func.vmap(lambda k: m(x, masks=[{"semeniuta": k}])[0])(torch.stack([mask, 1 - mask]))
    for got, k in zip(out, (mask, 1 - mask)):
        torch.testing.assert_close(got, m(x, masks=[{"semeniuta": k}])[0])


def test_given_masks_must_be_tensors():
    m = recdrop.LSTM(3, 4, recurrent_dropout=0.5)
    with pytest.raises(ValueError, match=r"masks\['semeniuta'\] must be a torch.Tensor of 0s and 1s, got ndarray"):
        m(torch.randn(5, 2, 3), masks=[{"semeniuta": np.ones((5, 2, 4))}])


@pytest.mark.parametrize("kind,bidirectional", [("LSTM", False), ("LSTM", True), ("GRU", False)])
def test_masks_given_in_the_states_place_say_masks_are_keyword_only(kind, bidirectional):
    m = getattr(recdrop, kind)(3, 4, bidirectional=bidirectional, recurrent_dropout=0.5)
    with pytest.raises((ValueError, TypeError), match=r"masks are keyword-only: forward\(x, hx, masks=...\)"):
        m(torch.randn(5, 2, 3), m.draw_masks(5, 2))


@pytest.mark.parametrize("steps,batch,name", [(-1, 2, "seq_len"), (2.5, 2, "seq_len"), ("5", 2, "seq_len"),
                                              (5, -2, "batch_size"), (5, True, "batch_size")])
def test_draw_masks_takes_integer_sizes(steps, batch, name):
    m = recdrop.LSTM(3, 4, recurrent_dropout=0.5)
    with pytest.raises(ValueError, match=f"draw_masks: {name} must be an integer, 0 or more"):
        m.draw_masks(steps, batch)
    assert m.draw_masks(np.int64(5), 2)[0]["semeniuta"].shape == (5, 2, 4)  # any integer, as torch takes
    assert m.draw_masks(0, 2)[0]["semeniuta"].shape == (0, 2, 4)  # an empty sequence trains, as in torch.nn


def test_a_mask_generator_must_be_a_torch_generator():
    m = recdrop.LSTM(3, 4, recurrent_dropout=0.5)
    m.generator = 3
    with pytest.raises(TypeError, match="a mask generator must be a torch.Generator or None, got int"):
        m(torch.randn(5, 2, 3))


def test_a_bad_proj_size_is_torch_nns_error():
    with pytest.raises(ValueError, match="proj_size should be a positive integer or zero"):
        recdrop.LSTM(3, 4, proj_size=-1)
    for bad in (2.0, True):
        with pytest.raises(TypeError, match="proj_size should be of type int"):
            recdrop.LSTM(3, 4, proj_size=bad)
    with pytest.raises(ValueError, match="proj_size has to be smaller than hidden_size"):
        recdrop.LSTM(3, 4, proj_size=4)
    m = recdrop.LSTM(3, 4, proj_size=2)  # h_0 has proj_size units, c_0 hidden_size
    with pytest.raises(RuntimeError, match=r"Expected hidden\[0\] size \(1, 5, 2\), got \[1, 5, 4\]"):
        m(torch.randn(7, 5, 3), (torch.zeros(1, 5, 4), torch.zeros(1, 5, 4)))
    m = recdrop.LSTM(3, 4, proj_size=2, recurrent_dropout=0.5, scheme="gal")  # Gal drops h_{t-1}: 2 units
    with pytest.raises(ValueError, match=r"masks\['gal'\] must have shape \(7, 5, 2\)"):
        m(torch.randn(7, 5, 3), masks=[{"gal": torch.ones(7, 5, 4)}])


# -- experiment configs: value ranges, checked when the config is built -----------------------------
# (config class, field, a bad value, the allowed range as the message words it), at the `ci` scale:
# word_lm batch 32, bptt 35; char_lm batch 8, seq_len 20.
BAD_CONFIG_VALUES = [
    (WordLMConfig, "lr", 0.0, "> 0"), (WordLMConfig, "lr", -1.0, "> 0"), (WordLMConfig, "lr", float("nan"), "> 0"),
    (WordLMConfig, "init_scale", 0.0, "> 0"), (WordLMConfig, "lr_decay", 0.0, ">= 1"),
    (WordLMConfig, "lr_decay", 0.97, ">= 1"), (WordLMConfig, "clip_norm", 0.0, "> 0"),
    (WordLMConfig, "clip_norm", -10.0, "> 0"),
    (WordLMConfig, "train_tokens", -100, "0 (the whole split) or at least 1152"),
    (WordLMConfig, "train_tokens", 100, "0 (the whole split) or at least 1152"),
    (WordLMConfig, "train_tokens", 1151, "0 (the whole split) or at least 1152"),
    (WordLMConfig, "valid_tokens", 10, "0 (the whole split) or at least 64"),
    (WordLMConfig, "valid_tokens", -1, "0 (the whole split) or at least 64"),
    (WordLMConfig, "test_tokens", 63, "0 (the whole split) or at least 64"),
    (CharLMConfig, "lr", 0.0, "> 0"), (CharLMConfig, "init_scale", -0.01, "> 0"),
    (CharLMConfig, "lr_decay", 0.0, "in (0, 1]"), (CharLMConfig, "lr_decay", 1.5, "in (0, 1]"),
    (CharLMConfig, "clip_norm", 0.0, "> 0"),
    (CharLMConfig, "train_chars", -1, "0 (the whole split) or at least 161"),
    (CharLMConfig, "train_chars", 160, "0 (the whole split) or at least 161"),
    (CharLMConfig, "valid_chars", 20, "0 (the whole split) or at least 21"),
    (CharLMConfig, "test_chars", -5, "0 (the whole split) or at least 21"),
    (NERConfig, "lr", 0.0, "> 0"), (NERConfig, "rho", 1.0, "in [0, 1)"), (NERConfig, "rho", -0.1, "in [0, 1)"),
    (NERConfig, "lr_decay", 0.0, "in (0, 1]"), (NERConfig, "lr_decay", 1.01, "in (0, 1]"),
    (NERConfig, "train_sentences", -1, ">= 0"), (NERConfig, "eval_sentences", -1, ">= 0"),
    (SentimentConfig, "lr", -0.001, "> 0"), (SentimentConfig, "rho", 1.0, "in [0, 1)"),
    (SentimentConfig, "lr_decay", 0.0, "in (0, 1]"), (SentimentConfig, "pretrain_epochs", -1, ">= 0"),
    (SentimentConfig, "train_messages", -1, ">= 0"), (SentimentConfig, "eval_messages", -3, ">= 0"),
    (TemporalOrderConfig, "lr", 0.0, "> 0"), (TemporalOrderConfig, "init_scale", float("inf"), "> 0 and finite"),
    (TemporalOrderConfig, "clip_norm", -5.0, "> 0"),
]


@pytest.mark.parametrize("cls,field,value,allowed", BAD_CONFIG_VALUES,
                         ids=[f"{c.experiment}-{f}={v}" for c, f, v, _ in BAD_CONFIG_VALUES])
def test_config_value_out_of_range(cls, field, value, allowed):
    """The error names the config, the field, the allowed range and the value given."""
    message = rf"{cls.__name__}\.{field} must be {re.escape(allowed)}.*got {re.escape(repr(value))}"
    with pytest.raises(ValueError, match=message):
        cls.at_scale("ci", **{field: value})
    with pytest.raises(ValueError, match=rf"{cls.__name__}\.{field} must be"):  # built directly, at the paper scale
        cls(**{field: value})


@pytest.mark.parametrize("cls,field,smallest", [
    (WordLMConfig, "train_tokens", 32 * 36), (WordLMConfig, "valid_tokens", 2 * 32),
    (WordLMConfig, "test_tokens", 2 * 32),
    (CharLMConfig, "train_chars", 8 * 20 + 1), (CharLMConfig, "valid_chars", 21), (CharLMConfig, "test_chars", 21)])
def test_split_limit_boundary(cls, field, smallest):
    """The smallest limit that gives one batch (at the ci scale's batch size and window) is accepted,
    one less is not, and so is 0 (the whole split)."""
    assert getattr(cls.at_scale("ci", **{field: smallest}), field) == smallest
    assert getattr(cls.at_scale("ci", **{field: 0}), field) == 0
    with pytest.raises(ValueError, match=rf"{field} must be 0 \(the whole split\) or at least {smallest}"):
        cls.at_scale("ci", **{field: smallest - 1})


@pytest.mark.parametrize("cls", [WordLMConfig, CharLMConfig, NERConfig, SentimentConfig, TemporalOrderConfig])
@pytest.mark.parametrize("field,as_int", [("lr", 1), ("recurrent_dropout", 0)])
def test_an_int_in_a_float_field_is_the_same_run(cls, field, as_int):
    """``--set lr=1`` is the run of ``lr=1.0``: one run id, not a retrain and a duplicate record."""
    as_int_cfg, as_float_cfg = cls.at_scale("ci", **{field: as_int}), cls.at_scale("ci", **{field: float(as_int)})
    assert type(getattr(as_int_cfg, field)) is float
    assert as_int_cfg == as_float_cfg
    assert run_id(as_int_cfg, 0) == run_id(as_float_cfg, 0)
    assert run_id(cls(**{field: as_int}), 3) == run_id(cls(**{field: float(as_int)}), 3)


def test_a_training_split_without_a_batch_is_a_clear_error(store):
    from recdrop.experiments.temporal_order import TemporalOrderTask
    from recdrop.train import train_run

    class NoBatches(TemporalOrderTask):
        def batches(self, epoch):
            return []
    with pytest.raises(ValueError, match="its training split gives no batch"):
        train_run(NoBatches, TemporalOrderConfig.at_scale("ci", epochs=1), store=store, progress=False)


@pytest.mark.parametrize("cls", CELLS)
def test_a_cell_takes_any_integer_size_as_torch_nns_cells_do_and_refuses_others_with_torchs_type_error(cls):
    cell = cls(np.int64(3), np.int32(4))
    assert (cell.input_size, cell.hidden_size) == (3, 4) and type(cell.hidden_size) is int
    with pytest.raises(TypeError, match="input_size should be of type int, got: float"):
        cls(3.0, 4)
    with pytest.raises(ValueError, match="hidden_size must be a positive int, got 0"):
        cls(3, 0)


@pytest.mark.parametrize("cls", LAYERS)
def test_an_initial_state_on_another_device_gets_torch_nns_error_on_recdrops_own_path_too(cls):
    m = cls(3, 4, recurrent_dropout=0.3).train()  # dropout acts: recdrop's own code, not torch.nn's kernels
    h = torch.zeros(1, 2, 4, device="meta")
    with pytest.raises(RuntimeError, match="Input and hidden tensors are not at the same device, found input "
                                           "tensor at cpu and hidden tensor at meta"):
        m(torch.randn(5, 2, 3), (h, h) if cls is recdrop.LSTM else h)


@pytest.mark.parametrize("proj_size", [0, 2])
def test_given_masks_of_another_dtype_act_in_the_inputs_dtype(proj_size):
    """Masks from ``draw_masks`` are float32 by default; a bfloat16 layer takes them, on the fast path
    and on the loop (a projection runs the loop), and gives what the same masks cast by hand give."""
    torch.manual_seed(0)
    m = recdrop.LSTM(3, 4, proj_size=proj_size, recurrent_dropout=0.5, scheme="gal").to(torch.bfloat16).train()
    x = torch.randn(5, 2, 3, dtype=torch.bfloat16)
    masks = m.draw_masks(5, 2)
    assert next(iter(masks[0].values())).dtype == torch.float32
    out = m(x, masks=masks)[0]
    assert out.dtype == torch.bfloat16
    cast = [{t: v.to(torch.bfloat16) for t, v in k.items()} for k in masks]
    torch.testing.assert_close(out, m(x, masks=cast)[0], rtol=0, atol=0)


@pytest.mark.parametrize("cls", CELLS)
def test_a_cells_given_or_kept_masks_act_in_the_inputs_dtype(cls):
    """As a layer's: float32 masks given to a bfloat16 cell, and a per-sequence mask kept from before the
    cell moved to bfloat16 (``.to``), act in bfloat16 and give what the masks cast by hand give."""
    torch.manual_seed(0)
    m = cls(3, 4, recurrent_dropout=0.5).to(torch.bfloat16).train()
    x = torch.randn(2, 3, dtype=torch.bfloat16)
    given = {m.scheme: torch.bernoulli(torch.full((2, 4), 0.5))}
    out = m(x, masks=given)
    assert all(o.dtype == torch.bfloat16 for o in (out if isinstance(out, tuple) else (out,)))
    by_hand = m(x, masks={t: v.to(torch.bfloat16) for t, v in given.items()})
    torch.testing.assert_close(out, by_hand, rtol=0, atol=0)
    kept = cls(3, 4, recurrent_dropout=0.5, sampling="per-sequence").train()
    kept(x.float())  # draws its float32 mask and keeps it for the sequence
    kept.to(torch.bfloat16)
    out = kept(x)
    assert all(o.dtype == torch.bfloat16 for o in (out if isinstance(out, tuple) else (out,)))


def test_under_autocast_an_initial_state_of_the_layers_own_dtype_is_taken_as_torch_nn_takes_it():
    """Autocast hands the layer its input in bfloat16 (a Linear before it) and the state in float32: not
    the wrong dtype, but autocast's mixing, which torch.nn accepts and recdrop must too."""
    proj, x, h0 = torch.nn.Linear(3, 3), torch.randn(5, 2, 3), torch.zeros(1, 2, 4)
    for rate in (0.0, 0.25):
        m = recdrop.LSTM(3, 4, recurrent_dropout=rate).train()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y, _ = m(proj(x), (h0, h0))
        assert y.shape == (5, 2, 4)


@pytest.mark.parametrize("cls", LAYERS)
def test_a_layer_on_the_meta_device_gives_shapes_with_dropout_as_torch_nn_does(cls):
    """A model built on "meta" (to size it without memory) runs its training forward: autocast knows no
    such device, and the fast path must not ask it."""
    m = cls(3, 4, bidirectional=True, recurrent_dropout=0.3, device="meta")
    out, _ = m(torch.randn(5, 2, 3, device="meta"))
    assert out.shape == (5, 2, 8) and out.device.type == "meta"
