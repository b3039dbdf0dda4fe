"""The decode-reuse benchmark: how much of a running (or just finished) request's output the next
request finds in the radix cache, on the real server (CPU, a tiny hybrid-SWA model).

Modules: setup (the shape, the arms and their environments), run (one arm's boot and its three
phases), report (outputs compared across arms and with transformers, the markdown), cli. The
command is ``benchmarks/decode_reuse.py``; ``cli``'s docstring says what it measures."""
