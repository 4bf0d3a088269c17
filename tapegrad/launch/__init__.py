"""The launch, one package: ``launch()`` and what it is made of.

- ``core``: ``launch()``, the Python path, the per-kernel ``LaunchPlan`` (packers and the native
  helper's plan), ``LaunchRecord`` (a launch on a tape), ``prepare_launch``.
- ``packers``: the Python packers, the reference and the source of every error; the adapters
  of registered tensor types (``tapegrad.tensortypes`` rows); adjoint arguments.
- ``devices``: the launch device (``infer_device``; a tensor type's device from its row).
- ``grid``: ``dim`` into launch bounds; the unguarded-``tid()`` grid check.
- ``fastlaunch`` (``fastlaunch.c``): the native helper, which takes the common launches in one
  C call from the plan's data and hooks, and passes every other one to the Python path.
- ``command``: ``Launch``, a launch packed once and replayed (``launch(record_cmd=True)``).
- ``tangent``: forward mode (``launch(tangent=True)``), registered by ``import tapegrad``.
"""
from __future__ import annotations

from . import fastlaunch  # noqa: F401  the native helper (tapegrad.launch.fastlaunch)
from .command import Launch  # registers launch(record_cmd=True)
from .core import (
                   LaunchPlan,
                   LaunchRecord,
                   PreparedLaunch,
                   adjoint_descriptors,
                   launch,
                   prepare_launch,
                   register_tangent_launcher,
)
from .grid import MAX_LAUNCH_SIZE, NARROW_LAUNCH_SIZE
from .packers import ArrayCtype, zero_value

__all__ = ["launch", "Launch", "ArrayCtype", "LaunchRecord", "PreparedLaunch",
           "prepare_launch", "adjoint_descriptors", "zero_value", "register_tangent_launcher", "LaunchPlan",
           "MAX_LAUNCH_SIZE", "NARROW_LAUNCH_SIZE"]
