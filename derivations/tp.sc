# Tensor (Megatron) parallelism (book Part 5): the MLP's hidden dimension F split over Y.
# Forward: AllGather_Y of the input, ReduceScatter_Y of the output. Backward: the transposes.
param W_in[D, F_Y], W_out[F_Y, D]
Tmp[B, F_Y] = In[B, D_Y] *_D W_in[D, F_Y]
Out[B, D_Y] = Tmp[B, F] *_F W_out[F_Y, D]
