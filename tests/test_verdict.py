"""The verdict table and the facts the results paragraphs cite: computed from tidy tables and
run folders, with one clear error for bad input."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pandas as pd
import pytest

from mathagent import metrics, paths, results, run_facts, simulation, verdict


def tidy(selector, seed, evals, steps=4, rollout=0.5, length=(100.0, 100.0)):
    rows = [{"selector": selector, "seed": seed, "step": 0, "rollout_accuracy": np.nan,
             "eval_accuracy": evals[0], "effective_task_ratio": np.nan}]
    for s in range(1, steps + 1):
        rows.append({"selector": selector, "seed": seed, "step": s, "rollout_accuracy": rollout,
                     "eval_accuracy": evals[1] if s == steps else np.nan,
                     "effective_task_ratio": 0.5,
                     "response_length": length[0] if s <= steps // 2 else length[1]})
    return rows


def table_of(*runs):
    return pd.DataFrame([r for run in runs for r in run])


def test_difference_is_welch_over_seeds():
    ps = pd.DataFrame({"selector": ["a", "a", "a", "b", "b"],
                       "eval_final": [0.1, 0.2, 0.3, 0.1, 0.1]})
    d = metrics.difference(ps, "a", "b")
    assert d["diff"] == pytest.approx(0.1)
    assert d["se"] == pytest.approx(np.sqrt(0.01 / 3))
    assert d["z"] == pytest.approx(0.1 / np.sqrt(0.01 / 3))
    assert np.isnan(metrics.difference(ps.iloc[2:], "a", "b")["se"])  # one seed of a
    with pytest.raises(metrics.TableError, match="'c'"):
        metrics.difference(ps, "c", "b")


def test_who_won_names_a_clear_winner_and_a_tie():
    clear = table_of(tidy("random", 0, (0.1, 0.2)), tidy("random", 1, (0.1, 0.22)),
                     tidy("difficulty_based", 0, (0.1, 0.40)),
                     tidy("difficulty_based", 1, (0.1, 0.41)))
    tie = table_of(tidy("random", 0, (0.1, 0.2)), tidy("random", 1, (0.1, 0.3)),
                   tidy("difficulty_based", 0, (0.1, 0.21)),
                   tidy("difficulty_based", 1, (0.1, 0.31)))
    ev = [verdict.Evidence("clear", clear, 4, 2), verdict.Evidence("tie", tie, 8, 8)]
    won = verdict.who_won(ev).set_index("source")
    assert won.loc["clear", "best"] == "difficulty_based"
    assert "clear" in won.loc["clear", "reading"] and "not clear" in won.loc["tie", "reading"]
    table = verdict.evidence_table(ev)
    assert list(table.columns) == list(verdict.COLUMNS)
    assert list(table["selector"]) == ["random", "difficulty_based"] * 2  # baseline first
    assert table["vs_random"].isna().tolist() == [True, False, True, False]
    assert set(table["batch"]) == {"4 x 2", "8 x 8"}


def test_who_won_says_which_selector_an_experiment_under_way_has_no_runs_of():
    """A source with runs of the baseline only (an experiment that fills a run at a time) is
    read as far as it goes, its reading naming the selector it has no runs of yet."""
    only_random = table_of(tidy("random", 0, (0.16, 0.39)))
    won = verdict.who_won([verdict.Evidence("under way", only_random, 16, 8)]).iloc[0]
    assert (won["best"], won["reading"]) == ("random", "no difficulty_based runs yet")
    assert won["best_eval_final"] == pytest.approx(0.39)
    row = verdict.evidence_table([verdict.Evidence("under way", only_random, 16, 8)]).iloc[0]
    assert (row["selector"], row["seeds"]) == ("random", 1)
    assert row["eval_final"] == pytest.approx(0.39)
    assert np.isnan(row["vs_random"])
    # a seed more of difficulty_based: read over the seeds each has, the reading says so
    more = table_of(tidy("random", 0, (0.1, 0.2)), tidy("random", 1, (0.1, 0.3)),
                    *(tidy("difficulty_based", s, (0.1, a)) for s, a in ((0, 0.21), (1, 0.31),
                                                                          (2, 0.26))))
    won = verdict.who_won([verdict.Evidence("three", more, 16, 8)]).iloc[0]
    assert won["seeds"] == 3 and (won["best"], won["best_seeds"]) == ("difficulty_based", 3)
    assert won["reading"].endswith("not clear (3 seeds against 2)")
    row = verdict.evidence_table([verdict.Evidence("three", more, 16, 8)]).set_index("selector")
    assert row["seeds"].to_dict() == {"random": 2, "difficulty_based": 3}
    assert row.at["difficulty_based", "vs_random"] == pytest.approx(0.26 - 0.25)
    # TTB over the two paired seeds, both at random's best at step 4; seed 2 is not a miss
    assert (row.at["difficulty_based", "ttb"], row.at["difficulty_based", "ttb_reached"]) == (
        1.0, 1.0)
    # a third selector of one seed comes first: named with its one seed, no margin over seeds
    third = table_of(*(tidy("random", s, (0.1, a)) for s, a in ((0, 0.2), (1, 0.3))),
                     *(tidy("difficulty_based", s, (0.1, a)) for s, a in ((0, 0.21), (1, 0.31))),
                     tidy("bots", 0, (0.1, 0.4)))
    won = verdict.who_won([verdict.Evidence("third arm", third, 16, 8)]).iloc[0]
    assert (won["best"], won["best_seeds"], won["runner_up"]) == ("bots", 1, "difficulty_based")
    assert np.isnan(won["best_vs_runner_up_z"])
    assert won["reading"] == "difficulty_based vs random: +0.1 SE, not clear"
    # without the baseline there is nothing to measure against: one line naming the source
    only_difficulty = table_of(tidy("difficulty_based", 0, (0.16, 0.39)))
    with pytest.raises(results.RunError, match="source 'first': baseline selector 'random'"):
        verdict.who_won([verdict.Evidence("first", only_difficulty, 16, 8)])


def test_eval_step_is_the_last_evaluation_every_seed_reached():
    t = table_of(tidy("random", 0, (0.1, 0.2), steps=6), tidy("random", 1, (0.1, 0.3), steps=6),
                 tidy("difficulty_based", 0, (0.1, 0.4), steps=6),
                 tidy("difficulty_based", 1, (0.1, 0.5), steps=6))
    t.loc[(t["step"] == 3) & (t["seed"] == 1), "eval_accuracy"] = 0.25
    assert set(verdict.evidence_table([verdict.Evidence("x", t, 1, 1)])["eval_step"]) == {6}
    t.loc[(t["step"] == 6) & (t["seed"] == 1) & (t["selector"] == "random"),
          "eval_accuracy"] = float("nan")
    assert set(verdict.evidence_table([verdict.Evidence("x", t, 1, 1)])["eval_step"]) == {3}


def test_evidence_table_names_a_source_without_its_baseline():
    t = table_of(tidy("difficulty_based", 0, (0.1, 0.2)))
    with pytest.raises(results.RunError, match="'lonely'.*random"):
        verdict.evidence_table([verdict.Evidence("lonely", t, 1, 1)])


def test_gather_reads_the_folders_with_runs_and_report_prints_both_tables(tmp_path):
    sim = table_of(tidy("random", 0, (0.1, 0.2)), tidy("random", 1, (0.1, 0.22)),
                   tidy("difficulty_based", 0, (0.1, 0.40)),
                   tidy("difficulty_based", 1, (0.1, 0.41)))
    first = verdict.Evidence("made up", sim, 4, 2)
    ev = verdict.gather({"Trinity-RFT": paths.RESULTS_DIR / "trinity_h200",
                         "nothing": tmp_path}, first)
    assert [e.source for e in ev] == ["made up", "Trinity-RFT"]
    assert (ev[1].tasks, ev[1].replies) == (8, 8)
    text = verdict.report(ev)
    table, won = text.split("\n\n")
    assert table.split("\n")[0].split() == list(verdict.COLUMNS)
    assert len(table.split("\n")) == 1 + 4 and len(won.split("\n")) == 1 + 2
    assert "ahead of random by" in won and "not clear" in won


def test_shape_comes_from_params_of_either_launcher(tmp_path):
    assert verdict.shape_of(paths.RESULTS_DIR / "grpo_h200") == (32, 8)
    assert verdict.shape_of(paths.RESULTS_DIR / "trinity_h200") == (8, 8)
    (tmp_path / "params.json").write_text(json.dumps({"config": "x.yaml"}))
    with pytest.raises(results.RunError, match="params.json: neither"):
        verdict.shape_of(tmp_path)
    with pytest.raises(results.RunError, match="no params.json"):
        verdict.shape_of(tmp_path / "empty")


def test_evidence_specs_compare_the_reference_target_with_others():
    labels = [s.label for s in simulation.evidence_specs(8, (0.5, 0.8))]
    assert labels == ["random", "offline_easy2hard", "difficulty_based",
                      "difficulty_based target=0.5"]
    kwargs = {s.label: s.kwargs for s in simulation.evidence_specs(8, (0.5,))}
    assert kwargs["difficulty_based"]["target_reward"] == 0.8
    assert kwargs["difficulty_based target=0.5"]["target_reward"] == 0.5


@pytest.mark.parametrize("value, text", [(0.003, "0.0030"), (0.902, "0.90"), (4.94, "4.9"),
                                         (108.4, "108"), (0.0, "0"), (np.nan, "-"),
                                         (np.float32("nan"), "-"), (np.inf, "inf"),
                                         (-np.inf, "-inf")])
def test_fmt_quotes_two_significant_digits(value, text):
    assert run_facts.fmt(value) == text


def test_span_is_a_range_or_one_value():
    assert run_facts.span([6.48, 7.02, 6.9], 1) == "6.5-7.0"
    assert run_facts.span([6.5, 6.5]) == "6.5"
    assert run_facts.span([np.nan]) == "-"


def test_first_last_reads_the_ends_of_each_run():
    t = table_of(tidy("random", 0, (0.01, 0.05), steps=20, length=(120.0, 12.0)))
    row = run_facts.first_last(t, window=10).loc[("random", 0)]
    assert row["reply tokens, first 10"] == "120" and row["reply tokens, last 10"] == "12"
    assert row["held-out, step 0"] == "0.010" and row["held-out, last"] == "0.050"
    assert row["steps"] == "20" and row["last eval step"] == "20"


def test_engine_timing_agrees_with_the_committed_tables():
    folder = paths.RESULTS_DIR / "trinity_h200"
    facts = run_facts.engine_timing(folder)
    memory = pd.read_csv(folder / "gpu_memory.csv", index_col=0)
    lo, hi = facts["a pair's two runs, peaks added, GiB"].split("-")
    total = memory.loc["run, all processes (sum at one time)"]
    pairs = [total[f"random_seed{s}"] + total[f"difficulty_seed{s}"] for s in (0, 1, 2)]
    assert (float(lo), float(hi)) == (round(min(pairs)), round(max(pairs)))
    compile_lo, compile_hi = map(float, facts["of which torch.compile, s"].split("-"))
    init_lo, _ = map(float, facts["vLLM engine init, s"].split("-"))
    assert 0 < compile_lo <= compile_hi < init_lo


def _evaluated_run(folder, name: str, selector: str, seed: int, evals: dict) -> None:
    """A Trinity run folder whose explorer logged, as Trinity does, 16 steps and held-out
    evaluations ``{step: (accuracy, tasks)}`` on taskset ``arith``."""
    from trinity.common.config import Config
    from trinity.utils.monitor import TensorboardMonitor

    job = folder / name
    config = Config()
    config.monitor.cache_dir = str(job / "monitor")
    monitor = TensorboardMonitor("P", "", name, "explorer", config)
    for step in range(1, 17):
        logged = {"rollout/accuracy/mean": 0.3}
        if step in evals:
            logged.update({"eval/arith/accuracy/mean@4": evals[step][0],
                           "eval/arith/finished_task_count": evals[step][1]})
        monitor.log(logged, step)
    monitor.close()
    (job / "params.json").write_text(json.dumps({"selector": selector, "seed": seed,
                                                 "eval_taskset": "arith"}))


def test_paired_evaluations_put_a_seeds_two_runs_side_by_side(tmp_path):
    """Per seed with both selectors, per evaluation both made: the accuracies, the difference,
    the bound on its evaluation error from each run's own task count, and z. A seed with one
    selector, an evaluation only one run made and another selector's run make no row."""
    _evaluated_run(tmp_path, "random_seed0", "random", 0, {8: (0.352, 660), 16: (0.389, 600)})
    _evaluated_run(tmp_path, "difficulty_seed0", "difficulty_based", 0,
                   {8: (0.30, 660), 16: (0.45, 640), 12: (0.4, 660)})
    _evaluated_run(tmp_path, "random_seed1", "random", 1, {8: (0.3, 660)})
    _evaluated_run(tmp_path, "bots_seed0", "bots", 0, {8: (0.9, 660)})
    table = run_facts.paired_evaluations(tmp_path)
    assert table.columns.tolist() == ["seed", "step", "random", "difficulty_based",
                                      "difference", "evaluation SE, at most",
                                      "z (size at least)"]
    se8 = np.sqrt(0.352 * 0.648 / 660 + 0.30 * 0.70 / 660)
    se16 = np.sqrt(0.389 * 0.611 / 600 + 0.45 * 0.55 / 640)   # each run's own task count
    assert table.values.tolist() == [
        [0, 8, "0.352", "0.300", "-0.052", f"{se8:.4f}", f"{-0.052 / se8:+.1f}"],
        [0, 16, "0.389", "0.450", "+0.061", f"{se16:.4f}", f"{0.061 / se16:+.1f}"]]
    assert run_facts.paired_evaluations(tmp_path, studied="bots").values.tolist()[0][:5] == [
        0, 8, "0.352", "0.900", "+0.548"]
    # both at an accuracy of 0: no error to measure a difference in
    _evaluated_run(tmp_path / "zero", "random_seed0", "random", 0, {8: (0.0, 660)})
    _evaluated_run(tmp_path / "zero", "difficulty_seed0", "difficulty_based", 0, {8: (0.0, 660)})
    assert run_facts.paired_evaluations(tmp_path / "zero").values.tolist() == [
        [0, 8, "0.000", "0.000", "+0.000", "0.0000", "-"]]
    # no pair yet: an empty table; the committed experiment has its runs' pairs, if any
    assert run_facts.paired_evaluations(tmp_path / "zero" / "random_seed0").empty
    committed = run_facts.paired_evaluations(paths.RESULTS_DIR / "trinity_h200")
    assert committed[["seed", "step"]].values.tolist() == [[s, k] for s in (0, 1, 2)
                                                            for k in (0, 10, 20, 30, 40)]


