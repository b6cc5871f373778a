# FSDP over X combined with tensor parallelism over Y (book Part 5, "mixed FSDP and model parallelism").
# Forward: AllGather_Y(In), AllGather_X of each weight, ReduceScatter_Y(Out).
# symcost optimize derivations/fsdp_tp.sc --chips N --vary X,Y     (X_opt = sqrt(B N M_X / (F M_Y)))
param W_in[D_X, F_Y], W_out[F_Y, D_X]
Tmp[B_X, F_Y] = In[B_X, D_Y] *_D W_in[D_X, F_Y]
Out[B_X, D_Y] = Tmp[B, F] *_F W_out[F_Y, D_X]
