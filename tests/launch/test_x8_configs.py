"""The 8-GPU layout with the bundled model: configs/config_{random,difficulty}_x8_arithmetic.yaml.

Each variant must be its reference config (config_random.yaml / config_difficulty.yaml: mode
both, 4 vLLM engines and 4 trainer GPUs, NCCL weight sync driven by the explorer) with only the
model, the taskset, the judge, the step count and the run name changed. Checked on what Trinity
would receive (``launch.config_diff`` of the plans: the YAML after Trinity's loader and
``tune()``'s Python-side settings), and with the real dry run of ``python -m mathagent train``
on the bundled data (one local Ray head shared by both dry runs).
"""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest
from launch_env import hub_cached, isolate

from mathagent import cli, launch, paths

CONFIGS = paths.CONFIGS_DIR
KINDS = ["random", "difficulty"]
SMOL_KEYS = ["smollm2_weak_pass_rate", "smollm2_strong_pass_rate"]
SMOL = "HuggingFaceTB/SmolLM2-135M-Instruct"
TASKSET = "buffer.explorer_input.taskset"
EVAL0 = "buffer.explorer_input.eval_tasksets.0"

#: Every key of Trinity's config in which a variant may differ from its reference: the run name,
#: the model (the YAML's model block and the rollout model tune() builds from
#: tuner.model: path, context length, no reasoning parser), the tasksets and the step count.
#: The judge lives in workflow_args, which config_diff leaves out; it is checked on the plan.
ALLOWED = {
    "name",
    "model.model_path", "model.max_model_len", "model.max_response_tokens",
    "explorer.rollout_model.model_path", "explorer.rollout_model.max_model_len",
    "explorer.rollout_model.reasoning_parser",
    f"{TASKSET}.name", f"{TASKSET}.path",
    f"{EVAL0}.name", f"{EVAL0}.path",
    "buffer.total_steps",
}
#: The difficulty-based run also swaps its two reference pass-rate columns.
ALLOWED_DIFFICULTY = ALLOWED | {f"{TASKSET}.data_selector.feature_keys"}

#: Settings of the layout and the experiment that must stay the reference's: flattened keys,
#: or every key under a prefix ending in "." (each matching at least one key). The selector's
#: kwargs are compared whole (the random selector has none).
LAYOUT_PREFIXES = ("mode", "cluster.", "synchronizer.", "trainer.", "algorithm.",
                   "explorer.rollout_model.engine_num",
                   "explorer.rollout_model.tensor_parallel_size",
                   "explorer.runner_per_model", "explorer.eval_interval", "explorer.max_timeout",
                   "buffer.batch_size", "buffer.total_epochs",
                   f"{TASKSET}.data_selector.selector_type", "data_processor.")


def variant(kind: str) -> Path:
    return CONFIGS / f"config_{kind}_x8_arithmetic.yaml"


def reference(kind: str) -> Path:
    return CONFIGS / f"config_{kind}.yaml"


@pytest.fixture(autouse=True)
def _environment(monkeypatch, tmp_path):
    isolate(monkeypatch, tmp_path)


# --------------------------------------------------------------------------------------
# The configs against their references
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_variant_differs_from_its_reference_only_where_allowed(kind, tmp_path):
    ref = launch.load_plan(reference(kind), work_dir=tmp_path / "ref")
    var = launch.load_plan(variant(kind), work_dir=tmp_path / "x8")
    rows = {key: (a, b) for key, a, b in launch.config_diff(ref, var)}
    allowed = ALLOWED_DIFFICULTY if kind == "difficulty" else ALLOWED
    assert set(rows) - allowed == set(), rows
    assert set(rows) == allowed  # each allowed key does change
    assert rows["model.model_path"][1] == rows["explorer.rollout_model.model_path"][1] == SMOL
    assert rows["model.max_model_len"][1] == rows["explorer.rollout_model.max_model_len"][1] \
        == 4096
    assert rows["model.max_response_tokens"][1] == 256
    assert rows["explorer.rollout_model.reasoning_parser"] == ("deepseek_r1", "")
    assert rows["buffer.total_steps"] == (None, 10)
    data = str(paths.DATA_DIR / "arithmetic")
    assert rows[f"{TASKSET}.path"][1] == rows[f"{EVAL0}.path"][1] == data
    assert rows[f"{TASKSET}.name"][1] == "arithmetic"
    assert rows[f"{EVAL0}.name"][1] == "eval-arithmetic"
    assert var.config.buffer.explorer_input.eval_tasksets[0].split == "test"
    if kind == "difficulty":
        assert rows[f"{TASKSET}.data_selector.feature_keys"][1] == SMOL_KEYS
    assert var.config.name == ("Random-Selector-X8-Arithmetic" if kind == "random"
                               else "Difficulty-Based-Selector-X8-Arithmetic")
    # the YAML's own rollout block (which tune() replaces) names no parser either
    assert var.yaml_config.explorer.rollout_model.reasoning_parser is None


