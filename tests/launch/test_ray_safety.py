"""``python -m mathagent ray`` signals only the processes it started (and the train-local hint).

A Ray head is recognised by the ids *and start times* of the processes ``ray start`` left,
recorded in the state file. The decoys below are processes this test starts itself and
that the old matching took for the head's: one whose command line contains the head's
session root as a substring, one whose process group a stale record names, and one whose
pid a record lists with another start time (a reused pid). Each must survive every
``ray`` command; the test kills them itself at the end.

One real Ray head for the file (15-45 s to start here) and one ``ray start`` that Ray
refuses; both are checked to leave no process behind (the head is stopped in ``finally``).
The file also holds the test of ``train`` refusing a ``train-local`` config.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from bounds import hang_bound

from mathagent import cli, launch, paths


def decoy(*argv: str) -> subprocess.Popen:
    """``setsid bash -c 'sleep 600; true' ARG...``; returns once bash has forked its sleep."""
    proc = subprocess.Popen(["bash", "-c", "sleep 600; true", *argv], start_new_session=True)
    deadline = time.monotonic() + hang_bound(60)  # a busy machine forks slowly
    while not psutil.Process(proc.pid).children() and time.monotonic() < deadline:
        time.sleep(0.05)
    if not psutil.Process(proc.pid).children():
        proc.kill()  # ours: bash, started above
        proc.wait()
        raise AssertionError("the decoy's bash did not fork its sleep within "
                             f"{hang_bound(60):.0f} s")
    return proc


def running(proc: subprocess.Popen) -> bool:
    return proc.poll() is None


def ray_processes_under(root: str) -> list[int]:
    """Live processes with an argument that is ``root``, lies under it or ends in ``=root``."""
    found = []
    for proc in psutil.process_iter(["pid", "cmdline", "status"]):
        try:
            if proc.info["status"] == psutil.STATUS_ZOMBIE:
                continue
            for arg in proc.info["cmdline"] or []:
                if arg == root or arg.endswith("=" + root) or (root + "/") in arg:
                    found.append(proc.pid)
                    break
        except psutil.Error:
            continue
    return found


def ray(*argv: str) -> int:
    return cli.main(["ray", *argv])


@pytest.fixture
def decoys():
    started: list[subprocess.Popen] = []

    def make(*argv: str) -> subprocess.Popen:
        proc = decoy(*argv)
        started.append(proc)
        return proc

    yield make
    for proc in started:  # only the processes this fixture started: bash and its sleep
        with_children = []
        with contextlib.suppress(psutil.Error):
            bash = psutil.Process(proc.pid)
            if running(proc):
                with_children = [*bash.children(recursive=True), bash]
        for p in with_children:
            with contextlib.suppress(psutil.Error):
                p.kill()  # psutil checks the start time first
        proc.wait(timeout=hang_bound(60))


# -- without a Ray head ---------------------------------------------------------------------


def test_recorded_pid_counts_only_with_its_start_time(decoys):
    """A pid listed with another start time (reused) is not the head's and is not signalled."""
    proc = decoys()
    real = psutil.Process(proc.pid).create_time()
    head = launch.RayHead(address="127.0.0.1:1", pgid=proc.pid, temp_dir="",
                          started=[[proc.pid, real + 5.0]])
    assert head.processes() == []
    assert head.stop(timeout=2) == []
    time.sleep(0.3)
    assert running(proc)
    # the same pid with its own start time is recognised, with its descendants
    head.started = [[proc.pid, real]]
    sleep = psutil.Process(proc.pid).children()[0].pid
    pids = head.processes()
    assert set(pids) == {proc.pid, sleep}      # bash and its sleep
    assert head.stop(timeout=5) == pids
    assert not running(proc)


