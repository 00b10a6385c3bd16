"""Fixes for released upstream versions that stop a one-GPU Trinity-RFT run, and the levers
(start-up and speed) that act on the same upstream code, applied at launch.

Each :class:`Fix` names the upstream problem, the package and the exact released versions it
is for. :func:`apply_all` applies the fixes the installed versions need and reports the others
as skipped; nothing installed is edited: a fix replaces one function of an imported module, in
the process that applies it. ``python -m mathagent train`` applies them in its own process and,
through Ray's ``worker_process_setup_hook`` (:data:`WORKER_SETUP_HOOK`), in every Ray worker
process of the run, which is where Trinity's explorer and verl's training workers live.

In a worker a fix is applied when its upstream module is imported (a post-import hook on
``sys.meta_path``), not at worker start: most workers never import vLLM's or verl's code.

The fixes:

* ``trinity-colocate``: Trinity-RFT 0.6.0's ``colocate`` mode (one GPU shared by the vLLM
  engine and the trainer) deadlocks in Ray scheduling (agentscope-ai/Trinity-RFT#602, fixed on
  upstream main after the release). The allocator reserves ``{"GPU": 1}`` for the engine in a
  placement group, and verl's trainer pool then waits forever for a second GPU. The fix starts
  the engine actor outside any placement group with no GPU reservation, as upstream main does.
  Only colocate mode sets ``rollout_model.cuda_visible_devices`` in 0.6.0, so that is the switch
  (the preflight refuses a colocate config where Trinity leaves it unset); every other mode,
  and a non-vLLM engine, keeps the original code path.
* ``verl-bert-padding``: verl 0.8.0 (``verl/utils/attention_utils.py``) imports
  ``flash_attn.bert_padding`` on every CUDA machine, even with ``attn_implementation: sdpa`` and
  ``use_remove_padding: false`` (Trinity's reference-log-prob step calls it), and flash-attn has
  no wheel. The fix falls back to verl's own pure-torch copies of the same four functions
  (``verl.utils.npu_flash_attn_utils``) when flash-attn is not importable; where it is, verl's
  code runs unchanged.
* ``verl-fused-head-fsdp2``: verl 0.8.0's fused policy head reads an untied ``lm_head.weight``
  that FSDP2 keeps sharded; on one device it gets the full weight (:mod:`mathagent.fused_head`).
* ``trinity-early-explorer`` and ``trinity-early-runners`` (start-up levers, only with
  ``MATHAGENT_EARLY_EXPLORER=1`` and ``MATHAGENT_EARLY_RUNNERS=1``): the explorer prepared
  beside the trainer's constructor, and its rollout coordinator and workflow runners made
  beside vLLM's start (:mod:`mathagent.early_start`). Everything else is unchanged.
* ``trinity-ipc-sync`` (a speed lever, on unless ``MATHAGENT_IPC_SYNC=0``): Trinity-RFT 0.6.0
  syncs a colocated trainer's weights to vLLM through the CPU in float32; the lever sends CUDA
  IPC handles of bfloat16 copies instead (:mod:`mathagent.ipc_weights`), on one GPU only. It
  is kept because it paid: ``benchmarks/bench_engine_step.md`` has the sync before and after,
  and a 16-step run with it beside the same run without.
* ``transformers-varlen-attention`` (a speed lever, only with ``MATHAGENT_VARLEN_ATTN=1``):
  flash-attn has no wheel, so the trainer runs ``sdpa`` over micro-batches padded to their
  longest sequence. The lever registers :data:`VARLEN_ATTN_NAME` with transformers, an
  attention that keeps to each sequence of a packed row (:mod:`mathagent.varlen_attention`,
  PyTorch's own variable-length FlashAttention on the GPU); with it, ``train`` fills verl's
  unset attention settings with that name and ``use_remove_padding: true``
  (:mod:`mathagent.launch.attention`). Off unless asked for (the 60-step spec asks); its
  effect, with the blocked log-probabilities: ``benchmarks/bench_engine_step_levers.md``.
* ``trinity-runner-slots`` (a speed lever, only with ``MATHAGENT_RUNNER_SLOTS=K``, K >= 2):
  each of Trinity-RFT 0.6.0's workflow runners takes K tasks at once instead of one
  (:mod:`mathagent.runner_slots`), for evaluation; asynchronous runners only. Measured in
  ``benchmarks/bench_engine_step_levers.md``.
* ``verl-batched-logprobs`` (a speed lever, only with ``MATHAGENT_BATCHED_LOGPROBS=1``):
  without flash-attn verl computes log-probabilities a token at a time; this, in blocks of
  rows (:mod:`mathagent.batched_logprobs`). Measured with padding removal (the same page).
* ``trinity-fast-bootstrap`` (a speed lever, on unless ``MATHAGENT_FAST_BOOTSTRAP=0``): each
  evaluation task's best-of and worst-of metrics from the same resamples, drawn and reduced in
  a few NumPy calls (:mod:`mathagent.eval_bootstrap`); the same numbers to the bit.
* ``trinity-eval-no-logprobs`` (a speed lever, only with ``MATHAGENT_EVAL_NO_LOGPROBS=1``):
  evaluation tasks ask vLLM for no log-probabilities, which Trinity drops with their
  experiences (:mod:`mathagent.eval_logprobs`); training tasks are unchanged.
* ``verl-step-profile`` (a diagnostic, only with ``MATHAGENT_PROFILE_STEP=N``): the trainer
  profiles the Nth call of its update and of its log-prob pass (:mod:`mathagent.step_profile`).
"""

