"""The benchmark bookkeeping: FLOP counts, peaks, and the tables the Performance page shows."""
import pandas as pd
import pytest

from recdrop import perf


def test_flops_per_step_counts_the_three_matmuls_of_each_gate():
    # LSTM, batch 2, input 3, hidden 5: forward 2*2*(4*5)*(3+5) = 640 FLOPs, backward twice that
    assert perf.flops_per_step("LSTM", 2, 3, 5) == 3 * 640
    assert perf.flops_per_step("GRU", 2, 3, 5) == 3 * 480
    assert perf.flops_per_step("RNN", 2, 3, 5) == 3 * 160
    with pytest.raises(KeyError):
        perf.flops_per_step("Transformer", 2, 3, 5)


def test_peak_is_known_only_for_data_sheet_gpus():
    assert perf.peak_tflops("NVIDIA H100 80GB HBM3", tf32=False) == 67.0
    assert perf.peak_tflops("NVIDIA H200", tf32=True) == 494.7
    assert perf.peak_tflops("AMD EPYC (2 threads)", tf32=False) is None


def test_ratio_table_renames_and_keeps_the_provenance_columns(tmp_path):
    pd.DataFrame([{"kind": "LSTM", "hidden": 8, "seq": 4, "scheme": "semeniuta", "torch_nn_ms": 1.0,
                   "recdrop_ms": 1.5, "loop_ms": 3.0, "ratio": 1.5, "loop_over_recdrop": 2.0, "hardware": "cpu",
                   "threads": 2, "torch": "2.13", "commit": "abc"}]).to_csv(tmp_path / "m.csv", index=False)
    table = perf.ratio_table(perf.load_benchmarks(tmp_path))
    assert table.loc[0, "recdrop / torch.nn"] == 1.5 and table.loc[0, "commit"] == "abc"
    assert perf.load_benchmarks(tmp_path / "empty").empty
