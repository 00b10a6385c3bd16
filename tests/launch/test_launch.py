"""Training configs, preflight, the dry run and the Ray helpers (mathagent.launch).

Everything here is real: Trinity-RFT's loader and ``check_and_update()``, agentscope's
``_to_trinity_config`` (the function ``tune()`` applies its overrides with), the workflow and
judge, the selector/operator registries and a local Ray head. ``tune()`` itself (vLLM,
GPUs) is neither run nor faked: the tests check that the launch path refuses to start
without a Ray cluster and names every piece this machine lacks (GPUs, vllm, the model),
whatever the machine has (the probes of ``launch_env``).

Ray heads: one dry run starts and stops its own; the module fixture ``ray_head`` (started
with ``python -m mathagent ray start``, stopped in its teardown) is shared by the status
check and the dry runs; the ``ray stop`` test starts a head of its own. No test depends on
another having run first, and only processes these heads recorded are ever signalled.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import psutil
import pytest
from agentscope.tuner import check_workflow_function
from launch_env import (
    closed_address,
    cuda_available,
    hub_cached,
    isolate,
    visible_gpus,
    vllm_importable,
)

from mathagent import agent, cli, launch, paths

CONFIGS = paths.CONFIGS_DIR
GURU_KEYS = ["qwen2.5_7b_pass_rate", "qwen3_30b_pass_rate"]
SMOL_KEYS = ["smollm2_weak_pass_rate", "smollm2_strong_pass_rate"]
TASKSET = "buffer.explorer_input.taskset"
EVAL0 = "buffer.explorer_input.eval_tasksets.0"


def write_taskset(folder: Path, features=(), splits=("train", "test"), n: int = 12,
                  nan_row: int | None = None) -> Path:
    """A small taskset in the documented on-disk schema (parquet per split)."""
    rng = np.random.default_rng(len(str(folder)))
    frame = pd.DataFrame({"question": [f"What is {i} + {i + 3}?" for i in range(n)],
                          "answer": [f"#### {2 * i + 3}" for i in range(n)]})
    for j, key in enumerate(features):
        frame[key] = np.round(np.clip(rng.random(n) * 0.8 + 0.1 * j, 0, 1), 4)
    if nan_row is not None:
        frame.loc[nan_row, features[-1]] = np.nan
    folder.mkdir(parents=True, exist_ok=True)
    for split in splits:
        frame.to_parquet(folder / f"{split}.parquet", index=False)
    (folder / "provenance.json").write_text(json.dumps({"kind": "test fixture"}))
    return folder


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("data")
    return {
        "guru": write_taskset(root / "guru", GURU_KEYS),
        "guru_nan": write_taskset(root / "guru_nan", GURU_KEYS, nan_row=3),
        "plain": write_taskset(root / "plain"),
        "aime": write_taskset(root / "aime", splits=("test",), n=5),
        "arith": write_taskset(root / "arith", SMOL_KEYS),
    }


@pytest.fixture(autouse=True)
def _environment(monkeypatch, tmp_path):
    isolate(monkeypatch, tmp_path)


def data_overrides(data, train="guru", evals="aime") -> list[str]:
    return [f"{TASKSET}.path={data[train]}", f"{EVAL0}.path={data[evals]}"]


def train(args: list[str], capsys) -> tuple[int, str, str]:
    rc = cli.main(["train", *args])
    out = capsys.readouterr()
    return rc, out.out, out.err


def fail_lines(text: str) -> list[str]:
    return [ln.strip()[len("FAIL"):].strip() for ln in text.splitlines()
            if ln.strip().startswith("FAIL")]


# --------------------------------------------------------------------------------------
# The configs
# --------------------------------------------------------------------------------------

ALL_CONFIGS = sorted(p.name for p in CONFIGS.glob("config_*.yaml"))  # Trinity configs
PAIRS = [("config_random.yaml", "config_difficulty.yaml"),
         ("config_random_1gpu.yaml", "config_difficulty_1gpu.yaml"),
         ("config_random_arithmetic.yaml", "config_difficulty_arithmetic.yaml"),
         ("config_random_arithmetic.yaml", "config_bots_arithmetic.yaml"),
         ("config_random_x8_arithmetic.yaml", "config_difficulty_x8_arithmetic.yaml"),
         ("config_random_qwen.yaml", "config_difficulty_qwen.yaml"),
         ("config_random_qwen.yaml", "config_bots_qwen.yaml")]


def test_the_expected_configs_exist():
    assert set(ALL_CONFIGS) == {n for pair in PAIRS for n in pair}


@pytest.mark.parametrize("name", ALL_CONFIGS)
def test_every_config_loads_through_trinity(name, tmp_path):
    plan = launch.load_plan(CONFIGS / name, work_dir=tmp_path)
    taskset = plan.config.buffer.explorer_input.taskset
    assert taskset.task_selector is None  # 0.6.0 key `data_selector`, not the deprecated one
    assert plan.config.project == "Data-Augmentation"
    assert plan.config.algorithm.algorithm_type == "multi_step_grpo"
    assert plan.config.monitor.monitor_type == "tensorboard"
    assert len(plan.config.buffer.explorer_input.eval_tasksets) == 1
    assert plan.config.buffer.explorer_input.eval_tasksets[0].split == "test"
    selector = taskset.data_selector
    if selector.selector_type != "random":
        assert selector.kwargs["m"] == plan.config.algorithm.repeat_times
        assert len(selector.feature_keys) == 2
    # the workflow and judge the tuner installs
    assert taskset.default_workflow_type == "agentscope_workflow_adapter_v1"
    assert taskset.workflow_args["workflow_func"] is plan.workflow_func
    assert plan.workflow_func.__module__ == "mathagent.agent"
    # the upstream judge, except on the bundled model, which needs the lenient one for signal
    expected = "lenient_judge" if "arithmetic" in name else "gsm8k_judge"
    if "qwen" in name:  # the Qwen policy's agent is offered no tools (its measured setting)
        assert plan.settings["agent"]["meta_tool"] is False
        assert plan.settings["agent"]["python_tool"] is False
        # the configs' runner settings (docs/engineering.md): asynchronous runners, one per
        # task of a batch, and the learning rate in both places that name one
        explorer = plan.config.explorer
        assert explorer.concurrent_mode == "asynchronous"
        assert explorer.runner_per_model == plan.config.buffer.batch_size
        assert explorer.max_repeat_times_per_runner is None
        assert plan.config.algorithm.optimizer.lr == plan.settings["algorithm"]["learning_rate"]
    assert plan.judge == expected and plan.judge_func.__name__ == expected
    assert taskset.workflow_args["judge_func"] is plan.judge_func
    # dataset paths are absolute, under the repository
    assert Path(taskset.path).is_absolute() and Path(taskset.path).parent == paths.DATA_DIR


@pytest.mark.parametrize(("a", "b"), PAIRS)
def test_pairs_differ_only_in_name_selector_and_operator(a, b, tmp_path):
    plan_a = launch.load_plan(CONFIGS / a, work_dir=tmp_path / "a")
    plan_b = launch.load_plan(CONFIGS / b, work_dir=tmp_path / "b")
    keys = [k for k, _, _ in launch.config_diff(plan_a, plan_b)]
    allowed = ("name", f"{TASKSET}.data_selector.", "data_processor.experience_pipeline.")
    assert keys and all(k == "name" or k.startswith(allowed[1:]) for k in keys), keys
    assert f"{TASKSET}.data_selector.selector_type" in keys
    assert any(k.startswith("data_processor.experience_pipeline.operators") for k in keys)
    assert launch.counterpart_path(CONFIGS / b) == CONFIGS / a


def test_reference_settings_override_the_yaml(tmp_path):
    plan = launch.load_plan(CONFIGS / "config_difficulty.yaml",
                            ["buffer.batch_size=4", "explorer.eval_interval=7"], tmp_path)
    # the Python-side settings of the reference launcher win over the YAML ...
    assert plan.config.buffer.batch_size == 16 and plan.yaml_config.buffer.batch_size == 4
    assert plan.config.explorer.eval_interval == 20
    assert plan.config.explorer.rollout_model.engine_num == 4
    changed = {k: (a, b) for k, a, b in plan.overridden}
    assert changed["buffer.batch_size"] == (4, 16)
    assert changed["explorer.eval_interval"] == (7, 20)
    assert changed["explorer.rollout_model.model_path"] == (None, "Qwen/Qwen3-0.6B")
    # ... and are changed on the command line under tuner.*
    plan = launch.load_plan(CONFIGS / "config_difficulty.yaml",
                            ["tuner.algorithm.batch_size=32", "tuner.model.temperature=0.7"],
                            tmp_path / "b")
    assert plan.config.buffer.batch_size == 32
    assert any("does not forward TunerModelConfig.temperature=0.7" in n for n in plan.notes)


def test_a_learning_rate_in_exponent_notation_is_a_number(tmp_path):
    """``1e-6`` on the command line is the number (PyYAML alone reads it as a string, which
    the tuner's settings would then carry)."""
    plan = launch.load_plan(CONFIGS / "config_random_qwen.yaml",
                            ["tuner.algorithm.learning_rate=2e-6", "algorithm.optimizer.lr=2E-6"],
                            tmp_path)
    assert plan.settings["algorithm"]["learning_rate"] == 2e-6
    assert plan.config.algorithm.optimizer.lr == 2e-6
    assert launch.parse_override("tuner.judge=1e3x") == ("tuner.judge", "1e3x")
    for text, number in [("1.5e-6", 1.5e-6), (".5e6", 5e5), ("-2e3", -2000.0)]:
        assert launch.parse_override(f"a.b={text}") == ("a.b", number)


def test_small_variants_carry_their_own_tuner_block(tmp_path):
    plan = launch.load_plan(CONFIGS / "config_difficulty_1gpu.yaml", work_dir=tmp_path)
    assert plan.config.mode == "colocate"
    assert plan.config.explorer.rollout_model.engine_num == 1
    assert plan.config.buffer.batch_size == 8
    plan = launch.load_plan(CONFIGS / "config_bots_arithmetic.yaml", work_dir=tmp_path / "b")
    assert plan.config.model.model_path == "HuggingFaceTB/SmolLM2-135M-Instruct"
    assert plan.config.explorer.rollout_model.reasoning_parser == ""
    selector = plan.config.buffer.explorer_input.taskset.data_selector
    assert selector.selector_type == "mathagent.selectors.BOTSSelector"
    assert list(selector.feature_keys) == SMOL_KEYS


def test_relative_paths_resolve_against_the_repo_root(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("TRINITY_CHECKPOINT_ROOT_DIR")
    plan = launch.load_plan(CONFIGS / "config_random.yaml", work_dir=tmp_path / "w")
    bi = plan.config.buffer.explorer_input
    assert bi.taskset.path == str(paths.GURU_DIR)
    assert bi.eval_tasksets[0].path == str(paths.AIME24_DIR)
    assert plan.config.checkpoint_root_dir == str(paths.REPO_ROOT / "checkpoints")


@pytest.mark.parametrize(("override", "key", "why"), [
    ("buffer.explorer_input.taskset.sampler=top", "buffer.explorer_input.taskset.sampler",
     "Key 'sampler' not in 'TasksetConfig'"),
    ("buffer.batch_size=lots", "buffer.batch_size", "could not be converted to Integer"),
    ("tuner.model.temprature=0.5", "tuner.model.temprature", "not a field of TunerModelConfig"),
    ("tuner.algorithm.group_size=many", "tuner.algorithm.group_size", "valid integer"),
    ("tuner.agent.python_tool=maybe", "tuner.agent.python_tool",
     "expected true or false, got 'maybe'"),
    ("tuner.agent.tool_timeout=0", "tuner.agent.tool_timeout", "must be a number of seconds above 0"),
    ("tuner.agent.tool_timeout=1e20", "tuner.agent.tool_timeout", "at most 3600, got 1e+20"),
    ("tuner.agent.max_iters=2.5", "tuner.agent.max_iters", "expected a whole number"),
    ("tuner.agent.sandbox=off", "tuner.agent.sandbox", "not an agent setting"),
])
def test_bad_settings_fail_in_one_line_naming_the_key(override, key, why, capsys):
    rc, out, err = train(["--config", str(CONFIGS / "config_random.yaml"), "--dry-run",
                          override], capsys)
    assert rc == 2
    line = err.strip()
    assert "\n" not in line
    assert f"`{key}`" in line and why in line and "config_random.yaml" in line


def test_the_agent_is_the_upstream_one_by_default(tmp_path):
    plan = launch.load_plan(CONFIGS / "config_random.yaml", work_dir=tmp_path)
    assert plan.settings["agent"] == {"python_tool": False, "tool_timeout": 10.0,
                                      "max_iters": 10, "text_tool_calls": False,
                                      "meta_tool": True}
    assert plan.workflow_func is agent.run_react_agent
    taskset = launch.summarize_config(plan.config)["buffer"]["tasksets"][0]
    assert taskset["agent"]["python_tool"] is False and "tool_sandbox" not in taskset["agent"]


def test_tuner_agent_turns_the_sandboxed_tool_on(tmp_path):
    plan = launch.load_plan(CONFIGS / "config_difficulty_1gpu.yaml",
                            ["tuner.agent.python_tool=true", "tuner.agent.tool_timeout=5",
                             "tuner.agent.max_iters=4", "tuner.agent.text_tool_calls=true",
                             "tuner.agent.meta_tool=false"],
                            tmp_path)
    assert plan.settings["agent"] == {"python_tool": True, "tool_timeout": 5,
                                      "max_iters": 4, "text_tool_calls": True,
                                      "meta_tool": False}
    options = plan.workflow_func.options
    assert (options.python_tool, options.tool_timeout, options.max_iters,
            options.text_tool_calls, options.meta_tool) == (True, 5.0, 4, True, False)
    assert plan.workflow_func is not agent.run_react_agent
    check_workflow_function(plan.workflow_func)
    # the train and eval tasksets both run it, and the report says what it is
    bi = plan.config.buffer.explorer_input
    for taskset in (bi.taskset, *bi.eval_tasksets):
        assert taskset.workflow_args["workflow_func"] is plan.workflow_func
    summary = launch.summarize_config(plan.config)
    for taskset in summary["buffer"]["tasksets"] + summary["buffer"]["eval_tasksets"]:
        assert taskset["agent"]["python_tool"] is True
        assert taskset["agent"]["tool_sandbox"]["timeout"] == 5.0
    assert "tool_sandbox:" in launch.format_yaml(summary)


def test_a_config_file_can_carry_the_agent_block(tmp_path):
    text = (CONFIGS / "config_random_1gpu.yaml").read_text()
    assert re.search(r"^tuner:\n", text, re.M)
    config = tmp_path / "config_tool.yaml"
    config.write_text(re.sub(r"^tuner:\n", "tuner:\n  agent:\n    python_tool: true\n", text,
                             flags=re.M))
    plan = launch.load_plan(config, work_dir=tmp_path / "w")
    assert plan.settings["agent"]["python_tool"] is True
    assert plan.workflow_func.options.tool_timeout == 10.0
    assert "tuner" not in (tmp_path / "w" / "trinity_config.yaml").read_text()


def test_the_train_report_shows_the_agent(data, tmp_path, capsys):
    """The Python-side settings printed before the preflight name the agent's settings
    (a missing taskset stops this run before Ray)."""
    rc, out, _ = train(["--config", str(CONFIGS / "config_random_1gpu.yaml"), "--dry-run",
                        f"{TASKSET}.path={tmp_path / 'missing'}", f"{EVAL0}.path={data['aime']}",
                        "tuner.agent.python_tool=true", f"cluster.ray_address={closed_address()}"],
                       capsys)
    assert rc == 1
    settings = out.split("Python-side settings")[1].split("Values they change")[0]
    assert "agent:\n  python_tool: true\n  tool_timeout: 10.0\n  max_iters: 10" in settings


def test_a_launch_marks_its_start_up_up_to_where_it_stops(data, tmp_path, capsys):
    """Without ``--dry-run`` ``train`` prints a timed mark once its config is loaded and
    another once its preflight passes (mathagent.experiment.layout splits the start-up by
    them); a failed preflight stops it before the second."""
    rc, out, _ = train(["--config", str(CONFIGS / "config_random_1gpu.yaml"),
                        f"{TASKSET}.path={tmp_path / 'missing'}", f"{EVAL0}.path={data['aime']}",
                        f"cluster.ray_address={closed_address()}"], capsys)
    assert rc == 1
    marks = [line for line in out.splitlines() if line.startswith("launch ")]
    assert len(marks) == 1 and " config loaded (" in marks[0], marks
    assert re.fullmatch(r"launch \d\d-\d\d \d\d:\d\d:\d\d config loaded "
                        r"\(\d+\.\d s after `train` read its arguments\)", marks[0])


def test_missing_config_file(capsys):
    rc, _, err = train(["--config", "configs/nope.yaml", "--dry-run"], capsys)
    assert rc == 2 and "nope.yaml: no such config file" in err


# --------------------------------------------------------------------------------------
# Preflight failures: one message per problem, naming the setting
# --------------------------------------------------------------------------------------

SEL = f"{TASKSET}.data_selector"
FAILURES = {
    "taskset missing": ("config_random.yaml", [f"{TASKSET}.path=MISSING"],
                        [rf"{TASKSET} \(guru-math\): .*/missing-taskset: no such taskset "
                         "directory"]),
    "eval set missing": ("config_random.yaml", [f"{EVAL0}.path=MISSING"],
                         [rf"{EVAL0} \(eval-aime24\): .*/missing-taskset: no such taskset"]),
    "feature columns lacking": ("config_difficulty.yaml", [f"{TASKSET}.path=PLAIN"],
                                [r"missing column\(s\) 'qwen2.5_7b_pass_rate', "
                                 "'qwen3_30b_pass_rate'"]),
    "NaN feature": ("config_difficulty.yaml", [f"{TASKSET}.path=NAN"],
                    [r"row 3, column 'qwen3_30b_pass_rate': missing pass rate \(NaN or null\)"]),
    "m vs repeat_times": ("config_difficulty.yaml", [f"{SEL}.kwargs.m=16"],
                          [rf"{SEL}.kwargs.m: m=16 but every task is rolled out 8 times"]),
    "m vs group_size": ("config_difficulty.yaml", ["tuner.algorithm.group_size=4"],
                        [rf"{SEL}.kwargs.m: m=8 but every task is rolled out 4 times"]),
    "m unset": ("NO_M", [],
                [rf"{SEL}.kwargs.m: not set, so the selector uses its default m=16"]),
    "selector name": ("config_random.yaml", [f"{SEL}.selector_type=hardest_first"],
                      [r"selector 'hardest_first' does not resolve"]),
    "selector path": ("config_random.yaml",
                      [f"{SEL}.selector_type=mathagent.selectors.NoSuchSelector"],
                      [r"selector 'mathagent.selectors.NoSuchSelector' does not resolve "
                       r"\(ImportError"]),
    "operator name": ("config_difficulty.yaml",
                      ["data_processor.experience_pipeline.operators.0.name=pass_rate_calc"],
                      [r"operators.0.name: operator 'pass_rate_calc' does not resolve",
                       r"no operator computes them"]),
    "misspelt kwarg": ("config_difficulty.yaml", [f"{SEL}.kwargs.lambda=0.1"],
                       [r"unknown keyword argument\(s\) \['lambda'\]"]),
    "model path": ("config_random.yaml", ["tuner.model.model_path=/nonexistent/qwen"],
                   [r"model.model_path: /nonexistent/qwen does not exist"]),
}


@pytest.mark.parametrize("case", list(FAILURES))
def test_preflight_failure_is_named(case, data, tmp_path, capsys):
    config, overrides, patterns = FAILURES[case]
    subst = {"MISSING": str(tmp_path / "missing-taskset"), "PLAIN": str(data["plain"]),
             "NAN": str(data["guru_nan"])}
    overrides = [re.sub("MISSING|PLAIN|NAN", lambda m: subst[m.group()], o) for o in overrides]
    if config == "NO_M":  # the difficulty config without its `m:` line
        text = (CONFIGS / "config_difficulty.yaml").read_text()
        assert re.search(r"^\s+m: 8 .*\n", text, re.M)
        config = tmp_path / "config_no_m.yaml"
        config.write_text(re.sub(r"^\s+m: 8 .*\n", "", text, flags=re.M))
    args = ["--config", str(CONFIGS / config), "--dry-run", *data_overrides(data), *overrides,
            f"cluster.ray_address={closed_address()}"]
    rc, out, err = train(args, capsys)
    assert rc == 1, out
    problems = fail_lines(out)
    assert len(problems) == len(patterns), problems
    for pattern in patterns:
        assert any(re.search(pattern, p) for p in problems), (pattern, problems)
    assert f"{len(patterns)} problem(s)" in err
    assert "started a temporary head" not in out  # static problems stop before Ray


QWEN = "Qwen/Qwen3-0.6B"  # the model of the full configs


def test_launch_on_this_machine_lists_every_missing_piece(data, capsys):
    """Without --dry-run and without a Ray cluster: one problem for each piece this machine
    lacks (on a CPU machine: 8 GPUs, vllm, Ray and the model, the hub being unreachable), an
    ok line for each it has; no training."""
    address = closed_address()
    rc, out, _ = train(["--config", str(CONFIGS / "config_difficulty.yaml"),
                        *data_overrides(data), f"cluster.ray_address={address}"], capsys)
    assert rc == 1
    problems = fail_lines(out)
    gpus = visible_gpus()
    expected = [rf"cluster.ray_address: no Ray cluster reachable at '{address}'"]
    if gpus < 8:
        expected.append(r"cluster.gpu_per_node: the config needs 8 GPU\(s\) per node \(8 in "
                        rf"all\) but this machine has {gpus}")
    else:
        assert f"ok    {gpus} GPU(s) visible, 8 needed per node" in out
    if not vllm_importable():
        expected.append(r"vllm is not importable")
    else:
        assert "ok    vllm is importable" in out
    if not hub_cached(QWEN):
        expected.append(rf"model.model_path: {QWEN} is not a local folder and the Hugging Face "
                        "hub is unreachable")
    else:
        assert f"ok    model {QWEN}: in the local hub cache" in out
    assert len(problems) == len(expected), problems
    for pattern in expected:
        assert any(re.search(pattern, p) for p in problems), (pattern, problems)
    assert "Resolved config" not in out


def test_local_model_folder_must_be_a_hugging_face_folder(data, tmp_path, capsys):
    folder = tmp_path / "model"
    folder.mkdir()
    args = ["--config", str(CONFIGS / "config_random.yaml"), "--dry-run", *data_overrides(data),
            f"tuner.model.model_path={folder}"]
    rc, out, _ = train(args, capsys)
    assert rc == 1
    assert fail_lines(out) == [f"model.model_path: {folder} exists but is not a Hugging Face "
                               "model folder (no config.json); vLLM and the trainer need one"]


# --------------------------------------------------------------------------------------
# Dry runs with Ray (file order: at most one head alive at a time)
# --------------------------------------------------------------------------------------


def _processes_mentioning(text: str) -> list[int]:
    found = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        try:
            if text in " ".join(proc.info["cmdline"] or []):
                found.append(proc.pid)
        except psutil.Error:
            continue
    return found


@pytest.mark.slow
def test_dry_run_starts_and_stops_its_own_ray_head(data, tmp_path, capsys):
    rc, out, _ = train(["--config", str(CONFIGS / "config_difficulty.yaml"), "--dry-run",
                        *data_overrides(data), f"cluster.ray_address={closed_address()}"],
                       capsys)
    assert rc == 0, out
    m = re.search(r"started a temporary head at (\S+) \(session (\S+);", out)
    assert m, out
    session = m.group(2)
    assert not Path(session).exists()
    assert _processes_mentioning(session) == []
    assert "Trinity's Config.check_and_update() passes" in out
    assert not (tmp_path / "checkpoints").exists()  # the dry run wrote nothing there


def start_head(folder: Path) -> tuple[launch.RayHead, Path]:
    """A 1-CPU head started with `python -m mathagent ray start`; its record and state file."""
    state = folder / "head.json"
    rc = cli.main(["ray", "start", "--num-cpus", "1", "--temp-dir", str(folder / "session"),
                   "--state-file", str(state), "--object-store-memory", str(100 * 1024**2)])
    assert rc == 0
    return launch.RayHead(**json.loads(state.read_text())), state


def stop_head(head: launch.RayHead, state: Path) -> None:
    """Stop what is left of a head started by :func:`start_head`: only the processes it
    recorded (and their descendants), whichever test ran last."""
    head.stop()
    state.unlink(missing_ok=True)


@pytest.fixture
def own_ray_head(short_tmp_factory):
    """A head for one test, which stops it itself; stopped here if that test did not."""
    head, state = start_head(short_tmp_factory("rs-"))
    try:
        yield head, state
    finally:
        stop_head(head, state)


@pytest.mark.slow
def test_ray_stop_leaves_no_process(own_ray_head, capsys):
    head, state = own_ray_head
    capsys.readouterr()
    pids = head.processes()
    assert pids
    assert cli.main(["ray", "stop", "--state-file", str(state)]) == 0
    assert f"stopped the Ray head at {head.address}" in capsys.readouterr().out
    assert not state.exists()
    assert head.processes() == []
    assert not any(psutil.pid_exists(p) and psutil.Process(p).status() != "zombie"
                   for p in pids)
    assert cli.main(["ray", "status", "--state-file", str(state)]) == 1


@pytest.fixture(scope="module")
def ray_head(short_tmp_factory):
    """A head shared by the module's tests, which leave it running; stopped after the last."""
    head, state = start_head(short_tmp_factory("ray-"))
    try:
        yield head, state
    finally:
        stop_head(head, state)
    assert head.processes() == []


@pytest.mark.slow
def test_ray_start_and_status(ray_head, capsys):
    head, state = ray_head
    capsys.readouterr()
    pids = head.processes()
    names = {psutil.Process(p).name() for p in pids}
    assert {"gcs_server", "raylet"} <= names
    assert cli.main(["ray", "status", "--state-file", str(state)]) == 0
    out = capsys.readouterr().out
    assert f"Ray head at {head.address}" in out
    assert re.search(r"^\s+CPU: 1$", out, re.M)
    # a second start while it runs is refused
    assert cli.main(["ray", "start", "--state-file", str(state)]) == 1
    assert "already running" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.parametrize("name", ["config_random.yaml", "config_difficulty.yaml"])
def test_dry_run_passes_for_the_full_configs(name, ray_head, data, tmp_path, capsys):
    head, _ = ray_head
    rc, out, _ = train(["--config", str(CONFIGS / name), "--dry-run", *data_overrides(data),
                        f"cluster.ray_address={head.address}"], capsys)
    assert rc == 0, out
    assert fail_lines(out) == []
    assert f"Ray cluster reachable at {head.address}" in out
    assert "Trinity's Config.check_and_update() passes" in out
    requirements = out.split("Requirements of the launch machine")[1].split("\n\n")[0]
    assert "8 GPU(s): cluster.node_num=1 x cluster.gpu_per_node=8 (this machine has " \
        f"{visible_gpus()})" in requirements
    if vllm_importable():
        assert "ok    vllm is importable" in out and "vllm importable" not in requirements
    else:
        assert "vllm importable" in requirements
    if hub_cached(QWEN):
        assert f"ok    model {QWEN}: in the local hub cache" in out
    else:
        assert f"model {QWEN}: downloadable from the Hugging Face hub" in requirements
    # the resolved config comes from check_and_update(): GPUs split between explorer/trainer
    assert "explorer_gpu_num: 4" in out and "trainer_gpu_num: 4" in out
    assert "train_batch_size: 128" in out
    other = "config_random.yaml" if "difficulty" in name else "config_difficulty.yaml"
    diff = out.split(f"Difference from {other}:")[1]
    assert "data_selector.selector_type" in diff and "'random'" in diff
    assert "'difficulty_based'" in diff
    assert "Dry run: config and data are sound" in out
    # the start-up marks are a launch's: a dry run prints none
    assert not any(line.startswith("launch ") for line in out.splitlines())
    assert not (tmp_path / "checkpoints").exists()
    # Trinity's own log lines are collected into notes, not printed as they come (its GPU
    # memory check logs NO GPU DETECTED where torch sees no CUDA device)
    if cuda_available():
        assert "NO GPU DETECTED" not in out
    else:
        assert "note  Trinity check_and_update() ERROR: NO GPU DETECTED" in out
    assert "[config_validator.py:" not in out


@pytest.mark.slow
@pytest.mark.parametrize("name", ["config_difficulty_1gpu.yaml", "config_bots_arithmetic.yaml"])
def test_dry_run_passes_for_small_variants(name, ray_head, data, capsys):
    head, _ = ray_head
    train_set = "arith" if "arithmetic" in name else "guru"
    rc, out, _ = train(["--config", str(CONFIGS / name), "--dry-run",
                        *data_overrides(data, train_set, "arith" if train_set == "arith"
                                        else "aime"),
                        f"cluster.ray_address={head.address}"], capsys)
    assert rc == 0, out
    assert "1 GPU(s): cluster.node_num=1 x cluster.gpu_per_node=1" in out
    assert "mode: colocate" in out
    if "bots" in name:
        assert "resolves to mathagent.selectors.BOTSSelector" in out
        assert "resolves to mathagent.selectors.RolloutPassRateCalculator" in out
        assert "Difference from config_random_arithmetic.yaml" in out


def test_the_qwen_third_arm_is_difficulty_based_with_the_package_selector_at_target_half():
    """config_bots_qwen.yaml is config_difficulty_qwen.yaml with the package's BOTSSelector and
    target_reward 0.5 (and a run name of its own): every other setting of the experiment the
    same, its feedback operator included."""
    import yaml

    bots, diff = (yaml.safe_load((CONFIGS / name).read_text())
                  for name in ("config_bots_qwen.yaml", "config_difficulty_qwen.yaml"))

    def selector(config):
        return config["buffer"]["explorer_input"]["taskset"]["data_selector"]

    assert (selector(bots)["selector_type"], selector(bots)["kwargs"]["target_reward"]) == (
        "mathagent.selectors.BOTSSelector", 0.5)
    assert (selector(diff)["selector_type"], selector(diff)["kwargs"]["target_reward"]) == (
        "difficulty_based", 0.8)
    assert (bots["name"], diff["name"]) == ("BOTS-Selector-Qwen", "Difficulty-Based-Selector-Qwen")
    for config in (bots, diff):
        config.pop("name")
        selector(config).pop("selector_type")
        selector(config)["kwargs"].pop("target_reward")
    assert bots == diff


@pytest.mark.slow
@pytest.mark.parametrize("name", ["config_random_qwen.yaml", "config_difficulty_qwen.yaml",
                                  "config_bots_qwen.yaml"])
def test_dry_run_passes_for_the_qwen_configs(name, ray_head, tmp_path, monkeypatch, capsys):
    """The Qwen policy's pair on the committed Qwen taskset (its two measured feature columns)
    and the agent offered no tools, in both tasksets Trinity is given."""
    head, _ = ray_head
    model = tmp_path / "qwen"
    model.mkdir()
    (model / "config.json").write_text('{"model_type": "qwen2"}')
    monkeypatch.setenv("TRINITY_MODEL_PATH", str(model))
    rc, out, _ = train(["--config", str(CONFIGS / name), "--dry-run",
                        f"cluster.ray_address={head.address}"], capsys)
    assert rc == 0, out
    assert "Trinity's Config.check_and_update() passes" in out
    assert f"ok    model {model}: local Hugging Face folder" in out
    if "random" not in name:
        assert ("4400 tasks, feature columns ['qwen_short_pass_rate', 'qwen_bare_pass_rate'] "
                "complete and in [0, 1]") in out
    if "bots" in name:
        assert "resolves to mathagent.selectors.BOTSSelector" in out
    resolved = out.split("Resolved config")[1].split("Difference from")[0]
    assert resolved.count("meta_tool: false") == 2  # the training and the eval taskset
    assert "judge_func: mathagent.judge.gsm8k_judge" in resolved


@pytest.mark.slow
def test_dry_run_with_the_python_tool(ray_head, data, capsys):
    """Trinity's check_and_update() accepts the workflow made for ``tuner.agent``, and the
    resolved config printed by the dry run says which agent each taskset runs."""
    head, _ = ray_head
    rc, out, _ = train(["--config", str(CONFIGS / "config_bots_arithmetic.yaml"), "--dry-run",
                        *data_overrides(data, "arith", "arith"), "tuner.agent.python_tool=true",
                        "tuner.agent.tool_timeout=5", f"cluster.ray_address={head.address}"],
                       capsys)
    assert rc == 0, out
    assert "Trinity's Config.check_and_update() passes" in out
    resolved = out.split("Resolved config")[1].split("Difference from")[0]
    assert resolved.count("python_tool: true") == 2  # the training and the eval taskset
    assert resolved.count("sandbox: mathagent.sandbox") == 2
    assert "tool_timeout: 5.0" in resolved