from __future__ import annotations

import copy
import importlib
import importlib.abc
import importlib.metadata
import importlib.util
import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from mathagent import (
    batched_logprobs,
    early_start,
    eval_bootstrap,
    eval_logprobs,
    fused_head,
    runner_slots,
    step_profile,
)
from mathagent.batched_logprobs import BATCHED_LOGPROBS_ENV
from mathagent.early_start import EARLY_EXPLORER_ENV, EARLY_RUNNERS_ENV
from mathagent.eval_bootstrap import FAST_BOOTSTRAP_ENV
from mathagent.eval_logprobs import EVAL_NO_LOGPROBS_ENV
from mathagent.runner_slots import SLOTS_ENV, slots_problem
from mathagent.step_profile import PROFILE_ENV

#: The dotted path Ray imports in each worker process (``runtime_env`` of the driver).
WORKER_SETUP_HOOK = "mathagent.compat.worker_setup"

_MARK = "_mathagent_fix"


@dataclass(frozen=True)
class Fix:
    """One compatibility fix: what it is for and how to apply it.

    ``versions`` are the released versions of ``package`` known to need it; for any other
    version (or when the package is not installed) the fix is skipped. ``condition`` is an
    extra run-time test (e.g. "flash-attn is not importable") returning None when the fix is
    wanted, else the reason it is not. ``apply`` patches the imported module and returns
    False when the patch was already in place.
    """

    name: str
    package: str
    versions: tuple[str, ...]
    upstream: str
    summary: str
    module: str  # the upstream module whose function the fix replaces
    apply: Callable[[], bool]
    condition: Callable[[], str | None] = lambda: None


@dataclass(frozen=True)
class FixResult:
    name: str
    status: str  # "applied", "already applied", "skipped" or "failed"
    reason: str

    def line(self) -> str:
        return f"{self.name}: {self.status} ({self.reason})"


def installed_version(package: str) -> str | None:
    """The installed distribution's version, or None when it is not installed."""
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def _replace(owner: object, attr: str, new: Callable) -> bool:
    """Set ``owner.attr = new`` unless a mathagent fix is already there; keep the original."""
    current = getattr(owner, attr)
    if getattr(current, _MARK, False):
        return False
    setattr(new, _MARK, True)
    new.__wrapped__ = current
    setattr(owner, attr, new)
    return True


