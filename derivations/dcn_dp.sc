# Multi-slice training (book Part 5, "scaling between pods"): FSDP over the ICI axis X inside a slice,
# pure data parallelism over the DCN axis S between slices. Gradients are reduced over S across DCN.
# symcost solve derivations/dcn_dp.sc --for B --mesh S:dcn,X --hw tpu-v5p
param W_in[D_X, F], W_out[F, D_X]
Tmp[B_SX, F] = In[B_SX, D] *_D W_in[D_X, F]
Out[B_SX, D] = Tmp[B, F] *_F W_out[F, D_X]
