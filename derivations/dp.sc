# Data parallelism (book Part 5): the batch is split over X, every device holds every weight.
# Derived: no communication forward; backward, an AllReduce_X of each weight gradient (off the critical
# path). Compute-bound when B/X > C/W_ici.
#   symcost derive derivations/dp.sc --backward --mesh X
rank B=1048576, D=8192, F=32768
param W_in[D, F], W_out[F, D]
Out[B_X, D] = In[B_X, D] *_D W_in[D, F] *_F W_out[F, D]
