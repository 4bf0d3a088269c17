"""A kernel's signature as a framework op sees it: the framework-neutral half of every
"kernel -> native op" wrapper (``torch_op``, ``paddle_op``, the JAX wrappers).

``KernelSignature.of(kernel, num_outputs, ...)`` splits a kernel's parameters into the op's
inputs and outputs, names the differentiable inputs, resolves the launch grid and the output
shapes, checks the op's arguments and launches the kernel (forward or adjoint) over
descriptors the framework module builds. The framework module keeps only what is its own:
registering the op, allocating tensors, streams.

Parameter layout (Warp's rule): the last ``num_outputs`` kernel parameters are outputs; the
ones named in ``in_out_argnames`` are outputs the op also takes as inputs (JAX: the kernel
updates them in place), and must come first among the outputs.

    sig = KernelSignature.of(kernel, 2, in_out_argnames=("acc",), output_dims={"out": 8}, who="jax_kernel")
    sig.inputs, sig.outputs, sig.in_out, sig.pure_outputs     # tuples of Param
    grid = sig.grid(args); shapes = sig.output_shapes(args, grid)
"""
from __future__ import annotations

import itertools
import re
from dataclasses import dataclass

from tapegrad import types
from tapegrad.lang.facts import check_grid_fits
from tapegrad.launch import launch

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
        return tuple(d)
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


