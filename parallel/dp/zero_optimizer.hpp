// ZeRO (Rajbhandari et al., 2020): data parallelism whose replicas stop repeating each other.
// Every rank still runs the whole model on its own micro-batch; what each rank *keeps* is
// cut into N shards (parallel/dp/zero_shards.hpp), and the averaging allreduce becomes its two
// halves — a reduce-scatter (each rank gets the average of its shard of the gradients) and
// an all-gather (each rank's updated shard of the parameters goes to everyone):
//
//   stage  a rank holds (float32, Ψ parameters, N ranks)     collectives per step
//   0      parameters 4Ψ, gradients 4Ψ, AdamW 8Ψ  = 16Ψ       allreduce of the gradients (2Ψ sent)
//   1      4Ψ + 4Ψ + AdamW of its shard 8Ψ/N                  reduce-scatter of the gradients after
//                                                            backward, AdamW on the shard,
//                                                            all-gather of the parameters (2Ψ)
//   2      4Ψ + gradients of its shard 4Ψ/N + 8Ψ/N           a group's gradients reduce-scattered as
//                                                            soon as backward finishes them (every
//                                                            micro-step) and freed (2Ψ)
//   3      its shards only: 16Ψ/N, plus the one or two       each group all-gathered just before its
//          groups being used                                 forward and again before its backward,
//                                                            freed after; the next one prefetched (3Ψ)
//
// Every rank steps AdamW on its shard only (nn::adamw_update, the element loop nn::AdamW runs), so
// stage k ≡ stage 0 up to the order of floating-point sums.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "comm/communicator.hpp"
#include "nn/adamw.hpp"
#include "nn/gpt.hpp"
#include "parallel/dp/gradient_wire.hpp"
#include "parallel/dp/zero_shards.hpp"

namespace parallel {

// Memory a rank holds, by kind, counted from the tensors that have memory now.
struct HeldBytes {
  double parameters = 0, gradients = 0, optimizer = 0;
  HeldBytes& operator+=(const HeldBytes& more) {
    parameters += more.parameters;
    gradients += more.gradients;
    optimizer += more.optimizer;
    return *this;
  }
};
// The parameters' and gradients' bytes of these tensors that hold memory now (optimizer 0).
HeldBytes held_by_tensors(const std::vector<nn::NamedTensor>& parameters);

// What one ZeroOptimizer shards: some of a model's parameters, over the ranks that replicate
// them (train_dp: every parameter of the whole model over every rank; on the grid, one per
// role — parallel/dp/zero_by_role.hpp).
struct ZeroPart {
  // Indices into model.parameters(), each group cut into shards and reduce-scattered as one, as
  // soon as backward has finished it (the model's grad-ready hook reports it).
  std::vector<std::vector<int>> groups;
  // Parameters whose gradients need another sum first (the sequence-parallel replicated ones
  // over tp, the tied embedding over the pipeline's ends): one more group, reduce-scattered
  // in finish_gradients — after the caller has made those sums. Kept whole until then.
  std::vector<int> late;
  // The gradients arrive already summed over this many ranks (an expert's over its ep group:
  // Grid::summed_before_averaging); the average divides by it too.
  int summed = 1;
  // Install the model's grad-ready hook (false: the caller forwards it: on_gradients_ready).
  bool own_hook = true;
};

class ZeroOptimizer {
 public:
  // stage 1, 2 or 3; `model` is the whole model, the same on every rank of `group`.
  // wire bf16 (--grad-comm bf16): the reduce-scatter sends the gradients as bf16, half the bytes.
  ZeroOptimizer(int stage, nn::GPT& model, const nn::AdamWConfig& config, comm::Communicator& group,
                GradientWire wire = GradientWire::fp32);
  // Stages 1-2 of `part` of the model (any part of it: a pipeline stage's, a tensor-parallel
  // rank's), over `group`, the ranks holding the same copy of those parameters.
  ZeroOptimizer(int stage, nn::GPT& model, ZeroPart part, const nn::AdamWConfig& config, comm::Communicator& group,
                GradientWire wire = GradientWire::fp32);
  ~ZeroOptimizer();
  ZeroOptimizer(const ZeroOptimizer&) = delete;
  ZeroOptimizer& operator=(const ZeroOptimizer&) = delete;

  // Collective, once, before training: the parameters are already identical on every rank;
  // `full` (rank 0 only; null for a fresh start) is a whole AdamW state whose shards the ranks
  // take. Stage 3 then keeps only its shard of the parameters.
  void start(const nn::AdamW* full);

  // The training step, as train_dp calls it (same shape as trainers::GradientAverager):
  void before_backward(bool last_micro_step);  // stage 1 communicates on the last one only
  void finish_gradients();                     // waits: this rank's gradient shard holds the average
  float clip_grad_norm(float max_norm);        // the global norm (Σ shard² all-reduced); ≤ 0 only measures
  // The pieces of clip_grad_norm, for a caller that adds other groups' squares: this rank's
  // Σ g² of its shards, by bucket(parameter index) (< 0: not counted), not reduced; and the
  // shards multiplied by coef.
  std::vector<double> shard_squares(const std::function<int(int parameter)>& bucket, int buckets);
  void scale_gradient_shards(float coef);
  // From the grad-ready hook (its owner's, when the part does not own it).
  void on_gradients_ready(std::span<const int> parameter_indices);
  void step(float lr);                         // AdamW on the shard; stages 1-2 all-gather the parameters
  void zero_grad();

