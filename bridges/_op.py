"""A kernel's signature as a framework op sees it: the framework-neutral half of every
"kernel -> native op" wrapper (``torch_op``, ``paddle_op``, the JAX wrappers).

``KernelSignature.of(kernel, num_outputs, ...)`` splits a kernel's parameters into the op's
inputs and outputs, names the differentiable inputs and owns the one policy of a call's
checks (``prepare``: the arguments and their wording, the launch grid, ``output_dims``, the
grid-fits check). ``kernel_op.KernelOp`` builds the op's lifecycle on it (allocation,
launches, derivative wiring); the framework module keeps only what is its own.

Parameter layout (Warp's rule): the last ``num_outputs`` kernel parameters are outputs; the
ones named in ``in_out_argnames`` are outputs the op also takes as inputs (JAX: the kernel
updates them in place), and must come first among the outputs.

    sig = KernelSignature.of(kernel, 2, in_out_argnames=("acc",), output_dims={"out": 8}, who="jax_kernel")
    grid, shapes = sig.prepare(args, framework)                # every check of a call
    sig.inputs, sig.outputs, sig.in_out, sig.pure_outputs     # tuples of Param
    grid = sig.grid(args); shapes = sig.output_shapes(args, grid)
"""
from __future__ import annotations

import itertools
import re
from dataclasses import dataclass

import numpy as np

from tapegrad import types
from tapegrad.errors import ArgumentCountError
from tapegrad.lang.facts import check_grid_fits

from ._base import check_compatible

__all__ = ["Param", "KernelSignature", "dims_of", "config_key", "op_builder"]


@dataclass(frozen=True)
class Param:
    """One kernel parameter.

    Attributes:
        index: position among the kernel's parameters.
        name: parameter name.
        type: its tapegrad type (``ArrayType``, a scalar, vector, matrix or struct type).
    """

    index: int
    name: str
    type: object

    @property
    def is_array(self) -> bool:
        return isinstance(self.type, types.ArrayType)

    @property
    def dtype(self):
        """Element type of an array parameter (the type itself for a value parameter)."""
        return self.type.dtype if self.is_array else self.type

    @property
    def inner_shape(self) -> tuple:
        """Vector/matrix component dims of the elements (``()`` for scalars)."""
        return self.dtype.inner_shape

    @property
    def framework_ndim(self) -> int:
        """Dims of a framework tensor for this array parameter (component dims included)."""
        return self.type.ndim + len(self.inner_shape)

    @property
    def is_differentiable(self) -> bool:
        """A float array: it gets a gradient."""
        return self.is_array and self.dtype.scalar.is_float


def dims_of(spec, args, what: str, who: str) -> tuple:
    """A shape from a dims spec: an int, a tuple, or a callable of the op's arguments
    returning one. Symbolic sizes (torch ``SymInt``, JAX tracers' dims) pass through.

    Raises:
        TypeError: the spec (or what the callable returned) is not an int or a tuple.
    """
    d = spec(*args) if callable(spec) else spec
    if isinstance(d, (tuple, list)):
        return tuple(int(x) if isinstance(x, np.integer) else x for x in d)
    if isinstance(d, np.integer):
        return (int(d),)
    if isinstance(d, int) or (not isinstance(d, (str, bytes, float)) and hasattr(d, "__int__")
                              and not hasattr(d, "__len__")):
        return (d,)
    raise TypeError(f"{who}: {what} must be an int or a tuple of ints, got {d!r}")


def config_key(*parts):
    """A hashable key of an op configuration (dicts and lists frozen), or None when some part
    cannot be hashed (the op is then built without caching)."""
    def freeze(x):
        if isinstance(x, dict):
            return tuple(sorted((k, freeze(v)) for k, v in x.items()))
        if isinstance(x, (list, tuple)):
            return tuple(freeze(v) for v in x)
        return x
    key = tuple(freeze(p) for p in parts)
    try:
        hash(key)
    except TypeError:
        return None
    return key


