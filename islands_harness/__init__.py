"""Development harness for SWA islands: builds the tiny hybrid model, boots the real SGLang
server on CPU, and assembles the real scheduler-side memory stack for unit tests.

Nothing here is shipped upstream; it drives the real SGLang classes from tests and benchmarks."""
