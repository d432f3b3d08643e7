"""The benchmark bookkeeping: FLOP counts, peaks, and the tables the Performance page shows."""
import subprocess

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


def bench_row(**kw):
    return {"kind": "LSTM", "hidden": 256, "seq": 35, "scheme": "semeniuta", "torch_nn_ms": 1.0, "recdrop_ms": 1.5,
            "loop_ms": 3.0, "ratio": 1.5, "loop_over_recdrop": 2.0, "hardware": "cpu", "device": "cpu", "threads": 2,
            "torch": "2.13", "commit": "abc", "batch": 32, "tf32": False, **kw}


def test_ratio_table_has_a_column_per_scheme_and_the_provenance_once(tmp_path):
    pd.DataFrame([bench_row(), bench_row(scheme="gal", ratio=1.25), bench_row(hidden=1024, seq=100, ratio=1.1),
                  ]).to_csv(tmp_path / "m.csv", index=False)
    bench = perf.load_benchmarks(tmp_path)
    table = perf.ratio_table(bench)
    assert list(table.columns) == ["hardware", "input", "kind", "hidden x steps", "setting", "semeniuta", "gal",
                                   "measured", "timed"]
    assert table.to_dict("records")[0] == {"hardware": "cpu", "input": "padded", "kind": "LSTM",
                                           "hidden x steps": "256 x 35", "setting": "float32", "semeniuta": 1.5,
                                           "gal": 1.25, "measured": "—", "timed": "not recorded"}
    assert table.loc[1, "hidden x steps"] == "1024 x 100" and table.loc[1, "semeniuta"] == 1.1
    prov = perf.benchmark_files(bench)
    assert len(prov) == 1 and prov.loc[0, "commit"] == "abc" and prov.loc[0, "file"] == "m.csv"
    assert (perf.load_benchmarks(tmp_path / "empty").empty
            and perf.ratio_table(perf.load_benchmarks(tmp_path / "e")).empty)


def test_each_measurement_says_how_torch_nn_and_recdrop_were_timed(tmp_path):
    pd.DataFrame([bench_row(timing="in turn")]).to_csv(tmp_path / "a.csv", index=False)
    pd.DataFrame([bench_row(timing="each in a block", hardware="cpu2", date="2026-11-20")]).to_csv(tmp_path / "b.csv",
                                                                                              index=False)
    bench = perf.load_benchmarks(tmp_path)
    assert sorted(perf.ratio_table(bench)["timed"]) == ["each in a block, torch.nn's first", "in turn"]
    assert sorted(perf.answer_table(bench)["timed"]) == ["each in a block, torch.nn's first", "in turn"]
    assert perf.benchmark_files(bench).set_index("file").loc["b.csv", "timing"] == "each in a block"
    import sys
    sys.path.insert(0, str(perf.DATA_DIR.parent / "benchmarks"))
    import bench_layers
    assert bench_layers.TIMING in perf.TIMED  # what the benchmark writes, the page can name


def test_graph_speedups_are_the_time_without_graphs_over_the_time_with_them(tmp_path):
    pd.DataFrame([bench_row(device="cuda", hardware="H200", recdrop_ms=2.0, ungraphed_ms=8.0),
                  bench_row(device="cuda", hardware="H200", scheme="moon", recdrop_ms=4.0, ungraphed_ms=5.0),
                  bench_row()]).to_csv(tmp_path / "m.csv", index=False)  # the CPU row: not timed without graphs
    table = perf.graph_speedups(perf.load_benchmarks(tmp_path))
    assert table.to_dict("records") == [{"hardware": "H200", "input": "padded", "kind": "LSTM",
                                         "hidden x steps": "256 x 35", "setting": "float32", "semeniuta": 4.0,
                                         "moon": 1.25, "measured": "—", "timed": "not recorded"}]
    pd.DataFrame([bench_row()]).to_csv(tmp_path / "m.csv", index=False)
    assert perf.graph_speedups(perf.load_benchmarks(tmp_path)).empty


