"""Every error and warning tapegrad raises, in one place, all exported as ``tg.<Name>``.

The classes follow one policy: a TypeError for types and dtypes, a ValueError for shapes and
values, a RuntimeError for state. Where NVIDIA Warp raises a different built-in for the same
problem, the class derives from both, so code written for Warp keeps catching it.

This module imports nothing: every layer may raise these.
"""
from __future__ import annotations

__all__ = ["KernelError", "IRCheckError", "CompileError", "CacheDirError", "CacheWarning", "TapeWarning",
           "TapeCompileWarning", "GradcheckError", "DLPackStreamError", "DLPackDtypeError", "ConsumedCapsuleError",
           "BridgeTypeError", "GradLayoutError", "ArgnamesError", "NotDifferentiableError", "ArgumentCountError",
           "KernelIndexError", "KernelRuntimeError", "WarpCodegenError", "WarpCodegenTypeError",
           "WarpCodegenAttributeError", "WarpCodegenValueError", "WarpCodegenIndexError", "WarpCodegenKeyError"]


# ------------------------------------------------------------------------- kernels and builds

class KernelError(TypeError):
    """A kernel or function that cannot be compiled; the message names the Python file:line."""


# Warp's code-generation errors, raised where Warp raises them. Each is a KernelError (so
# ``except KernelError`` / ``except TypeError`` keep working) and also the built-in Warp's class
# derives from (RuntimeError, AttributeError...), so code written for Warp catches them too.

# What a kernel that returns a value (or declares a return type) is told: Warp's words.
KERNEL_RETURN_MESSAGE = ("Warp kernels cannot return values. Write results to output arguments, and omit the return "
                         "annotation or use `-> None`.")


class WarpCodegenError(KernelError, RuntimeError):
    """A kernel or function that cannot be compiled, where Warp raises ``WarpCodegenError``
    (a RuntimeError there): a ``@func``'s returns disagreeing with its annotation..."""


class WarpCodegenTypeError(KernelError):
    """A type problem in a kernel, where Warp raises ``WarpCodegenTypeError`` (a TypeError):
    a kernel returning a value..."""


class WarpCodegenAttributeError(KernelError, AttributeError):
    """An unknown attribute in a kernel, where Warp raises ``WarpCodegenAttributeError``."""


class WarpCodegenValueError(KernelError, ValueError):
    """A bad value in a kernel (a zero slice step...), where Warp raises ``WarpCodegenValueError``."""


class WarpCodegenIndexError(KernelError, IndexError):
    """A bad index in a kernel, where Warp raises ``WarpCodegenIndexError``."""


class WarpCodegenKeyError(KernelError, KeyError):
    """An unknown name in a kernel, where Warp raises ``WarpCodegenKeyError``."""

    __str__ = BaseException.__str__   # the message as written (KeyError's str() would quote it)


class IRCheckError(RuntimeError):
    """The kernel compiler produced IR that breaks one of its invariants (a tapegrad bug; the
    check runs when ``TAPEGRAD_CHECK_IR=1``, as in the test suite). Names the pass and the line."""


class CompileError(RuntimeError):
    """The C++ compiler or NVRTC rejected generated code (names the kernel's Python file:line),
    or no compiler is available."""


class CacheDirError(PermissionError):
    """The kernel cache directory is unsafe (writable by group or others, or owned by another
    user), is not a directory, or cannot be written (full, read-only, no permission) when a
    build needs it; the message names the directory and the fix."""


class CacheWarning(UserWarning):
    """A cached binary (kernel, native helper, CUDA image) failed its size/sha256 check or
    could not be loaded, and is being rebuilt; the message names the file. Warned once per
    file and process."""


class KernelIndexError(IndexError):
    """A kernel built in debug mode (``tg.config.mode = "debug"``) indexed an array out of range.

    Raised after the launch; the out-of-range access was skipped (a read gave zero). The
    message names the kernel, the array, the index, the array's shape and the Python line.

    Attributes:
        kernel: the kernel's key. function: the kernel or ``@func`` where the access is.
        array: the array's name. index: the index tuple. shape: the array's shape.
        location: ``file:line``. access: "read", "write", "atomic_add"... count: how many
            out-of-range accesses the launch made (only the first is described).
    """

    def __init__(self, message, kernel="", function="", array="", index=(), shape=(), location="", access="",
                 count=1):
        super().__init__(message)
        self.kernel, self.function, self.array = kernel, function, array
        self.index, self.shape, self.location, self.access, self.count = index, shape, location, access, count


