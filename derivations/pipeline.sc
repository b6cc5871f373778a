# Pipeline parallelism (book Part 5): layers split over Z, one stage per device along Z. A stage runs
# its layer on a microbatch and sends the activations one hop to the next stage (a collective-permute
# of B*D elements). The bubble fraction (Z - 1) / (M + Z - 1) for M microbatches is in
# symcost.training.pipeline_bubble. Every stage holds one layer's weights (the L dimension over Z).
param W_in[L_Z, D, F], W_out[L_Z, F, D]
Tmp[B, L_Z, F] = In[B, D] *_D W_in[L_Z, D, F]
Out[B, L_Z, D] = Tmp[B, L, F] *_F W_out[L_Z, F, D]
Send_Z(Out[B, L_Z, D]) -> Out[B, L_Z, D]