def op_builder(name: str, module: str, doc: str, build, scalar_of=None):
    """The public ``<framework>_op(kernel, num_outputs=1, *, launch_dims=None, output_dims=None,
    name=None)`` function: builds an op with ``build(kernel, num_outputs, launch_dims,
    output_dims, name)`` and returns the same op for the same configuration again. A generic
    kernel gives a ``GenericOp`` that builds one op per specialization.

    Args:
        name, module, doc: the public function's ``__name__``, ``__module__`` and docstring.
        build: the framework's op constructor.
        scalar_of: ``tensor -> tapegrad ScalarType or None`` (generic kernels read their types with it).
    """
    ops: dict = {}                 # configuration -> the op already built for it
    who = name

    def make_op(kernel, num_outputs: int = 1, *, launch_dims=None, output_dims=None, name: str | None = None):
        key = config_key(kernel, num_outputs, launch_dims, output_dims, name)
        op = ops.get(key) if key is not None else None
        if op is None:
            if getattr(kernel, "is_generic", None) is not None and kernel.is_generic():
                serial = itertools.count(1)   # a given op name gets a suffix per specialization

                def build_one(spec):
                    return build(spec, num_outputs, launch_dims, output_dims, name and f"{name}_s{next(serial)}")
                op = GenericOp(kernel, num_outputs, build_one, scalar_of or (lambda t: None), who)
            else:
                op = build(kernel, num_outputs, launch_dims, output_dims, name)
            if key is not None:
                ops[key] = op
        return op

    make_op.__name__ = make_op.__qualname__ = name
    make_op.__module__, make_op.__doc__ = module, doc
    return make_op


_PLAIN = (int, float, bool, str, bytes, list, tuple, dict, type(None))
_NUMPY = (np.generic, np.ndarray)
_MISSING = object()    # an output an ``output_dims`` dict leaves out (an error when its shape is needed)


def _per_output(outputs, output_dims, who: str, kname: str) -> tuple:
    """One ``output_dims`` spec per output: a dict's entry (``_MISSING`` where it has none), else
    the same spec for every output. Unknown names and bad types raise at once."""
    names = [p.name for p in outputs]
    if isinstance(output_dims, dict):
        unknown = sorted(set(output_dims) - set(names))
        if unknown:
            raise ValueError(f"{who}: output_dims names {unknown}, {kname} outputs are {names}")
        per_out = tuple(output_dims.get(n, _MISSING) for n in names)
    else:
        per_out = (output_dims,) * len(outputs)
    for spec in per_out:
        if spec is not None and spec is not _MISSING and not callable(spec):
            dims_of(spec, (), "launch_dims/output_dims", who)   # type errors now, not at the first call
    return per_out


def _negative(dims) -> bool:
    # symbolic sizes (torch SymInt) are not compared: a comparison would guard the compiled graph
    return any(type(d) is int and d < 0 for d in dims)


def _concrete(dims) -> bool:
    return all(type(d) is int for d in dims)


