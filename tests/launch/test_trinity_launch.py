"""What ``train`` adds around Trinity-RFT and ``tune()``: judge, attention, rollout settings, Ray.

Everything is real here too: Trinity-RFT's loader and ``check_and_update()``, agentscope's
``_to_trinity_config`` (the function ``tune()`` applies its settings with), verl's config
builder in Trinity and local Ray heads. Covered:

* the judge a run trains with (``tuner.judge`` in the YAML, ``train --judge``);
* verl's attention settings filled for a machine without flash-attn, and the preflight's
  verdict on settings that need it;
* the ``explorer.rollout_model`` settings that upstream ``tune()`` drops
  (``enforce_eager``, ``extra_engine_args``) and that ``train`` carries into the run;
* the CPUs/GPUs Trinity reserves in Ray against what a head offers, and the ``ray`` command
  offering the whole machine by default;
* the version gate of the Trinity-RFT#602 (colocate deadlock) fix.

Ray heads: at most one is alive at a time. Every address handed to the code is explicit (a
closed port when a temporary head is wanted), because Ray's ``auto`` also finds clusters that
other processes on the machine started.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from bounds import hang_bound
from launch_env import closed_address, isolate, visible_gpus

from mathagent import cli, compat, judge, launch, paths
from mathagent.launch import attention

CONFIGS = paths.CONFIGS_DIR
ARITH = CONFIGS / "config_difficulty_arithmetic.yaml"  # colocate, one GPU, lenient judge
FULL = CONFIGS / "config_difficulty.yaml"  # mode both, 8 GPUs, 4 engines, upstream judge
KV_BYTES = 4294967296  # the arithmetic config's extra_engine_args.kv_cache_memory_bytes


@pytest.fixture(autouse=True)
def _environment(monkeypatch, tmp_path):
    isolate(monkeypatch, tmp_path)


def tuner_kwargs(plan: launch.LaunchPlan) -> dict:
    """The arguments ``tune()`` hands to ``_to_trinity_config`` for this plan."""
    return {"config_path": str(plan.trinity_yaml), "workflow_func": plan.workflow_func,
            "judge_func": plan.judge_func, "model": plan.model, "algorithm": plan.algorithm}


@pytest.fixture(scope="module")
def arith_cli_dry_run(tmp_path_factory):
    """``train --dry-run`` of the arithmetic config on a local model folder (one temporary
    Ray head): its exit code, stdout and checkpoint root, and the plan and preflight result
    that ``train`` made (seen by wrapping its ``preflight``)."""
    from mathagent.launch import commands

    root = tmp_path_factory.mktemp("arith-dry-run")
    model = root / "model"
    model.mkdir()
    (model / "config.json").write_text('{"model_type": "llama"}')
    seen = {}

    def preflight(plan, **kwargs):
        seen["plan"] = plan
        seen["result"] = real(plan, **kwargs)
        return seen["result"]

    real = commands.preflight
    out = io.StringIO()
    with pytest.MonkeyPatch.context() as mp, contextlib.redirect_stdout(out):
        isolate(mp, root)
        mp.setenv("TRINITY_MODEL_PATH", str(model))
        mp.setattr(commands, "preflight", preflight)
        rc = cli.main(["train", "--config", str(ARITH), "--dry-run", "--compare", "none",
                       f"cluster.ray_address={closed_address()}"])
    return {"rc": rc, "out": out.getvalue(), "model": model,
            "checkpoints": root / "checkpoints", **seen}


@pytest.fixture(scope="module")
def arith_dry_run(arith_cli_dry_run):
    """``(plan, preflight result)`` of the dry run of the arithmetic config."""
    result = arith_cli_dry_run["result"]
    assert result.ok, result.report()
    assert any("started a temporary head" in p for p in result.passed), result.report()
    return arith_cli_dry_run["plan"], result


# --------------------------------------------------------------------------------------
# The judge
# --------------------------------------------------------------------------------------


def test_arithmetic_config_trains_with_its_lenient_judge(tmp_path):
    """``tuner.judge: lenient_judge`` of the YAML reaches the taskset tune() hands to Trinity."""
    plan = launch.load_plan(ARITH, work_dir=tmp_path)
    assert plan.judge == "lenient_judge"
    assert plan.settings["judge"] == "lenient_judge"
    assert plan.judge_func is judge.lenient_judge
    assert plan.config.buffer.explorer_input.taskset.workflow_args["judge_func"] \
        is judge.lenient_judge
    # the tuner block is not handed to Trinity
    assert "tuner" not in plan.trinity_yaml.read_text()


def test_checked_config_keeps_the_lenient_judge(arith_dry_run):
    _, result = arith_dry_run
    explorer_input = result.checked_config.buffer.explorer_input  # taskset -> tasksets
    assert [t.workflow_args["judge_func"] for t in explorer_input.tasksets] \
        == [judge.lenient_judge]
    assert [t.workflow_args["judge_func"] for t in explorer_input.eval_tasksets] \
        == [judge.lenient_judge]


@pytest.mark.parametrize(("name", "func"), [
    ("gsm8k_judge", judge.gsm8k_judge),
    ("mathagent.judge.gsm8k_judge", judge.gsm8k_judge),  # a dotted path works too
])
def test_judge_argument_overrides_the_yaml(name, func, tmp_path):
    plan = launch.load_plan(ARITH, work_dir=tmp_path, judge=name)
    assert plan.judge == name
    assert plan.judge_func is func
    assert plan.config.buffer.explorer_input.taskset.workflow_args["judge_func"] is func


def test_reference_config_defaults_to_the_upstream_judge(tmp_path):
    assert judge.DEFAULT_JUDGE == "gsm8k_judge"
    assert "judge:" not in FULL.read_text()  # the reference config does not choose one
    plan = launch.load_plan(FULL, work_dir=tmp_path)
    assert plan.judge == "gsm8k_judge"
    assert plan.judge_func is judge.gsm8k_judge
    assert plan.config.buffer.explorer_input.taskset.workflow_args["judge_func"] \
        is judge.gsm8k_judge


@pytest.mark.parametrize(("kwargs", "names", "not_names"), [
    ({"judge": "nonsense"}, ["--judge"], ["tuner.judge"]),
    ({"overrides": ["tuner.judge=nonsense"]},
     ["`tuner.judge`", "config_difficulty_arithmetic.yaml"], ["--judge"]),
], ids=["argument", "yaml"])
def test_unknown_judge_is_one_line_naming_where_it_came_from(kwargs, names, not_names,
                                                             tmp_path):
    with pytest.raises(launch.ConfigError) as err:
        launch.load_plan(ARITH, work_dir=tmp_path, **kwargs)
    message = str(err.value)
    assert "\n" not in message
    assert "'nonsense'" in message and "gsm8k_judge, lenient_judge" in message
    for name in names:
        assert name in message
    for name in not_names:
        assert name not in message


def test_judge_path_that_does_not_import_is_a_config_error(tmp_path):
    with pytest.raises(launch.ConfigError, match=r"judge mathagent\.judge\.nope: AttributeError"):
        launch.load_plan(ARITH, work_dir=tmp_path, judge="mathagent.judge.nope")


def test_train_with_unknown_judge_exits_2_with_one_line(capsys):
    rc = cli.main(["train", "--judge", "nonsense", "--config", str(ARITH), "--dry-run"])
    out = capsys.readouterr()
    assert rc == 2
    assert out.out == ""
    lines = out.err.strip().splitlines()
    assert len(lines) == 1, out.err
    assert lines[0].startswith("error: --judge: judge 'nonsense'")
    assert "Traceback" not in out.err


# --------------------------------------------------------------------------------------
# Attention: sdpa without flash-attn
# --------------------------------------------------------------------------------------


def _attn(raw: dict):
    return launch._get_dotted(raw, launch.ATTN_KEY)


def _padding(raw: dict):
    return launch._get_dotted(raw, launch.REMOVE_PADDING_KEY)


def test_choose_attention_fills_sdpa_and_padding_when_unset():
    raw = {"trainer": {"save_interval": 100,
                       "trainer_config": {"actor": {"use_torch_compile": False}}}}
    notes = launch.choose_attention(raw, have_flash_attn=False)
    assert _attn(raw) == "sdpa"
    assert _padding(raw) is False
    # settings beside the filled ones stay
    assert raw["trainer"]["save_interval"] == 100
    assert raw["trainer"]["trainer_config"]["actor"] == {"use_torch_compile": False}
    assert len(notes) == 2
    assert any(f"`{launch.ATTN_KEY}`" in n and "'sdpa'" in n for n in notes), notes
    assert any(f"`{launch.REMOVE_PADDING_KEY}`" in n and "False" in n for n in notes), notes


def test_choose_attention_fills_an_empty_config():
    raw: dict = {}
    notes = launch.choose_attention(raw, have_flash_attn=False)
    assert raw == {"trainer": {"trainer_config": {"model": {"override_config": {
        "attn_implementation": "sdpa"}}}, "use_remove_padding": False}}
    assert len(notes) == 2


@pytest.mark.parametrize(("attn", "padding"), [("flash_attention_2", True), ("eager", True),
                                               ("sdpa", False)])
def test_choose_attention_leaves_explicit_settings_alone(attn, padding):
    raw = {"trainer": {"use_remove_padding": padding,
                       "trainer_config": {"model": {"override_config": {
                           "attn_implementation": attn}}}}}
    before = copy.deepcopy(raw)
    assert launch.choose_attention(raw, have_flash_attn=False) == []
    assert raw == before


def test_choose_attention_fills_only_the_unset_one():
    raw = {"trainer": {"use_remove_padding": True}}
    notes = launch.choose_attention(raw, have_flash_attn=False)
    assert _padding(raw) is True and _attn(raw) == "sdpa"
    assert len(notes) == 1 and f"`{launch.ATTN_KEY}`" in notes[0]


def test_choose_attention_keeps_verl_defaults_with_flash_attn():
    raw = {"trainer": {"save_interval": 100}}
    assert launch.choose_attention(raw, have_flash_attn=True) == []
    assert raw == {"trainer": {"save_interval": 100}}


def pretend_flash_attn(monkeypatch, have: bool) -> None:
    """Make the probe that load_plan() and the preflight ask answer ``have`` on any machine
    (both look it up in :mod:`mathagent.launch.attention`)."""
    monkeypatch.setattr(attention, "flash_attn_available", lambda: have)


def test_load_plan_without_flash_attn_uses_sdpa(tmp_path, monkeypatch):
    pretend_flash_attn(monkeypatch, False)
    plan = launch.load_plan(ARITH, work_dir=tmp_path)
    assert plan.config.trainer.use_remove_padding is False
    trainer_config = plan.config.trainer.trainer_config
    assert trainer_config["model"]["override_config"]["attn_implementation"] == "sdpa"
    assert trainer_config["actor"] == {"use_torch_compile": False}  # the YAML's own setting
    assert any(f"`{launch.ATTN_KEY}`" in n for n in plan.notes)
    assert any(f"`{launch.REMOVE_PADDING_KEY}`" in n for n in plan.notes)
    result = launch.Preflight()
    launch.check_attention(plan.config, result, dry_run=False)
    assert result.problems == [] and result.requirements == []
    assert result.passed == ["attention: sdpa without padding removal (needs no flash-attn)"]


def test_load_plan_with_flash_attn_keeps_verl_defaults(tmp_path, monkeypatch):
    pretend_flash_attn(monkeypatch, True)
    plan = launch.load_plan(ARITH, work_dir=tmp_path)
    assert plan.config.trainer.use_remove_padding is True  # the default, not filled
    trainer_config = plan.config.trainer.trainer_config
    assert launch._get_dotted(trainer_config, "model.override_config.attn_implementation") \
        is launch.ABSENT
    assert trainer_config["actor"] == {"use_torch_compile": False}
    assert not any("flash-attn is not installed" in n for n in plan.notes)
    result = launch.Preflight()
    launch.check_attention(plan.config, result, dry_run=False)
    assert result.problems == [] and result.requirements == []
    assert len(result.passed) == 1 and result.passed[0].startswith("flash-attn importable")


def test_attention_reaches_the_verl_config_trinity_builds(arith_dry_run):
    """Trinity (verl 0.8 backend) builds verl's config from the checked config of the dry run
    on this machine: sdpa and padding kept without flash-attn, verl's defaults with it."""
    from trinity.trainer.verl.config import build_verl_config

    _, result = arith_dry_run
    verl = build_verl_config(result.checked_config)
    if launch.flash_attn_available():
        assert verl.model.override_config.get("attn_implementation") is None
        assert verl.model.use_remove_padding is True
        assert verl.actor.use_remove_padding is True
    else:
        assert verl.model.override_config.get("attn_implementation") == "sdpa"
        assert verl.model.use_remove_padding is False
        assert verl.actor.use_remove_padding is False
    assert verl.actor.use_torch_compile is False


