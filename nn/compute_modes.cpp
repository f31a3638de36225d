#include "nn/compute_modes.hpp"

#include "nn/autocast.hpp"

namespace nn {

Precision resolve(PrecisionSetting setting) {
  switch (setting) {
    case PrecisionSetting::fp32:
      return Precision::fp32;
    case PrecisionSetting::bf16:
      return Precision::bf16;
    case PrecisionSetting::automatic:
      break;
  }
  return gemm_has_native_bf16() ? Precision::bf16 : Precision::fp32;
}

ComputeModes set_compute_modes(PrecisionSetting precision, AttentionKernel attention, Recompute recompute) {
  const ComputeModes modes{resolve(precision), attention, recompute};
  set_matmul_precision(modes.precision);
  set_attention_kernel(modes.attention);
  set_recompute(modes.recompute);
  return modes;
}

}  // namespace nn
