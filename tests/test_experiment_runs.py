"""``python -m mathagent experiment`` from start to end on this CPU machine: real Ray heads
(one per run), the progress lines, a failed run left for the next call, which moves its files
aside and starts it again, a finished run laid out and skipped at the next call, the report
called at the end.

Two stand-ins, for what cannot run here: ``train`` itself (Trinity-RFT needs a GPU and vLLM)
is a small script that behaves as ``train`` does towards the command: it reads the variables
the run gets, writes ``params.json`` and the launched config where ``train`` does, copies the
event files of a committed run (``results/trinity_qwen/bots_seed1``) into its job folder and
prints Trinity's step lines; and the report's ``write_report`` is a function that records
its calls. Everything else is the command's own code.
"""

from __future__ import annotations

import json
import shutil
import sys
import textwrap
import types
from pathlib import Path

import pytest

from mathagent import paths
from mathagent.cli import main
from mathagent.experiment import runner

COMMITTED = paths.RESULTS_DIR / "trinity_qwen" / "bots_seed1"

STAND_IN = textwrap.dedent('''
    """Stands in for `python -m mathagent train` (see the test module's docstring)."""
    import json, os, shutil, sys, time
    from pathlib import Path

    address, name, committed, fail = sys.argv[1], sys.argv[2], Path(sys.argv[3]), sys.argv[4]
    job = Path(os.environ["TRINITY_CHECKPOINT_ROOT_DIR"]) / "Project" / name
    record = Path(os.environ["MATHAGENT_RUNS"]) / "train" / "20261206-120000"
    record.mkdir(parents=True)
    arm, seed = name.rsplit("_seed", 1)
    params = {**json.loads((committed / "params.json").read_text()),
              "checkpoint_job_dir": str(job), "ray_address": address, "seed": int(seed),
              "config": f"configs/config_{arm}_qwen.yaml",   # the run's own arm and seed
              "model": os.environ["TRINITY_MODEL_PATH"], "label": os.environ["MATHAGENT_RUN_LABEL"]}
    for folder in (record, job):
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "params.json").write_text(json.dumps(params))
    import yaml
    launched = yaml.safe_load((committed / "launched_config.yaml").read_text())
    launched["buffer"]["explorer_input"]["taskset"]["data_selector"]["seed"] = int(seed)
    launched["explorer"]["rollout_model"]["seed"] = int(seed)
    launched["buffer"]["total_steps"] = 2   # as `train` writes it with the spec's override
    (record / "trinity_config.yaml").write_text(yaml.safe_dump(launched))
    shutil.copytree(committed / "monitor", job / "monitor")
    (job / "global_step_2").mkdir()
    (job / "global_step_2" / "model.bin").write_bytes(b"0" * 1000)
    stamp = lambda: time.strftime("%m-%d %H:%M:%S")
    print(f"vLLM compile cache: {os.environ['VLLM_CACHE_ROOT']}", flush=True)
    print(f"(Explorer pid=1) INFO {stamp()} [explorer.py:1] Explore step 1 started.", flush=True)
    if os.path.exists(fail):
        print(f"(Explorer pid=1) ERROR {stamp()} [explorer.py:9] Error in Explorer: boom", flush=True)
        print(f"(Explorer pid=1) ERROR {stamp()} [x.py:1] RuntimeError: CUDA out of memory", flush=True)
        time.sleep(600)   # lives on, as a trainer waiting for a sync that never comes
    print(f"(Trainer pid=2) INFO {stamp()} [trainer.py:1] Training at step 1 finished.", flush=True)
    print(f"(Explorer pid=1) INFO {stamp()} [explorer.py:1] Explore step 2 started.", flush=True)
    print(f"(Explorer pid=1) INFO {stamp()} [explorer.py:1] Evaluation at step 2 started.", flush=True)
    busy = time.time() + 2   # a core kept busy through the evaluation, for the CPU monitor
    while time.time() < busy:
        pass
    print(f"(Explorer pid=1) INFO {stamp()} [explorer.py:1] Explorer sync_weights at step 2 started.",
          flush=True)
    print(f"(Trainer pid=2) INFO {stamp()} [trainer.py:1] Training at step 2 finished.", flush=True)
''')