class KernelRuntimeError(RuntimeError, ValueError):
    """A CPU kernel launch met a bad value at run time that it cannot compute with: a slice
    ``a[i:j:s]`` whose step ``s`` was 0 (Python's ``ValueError: slice step cannot be zero``).

    Raised after the launch, which ran to its end: each such slice was an empty view. A
    ``RuntimeError`` (the launch failed) that is also a ``ValueError`` (what Python raises for
    ``a[::0]``). On CUDA the kernel traps instead (the CUDA context is lost, as in Warp).

    Attributes:
        kernel: the kernel's key. location: the Python ``file:line`` of the slice ("" when
            unknown). phase: "forward", "backward", "tangent" or "tangent of the adjoint".
    """

    def __init__(self, message, kernel="", location="", phase=""):
        super().__init__(message)
        self.kernel, self.location, self.phase = kernel, location, phase


class TapeCompileWarning(UserWarning):
    """The adjoint of a kernel is exact but costly (or limited); the message says where and why."""


# ---------------------------------------------------------------------------------- gradients

class TapeWarning(UserWarning):
    """A recorded launch overwrote data an earlier recorded launch read: the replayed adjoint
    would see the new values, so its gradient may be wrong."""


class GradcheckError(AssertionError):
    """Adjoint and finite-difference Jacobians disagree; the message lists the worst entries."""


# ------------------------------------------------------------------------------------- DLPack

class DLPackStreamError(TypeError, BufferError):
    """A ``stream`` argument the producer cannot honour (TypeError, as Warp; also BufferError)."""


class DLPackDtypeError(TypeError, RuntimeError):
    """A dtype has no DLPack form (TypeError; also RuntimeError, as Warp raises)."""


class ConsumedCapsuleError(RuntimeError):
    """A DLPack capsule was consumed already (capsules are single-use)."""


# ------------------------------------------------------------------------------------ bridges

class BridgeTypeError(TypeError, RuntimeError):
    """A dtype the other side of a framework bridge cannot represent or reinterpret.

    A ``TypeError`` (tapegrad's policy for type problems) that is also a ``RuntimeError``, so
    code written for Warp (which raises RuntimeError here) keeps working.
    """


class ArgnamesError(ValueError, AssertionError):
    """A list of parameter names (``in_out_argnames``...) naming one parameter twice.

    A ``ValueError`` (tapegrad's policy for bad values) that is also an ``AssertionError``,
    which Warp raises there.
    """


class NotDifferentiableError(RuntimeError, ValueError):
    """A derivative asked of a kernel op (``torch_op``, ``paddle_op``, ``jax_kernel``) that has none: its
    kernel was built with ``@tg.kernel(enable_backward=False)``, or the ``jax_kernel`` was made without
    ``enable_backward=True``. The op runs forward; the message names the op, the kernel and the fix.

    A ``RuntimeError`` (torch's and paddle's class for a failed backward) that is also a ``ValueError``
    (what ``jax_kernel`` raised before).
    """


class ArgumentCountError(TypeError, ValueError):
    """A kernel op called with the wrong number of arguments; the message names the parameters.

    A ``TypeError`` (Python's class for a call with the wrong arguments) that is also a ``ValueError``
    (Warp's ``jax_kernel``'s).
    """


class GradLayoutError(ValueError, RuntimeError):
    """A gradient whose dtype, shape, strides or device differ from its array's.

    Kernels address a gradient with its array's strides, so they must be equal. A
    ``ValueError`` (tapegrad's policy, and Warp's for arrays) that is also a ``RuntimeError``
    (Warp's for ``return_ctype`` descriptors).
    """


class LaunchArgumentError(TypeError, RuntimeError):
    """One number passed for a vector, matrix, quaternion or transform kernel parameter (a launch
    would otherwise have to guess how to fill the components). A ``TypeError`` (tapegrad's
    policy) that is also Warp's ``RuntimeError``, with Warp's wording (``argument 'v' expects
    vec3f but got a single value``)."""


class LaunchConversionError(TypeError, ValueError):
    """A value a vector, matrix, quaternion or transform kernel parameter cannot be built from
    (None, a string, another number of components). A ``TypeError`` (tapegrad's policy) that
    is also Warp's ``ValueError`` (``Failed to convert argument for param v to vec3f``)."""


class CopyArgumentError(ValueError, RuntimeError):
    """``tg.copy`` refused its arguments: a negative or out-of-range offset or count, element sizes
    or shapes that do not match. A ``ValueError`` (tapegrad's policy) that is also a
    ``RuntimeError`` (Warp's for ``wp.copy``), with Warp's wording in the message."""


class CopyTypeError(TypeError, RuntimeError):
    """``tg.copy`` got a non-integer offset or count, or arrays of different element types. A
    ``TypeError`` (tapegrad's policy) that is also a ``RuntimeError`` (Warp's for ``wp.copy``)."""


class ReshapeError(ValueError, RuntimeError):
    """``a.reshape(shape)`` with another number of elements. A ``ValueError`` (tapegrad's policy)
    that is also Warp's ``RuntimeError``, with Warp's wording."""


class ViewDtypeError(TypeError, ValueError):
    """``a.view(dtype)`` between dtypes whose sizes do not fit (Warp's ``TypeError``, with its
    wording; also the ``ValueError`` tapegrad raised before)."""
