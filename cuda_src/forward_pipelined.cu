// Forward product, square family, slices copied by cp.async into ${stages} stages:
// ${name}
extern "C" __global__ void __launch_bounds__(${threads}, ${min_blocks}) ${name}(
    const ${T}* __restrict__ A, const ${T}* __restrict__ B, ${T}* __restrict__ C, int* __restrict__ IDX,
    i64 M, i64 N, i64 K, i64 a_sm, i64 a_sk, i64 b_sk, i64 b_sn, i64 c_sm, i64 c_sn,
    i64 batches, i64 d1, i64 d2, i64 a0, i64 a1, i64 a2, i64 b0, i64 b1, i64 b2) {
  const tg::Batch bt{d1, d2, a0, a1, a2, b0, b1, b2};
  tg::PipelinedKernel<${semiring}, ${T}, ${argmax}, ${a_row}, ${b_row}, ${bm}, ${bn}, ${bk}, ${tm}, ${tn}, ${unroll},
                      ${stages}, ${smem_bytes}, ${each_k}, ${shared_record}>::run(A, B, C, IDX, M, N, K, a_sm, a_sk,
                                                                                  b_sk, b_sn, c_sm, c_sn, batches, bt);
}