@pytest.fixture
def experiment(tmp_path, monkeypatch):
    """A two-run spec (two arms, one seed, 2 steps), the stand-ins in place."""
    script = tmp_path / "train_stand_in.py"
    script.write_text(STAND_IN)
    fail = tmp_path / "make_bots_fail"
    monkeypatch.setattr(runner, "train_command", lambda run, address: [
        sys.executable, str(script), address, run.name, str(COMMITTED),
        str(fail) if run.arm == "bots" else str(tmp_path / "never")])
    monkeypatch.setattr(runner, "FAILED_GRACE", 2.0)
    monkeypatch.setenv("MATHAGENT_RUNS", str(tmp_path / "runs"))   # vLLM's cache slots there
    monkeypatch.setattr("mathagent.experiment.commands.POLL_SECONDS", 0.5)
    monkeypatch.setattr(runner.CpuMonitor, "INTERVAL", 0.2)
    reports = []

    def write_report(results_dir: Path, check: bool = False) -> Path:
        reports.append(sorted(d.name for d in results_dir.iterdir() if d.is_dir()))
        return results_dir / "README.md"

    import mathagent.report

    monkeypatch.setattr(mathagent.report, "write_report", write_report)
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    spec = tmp_path / "spec.yaml"
    spec.write_text(f"""out: {tmp_path / 'out'}
model: {model}
arms:
  random: configs/config_random_qwen.yaml
  bots: configs/config_bots_qwen.yaml
seeds: [0]
overrides: {{buffer.total_steps: 2, tuner.algorithm.eval_interval_steps: 2}}
""")
    return types.SimpleNamespace(spec=spec, out=tmp_path / "out", work=tmp_path / "work",
                                 fail=fail, reports=reports, model=model)


def test_runs_laid_out_a_failed_one_started_again_and_finished_ones_skipped(experiment,
                                                                              capsys):
    e = experiment
    e.fail.write_text("")
    code = main(["experiment", str(e.spec), "--work", str(e.work)])
    out = capsys.readouterr()
    assert code == 1, out.out + out.err
    lines = out.out.splitlines()
    # per run: started on its own head, a line per step, the held-out accuracy from its
    # explorer's events (the committed run's last evaluation, at its step 16)
    assert [x for x in lines if "random_seed0: started" in x]
    assert any("random_seed0: step 2 of 2" in x for x in lines)
    assert any("random_seed0: step 2 of 2, 2 trained; held-out accuracy 0.427 at step 16" in x
               for x in lines), out.out
    assert any("random_seed0: finished 2 steps" in x and "laid out in" in x for x in lines)
    assert any("random_seed0: removed its 0.0 GB of checkpoints" in x for x in lines)
    # the failed run: its error, stopped after the grace, left for the next call
    assert any("bots_seed0: failed: " in x and "Error in Explorer: boom" in x for x in lines)
    assert any("bots_seed0: stopping its `train`" in x for x in lines)
    assert any("bots_seed0: did not finish" in x and "CUDA out of memory" in x for x in lines)
    assert "1 run(s) did not finish: bots_seed0" in out.err
    assert e.reports == [["random_seed0"]]
    params = json.loads((e.out / "random_seed0" / "params.json").read_text())
    assert params["label"] == "random_seed0" and params["model"] == str(e.model)
    heads = {json.loads((e.work / n / "state.json").read_text())["ray_address"]
             for n in ("random_seed0", "bots_seed0")}
    assert len(heads) == 2   # a head of its own per run
    assert json.loads((e.work / "bots_seed0" / "state.json").read_text())["stage"] == "failed"
    assert not list((e.work / "random_seed0").rglob("global_step_*"))
    # one run after the other: both in vLLM's first cache slot, which the second found free
    slot0 = e.work.parent / "runs" / "vllm_cache" / "slot0"
    for name in ("random_seed0", "bots_seed0"):
        assert json.loads((e.work / name / "state.json").read_text())["vllm_cache"] == str(slot0)
        assert f"vLLM compile cache: {slot0}\n" in (e.work / name / "train.log").read_text()
    assert (e.out / "phase_times.csv").is_file() and not (e.out / "bots_seed0").exists()
    # the CPU monitor saw the stand-in keep a core busy through its evaluation
    cores = json.loads((e.out / "random_seed0" / "timings.json").read_text())["cpu_cores"]
    stand_in = [v for role, v in cores["evaluation"].items() if "train_stand_in.py" in role]
    assert len(stand_in) == 1 and stand_in[0]["all"] > 0.4, cores
    machine = next(v for role, v in cores["evaluation"].items() if role.startswith("machine"))
    assert machine["all"] >= stand_in[0]["all"] - 0.1
    assert "train_stand_in.py" in (e.out / "cpu_use.csv").read_text()

    # the next call: random_seed0 is skipped, bots_seed0 moved aside and run from scratch
    e.fail.unlink()
    code = main(["experiment", str(e.spec), "--work", str(e.work), "--keep-checkpoints"])
    out = capsys.readouterr()
    assert code == 0, out.out + out.err
    assert "  done     random_seed0" in out.out and "  partial  bots_seed0" in out.out
    assert "random_seed0: started" not in out.out
    aside = e.work / "aside" / "bots_seed0.1"
    assert f"bots_seed0: an earlier try stopped midway; its files are kept in {aside}, and " \
           "the run starts again from scratch" in out.out
    assert "Error in Explorer" in (aside / "work" / "train.log").read_text()
    assert "Error in Explorer" not in (e.work / "bots_seed0" / "train.log").read_text()
    assert sorted(d.name for d in e.out.iterdir() if d.is_dir()) == ["bots_seed0",
                                                                      "random_seed0"]
    assert list((e.work / "bots_seed0").rglob("global_step_2"))   # --keep-checkpoints
    assert e.reports[-1] == ["bots_seed0", "random_seed0"]
    # every run there: nothing to run, the plan says so, the report is written again
    assert main(["experiment", str(e.spec), "--work", str(e.work)]) == 0
    again = capsys.readouterr().out
    assert "Runs: 2 done, 0 to do" in again and "started" not in again
    assert len(e.reports) == 3


