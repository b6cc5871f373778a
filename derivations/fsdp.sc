# Fully-sharded data parallelism, ZeRO-3 (book Part 5): batch and weights split over X.
# Forward: AllGather_X of each weight. Backward: AllGather_X again, ReduceScatter_X of each gradient.
# symcost solve derivations/fsdp.sc --for B --mesh X --hw tpu-v5p     (B/X > C/W_ici: 2550 per device)
param W_in[D_X, F], W_out[F, D_X]
Tmp[B_X, F] = In[B_X, D] *_D W_in[D_X, F]
Out[B_X, D] = Tmp[B, F] *_F W_out[F, D_X]
