// What the attention kernels of attention.cu and attention_mma.cu share: which (query, key)
// pairs a tile holds. Rows i < L are queries, columns j < S keys; causal attention lets query
// i see keys j <= i (torch's is_causal with L = S).
#pragma once

#include <cstdint>

namespace pipewright::cuda::attention_tiles {

/// Whether query row i may see key j.
__device__ inline bool visible(int64_t i, int64_t j, int64_t l, int64_t s, bool causal) {
  return i < l && j < s && (!causal || j <= i);
}

/// The keys that query rows up to r1 (exclusive) read: [0, keys_end); rows past L read none.
__device__ inline int64_t keys_end(int64_t r1, int64_t l, int64_t s, bool causal) {
  const int64_t last = r1 < l ? r1 : l;
  return causal ? (last < s ? last : s) : s;
}

}  // namespace pipewright::cuda::attention_tiles
