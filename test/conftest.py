"""Test-wide environment: set before anything imports sglang or triton.

- ``SGLANG_USE_CPU_ENGINE=1``: makes ``sglang.srt.utils.is_cpu()`` true, so every custom op takes
  its native path on this CPU-only machine.
- ``TRITON_INTERPRET=1``: the paged allocator (page size > 1) launches Triton kernels even for CPU
  tensors; the interpreter runs them. It must be set before triton is first imported.
"""
import os

os.environ.setdefault("SGLANG_USE_CPU_ENGINE", "1")
os.environ.setdefault("TRITON_INTERPRET", "1")
os.environ.setdefault("OMP_NUM_THREADS", "2")
