"""JAX in: programs traced from JAX functions, checked against XLA's own counts."""
