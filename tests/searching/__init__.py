"""Searches: the space, the pool, the equality with derived plans, the serving search."""
