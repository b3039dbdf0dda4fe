"""Make the registry's torchvision importable beside the CPU build of torch.

The registry's torchvision wheel is linked against CUDA torch; its ``_C`` extension does not load
beside CPU torch, and ``torchvision/_meta_registrations.py`` then fails at import time registering
fake kernels for operators that do not exist ("operator torchvision::nms does not exist").
sglang only needs ``torchvision.io``/``transforms`` to import, so we guard those registrations:
they run only when torchvision's own ops loaded. Idempotent.
"""
import importlib.util
import pathlib
import sys

GUARD = "_register_fake_if_ops_loaded"


def main() -> int:
    spec = importlib.util.find_spec("torchvision")
    if spec is None:
        print("fix_torchvision: torchvision is not installed", file=sys.stderr)
        return 1
    path = pathlib.Path(spec.submodule_search_locations[0]) / "_meta_registrations.py"
    src = path.read_text()
    if GUARD in src:
        return 0
    anchor = "@functools.lru_cache(None)\ndef get_meta_lib():"
    if anchor not in src:
        print(f"fix_torchvision: unexpected layout of {path}; cannot guard it", file=sys.stderr)
        return 1
    src = src.replace(
        anchor,
        f"def {GUARD}(name):\n"
        "    if torchvision.extension._has_ops():\n"
        "        return torch.library.register_fake(name)\n"
        "    return lambda f: f\n\n\n" + anchor,
        1,
    )
    src = src.replace('@torch.library.register_fake("torchvision::', f'@{GUARD}("torchvision::')
    path.write_text(src)
    print(f"fix_torchvision: guarded fake-op registrations in {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
