"""Models: configurations, the layer's plan, training runs, serving, parallelism across layers."""