def test_paired_evaluations_refuse_what_they_cannot_pair_in_one_line(tmp_path):
    _evaluated_run(tmp_path / "twice", "random_seed0", "random", 0, {8: (0.3, 660)})
    _evaluated_run(tmp_path / "twice", "random_again_seed0", "random", 0, {8: (0.3, 660)})
    with pytest.raises(results.RunError, match=r"random seed 0 a second time \(also "):
        run_facts.paired_evaluations(tmp_path / "twice")
    # a tidy table without event files has no task counts
    run = tmp_path / "tidy" / "difficulty_seed0"
    run.mkdir(parents=True)
    (run / "params.json").write_text('{"selector": "difficulty_based", "seed": 0}')
    rows = [{"selector": "difficulty_based", "seed": 0, "step": 10, "rollout_accuracy": 0.1,
             "eval_accuracy": 0.2, "eval_taskset": "arith"}]
    pd.DataFrame(rows).to_csv(run / "results.csv", index=False)
    with pytest.raises(results.RunError, match="difficulty_seed0: no TensorBoard event files"):
        run_facts.paired_evaluations(tmp_path / "tidy")
    # evaluations that name no taskset
    pd.DataFrame(rows).drop(columns="eval_taskset").to_csv(run / "results.csv", index=False)
    with pytest.raises(results.RunError, match="difficulty_seed0: its held-out evaluations name "
                                               "no eval taskset"):
        run_facts.paired_evaluations(tmp_path / "tidy")
    # an evaluation the events give no task count for
    _evaluated_run(tmp_path / "count", "random_seed0", "random", 0, {8: (0.3, 660)})
    rows[0].update({"selector": "random", "step": 12})
    pd.DataFrame(rows).to_csv(tmp_path / "count" / "random_seed0" / "results.csv", index=False)
    with pytest.raises(results.RunError, match=r"random_seed0: no eval/arith/finished_task_count"
                                               r" at step 12"):
        run_facts.paired_evaluations(tmp_path / "count")