def test_a_benchmark_of_one_thread_reads_thread_in_the_singular_as_the_run_stamps_do(tmp_path):
    pd.DataFrame([bench_row(hardware="AMD EPYC (1 threads)"), bench_row(hardware="AMD EPYC (2 threads)")]).to_csv(
        tmp_path / "m.csv", index=False)  # written before hardware() said "1 thread"
    assert perf.load_benchmarks(tmp_path)["hardware"].tolist() == ["AMD EPYC (1 thread)", "AMD EPYC (2 threads)"]


def test_rows_from_uncommitted_code_are_refused(tmp_path):
    pd.DataFrame([bench_row(commit="abc-dirty")]).to_csv(tmp_path / "m.csv", index=False)
    with pytest.raises(ValueError, match="uncommitted code in \\['m.csv'\\]"):
        perf.load_benchmarks(tmp_path)


def test_gpu_targets_take_the_worst_current_cell_at_the_target_shapes(tmp_path):
    gpu = dict(device="cuda", hardware="H100", ungraphed_ms=2.0)  # a file of the CUDA graphs' time
    rows = [bench_row(**gpu, ratio=1.4, loop_over_recdrop=6.0),
            bench_row(**gpu, hidden=1024, seq=100, ratio=1.2, loop_over_recdrop=5.5),
            bench_row(**gpu, hidden=1024, seq=35, ratio=9.0, loop_over_recdrop=1.0),
            bench_row()]  # a CPU row and an off-target shape do not count
    pd.DataFrame(rows).to_csv(tmp_path / "m.csv", index=False)
    # nor a file from before the CUDA graphs (superseded: ``earlier_layers``)
    pd.DataFrame([bench_row(device="cuda", hardware="H100", ratio=5.0, loop_over_recdrop=1.5)]).to_csv(
        tmp_path / "old.csv", index=False)
    t = perf.gpu_targets(perf.load_benchmarks(tmp_path))
    assert t["measured (worst cell)"].tolist() == ["1.40x", "5.50x"] and t["met"].tolist() == ["yes", "yes"]
    pd.DataFrame(rows + [bench_row(**gpu, scheme="moon", ratio=1.6, loop_over_recdrop=4.0)]
                 ).to_csv(tmp_path / "m.csv", index=False)
    assert perf.gpu_targets(perf.load_benchmarks(tmp_path))["met"].tolist() == ["no", "no"]


def test_cpu_targets_take_each_cpus_worst_scheme_at_the_lstm_and_tagger_shapes(tmp_path):
    tagger = dict(hidden=100, seq=30, batch=10, bidirectional=True, input_size=150)
    rows = [bench_row(ratio=1.1), bench_row(scheme="gal", ratio=1.25),  # the worst scheme counts
            bench_row(**tagger, ratio=1.45),
            bench_row(hidden=512, seq=100, batch=16, ratio=3.0),  # an off-target shape,
            bench_row(input_grad=True, ratio=3.0), bench_row(kind="GRU", ratio=3.0),  # the input's gradient, a GRU,
            bench_row(hardware="other CPU (2 threads)", ratio=1.15),
            bench_row(device="cuda", hardware="H100", ratio=3.0, ungraphed_ms=2.0)]  # and a GPU do not
    pd.DataFrame(rows).to_csv(tmp_path / "m.csv", index=False)
    t = perf.cpu_targets(perf.load_benchmarks(tmp_path))
    assert t[["hardware", "measured (worst cell)", "met"]].values.tolist() == [
        ["cpu", "1.25x", "no"], ["cpu", "1.45x", "yes"], ["other CPU (2 threads)", "1.15x", "yes"]]
    lstm = "LSTM, hidden 256, 35 steps, batch 32: at most 1.2x torch.nn"
    assert t["target"].tolist() == [lstm, "the tagger's BiLSTM, hidden 100, 30 steps, batch 10: at most 1.5x torch.nn",
                                    lstm]
    assert perf.cpu_targets(perf.load_benchmarks(tmp_path / "none")).empty


