# Three matmuls, each of its own width: the ordinary search shards every statement by the same roles of
# the mesh axes; `search --exact` also lets each tensor take its own layout, and proves its best.
#   symcost search examples/mlp3.sc --backward --mesh X=2,Y=2 --hw tpu-v5p --exact
rank B=512, D=8192, F=32768, E=4096
param W1[D, F], W2[F, E], W3[E, D]
H[B, F] = In[B, D] *_D W1[D, F]
G[B, E] = H[B, F] *_F W2[F, E]
Out[B, D] = G[B, E] *_E W3[E, D]
