// Forward product, stream family: the pipelined square kernel (${stages} cp.async stages) whose tiles' slices
// are shared out evenly over the grid, partials merged in WORK (streamed.cuh: stream-K):
// ${name}
extern "C" __global__ void __launch_bounds__(${threads}, ${min_blocks}) ${name}(
    const ${T}* __restrict__ A, const ${T}* __restrict__ B, ${T}* __restrict__ C, int* __restrict__ IDX,
    unsigned char* __restrict__ WORK, i64 M, i64 N, i64 K, i64 a_sm, i64 a_sk, i64 b_sk, i64 b_sn, i64 c_sm,
    i64 c_sn, i64 batches, i64 d1, i64 d2, i64 a0, i64 a1, i64 a2, i64 b0, i64 b1, i64 b2, i64 values_offset,
    i64 index_offset) {
  const tg::Batch bt{d1, d2, a0, a1, a2, b0, b1, b2};
  tg::StreamedKernel<${semiring}, ${T}, ${argmax}, ${a_row}, ${b_row}, ${bm}, ${bn}, ${bk}, ${tm}, ${tn}, ${unroll},
                     ${stages}, ${smem_bytes}>::run(A, B, C, IDX, WORK, M, N, K, a_sm, a_sk, b_sk, b_sn,
                                                              c_sm, c_sn, batches, bt, values_offset, index_offset);
}
