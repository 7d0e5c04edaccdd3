"""Benchmarks a user runs: decoding latency, training throughput, peak memory, and the stress runs."""
