"""vLLM's compile cache between an experiment's runs (:mod:`mathagent.experiment.vllm_cache`):
runs one after another reuse one folder, runs side by side never share one, and a killed run's
folder is free again; and what a run's log says of its ``torch.compile``
(:func:`mathagent.experiment.layout.vllm_compile`)."""

from __future__ import annotations

import select
import signal
import subprocess
import sys
import textwrap

from bounds import hang_bound

from mathagent.experiment import vllm_cache
from mathagent.experiment.layout import vllm_compile


def test_runs_one_after_another_reuse_slot0_and_runs_side_by_side_get_their_own(tmp_path):
    first = vllm_cache.claim(tmp_path)
    second = vllm_cache.claim(tmp_path)   # while the first goes on
    assert (first.folder, second.folder) == (tmp_path / "slot0", tmp_path / "slot1")
    (first.folder / "compiled").write_text("kept")
    first.release()
    first.release()  # a second release is harmless
    third = vllm_cache.claim(tmp_path)
    assert third.folder == tmp_path / "slot0"
    assert (third.folder / "compiled").read_text() == "kept"   # nothing is cleared
    second.release()
    third.release()


def test_a_killed_run_frees_its_slot(tmp_path):
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import sys, time
        from pathlib import Path
        from mathagent.experiment import vllm_cache
        slot = vllm_cache.claim(Path({str(tmp_path)!r}))
        print(slot.folder.name, flush=True)
        time.sleep(600)
    """)], stdout=subprocess.PIPE, text=True)
    try:
        ready, _, _ = select.select([holder.stdout], [], [], hang_bound(60))
        assert ready and holder.stdout.readline().strip() == "slot0"
        held = vllm_cache.claim(tmp_path)
        assert held.folder.name == "slot1"
        held.release()
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=hang_bound(30))
    assert vllm_cache.claim(tmp_path).folder.name == "slot0"


def test_the_default_root_follows_the_runs_folder(monkeypatch, tmp_path):
    monkeypatch.setenv("MATHAGENT_RUNS", str(tmp_path))
    assert vllm_cache.cache_root() == tmp_path / "vllm_cache"


def test_the_log_says_whether_vllm_compiled_or_loaded_its_graphs():
    compiled = ("(Worker pid=1) INFO 12-06 09:11:30 [backends.py:1] Compiling a graph for "
                "compile range (1, 8192) takes 12.30 s\n"
                "(Worker pid=1) INFO 12-06 09:11:42 [monitor.py:53] torch.compile took "
                "16.71 s in total\n")
    loaded = ("(Worker pid=1) INFO 12-06 09:11:30 [backends.py:1] Directly load the compiled "
              "graph(s) for compile range (1, 8192) from the cache, took 0.72 s\n"
              "(Worker pid=1) INFO 12-06 09:11:31 [monitor.py:53] torch.compile took "
              "2.48 s in total\n")
    assert vllm_compile(compiled) == {"seconds": 16.71, "from cache": False}
    assert vllm_compile(loaded) == {"seconds": 2.48, "from cache": True}
    assert vllm_compile("an engine with enforce_eager: no compile line\n") == {}