# --------------------------------------------------------------------------------------
# trinity-rft 0.6.0: one-GPU colocate deadlock (agentscope-ai/Trinity-RFT#602)
# --------------------------------------------------------------------------------------


async def _create_colocate_models(allocator):
    """The colocate engine, started outside any placement group and reserving no GPU.

    It still runs on the one GPU: Trinity's vLLM actor sets ``CUDA_VISIBLE_DEVICES`` from
    ``rollout_model.cuda_visible_devices`` itself. Returns what ``create_all_models`` returns:
    ``([rollout wrapper], [])`` (colocate mode has no auxiliary models).
    """
    import ray
    from trinity.common.models.model import ModelWrapper
    from trinity.common.models.vllm_model import vLLMRolloutModel

    config = copy.deepcopy(allocator.config.rollout_model)
    config.engine_id = 0
    config.ray_actor_name = allocator.get_actor_name("rollout", 0, 0)
    allocator.logger.info("colocate engine %s started outside a placement group "
                          "(mathagent fix for Trinity-RFT#602)", config.ray_actor_name)
    actor = (ray.remote(vLLMRolloutModel)
             .options(name=config.ray_actor_name, num_cpus=0, num_gpus=0,
                      namespace=config.ray_namespace)
             .remote(config=config))
    await actor.prepare.remote()
    address = await actor.get_api_server_url.remote()
    wrapper = ModelWrapper(models=[actor], config=config, api_address=address)
    await wrapper.prepare()
    return [wrapper], []


def _apply_trinity_colocate() -> bool:
    from trinity.common.models.allocator import Allocator

    original = Allocator.create_all_models

    async def create_all_models(self):
        rollout = self.config.rollout_model
        if rollout.cuda_visible_devices is not None and rollout.engine_type.startswith("vllm"):
            return await _create_colocate_models(self)  # colocate mode only sets the devices
        return await original(self)

    create_all_models.__doc__ = original.__doc__
    return _replace(Allocator, "create_all_models", create_all_models)


# --------------------------------------------------------------------------------------
# verl 0.8.0: flash_attn.bert_padding imported on CUDA without flash-attn
# --------------------------------------------------------------------------------------


def _flash_attn_missing() -> str | None:
    if importlib.util.find_spec("flash_attn") is not None:
        return "flash-attn is importable, so verl's own import works"
    return None


def _apply_verl_bert_padding() -> bool:
    from verl.utils import attention_utils

    original = attention_utils._get_attention_functions

    def _get_attention_functions():
        try:
            return original()
        except ImportError:  # no flash-attn: verl's pure-torch versions of the same functions
            from verl.utils.npu_flash_attn_utils import (
                index_first_axis,
                pad_input,
                rearrange,
                unpad_input,
            )

            return index_first_axis, pad_input, rearrange, unpad_input

    return _replace(attention_utils, "_get_attention_functions", _get_attention_functions)


# --------------------------------------------------------------------------------------
# trinity-rft 0.6.0: colocated weight sync through the CPU (a speed lever)
# --------------------------------------------------------------------------------------

#: Set to 0 to leave ``trinity-ipc-sync`` out (in ``train`` and every Ray worker of the run).
IPC_SYNC_ENV = "MATHAGENT_IPC_SYNC"


def _ipc_sync_unwanted() -> str | None:
    if os.environ.get(IPC_SYNC_ENV, "1") == "0":
        return f"a speed lever, turned off with {IPC_SYNC_ENV}=0"
    return None