def test_a_second_experiment_process_on_the_same_work_folder_is_refused(experiment, capsys):
    import psutil

    e = experiment
    e.work.mkdir()
    parent = psutil.Process().parent()   # a live process that is not this one
    (e.work / "lock.json").write_text(json.dumps({"pid": parent.pid,
                                                  "created": parent.create_time()}))
    assert main(["experiment", str(e.spec), "--work", str(e.work)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"experiment process {parent.pid} works in" in err
    assert not e.out.exists() and e.reports == []


def test_parallel_runs_are_refused_when_the_folders_peaks_do_not_fit(experiment, capsys,
                                                                     monkeypatch):
    e = experiment
    e.out.mkdir()
    shutil.copyfile(paths.RESULTS_DIR / "trinity_qwen" / "gpu_memory.csv",
                    e.out / "gpu_memory.csv")
    # no nvidia-smi here: an H100's memory as it reports it stands in
    monkeypatch.setattr(runner, "gpu_total_mib", lambda: 81559)
    assert main(["experiment", str(e.spec), "--work", str(e.work), "--parallel", "3"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--parallel 3: the folder's runs peaked at" in err
    assert "3 at once would not fit" in err and not e.work.exists()


def test_progress_never_counts_past_the_last_step():
    from mathagent.experiment.progress import Progress

    progress = Progress("random_seed0", 3)
    progress.feed(["Explore step 3 started", "Training at step 3 finished",
                   "Explore step 4 started"])
    assert "random_seed0: step 3 of 3, 3 trained" in progress.line()


@pytest.mark.parametrize("cmdline, role", [
    (b"ray::WorkflowRunner.run_task\0\0\0", "ray::WorkflowRunner"),
    (b"ray::IDLE", "ray::IDLE"),
    (b"VLLM::EngineCore", "VLLM::EngineCore"),
    (b"/venv/bin/python3\0-u\0-m\0mathagent\0train\0--config\0x.yaml", "python3 -m mathagent"),
    (b"/usr/bin/python\0/tmp/train_stand_in.py\0a", "python train_stand_in.py"),
    (b"/opt/ray/core/src/ray/raylet/raylet\0--node_ip_address=1", "raylet"),
    (b"", "?"),
])
def test_a_process_role_is_its_title_or_its_program(cmdline, role):
    assert runner.role_of(cmdline) == role
