"""Fixtures shared by test modules."""

from __future__ import annotations

import pytest

from mathagent import launch


@pytest.fixture(scope="module")
def ray_head():
    """One real Ray head for a module's checks: 1 CPU and no GPU, whatever the machine has (the
    #602 colocate deadlock needs a head without one; Trinity's runner actors ask for no CPU);
    every process of it stopped after the module's last check."""
    with launch.local_ray_head(num_cpus=1, num_gpus=0, object_store_memory=100 * 2**20) as head:
        yield head
    assert head.processes() == []
