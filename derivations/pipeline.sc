# Pipeline parallelism (book Part 5): layers split over Z, one stage per device along Z. A stage runs its
# layer on a microbatch and sends the activations one hop to the next stage (Send_Z: a collective-permute
# of B*D elements); backward sends the gradients back. The bubble, (Z - 1) / (M + Z - 1) of the step for
# M microbatches, is symcost.training.pipeline_bubble. (Every stage reads In in this per-stage model, so
# the backward pass also reduces dIn over Z.)
param W_in[L_Z, D, F], W_out[L_Z, F, D]
Out[B, L_Z, D] = In[B, D] *_D W_in[L_Z, D, F] *_F W_out[L_Z, F, D]
Send_Z(Out[B, L_Z, D]) -> Out[B, L_Z, D]
