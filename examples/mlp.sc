# The MLP layer with nothing sharded: what `symcost search` fills in (book Part 5). Every mesh axis is
# given a role: the dimension it splits in both weights (D or F, or none) and in the activations (B or D,
# or none); DP, FSDP, TP and their mixtures are all in that space.
#   symcost search examples/mlp.sc --backward --mesh X=16,Y=16,Z=16 --hw tpu-v5p \
#       --dims B=1048576,D=8192,F=32768 --vs B
rank B=1048576, D=8192, F=32768
param W_in[D, F], W_out[F, D]
Out[B, D] = In[B, D] *_D W_in[D, F] *_F W_out[F, D]
