"""Framework bridges for tapegrad (installed as ``tapegrad.bridges``), one module per framework,
each imported only when used.

- ``_base``: what every bridge shares — ``Bridge`` over a tensor type's row and a
  ``FrameworkAdapter`` (conversions, grad wiring, descriptors), ``DtypeMap`` (both dtype maps
  from the dtype table's ``<framework>_name`` column), ``DeviceMap``, stream handles
  (``wrap_stream_handle``, ``unordered_handle``, ``wait_for_handle``), ``CudaView`` and
  ``release_after``.
- ``_op``: ``KernelSignature``, a kernel's parameters as an op sees them (in/out split, in-out
  arguments, differentiable inputs) and the one policy of its checks (arguments, grid, output
  shapes, the grid-fits check, the wording), ``op_builder`` and ``GenericOp``.
- ``kernel_op``: ``KernelOp``, the one lifecycle of "a kernel as a native op" (checks, output
  allocation, the four launches, the derivative wiring, ``enable_backward=False``) that
  ``torch_op``, ``paddle_op`` and ``jax_kernel`` register into with an ``OpFramework`` row.
- ``torch`` / ``torch_op``: ``from_torch``/``to_torch``, devices, dtypes, streams, the
  ``TensorType`` row of torch tensors; ``torch_op`` (``torch.library`` custom ops).
- ``paddle`` / ``paddle_op``: ``from_paddle``/``to_paddle``, devices, dtypes, streams, the
  ``TensorType`` row of paddle tensors; ``paddle_op`` (``paddle.autograd.PyLayer``s).
- ``jax/``: ``from_jax``/``to_jax``, ``jax_kernel``, ``jax_callable``; ``optax``.

Each framework module registers its tensor types once, in one block at its end
(``tapegrad.tensortypes.register_tensor_type``): launch, the conversions and the tape read
that row. An op module receives its framework's ``Bridge`` from the framework module
(``make_torch_op(bridge)``), so it imports no bridge and there is no import circle.

Users normally reach these through ``tapegrad`` (``tg.from_torch``, ``tg.paddle_op``...), which
resolves them lazily so that ``import tapegrad`` imports no framework.
"""
