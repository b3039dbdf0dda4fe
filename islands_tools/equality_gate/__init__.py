"""The two-boot equality gate: SWA islands must be invisible in the outputs (both targets).

``scripts/equality_gate.py`` (and ``scripts/equality_gate.sh``) is the command; ``cli`` holds its
parser, ``main`` and the comparison policy in its docstring. One module per job: ``workload``,
``setup``, ``boot``, ``oracle``, ``compare``, ``evidence``, ``run``, ``report``.
"""
