# Sequence / context parallelism: queries split by sequence over X; the keys are gathered over X so every
# device sees the whole context (the AllGather a ring attention overlaps with compute).
rank B=8, S=32768, T=32768, D=8192, N=64, H=128
param Wq[D, N, H], Wk[D, N, H]
Q[B, S_X, N, H] = In[B, S_X, D] *_D Wq[D, N, H]
K[B, T_X, N, H] = Ctx[B, T_X, D] *_D Wk[D, N, H]
Scores[B, S_X, T, N] = Q[B, S, N, H] *_H K[B, T, N, H]
