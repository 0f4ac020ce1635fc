"""Processes of ours: the executors (worker processes, Ray), splitting a file for
parallel decoding, and the settings our own processes apply before importing Polars/NumPy."""