def test_packed_rows_and_rows_with_the_inputs_gradient_are_their_own_rows_and_not_held_to_the_targets(tmp_path):
    pd.DataFrame([bench_row(device="cuda", hardware="H100", ratio=1.2, loop_over_recdrop=6.0, ungraphed_ms=2.0),
                  bench_row(device="cuda", hardware="H100", ratio=9.0, loop_over_recdrop=1.0, packed=True),
                  bench_row(device="cuda", hardware="H100", ratio=8.0, loop_over_recdrop=1.0, input_grad=True)]
                 ).to_csv(tmp_path / "m.csv", index=False)
    pd.DataFrame([bench_row(device="cuda", hardware="H100", ratio=7.0, loop_over_recdrop=1.0, autocast="bf16",
                            ungraphed_ms=2.0)]).to_csv(tmp_path / "n.csv", index=False)  # another setting
    bench = perf.load_benchmarks(tmp_path)
    assert perf.ratio_table(bench)[["input", "setting", "semeniuta"]].values.tolist() == [
        ["packed", "float32", 9.0], ["padded", "autocast bf16", 7.0], ["padded", "float32", 1.2],
        ["padded, with its gradient", "float32", 8.0]]
    assert perf.gpu_targets(bench)["met"].tolist() == ["yes", "yes"]
    answer = perf.answer_table(bench)
    assert answer["input"].tolist() == ["padded", "padded, with its gradient", "packed"]
    assert answer["recdrop's time / torch.nn's"].tolist() == ["1.20", "8.00", "9.00"]


def test_every_panel_of_time_per_step_is_a_machine_and_cell_that_was_timed():
    import matplotlib
    matplotlib.use("Agg")
    df = perf.load_benchmarks()
    some = df[(df["kind"] != "RNN") | (df["hardware"] != df["hardware"].iloc[0])]
    g = perf.plot_time_per_step(some)
    padded = some[~some["packed"].fillna(False).astype(bool)] if "packed" in some else some
    assert set(g.axes_dict) == set(perf.panel_names(padded, "kind"))
    assert f"{df['hardware'].iloc[0]}\nRNN" not in g.axes_dict  # not timed there: no empty panel
    assert all(ax.lines for ax in g.axes_dict.values())


def test_the_group_table_gives_each_group_sizes_speedup_per_machine_and_model(tmp_path):
    rows = [{"model": m, "runs": r, "alone_s": 1.0 * r, "group_s": r / s, "alone_runs_per_hour_of_steps": 3600.0,
             "group_runs_per_hour_of_steps": 3600.0 * s, "speedup": s, "hardware": "cpu", "device": "cpu",
             "threads": 1, "torch": "2.13", "commit": "abc", "batch": 32, "tf32": False, "date": "2026-11-28"}
            for m, r, s in [("word", 1, 1.0), ("word", 26, 0.9), ("char", 1, 1.1)]]
    pd.DataFrame(rows).to_csv(tmp_path / "g.csv", index=False)
    table = perf.group_table(perf.load_benchmarks(tmp_path))
    assert list(table.columns) == ["hardware", "step", "measured", "model", "threads", "R = 1", "R = 26"]
    assert set(table["measured"]) == {"2026-11-28"}  # when, not which commit: the commits are in the provenance
    assert set(table["step"]) == {"eager, float32"}  # rows from before the step graph: eager
    by_model = table.set_index("model")
    assert by_model.loc["word", "R = 26"] == 0.9 and by_model.loc["char", "R = 1"] == 1.1
    assert pd.isna(by_model.loc["char", "R = 26"])  # not measured: no number
    assert perf.group_table(perf.load_benchmarks(tmp_path / "none")).empty
    pd.DataFrame(rows[:2]).assign(hardware="gpu").to_csv(tmp_path / "h.csv", index=False)  # no char row there
    g = perf.plot_group_speedup(perf.load_benchmarks(tmp_path))
    assert set(g.axes_dict) == {"word LM", "char LM"}  # a panel per model, a line per machine: none empty
    def machines(model):  # the lines with markers and data: not the dotted line at 1, nor the legend's
        return sorted(len(line.get_xdata()) for line in g.axes_dict[model].lines
                      if line.get_marker() == "o" and len(line.get_xdata()))
    assert machines("word LM") == [2, 2] and machines("char LM") == [1]
    assert perf.plot_group_speedup(perf.load_benchmarks(tmp_path / "none")) is None