def ipc_sync_misfit(config) -> str | None:
    """Why a checked Trinity config is not one the IPC weight sync is safe for, or None.

    The handles serve one GPU that the trainer and vLLM share (``colocate``, which Trinity
    syncs by memory); the trainer keeps an upload only until its next one, which the explorer
    has loaded by then when every step is synced before the next (``fixed``, interval 1); the
    copies are bfloat16, so vLLM must serve that dtype.
    """
    sync = config.synchronizer
    checks = ((config.mode == "colocate", f"mode {config.mode!r}, not 'colocate'"),
              (str(getattr(sync.sync_method, "value", sync.sync_method)) == "memory",
               f"synchronizer.sync_method {sync.sync_method!s}, not memory"),
              (str(getattr(sync.sync_style, "value", sync.sync_style)) == "fixed",
               f"synchronizer.sync_style {sync.sync_style!s}, not fixed"),
              (sync.sync_interval == 1, f"synchronizer.sync_interval {sync.sync_interval}, not 1"),
              (config.explorer.rollout_model.dtype == "bfloat16",
               f"explorer.rollout_model.dtype {config.explorer.rollout_model.dtype!r}, "
               "not bfloat16"))
    return next((why for ok, why in checks if not ok), None)


def _apply_trinity_ipc_sync() -> bool:
    from trinity.trainer.verl import fsdp_engine

    from mathagent import ipc_weights

    original = fsdp_engine.fsdp_upload_state_dict

    def fsdp_upload_state_dict(engine, synchronizer, global_step, logger):
        import torch

        if torch.distributed.get_world_size() != 1:  # handles serve one GPU shared by both
            return original(engine, synchronizer, global_step, logger)
        return ipc_weights.upload_state_dict(engine, synchronizer, global_step, logger)

    fsdp_upload_state_dict.__doc__ = original.__doc__
    return _replace(fsdp_engine, "fsdp_upload_state_dict", fsdp_upload_state_dict)


# --------------------------------------------------------------------------------------
# transformers: an attention for verl's packed (padding-free) batches without flash-attn
# --------------------------------------------------------------------------------------

#: Set to 1 to apply ``transformers-varlen-attention`` (and let ``train`` choose it).
VARLEN_ATTN_ENV = "MATHAGENT_VARLEN_ATTN"
#: The ``attn_implementation`` the lever registers (no "flash" in it: transformers would then
#: look for a flash-attn kernel of that name).
VARLEN_ATTN_NAME = "mathagent_varlen"
#: The transformers releases the lever was checked with: the lock's, and the GPU image's.
VARLEN_ATTN_TRANSFORMERS = ("5.17.0", "5.24.0")


def _varlen_attention_unwanted() -> str | None:
    if os.environ.get(VARLEN_ATTN_ENV) != "1":
        return f"a speed lever, applied only with {VARLEN_ATTN_ENV}=1"
    return None


def _apply_varlen_attention() -> bool:
    from mathagent import varlen_attention

    return varlen_attention.register()


def varlen_attention_misfit() -> str | None:
    """Why a run launched from this process now could not use :data:`VARLEN_ATTN_NAME`,
    or None: the lever registers it in every process of the run only when it is on, and only
    for the transformers releases it was checked with."""
    if os.environ.get(VARLEN_ATTN_ENV) != "1":
        return f"it is registered only with {VARLEN_ATTN_ENV}=1"
    have = installed_version("transformers")
    if have not in VARLEN_ATTN_TRANSFORMERS:
        return (f"transformers {have} is not a release it was checked with "
                f"({', '.join(VARLEN_ATTN_TRANSFORMERS)})")
    return None


#: The environment variables that turn the levers on; ``train`` passes them to every Ray worker.
LEVER_ENVS = (EARLY_EXPLORER_ENV, EARLY_RUNNERS_ENV, IPC_SYNC_ENV, VARLEN_ATTN_ENV, SLOTS_ENV,
              PROFILE_ENV, BATCHED_LOGPROBS_ENV, FAST_BOOTSTRAP_ENV, EVAL_NO_LOGPROBS_ENV)


def lever_problem(name: str, value: str | None) -> str | None:
    """Why ``value`` is not a setting lever ``name`` reads, or None: 0 or 1, a number of slots
    for the runner slots, a step for the profile."""
    if value is None:
        return None
    if name == SLOTS_ENV:
        return slots_problem(value)
    if name == PROFILE_ENV:
        return step_profile.profile_problem(value)
    return None if value in ("0", "1") else f"{name}={value!r} is neither 0 (off) nor 1 (on)"


