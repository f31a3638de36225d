#include "nn/mlp.hpp"

#include "nn/ops.hpp"

namespace nn {

Tensor mlp(const Tensor& h, const MLPWeights& w, WeightCut& cut, Precision precision, bool fused_bias_gelu,
           bool training, MLPNames names) {
  Tensor a = fused_bias_gelu && w.c_fc_bias.defined()
                 ? bias_gelu(cut.column_linear(h, w.c_fc_weight, {}, names.c_fc, precision, training), w.c_fc_bias)
                 : gelu(cut.column_linear(h, w.c_fc_weight, w.c_fc_bias, names.c_fc, precision, training));  // [..,4C/W]
  return cut.row_linear(a, w.c_proj_weight, w.c_proj_bias, names.c_proj, precision, training);               // [..,C]
}

}  // namespace nn