@pytest.mark.parametrize("have_flash_attn", [False, True], ids=["no-flash-attn", "flash-attn"])
def test_both_attention_branches_reach_the_verl_config(have_flash_attn, tmp_path, monkeypatch):
    """Both branches on any machine: the plan's attention settings survive check_and_update()
    (which needs no Ray head here) into the verl config Trinity builds."""
    from trinity.trainer.verl.config import build_verl_config

    pretend_flash_attn(monkeypatch, have_flash_attn)
    plan = launch.load_plan(ARITH, work_dir=tmp_path / "work")
    verl = build_verl_config(launch.check_and_update(plan, closed_address(), dry_run=True))
    if have_flash_attn:
        assert verl.model.override_config.get("attn_implementation") is None
        assert verl.model.use_remove_padding is True and verl.actor.use_remove_padding is True
    else:
        assert verl.model.override_config.get("attn_implementation") == "sdpa"
        assert verl.model.use_remove_padding is False
        assert verl.actor.use_remove_padding is False
    assert verl.actor.use_torch_compile is False


@pytest.mark.parametrize(("override", "key"), [
    ("trainer.use_remove_padding=true", launch.REMOVE_PADDING_KEY),
    (f"{launch.ATTN_KEY}=flash_attention_2", launch.ATTN_KEY),
], ids=["remove_padding", "flash_attention_2"])
@pytest.mark.parametrize("dry_run", [True, False], ids=["dry-run", "launch"])
def test_settings_that_need_flash_attn_are_reported(override, key, dry_run, tmp_path,
                                                    monkeypatch):
    """A dry run lists flash-attn as a requirement; a launch refuses, naming the key."""
    pretend_flash_attn(monkeypatch, False)
    plan = launch.load_plan(ARITH, [override], work_dir=tmp_path)
    other = ({launch.ATTN_KEY, launch.REMOVE_PADDING_KEY} - {key}).pop()
    result = launch.Preflight()
    launch.check_attention(plan.config, result, dry_run=dry_run)
    assert result.passed == []
    if dry_run:
        assert result.problems == []
        assert len(result.requirements) == 1
        message = result.requirements[0]
        assert message.startswith("flash-attn importable")
    else:
        assert result.requirements == []
        assert len(result.problems) == 1
        message = result.problems[0]
        assert "needs the flash-attn package" in message
    assert f"`{key}`" in message and f"`{other}`" not in message  # names the one at fault
    assert f"{launch.ATTN_KEY}=sdpa" in message
    assert f"{launch.REMOVE_PADDING_KEY}=false" in message