def test_a_group_benchmark_at_another_scale_is_its_own_model(tmp_path):
    """A lease times Table 3's reduced groups beside the paper's: a row's scale names its model, so that the
    reduced shapes' speed-ups are not read as the paper's (a row without a scale is the paper's)."""
    rows = [{"model": "char", "runs": r, "alone_s": 0.01 * r, "group_s": 0.01, "speedup": float(r),
             "hardware": "gpu", "device": "cuda", "threads": 2, "commit": "abc", "tf32": False, "precision": "float32",
             "date": "2026-11-29", **({} if scale is None else {"scale": scale})}
            for r in (1, 13) for scale in (None, "paper", "reduced")]
    pd.DataFrame(rows).to_csv(tmp_path / "g.csv", index=False)
    groups = perf.load_groups(tmp_path)
    assert sorted(set(groups["model"])) == ["char", "char-reduced"]
    answer = perf.grid_answer_table(groups)
    assert sorted(answer["model"]) == ["char LM", "char LM, reduced"]


def test_the_grid_answer_gives_the_largest_group_of_each_newest_measurement(tmp_path):
    def rows(date, precision, speedups):
        return [{"model": "word", "runs": r, "alone_s": 0.001 * r, "group_s": 0.001 * r / s, "speedup": s,
                 "hardware": "gpu", "device": "cuda", "threads": 2, "commit": "abc", "tf32": precision == "tf32",
                 "precision": precision, "step": "cuda-graph", "date": date} for r, s in speedups]
    pd.DataFrame(rows("2026-11-20", "tf32", [(1, 1.0), (26, 1.8)])).to_csv(tmp_path / "old.csv", index=False)
    pd.DataFrame(rows("2026-11-28", "tf32", [(1, 1.0), (8, 1.9), (26, 2.2)])).to_csv(tmp_path / "new.csv", index=False)
    pd.DataFrame(rows("2026-11-21", "bf16", [(26, 40.0)])).to_csv(tmp_path / "bf16.csv", index=False)
    groups = perf.load_benchmarks(tmp_path)
    assert set(groups[perf.superseded_groups(groups)]["file"]) == {"old.csv"}  # measured again since, same precision
    answer = perf.grid_answer_table(groups).set_index("how")
    assert sorted(answer.index) == ["cuda-graph, TF32", "cuda-graph, bf16 autocast"]
    assert answer.loc["cuda-graph, TF32", "runs R"] == 26
    assert answer.loc["cuda-graph, TF32", "the group's speed-up"] == 2.2
    assert answer.loc["cuda-graph, TF32", "a step of the R runs, one at a time (ms)"] == 26.0
    assert answer.loc["cuda-graph, TF32", "as one stacked group (ms)"] == round(26 / 2.2, 1)
    assert answer.loc["cuda-graph, TF32", "measured"] == "2026-11-28" and set(answer["model"]) == {"word LM"}