@dataclass(frozen=True)
class KernelSignature:
    """A kernel's parameters split for a framework op; build with ``KernelSignature.of``.

    Attributes:
        kernel: the ``@tg.kernel``.
        who: the wrapper's name for messages ("torch_op", "paddle_op", "jax_kernel"...).
        inputs: the op's input parameters (the kernel's first ``len(params) - num_outputs``).
        outputs: the output parameters (arrays), in-out ones first.
        in_out: the outputs that are also inputs (``in_out_argnames``).
        launch_dims: the ``launch_dims`` spec (None: the first array input's shape).
        output_dims: one spec per output (None: the launch grid).
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
                tuple or a callable (for every output), or ``{output name: any of those}``;
                outputs the dict leaves out follow the launch grid.
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
        if isinstance(output_dims, dict):
            unknown = sorted(set(output_dims) - set(out_names))
            if unknown:
                raise ValueError(f"{who}: output_dims names {unknown}, {kname} outputs are {out_names}")
            per_out = tuple(output_dims.get(n) for n in out_names)
        else:
            per_out = (output_dims,) * len(outputs)
        for spec in (launch_dims,) + per_out:
            if spec is not None and not callable(spec):
                dims_of(spec, (), "launch_dims/output_dims", who)   # type errors now, not at the first call
        return cls(kernel, who, inputs, outputs, outputs[:k], launch_dims, per_out)

    # ------------------------------------------------------------------------ parameters
    @property
    def kernel_name(self) -> str:
        """The kernel's short name as an identifier (for op names)."""
        return re.sub(r"\W", "_", self.kernel.key.rsplit(".", 1)[-1]) or "kernel"

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
    def grid(self, args) -> tuple:
        """The launch grid for the op's arguments ``args`` (framework tensors, or anything
        with ``.shape``)."""
        if self.launch_dims is not None:
            return dims_of(self.launch_dims, args, "launch_dims", self.who)
        i = self.first_array()
        k = len(self.inputs[i].inner_shape)
        shape = tuple(args[i].shape)
        return shape[:len(shape) - k] if k else shape

    def output_shapes(self, args, grid=None) -> list:
        """Framework shapes of the outputs (tapegrad shape + component dims), one per output."""
        if grid is None:
            grid = self.grid(args)
        return [(dims_of(spec, args, "output_dims", self.who) if spec is not None else grid) + p.inner_shape
                for spec, p in zip(self.output_dims, self.outputs)]

    # ---------------------------------------------------------------------------- checks
    def check_count(self, args, label: str) -> None:
        """Raise TypeError unless ``args`` has one value per input."""
        if len(args) != len(self.inputs):
            raise TypeError(f"{label}: expected {len(self.inputs)} arguments "
                            f"({', '.join(p.name for p in self.inputs)}), got {len(args)}")

    def check_array(self, p: Param, scalar, dtype_name: str, shape, label: str) -> None:
        """Check one tensor for array parameter ``p``: its element type (``scalar``, a
        tapegrad ScalarType or None when tapegrad lacks it) may be viewed as the parameter's
        (``types.can_alias``), and its dims are the parameter's plus the component dims.

        Raises:
            TypeError: no tapegrad equivalent, incompatible dtype, or wrong number of dims.
            RuntimeError: the trailing dims are not the component dims (as ``from_torch``
                and the other conversions raise it).
        """
        label = f"{label} argument '{p.name}'"
        if scalar is None:
            raise TypeError(f"{label}: dtype {dtype_name} has no tapegrad equivalent")
        want = p.dtype.scalar
        if not types.can_alias(want, scalar):
            raise TypeError(f"{label}: expected elements of {want!r} for {p.type!r}, got {dtype_name} "
                            "(zero-copy views need the same element type, or an integer/bool type of the same "
                            "width; cast the tensor first)")
        shape = tuple(shape)
        if len(shape) != p.framework_ndim:
            raise TypeError(f"{label}: expected a {p.framework_ndim}-D tensor for {p.type!r}, got "
                            f"{len(shape)}-D of shape {shape}")
        k = len(p.inner_shape)
        if k and shape[len(shape) - k:] != p.inner_shape:
            raise RuntimeError(f"{label}: dtype {p.dtype!r} needs trailing dimensions {p.inner_shape}, "
                               f"got shape {shape}")

    def check_tensors(self, args, label: str, tensor_types, framework: str, dtypes) -> None:
        """``check_count`` and, for every array input, the tensor type, dtype and dims.

        Args:
            args: the op's arguments.
            label: the op's name for messages.
            tensor_types: the framework's tensor class(es).
            framework: its name ("torch", "paddle"...), for messages.
            dtypes: its ``DtypeMap``.

        Raises:
            TypeError: a wrong count, not a tensor, a dtype tapegrad lacks, wrong dims.
            BridgeTypeError: (a TypeError) a dtype the parameter cannot view, as the conversions raise it.
            RuntimeError: component dims that do not fit.
        """
        self.check_count(args, label)
        for i in self.array_inputs:
            t, p = args[i], self.inputs[i]
            where = f"{label} argument '{p.name}'"
            if not isinstance(t, tensor_types):
                raise TypeError(f"{where}: expected a {framework} tensor, got {type(t).__name__}")
            src = dtypes.lookup(t.dtype)
            if src is not None:
                check_compatible(src, p.dtype.scalar, str(t.dtype), where)
            self.check_array(p, src, str(t.dtype), t.shape, label)

    def check_grid_fits(self, args, grid, out_shapes) -> None:
        """Raise ValueError when ``grid`` would make the kernel index an input (``args``) or an
        output (framework shapes ``out_shapes``) past its end with unguarded ``tid()`` values
        (``lang.facts.check_grid_fits``: the kernel's IR facts, read without lowering a cached kernel)."""
        extents = {p.index: tuple(a.shape)[:p.type.ndim] for p, a in zip(self.inputs, args) if p.is_array}
        extents.update((p.index, tuple(s)[:p.type.ndim]) for p, s in zip(self.outputs, out_shapes))
        check_grid_fits(self.kernel, grid, extents, self.who)

    # ---------------------------------------------------------------------------- launch
    def launch(self, args, outs, desc, device, stream=None, adj_ins=None, adj_outs=None, tan_ins=None,
               tan_outs=None, tan_adj_ins=None, tan_adj_outs=None) -> None:
        """Launch the kernel (or, with ``adj_outs``, its adjoint; with ``tan_ins``, its tangent;
        with both, the tangent of its adjoint) over the op's tensors.

        Args:
            args: the op's inputs (tensors for array parameters, values otherwise).
            outs: one tensor per output.
            desc: ``f(tensor, param, device) -> ArrayCtype`` (the framework's descriptor).
            device, stream: where to run (``stream``: a tapegrad Stream or None).
            adj_ins: adjoint mode: one gradient tensor (or None) per input.
            adj_outs: adjoint mode: one incoming gradient tensor per output.
            tan_ins: forward mode: one tangent tensor (or None: zero) per input.
            tan_outs: forward mode: one tensor (or None) per output that receives its tangent
                (zero-initialised: atomics accumulate); with ``adj_outs``: the outputs' tangents.
            tan_adj_ins: tangent of the adjoint: one tensor (or None) per input accumulating the
                tangent of its gradient.
            tan_adj_outs: tangent of the adjoint: the tangents of the incoming gradients (None: zero).
        """
        ins = [desc(a, p, device) if p.is_array else (list(a) if isinstance(a, (list, tuple)) else a)
               for a, p in zip(args, self.inputs)]
        out_d = [desc(o, p, device) for o, p in zip(outs, self.outputs)]

        def descs(ts, params):
            return None if ts is None else [desc(t, p, device) if t is not None else None
                                            for t, p in zip(ts, params)]
        kw = {}
        if adj_outs is not None:
            kw = dict(adjoint=True, adj_inputs=descs(adj_ins, self.inputs), adj_outputs=descs(adj_outs, self.outputs))
        if tan_ins is not None:
            kw.update(tangent=True, tan_inputs=descs(tan_ins, self.inputs), tan_outputs=descs(tan_outs, self.outputs))
            if adj_outs is not None:
                kw.update(tan_adj_inputs=descs(tan_adj_ins, self.inputs),
                          tan_adj_outputs=descs(tan_adj_outs, self.outputs))
        launch(self.kernel, self.grid(args), inputs=ins, outputs=out_d, device=device, stream=stream,
               record_tape=False, **kw)


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
            raise TypeError(f"{self.who}('{self.kernel.key}'): expected {self.n_in} arguments "
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
                    raise TypeError(f"{self.who}('{self.kernel.key}'): cannot tell the type of generic output "
                                    f"'{self.names[i]}' (no generic array input to take it from); specialize "
                                    "with tg.overload(kernel, [types...])")
                p = types.ArrayType(first, p.ndim)
            out.append(p)
        return tuple(out)

    def _scalar(self, a, i):
        s = self.scalar_of(a)
        if s is None:
            raise TypeError(f"{self.who}('{self.kernel.key}') argument '{self.names[i]}': cannot read an element "
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
