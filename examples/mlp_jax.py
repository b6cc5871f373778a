"""An MLP in JAX whose hidden activations are pinned by a sharding constraint (tensor parallelism over Y).

    symcost trace examples/mlp_jax.py:mlp --args "x=bf16[64,256],w_in=bf16[256,1024],w_out=bf16[1024,256]" \\
        --specs "x=B_X,D;w_in=D,F_Y;w_out=F_Y,D" --mesh X=4,Y=2
"""
import jax
from jax.sharding import PartitionSpec as P


def mlp(x, w_in, w_out):
    h = jax.nn.silu(x @ w_in)
    h = jax.lax.with_sharding_constraint(h, P("X", "Y"))
    return h @ w_out
