"""The version-gated upstream fixes of mathagent.compat, each checked in a fresh interpreter:
what each fix changes in real upstream code, its version gate and conditions, and a fix
applied when its module is first imported (as in a Ray worker).

What is real: verl 0.8.0's ``attention_utils`` and its pure-torch padding functions,
Trinity-RFT 0.6.0's ``Allocator`` and config classes. ``fresh_python.py`` holds the
interpreters and the stand-ins (``vllm``, a hidden flash-attn) and says why each is there. The
checks on a real Ray head (the #602 deadlock, the early explorer in Trinity's launcher, the
worker hook in tasks and actors) are ``test_compat_ray.py``'s.
"""

from __future__ import annotations

import pytest
from fresh_python import (
    EXPLORER_CONFIG,
    HIDE_FLASH_ATTN,
    VLLM_STAND_IN,
    fix_named,
    run_python,
    wrong_versions,
)

from mathagent import compat

WRONG_VERSIONS = wrong_versions()
pytestmark = [pytest.mark.slow,  # every test starts a Python that imports verl or Trinity
              pytest.mark.skipif(WRONG_VERSIONS is not None, reason=str(WRONG_VERSIONS))]


# --------------------------------------------------------------------------------------
# verl-bert-padding
# --------------------------------------------------------------------------------------


def test_verl_unpad_fails_without_flash_attn_and_round_trips_after_fix():
    """Real verl code: unpad_input needs flash_attn before the fix; after it, verl's
    pure-torch unpad_input / pad_input round-trip a padded batch."""
    out, _ = run_python(HIDE_FLASH_ATTN, """
        import torch
        from verl.utils import attention_utils
        from mathagent.compat import apply_all

        torch.manual_seed(0)
        hidden = torch.randn(2, 5, 3)
        mask = torch.tensor([[1, 1, 1, 0, 0], [1, 0, 1, 1, 1]])
        try:
            attention_utils.unpad_input(hidden, mask)
            before = None
        except ModuleNotFoundError as exc:
            before = {"name": exc.name, "message": str(exc)}
        status = {r.name: r.status for r in apply_all()}
        unpadded, indices, cu_seqlens, max_seqlen, used = attention_utils.unpad_input(hidden, mask)
        padded = attention_utils.pad_input(unpadded, indices, 2, 5)
        emit({"before": before, "status": status,
              "rows_equal": torch.equal(unpadded, hidden[mask.bool()]),
              "indices": indices.tolist(), "cu_seqlens": cu_seqlens.tolist(),
              "max_seqlen": int(max_seqlen), "used": used.tolist(),
              "padded_shape": list(padded.shape),
              "padded_equal": torch.equal(padded, hidden * mask.unsqueeze(-1)),
              "padding_zero": bool((padded[mask == 0] == 0).all()),
              "padding_was_nonzero": bool((hidden[mask == 0] != 0).any())})
    """)
    assert out["before"] is not None, "unpad_input worked before the fix"
    assert out["before"]["name"].startswith("flash_attn"), out["before"]
    assert "flash_attn" in out["before"]["message"]
    assert out["status"]["verl-bert-padding"] == "applied"
    assert out["rows_equal"]
    assert out["indices"] == [0, 1, 2, 5, 7, 8, 9]
    assert out["cu_seqlens"] == [0, 3, 7] and out["max_seqlen"] == 4 and out["used"] == [3, 4]
    assert out["padded_shape"] == [2, 5, 3]
    assert out["padding_was_nonzero"]  # so zeros in the result are pad_input's doing
    assert out["padded_equal"] and out["padding_zero"]


def test_apply_all_twice_is_already_applied():
    out, _ = run_python(HIDE_FLASH_ATTN, """
        from verl.utils import attention_utils
        from mathagent.compat import apply_all

        original = attention_utils._get_attention_functions
        first = {r.name: r.status for r in apply_all()}
        patched = attention_utils._get_attention_functions
        second = {r.name: r for r in apply_all()}
        now = attention_utils._get_attention_functions
        emit({"first": first["verl-bert-padding"],
              "second": second["verl-bert-padding"].status,
              "second_reason": second["verl-bert-padding"].reason,
              "replaced": patched is not original, "same": now is patched,
              "wraps_original": now.__wrapped__ is original})
    """)
    assert out["first"] == "applied"
    assert out["second"] == "already applied"
    assert "verl 0.8.0" in out["second_reason"]
    assert out["replaced"] and out["same"]
    assert out["wraps_original"]  # not wrapped twice


# --------------------------------------------------------------------------------------
# version gating and conditions
# --------------------------------------------------------------------------------------


