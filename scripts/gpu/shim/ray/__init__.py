"""Import-only stand-in for Ray on the single-GPU machine of ``scripts/gpu``.

Trinity-RFT's logging module (``trinity/utils/log.py``) runs ``import ray`` at import time,
so Trinity's selector and reward modules cannot be imported without Ray, although the
tutorial-scale trainer never starts a Ray cluster or calls Ray. The Ray wheel is larger
than what can be carried to that machine, so the GPU scripts put this folder on
``PYTHONPATH`` there: ``import ray`` succeeds and any use of it fails loudly. It is never
used on a machine where Ray is installed.
"""


def __getattr__(name: str):
    raise RuntimeError(
        f"ray.{name} was used, but this is the import-only stand-in from scripts/gpu/shim: "
        "the tutorial-scale GPU run is not supposed to need Ray")