def levers_set() -> dict[str, str]:
    """The lever variables set in this process's environment, with their values: ``train``
    records them in a run's ``params.json`` (a lever changes speed, not what is learned, so
    the experiment command does not compare them with a spec's)."""
    return {name: os.environ[name] for name in LEVER_ENVS if name in os.environ}


FIXES: tuple[Fix, ...] = (
    Fix(name="trinity-colocate", package="trinity-rft", versions=("0.6.0",),
        upstream="agentscope-ai/Trinity-RFT#602",
        summary="colocate mode: start the vLLM engine outside the placement group, so the "
                "trainer gets the one GPU",
        module="trinity.common.models.allocator", apply=_apply_trinity_colocate),
    Fix(name="verl-bert-padding", package="verl", versions=("0.8.0",),
        upstream="verl 0.8.0 utils/attention_utils.py imports flash_attn.bert_padding on CUDA",
        summary="fall back to verl.utils.npu_flash_attn_utils when flash-attn is missing",
        module="verl.utils.attention_utils", apply=_apply_verl_bert_padding,
        condition=_flash_attn_missing),
    Fix(name="verl-fused-head-fsdp2", package="verl", versions=("0.8.0",),
        upstream="verl 0.8.0 models/transformers/dense_common.py forward_with_torch_backend reads "
                 "lm_head.weight, a sharded DTensor when FSDP2 wraps an untied lm_head on its own",
        summary="the fused head (torch backend) gets the whole output weight on one device",
        module="verl.utils.experimental.torch_functional", apply=lambda: fused_head.install(
            importlib.import_module("verl.utils.experimental.torch_functional"))),
    Fix(name="trinity-early-explorer", package="trinity-rft", versions=("0.6.0",),
        upstream="Trinity-RFT 0.6.0 cli/launcher.py both(): the explorer's prepare() waits "
                 "for the trainer's actor",
        summary="start-up lever: the explorer's prepare() starts as soon as its actor is made",
        module="trinity.cli.launcher",
        apply=lambda: early_start.install_early_explorer(
            importlib.import_module("trinity.cli.launcher")),
        condition=early_start.early_explorer_unwanted),
    Fix(name="trinity-early-runners", package="trinity-rft", versions=("0.6.0",),
        upstream="Trinity-RFT 0.6.0 explorer/explorer.py Explorer.prepare: the rollout "
                 "coordinator and its workflow runners made only once every model is ready",
        summary="start-up lever: the coordinator and its runners made beside vLLM's start "
                "(mathagent.early_start)",
        module="trinity.explorer.explorer",
        apply=lambda: early_start.install_early_runners(
            importlib.import_module("trinity.explorer.explorer")),
        condition=early_start.early_runners_unwanted),
    Fix(name="trinity-early-runners-wait", package="trinity-rft", versions=("0.6.0",),
        upstream="Trinity-RFT 0.6.0 common/models/model.py ModelWrapper.prepare: a model not "
                 "yet ready refuses its server's address",
        summary="start-up lever: a workflow runner made early waits for its model "
                "(mathagent.early_start)",
        module="trinity.common.models.model",
        apply=lambda: early_start.install_model_wait(
            importlib.import_module("trinity.common.models.model")),
        condition=early_start.early_runners_unwanted),
    Fix(name="trinity-ipc-sync", package="trinity-rft", versions=("0.6.0",),
        upstream="Trinity-RFT 0.6.0 trainer/verl/fsdp_engine.py fsdp_upload_state_dict: "
                 "colocated weights travel through the CPU in float32",
        summary="speed lever: the trainer sends CUDA IPC handles of its bfloat16 weights",
        module="trinity.trainer.verl.fsdp_engine", apply=_apply_trinity_ipc_sync,
        condition=_ipc_sync_unwanted),
    Fix(name="transformers-varlen-attention", package="transformers",
        versions=VARLEN_ATTN_TRANSFORMERS,
        upstream="flash-attn has no wheel; verl 0.8.0's use_remove_padding path needs a "
                 "variable-length attention (transformers' flash_attention_2 imports flash-attn)",
        summary=f"speed lever: attn_implementation {VARLEN_ATTN_NAME!r} attends within each "
                "sequence of a packed row (PyTorch's varlen_attn on the GPU)",
        module="transformers.modeling_utils", apply=_apply_varlen_attention,
        condition=_varlen_attention_unwanted),
    Fix(name="trinity-runner-slots", package="trinity-rft", versions=("0.6.0",),
        upstream="Trinity-RFT 0.6.0 explorer/scheduler.py: one task per workflow runner at a "
                 "time, runner_per_model capped at the batch size in asynchronous mode",
        summary="speed lever: each workflow runner takes MATHAGENT_RUNNER_SLOTS tasks at once "
                "(mathagent.runner_slots)",
        module="trinity.explorer.scheduler",
        apply=lambda: runner_slots.install(importlib.import_module("trinity.explorer.scheduler")),
        condition=runner_slots.unwanted),
    Fix(name="trinity-fast-bootstrap", package="trinity-rft", versions=("0.6.0",),
        upstream="Trinity-RFT 0.6.0 utils/metrics.py bootstrap_metric: 1,000 resamples a "
                 "metric of each evaluation task, one np.random.choice call at a time",
        summary="speed lever: the same resamples drawn and reduced in a few NumPy calls "
                "(mathagent.eval_bootstrap)",
        module="trinity.utils.metrics",
        apply=lambda: eval_bootstrap.install(importlib.import_module("trinity.utils.metrics")),
        condition=eval_bootstrap.unwanted),
    Fix(name="trinity-eval-no-logprobs", package="trinity-rft", versions=("0.6.0",),
        upstream="Trinity-RFT 0.6.0 common/workflows/agentscope_workflow.py "
                 "AgentScopeWorkflowAdapterV1: logprobs asked for in every request, evaluation "
                 "tasks' too, whose experiences are dropped",
        summary="speed lever: evaluation tasks ask for no log-probabilities "
                "(mathagent.eval_logprobs)",
        module="trinity.common.workflows.agentscope_workflow",
        apply=lambda: eval_logprobs.install(
            importlib.import_module("trinity.common.workflows.agentscope_workflow")),
        condition=eval_logprobs.unwanted),
    Fix(name="verl-step-profile", package="verl", versions=("0.8.0",),
        upstream="verl 0.8.0 workers/engine_workers.py TrainingWorker: no profile of a step "
                 "without its driver's start_profile, which Trinity-RFT 0.6.0 never calls",
        summary="diagnostic: torch.profiler over one training step's update and log-prob pass "
                "(mathagent.step_profile)",
        module="verl.workers.engine_workers",
        apply=lambda: step_profile.install(importlib.import_module("verl.workers.engine_workers")),
        condition=step_profile.unwanted),
    Fix(name="verl-batched-logprobs", package="verl", versions=("0.8.0",),
        upstream="verl 0.8.0 utils/torch_functional.py logprobs_from_logits_v2: one "
                 "log_softmax per row, and the FSDP engine's rows are tokens",
        summary="speed lever: log-probabilities in blocks (mathagent.batched_logprobs)",
        module="verl.utils.torch_functional",
        apply=lambda: batched_logprobs.install(
            importlib.import_module("verl.utils.torch_functional")),
        condition=batched_logprobs.unwanted),
)


