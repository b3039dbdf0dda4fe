"""The patch tooling of both targets, behind ``scripts/patches.py`` and ``scripts/patches_main.py``.

- ``lib``: the pinned release, its wheel, the series parser, the overlay collector, git;
- ``cli``: ``scripts/patches.py`` (check, apply, status, revert, worktree, refresh, export) on
  sglang 0.5.15.post1, and ``--target 0.5.23`` handed to ``main_target``;
- ``main_target``: ``scripts/patches_main.py``, a series of ``patches-main/`` on sglang 0.5.23;
- ``export``: the series as upstream would receive it (``scripts/patches.py export``);
- ``imports``: static checks of each exported commit.
"""