@dataclass(frozen=True)
class KernelSignature:
    """A kernel's parameters split for a framework op; build with ``KernelSignature.of``.

    Owns the policies every kernel op shares (``torch_op``, ``paddle_op``, ``jax_kernel``): the
    argument checks and their wording (``<who> '<kernel>' argument '<name>': expected ..., got
    ...``), the launch grid, the output shapes (``output_dims``) and the grid-fits check.

    Attributes:
        kernel: the ``@tg.kernel``.
        who: the wrapper's name for messages ("torch_op", "paddle_op", "jax_kernel"...).
        inputs: the op's input parameters (the kernel's first ``len(params) - num_outputs``).
        outputs: the output parameters (arrays), in-out ones first.
        in_out: the outputs that are also inputs (``in_out_argnames``).
        launch_dims: the ``launch_dims`` spec (None: the first array input's shape).
        output_dims: one spec per output (None: the launch grid; ``_MISSING``: left out of a dict).
    """

    kernel: object
    who: str
    inputs: tuple
    outputs: tuple
    in_out: tuple
    launch_dims: object
    output_dims: tuple

    @classmethod
    def of(cls, kernel, num_outputs: int = 1, *, in_out_argnames=(), launch_dims=None, output_dims=None,
           who: str = "op") -> "KernelSignature":
        """Split ``kernel``'s parameters.

        Args:
            kernel: a ``@tg.kernel``.
            num_outputs: how many trailing parameters are outputs (>= 1), in-out ones included.
            in_out_argnames: names of outputs the op also takes as inputs; they must be the
                first outputs.
            launch_dims: the launch grid: an int, a tuple or a callable of the op's
                arguments. Default: the tapegrad shape of the first array input (component
                dims removed).
            output_dims: output shapes (tapegrad shapes; component dims are added): an int, a
                tuple or a callable (for every output), or ``{output name: any of those, or
                None for the launch grid}`` naming every pure output (Warp's ``jax_kernel``
                rule; a left-out output is an error when the op is called).
            who: the wrapper's name, used in messages.

        Raises:
            ValueError: ``num_outputs`` out of range; ``in_out_argnames`` naming something
                that is not an output or not placed first; ``output_dims`` naming an unknown
                output.
            TypeError: an output that is not an array; ``output_dims``/``launch_dims`` of the
                wrong type.
        """
        types_, names = list(kernel.arg_types), list(kernel.arg_names)
        kname = f"kernel '{kernel.key}'"
        if not isinstance(num_outputs, int) or not 1 <= num_outputs <= len(types_):
            raise ValueError(f"{who}: num_outputs must be 1..{len(types_)} for {kname}, got {num_outputs!r}")
        n_in = len(types_) - num_outputs
        params = [Param(i, n, t) for i, (n, t) in enumerate(zip(names, types_))]
        inputs, outputs = tuple(params[:n_in]), tuple(params[n_in:])
        for p in outputs:
            if not p.is_array:
                raise TypeError(f"{who}: output parameter '{p.name}' of {kname} must be an array, got {p.type!r}")
        if isinstance(in_out_argnames, str):
            in_out_argnames = (in_out_argnames,)
        in_out_argnames = tuple(in_out_argnames or ())
        out_names = [p.name for p in outputs]
        for n in in_out_argnames:
            if n not in out_names:
                where = "an input parameter" if n in names else "no parameter"
                raise ValueError(f"{who}: in_out_argnames names '{n}', which is {where} of {kname}; in-out "
                                 f"arguments count among the {num_outputs} outputs {out_names}")
        k = len(in_out_argnames)
        if set(out_names[:k]) != set(in_out_argnames) or len(set(in_out_argnames)) != k:
            raise ValueError(f"{who}: in-out arguments {list(in_out_argnames)} of {kname} must be the first outputs "
                             f"(the outputs are {out_names}; in-out parameters precede pure outputs)")
        per_out = _per_output(outputs, output_dims, who, kname)
        if launch_dims is not None and not callable(launch_dims):
            dims_of(launch_dims, (), "launch_dims/output_dims", who)
        return cls(kernel, who, inputs, outputs, outputs[:k], launch_dims, per_out)

    # ------------------------------------------------------------------------ parameters
    @property
    def label(self) -> str:
        """The op as every message names it: ``<who> '<kernel key>'``."""
        return f"{self.who} '{self.kernel.key}'"

    @property
    def kernel_name(self) -> str:
        """The kernel's short name as an identifier (for op names)."""
        return re.sub(r"\W", "_", self.kernel.key.rsplit(".", 1)[-1]) or "kernel"

    @property
    def call_params(self) -> tuple:
        """What a call passes, in order: the inputs, then the in-out arrays."""
        return self.inputs + self.in_out

    @property
    def pure_outputs(self) -> tuple:
        """Outputs that are not inputs too."""
        return self.outputs[len(self.in_out):]

    @property
    def array_inputs(self) -> tuple:
        """Indices (into ``inputs``) of the array inputs."""
        return tuple(i for i, p in enumerate(self.inputs) if p.is_array)

    @property
    def differentiable(self) -> tuple:
        """Indices (into ``inputs``) of the inputs that get gradients: the float arrays."""
        return tuple(i for i, p in enumerate(self.inputs) if p.is_differentiable)

    @property
    def float_outputs(self) -> tuple:
        """Indices (into ``outputs``) of the float outputs (the others have no tangent)."""
        return tuple(k for k, p in enumerate(self.outputs) if p.is_differentiable)

    def first_array(self) -> int:
        """Index of the first array input (it gives the device and the default grid).

        Raises:
            TypeError: the kernel has no array input.
        """
        arrays = self.array_inputs
        if not arrays:
            raise TypeError(f"{self.who}: kernel '{self.kernel.key}' has no array input to take the device from")
        return arrays[0]

    # ---------------------------------------------------------------------------- shapes
    def grid(self, args, launch_dims=None) -> tuple:
        """The launch grid for the op's arguments ``args`` (framework tensors, or anything
        with ``.shape``); ``launch_dims`` overrides the signature's spec.

        Raises:
            RuntimeError: no spec and no array input to take the grid from.
            ValueError: not 1..4 non-negative entries.
        """
        spec = self.launch_dims if launch_dims is None else launch_dims
        if spec is not None:
            grid = dims_of(spec, args, "launch_dims", self.label)
        else:
            arrays = [k for k, p in enumerate(self.call_params) if p.is_array]
            if not arrays:
                raise RuntimeError(f"{self.label}: cannot determine the launch dimensions: the kernel has no array "
                                   "input; pass launch_dims")
            p = self.call_params[arrays[0]]
            grid = tuple(args[arrays[0]].shape)[:p.type.ndim]
        if not 1 <= len(grid) <= 4 or _negative(grid):
            raise ValueError(f"{self.label}: launch_dims must have 1..4 non-negative entries, got {grid}")
        return grid

    def output_shapes(self, args, grid=None, output_dims=None) -> list:
        """Framework shapes of the outputs (tapegrad shape + component dims), one per output.

        The one ``output_dims`` policy: in-out outputs keep their argument's shape; a dict
        names every pure output (None there: the launch grid); with no spec an output takes
        the launch grid, or, when the grid has another rank than the output (a kernel looping
        over an outer axis itself), the first array input's shape (Warp's rule); dims given
        with the component dims have them removed.

        Args:
            output_dims: a per-call override of the signature's spec.

        Raises:
            ValueError: an output a dict leaves out; dims of the wrong rank or negative.
        """
        if grid is None:
            grid = self.grid(args)
        per_out = self.output_dims if output_dims is None else \
            _per_output(self.outputs, output_dims, self.label, f"kernel '{self.kernel.key}'")
        n_in = len(self.inputs)
        shapes = [tuple(args[n_in + k].shape) for k in range(len(self.in_out))]
        for spec, p in zip(per_out[len(self.in_out):], self.pure_outputs):
            inner = p.inner_shape
            if spec is _MISSING:
                raise ValueError(f"{self.label}: output_dims has no entry for output '{p.name}' (a dict names every "
                                 f"output: {[q.name for q in self.pure_outputs]}; None there means the launch grid)")
            if spec is None:
                dims = tuple(grid)
                if len(dims) != p.type.ndim:
                    dims = self._first_input_dims(args, p.type.ndim) or dims
            else:
                dims = dims_of(spec, args, f"output_dims of '{p.name}'", self.label)
                if inner and len(dims) == p.framework_ndim and tuple(dims[len(dims) - len(inner):]) == inner:
                    dims = dims[:p.type.ndim]
            if len(dims) != p.type.ndim or _negative(dims):
                raise ValueError(f"{self.label}: output '{p.name}' ({p.type!r}) needs {p.type.ndim} non-negative "
                                 f"output dims, got {tuple(dims)}")
            shapes.append(tuple(dims) + inner)
        return shapes

    def _first_input_dims(self, args, ndim):
        """The first array input's (tapegrad) shape when it has ``ndim`` dims, else None."""
        for k, p in enumerate(self.call_params):
            if p.is_array:
                return tuple(args[k].shape)[:ndim] if p.type.ndim == ndim else None
        return None

    # ---------------------------------------------------------------------------- checks
    def check_count(self, args, label: str) -> None:
        """Raise ``ArgumentCountError`` (a TypeError and a ValueError) unless ``args`` has one
        value per call parameter."""
        params = self.call_params
        if len(args) != len(params):
            raise ArgumentCountError(f"{label}: expected {len(params)} arguments "
                                     f"({', '.join(p.name for p in params)}), got {len(args)}")

    def check_array(self, p: Param, scalar, dtype_name: str, shape, label: str) -> None:
        """Check one tensor for array parameter ``p``: its element type (``scalar``, a
        tapegrad ScalarType or None when tapegrad lacks it) may be viewed as the parameter's
        (``types.can_alias``), and its dims are the parameter's plus the component dims.

        Raises:
            TypeError: no tapegrad equivalent, wrong number of dims.
            BridgeTypeError: (a TypeError) an element type the parameter cannot view.
            RuntimeError: the trailing dims are not the component dims (as ``from_torch``
                and the other conversions raise it).
        """
        label = f"{label} argument '{p.name}'"
        if scalar is None:
            raise TypeError(f"{label}: dtype {dtype_name} has no tapegrad equivalent")
        check_compatible(scalar, p.dtype.scalar, dtype_name, label)
        shape = tuple(shape)
        if len(shape) != p.framework_ndim:
            raise TypeError(f"{label}: expected a {p.framework_ndim}-D tensor for {p.type!r}, got "
                            f"{len(shape)}-D of shape {shape}")
        k = len(p.inner_shape)
        if k and shape[len(shape) - k:] != p.inner_shape:
            raise RuntimeError(f"{label}: dtype {p.dtype!r} needs trailing dimensions {p.inner_shape}, "
                               f"got shape {shape}")

    def check_args(self, args, fw) -> None:
        """Every argument of a call (inputs, then in-out arrays), with one wording for all ops.

        Args:
            args: the call's arguments.
            fw: the framework's ``OpFramework`` (what a tensor is, its dtype, its name).

        Raises:
            ArgumentCountError: a wrong count.
            TypeError: not a tensor, a dtype tapegrad lacks, wrong dims; a scalar the launch
                would refuse (``types.scalar_packer``).
            BridgeTypeError: (a TypeError) a dtype the parameter cannot view.
            OverflowError: an integer value out of its parameter's range.
            RuntimeError: component dims that do not fit.
        """
        self.check_arrays(args, fw)
        self.check_value_tensors(args, fw)
        for p, v in zip(self.call_params, args):
            if isinstance(p.type, types.ScalarType) and (type(v) in _PLAIN or isinstance(v, _NUMPY)):
                # tg.launch's own rule (types.scalar_packer); symbolic values (torch SymInt under
                # compile, JAX tracers) are the framework's to check
                types.scalar_packer(p.type, f"{self.label} argument '{p.name}'")(v)

    def check_value_tensors(self, args, fw) -> None:
        """Refuse a tensor that takes part in differentiation (``fw.in_autodiff``) given for a
        value parameter (a scalar, or an element of a vector/matrix list): a value is passed to
        the launch as a number and gets no gradient, so its derivative would be a silent zero.

        Raises:
            TypeError: naming the argument.
        """
        if fw.in_autodiff is None:
            return
        for p, v in zip(self.call_params, args):
            if p.is_array:
                continue
            vs = v if isinstance(v, (list, tuple)) else (v,)
            if any(fw.is_tensor(e) and fw.in_autodiff(e) for e in vs):
                raise TypeError(f"{self.label} argument '{p.name}': a value parameter ({p.type!r}) takes a number and "
                                f"gets no gradient, but a {fw.tensor_name} that requires grad or is traced by a "
                                f"transform (grad, jvp, vmap) came: its derivative would be a silent zero. Pass a "
                                f"number (detached), or make '{p.name}' an array parameter to differentiate it")

    def check_arrays(self, args, fw) -> None:
        """The count and the array arguments of ``check_args`` (a ``jax_callable``'s function has
        no launch to check its values with)."""
        label = self.label
        self.check_count(args, label)
        for p, v in zip(self.call_params, args):
            if p.is_array:
                if not fw.is_tensor(v):
                    raise TypeError(f"{label} argument '{p.name}': expected a {fw.tensor_name} for {p.type!r}, got "
                                    f"{type(v).__name__}")
                self.check_array(p, fw.scalar_of(v), fw.dtype_name(v), v.shape, label)

    def check_grid_fits(self, args, grid, out_shapes) -> None:
        """Raise ValueError when ``grid`` would make the kernel index an argument (``args``) or
        an output (framework shapes ``out_shapes``) past its end with unguarded ``tid()`` values
        (``lang.facts.check_grid_fits``: the kernel's IR facts, read without lowering a cached kernel)."""
        extents = {p.index: tuple(a.shape)[:p.type.ndim] for p, a in zip(self.call_params, args) if p.is_array}
        # an indexed-array static (jax_kernel): its indexed shape bounds tid() indices as an array's does
        extents.update((p.index, tuple(a.shape)) for p, a in zip(self.call_params, args)
                       if getattr(p.type, "indexed", None) is not None and getattr(a, "data", None) is not None)
        extents.update((p.index, tuple(s)[:p.type.ndim]) for p, s in zip(self.outputs, out_shapes))
        check_grid_fits(self.kernel, grid, extents, self.label)

    def prepare(self, args, fw, launch_dims=None, output_dims=None) -> tuple:
        """The checks of a call, in one place for every op: the arguments, the grid, the output
        shapes and whether the grid fits them.

        Returns:
            ``(grid, output shapes)``.
        """
        self.check_args(args, fw)
        grid = self.grid(args, launch_dims)
        if fw.check_grid is not None:
            fw.check_grid(grid, self.label)
        shapes = self.output_shapes(args, grid, output_dims)
        if _concrete(grid):   # symbolic grids (torch fake tensors) are checked when they run
            self.check_grid_fits(args, grid, shapes)
        return grid, shapes