def _gate(fix: Fix, versions: Mapping[str, str | None] | None) -> FixResult | None:
    """Why ``fix`` is skipped here (a :class:`FixResult`), or None when it is wanted."""
    have = (versions.get(fix.package) if versions is not None
            else installed_version(fix.package))
    if have is None:
        return FixResult(fix.name, "skipped", f"{fix.package} is not installed")
    if have not in fix.versions:
        return FixResult(fix.name, "skipped",
                         f"{fix.package} {have} does not need it (fix is for "
                         f"{', '.join(fix.versions)}; {fix.upstream})")
    not_wanted = fix.condition()
    if not_wanted:
        return FixResult(fix.name, "skipped", not_wanted)
    return None


def _apply(fix: Fix) -> FixResult:
    have = installed_version(fix.package)
    try:
        status = "applied" if fix.apply() else "already applied"
    except Exception as exc:  # noqa: BLE001 - a fix that cannot be applied is reported
        return FixResult(fix.name, "failed", f"{fix.package} {have}: {type(exc).__name__}: {exc}")
    return FixResult(fix.name, status, f"{fix.package} {have}: {fix.summary}; {fix.upstream}")


def apply_all(versions: Mapping[str, str | None] | None = None,
              fixes: tuple[Fix, ...] = FIXES) -> list[FixResult]:
    """Apply every fix the installed versions need, now; one :class:`FixResult` per fix.

    ``versions`` maps package names to versions and defaults to what is installed (a test can
    pass a version that does not need a fix). A fix whose package is missing or at another
    version is skipped, as is one whose ``condition`` says it is not wanted. Applying imports
    the fix's upstream module; a fix that raises is reported as ``failed``.
    """
    results = []
    for fix in fixes:
        try:
            results.append(_gate(fix, versions) or _apply(fix))
        except Exception as exc:  # noqa: BLE001 - e.g. a broken package's metadata
            results.append(FixResult(fix.name, "failed", f"{type(exc).__name__}: {exc}"))
    return results