@pytest.mark.parametrize("kind", KINDS)
def test_variant_trains_with_the_lenient_judge(kind, tmp_path):
    ref = launch.load_plan(reference(kind), work_dir=tmp_path / "ref")
    var = launch.load_plan(variant(kind), work_dir=tmp_path / "x8")
    assert ref.judge == "gsm8k_judge"
    assert var.judge == "lenient_judge" and var.judge_func.__name__ == "lenient_judge"
    inputs = var.config.buffer.explorer_input
    for taskset in (inputs.taskset, *inputs.eval_tasksets):
        assert taskset.workflow_args["judge_func"] is var.judge_func


@pytest.mark.parametrize("kind", KINDS)
def test_variant_keeps_the_reference_layout(kind, tmp_path):
    ref = launch.load_plan(reference(kind), work_dir=tmp_path / "ref")
    var = launch.load_plan(variant(kind), work_dir=tmp_path / "x8")
    flat_ref, flat_var = launch._flat(ref.config), launch._flat(var.config)
    for prefix in LAYOUT_PREFIXES:
        keys = {k for k in flat_ref.keys() | flat_var.keys()
                if (k.startswith(prefix) if prefix.endswith(".") else k == prefix)}
        assert keys, prefix
        assert {k: flat_var.get(k, launch.ABSENT) for k in keys} == \
            {k: flat_ref.get(k, launch.ABSENT) for k in keys}, prefix
    # and the layout is the reference run's
    c = var.config
    assert c.mode == "both"
    assert (c.cluster.node_num, c.cluster.gpu_per_node) == (1, 8)
    assert (c.explorer.rollout_model.engine_num, c.explorer.rollout_model.tensor_parallel_size) \
        == (4, 1)
    assert c.explorer.runner_per_model == 16 and c.explorer.eval_interval == 20
    assert (flat_var["synchronizer.sync_style"], flat_var["synchronizer.sync_method"],
            flat_var["synchronizer.sync_interval"]) == ("explorer_driven", "nccl", 4)
    assert (c.buffer.batch_size, c.algorithm.repeat_times, c.algorithm.optimizer.lr) \
        == (16, 8, 1e-6)
    selector = c.buffer.explorer_input.taskset.data_selector
    assert selector.selector_type == ("random" if kind == "random" else "difficulty_based")
    assert selector.kwargs == ref.config.buffer.explorer_input.taskset.data_selector.kwargs
    if kind == "difficulty":
        assert selector.kwargs == {"m": 8, "lamb": 0.1, "rho": 0.1, "target_reward": 0.8,
                                   "tau": 0, "do_sample": True}


def test_the_pair_differs_only_in_name_selector_and_operator(tmp_path):
    a = launch.load_plan(variant("random"), work_dir=tmp_path / "a")
    b = launch.load_plan(variant("difficulty"), work_dir=tmp_path / "b")
    keys = [k for k, _, _ in launch.config_diff(a, b)]
    assert keys and all(k == "name" or k.startswith((f"{TASKSET}.data_selector.",
                                                    "data_processor.experience_pipeline."))
                        for k in keys), keys
    assert launch.counterpart_path(variant("random")) == variant("difficulty")
    assert launch.counterpart_path(variant("difficulty")) == variant("random")


