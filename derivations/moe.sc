# Expert parallelism (book Part 5, mixture of experts): experts E split over X. Tokens arrive split over
# X (T tokens per expert), go to their experts with an AllToAll and come back with another; the backward
# pass runs the two AllToAlls the other way.
param W_in[E_X, D, F], W_out[E_X, F, D]
AllToAll_X(Tok[E, T_X, D]) -> Tok[E_X, T, D]
Y[E_X, T, D] = Tok[E_X, T, D] *_D W_in[E_X, D, F] *_F W_out[E_X, F, D]
AllToAll_X(Y[E_X, T, D]) -> Y[E, T_X, D]
