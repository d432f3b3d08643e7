"""The benchmark scripts run end to end on the CPU, as a lease runs them on a GPU (a lease spent on a
script that breaks at its first step is lost): a fused pair of Table 2's word LMs, one step each."""
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent.parent / "benchmarks"))
import bench_groups  # noqa: E402
import bench_layers  # noqa: E402
import profile_group  # noqa: E402


@pytest.fixture
def stacked(monkeypatch):
    monkeypatch.setenv("RECDROP_STACK_ON_CPU", "1")  # a GPU's way: the pair as one model


def test_bench_groups_times_a_stacked_pair_and_names_its_path(stacked, capsys):
    bench_groups.main(["--sizes", "2", "--repeats", "1", "--min-s", "0", "--warmup-s", "0", "--threads", "1"])
    out = capsys.readouterr().out
    assert "word R= 2: one at a time" in out and "warning" not in out


def test_bench_groups_builds_its_runs_once_and_with_group_only_times_the_group_alone(stacked, capsys, monkeypatch):
    built = []
    real = bench_groups.make_tasks
    monkeypatch.setattr(bench_groups, "make_tasks", lambda name, n, *a: built.append(n) or real(name, n, *a))
    bench_groups.main(["--sizes", "1", "2", "--group-only", "--repeats", "1", "--min-s", "0", "--warmup-s", "0",
                       "--threads", "1"])
    out = capsys.readouterr().out
    assert built == [2]  # the largest group's runs, the smaller groups their first ones
    assert "word R= 1: one at a time nan s" in out and "word R= 2: one at a time nan s" in out


@pytest.mark.parametrize("packed", [False, True])
def test_bench_layers_with_input_grad_gives_both_layers_the_inputs_gradient_to_compute(packed, monkeypatch):
    asked = []
    real = bench_layers.fwd_bwd

    def fwd_bwd(module, x, *args):
        real(module, x, *args)
        leaf = x.data if isinstance(x, bench_layers.PackedSequence) else x
        asked.append(leaf.requires_grad)
    monkeypatch.setattr(bench_layers, "fwd_bwd", fwd_bwd)
    rows = bench_layers.main(["--hidden", "8", "--seq", "3", "--batch", "2", "--repeats", "1", "--threads", "1",
                              "--kinds", "LSTM", "--input-grad"] + (["--packed"] if packed else []))
    assert [r["input_grad"] for r in rows] == [True] and asked and all(asked)
    assert rows[0]["ratio"] > 0


def test_profile_group_ranks_the_steps_operators_by_their_own_time(stacked, capsys):
    profile_group.main(["--runs", "2", "--steps", "1", "--top", "3", "--warmup-s", "0"])
    lines = [line.split() for line in capsys.readouterr().out.splitlines()
             if line.split()[:1] in (["step"], ["operator"])]
    assert [line[0] for line in lines] == ["step", "operator", "operator", "operator"]
    host_ms = [float(line[-3]) for line in lines[1:]]  # "... <ms> ms host"
    assert host_ms == sorted(host_ms, reverse=True) and host_ms[0] > 0


def test_profile_group_refuses_a_group_larger_than_a_table(capsys):
    with pytest.raises(SystemExit):
        profile_group.main(["--runs", "27"])
    assert "--runs must be between 1 and 26 (a table's cells), got 27" in capsys.readouterr().err  # not another error


def test_precision_check_trains_a_cell_in_float32_and_bf16_and_bounds_their_difference(capsys):
    import precision_check

    row = precision_check.main(["--scale", "ci", "--bound", "0.5"])
    assert row["within"] and abs(row["bf16"] - row["float32"]) <= 0.5
    assert row["bf16_path"].split(";")[0] == "fused" and "within 0.5" in capsys.readouterr().out  # the fast path