@pytest.mark.parametrize("dry_run", [True, False], ids=["dry-run", "launch"])
def test_settings_that_need_flash_attn_pass_where_it_is_importable(dry_run, tmp_path,
                                                                   monkeypatch):
    pretend_flash_attn(monkeypatch, True)
    plan = launch.load_plan(ARITH, [f"{launch.ATTN_KEY}=flash_attention_2"], work_dir=tmp_path)
    result = launch.Preflight()
    launch.check_attention(plan.config, result, dry_run=dry_run)
    assert result.problems == [] and result.requirements == []
    assert len(result.passed) == 1 and result.passed[0].startswith("flash-attn importable")
    assert f"`{launch.ATTN_KEY}`" in result.passed[0]


# --------------------------------------------------------------------------------------
# Rollout settings that tune() drops
# --------------------------------------------------------------------------------------


def test_plan_carries_enforce_eager_and_extra_engine_args(tmp_path):
    plan = launch.load_plan(ARITH, work_dir=tmp_path)
    assert plan.carried["enforce_eager"] is True
    assert plan.carried["extra_engine_args"] == {"kv_cache_memory_bytes": KV_BYTES}
    assert not set(plan.carried) & set(launch.TUNER_ROLLOUT_FIELDS)
    rollout = plan.config.explorer.rollout_model
    assert rollout.enforce_eager is True
    assert rollout.extra_engine_args == {"kv_cache_memory_bytes": KV_BYTES}
    # the reference config sets none of them: nothing to carry
    assert launch.load_plan(FULL, work_dir=tmp_path / "full").carried == {}


