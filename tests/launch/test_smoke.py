"""The short one-GPU run of notebook 04: its command and environment, its dry run, the skip."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from bounds import hang_bound
from launch_env import isolate

from mathagent import cli, launch, paths
from mathagent.launch import smoke

CONFIG = paths.CONFIGS_DIR / "config_difficulty_arithmetic.yaml"


@pytest.fixture(autouse=True)
def _environment(monkeypatch, tmp_path):
    isolate(monkeypatch, tmp_path)


def fake_model(folder: Path) -> Path:
    folder.mkdir(parents=True)
    (folder / "config.json").write_text('{"model_type": "llama"}')
    return folder


def test_the_command_is_train_with_few_steps_evaluation_and_seeds(tmp_path):
    plan = launch.one_gpu_smoke(CONFIG, steps=3, seed=7, model_folder=tmp_path / "m",
                                work_dir=tmp_path / "w")
    assert plan.command == [
        sys.executable, "-m", "mathagent", "train", "--config", str(CONFIG),
        "buffer.total_steps=3", "tuner.algorithm.eval_interval_steps=3",
        "buffer.explorer_input.taskset.data_selector.seed=7", "explorer.rollout_model.seed=7",
        "--compare", "none"]
    assert plan.env == {"TRINITY_MODEL_PATH": str(tmp_path / "m"),
                        "TRINITY_CHECKPOINT_ROOT_DIR": str(tmp_path / "w" / "checkpoints")}
    assert plan.log == tmp_path / "w" / "train.log"
    assert plan.prepare[-2:] == ["export-model", str(tmp_path / "m")]
    assert plan.dry_run() == [*plan.command, "--dry-run"]
    # the Ray head's address is a setting `train` accepts (settings come before the options)
    on_ray = plan.with_ray("1.2.3.4:5").command
    args = cli.build_parser("train").parse_args(on_ray[3:])
    assert args.overrides[-1] == "cluster.ray_address=1.2.3.4:5"
    assert args.compare == "none"
    assert plan.shell().startswith(f"TRINITY_MODEL_PATH={tmp_path / 'm'} ")
    assert not (tmp_path / "w").exists()  # building the plan writes nothing


def test_defaults_follow_the_environment_and_the_repository(monkeypatch, tmp_path):
    monkeypatch.setenv("TRINITY_MODEL_PATH", str(tmp_path / "exported"))
    monkeypatch.chdir(tmp_path)  # a relative config resolves against the repository root
    plan = launch.one_gpu_smoke("configs/config_random_arithmetic.yaml")
    assert plan.config == paths.CONFIGS_DIR / "config_random_arithmetic.yaml"
    assert plan.model_folder == tmp_path / "exported"
    assert plan.log == paths.runs_dir() / "smoke" / "config_random_arithmetic" / "train.log"
    monkeypatch.delenv("TRINITY_MODEL_PATH")
    assert launch.one_gpu_smoke(CONFIG).model_folder == paths.REPO_ROOT / "models" / "smollm2"


@pytest.mark.parametrize("name, words", [
    ("config_random.yaml", "cluster.gpu_per_node=8: not a one-GPU config"),
    ("config_difficulty_x8_arithmetic.yaml", "mode='both'"),
    ("no_such.yaml", "no such config"),
])
def test_a_config_that_is_not_one_gpu_is_one_line_naming_it(name, words):
    with pytest.raises(launch.ConfigError) as info:
        launch.one_gpu_smoke(paths.CONFIGS_DIR / name)
    assert words in str(info.value) and name in str(info.value)
    assert "\n" not in str(info.value)


def test_steps_below_one_are_refused():
    with pytest.raises(launch.ConfigError, match="steps=0"):
        launch.one_gpu_smoke(CONFIG, steps=0)


def test_without_a_gpu_the_run_is_skipped_and_nothing_starts(monkeypatch, tmp_path):
    def no_process(*args, **kwargs):
        raise AssertionError("a process was started")

    monkeypatch.setattr(subprocess, "Popen", no_process)
    monkeypatch.setattr(subprocess, "run", no_process)
    monkeypatch.setattr(smoke, "visible_gpus", lambda: 0)
    plan = launch.one_gpu_smoke(CONFIG, work_dir=tmp_path / "w")
    result = launch.run_smoke(plan)
    assert result.status == "skipped"
    assert result.reason.startswith("skipped: no CUDA GPU")
    assert plan.shell() in result.reason
    assert str(result).startswith("skipped: no CUDA GPU")
    assert result.returncode is None and result.log is None
    assert not (tmp_path / "w").exists()


def test_a_gpu_without_vllm_is_skipped_too(tmp_path):
    plan = launch.one_gpu_smoke(CONFIG, work_dir=tmp_path / "w")
    result = launch.run_smoke(plan, gpus=1, vllm=False)
    assert result.status == "skipped" and "vllm is not importable" in result.reason
    assert launch.smoke_blocker(gpus=1, vllm=True) is None


@pytest.mark.slow
def test_the_built_command_passes_the_dry_run(tmp_path):
    """The exact command (with --dry-run) and its environment pass train's preflight on CPU."""
    model = fake_model(tmp_path / "model")
    plan = launch.one_gpu_smoke(CONFIG, model_folder=model, work_dir=tmp_path / "w")
    out = subprocess.run(plan.dry_run(), cwd=paths.REPO_ROOT, env={**os.environ, **plan.env},
                         capture_output=True, text=True, timeout=hang_bound(600))
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "Dry run: config and data are sound" in out.stdout
    assert f"ok    model {model}: local Hugging Face folder" in out.stdout
    assert "explorer.eval_interval" in out.stdout and "5 -> 2" in out.stdout
    assert not (tmp_path / "w" / "checkpoints").exists()  # a dry run writes no checkpoint
