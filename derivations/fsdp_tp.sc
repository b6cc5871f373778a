# FSDP over X combined with tensor parallelism over Y (book Part 5, "mixed FSDP and tensor parallelism").
# Derived: AllGather_Y(In), AllGather_X of each weight, ReduceScatter_Y(Out) forward.
#   symcost derive derivations/fsdp_tp.sc --backward --mesh X,Y
#   symcost optimize derivations/fsdp_tp.sc --chips N --vary X,Y --mesh X:M_X,Y:M_Y
rank B=1048576, D=8192, F=32768
param W_in[D_X, F_Y], W_out[F_Y, D_X]
Out[B_X, D_Y] = In[B_X, D_Y] *_D W_in[D_X, F_Y] *_F W_out[F_Y, D_X]