def test_upstream_to_trinity_config_really_drops_them(tmp_path):
    """The upstream behaviour being fixed: tune()'s config has Trinity's defaults instead."""
    from agentscope.tuner._config import _to_trinity_config
    from trinity.common.config import InferenceModelConfig

    plan = launch.load_plan(ARITH, work_dir=tmp_path)
    raw = _to_trinity_config(**tuner_kwargs(plan))
    rollout = raw.explorer.rollout_model
    assert rollout.enforce_eager is False and InferenceModelConfig().enforce_eager is False
    assert "kv_cache_memory_bytes" not in (rollout.extra_engine_args or {})
    lost = launch.lost_rollout_settings(plan.yaml_config, raw)
    assert lost["enforce_eager"] is True
    assert lost["extra_engine_args"] == {"kv_cache_memory_bytes": KV_BYTES}
    # restoring them gives back what the plan holds
    launch.restore_rollout_settings(raw, lost)
    assert launch.lost_rollout_settings(plan.yaml_config, raw) == {}


def test_carrying_rollout_settings_patches_the_name_tune_looks_up(tmp_path):
    import agentscope.tuner._config as config_module
    import agentscope.tuner._tune as tune_module

    # tune() reads the module global at call time: patching it reaches tune()
    assert "_to_trinity_config" in tune_module.tune.__code__.co_names
    original = tune_module._to_trinity_config
    assert original is config_module._to_trinity_config
    plan = launch.load_plan(ARITH, work_dir=tmp_path)
    with launch.carrying_rollout_settings(plan.carried):
        assert tune_module._to_trinity_config is not original
        kept = tune_module._to_trinity_config(**tuner_kwargs(plan))
    assert tune_module._to_trinity_config is original
    assert kept.explorer.rollout_model.enforce_eager is True
    assert kept.explorer.rollout_model.extra_engine_args == {"kv_cache_memory_bytes": KV_BYTES}
    # after the block the upstream function drops them again
    assert original(**tuner_kwargs(plan)).explorer.rollout_model.enforce_eager is False


