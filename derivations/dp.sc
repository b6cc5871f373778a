# Data parallelism (book Part 5): the batch is split over X, every device holds every weight.
# Forward: no communication. Backward: AllReduce_X of each weight gradient (off the critical path).
# symcost derive derivations/dp.sc --backward --mesh X
param W_in[D, F], W_out[F, D]
Tmp[B_X, F] = In[B_X, D] *_D W_in[D, F]
Out[B_X, D] = Tmp[B, F] *_F W_out[F, D]
