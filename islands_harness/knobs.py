"""Upstream's two off-by-default SWA knobs: the ``upstream_knobs`` arm of every benchmark.

- ``SGLANG_OPT_SWA_SPLIT_LEAF_ON_INSERT``: the insert splits the leaf so the SWA lock covers only
  the last window of the committed key instead of the whole chunk node.
- ``SGLANG_OPT_SWA_RELEASE_LEAF_LOCK_AFTER_WINDOW``: during decode, the request drops its SWA lock
  on the prompt's leaf once the leaf has slid out of the window.

Both are read by ``sglang.srt.environ.envs`` in sglang 0.5.15.post1; neither frees SWA eagerly
nor inserts during decode (what islands add).
"""

UPSTREAM_KNOBS_ENV = {
    "SGLANG_OPT_SWA_SPLIT_LEAF_ON_INSERT": "1",
    "SGLANG_OPT_SWA_RELEASE_LEAF_LOCK_AFTER_WINDOW": "1",
}
