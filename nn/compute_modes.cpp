#include "nn/compute_modes.hpp"


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

ComputeModes resolve_modes(PrecisionSetting precision, AttentionKernel attention, Recompute recompute, Fusion fusion) {
  return {resolve(precision), attention, recompute, fusion};
}

}  // namespace nn
