"""Import-only placeholders for CUDA kernel packages that the offline GPU check cannot carry.

Used only by ``scripts/gpu_check.sh --bundle`` (this folder goes first on ``PYTHONPATH``). The
lent GPU machine has no network, and a call carries at most 64 MiB: flashinfer, and
``sglang-kernel==0.4.4`` unless the bundle was built ``--with-kernel``, are not there. Upstream
modules import them at import time when CUDA is present (``memory_pool`` ->
``layers.quantization`` -> ``fp8_kernel`` does ``from sgl_kernel import X``; ``layers.sampler``
imports ``flashinfer.sampling``). The tree-cache, pool and allocator path never calls them (the
unit tests passed on an H200 with sgl_kernel as a placeholder); for the server, whatever does call
one fails loudly.

A package listed in ``ISLANDS_ABSENT_KERNELS`` (comma-separated, default ``sgl_kernel``) that is
*not installed* imports as a placeholder: every attribute and submodule exists, and calling or
using any of them (or instantiating a class derived from one) raises ``KernelNotCarried`` naming
it. So a test that reaches a kernel fails loudly instead of running a stand-in. The one exception
is an attribute named ``logger``: a real logger, since upstream sets its level at startup. A
package that is installed is never replaced.

Submodules in ``_IMPORT_ERROR`` raise ``ImportError`` instead, as they would with the package
absent: their importers catch it and use kernels of their own (``sgl_kernel.elementwise`` runs
its own RMSNorm kernels when ``import flashinfer.norm`` fails; sglang's ``layernorm`` likewise).
"""
import importlib.abc
import importlib.machinery
import logging
import os
import sys
import types


class KernelNotCarried(RuntimeError):
    pass


class _Absent:
    """Stands for ``name``; any call or use raises ``KernelNotCarried``."""

    def __init__(self, name):
        self._name = name

    def _fail(self, *a, **k):
        raise KernelNotCarried(f"{self._name} was called, but its package is not on this machine "
                               "(scripts/gpu_check.sh --bundle carries import placeholders only)")

    __call__ = __getitem__ = __iter__ = __len__ = __bool__ = _fail

    def __getattr__(self, attr):
        return _member(self._name, attr)

    def __mro_entries__(self, bases):
        # `class X(absent_pkg.Base)`: X can be defined; making one raises
        name = self._name

        class _AbsentBase:
            def __init__(self, *a, **k):
                raise KernelNotCarried(f"{name} was subclassed and instantiated, but its package "
                                       "is not on this machine")

        return (_AbsentBase,)

    def __repr__(self):
        return f"<absent {self._name}>"


class _PlaceholderModule(types.ModuleType):
    def __getattr__(self, attr):
        return _member(self.__name__, attr)


def _member(owner: str, attr: str):
    """What an absent package hands out for ``owner.attr``: an ``_Absent``, except ``logger``,
    which is a real (unused) logger because upstream sets such loggers' levels at startup."""
    if attr.startswith("__"):
        raise AttributeError(attr)
    if attr == "logger":
        return logging.getLogger(f"{owner}.{attr}")
    return _Absent(f"{owner}.{attr}")


class _Loader(importlib.abc.Loader):
    def create_module(self, spec):
        m = _PlaceholderModule(spec.name)
        m.__path__ = []  # a package: submodules resolve through the finder below
        m.__version__ = "0+absent"
        return m

    def exec_module(self, module):
        pass


_IMPORT_ERROR = {"flashinfer.norm"}


class _Finder(importlib.abc.MetaPathFinder):
    def __init__(self, roots):
        self.roots = roots

    def find_spec(self, name, path, target=None):
        if name in _IMPORT_ERROR:
            raise ImportError(f"{name} is not on this machine (offline GPU check)", name=name)
        if name.split(".")[0] in self.roots:
            return importlib.machinery.ModuleSpec(name, _Loader(), is_package=True)
        return None


_roots = {r.strip() for r in os.environ.get("ISLANDS_ABSENT_KERNELS", "sgl_kernel").split(",") if r.strip()}
_missing = set()
for _r in _roots:
    if importlib.machinery.PathFinder.find_spec(_r) is None:
        _missing.add(_r)
if _missing:
    sys.meta_path.append(_Finder(_missing))  # last: anything installed is found first
