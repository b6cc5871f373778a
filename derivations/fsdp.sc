# Fully-sharded data parallelism, ZeRO-3 (book Part 5): batch and weights split over X.
# Derived: AllGather_X of each weight forward; backward, AllGather_X again and a ReduceScatter_X of each
# gradient. Compute-bound when B/X > C/W_ici (2550 tokens per chip on TPU v5p).
#   symcost solve derivations/fsdp.sc --for B --mesh X --hw tpu-v5p
rank B=1048576, D=8192, F=32768
param W_in[D_X, F], W_out[F, D_X]
Out[B_X, D] = In[B_X, D] *_D W_in[D_X, F] *_F W_out[F, D_X]