def test_a_stacked_benchmark_is_one_row_whatever_path_each_size_recorded(tmp_path):
    """A row's ``path`` is its first run's last route: at one run torch.nn's, and in one measured file the
    8-run group's too (unexplained); the benchmark is named by its largest group's path, and one without
    stacking, or measured another day, stays apart. A file without paths is read beside it, and a file
    is one measurement, one row, whatever commits its sizes name."""
    rows = [{"model": "word", "runs": r, "speedup": s, "hardware": "NVIDIA H200", "threads": 2, "commit": "abc",
             "date": d, "tf32": True, "precision": "tf32", "step": "cuda-graph", "path": p,
             "alone_runs_per_hour_of_steps": 1.0, "group_runs_per_hour_of_steps": s}
            for d, r, s, p in [("2026-11-28", 1, 1.0, "torch.nn"), ("2026-11-28", 8, 1.95, "torch.nn"),
                               ("2026-11-28", 26, 2.17, "fused, 26 runs stacked"), ("2026-11-20", 1, 0.99, None),
                               ("2026-11-20", 26, 1.78, None)]]
    pd.DataFrame(rows[:3]).to_csv(tmp_path / "new.csv", index=False)
    pd.DataFrame(rows[3:]).drop(columns=["path", "precision"]).to_csv(tmp_path / "old.csv", index=False)
    pd.DataFrame([{**rows[2], "date": "2026-11-29", "speedup": 2.5}]).to_csv(tmp_path / "newer.csv", index=False)
    pd.DataFrame([{**r, "model": "char", "commit": c} for r, c in zip(rows[3:], ["abc", "abd"])]).drop(
        columns=["path", "precision"]).to_csv(tmp_path / "two.csv", index=False)  # one file, two commits
    table = perf.group_table(perf.load_benchmarks(tmp_path)).set_index(["step", "measured", "model"])
    assert sorted(table.index) == [("cuda-graph, TF32", "2026-11-20", "char"),
                                   ("cuda-graph, TF32", "2026-11-20", "word"),
                                   ("cuda-graph, TF32, stacked", "2026-11-28", "word"),
                                   ("cuda-graph, TF32, stacked", "2026-11-29", "word")]
    assert table.loc[("cuda-graph, TF32, stacked", "2026-11-28", "word"), "R = 8"] == 1.95
    assert table.loc[("cuda-graph, TF32, stacked", "2026-11-29", "word"), "R = 26"] == 2.5
    assert table.loc[("cuda-graph, TF32", "2026-11-20", "word"), "R = 26"] == 1.78
    assert table.loc[("cuda-graph, TF32", "2026-11-20", "char"), "R = 1"] == 0.99
    pd.DataFrame([{**rows[2], "date": "2026-11-30", "path": "loop, 26 runs stacked"}]).to_csv(tmp_path / "loop.csv",
                                                                                            index=False)
    table = perf.group_table(perf.load_benchmarks(tmp_path)).set_index(["step", "measured", "model"])
    assert ("cuda-graph, TF32, stacked, per-step loop", "2026-11-30", "word") in table.index  # not the fused path
    pd.DataFrame([{**rows[2], "date": "2026-12-01", "path": "fused+cpp; loop, 26 runs stacked"}]).to_csv(
        tmp_path / "mixed.csv", index=False)  # layers that took two bodies: one of them the loop
    table = perf.group_table(perf.load_benchmarks(tmp_path)).set_index(["step", "measured", "model"])
    assert ("cuda-graph, TF32, stacked, per-step loop", "2026-12-01", "word") in table.index


def test_a_bidirectional_row_with_its_own_input_size_is_a_row_of_its_own(tmp_path):
    pd.DataFrame([bench_row(), bench_row(hidden=100, seq=30, batch=10, bidirectional=True, input_size=150, ratio=1.3),
                  bench_row(bidirectional=False, input_size=256, ratio=1.4)]).to_csv(tmp_path / "m.csv", index=False)
    table = perf.ratio_table(perf.load_benchmarks(tmp_path)).set_index(["kind", "hidden x steps"])
    assert table.loc[("BiLSTM", "100 x 30, input 150"), "semeniuta"] == 1.3
    assert table.loc[("LSTM", "256 x 35"), "semeniuta"] in (1.5, 1.4) and len(table) == 2  # a missing flag: False


def test_provenance_dates_each_file_by_its_rows_or_its_commit(tmp_path):
    head = subprocess.run(["git", "rev-parse", "--short=10", "HEAD"], capture_output=True, text=True, check=True,
                          cwd=perf.DATA_DIR.parent).stdout.strip()
    pd.DataFrame([{"hardware": "cpu", "commit": head, "date": "2026-11-26"}]).to_csv(tmp_path / "a.csv", index=False)
    pd.DataFrame([{"hardware": "cpu", "commit": head}]).to_csv(tmp_path / "b.csv", index=False)
    dates = perf.benchmark_files(perf.load_benchmarks(tmp_path)).set_index("file")["date"]
    assert dates["a.csv"] == "2026-11-26" and dates["b.csv"].startswith("on or after 20")