def test_carrying_rollout_settings_restores_after_an_error(tmp_path):
    import agentscope.tuner._tune as tune_module

    original = tune_module._to_trinity_config
    with pytest.raises(RuntimeError, match="tune failed"), \
            launch.carrying_rollout_settings({"enforce_eager": True}):
        raise RuntimeError("tune failed")
    assert tune_module._to_trinity_config is original
    with launch.carrying_rollout_settings({}):  # nothing to carry: nothing patched
        assert tune_module._to_trinity_config is original


def test_fields_tune_owns_are_never_carried(tmp_path):
    """engine_num comes from TunerModelConfig (tune() wins); other YAML fields are carried."""
    assert "engine_num" in launch.TUNER_ROLLOUT_FIELDS
    fields = {f.name for f in dataclasses.fields(launch.load_plan(
        ARITH, work_dir=tmp_path / "a").yaml_config.explorer.rollout_model)}
    assert set(launch.TUNER_ROLLOUT_FIELDS) <= fields  # the names are real fields
    plan = launch.load_plan(ARITH, ["explorer.rollout_model.engine_num=3",
                                    "explorer.rollout_model.gpu_memory_utilization=0.5"],
                            work_dir=tmp_path / "b")
    assert plan.yaml_config.explorer.rollout_model.engine_num == 3
    assert plan.config.explorer.rollout_model.engine_num == 1  # tuner.model.inference_engine_num
    assert "engine_num" not in plan.carried
    assert plan.carried["gpu_memory_utilization"] == 0.5
    assert plan.config.explorer.rollout_model.gpu_memory_utilization == 0.5


def test_checked_config_keeps_the_carried_settings(arith_dry_run):
    _, result = arith_dry_run
    rollout = result.checked_config.explorer.rollout_model
    assert rollout.enforce_eager is True
    assert rollout.extra_engine_args == {"kv_cache_memory_bytes": KV_BYTES}


@pytest.mark.slow
def test_dry_run_lists_the_carried_settings(arith_cli_dry_run):
    """The whole dry run of the arithmetic config (a temporary Ray head) on a local model folder."""
    out, model = arith_cli_dry_run["out"], arith_cli_dry_run["model"]
    assert arith_cli_dry_run["rc"] == 0, out
    assert "Judge: lenient_judge (mathagent.judge.lenient_judge)" in out
    carried = out.split("Rollout settings of the YAML that tune() would drop, carried into "
                        "the run:\n")[1].split("\n\n")[0].splitlines()
    assert sorted(carried) == sorted([
        "  explorer.rollout_model.enforce_eager: True",
        f"  explorer.rollout_model.extra_engine_args: {{'kv_cache_memory_bytes': {KV_BYTES}}}"])
    assert f"model {model}: local Hugging Face folder" in out
    assert "started a temporary head" in out
    requirements = out.split("Requirements of the launch machine")[1].split("\n\n")[0]
    assert "a Ray head offering at least 3 CPU and 1 GPU" in requirements
    resolved = out.split("Resolved config (after Trinity's check_and_update()):")[1]
    assert "enforce_eager: true" in resolved
    assert f"kv_cache_memory_bytes: {KV_BYTES}" in resolved
    assert "Difference from" not in out  # --compare none
    assert "Dry run: config and data are sound" in out
    assert not arith_cli_dry_run["checkpoints"].exists()


# --------------------------------------------------------------------------------------
# What Trinity reserves in Ray
# --------------------------------------------------------------------------------------


def test_colocate_reserves_three_cpus_and_one_gpu(arith_dry_run):
    _, result = arith_dry_run
    checked = result.checked_config
    assert checked.mode == "colocate" and checked.cluster.trainer_gpu_num == 1
    cpus, gpus, parts = launch.trinity_reservation(checked)
    assert (cpus, gpus) == (3, 1)
    assert parts == ["trainer on 1 GPU(s): 1 GPU, 3 CPU",
                     "vLLM engine shares the trainer's GPU (no reservation)"]


def test_dry_run_report_asks_for_a_big_enough_head(arith_dry_run):
    _, result = arith_dry_run
    asks = [r for r in result.requirements if r.startswith("a Ray head offering")]
    assert len(asks) == 1
    assert asks[0].startswith("a Ray head offering at least 3 CPU and 1 GPU")
    assert "- a Ray head offering at least 3 CPU and 1 GPU" in result.report()


