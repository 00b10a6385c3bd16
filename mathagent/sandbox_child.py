"""The child's side of :mod:`mathagent.sandbox`: limit this process, then run the code.

:mod:`mathagent.sandbox` runs this file as a script in a fresh interpreter
(``python -s -S -P sandbox_child.py CONFIG``); nothing imports it. It reads the code from
stdin, enters a network namespace of its own (unless bubblewrap already made one: ``isolated``
in its configuration), sets the kernel limits, takes away the functions that start processes
or make special files, installs the audit hook and runs the code, showing the value of a last line that is an expression and an exception's
traceback as a Python REPL would. It imports only
the standard library, so no code of the package runs next to the model's code.
"""

import ast
import json
import linecache
import os
import resource
import sys
import traceback  # imported up front: a traceback after a MemoryError needs no new import
import types

CLONE_NEWNET, CLONE_NEWUSER = 0x40000000, 0x10000000

#: Audit events refused outright: starting processes, raising the kernel limits, crafting
#: bytecode, reaching objects through the garbage collector (ways around the hook), a
#: subinterpreter (where the hook does not run) and ioctls (file flags such as immutable).
REFUSED = frozenset({
    "os.fork", "os.forkpty", "os.posix_spawn", "os.exec", "os.system", "os.killpg",
    "subprocess.Popen", "resource.setrlimit", "resource.prlimit", "code.__new__",
    "gc.get_objects", "gc.get_referrers", "gc.get_referents", "sqlite3.connect",
    "cpython.PyInterpreterState_New", "fcntl.ioctl"})
#: Modules never loaded (again), under any name: the C helper that starts processes, the
#: subinterpreter modules and CPython's test modules (raw memory access).
NEVER_LOADED = frozenset({
    "_posixsubprocess", "_xxsubinterpreters", "_xxinterpchannels", "_interpreters",
    "_interpchannels", "_interpqueues", "_testcapi", "_testinternalcapi", "_testmultiphase",
    "_testsinglephase", "_testbuffer", "_testimportmultiple", "_ctypes_test"})
#: Devices the code may open (others, a device node made in the folder included, it may not).
HARMLESS_DEVICES = frozenset({"/dev/null", "/dev/zero", "/dev/random", "/dev/urandom",
                              "/dev/full", "/dev/tty"})
#: ``os`` (and ``posix``) functions with no audit event that the code never needs: they make
#: device files and pipes in the filesystem, or reach other processes by number.
TAKEN_AWAY = ("mknod", "mkfifo", "pidfd_open", "sched_setaffinity", "sched_setscheduler",
              "sched_setparam", "setpriority")
#: Events that change files: (positions of their paths, positions of their folder
#: descriptors) in the event's arguments (Python 3.11).
CHANGES = types.MappingProxyType({
    "os.remove": ((0,), (1,)), "os.rmdir": ((0,), (1,)), "os.mkdir": ((0,), (2,)),
    "os.chmod": ((0,), (2,)), "os.chown": ((0,), (3,)), "os.utime": ((0,), (3,)),
    "os.rename": ((0, 1), (2, 3)), "os.link": ((0, 1), (2, 3)), "os.symlink": ((0, 1), (2,)),
    "os.truncate": ((0,), ()), "os.setxattr": ((0,), ()), "os.removexattr": ((0,), ()),
    "os.chflags": ((0,), ()), "os.lchflags": ((0,), ())})
WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC


def enter_network_namespace() -> bool:
    """Leave the machine's network: afterwards only a loopback that is down is visible.

    Root may do it directly; another user only inside a new user namespace (where the kernel
    allows one), mapping its own ids there so that files stay writable.
    """
    import ctypes  # loaded now: the hook refuses ctypes' loader and calls afterwards

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.unshare(CLONE_NEWNET) == 0:
            return True
        uid, gid = os.getuid(), os.getgid()
        if libc.unshare(CLONE_NEWUSER | CLONE_NEWNET) != 0:
            return False
        for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"),
                           ("gid_map", f"{gid} {gid} 1")):
            with open(f"/proc/self/{name}", "w") as f:
                f.write(text)
        return True
    except (OSError, AttributeError):
        return False


