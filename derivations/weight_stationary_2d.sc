# 2D weight-stationary inference layout (book Part 7, appendix): W_in's D split over X and F over Y,Z;
# each matmul leaves partial sums that are reduced over the other group of axes. Per layer the comms
# scale as 1/sqrt(N) of the 1D layout's for large N (the book: it wins when N > 18 F / D chips).
rank B=64, D=8192, F=32768
param W_in[D_X, F_YZ], W_out[F_YZ, D_X]
Tmp[B, F_YZ] = In[B, D_X] *_D W_in[D_X, F_YZ]
Out[B, D_X] = Tmp[B, F_YZ] *_F W_out[F_YZ, D_X]
