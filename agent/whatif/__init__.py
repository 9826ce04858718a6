"""What-if: replay the workload a node served through a simulator of the engine's scheduler and KV
cache, calibrated on the steps it observed, under today's flags and under candidates
([docs/whatif.md]).

torch-free: it runs wherever `diagnose --replay` does.
"""
