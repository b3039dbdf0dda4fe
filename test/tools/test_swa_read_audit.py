"""The SWA read audit of the speculative-decoding server test (test/shims/swa_read_audit_main):
it counts, per kind of read (decode, verify), the sliding-window positions a read admits and
those whose SWA slot is freed (mapped to 0), so ``test_the_drafter_and_the_target_read_only_live_swa_kv`` can
fail. Imported under another name, the module installs nothing."""

from __future__ import annotations

import importlib.util
import pathlib
import sys
from types import SimpleNamespace as NS

import torch

SHIM = (pathlib.Path(__file__).resolve().parents[1] / "shims" / "swa_read_audit_main"
        / "sitecustomize.py")


def _load():
    spec = importlib.util.spec_from_file_location("swa_read_audit_under_test", SHIM)
    mod = importlib.util.module_from_spec(spec)
    before = list(sys.meta_path)
    spec.loader.exec_module(mod)
    assert sys.meta_path == before, "importing the audit must not install it"
    return mod


def test_the_audit_counts_the_window_and_its_freed_slots():
    audit = _load()
    mapping = torch.arange(100)  # full slot i -> SWA slot i: all live
    mapping[[13, 14]] = 0  # two freed slots
    backend = NS(token_to_kv_pool=NS(full_to_swa_index_mapping=mapping))
    req_to_token = torch.arange(40).view(2, 20) + 1  # row 0: slots 1..20, row 1: 21..40
    # window_left 3: a request of 16 tokens reads positions [12, 16): slots 13..16 of row 0
    audit._audit(backend, req_to_token, torch.tensor([0]), torch.tensor([16]), 3, "decode")
    st = audit.STATS["decode"]
    assert (st["reads"], st["dead"]) == (4, 2)
    assert st["first"] == "positions [12, 16) of row 0"
    # row 1 lives on slots 21..40: nothing freed there
    audit._audit(backend, req_to_token, torch.tensor([1]), torch.tensor([20]), 3, "decode")
    assert (st["reads"], st["dead"]) == (8, 2)
    audit._audit(backend, req_to_token, torch.tensor([0]), torch.tensor([12]), 3, "verify")
    assert (audit.STATS["verify"]["reads"], audit.STATS["verify"]["dead"]) == (4, 0)


def test_a_pool_without_an_swa_mapping_is_not_audited():
    audit = _load()
    backend = NS(token_to_kv_pool=NS())
    audit._audit(backend, torch.zeros(1, 4, dtype=torch.int64), torch.tensor([0]),
                 torch.tensor([4]), 1, "decode")
    assert audit.STATS == {}
