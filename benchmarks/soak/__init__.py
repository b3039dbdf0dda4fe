"""The soak: the real CPU server under a seeded random mix of traffic and faults for a fixed time,
every output and the server's state checked.

Modules: setup (the server's arguments and environment, the soak's configuration), workload (the
traffic: what each client thread sends), run (the soak itself: server, clients, idle points and
every check), report (the markdown, from the JSON report alone), cli. The command is
``benchmarks/soak.py``; ``cli``'s docstring says what it sends and checks."""