def test_batch_levels_read_each_kept_steps_tasks_from_the_taskset(tmp_path):
    """The levels of the tasks a run's kept steps drew: per step the distinct questions, the
    means of the taskset's columns over them and the range of the first; a question the split
    does not hold, or a column it lacks, is one line naming the file and step or the column."""
    tasks = pd.DataFrame({"question": [f"q{k}" for k in range(6)],
                          "difficulty": [0, 1, 2, 8, 9, 10],
                          "qwen_bare_pass_rate": [0.9, 0.7, 0.5, 0.1, 0.0, 0.0]})
    run = tmp_path / "difficulty_seed0"
    run.mkdir()
    drawn = {1: ["q3", "q4", "q5", "q5"], 16: ["q0", "q1", "q2"]}   # a question twice: once
    (run / "samples.jsonl").write_text("".join(
        json.dumps({"step": step, "question": q, "truth": None, "reward": 0.0,
                    "response": "x"}) + "\n" for step, qs in drawn.items() for q in qs))
    levels = run_facts.batch_levels([run], tasks)
    assert levels.to_dict("records") == [
        {"run": "difficulty_seed0", "step": 1, "tasks": 3, "mean difficulty": 9.0,
         "mean qwen_bare_pass_rate": round(0.1 / 3, 2), "difficulty range": "8-10"},
        {"run": "difficulty_seed0", "step": 16, "tasks": 3, "mean difficulty": 1.0,
         "mean qwen_bare_pass_rate": 0.7, "difficulty range": "0-2"}]
    with pytest.raises(results.RunError, match=r"difficulty_seed0/samples.jsonl: step 1 asked "
                                               r"'q3', which the taskset split does not hold"):
        run_facts.batch_levels([run], tasks[tasks["question"] != "q3"])
    with pytest.raises(results.RunError, match="no column qwen_bare_pass_rate$"):
        run_facts.batch_levels([run], tasks.drop(columns="qwen_bare_pass_rate"))
    with pytest.raises(results.RunError, match="no samples.jsonl"):
        run_facts.batch_levels([tmp_path / "none"], tasks)


