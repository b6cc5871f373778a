# Megatron's sequence-parallel GPT layer (examples/megatron_sp_layer.sc) written in Megatron's own order:
# activations [s, b, h] and the attention scores [b, np, sq, sk] (sequence first, the heads beside the batch),
# so that the attention's batched matmuls and the softmax over the keys need no transposes when the program
# is lowered to JAX. The same steps and the same costs as the [b, s, h] file; on an H100 the whole layer ran
# 8-12 % faster in this order (docs/devices-measured.md).
param Wq[D, K_Y, G, H], Wk[D, K_Y, H], Wv[D, K_Y, H], Wo[K_Y, G, H, D], W1[D, F_Y], W3[F_Y, D]
Xn[T_Y, B, D] = LayerNorm_D(X[T_Y, B, D])
Xn[T, B, D] = Xn[T_Y, B, D]
Q[T, B, K_Y, G, H] = Xn[T, B, D] *_D Wq[D, K_Y, G, H]
Kn[T, B, K_Y, H] = Xn[T, B, D] *_D Wk[D, K_Y, H]
Vn[T, B, K_Y, H] = Xn[T, B, D] *_D Wv[D, K_Y, H]
Ks[S, B, K_Y, H] = View(Kn[T, B, K_Y, H])
Vs[S, B, K_Y, H] = View(Vn[T, B, K_Y, H])
A[B, K_Y, G, T, S] = Q[T, B, K_Y, G, H] *_H Ks[S, B, K_Y, H]
P[B, K_Y, G, T, S] = Softmax_S(A[B, K_Y, G, T, S])
Pd[B, K_Y, G, T, S] = Dropout(P[B, K_Y, G, T, S])
Ctx[T, B, K_Y, G, H] = Pd[B, K_Y, G, T, S] *_S Vs[S, B, K_Y, H]
Y[T_Y, B, D] = Ctx[T, B, K_Y, G, H] *_{K,G,H} Wo[K_Y, G, H, D]
Yd[T_Y, B, D] = Dropout(Y[T_Y, B, D])
R[T_Y, B, D] = Add(X[T_Y, B, D], Yd[T_Y, B, D])
Rn[T_Y, B, D] = LayerNorm_D(R[T_Y, B, D])
Rn[T, B, D] = Rn[T_Y, B, D]
U1[T, B, F_Y] = Rn[T, B, D] *_D W1[D, F_Y]
Ug[T, B, F_Y] = GeLU(U1[T, B, F_Y])
Z[T_Y, B, D] = Ug[T, B, F_Y] *_F W3[F_Y, D]
Zd[T_Y, B, D] = Dropout(Z[T_Y, B, D])
Out[T_Y, B, D] = Add(R[T_Y, B, D], Zd[T_Y, B, D])
