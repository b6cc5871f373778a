"""JAX functions in: :func:`from_jax` reads a function traced with abstract arguments into a program (JAX
is imported only when a function is traced)."""
from .trace import Traced, from_jax

__all__ = ["Traced", "from_jax"]
