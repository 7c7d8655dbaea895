// Gradient scatter into grad_${operand} in the CPU engine's order (deterministic): ${name}
extern "C" __global__ void __launch_bounds__(${threads}) ${name}(
    const ${T}* __restrict__ G, const ${T}* __restrict__ A, const ${T}* __restrict__ B,
    const int* __restrict__ IDX, ${T}* __restrict__ GRAD,
    i64 M, i64 N, i64 K, i64 a_sm, i64 a_sk, i64 b_sk, i64 b_sn,
    i64 batches, i64 d1, i64 d2, i64 a0, i64 a1, i64 a2, i64 b0, i64 b1, i64 b2,
    i64 ga0, i64 ga1, i64 ga2, i64 gb0, i64 gb1, i64 gb2, i64 operand_batches) {
  const tg::Backward p{M, N, K, a_sm, a_sk, b_sk, b_sn, batches, {d1, d2, a0, a1, a2, b0, b1, b2},
                       ga0, ga1, ga2, gb0, gb1, gb2};
  tg::backward_ordered<${semiring}, ${T}, ${to_a}>(G, A, B, IDX, GRAD, p, operand_batches);
}
