"""The derivations, one engine: spilling the readers' batches, the bucketed sweep (lanes,
nesting, steps, flows), links, and assembling the rows in order."""