# --------------------------------------------------------------------------------------
# The dry runs
# --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ray_head(short_tmp_factory):
    """One local head for both dry runs (each would otherwise start and stop its own)."""
    folder = short_tmp_factory("ray-")
    with launch.local_ray_head(temp_dir=str(folder / "session"),
                               object_store_memory=100 * 1024**2) as head:
        yield head


@pytest.fixture(scope="module", params=KINDS)
def dry_run(request, ray_head, tmp_path_factory):
    """``train --dry-run`` of one variant: its kind, exit code, stdout, checkpoint root."""
    kind = request.param
    root = tmp_path_factory.mktemp(f"dry-run-{kind}")
    out = io.StringIO()
    with pytest.MonkeyPatch.context() as mp, contextlib.redirect_stdout(out):
        isolate(mp, root)
        rc = cli.main(["train", "--config", str(variant(kind)), "--dry-run",
                       f"cluster.ray_address={ray_head.address}"])
    return {"kind": kind, "rc": rc, "out": out.getvalue(), "head": ray_head.address,
            "checkpoints": root / "checkpoints"}


@pytest.mark.slow
def test_dry_run_passes(dry_run):
    out = dry_run["out"]
    assert dry_run["rc"] == 0, out
    assert not [ln for ln in out.splitlines() if ln.strip().startswith("FAIL")], out
    assert f"Ray cluster reachable at {dry_run['head']}" in out
    assert "Trinity's Config.check_and_update() passes" in out
    assert "Judge: lenient_judge (mathagent.judge.lenient_judge)" in out
    assert "Dry run: config and data are sound; training not started." in out
    assert not dry_run["checkpoints"].exists()  # the dry run wrote nothing there


@pytest.mark.slow
def test_dry_run_reports_the_arithmetic_tasksets(dry_run):
    kind, out = dry_run["kind"], dry_run["out"]
    data = re.escape(str(paths.DATA_DIR / "arithmetic"))
    columns = re.escape(f", feature columns {SMOL_KEYS} complete and in [0, 1]")
    train = re.search(rf"ok    {re.escape(TASKSET)} \(arithmetic\): {data} split 'train', "
                      rf"\d+ tasks({columns})?$", out, re.M)
    assert train, out
    assert bool(train.group(1)) == (kind == "difficulty")  # random reads no feature columns
    assert re.search(rf"ok    {re.escape(EVAL0)} \(eval-arithmetic\): {data} split "
                     r"'test', \d+ tasks$", out, re.M), out
    if kind == "difficulty":
        assert "selector m=8 equals the rollouts per task (repeat_times)" in out
        assert "operator 'pass_rate_calculator' resolves to" in out


@pytest.mark.slow
def test_dry_run_lists_the_8_gpu_launch_machine(dry_run):
    kind, out = dry_run["kind"], dry_run["out"]
    requirements = out.split("Requirements of the launch machine")[1].split("\n\n")[0]
    assert "8 GPU(s): cluster.node_num=1 x cluster.gpu_per_node=8 (this machine has " \
        in requirements
    assert "a Ray head offering at least 16 CPU and 8 GPU (4 vLLM engine(s): 4 GPU, 4 CPU; " \
        "trainer on 4 GPU(s): 4 GPU, 12 CPU)" in requirements
    if hub_cached(SMOL):
        assert f"ok    model {SMOL}: in the local hub cache" in out
    else:
        assert f"model {SMOL}: downloadable from the Hugging Face hub" in requirements
    # the resolved config: the reference's split of the 8 GPUs and its batch
    resolved = out.split("Resolved config")[1]
    for line in ("mode: both", "explorer_gpu_num: 4", "trainer_gpu_num: 4",
                 "train_batch_size: 128", "engine_num: 4", "sync_style: explorer_driven",
                 "sync_method: nccl", "sync_interval: 4", "max_model_len: 4096",
                 "max_response_tokens: 256", "reasoning_parser: ''"):
        assert re.search(rf"^\s*{re.escape(line)}$", resolved, re.M), line
    # the comparison pairs the two x8 variants by file name
    other = "config_difficulty_x8_arithmetic.yaml" if kind == "random" \
        else "config_random_x8_arithmetic.yaml"
    diff = out.split(f"Difference from {other}:")[1]
    assert "'random'" in diff and "'difficulty_based'" in diff