  // Every parameter on every rank while `work` runs (evaluation, samples, a checkpoint);
  // collective. Stages 1-2 always have them.
  void with_full_parameters(const std::function<void()>& work);
  // Collective: the whole AdamW state on rank 0 (to save), null on the others. Needs the
  // full parameters (inside with_full_parameters at stage 3).
  std::unique_ptr<nn::AdamW> gather_optimizer();
  // The same into `into` (group rank 0: an AdamW over model.parameters(); null on the others):
  // the moments of this part's parameters and the step count.
  void gather_optimizer(nn::AdamW* into);

  HeldBytes held() const;
  HeldBytes shard_bytes() const;  // the shards alone (gradients, moments; stage 3: parameters)
  int stage() const { return stage_; }
  int64_t steps() const { return steps_; }
  std::string describe() const;

 private:
  struct GroupState {
    nn::Tensor grad_shard;          // [shard], stages 2-3 (stage 1's average lies in the full gradients)
    nn::Tensor exp_avg, exp_avg_sq;  // [shard]
    nn::Tensor param_shard;                                // [shard], stage 3: the only copy between uses
    WireBuffer send, received;                             // a reduce-scatter in flight: [N·shard] work space, [shard]
    comm::Work reducing;
    bool reduced = false;           // this step (stage 1: once; stage 2: every micro-step)
    bool reduce_in_flight = false;  // started, not yet added into grad_shard
    nn::Tensor gathered;            // an all-gather in flight: [N·shard]
    comm::Work gathering;
    int users = 0;  // stage 3: uses in progress; the parameters are resident while > 0
  };
  GroupState& state(int g) { return groups_[static_cast<std::size_t>(g)]; }
  std::span<float> shard_of(nn::Tensor& flat) const;  // this rank's block of an [N·shard] buffer

  // Each stretch of this rank's averaged gradient shard of group g: (parameter, offset in the
  // shard, its gradients, count) — in grad_shard, or (stage 1) in the parameter's own gradient.
  using GradientRun = std::function<void(int parameter, int64_t at, float* gradient, int64_t n)>;
  void for_each_gradient_run(int g, const GradientRun& visit);
  void start_reduce_scatter(int g);
  void finish_reduce_scatter(int g);
  void update_shard(int g, float* weights, const nn::AdamWScalars& s);

  // Stage 3: gathering groups around their use.
  void start_gather(int g, const float* my_shard);
  void finish_gather(int g);  // the values back in the tensors
  void free_parameters(int g);
  void before_use(int g, bool backward);
  void after_use(int g, bool backward);

  int stage_;
  GradientWire wire_;
  nn::GPT& model_;
  nn::AdamWConfig config_;
  comm::Communicator& group_;
  ZeroPart part_;
  ZeroShards shards_;
  int late_group_ = -1;  // part_.late's group, or none
  std::vector<GroupState> groups_;
  std::vector<int> group_of_parameter_;
  int64_t steps_ = 0;
  bool communicating_ = false;
  bool full_parameters_ = false;            // stage 3 inside with_full_parameters: the hooks stand aside
  std::vector<std::pair<int, bool>> uses_;  // stage 3: (group, backward) in the order a micro-step uses them
  std::size_t next_use_ = 0;
};

// The memory a rank holds under ZeRO stage `stage` by the paper's formula, float32: Ψ
// parameters on N ranks, by kind (bytes):
//            parameters  gradients  optimizer (AdamW's two moments)
//   stage 0  4Ψ          4Ψ         8Ψ         = 16Ψ
//         1  4Ψ          4Ψ         8Ψ/N       = 8Ψ + 8Ψ/N
//         2  4Ψ          4Ψ/N       8Ψ/N       = 4Ψ + 12Ψ/N
//         3  4Ψ/N        4Ψ/N       8Ψ/N       = 16Ψ/N
// The trainers' memory line and `nanodist plan` both use it.
HeldBytes zero_formula_held(int stage, double parameters, int ranks);
double zero_formula_bytes(int stage, double parameters, int ranks);  // the sum
// Elements each rank sends and receives per step, as the paper counts them (a reduce-scatter
// or all-gather of Ψ moves about Ψ): 2Ψ for stages 0-2 — stage 2 reduce-scatters every
// micro-step, so (K + 1)Ψ — and 3Ψ per micro-step for stage 3. Split by what travels:
// gradients (in --grad-comm's type) and parameters (fp32).
//   stage 0: 2Ψ gradients (the allreduce)   1: Ψ gradients + Ψ parameters
//   stage 2: KΨ gradients + Ψ parameters    3: KΨ gradients + 2KΨ parameters (forward and backward)
struct ZeroTraffic {
  double gradient_elements = 0, parameter_elements = 0;
  double bytes(int gradient_element_bytes) const {
    return gradient_elements * gradient_element_bytes + parameter_elements * 4;
  }
};
ZeroTraffic zero_traffic(int stage, double parameters, int micro_steps);

}  // namespace parallel