def test_other_versions_and_missing_packages_are_skipped_untouched():
    """The vllm stand-in (vLLM cannot run on a CPU machine) lets Trinity's allocator import."""
    out, _ = run_python(VLLM_STAND_IN, """
        from trinity.common.models.allocator import Allocator
        from verl.utils import attention_utils
        from mathagent.compat import apply_all

        before = (Allocator.create_all_models, attention_utils._get_attention_functions)
        newer = {r.name: [r.status, r.reason]
                 for r in apply_all(versions={"trinity-rft": "0.6.1", "verl": "0.8.1"})}
        missing = {r.name: [r.status, r.reason]
                   for r in apply_all(versions={"verl": None, "trinity-rft": None})}
        absent = {r.name: [r.status, r.reason] for r in apply_all(versions={})}
        after = (Allocator.create_all_models, attention_utils._get_attention_functions)
        emit({"newer": newer, "missing": missing, "absent": absent,
              "untouched": [a is b for a, b in zip(before, after)],
              "marked": [hasattr(f, "_mathagent_fix") for f in after]})
    """)
    status, reason = out["newer"]["trinity-colocate"]
    assert status == "skipped"
    assert "trinity-rft 0.6.1" in reason and "0.6.0" in reason
    assert "agentscope-ai/Trinity-RFT#602" in reason
    status, reason = out["newer"]["verl-bert-padding"]
    assert status == "skipped"
    assert "verl 0.8.1" in reason and "0.8.0" in reason
    assert fix_named("verl-bert-padding").upstream in reason
    for case in ("missing", "absent"):
        assert out[case] == {"trinity-colocate": ["skipped", "trinity-rft is not installed"],
                             "verl-bert-padding": ["skipped", "verl is not installed"],
                             "verl-fused-head-fsdp2": ["skipped", "verl is not installed"],
                             "trinity-early-explorer": ["skipped",
                                                        "trinity-rft is not installed"],
                             "trinity-early-runners": ["skipped",
                                                       "trinity-rft is not installed"],
                             "trinity-early-runners-wait": ["skipped",
                                                            "trinity-rft is not installed"],
                             "trinity-eval-no-logprobs": ["skipped",
                                                          "trinity-rft is not installed"],
                             "trinity-ipc-sync": ["skipped", "trinity-rft is not installed"],
                             "transformers-varlen-attention": ["skipped",
                                                               "transformers is not installed"],
                             "trinity-runner-slots": ["skipped",
                                                      "trinity-rft is not installed"],
                             "verl-step-profile": ["skipped", "verl is not installed"],
                             "verl-batched-logprobs": ["skipped", "verl is not installed"],
                             "trinity-fast-bootstrap": ["skipped",
                                                        "trinity-rft is not installed"]}
    assert out["untouched"] == [True, True]
    assert out["marked"] == [False, False]


def test_verl_fix_skipped_when_flash_attn_importable(tmp_path):
    """flash-attn has no CPU wheel: an empty stand-in ``flash_attn`` package on sys.path."""
    (tmp_path / "flash_attn").mkdir()
    (tmp_path / "flash_attn" / "__init__.py").write_text('"""stand-in"""\n')
    out, _ = run_python(f"""
        import sys
        sys.path.insert(0, {str(tmp_path)!r})
        from verl.utils import attention_utils
        from mathagent.compat import apply_all

        original = attention_utils._get_attention_functions
        result = {{r.name: [r.status, r.reason] for r in apply_all()}}["verl-bert-padding"]
        now = attention_utils._get_attention_functions
        emit({{"result": result, "untouched": now is original}})
    """)
    status, reason = out["result"]
    assert status == "skipped"
    assert "flash-attn is importable" in reason
    assert out["untouched"]


# --------------------------------------------------------------------------------------
# trinity-colocate (agentscope-ai/Trinity-RFT#602)
# --------------------------------------------------------------------------------------


def test_trinity_fix_applied_and_dispatches_on_colocate():
    """With the vllm stand-in (on every machine), apply_all() patches Allocator; the patched
    create_all_models takes the colocate path only when cuda_visible_devices is set, and the
    original path (its placement group, here a sentinel raising) otherwise."""
    out, _ = run_python(VLLM_STAND_IN, EXPLORER_CONFIG, """
        import asyncio
        import trinity.common.models.allocator as allocator_module
        from trinity.common.models.allocator import Allocator
        from mathagent import compat

        original = Allocator.create_all_models
        result = {r.name: [r.status, r.reason] for r in compat.apply_all()}["trinity-colocate"]
        patched = Allocator.create_all_models

        class Sentinel(Exception):
            pass

        def placement_group(*args, **kwargs):
            raise Sentinel(args[0])

        async def colocate(allocator):
            return "colocate path", allocator.config.rollout_model.cuda_visible_devices

        allocator_module.placement_group = placement_group
        compat._create_colocate_models = colocate
        try:
            asyncio.run(Allocator(explorer_config("ns", None)).create_all_models())
            other = None
        except Sentinel as exc:
            other = exc.args[0]
        chosen = asyncio.run(Allocator(explorer_config("ns", "0")).create_all_models())
        emit({"result": result, "marked": getattr(patched, "_mathagent_fix", False),
              "wraps_original": patched.__wrapped__ is original,
              "doc": patched.__doc__ == original.__doc__,
              "non_colocate_bundles": other, "colocate": chosen})
    """)
    status, reason = out["result"]
    assert status == "applied"
    assert "trinity-rft 0.6.0" in reason and "agentscope-ai/Trinity-RFT#602" in reason
    assert out["marked"] and out["wraps_original"] and out["doc"]
    # non-colocate: the original code asked for its placement group (one GPU bundle)
    assert out["non_colocate_bundles"] == [{"GPU": 1.0, "CPU": 1}]
    assert out["colocate"] == ["colocate path", "0"]