def test_both_mode_reserves_engines_and_trainer_pool(tmp_path):
    """Reference config: 4 engines x (1 GPU, 1 CPU) + 4 trainer GPUs x 3 CPUs.

    ``check_and_update()`` needs no Ray when the cluster size is explicit, so the checked
    config comes without a head here.
    """
    plan = launch.load_plan(FULL, work_dir=tmp_path)
    checked = launch.check_and_update(plan, closed_address(), dry_run=True)
    assert checked.mode == "both"
    assert (checked.cluster.explorer_gpu_num, checked.cluster.trainer_gpu_num) == (4, 4)
    cpus, gpus, parts = launch.trinity_reservation(checked)
    assert (cpus, gpus) == (4 * launch.ENGINE_CPUS + 4 * launch.TRAINER_CPUS_PER_GPU, 8) \
        == (16, 8)
    assert parts == ["4 vLLM engine(s): 4 GPU, 4 CPU", "trainer on 4 GPU(s): 4 GPU, 12 CPU"]


@pytest.mark.parametrize(("resources", "offers"), [
    ({"CPU": 1.0, "GPU": 1.0}, "offers 1 CPU and 1 GPU"),
    ({"CPU": 16.0}, "offers 16 CPU and 0 GPU"),
])
def test_small_ray_head_is_a_problem(resources, offers, arith_dry_run):
    _, result = arith_dry_run
    checked = launch.Preflight()
    launch.check_ray_resources(result.checked_config, "127.0.0.1:1", checked,
                               resources=resources)
    assert checked.passed == []
    assert len(checked.problems) == 1
    problem = checked.problems[0]
    assert problem.startswith(f"Ray cluster at 127.0.0.1:1 {offers}")
    assert "Trinity reserves 3 CPU and 1 GPU" in problem
    assert "wait forever" in problem
    assert "`python -m mathagent ray start`" in problem


def test_big_enough_ray_head_passes(arith_dry_run):
    _, result = arith_dry_run
    checked = launch.Preflight()
    launch.check_ray_resources(result.checked_config, "127.0.0.1:1", checked,
                               resources={"CPU": 16, "GPU": 1})
    assert checked.problems == []
    assert checked.passed == [
        "Ray cluster offers 16 CPU and 1 GPU; Trinity reserves 3 CPU and 1 GPU (trainer on 1 "
        "GPU(s): 1 GPU, 3 CPU; vLLM engine shares the trainer's GPU (no reservation))"]


# --------------------------------------------------------------------------------------
# The `ray` command offers the whole machine by default
# --------------------------------------------------------------------------------------


def test_ray_command_defaults_offer_everything():
    parser = cli.build_parser("ray")
    args = parser.parse_args(["ray", "start"])
    assert args.num_cpus is None and args.num_gpus is None
    args = parser.parse_args(["ray", "start", "--num-cpus", "4", "--num-gpus", "0"])
    assert (args.num_cpus, args.num_gpus) == (4, 0)


@pytest.mark.slow
def test_head_without_num_cpus_offers_every_cpu():
    """Every CPU Ray detects here (a container's CPU quota, else os.cpu_count()) and every
    GPU torch sees, not the 1 CPU of the tutorial's heads."""
    from ray._private.utils import get_num_cpus

    head = launch.start_ray_head(num_cpus=None, object_store_memory=100 * 2**20)
    try:
        assert head.processes()
        resources = head.resources()
    finally:
        head.stop()
    assert resources["CPU"] == get_num_cpus() <= os.cpu_count()
    assert resources.get("GPU", 0) == visible_gpus()
    assert head.processes() == []
    assert not Path(head.temp_dir).exists()  # its private session folder went with it


# --------------------------------------------------------------------------------------
# Versions and the Trinity-RFT#602 fix
# --------------------------------------------------------------------------------------


def test_installed_versions_need_no_note(tmp_path):
    assert compat.installed_version("trinity-rft") == "0.6.0"
    plan = launch.load_plan(ARITH, work_dir=tmp_path)
    assert plan.config.mode == "colocate"
    result = launch.Preflight()
    launch.check_versions(plan.config, result)
    assert not any("#602" in n for n in result.notes), result.notes
    assert not any("differ from the tested set" in n for n in result.notes), result.notes


def _pretend_trinity(monkeypatch, version: str) -> None:
    real = compat.installed_version
    monkeypatch.setattr(compat, "installed_version",
                        lambda name: version if name == "trinity-rft" else real(name))


