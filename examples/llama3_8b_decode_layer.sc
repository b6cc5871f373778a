# One LLaMA 3 8B layer as a decode step runs it: one new token per sequence against a KV cache of S
# tokens, with the work between the matmuls (norms, rotary, the attention's softmax, the gated MLP's
# activation and product, the residual adds). docs/kernels.md prices it kernel by kernel:
#   symcost derive examples/llama3_8b_decode_layer.sc --hw h100 --efficiency \
#       --dims B=1,T=1,S=1024,D=4096,K=8,G=4,H=128,F=14336
param Wq[D, K, G, H], Wk[D, K, H], Wv[D, K, H], Wo[K, G, H, D], W1[D, F], W2[D, F], W3[F, D]
Xn[B, T, D] = RMSNorm_D(X[B, T, D])
Q[B, T, K, G, H] = Xn[B, T, D] *_D Wq[D, K, G, H]
Kn[B, T, K, H] = Xn[B, T, D] *_D Wk[D, K, H]
Vn[B, T, K, H] = Xn[B, T, D] *_D Wv[D, K, H]
Qr[B, T, K, G, H] = Rotary(Q[B, T, K, G, H])
Kr[B, T, K, H] = Rotary(Kn[B, T, K, H])
A[B, T, S, K, G] = Qr[B, T, K, G, H] *_H Kc[B, S, K, H]
P[B, T, S, K, G] = Softmax_S(A[B, T, S, K, G])
Ctx[B, T, K, G, H] = P[B, T, S, K, G] *_S Vc[B, S, K, H]
Y[B, T, D] = Ctx[B, T, K, G, H] *_{K,G,H} Wo[K, G, H, D]
R[B, T, D] = Add(X[B, T, D], Y[B, T, D])
Rn[B, T, D] = RMSNorm_D(R[B, T, D])
U1[B, T, F] = Rn[B, T, D] *_D W1[D, F]
U2[B, T, F] = Rn[B, T, D] *_D W2[D, F]
Ua[B, T, F] = SiLU(U1[B, T, F])
Ug[B, T, F] = Mul(Ua[B, T, F], U2[B, T, F])
Z[B, T, D] = Ug[B, T, F] *_F W3[F, D]
Out[B, T, D] = Add(R[B, T, D], Z[B, T, D])