def test_replies_of_a_trinity_step_show_each_task_once_and_count_the_rest(tmp_path):
    """A Trinity run keeps one reply to each task of a step: each question heads its own reply,
    and past ``tasks`` questions the rest of the step is counted, with how many were rewarded."""
    records = [{"step": step, "question": f"Evaluate {k} + 1.", "truth": None,
                "reward": float(k % 2), "response": f"\\boxed{{{k + 1}}}"}
               for step in (1, 16) for k in range(5)]
    (tmp_path / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    replies = run_facts.saved_replies(tmp_path, steps=1)
    every = run_facts.replies_text(replies)
    assert every.count("step 1: Evaluate") == 5 and every.count("step 16: Evaluate") == 5
    assert "step 1: Evaluate 3 + 1.\n  reward 1, 1 words:\n      \\boxed{4}" in every
    few = run_facts.replies_text(replies, tasks=2)
    assert few.count("step 1: Evaluate") == 2
    assert "  ... 3 more tasks of step 1 (rewarded: 1 of their 3 replies)" in few
    assert "step 1: Evaluate 2 + 1." not in few
    # a reply whose question was not kept is still shown, under a placeholder
    records[0]["question"] = None
    (tmp_path / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    text = run_facts.replies_text(run_facts.saved_replies(tmp_path, steps=1))
    assert "step 1: (question not kept)\n  reward 0, 1 words:\n      \\boxed{1}" in text


def test_engine_timing_names_a_log_without_vllm(tmp_path):
    run = tmp_path / "random_seed0"
    run.mkdir()
    (run / "train_log_excerpt.txt").write_text("nothing here\n")
    with pytest.raises(results.RunError, match="train_log_excerpt.txt: no line"):
        run_facts.vllm_init(tmp_path)
    with pytest.raises(results.RunError, match="startup.csv: no such file"):
        run_facts.engine_timing(tmp_path)


def test_first_last_ratio_over_a_zero_start_is_inf():
    t = table_of(tidy("random", 0, (0.0, 0.05), steps=20, rollout=0.0))
    t.loc[t["step"] > 10, "rollout_accuracy"] = 0.2
    row = run_facts.first_last(t, window=10).loc[("random", 0)]
    assert row["rollout accuracy, last / first"] == "inf"


def test_replies_report_names_runs_with_and_without_replies(tmp_path):
    local, engine = paths.RESULTS_DIR / "trinity_h200_local", paths.RESULTS_DIR / "trinity_h200"
    text = run_facts.replies_report([local, engine], ["difficulty_seed0", "bogus_seed9"], 1)
    kept, missing = text.split("\n")[:2]
    assert "trinity_h200_local/difficulty_seed0" in kept and "trinity_h200/" not in kept
    assert "trinity_h200/random_seed0" in missing
    assert "== trinity_h200_local/difficulty_seed0 ==" in text
    assert text.count("\nstep ") == 2  # first and last step, one each
    assert "bogus_seed9: no saved replies in trinity_h200_local, trinity_h200" in text
    assert run_facts.run_folders([tmp_path]) == []
    with pytest.raises(results.RunError, match="no run folders"):
        run_facts.replies_report([tmp_path], ["x"])


def test_saved_replies_show_first_and_last_steps(tmp_path):
    run = paths.RESULTS_DIR / "trinity_h200_local" / "difficulty_seed0"
    replies = run_facts.saved_replies(run, steps=1)
    steps = sorted(set(replies["step"]))
    all_steps = sorted({json.loads(x)["step"] for x in
                        (run / "samples.jsonl").read_text().splitlines()})
    assert steps == [all_steps[0], all_steps[-1]]
    assert "step" in run_facts.replies_text(replies)
    with pytest.raises(results.RunError, match="kept no replies"):
        run_facts.saved_replies(paths.RESULTS_DIR / "trinity_h200" / "random_seed0")
    (tmp_path / "samples.jsonl").write_text('{"step": 1}\n')
    with pytest.raises(results.RunError, match="line 1 is not a saved reply"):
        run_facts.saved_replies(tmp_path)


def test_replies_of_a_trinity_buffer_read_without_a_truth(tmp_path):
    """mathagent.experiment.buffer writes Trinity's replies with train-local's keys and a
    null truth: they read and print the same way, without a made-up reference answer."""
    records = [{"step": 1, "question": "Evaluate 2 + 3.", "truth": None, "reward": 1.0,
                "response": "\\boxed{5}", "task_id": "7", "run_id": 0},
               {"step": 20, "question": "Evaluate 4 x 3.", "truth": None, "reward": 0.0,
                "response": "It is 13.", "task_id": "9", "run_id": 0}]
    (tmp_path / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    text = run_facts.replies_text(run_facts.saved_replies(tmp_path, steps=1))
    assert "step 1: Evaluate 2 + 3." in text and "step 20: Evaluate 4 x 3." in text
    assert "truth" not in text and "reward 0, 3 words" in text


QWEN_BOTS = paths.RESULTS_DIR / "trinity_qwen" / "bots_seed0"


def test_saved_selector_is_the_bots_run_as_it_left_off():
    """The package's selector saved its beliefs in the run's explorer state; rebuilt from the
    run's config over the taskset it holds them exactly, they line up with the taskset's
    rows, and its next draw is the same batch every time it is loaded."""
    driver = run_facts.saved_selector(QWEN_BOTS, paths.ARITHMETIC_QWEN_DIR)
    state = json.loads((QWEN_BOTS / "explorer_meta.json").read_text())["taskset_states"][0]
    assert driver.name == "bots" and driver.state_dict() == state
    assert (driver.n_tasks, state["step"], state["current_index"]) == (4400, 16, 256)
    # a task the selector holds no success for is one neither reference solved: rows aligned
    table = driver.posterior_table()
    unsolved = (table[driver.feature_keys] == 0).all(axis=1)
    no_success = table["alpha"] == 1.0
    assert no_success.sum() > 3000 and unsolved[no_success].all()
    shuffled = unsolved.sample(frac=1.0, random_state=0).to_numpy()
    assert not shuffled[no_success.to_numpy()].all()
    # per level, and the batch a resumed run would draw next
    levels = run_facts.beliefs_by_level(driver)
    assert levels["level"].tolist() == list(range(11))
    assert levels["tasks"].sum() == 4400 and levels["no success"].sum() == no_success.sum()
    batches = [run_facts.saved_selector(QWEN_BOTS, paths.ARITHMETIC_QWEN_DIR).get_indices(16)
               for _ in range(2)]
    assert batches[0] == batches[1] and len(set(batches[0])) == 16
    drawn = pd.Series(driver.dataset.select(batches[0])["difficulty"]).value_counts()
    assert (levels.set_index("level")["next batch"] == drawn.reindex(range(11), fill_value=0)).all()


def test_saved_selector_refuses_in_one_line_what_it_cannot_rebuild(tmp_path):
    qwen = paths.RESULTS_DIR / "trinity_qwen"
    # Trinity's own difficulty_based saves its position only
    with pytest.raises(results.RunError, match=r"explorer_meta.json: the selector saved its "
                                               r"position only \(\['current_index'\]\)"):
        run_facts.saved_selector(qwen / "difficulty_seed0", paths.ARITHMETIC_QWEN_DIR)
    run = tmp_path / "run"
    run.mkdir()
    with pytest.raises(results.RunError, match="explorer_meta.json: no such file"):
        run_facts.saved_selector(run, paths.ARITHMETIC_QWEN_DIR)
    shutil.copy(QWEN_BOTS / "explorer_meta.json", run)
    with pytest.raises(results.RunError, match="launched_config.yaml: no such file"):
        run_facts.saved_selector(run, paths.ARITHMETIC_QWEN_DIR)
    (run / "launched_config.yaml").write_text("buffer: {explorer_input: {taskset: {}}}\n")
    with pytest.raises(results.RunError, match="launched_config.yaml: no buffer.explorer_input"):
        run_facts.saved_selector(run, paths.ARITHMETIC_QWEN_DIR)
    shutil.copy(QWEN_BOTS / "launched_config.yaml", run)
    # a taskset the state does not fit: the state names both counts
    small = tmp_path / "small"
    small.mkdir()
    train = pd.read_parquet(paths.ARITHMETIC_QWEN_DIR / "train.parquet").head(100)
    train.to_parquet(small / "train.parquet", index=False)
    with pytest.raises(results.RunError, match="state is for 4400 tasks, this dataset has 100"):
        run_facts.saved_selector(run, small)
    with pytest.raises(results.RunError, match="no such taskset directory"):
        run_facts.saved_selector(run, tmp_path / "gone")


def test_replay_selector_draws_a_runs_batches_from_the_pass_rates_it_was_fed(tmp_path):
    """A stand-in for a GPU run's ``buffer_tasks.csv`` (``bots_seed0`` was collected before
    the table was written): the third arm's selector, built from that run's launched config,
    draws four batches and is fed made-up pass rates, written as ``mathagent.experiment.buffer`` writes
    them. The replay draws the same tasks at every step and ends in the same state; a task the
    run did not draw shows."""
    run = tmp_path / "run"
    run.mkdir()
    shutil.copy(QWEN_BOTS / "launched_config.yaml", run)
    driver = run_facts.run_selector(run, paths.ARITHMETIC_QWEN_DIR)
    reference = np.asarray(driver.dataset["qwen_bare_pass_rate"])
    rows = []
    for step in range(1, 5):
        batch = driver.get_indices(16)
        rates = [round(float(reference[i]) * 8 + step % 2) / 8 % 1.0 for i in batch]
        driver.feedback(batch, rates)
        rows += [{"step": step, "taskset": "0", "task_index": i, "experiences": 8,
                  "pass_rate": repr(r)} for i, r in zip(batch, rates, strict=True)]
    pd.DataFrame(rows).to_csv(run / run_facts.BUFFER_TASKS, index=False)
    table, replayed = run_facts.replay_selector(run, paths.ARITHMETIC_QWEN_DIR)
    assert table[["step", "tasks", "same tasks"]].to_dict("list") == {
        "step": [1, 2, 3, 4], "tasks": [16] * 4, "same tasks": [16] * 4}
    # each step's fed pass rates, what the references imply at the capability once fed
    fed = pd.DataFrame(rows).astype({"pass_rate": float})
    assert table["pass rate"].tolist() == pytest.approx(
        fed.groupby("step")["pass_rate"].mean().tolist())
    last = fed.loc[fed["step"] == 4, "task_index"].tolist()
    weak = np.asarray(driver.dataset["qwen_short_pass_rate"], dtype=float)[last]
    c = driver.capability()
    assert table["capability"].tolist()[-1] == c and table["capability"].notna().all()
    assert table["implied pass rate"].iloc[-1] == pytest.approx(
        float(np.clip(weak + c * (np.asarray(reference, dtype=float)[last] - weak), 0, 1).mean()))
    assert replayed.state_dict() == driver.state_dict()
    assert replayed.capability() is not None
    # a batch that is not the selector's own: the replay says where
    other = pd.DataFrame(rows)
    step2 = other.index[other["step"] == 2]
    other.loc[step2[0], "task_index"] = next(i for i in range(4400)
                                             if i not in set(other["task_index"]))
    other.to_csv(run / run_facts.BUFFER_TASKS, index=False)
    table, _ = run_facts.replay_selector(run, paths.ARITHMETIC_QWEN_DIR)
    assert table["same tasks"].tolist()[:2] == [16, 15]
    # refusals
    other.drop(columns="pass_rate").to_csv(run / run_facts.BUFFER_TASKS, index=False)
    with pytest.raises(results.RunError, match="buffer_tasks.csv: no column.s. pass_rate"):
        run_facts.replay_selector(run, paths.ARITHMETIC_QWEN_DIR)
    other.assign(task_index=np.nan).to_csv(run / run_facts.BUFFER_TASKS, index=False)
    with pytest.raises(results.RunError, match="every row needs the task's index"):
        run_facts.replay_selector(run, paths.ARITHMETIC_QWEN_DIR)
    with pytest.raises(results.RunError, match="buffer_tasks.csv: no such file"):
        run_facts.replay_selector(QWEN_BOTS, paths.ARITHMETIC_QWEN_DIR)
    with pytest.raises(results.RunError, match="lag -1: a step's pass rates cannot come"):
        run_facts.replay_selector(run, paths.ARITHMETIC_QWEN_DIR, lag=-1)


def test_replays_say_which_runs_selection_the_fed_pass_rates_explain(tmp_path):
    """``run_facts.replays``: the committed runs that kept their pass rates replay whole (every
    task of every batch, the saved state); a stand-in whose saved state is another step's says
    False, one that saved its position only None, one whose table has a task the selector did
    not draw counts it; runs without the table are left out."""
    qwen = paths.RESULTS_DIR / "trinity_qwen"
    table = run_facts.replays(run_facts.run_folders([qwen]), paths.ARITHMETIC_QWEN_DIR)
    assert table.columns.tolist() == list(run_facts.REPLAY_COLUMNS)
    assert table.to_dict("list") == {"run": ["bots_seed1", "bots_seed2"], "steps": [16, 16],
                                     "tasks": [256, 256], "drawn by the replay": [256, 256],
                                     "state as saved": [True, True]}
    # stand-ins: the first three steps of bots_seed1, with the state it saved after 16
    run = tmp_path / "bots_seed1"
    shutil.copytree(qwen / "bots_seed1", run)
    fed = pd.read_csv(run / run_facts.BUFFER_TASKS)
    fed[fed["step"] <= 3].to_csv(run / run_facts.BUFFER_TASKS, index=False)
    position = tmp_path / "position_only"
    shutil.copytree(run, position)
    (position / "explorer_meta.json").write_text(json.dumps(
        {"latest_iteration": 3, "taskset_states": [{"current_index": 48}]}))
    swapped = tmp_path / "swapped"
    shutil.copytree(run, swapped)
    seen = set(fed["task_index"])
    first = fed[fed["step"] <= 3].copy()    # a task of step 3 the selector did not draw
    first.loc[first.index[-1], "task_index"] = next(i for i in range(4400) if i not in seen)
    first.to_csv(swapped / run_facts.BUFFER_TASKS, index=False)
    # all 16 steps, one pass rate of the last one changed: every batch, not the saved state
    changed = tmp_path / "changed"
    shutil.copytree(qwen / "bots_seed1", changed)
    last = fed.copy()
    last.loc[last.index[-1], "pass_rate"] = 1.0 - last.loc[last.index[-1], "pass_rate"]
    last.to_csv(changed / run_facts.BUFFER_TASKS, index=False)
    table = run_facts.replays([qwen / "bots_seed0", run, position, swapped, changed],
                              paths.ARITHMETIC_QWEN_DIR).set_index("run")
    assert table.index.tolist() == ["bots_seed1", "position_only", "swapped", "changed"]
    assert table["steps"].tolist() == [3, 3, 3, 16]
    assert table["drawn by the replay"].tolist() == [48, 48, 47, 256]
    assert table["state as saved"].tolist() == [False, None, False, False]
    # a table without the state it would be set beside: one line
    (changed / "explorer_meta.json").unlink()
    with pytest.raises(results.RunError, match="explorer_meta.json: no such file"):
        run_facts.replays([changed], paths.ARITHMETIC_QWEN_DIR)
