"""Global switches (``tg.config``): read by the compiler, the launch path and the tape.

This module sits in the lowest layer (it imports only ``hostvalues``, below it), so every
layer can read it: the kernel compiler reads ``mode``, the tape reads ``strict_tape``.
"""
from __future__ import annotations

from .hostvalues import legacy_scalars, set_legacy_scalars

__all__ = ["config", "Config", "MODES", "check_mode", "add_mode_listener"]

MODES = ("release", "debug")
_LISTENERS: list = []   # callables run after config.mode changes (higher layers register)


def add_mode_listener(fn) -> None:
    """Call ``fn()`` whenever ``config.mode`` changes (the compiler drops its cached choice of
    build). Lower layers own this table; higher layers register into it."""
    _LISTENERS.append(fn)


class Config:
    """tapegrad's global switches (``tg.config``; Warp's ``wp.config`` names where they exist).

    Attributes:
        mode: ``"release"`` (default) or ``"debug"``. Debug compiles kernels with bounds checks
            on every array access: an out-of-range index raises `tapegrad.KernelIndexError`
            after the launch instead of corrupting memory. The mode is part of the compiled
            module's key, so switching modes picks the other variant (no reload needed, unlike
            Warp, which reads ``wp.config.mode`` when a module is first loaded). A module option
            ``"mode"`` (``set_module_options``) overrides it for that module's kernels.
        strict_tape: ``True`` turns a ``TapeWarning`` into a ``RuntimeError``.
        tape_save_overwritten: the default of ``Tape(save_overwritten=)`` (True): a tape keeps
            copies of the arrays recorded in-place updates overwrite, for exact gradients.
        verbose: what the ``"tapegrad"`` logger says (`tapegrad.buildlog`). ``None`` (default): one
            line per kernel module built or loaded (``module ... on device 'cpu' took 812 ms
            (compiled)``, or ``(cached)``), printed on stderr unless the program configures
            ``logging`` itself; ``True``: also details (the generated source's path in the kernel
            cache, the native helpers loaded); ``False``: nothing.
        quiet: ``True`` says nothing, whatever ``verbose`` is (Warp's name).
        deterministic: None (default) or ``DeterministicMode.NOT_GUARANTEED`` only. Warp's
            process-wide default for the ``deterministic`` module option; tapegrad takes
            ``RUN_TO_RUN`` per module (``set_module_options({"deterministic": ...})`` or
            ``@kernel(module="unique", module_options=...)``), so setting it here raises
            instead of being ignored (it would also reach tapegrad's own kernels, and CUDA
            has no deterministic build).
        legacy_scalar_return_types: ``True`` makes a component read from a host vector or
            matrix (``v[0]``, ``m[0, 1]``) a Python ``float``/``int``; ``False`` (default): a
            NumPy scalar of the type (Warp's switch of the same name).

    Other attributes may be set freely, as on Warp's ``wp.config`` module (code written for
    Warp that sets other switches keeps working); tapegrad reads only the ones above.
    """

    def __init__(self):
        self._mode = "release"
        self.strict_tape = False
        self.tape_save_overwritten = True
        self.verbose = None
        self.quiet = False

    @property
    def mode(self) -> str:
        return self._mode

    @mode.setter
    def mode(self, value) -> None:
        value = check_mode(value, "config.mode")
        if value != self._mode:
            self._mode = value
            for fn in list(_LISTENERS):
                fn()

    @property
    def deterministic(self):
        return None

    @deterministic.setter
    def deterministic(self, value) -> None:
        # None, False and NOT_GUARANTEED (an IntEnum equal to 0) ask for nothing
        if value is None or value is False or (isinstance(value, int) and not isinstance(value, bool) and value == 0):
            return
        raise ValueError(f"config.deterministic = {value!r}: tapegrad takes the 'deterministic' option per module: "
                         f"set_module_options({{'deterministic': DeterministicMode.RUN_TO_RUN}}) in the module that "
                         f"defines the kernels, or @kernel(module=\"unique\", module_options={{...}}); RUN_TO_RUN "
                         f"runs their CPU launches serially, in grid order")

    @property
    def legacy_scalar_return_types(self) -> bool:
        return legacy_scalars()

    @legacy_scalar_return_types.setter
    def legacy_scalar_return_types(self, value) -> None:
        set_legacy_scalars(bool(value))   # the host values read it (tapegrad.hostvalues)

    def __repr__(self):
        return (f"Config(mode={self._mode!r}, strict_tape={self.strict_tape!r}, verbose={self.verbose!r}, "
                f"quiet={self.quiet!r})")


def check_mode(value, who: str) -> str:
    """``value`` when it is a valid mode name.

    Raises:
        ValueError: ``value`` is not ``"release"`` or ``"debug"``.
    """
    if not isinstance(value, str) or value not in MODES:
        raise ValueError(f"{who}: mode must be 'release' or 'debug', got {value!r}")
    return value


config = Config()
