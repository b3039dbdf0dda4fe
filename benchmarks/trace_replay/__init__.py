"""Replaying a production trace (the Mooncake FAST'25 format) on each arm's real tree cache and
admission (issue 60): ``traces`` reads a trace and turns its block hashes into token ids."""