def test_provenance_gives_a_batch_size_as_a_whole_number_where_a_file_has_none(tmp_path):
    pd.DataFrame([{"hardware": "cpu", "commit": "abc", "batch": 32}]).to_csv(tmp_path / "a.csv", index=False)
    pd.DataFrame([{"hardware": "cpu", "commit": "abc"}]).to_csv(tmp_path / "b.csv", index=False)
    batch = perf.benchmark_files(perf.load_benchmarks(tmp_path)).set_index("file")["batch"]
    assert batch["a.csv"] == 32 and str(batch["a.csv"]) == "32" and pd.isna(batch["b.csv"])


def test_a_commit_that_reads_as_a_number_stays_the_commit(tmp_path):
    """A short hash of digits around one "e" (8543e07767) is a float to pandas unless told otherwise."""
    pd.DataFrame([{"hardware": "cpu", "commit": "8543e07767"}, {"hardware": "cpu", "commit": "0012345678"}]
                 ).to_csv(tmp_path / "a.csv", index=False)
    assert list(perf.load_benchmarks(tmp_path)["commit"]) == ["8543e07767", "0012345678"]


def test_time_per_step_joins_only_the_hidden_sizes_of_one_shape_on_padded_input(tmp_path):
    """The tagger files' two shapes (25 x 15, input 25; 100 x 30, input 150) are two points, not one line;
    the language models' hidden sizes at 35 steps are one line; a packed row is not drawn, nor a row
    with the input's gradient."""
    import matplotlib
    matplotlib.use("Agg")
    rows = [bench_row(hidden=25, seq=15, input_size=25, batch=10, bidirectional=True),
            bench_row(hidden=100, seq=30, input_size=150, batch=10, bidirectional=True),
            bench_row(hidden=256, seq=35), bench_row(hidden=1024, seq=35),
            bench_row(hidden=1024, seq=35, packed=True, recdrop_ms=500.0),
            bench_row(hidden=1024, seq=35, input_grad=True, recdrop_ms=600.0)]
    pd.DataFrame(rows).to_csv(tmp_path / "m.csv", index=False)
    g = perf.plot_time_per_step(perf.load_benchmarks(tmp_path))
    ax = g.axes_dict["cpu\nLSTM"]
    xs = sorted(tuple(line.get_xdata()) for line in ax.lines if len(line.get_xdata()))
    recdrop_lines = [x for x in xs if x == (256.0, 1024.0)]
    assert recdrop_lines and all(len(x) <= 2 for x in xs)
    assert not any(set(x) & {25.0} and set(x) & {100.0} for x in xs)  # no line between the two tagger shapes
    assert max(y for line in ax.lines for y in line.get_ydata()) < 500.0 / 35  # nor the packed, nor the gradient's


def test_the_answer_for_a_library_user_leaves_out_gpu_rows_from_before_the_graphs(tmp_path):
    rows = [bench_row(scheme="semeniuta", ratio=r, hidden=h, device=d, hardware=hw, ungraphed_ms=u, packed=p,
                      date="2026-11-28")
            for d, hw, h, r, u, p in [("cuda", "GPU new", 256, 0.6, 1.0, False),
                                      ("cuda", "GPU new", 1024, 0.8, 2.0, False), ("cpu", "CPU", 256, 1.3, None, True)]]
    pd.DataFrame(rows).to_csv(tmp_path / "new.csv", index=False)
    pd.DataFrame([bench_row(scheme="semeniuta", ratio=5.4, device="cuda", hardware="GPU old", date="2026-11-20")]
                 ).to_csv(tmp_path / "old.csv", index=False)  # no row timed without the graphs: before them
    df = perf.load_benchmarks(tmp_path)
    assert perf.before_graphs(df).tolist() == [False, False, False, True]
    t = perf.answer_table(df)
    assert t["hardware"].tolist() == ["GPU new", "CPU"]  # the GPU first; the old GPU's rows superseded
    assert t.set_index("hardware").loc["GPU new", "recdrop's time / torch.nn's"] == "0.60–0.80"
    assert t.set_index("hardware").loc["CPU", "input"] == "packed"
    assert t["shapes"].tolist() == [2, 1] and set(t["measured"]) == {"2026-11-28"}


