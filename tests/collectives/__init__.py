"""The collectives: the registry's rules, the bytes each link carries, meshes laid on slices."""
