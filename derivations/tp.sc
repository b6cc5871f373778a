# Tensor (Megatron) parallelism (book Part 5): the MLP's hidden dimension F split over Y.
# Derived: AllGather_Y of the input and ReduceScatter_Y of the output forward; the transposes backward.
# Compute-bound when Y < M_Y F / (C/W_ici).
#   symcost solve derivations/tp.sc --for Y --mesh Y:M_Y --backward
rank B=1048576, D=8192, F=32768
param W_in[D, F_Y], W_out[F_Y, D]
Out[B, D_Y] = In[B, D_Y] *_D W_in[D, F_Y] *_F W_out[F_Y, D]
