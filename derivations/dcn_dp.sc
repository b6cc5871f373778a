# Multi-slice training (book Part 5, "scaling between pods"): FSDP over the ICI axis X inside a slice,
# pure data parallelism over the DCN axis S between slices; gradients are reduced over S across DCN.
# Compute-bound when the batch per slice B/S > C/W_dcn: 73,440 tokens with the v5p preset's C = 4.59e14
# (the book writes 71,360, with the C = 4.46e14 it uses in Part 5).
#   symcost solve derivations/dcn_dp.sc --for B --mesh S:dcn,X --backward --hw tpu-v5p
rank B=1048576, D=8192, F=32768
param W_in[D_X, F], W_out[F, D_X]
Out[B_SX, D] = In[B_SX, D] *_D W_in[D_X, F] *_F W_out[F, D_X]