def test_other_trinity_version_warns_about_the_colocate_fix(tmp_path, monkeypatch):
    _pretend_trinity(monkeypatch, "0.7.0")
    plan = launch.load_plan(ARITH, work_dir=tmp_path)
    result = launch.Preflight()
    launch.check_versions(plan.config, result)
    fix = [n for n in result.notes if "Trinity-RFT#602" in n]
    assert len(fix) == 1 and "trinity-rft 0.7.0" in fix[0] and "skipped" in fix[0]
    assert any("trinity-rft 0.7.0 (tested: 0.6.0)" in n for n in result.notes), result.notes
    assert result.problems == []


def test_other_trinity_version_outside_colocate_needs_no_fix_note(tmp_path, monkeypatch):
    _pretend_trinity(monkeypatch, "0.7.0")
    plan = launch.load_plan(FULL, work_dir=tmp_path)
    assert plan.config.mode == "both"
    result = launch.Preflight()
    launch.check_versions(plan.config, result)
    assert not any("#602" in n for n in result.notes), result.notes
    assert any("trinity-rft 0.7.0 (tested: 0.6.0)" in n for n in result.notes), result.notes


# --------------------------------------------------------------------------------------
# Processes that Ray workers start: vLLM's engine workers joining the run's cluster
# --------------------------------------------------------------------------------------

#: A driver: the run's runtime_env (or none), a named actor, and a Ray task that starts a plain
#: subprocess which looks the actor up, as vLLM's engine worker does for Trinity's weight sync
#: (``Synchronizer.get_actor``, whose implicit ``ray.init()`` has no address). Such an init
#: takes RAY_ADDRESS, else the last ``ray start`` of the default session folder, else starts a
#: new, empty local cluster; the child reports the last case instead of starting one.
_CHILD_LOOKUP = r"""
import json, subprocess, sys, types
import ray
from mathagent import launch

address, use_env, empty_tmp = sys.argv[1], sys.argv[2] == "1", sys.argv[3]
scale = float(sys.argv[4])  # bounds.hang_bound's scale
namespace = sys.argv[5]  # the run's own: another driver may name its actors alike
cfg = types.SimpleNamespace(get_envs=lambda: {},
                            cluster=types.SimpleNamespace(ray_address=address))
runtime_env = launch.worker_runtime_env(cfg) if use_env else None
ray.init(address=address, namespace=namespace, runtime_env=runtime_env, logging_level="ERROR")

@ray.remote
class Synchronizer:
    def ping(self):
        return "pong"

sync = Synchronizer.options(name="synchronizer").remote()
ray.get(sync.ping.remote())

@ray.remote
def engine_worker(empty_tmp):
    import os
    code = ("import sys, ray\n"
            "from ray._private.services import get_ray_address_from_environment\n"
            "if get_ray_address_from_environment(None, None) is None:\n"
            "    sys.exit('ray.init() would start a new, empty cluster')\n"
            f"ray.init(namespace={namespace!r}, logging_level='ERROR')\n"
            "print(ray.get(ray.get_actor('synchronizer').ping.remote()))")
    env = dict(os.environ, RAY_TMPDIR=empty_tmp)  # no default session folder to fall back on
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120 * scale, env=env)
    return out.returncode, out.stdout.strip()[-200:], out.stderr.strip()[-300:]

print("RESULT:" + json.dumps(ray.get(engine_worker.remote(empty_tmp), timeout=240 * scale)))
ray.shutdown()
"""