# --------------------------------------------------------------------------------------
# trinity-early-explorer (a start-up lever)
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "variable", "kind"), [
    ("trinity-early-explorer", "MATHAGENT_EARLY_EXPLORER", "a start-up lever"),
    ("trinity-early-runners", "MATHAGENT_EARLY_RUNNERS", "a start-up lever"),
    ("trinity-early-runners-wait", "MATHAGENT_EARLY_RUNNERS", "a start-up lever"),
    ("trinity-eval-no-logprobs", "MATHAGENT_EVAL_NO_LOGPROBS", "a speed lever")])
def test_an_opt_in_lever_is_off_unless_its_variable_is_1(monkeypatch, name, variable, kind):
    assert variable in compat.LEVER_ENVS   # so `train` passes it to every Ray worker
    monkeypatch.delenv(variable, raising=False)
    lever = fix_named(name)
    result = compat._gate(lever, {"trinity-rft": "0.6.0"})
    assert result.status == "skipped"
    assert result.reason == f"{kind}, applied only with {variable}=1"
    monkeypatch.setenv(variable, "1")
    assert compat._gate(lever, {"trinity-rft": "0.6.0"}) is None
    assert compat._gate(lever, {"trinity-rft": "0.6.1"}).status == "skipped"
    assert compat.lever_problem(variable, "2") == f"{variable}='2' is neither 0 (off) nor 1 (on)"


def test_levers_set_names_the_lever_variables_of_the_environment_and_no_other(monkeypatch):
    for name in compat.LEVER_ENVS:
        monkeypatch.delenv(name, raising=False)
    assert compat.levers_set() == {}
    monkeypatch.setenv(compat.VARLEN_ATTN_ENV, "1")
    monkeypatch.setenv(compat.SLOTS_ENV, "4")
    monkeypatch.setenv("MATHAGENT_RUNS", "/tmp/elsewhere")  # a variable of ours, not a lever
    assert compat.levers_set() == {compat.VARLEN_ATTN_ENV: "1", compat.SLOTS_ENV: "4"}


# --------------------------------------------------------------------------------------
# a fix applied when its module is imported
# --------------------------------------------------------------------------------------


def test_worker_setup_applies_fixes_when_their_module_is_imported():
    """In a worker, a fix waits for its upstream module: worker_setup() imports neither verl's
    nor Trinity's code (most workers never need them); the first import applies the fix."""
    out, proc = run_python(HIDE_FLASH_ATTN, """
        import sys
        from mathagent import compat
        value = compat.worker_setup()
        before = [m for m in ("verl.utils.attention_utils", "trinity.common.models.allocator")
                  if m in sys.modules]
        from verl.utils import attention_utils
        emit({"value": value, "before": before,
              "verl_fixed": getattr(attention_utils._get_attention_functions,
                                    "_mathagent_fix", False),
              "loader": type(attention_utils.__loader__).__name__})
    """)
    assert out == {"value": None, "before": [], "verl_fixed": True,
                   "loader": "SourceFileLoader"}, proc.stderr
    assert "mathagent.compat:" not in proc.stderr


def test_fix_failing_on_import_is_reported_and_the_import_still_works():
    """A fix that raises when its module is imported prints one line and never breaks the
    import (a worker that imports the module for other reasons must keep running)."""
    out, proc = run_python("""
        import sys
        from mathagent import compat

        def broken():
            raise RuntimeError("layout changed")

        fix = compat.Fix(name="broken-fix", package="pytest",
                         versions=(compat.installed_version("pytest"),), upstream="test",
                         summary="test", module="xml.dom.minidom", apply=broken)
        assert "xml.dom.minidom" not in sys.modules
        waiting = compat.apply_on_import((fix,))
        import xml.dom.minidom
        root = xml.dom.minidom.parseString("<a/>").documentElement
        emit({"waiting": waiting, "parsed": root.tagName})
    """)
    assert out == {"waiting": ["broken-fix"], "parsed": "a"}
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("mathagent.compat:")]
    assert len(lines) == 1, proc.stderr
    assert "broken-fix: failed" in lines[0] and "layout changed" in lines[0]
