"""Replaying a production trace (the Mooncake FAST'25 format) on each arm's real tree cache and
admission (issue 60, ``benchmarks/trace_replay.py``): ``traces`` reads a trace and turns its block
hashes into token ids, ``setup`` (arms, pools), ``steptime`` (model seconds per iteration),
``replay`` (one cell, any interpreter), ``run``, ``report``, ``cli``."""
