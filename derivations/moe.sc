# Expert parallelism (book Part 5, mixture of experts): experts E split over X. Tokens arrive split by
# batch (T tokens per expert, split over X), go to their experts with an AllToAll, and come back with one.
param W_in[E_X, D, F], W_out[E_X, F, D]
AllToAll_X(Tok[E, T_X, D]) -> Tok[E_X, T, D]
H[E_X, T, F] = Tok[E_X, T, D] *_D W_in[E_X, D, F]
Y[E_X, T, D] = H[E, T, F] *_F W_out[E_X, F, D]
AllToAll_X(Y[E_X, T, D]) -> Y[E, T_X, D]