@pytest.mark.slow
def test_processes_started_by_workers_join_the_runs_cluster(tmp_path):
    """vLLM's engine workers are plain processes that a Ray actor starts; they join Ray through
    an implicit ``ray.init()``, which finds only a head recorded in the default session folder.
    Heads that ``python -m mathagent ray start`` starts keep their session in a private folder,
    so on an H200 Trinity's weight sync failed after step 1 ("Failed to look up actor with name
    'synchronizer'"). The run's runtime_env hands them the head's address (RAY_ADDRESS)."""
    empty = tmp_path / "no-session"
    empty.mkdir()
    script = tmp_path / "driver.py"
    script.write_text(_CHILD_LOOKUP)
    outcomes = {}
    with launch.local_ray_head(num_cpus=1, object_store_memory=100 * 2**20) as head:
        # both drivers at once, each a job of the head in a namespace of its own
        drivers = {use_env: subprocess.Popen(
            [sys.executable, str(script), head.address, use_env, str(empty),
             str(hang_bound(1)), f"run{use_env}"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=paths.REPO_ROOT,
            env={**os.environ, "RAY_AUTH_MODE": "disabled"}) for use_env in ("0", "1")}
        try:
            for use_env, proc in drivers.items():
                stdout, stderr = proc.communicate(timeout=hang_bound(420))
                line = [ln for ln in stdout.splitlines() if ln.startswith("RESULT:")]
                assert line, stderr[-2000:]
                outcomes[use_env] = json.loads(line[0][len("RESULT:"):])
        finally:
            for proc in drivers.values():
                if proc.poll() is None:
                    proc.kill()
                    proc.communicate()
    rc, stdout, stderr = outcomes["0"]
    assert rc != 0 and "new, empty cluster" in stderr  # without the address: none to join
    rc, stdout, stderr = outcomes["1"]
    assert rc == 0 and stdout.endswith("pong"), stderr


def test_worker_runtime_env_names_the_cluster_and_the_package(tmp_path):
    plan = launch.load_plan(ARITH, work_dir=tmp_path)
    config = copy.deepcopy(plan.config)
    config.cluster.ray_address = "10.0.0.1:6379"
    env = launch.worker_runtime_env(config)
    assert env["worker_process_setup_hook"] == compat.WORKER_SETUP_HOOK
    assert env["env_vars"]["RAY_ADDRESS"] == "10.0.0.1:6379"
    assert env["env_vars"]["PYTHONPATH"].split(os.pathsep)[0] == str(paths.REPO_ROOT)
    assert set(config.get_envs()) <= set(env["env_vars"])  # Trinity's own variables stay


def test_worker_runtime_env_passes_nvlink_multicast_settings_on(tmp_path, monkeypatch):
    """Workers the head did not start from the launch shell still get NVLS / multicast off."""
    multicast_off = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
                     "NVSHMEM_DISABLE_NVLS": "1"}
    for name, value in multicast_off.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("MATHAGENT_UNRELATED_SETTING", "1")
    monkeypatch.setenv("MATHAGENT_IPC_SYNC", "1")  # a lever of mathagent.compat: passed on
    plan = launch.load_plan(FULL, work_dir=tmp_path)
    config = copy.deepcopy(plan.config)
    config.cluster.ray_address = "10.0.0.1:6379"
    env_vars = launch.worker_runtime_env(config)["env_vars"]
    assert {k: env_vars.get(k) for k in multicast_off} == multicast_off
    assert "MATHAGENT_UNRELATED_SETTING" not in env_vars
    assert env_vars["MATHAGENT_IPC_SYNC"] == "1"
    assert env_vars["RAY_ADDRESS"] == "10.0.0.1:6379"
    assert set(config.get_envs()) <= set(env_vars)


def test_colocate_with_low_memory_share_is_refused(arith_dry_run):
    """Trinity 0.6.0 marks the colocated engine (cuda_visible_devices) only while capping a
    gpu_memory_utilization above 0.25; without the mark the #602 fix cannot apply."""
    checked = copy.deepcopy(arith_dry_run[1].checked_config)
    result = launch.Preflight()
    launch.check_colocate_switch(checked, result)
    assert checked.explorer.rollout_model.cuda_visible_devices == "0" and not result.problems
    checked.explorer.rollout_model.cuda_visible_devices = None
    checked.explorer.rollout_model.gpu_memory_utilization = 0.2
    launch.check_colocate_switch(checked, result)
    assert len(result.problems) == 1
    problem = result.problems[0]
    assert "gpu_memory_utilization=0.2" in problem and "Trinity-RFT#602" in problem
    assert "cuda_visible_devices=0" in problem


def test_the_run_record_names_the_run_and_the_levers_set(arith_dry_run, monkeypatch, tmp_path):
    """What ``train`` writes into ``params.json`` before ``tune()`` (which needs a GPU):
    ``experiment`` and the engine-step benchmark read the levers from it."""
    from mathagent.launch.commands import run_record

    plan, result = arith_dry_run
    for name in compat.LEVER_ENVS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv(compat.VARLEN_ATTN_ENV, "1")
    monkeypatch.setenv(compat.SLOTS_ENV, "4")
    monkeypatch.delenv("PYTORCH_CUDA_ALLOC_CONF", raising=False)
    fix = compat.FixResult("trinity-colocate", "applied", "")
    record = run_record(plan, result, tmp_path / "trinity_config.yaml", [fix])
    assert record["levers"] == {compat.VARLEN_ATTN_ENV: "1", compat.SLOTS_ENV: "4"}
    assert record["torch_allocator"] is None
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
    assert run_record(plan, result, tmp_path / "trinity_config.yaml",
                      [fix])["torch_allocator"] == "expandable_segments:True"
    assert record["config"] == str(ARITH) and record["judge"] == "lenient_judge"
    assert record["selector"] == "difficulty_based"
    assert record["checkpoint_job_dir"] == str(result.checked_config.checkpoint_job_dir)
    assert record["compat_fixes"] == {"trinity-colocate": "applied"}
    json.dumps(record, default=str)  # what train writes
