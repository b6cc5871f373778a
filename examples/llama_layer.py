"""One LLaMA 3 layer in plain JAX: RMSNorm, grouped-query attention (K key/value heads, G query heads
each, head width H), the output projection and a residual; RMSNorm, the SwiGLU MLP and a residual.
Rotary embeddings and the causal mask are left out: they are elementwise work that changes no matmul.

    symcost trace examples/llama_layer.py:layer --mesh X=4,Y=2 --names K=8,G=4,H=128 \\
        --args "x=bf16[8,2048,4096],wq=bf16[4096,4096],wk=bf16[4096,1024],wv=bf16[4096,1024],\\
wo=bf16[4096,4096],w1=bf16[4096,14336],w2=bf16[4096,14336],w3=bf16[14336,4096]" \\
        --specs "x=B_X,T,D;wq=D,N_Y;wk=D,M_Y;wv=D,M_Y;wo=N_Y,D;w1=D,F_Y;w2=D,F_Y;w3=F_Y,D"
"""
import jax
import jax.numpy as jnp

HEAD = 128      # H, the width of a head
GROUP = 4       # G, query heads for each key/value head (LLaMA 3 8B: 32 query heads, 8 key/value heads)


def rms_norm(x):
    x32 = x.astype(jnp.float32)
    scale = jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + 1e-5)
    return (x32 * scale).astype(x.dtype)


def layer(x, wq, wk, wv, wo, w1, w2, w3):
    b, t, _ = x.shape
    kv = wk.shape[1] // HEAD
    h = rms_norm(x)
    q = (h @ wq).reshape(b, t, kv, GROUP, HEAD)
    k = (h @ wk).reshape(b, t, kv, HEAD)
    v = (h @ wv).reshape(b, t, kv, HEAD)
    scores = jnp.einsum("btkgh,bskh->btskg", q, k) / jnp.sqrt(HEAD).astype(x.dtype)
    probs = jax.nn.softmax(scores, axis=2)
    ctx = jnp.einsum("btskg,bskh->btkgh", probs, v)
    y = x + ctx.reshape(b, t, kv * GROUP * HEAD) @ wo
    g = rms_norm(y)
    u = jax.nn.silu(g @ w1) * (g @ w2)
    return y + u @ w3
