"""Framework bridges for tapegrad, one module per framework, each imported only when used.

- ``bridges.torch``: ``from_torch``/``to_torch``, device/dtype/stream maps, the launch adapter
  for torch tensors; ``bridges.torch_op``: a kernel as a ``torch.library`` custom op.
- ``bridges._base``: the logic every bridge shares (layouts, component dims, grad wiring).

Users normally reach these through ``tapegrad`` (``tg.from_torch``...), which resolves them
lazily so that ``import tapegrad`` imports no framework.
"""
