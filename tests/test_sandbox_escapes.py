"""Hostile code against the sandbox, through both ways model code reaches it.

Each test is one escape that got through the sandbox before its kernel layer (bubblewrap and
a seccomp filter, mathagent.sandbox_layer) and the audit hook's repairs, run through the
agent's toolkit (``execute_python_code`` as AgentScope calls it) and through ``train-local``'s
tool (:class:`mathagent.grpo.tool_rollout.PythonTool`). Each asserts what the caller must
keep: the call returns, no secret of the caller's environment appears, nothing is written
outside, no process outlives the call, local sockets (TCP and AF_UNIX) are unreachable.
The tests end with the audit hook alone (``Isolation(None)``, the weaker layers) refusing the
same routes, and with the kernel layer alone (no hook) refusing the syscalls.

Nothing is mocked: real code runs in real sandboxes. The machine must have the kernel layer
(scripts/install.sh brings it); without it these tests fail, saying what is missing.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import socket
import subprocess
import sys
import threading

import pytest
from sandbox_entries import MARKER, ROOMY, SECRET, entry_fixture, leftovers  # noqa: F401 (the fixture call)

from mathagent.sandbox import SandboxLimits, run_code
from mathagent.sandbox_layer import LAYERS, Isolation, bwrap_args, isolation, read_only_paths


@contextlib.contextmanager
def listeners(tmp_path):
    """A TCP port on 127.0.0.1, an AF_UNIX socket file and an abstract AF_UNIX name, all
    listening; yields their addresses and the list of connections they accepted."""
    tcp = socket.socket()
    tcp.bind(("127.0.0.1", 0))
    unix = socket.socket(socket.AF_UNIX)
    unix.bind(str(tmp_path / "caller.sock"))
    abstract = socket.socket(socket.AF_UNIX)
    abstract_name = f"\0mathagent-test-{os.getpid()}"
    abstract.bind(abstract_name)
    accepted, stop = [], threading.Event()
    socks = [tcp, unix, abstract]
    for s in socks:
        s.listen(4)

    def accept():
        while not stop.is_set():
            for s in select.select(socks, [], [], 0.05)[0]:
                accepted.append(s.accept())

    watcher = threading.Thread(target=accept)
    watcher.start()
    try:
        yield {"port": tcp.getsockname()[1], "unix": str(tmp_path / "caller.sock"),
               "abstract": abstract_name}, accepted
    finally:
        stop.set()
        watcher.join()
        for s in socks:
            s.close()


# --------------------------------------------------------------------------------------
# The escapes of the issue, each through both entry points
# --------------------------------------------------------------------------------------


def test_the_callers_environment_cannot_be_read(call):
    text = call(f"import os\nprint(dict(os.environ))\n"
                f"for p in ('/proc/{os.getpid()}/environ', f'/proc/{{os.getppid()}}/environ',\n"
                f"          '/proc/1/environ', '/proc/self/../{os.getpid()}/environ'):\n"
                "    try:\n        print(open(p, 'rb').read())\n"
                "    except Exception as exc:\n        print(p, type(exc).__name__)\n")
    assert "Exit status 0." in text and "MATHAGENT_SECRET_TOKEN" not in text
    assert SECRET not in text


def test_a_folder_descriptor_does_not_write_outside(call, tmp_path):
    target = tmp_path / "written.txt"
    text = call("import os\nos.makedirs('a/b/c')\nfolder = os.open('.', os.O_RDONLY)\n"
                f"rel = os.path.relpath({str(target)!r})\nos.chdir('a/b/c')\n"
                "fd = os.open(rel, os.O_WRONLY | os.O_CREAT, dir_fd=folder)\n"
                "os.write(fd, b'x')\nprint('written')")
    assert text.startswith("Error:") and "written" not in text.split("stderr")[0]
    assert not target.exists()


@pytest.mark.parametrize("make", ["mknod", "mkfifo"])
def test_special_files_are_not_made_outside(call, tmp_path, make):
    target = tmp_path / "special"
    text = call(f"import os\nos.{make}({str(target)!r})\nprint('made')")
    assert text.startswith("Error:") and "made" not in text
    assert not os.path.lexists(target)


def test_a_device_made_in_the_folder_cannot_be_opened(call):
    text = call("import os, stat\nos.mknod('disk', stat.S_IFCHR | 0o600, os.makedev(1, 1))\n"
                "print(open('disk', 'rb').read(16))")  # (1, 1): /dev/mem
    assert text.startswith("Error:") and "b'" not in text


def test_a_reloaded_process_helper_starts_nothing_that_outlives_the_call(call):
    code = ("import importlib.machinery, importlib.util, os\n"
            "spec = importlib.util.find_spec('_posixsubprocess')\n"
            "loader = importlib.machinery.ExtensionFileLoader('x._posixsubprocess', spec.origin)\n"
            "mod = importlib.util.module_from_spec(\n"
            "    importlib.util.spec_from_loader('x._posixsubprocess', loader))\n"
            "r, w = os.pipe()\n"
            f"pid = mod.fork_exec([b'/bin/sleep', b'{MARKER}'], [b'/bin/sleep'], True, (), None,\n"
            "    None, -1, -1, -1, -1, -1, -1, r, w, True, True, -1, None, None, None, -1, None,\n"
            "    False)\nprint('started', pid)")
    text = call(code)
    assert "started" not in text.split("stderr")[0] and text.startswith("Error:")
    assert leftovers() == []


def test_a_process_left_behind_is_gone_when_the_call_returns(call):
    # past the hook (the process helper as above) and the filter, a leftover would need a
    # fork; whatever the code does, nothing of it may run once the call has returned
    text = call("import os, signal, time\nprint('pid', os.getpid())\n"
                "try:\n    os.fork()\nexcept Exception as exc:\n    print(type(exc).__name__)\n")
    assert "PermissionError" in text
    assert leftovers() == []


def test_the_caller_cannot_be_killed_with_a_pidfd(call):
    text = call("import os, signal\n"
                f"for pid in (os.getppid(), {os.getpid()}):\n"
                "    try:\n        signal.pidfd_send_signal(os.pidfd_open(pid), 9)\n"
                "        print('sent', pid)\n"
                "    except Exception as exc:\n        print(pid, type(exc).__name__)\n")
    assert "sent" not in text and "PermissionError" in text  # and this process lives on


def test_an_odd_signal_comes_back_as_a_result(call):
    text = call("import os\nos.kill(os.getpid(), 40)")
    assert text == "Error: the code was killed by SIGRTMIN+6."


def test_an_immutable_file_does_not_stop_the_cleanup(call, tmp_path):
    before = set(os.listdir("/tmp"))
    text = call("import array, fcntl, os\nopen('kept', 'w').write('x')\n"
                "fd = os.open('kept', os.O_RDONLY)\n"
                "fcntl.ioctl(fd, 0x40086602, array.array('l', [0x10]))  # FS_IMMUTABLE_FL\n"
                "print('immutable')")
    assert text.startswith("Error:") and "immutable" not in text.split("stderr")[0]
    assert not [n for n in set(os.listdir("/tmp")) - before if n.startswith("mathagent-")]


def test_a_subinterpreter_gets_no_further(call, tmp_path):
    target = tmp_path / "written.txt"
    with listeners(tmp_path) as (where, accepted):
        inner = (f"open({str(target)!r}, 'w').write('x')\n"
                 f"print(open('/proc/{os.getpid()}/environ').read())\n"
                 f"import socket\ns = socket.socket(socket.AF_UNIX)\ns.connect({where['unix']!r})\n")
        text = call(f"import _xxsubinterpreters as interpreters\n"
                    f"interpreters.run_string(interpreters.create(), {inner!r})\nprint('ran')")
    assert text.startswith("Error:") and "ran" not in text.split("stderr")[0]
    assert SECRET not in text and not target.exists() and accepted == []


def test_the_caller_cannot_be_pinned_to_one_cpu(call):
    mine = os.sched_getaffinity(0)
    text = call(f"import os\nfor pid in (os.getppid(), {os.getpid()}):\n"
                "    try:\n        os.sched_setaffinity(pid, {0})\n        print('pinned', pid)\n"
                "    except Exception as exc:\n        print(pid, type(exc).__name__)\n")
    assert "pinned" not in text and os.sched_getaffinity(0) == mine


def test_all_files_together_are_capped(call):
    file_mib = SandboxLimits().file_bytes >> 20
    text = call("total = 0\nfor i in range(40):\n"
                f"    with open(f'f{{i}}', 'wb') as f:\n        f.write(b'0' * ({file_mib} << 20))\n"
                f"    total += {file_mib} << 20\n    print(total)")
    written = [int(n) for n in text.split("stdout:\n")[1].split("stderr")[0].split()]
    assert max(written) <= SandboxLimits().disk_bytes
    assert "No space left on device" in text


def test_local_sockets_are_unreachable(call, tmp_path):
    with listeners(tmp_path) as (where, accepted):
        text = call("import socket\n"
                    f"for family, address in ((socket.AF_INET, ('127.0.0.1', {where['port']})),\n"
                    f"        (socket.AF_UNIX, {where['unix']!r}),\n"
                    f"        (socket.AF_UNIX, {where['abstract']!r})):\n"
                    "    try:\n        socket.socket(family).connect(address)\n"
                    "        print('connected', address)\n"
                    "    except Exception as exc:\n        print(type(exc).__name__)\n")
    assert "connected" not in text and accepted == []


# --------------------------------------------------------------------------------------
# Each layer alone
# --------------------------------------------------------------------------------------

WEAK = Isolation(None)


@pytest.mark.parametrize("code, refused", [
    ("import os\nos.makedirs('a/b')\nfd = os.open('.', os.O_RDONLY)\nos.chdir('a/b')\n"
     "os.open('../../../x', os.O_WRONLY | os.O_CREAT, dir_fd=fd)", "opening a relative path with '..'"),
    ("import os\nos.mknod('n')", "os.mknod"),
    ("import os\nos.mkfifo('f')", "os.mkfifo"),
    ("import posix\nposix.mknod('n')", "os.mknod"),
    ("import _imp, importlib.util\n_imp.create_builtin(importlib.util.find_spec('posix'))",
     "loading posix again"),
    ("import _imp\n_imp.create_builtin.__defaults__", "reading __defaults__"),
    ("import importlib.machinery, importlib.util\n"
     "spec = importlib.util.find_spec('_posixsubprocess')\n"
     "loader = importlib.machinery.ExtensionFileLoader('x._posixsubprocess', spec.origin)\n"
     "importlib.util.module_from_spec(importlib.util.spec_from_loader('x._posixsubprocess', "
     "loader))", "loading x._posixsubprocess"),
    ("import _xxsubinterpreters", "loading _xxsubinterpreters"),
    ("import os\nos.pidfd_open(os.getppid())", "os.pidfd_open"),
    ("import os\nos.sched_setaffinity(os.getppid(), {0})", "os.sched_setaffinity"),
    ("import fcntl\nfcntl.ioctl(0, 0x40086602, b'0000')", "fcntl.ioctl"),
    ("import os\nos.symlink('..', 'up')", "os.symlink"),
])
def test_the_audit_hook_alone_refuses(code, refused):
    result = run_code(code, SandboxLimits(timeout=ROOMY), layer=WEAK)
    assert f"PermissionError: sandbox: {refused}" in result.stderr, result.stderr
    assert "seccomp filter" not in result.layers and "audit hook" in result.layers


def test_the_audit_hook_alone_refuses_devices():
    from mathagent.sandbox_child import HARMLESS_DEVICES

    device = next(os.path.join("/dev", n) for n in sorted(os.listdir("/dev"))
                  if os.path.join("/dev", n) not in HARMLESS_DEVICES and not os.path.islink(
                      os.path.join("/dev", n)) and (os.stat(os.path.join("/dev", n)).st_mode
                                                    & 0o170000) in (0o020000, 0o060000))
    result = run_code(f"open({device!r}, 'rb')", SandboxLimits(timeout=ROOMY), layer=WEAK)
    assert f"PermissionError: sandbox: opening the device {device}" in result.stderr


def _bare_bwrap(script: str, seccomp: bool = True) -> subprocess.CompletedProcess:
    """``script`` under the kernel layer alone: bwrap and (``seccomp``) the filter, no audit
    hook."""
    layer = isolation()
    python = os.path.realpath(sys.executable)
    fd = os.memfd_create("seccomp-test")
    info_r, info_w = os.pipe()
    try:
        os.write(fd, layer.bpf)
        os.lseek(fd, 0, os.SEEK_SET)
        args = bwrap_args(layer.bwrap, fd, info_w, 1 << 20, read_only_paths(python, [], python))
        if not seccomp:
            at = args.index("--seccomp")
            del args[at:at + 2]
        return subprocess.run([*args, python, "-S", "-c", script], capture_output=True,
                              text=True, pass_fds=(fd, info_w), timeout=ROOMY, env={})
    finally:
        for n in (fd, info_r, info_w):
            os.close(n)


def test_the_kernel_layer_alone_refuses_what_code_never_needs():
    script = (
        "import ctypes, errno, json, os\nlibc = ctypes.CDLL(None, use_errno=True)\n"
        "def errno_of(result):\n    return errno.errorcode.get(ctypes.get_errno()) "
        "if result == -1 else 'ran'\n"
        "out = {'unshare': errno_of(libc.unshare(0x10000000)),\n"
        "       'ptrace': errno_of(libc.ptrace(16, 1, 0, 0)),\n"
        "       'mount': errno_of(libc.mount(b'none', b'/tmp', b'tmpfs', 0, None)),\n"
        "       'mknod': errno_of(libc.mknod(b'/sandbox/n', 0o010600, 0)),\n"
        "       'pidfd_open': errno_of(libc.syscall(434, 1, 0)),\n"
        "       'setns': errno_of(libc.setns(0, 0)),\n"
        "       'bpf': errno_of(libc.syscall(321, 0, 0, 0))}\n"
        "try:\n    os.fork()\n    out['fork'] = 'ran'\n"
        "except OSError as exc:\n    out['fork'] = errno.errorcode[exc.errno]\n"
        "import threading\nt = threading.Thread(target=print)\nt.start(); t.join()\n"
        "out['uid'] = os.getuid()\nout['proc'] = sorted(p for p in os.listdir('/proc') "
        "if p.isdigit())\nout['dev'] = sorted(os.listdir('/dev'))\n"
        "try:\n    open('/usr/x', 'w')\nexcept OSError as exc:\n"
        "    out['write /usr'] = errno.errorcode[exc.errno]\nprint(json.dumps(out))\n")
    done = _bare_bwrap(script)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.splitlines()[-1])
    assert {k: out[k] for k in ("unshare", "ptrace", "mount", "mknod", "pidfd_open", "setns",
                                "bpf", "fork")} == dict.fromkeys(
        ("unshare", "ptrace", "mount", "mknod", "pidfd_open", "setns", "bpf", "fork"), "EPERM")
    assert out["uid"] == 65534 and out["proc"] == ["1", "2"]  # bwrap's PID 1 and the code
    assert out["dev"] == ["fd", "null", "random", "urandom", "zero"]
    assert out["write /usr"] == "EROFS"


def test_every_run_names_the_kernel_layers():
    result = run_code("print(1)")
    assert result.ok and set(LAYERS) <= set(result.layers)


def test_the_pid_1_reaper_alone_ends_a_process_left_behind():
    # without the filter a fork works; the grandchild leaves the session and outlives its
    # parent, the code's process, whose end must take it along
    script = ("import os, sys\nif os.fork() == 0:\n    os.setsid()\n"
              f"    os.execv('/bin/sleep', ['sleep', '{MARKER}'])\n"
              "import time\ntime.sleep(0.5)\nprint('left one behind')\n")
    done = _bare_bwrap(script, seccomp=False)
    assert done.returncode == 0 and "left one behind" in done.stdout, done.stderr
    assert leftovers() == []


def test_a_path_to_show_under_tmp_gets_a_read_only_tmp_of_its_own():
    """A checkout or environment under /tmp (CI may clone there): /tmp cannot be a link into
    the work folder, so it is an empty tmpfs holding the mount point, made read-only after;
    elsewhere /tmp points into the work folder."""
    args = bwrap_args("bwrap", 3, 4, 1 << 20, ["/usr", "/tmp/checkout"])
    pairs = [tuple(args[i:i + 3]) for i in range(len(args) - 2)]
    tmpfs = args.index("--tmpfs", 0)
    assert args[tmpfs + 1] == "/tmp" and tmpfs < pairs.index(("--ro-bind", "/tmp/checkout",
                                                             "/tmp/checkout"))
    assert args.index("--remount-ro") > pairs.index(("--ro-bind", "/tmp/checkout",
                                                    "/tmp/checkout"))
    assert ("--symlink", "/sandbox", "/tmp") not in pairs
    elsewhere = bwrap_args("bwrap", 3, 4, 1 << 20, ["/usr", "/work/checkout"])
    assert "--remount-ro" not in elsewhere
    assert ("--symlink", "/sandbox", "/tmp") in [tuple(elsewhere[i:i + 3])
                                                  for i in range(len(elsewhere) - 2)]
