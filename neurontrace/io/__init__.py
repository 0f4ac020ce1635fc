"""Our files: the Parquet store, destinations and their locks, content digests, atomic
writes, a run's temporary folder, and loading a path for the analyses."""