def test_a_head_is_stopped_in_the_order_of_ray_stop():
    """The raylet first, the GCS server last, every other process in between (signalled
    together, a raylet waits for its stopping GCS server until a timeout)."""
    from mathagent.launch.ray_head import _stop_order

    class Proc:
        def __init__(self, name):
            self._name = name

        def name(self):
            if self._name is None:
                raise psutil.NoSuchProcess(1)
            return self._name

    gcs, monitor, raylet, agent, gone = (Proc(n) for n in ("gcs_server", "python", "raylet",
                                                           "ray::DashboardAgent", None))
    assert _stop_order([gcs, monitor, raylet, agent, gone]) == [[raylet],
                                                                [monitor, agent, gone], [gcs]]
    assert _stop_order([monitor]) == [[monitor]]
    assert _stop_order([]) == []


def test_an_exited_process_not_yet_reaped_counts_as_gone():
    """A head's processes are reaped by the init process, which may take seconds: one that
    exited (a zombie) is gone for ``stop``, and a running one is waited for."""
    from mathagent.launch.ray_head import _wait_gone

    exited = subprocess.Popen(["true"])  # not reaped until exited.wait() below
    running_ = subprocess.Popen(["sleep", "600"])
    try:
        procs = [psutil.Process(exited.pid), psutil.Process(running_.pid)]
        wait_for_zombie = time.monotonic() + hang_bound(60)
        while procs[0].status() != psutil.STATUS_ZOMBIE and time.monotonic() < wait_for_zombie:
            time.sleep(0.05)
        assert _wait_gone(procs, timeout=0.2) == [procs[1]]
        running_.kill()
        assert _wait_gone(procs, timeout=hang_bound(60)) == []
    finally:
        for proc in (exited, running_):
            proc.kill()
            proc.wait()


def test_stale_record_of_a_process_group_kills_nothing(decoys, tmp_path, capsys):
    """A record written before pids were recorded, naming a group that now is someone
    else's: `ray stop` and `ray status` report it stale, remove it and signal nothing."""
    other = decoys()
    state = tmp_path / "head.json"
    for action, code in (("stop", 0), ("status", 1)):
        state.write_text(json.dumps({"address": "127.0.0.1:1", "pgid": other.pid,
                                     "temp_dir": str(tmp_path / "gone"),
                                     "owns_temp_dir": False}))
        assert ray(action, "--state-file", str(state)) == code
        err = capsys.readouterr().err
        assert "stale record" in err and "stopped nothing" in err, err
        assert not state.exists()
        time.sleep(0.3)
        assert running(other)


def test_unreadable_record_is_one_line(tmp_path, capsys):
    state = tmp_path / "head.json"
    state.write_text("{not json")
    assert ray("stop", "--state-file", str(state)) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(state) in err and "Traceback" not in err
    assert state.exists()  # not ours to judge: left for the user


def test_help_does_not_suggest_a_shared_temp_dir():
    out = subprocess.run([sys.executable, "-m", "mathagent", "ray", "--help"],
                         capture_output=True, text=True, timeout=hang_bound(300),
                         env={**os.environ, "COLUMNS": "200"}, cwd=paths.REPO_ROOT)
    assert out.returncode == 0
    text = " ".join(out.stdout.split())
    assert "/tmp/ray makes" not in text
    assert "not /tmp/ray" in text and "a folder for this head alone" in text


# -- a real head --------------------------------------------------------------------------------


