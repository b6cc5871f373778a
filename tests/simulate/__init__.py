"""The simulator: plans run on NumPy blocks, forward and backward, and checked against XLA's partitioner."""
