// How a model computes, given to it when it is built (nn::GPT, whatever its layers):
//
//   --precision fp32|bf16|auto   the matrix multiplies' inputs (nn/autocast.hpp); auto → bf16
//                                where the CPU has bf16 units (oneDNN on AVX-512 BF16), else fp32
//   --attention fused|naive      one kernel per head, or eager PyTorch's separate ops
//   --recompute none|selective|full  which activations backward recomputes (nn/recompute.hpp)
//   --fusion fused|separate      residual adds inside the next layernorm's pass, or not
//
// Programs parse the flags into these enums (comm::cli::add_choice with the name tables below),
// resolve them once (resolve_modes) and hand the result to the model; the model passes each
// op what it needs. Nothing here is process-wide.
#pragma once
#include <array>
#include <string_view>

#include "nn/gemm.hpp"  // Precision, the engines
#include "nn/ops.hpp"   // AttentionKernel
#include "nn/recompute.hpp"

namespace nn {

enum class PrecisionSetting { fp32, bf16, automatic };
inline constexpr std::array<std::string_view, 3> kPrecisionSettingNames = {"fp32", "bf16", "auto"};
inline constexpr std::array<std::string_view, 2> kPrecisionNames = {"fp32", "bf16"};  // by Precision
inline constexpr std::array<std::string_view, 2> kAttentionKernelNames = {"fused", "naive"};
// --fusion (ComputeModes::fusion): each residual add inside the next layernorm's pass (and
// c_fc's bias inside GELU's pass, with biases), or not
inline constexpr std::array<std::string_view, 2> kFusionNames = {"fused", "separate"};

constexpr std::string_view name_of(Precision p) { return kPrecisionNames[static_cast<std::size_t>(p)]; }
constexpr std::string_view name_of(AttentionKernel k) { return kAttentionKernelNames[static_cast<std::size_t>(k)]; }
constexpr std::string_view name_of(Fusion f) { return kFusionNames[static_cast<std::size_t>(f)]; }

// The setting with auto resolved: bf16 where gemm_has_native_bf16(), else fp32.
Precision resolve(PrecisionSetting setting);

struct ComputeModes {
  Precision precision = Precision::fp32;
  AttentionKernel attention = AttentionKernel::fused;
  Recompute recompute = Recompute::none;
  Fusion fusion = Fusion::fused;
};
// The modes with auto resolved: what will run.
ComputeModes resolve_modes(PrecisionSetting precision, AttentionKernel attention = AttentionKernel::fused,
                           Recompute recompute = Recompute::none, Fusion fusion = Fusion::fused);

}  // namespace nn
