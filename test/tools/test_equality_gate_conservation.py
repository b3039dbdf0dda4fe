"""The equality gate's conservation check on the pools' gauge readings, with and without
HiCache's host tier (islands_tools.equality_gate.evidence.conservation_check), and its junction
evidence under bigram radix keys (EAGLE-family speculative decoding)."""

from islands_tools.equality_gate.evidence import conservation_check


def pools(avail, evictable, used=0):
    return {"available": avail, "evictable": evictable, "used": used}


def reading(full, swa, host=None):
    r = {"running": 0.0, "full": full, "swa": swa}
    if host is not None:
        r["host_used"] = host
    return r


BOOT = reading(pools(32767, 1), pools(16383, 1))
END = reading(pools(10690, 22078), pools(13918, 2466))


def test_settled_readings_conserve_both_pools():
    assert conservation_check("on p1", {"boot": BOOT, "end": END, "flushed": BOOT}) == []


def test_a_token_still_used_or_a_changed_total_is_named():
    locked = reading(pools(32767, 0, 1), pools(16383, 1))
    problems = conservation_check("on p1", {"boot": BOOT, "end": END, "flushed": locked})
    assert problems == ["on p1: full pool after /flush_cache + health probe: avail 32767 + "
                        "evictable 0 + used 1; right after boot: avail 32767 + evictable 1 + used 0"]
    leaked = reading(pools(10690, 22077), pools(13918, 2466))
    assert any("full pool after the workload" in p
               for p in conservation_check("on p1", {"boot": BOOT, "end": leaked,
                                                     "flushed": BOOT}))


def test_the_host_tier_must_return_to_its_boot_usage():
    boot = reading(BOOT["full"], BOOT["swa"], host=1)
    assert conservation_check("on p1", {"boot": boot, "end": END, "flushed": boot}) == []
    kept = reading(BOOT["full"], BOOT["swa"], host=300)
    assert conservation_check("on p1", {"boot": boot, "end": END, "flushed": kept}) == [
        "on p1: host tier after /flush_cache + health probe: 300 tokens used; right after boot: 1"]


# ---- junction evidence under bigram radix keys (EAGLE-family speculative decoding) ----------

def test_bigram_keys_follow_the_speculative_algorithm():
    from islands_tools.equality_gate.evidence import bigram_keys

    assert bigram_keys(["--speculative-algorithm", "EAGLE", "--speculative-eagle-topk", "1"])
    assert bigram_keys(["--speculative-algorithm=frozen_kv_mtp"])
    assert not bigram_keys(["--speculative-algorithm", "NGRAM"])
    assert not bigram_keys(["--page-size", "1"])


def test_a_junction_hit_may_end_one_token_short_only_under_bigram_keys():
    from types import SimpleNamespace as NS

    from islands_tools.equality_gate.evidence import junction_evidence

    base, probe = list(range(700)) + [1, 2], list(range(700)) + [3, 4]
    on = NS(prompts={"j_base": base, "j_probe": probe},
            results={"j_probe": NS(cached_tokens=699)})
    reqs = [NS(name="j_base"), NS(name="j_probe")]
    assert junction_evidence(1, reqs, on, "on", None) == [
        "page 1: j_probe hit 699 < the junction at 700"]
    assert junction_evidence(1, reqs, on, "on", None, bigram=True) == []
    on.results["j_probe"].cached_tokens = 698
    assert junction_evidence(1, reqs, on, "on", None, bigram=True) == [
        "page 1: j_probe hit 698 < the junction at 699"]
