"""Count the tensor operations that block the host, inside a block of scheduler code.

``make_sync_counter()`` returns a ``Counter`` class; ``with counter.active(): ...`` counts, per
kind (:data:`SYNC_KEYS`), the aten ops whose output size or value the host must wait for on a
CUDA tensor (``nonzero``, ``unique``, boolean-mask indexing, ``masked_select``, ``.item()``,
``repeat_interleave`` without ``output_size``, ``tolist``/``cpu``/``numpy``) and all aten ops
(``aten_ops``). On CPU tensors these ops do not block, so the count is a static proxy for what
would block on CUDA; on a CUDA stack (``ISLANDS_TEST_DEVICE=cuda``) torch's own sync detector is
counted too (``cuda_sync``). Used by ``benchmarks/swa_hold.py`` and the tests.
"""

from __future__ import annotations

import contextlib
from typing import Dict


@contextlib.contextmanager
def _cuda_sync_watch(c):
    """On a CUDA stack (``ISLANDS_TEST_DEVICE=cuda``), torch's own detector as well: every call
    that synchronises the host with the device warns under ``set_sync_debug_mode("warn")``;
    added to counter ``c`` as ``cuda_sync`` (a measurement, where the aten op kinds that
    :func:`make_sync_counter` counts are a static proxy). A no-op on a CPU stack."""
    import torch

    from islands_harness.stack import stack_device

    if stack_device() != "cuda":
        yield
        return
    import warnings

    prev = torch.cuda.get_sync_debug_mode()
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            yield
        finally:
            torch.cuda.set_sync_debug_mode(prev)
    c.add("cuda_sync", sum("synchroniz" in str(w.message) for w in seen))


def make_sync_counter():
    """A ``Counter`` class (torch imported only now): ``Counter().active()`` counts, while it is
    entered, every aten op (``aten_ops``) and each host-blocking kind of :data:`SYNC_KEYS` into
    ``Counter.counts``, plus ``cuda_sync`` on a CUDA stack."""
    import torch
    from torch.overrides import TorchFunctionMode
    from torch.utils._python_dispatch import TorchDispatchMode

    aten = torch.ops.aten
    unique_ops = {aten._unique2.default, aten._unique.default, aten.unique_dim.default,
                  aten.unique_consecutive.default}
    scalar_ops = {aten._local_scalar_dense.default}
    nonzero_ops = {aten.nonzero.default}
    masked_ops = {aten.masked_select.default}
    rep_ops = {aten.repeat_interleave.Tensor}
    index_ops = {aten.index.Tensor, aten.index_put_.default, aten.index_put.default,
                 aten._index_put_impl_.default}

    class Counter:
        def __init__(self):
            self.counts: Dict[str, int] = {}

        def add(self, k, n=1):
            self.counts[k] = self.counts.get(k, 0) + n

        @contextlib.contextmanager
        def active(self):
            with _Fn(self), _Disp(self), _cuda_sync_watch(self):
                yield

    class _Disp(TorchDispatchMode):
        def __init__(self, c):
            super().__init__()
            self.c = c

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            c = self.c
            c.add("aten_ops")
            if func in unique_ops:
                c.add("unique")
            elif func in scalar_ops:
                c.add("item")
            elif func in nonzero_ops:
                c.add("nonzero")
            elif func in masked_ops:
                c.add("masked_select")
            elif func in rep_ops and kwargs.get("output_size") is None:
                c.add("repeat_interleave")
            elif func in index_ops and len(args) > 1 and isinstance(args[1], (list, tuple)):
                if any(isinstance(t, torch.Tensor) and t.dtype == torch.bool for t in args[1]):
                    c.add("bool_mask_index")
            return func(*args, **kwargs)

    class _Fn(TorchFunctionMode):
        def __init__(self, c):
            super().__init__()
            self.c = c

        def __torch_function__(self, func, types, args=(), kwargs=None):
            name = getattr(func, "__name__", "")
            if name in ("tolist", "cpu", "numpy"):
                self.c.add(name)
            return func(*args, **(kwargs or {}))

    return Counter


SYNC_KEYS = ("nonzero", "unique", "bool_mask_index", "masked_select", "item", "repeat_interleave",
             "tolist", "cpu", "numpy")
