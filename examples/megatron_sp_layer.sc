# Megatron's GPT layer with tensor and sequence parallelism over Y (Korthikanti et al. 2022), as
# `model --train --seq-parallel` plans it (symcost.models.transformer.training_program). Exported to JAX:
#   symcost export-jax examples/megatron_sp_layer.sc --mesh Y=4 --dims B=2,T=8,S=8,D=16,K=4,G=1,H=4,F=32 -o sp.py
param Wq[D, K_Y, G, H], Wk[D, K_Y, H], Wv[D, K_Y, H], Wo[K_Y, G, H, D], W1[D, F_Y], W3[F_Y, D]
Xn[B, T_Y, D] = LayerNorm_D(X[B, T_Y, D])
Xn[B, T, D] = Xn[B, T_Y, D]
Q[B, T, K_Y, G, H] = Xn[B, T, D] *_D Wq[D, K_Y, G, H]
Kn[B, T, K_Y, H] = Xn[B, T, D] *_D Wk[D, K_Y, H]
Vn[B, T, K_Y, H] = Xn[B, T, D] *_D Wv[D, K_Y, H]
Ks[B, S, K_Y, H] = View(Kn[B, T, K_Y, H])
Vs[B, S, K_Y, H] = View(Vn[B, T, K_Y, H])
A[B, T, S, K_Y, G] = Q[B, T, K_Y, G, H] *_H Ks[B, S, K_Y, H]
P[B, T, S, K_Y, G] = Softmax_S(A[B, T, S, K_Y, G])
Pd[B, T, S, K_Y, G] = Dropout(P[B, T, S, K_Y, G])
Ctx[B, T, K_Y, G, H] = Pd[B, T, S, K_Y, G] *_S Vs[B, S, K_Y, H]
Y[B, T_Y, D] = Ctx[B, T, K_Y, G, H] *_{K,G,H} Wo[K_Y, G, H, D]
Yd[B, T_Y, D] = Dropout(Y[B, T_Y, D])
R[B, T_Y, D] = Add(X[B, T_Y, D], Yd[B, T_Y, D])
Rn[B, T_Y, D] = LayerNorm_D(R[B, T_Y, D])
Rn[B, T, D] = Rn[B, T_Y, D]
U1[B, T, F_Y] = Rn[B, T, D] *_D W1[D, F_Y]
Ug[B, T, F_Y] = GeLU(U1[B, T, F_Y])
Z[B, T_Y, D] = Ug[B, T, F_Y] *_F W3[F_Y, D]
Zd[B, T_Y, D] = Dropout(Z[B, T_Y, D])
Out[B, T_Y, D] = Add(R[B, T_Y, D], Zd[B, T_Y, D])