@pytest.mark.slow
def test_ray_commands_spare_processes_they_did_not_start(decoys, capsys, short_tmp_factory):
    root = short_tmp_factory("rs-")
    session = f"{root}/rayroot"
    state = Path(root) / "s.json"
    lookalike = decoys(f"{root}/rayroot-other")   # the session root as a substring
    group_owner = decoys()                        # a group a stale record names
    reused = decoys()                             # a pid a record lists with another time
    head = None
    try:
        # a stale record (old format) pointing at someone else's group: start goes ahead
        state.write_text(json.dumps({"address": "127.0.0.1:1", "pgid": group_owner.pid,
                                     "temp_dir": session, "owns_temp_dir": False}))
        assert ray("start", "--num-cpus", "1", "--temp-dir", session, "--state-file",
                   str(state), "--object-store-memory", str(100 * 2**20)) == 0
        out = capsys.readouterr()
        assert "removed the stale record, stopped nothing" in out.err
        head = launch.RayHead(**json.loads(state.read_text()))
        pids = head.processes()
        names = {psutil.Process(p).name() for p in pids}
        assert {"gcs_server", "raylet"} <= names
        assert not {lookalike.pid, group_owner.pid, reused.pid} & set(pids)
        assert f"{len(head.started)} processes recorded" in out.out

        assert ray("status", "--state-file", str(state)) == 0
        assert f"Ray head at {head.address}" in capsys.readouterr().out

        # pid reuse: the record also lists a decoy's pid, with a start time not its own
        record = json.loads(state.read_text())
        record["started"].append([reused.pid,
                                  psutil.Process(reused.pid).create_time() - 3600.0])
        state.write_text(json.dumps(record))

        assert ray("stop", "--state-file", str(state)) == 0
        out = capsys.readouterr().out
        assert f"stopped the Ray head at {head.address}" in out
        assert not state.exists()
        assert head.processes() == []
        assert not any(psutil.pid_exists(p) and psutil.Process(p).status() != "zombie"
                       for p in pids)
        assert ray_processes_under(session) == []
        time.sleep(0.5)
        assert running(lookalike) and running(group_owner) and running(reused)
    finally:
        if head is not None:
            head.stop()
    assert ray_processes_under(session) == []


@pytest.mark.slow
def test_failed_start_leaves_nothing(decoys, capsys, short_tmp_factory):
    """Ray refusing the arguments: one line naming the setting, no process left, and the
    clean-up of the failed start signals only processes of that start."""
    root = short_tmp_factory("rs-")
    lookalike = decoys(f"{root}/rayroot-other")
    state = Path(root) / "s.json"
    assert ray("start", "--num-cpus", "1", "--object-store-memory", "1", "--temp-dir",
               f"{root}/rayroot", "--state-file", str(state)) == 1
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("error: ") and "--object-store-memory=1" in err, err
    assert "object store memory" in err
    assert not state.exists()
    assert ray_processes_under(f"{root}/rayroot") == []
    assert running(lookalike)


@pytest.mark.slow
def test_a_chosen_port_that_ray_wants_for_itself_is_replaced(monkeypatch):
    """A free port that one of Ray's own components also claims (52365 is its dashboard
    agent's default) makes `ray start` refuse; a head whose port this package chose starts
    on the next free port instead, and one whose port was given fails with Ray's reason."""
    from mathagent import serving
    from mathagent.launch import ray_head

    real = serving.free_port
    offered = iter([52365])
    monkeypatch.setattr(serving, "free_port", lambda *a, **k: next(offered, None) or real())
    head = ray_head.start_ray_head(num_cpus=1, object_store_memory=100 * 2**20)
    try:
        assert not head.address.endswith(":52365") and head.address
    finally:
        head.stop()
    with pytest.raises(RuntimeError, match="52365"):
        ray_head.start_ray_head(num_cpus=1, port=52365, object_store_memory=100 * 2**20)
    assert not ray_head._worth_retrying("ValueError: bad --num-cpus", port_chosen_here=True)


# -- train: a train-local config ------------------------------------------------------------------


def test_train_names_train_local_for_its_configs(capsys):
    config = paths.CONFIGS_DIR / "train_local.yaml"
    assert cli.main(["train", "--config", str(config)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert "`train-local` config" in err
    assert f"python -m mathagent train-local --config {config}" in err


def test_a_trinity_config_is_not_taken_for_train_local(tmp_path, capsys):
    """Trinity keys next to train-local-looking sections: Trinity's loader judges it."""
    config = tmp_path / "mixed.yaml"
    config.write_text("buffer: {batch_size: 4}\ntaskset: {path: data/arithmetic}\n"
                      "rollout: {batch_size: 2}\n")
    assert cli.main(["train", "--config", str(config)]) == 2
    err = capsys.readouterr().err.strip()
    assert "train-local" not in err and str(config) in err and "Traceback" not in err
