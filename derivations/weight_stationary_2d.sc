# 2D weight-stationary inference layout (book Part 7, appendix): W_in's D split over X and F over Y,Z;
# the activations are gathered over Y,Z and reduced over X. The comms per layer scale as
# 1/sqrt(N) of the 1D layout's for large N (book: wins when N > 18 F / D, 72 chips for F = 4D).
param W_in[D_X, F_YZ], W_out[F_YZ, D_X]
Tmp[B, F_YZ] = In[B, D_X] *_D W_in[D_X, F_YZ]
Out[B, D_X] = Tmp[B, F_YZ] *_F W_out[F_YZ, D_X]