def take_away_unaudited() -> None:
    """Replace what starts processes, makes special files or reaches other processes without
    an audit event: ``_posixsubprocess.fork_exec`` (``subprocess.Popen`` is audited, the C
    helper under it is not) and :data:`TAKEN_AWAY` in ``os`` and ``posix``. The replacements
    keep nothing of the originals, and the hook refuses loading those modules afresh: by
    ``import`` (:data:`NEVER_LOADED`), and ``posix`` by ``_imp.create_builtin``, replaced by
    a function that refuses it (the original is its default argument, which the hook does
    not let the code read)."""
    import _imp
    import _posixsubprocess
    import posix

    def fork_exec(*args, **kwargs):
        raise PermissionError("sandbox: starting a process is not allowed here")

    _posixsubprocess.fork_exec = fork_exec
    for name in TAKEN_AWAY:
        def refused(*args, _name=name, **kwargs):
            raise PermissionError(f"sandbox: os.{_name} is not allowed here")

        refused.__name__ = refused.__qualname__ = name
        for module in (os, posix):
            if hasattr(module, name):
                setattr(module, name, refused)

    def sandbox_create_builtin(spec, _create=_imp.create_builtin,
                               _never=NEVER_LOADED | {"posix", "os"}):
        if getattr(spec, "name", None) in _never:
            raise PermissionError(f"sandbox: loading {spec.name} again is not allowed here")
        return _create(spec)

    _imp.create_builtin = sandbox_create_builtin


def make_hook(work: str, pid: str):
    """The audit hook. What it uses is bound as default arguments (the code can rebind this
    module's names, not those), and it refuses replacing its own code or defaults."""

    def sandbox_audit(event, args, work=work, pid=pid, refused=REFUSED, changes=CHANGES,
                      never=NEVER_LOADED, devices=HARMLESS_DEVICES, realpath=os.path.realpath,
                      isdir=os.path.isdir, fspath=os.fspath, fsdecode=os.fsdecode,
                      join=os.path.join, dirname=os.path.dirname, stat=os.stat,
                      special=(0o020000, 0o060000), write_flags=WRITE_FLAGS):
        def refuse(what):
            raise PermissionError(f"sandbox: {what} is not allowed here")

        def resolved(path, start=None):  # None for an open file descriptor (kernel-checked)
            if isinstance(path, int):
                return None
            path = fsdecode(fspath(path))
            return realpath(path if start is None else join(start, path))

        def inside(real):
            return real == work or real.startswith(work + "/")

        def parent_dir(path):
            return ".." in fsdecode(fspath(path)).replace("\\", "/").split("/")

        if event in refused or event.startswith(("socket.", "ctypes.")):
            refuse(event)
        if event == "import" and (args[0].rpartition(".")[2] in never or (
                isinstance(args[1], str) and args[1].rpartition("/")[2].split(".")[0] in never)):
            refuse(f"loading {args[0]}")
        if event == "os.kill" and args[0] != int(pid):
            refuse("signalling another process")
        if event in ("object.__setattr__", "object.__getattr__") and (
                (args[1] == "__code__" and event == "object.__setattr__") or (
                args[1] in ("__defaults__", "__kwdefaults__") and getattr(getattr(
                    args[0], "__code__", None), "co_name", "").startswith("sandbox_"))):
            refuse(f"{'replacing' if event == 'object.__setattr__' else 'reading'} {args[1]}")
        if event in ("open", "os.listdir", "os.scandir") and args[0] is not None:
            real = resolved(args[0])
            if real is None:
                return
            if event == "open" and not isinstance(args[0], int) and parent_dir(args[0]) and \
                    not fsdecode(fspath(args[0])).startswith("/"):
                # a folder descriptor (dir_fd) would be the start, not the current folder
                refuse(f"opening a relative path with '..' ({fsdecode(fspath(args[0]))})")
            if event == "open" and real not in devices:
                try:
                    kind = stat(real).st_mode & 0o170000
                except OSError:
                    kind = 0
                if kind in special:
                    refuse(f"opening the device {real}")
            parts = real.split("/")
            if len(parts) > 2 and parts[1] == "proc" and parts[2].isdigit() and parts[2] != pid:
                refuse(f"reading {real}")  # another process's environment, memory, files
            if event != "open" or inside(real):
                return
            if (args[2] or 0) & write_flags or set(args[1] or "") & set("wax+"):
                refuse(f"writing {real} (outside the working folder)")
            if isdir(real):  # a folder descriptor would let os.open(..., dir_fd=) write anywhere
                refuse(f"opening the folder {real}")
        if event in changes:
            paths, folder_fds = changes[event]
            if any(args[i] not in (None, -1, -100) for i in folder_fds):  # -100: AT_FDCWD
                refuse(f"{event} relative to a folder descriptor")
            for i in paths:
                # a symlink's target is read from the link's folder, not the current one
                start = dirname(resolved(args[1])) if event == "os.symlink" and i == 0 else None
                real = resolved(args[i], start)
                if real is None or not inside(real):
                    refuse(f"{event} on {real or 'a file descriptor'} (outside the working "
                           "folder)")

    return sandbox_audit