# ------------------------------------------------------------------ generic kernels in ops

class GenericOp:
    """A framework op over a generic kernel (``typing.Any`` parameters): each call specializes
    the kernel from its inputs' types and runs the op built for that specialization (built
    once per type combination, as ``tg.launch`` compiles once per combination).

    Rules: a generic array input takes the element type of its tensor; a generic scalar input
    the type of its value (int -> int32, bool; a Python float the first generic array's float
    type, else float32); a generic output array the element type of the first generic array
    input (the common case: outputs like inputs).

    Args:
        kernel: the generic ``@tg.kernel``.
        num_outputs: as for the op.
        build: ``build(specialized kernel) -> op`` (the framework's own op builder).
        scalar_of: ``scalar_of(tensor) -> tapegrad ScalarType or None`` (the bridge's dtype map).
        who: the op builder's name, for messages.
    """

    def __init__(self, kernel, num_outputs, build, scalar_of, who):
        self.kernel, self.num_outputs, self.build, self.scalar_of, self.who = kernel, num_outputs, build, scalar_of, who
        self.names, self.params = kernel.parameters()
        if not 1 <= num_outputs <= len(self.params):
            raise ValueError(f"{who}: num_outputs must be 1..{len(self.params)} for kernel '{kernel.key}', "
                             f"got {num_outputs!r}")
        self.n_in = len(self.params) - num_outputs
        self.ops: dict = {}
        self.__name__ = getattr(kernel, "key", "generic_op")

    def _types(self, args):
        from tapegrad.lang.generic import is_generic_type
        if len(args) != self.n_in:
            raise ArgumentCountError(f"{self.who} '{self.kernel.key}': expected {self.n_in} arguments "
                                     f"({', '.join(self.names[:self.n_in])}), got {len(args)}")
        ins = list(zip(self.params[:self.n_in], args))
        arrays = {i: self._scalar(a, i) for i, (p, a) in enumerate(ins) if is_generic_type(p) and p is not None}
        first = next(iter(arrays.values()), None)
        out = []
        for i, (p, a) in enumerate(ins):
            if not is_generic_type(p):
                out.append(p)
            elif p is not None:
                out.append(types.ArrayType(arrays[i], p.ndim))
            elif isinstance(a, bool):
                out.append(types.bool_)
            elif isinstance(a, float):   # a Python float follows the arrays' float type (float64 kernels)
                out.append(first if first is not None and first.is_float else types.float32)
            elif isinstance(a, int):
                out.append(types.int32)
            else:
                out.append(self._scalar(a, i))
        for i, p in enumerate(self.params[self.n_in:], self.n_in):
            if is_generic_type(p):
                if first is None or p is None:
                    raise TypeError(f"{self.who} '{self.kernel.key}': cannot tell the type of generic output "
                                    f"'{self.names[i]}' (no generic array input to take it from); specialize "
                                    "with tg.overload(kernel, [types...])")
                p = types.ArrayType(first, p.ndim)
            out.append(p)
        return tuple(out)

    def _scalar(self, a, i):
        s = self.scalar_of(a)
        if s is None:
            raise TypeError(f"{self.who} '{self.kernel.key}' argument '{self.names[i]}': cannot read an element "
                            f"type from {type(a).__name__}")
        return s

    def op_for(self, *args):
        """The op of the specialization ``args`` select (built on first use)."""
        key = self._types(args)
        op = self.ops.get(key)
        if op is None:
            op = self.ops[key] = self.build(self.kernel.specialize(key))
        return op

    def __call__(self, *args, **kwargs):
        return self.op_for(*args)(*args, **kwargs)