def test_a_cell_measured_again_on_a_later_day_supersedes_the_earlier_one_and_no_other(tmp_path):
    pd.DataFrame([bench_row(ratio=1.3, date="2026-11-22"), bench_row(scheme="gal", ratio=1.4, date="2026-11-22"),
                  bench_row(hidden=1024, ratio=1.0, date="2026-11-22"),
                  bench_row(ratio=1.3, autocast="bf16", date="2026-11-22")]).to_csv(tmp_path / "old.csv", index=False)
    pd.DataFrame([bench_row(ratio=1.1, date="2026-11-29")]).to_csv(tmp_path / "new.csv", index=False)
    df = perf.load_benchmarks(tmp_path)
    old = perf.superseded_layers(df)
    assert df.loc[old, "file"].tolist() == ["old.csv"] and df.loc[old, "ratio"].tolist() == [1.3]
    current = perf.ratio_table(df[~old]).set_index(["hidden x steps", "setting", "measured"])
    assert current.loc[("256 x 35", "float32", "2026-11-29"), "semeniuta"] == 1.1
    assert pd.isna(current.loc[("256 x 35", "float32", "2026-11-22"), "semeniuta"])  # only gal's stays
    assert current.loc[("256 x 35", "float32", "2026-11-22"), "gal"] == 1.4
    assert current.loc[("256 x 35", "autocast bf16", "2026-11-22"), "semeniuta"] == 1.3  # another setting
    answer = perf.answer_table(df)  # float32 only, the newest of each cell
    assert answer[["recdrop's time / torch.nn's", "shapes", "measured"]].values.tolist() == [
        ["1.10", 1, "2026-11-29"], ["1.00", 1, "2026-11-22"]]


def test_the_matmul_table_names_the_faster_library_where_a_file_has_it():
    base = {"product": "p", "m": 2, "k": 3, "n": 4, "torch_mm_gflops": 60.0, "recdrop_gflops": 70.0,
            "hardware": "AMD EPYC (2 threads)", "library": "onednn", "onednn_gflops": 70.5}
    df = pd.DataFrame([{**base, "best_library": "onednn", "best_over_chosen": 1.0}, base])  # a newer file, an older
    table = perf.matmul_table(df)
    assert list(table["m × k × n"]) == ["2 × 3 × 4"] * 2
    assert table.loc[0, "faster here"] == "onednn" and table.loc[0, "chosen's time / faster's"] == 1.0
    assert table.loc[1, ["faster here", "chosen's time / faster's"]].isna().all()  # not measured then
    assert list(table["recdrop chose"]) == ["onednn", "onednn"]


def test_the_product_table_names_the_cpus_whose_layers_were_timed_but_not_their_products():
    layers = pd.DataFrame({"hardware": ["AMD EPYC (2 threads)", "Intel(R) Xeon(R) Processor (1 thread)", "H200"],
                           "device": ["cpu", "cpu", "cuda"]})
    matmuls = pd.DataFrame({"hardware": ["AMD EPYC (1 thread)"]})
    assert perf.cpus_without_products(matmuls, layers) == ["Intel(R) Xeon(R) Processor"]
    assert perf.cpus_without_products(pd.DataFrame(), layers) == ["AMD EPYC", "Intel(R) Xeon(R) Processor"]
    assert perf.cpus_without_products(matmuls, pd.DataFrame()) == []


def test_every_stored_layer_benchmark_says_how_it_was_timed():
    stored = perf.load_benchmarks()
    assert not stored.empty and stored["timing"].isin(list(perf.TIMED)).all()
