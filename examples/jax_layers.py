"""Layers in plain JAX that ``symcost trace`` reads: FSDP by hand in a shard_map, a jax.checkpoint-ed
block, a scanned stack of layers, and one that uses a primitive the notation cannot hold.

    symcost trace examples/jax_layers.py:fsdp --args "x=bf16[256,1024],w_in=bf16[1024,4096],w_out=bf16[4096,1024]" \\
        --specs "x=B_X,D;w_in=D_X,F;w_out=F,D_X" --mesh X=8
"""
import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P


def fsdp(x, w_in, w_out):
    """Fully sharded data parallelism written out: gather each weight, then the MLP on the local batch."""
    def local(x, w_in, w_out):
        w_in = jax.lax.all_gather(w_in, "X", axis=0, tiled=True)
        w_out = jax.lax.all_gather(w_out, "X", axis=1, tiled=True)
        return jax.nn.relu(x @ w_in) @ w_out
    return jax.shard_map(local, in_specs=(P("X", None), P("X", None), P(None, "X")),
                         out_specs=P("X", None))(x, w_in, w_out)


def checkpointed(x, w_in, w_out):
    """An MLP block recomputed in the backward pass (jax.checkpoint saving nothing)."""
    block = jax.checkpoint(lambda x, a, b: jax.nn.silu(x @ a) @ b, policy=jax.checkpoint_policies.nothing_saveable)
    return x + block(x, w_in, w_out)


def stack(x, w_in, w_out):
    """Residual MLP layers, one per slice of the stacked weights [L, ...], run by a scan."""
    def layer(h, w):
        a, b = w
        return h + jax.nn.silu(h @ a) @ b, None
    return jax.lax.scan(layer, x, (w_in, w_out))[0]


def prefix_sum(x, w):
    """A cumulative sum: no statement of the notation says it."""
    return jnp.cumsum(x @ w, axis=0)


def repeated(x, w):
    """The same layer three times in a while loop that counts to a constant."""
    def step(c):
        i, h = c
        return i + 1, h + jnp.tanh(h @ w)
    return jax.lax.while_loop(lambda c: c[0] < 3, step, (0, x))[1]


def unbounded(x, w):
    """A loop whose trip count depends on the data: no program says how often it runs."""
    return jax.lax.while_loop(lambda h: jnp.sum(h) < 1e3, lambda h: h @ w, x)


def indexed(x, w, ids):
    """Rows picked by integer ids: an int32 array the notation has no dtype for."""
    return (x @ w)[ids]