class _PostImportLoader(importlib.abc.Loader):
    """A module's own loader, then the fixes waiting for that module."""

    def __init__(self, loader: importlib.abc.Loader, fixes: list[Fix]) -> None:
        self.loader, self.fixes = loader, fixes

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module) -> None:
        self.loader.exec_module(module)
        module.__loader__ = self.loader
        for fix in self.fixes:
            _report(_apply(fix))


class _PostImportFinder(importlib.abc.MetaPathFinder):
    """Applies fixes right after their upstream module is first imported."""

    def __init__(self) -> None:
        self.waiting: dict[str, list[Fix]] = {}

    def find_spec(self, name, path, target=None):
        fixes = self.waiting.pop(name, None)
        if fixes is None:
            return None
        spec = importlib.util.find_spec(name)  # the other finders (this one no longer waits)
        if spec is None or spec.loader is None:
            return spec
        spec.loader = _PostImportLoader(spec.loader, fixes)
        return spec


_FINDER = _PostImportFinder()


def _report(result: FixResult) -> None:
    if result.status == "failed":
        print(f"mathagent.compat: {result.line()}", file=sys.stderr)


def apply_on_import(fixes: tuple[Fix, ...] = FIXES) -> list[str]:
    """Apply each needed fix now if its module is imported, else as soon as it is.

    Returns the names of the fixes left waiting for their module's import.
    """
    waiting = []
    for fix in fixes:
        try:
            skipped = _gate(fix, None)
        except Exception as exc:  # noqa: BLE001
            _report(FixResult(fix.name, "failed", f"{type(exc).__name__}: {exc}"))
            continue
        if skipped is not None:
            continue
        if fix.module in sys.modules:
            _report(_apply(fix))
        else:
            _FINDER.waiting.setdefault(fix.module, []).append(fix)
            waiting.append(fix.name)
    if _FINDER.waiting and _FINDER not in sys.meta_path:
        sys.meta_path.insert(0, _FINDER)
    return waiting


def worker_setup() -> None:
    """Ray ``worker_process_setup_hook``: the fixes, applied when their modules are imported.

    A fix that fails here must not stop an unrelated worker (a data actor, say), so failures
    are printed to the worker's stderr, which Ray forwards to the driver's log; the driver
    applies the same fixes first and refuses to launch when one fails there.
    """
    try:
        apply_on_import()
    except Exception as exc:  # noqa: BLE001 - never raised in a worker
        print(f"mathagent.compat: fixes not installed: {type(exc).__name__}: {exc}",
              file=sys.stderr)
