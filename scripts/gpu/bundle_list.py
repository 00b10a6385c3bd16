"""Which pins of requirements/gpu.lock the offline bundle carries (prints them, one a line).

A pin is carried when its marker holds on the target (CPython 3.12 on x86_64 Linux by default),
its package is not already on the target image (``--have``) and it is not dropped (``--drop``).
Usage: python scripts/gpu/bundle_list.py requirements/gpu.lock --have FILE --drop FILE [--python 3.12]
"""

import argparse
import re
import sys

from packaging.markers import Marker
from packaging.utils import canonicalize_name


def names(path: str) -> set[str]:
    with open(path) as fh:
        return {canonicalize_name(ln.strip()) for ln in fh if ln.strip() and not ln.startswith("#")}


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("lock")
    ap.add_argument("--have", required=True, help="names already on the target, one a line")
    ap.add_argument("--drop", required=True, help="names not to carry, one a line")
    ap.add_argument("--python", default="3.12", help="target Python (default 3.12)")
    args = ap.parse_args(argv)
    env = {"python_version": args.python, "python_full_version": f"{args.python}.0",
           "sys_platform": "linux", "platform_system": "Linux", "platform_machine": "x86_64",
           "implementation_name": "cpython", "platform_python_implementation": "CPython",
           "os_name": "posix"}
    skip = names(args.have) | names(args.drop)
    carried = 0
    with open(args.lock) as fh:
        for line in fh:
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            pin, _, marker = line.partition(";")
            name = canonicalize_name(re.split(r"[=\[]", pin.strip(), maxsplit=1)[0])
            if marker.strip() and not Marker(marker.strip()).evaluate(env):
                continue
            if name in skip:
                continue
            print(pin.strip())
            carried += 1
    print(f"bundle_list: {carried} pins to carry", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
