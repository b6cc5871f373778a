"""The engine's tests: notation, layouts, programs, the planner, pricing, rewrites, ties, elementwise steps, moves, caches."""