def split_last_expression(code: str):
    """``code`` compiled as a module, and its last statement compiled apart when it is an
    expression (whose value is then shown, as a notebook cell shows it), else None."""
    tree = compile(code, "<code>", "exec", ast.PyCF_ONLY_AST)  # no frame of ast.py
    last = None
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        last = compile(ast.Expression(tree.body.pop().value), "<code>", "eval")
    return compile(tree, "<code>", "exec"), last


def run(code: str) -> None:
    """Execute ``code`` as ``__main__`` and print the repr of a last expression's value (not
    None); on an exception print its traceback (without this file's frames) and exit with
    status 1."""
    linecache.cache["<code>"] = (len(code), None, code.splitlines(True), "<code>")
    namespace = {"__name__": "__main__", "__builtins__": __builtins__}
    try:
        body, last = split_last_expression(code)
        exec(body, namespace)
        if last is not None:
            value = eval(last, namespace)
            if value is not None:
                print(repr(value))
    except SystemExit:
        raise
    except BaseException as exc:
        shown = traceback.TracebackException(type(exc), exc, exc.__traceback__)
        shown.stack = traceback.StackSummary.from_list(
            [frame for frame in shown.stack if frame.filename != __file__])
        print("".join(shown.format()), end="", file=sys.stderr)
        sys.exit(1)


def main() -> None:
    config = json.loads(sys.argv[1])
    sys.argv[:] = ["<code>"]
    sys.path.extend(config["path"])  # the installed packages (numpy, sympy); -S left them out
    code = sys.stdin.buffer.read().decode("utf-8", "replace")
    import ctypes  # noqa: F401  numpy imports it; the hook refuses its loader afterwards

    layers = []
    if not config["isolated"] and enter_network_namespace():
        layers.append("network namespace")  # under bubblewrap, already in one of its own
    # soft = hard, so the code cannot raise them (root could: the hook refuses it)
    for name, limits in config["rlimits"].items():
        resource.setrlimit(getattr(resource, name), tuple(limits))
    layers.append("rlimits")
    take_away_unaudited()
    sys.addaudithook(make_hook(os.path.realpath(os.getcwd()), str(os.getpid())))
    layers.append("audit hook")
    with os.fdopen(config["report_fd"], "w") as report:
        report.write(json.dumps(layers))
    sys.stdout.reconfigure(line_buffering=True)  # what was printed before a kill arrives
    del config
    run(code)


if __name__ == "__main__":
    main()
