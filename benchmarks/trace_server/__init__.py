"""The same traffic on a real server, scaled down: a slice of a Mooncake trace served by stock
sglang 0.5.23 and islands on tiny Gemma 4 (``benchmarks/trace_server.py``), against the in-process
replay (``trace_replay``) of the same slice."""
