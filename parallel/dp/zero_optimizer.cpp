#include "parallel/dp/zero_optimizer.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>

#include <fmt/format.h>

#include "nn/error.hpp"
#include "nn/grad_clip.hpp"
#include "parallel/dp/gradient_wire.hpp"

namespace parallel {

namespace {

// The part's groups, then its late ones as one more group (when it has any).
std::vector<std::vector<int>> groups_of(const ZeroPart& part) {
  std::vector<std::vector<int>> groups = part.groups;
  if (!part.late.empty()) groups.push_back(part.late);
  return groups;
}

// train_dp's part: the whole model, each of its parameter groups.
ZeroPart whole_model(const nn::GPT& model) { return {.groups = model.parameter_groups()}; }

}  // namespace

ZeroOptimizer::ZeroOptimizer(int stage, nn::GPT& model, const nn::AdamWConfig& config, comm::Communicator& group,
                             GradientWire wire)
    : ZeroOptimizer(stage, model, whole_model(model), config, group, wire) {}

ZeroOptimizer::ZeroOptimizer(int stage, nn::GPT& model, ZeroPart part, const nn::AdamWConfig& config,
                             comm::Communicator& group, GradientWire wire)
    : stage_(stage),
      wire_(wire),
      model_(model),
      config_(config),
      group_(group),
      part_(std::move(part)),
      shards_(groups_of(part_), model.parameters(), group.size(), group.rank()) {
  if (stage < 1 || stage > 3) nn::fail("ZeRO stage must be 1, 2 or 3, got {}", stage);
  if (stage == 3 && !part_.late.empty()) nn::fail("ZeRO stage 3 shards the whole model only");
  groups_.resize(shards_.groups().size());
  if (!part_.late.empty()) late_group_ = static_cast<int>(groups_.size()) - 1;
  group_of_parameter_.assign(model.parameters().size(), -1);
  for (std::size_t g = 0; g < shards_.groups().size(); ++g)
    for (const auto& piece : shards_.groups()[g].pieces)
      group_of_parameter_[static_cast<std::size_t>(piece.parameter)] = static_cast<int>(g);
  // The order in which one micro-step uses the groups (stage 3 prefetches the next one):
  // forward embeddings, blocks, ln_f, lm_head (= wte, group 0); backward the reverse.
  const int last = static_cast<int>(groups_.size()) - 1;
  for (int g = 0; g <= last; ++g) uses_.push_back({g, false});
  uses_.push_back({0, false});
  uses_.push_back({0, true});
  for (int g = last; g >= 0; --g) uses_.push_back({g, true});
}

ZeroOptimizer::~ZeroOptimizer() {
  if (part_.own_hook) model_.set_grad_ready_hook({});
  if (stage_ == 3) model_.set_group_use_hooks({});
}

std::span<float> ZeroOptimizer::shard_of(nn::Tensor& flat) const {
  const auto shard = static_cast<std::size_t>(flat.numel() / shards_.ranks());
  return flat.values().subspan(static_cast<std::size_t>(shards_.rank()) * shard, shard);
}

void ZeroOptimizer::start(const nn::AdamW* full) {
  const int N = shards_.ranks();
  std::array<int64_t, 2> header{full ? full->steps() : 0, full ? 1 : 0};  // rank 0's: the others pass null
  group_.broadcast(std::span<int64_t>(header), 0);
  steps_ = header[0];
  for (std::size_t g = 0; g < groups_.size(); ++g) {
    const int gi = static_cast<int>(g);
    const auto& layout = shards_.groups()[g];
    GroupState& s = groups_[g];
    if (stage_ >= 2) s.grad_shard = nn::Tensor::zeros({layout.shard});  // stage 1: in the gradients themselves
    s.exp_avg = nn::Tensor::zeros({layout.shard});
    s.exp_avg_sq = nn::Tensor::zeros({layout.shard});
    if (header[1]) {  // rank 0 lays each moment out flat (padded) and scatters the shards
      for (bool second : {false, true}) {
        nn::Tensor flat;
        if (full) {
          flat = nn::Tensor::zeros({layout.shard * N});
          shards_.for_each_overlap(
              gi, 0, layout.size, [&](const auto& piece, int64_t in_tensor, int64_t at, int64_t n) {
                const auto& moments = second ? full->exp_avg_sq() : full->exp_avg();
                std::copy_n(moments[static_cast<std::size_t>(piece.parameter)].data() + in_tensor, n, flat.data() + at);
              });
        }
        nn::Tensor& mine = second ? s.exp_avg_sq : s.exp_avg;
        group_.scatter(full ? std::span<const float>(flat.values()) : std::span<const float>(), mine.values(), 0);
      }
    }
    if (stage_ == 3) {  // keep this rank's shard of the parameters, give the rest back
      s.param_shard = nn::Tensor::zeros({layout.shard});
      const int64_t begin = shards_.shard_begin(gi);
      shards_.for_each_overlap(
          gi, begin, begin + layout.shard, [&](const auto& piece, int64_t in_tensor, int64_t at, int64_t n) {
            const nn::Tensor& t = model_.parameters()[static_cast<std::size_t>(piece.parameter)].tensor;
            std::copy_n(t.data() + in_tensor, n, s.param_shard.data() + (at - begin));
          });
      free_parameters(gi);
    }
  }
  for (const auto& group : shards_.groups())
    for (const auto& piece : group.pieces) {
      const nn::Tensor& t = model_.parameters()[static_cast<std::size_t>(piece.parameter)].tensor;
      if (t.has_grad()) t.free_grad();
    }
  if (part_.own_hook) model_.set_grad_ready_hook([this](std::span<const int> ready) { on_gradients_ready(ready); });
  if (stage_ == 3)
    model_.set_group_use_hooks({[this](int g, bool backward) { before_use(g, backward); },
                                [this](int g, bool backward) { after_use(g, backward); }});
}

// ---- gradients: reduce-scatter ----------------------------------------------------------

void ZeroOptimizer::before_backward(bool last_micro_step) {
  communicating_ = stage_ >= 2 || last_micro_step;  // stage 1 accumulates full gradients first, like DDP's no_sync
}

// Stage 1 reduce-scatters each group once a step (its last micro-step's backward), stage 2 at
// every micro-step's. A late group waits for finish_gradients.
void ZeroOptimizer::on_gradients_ready(std::span<const int> parameter_indices) {
  if (!communicating_) return;
  int started = -1;  // the indices are one model group: one group of this part (or none)
  for (int i : parameter_indices) {
    const int g = group_of_parameter_[static_cast<std::size_t>(i)];
    if (g < 0 || g == late_group_ || g == started || (stage_ == 1 && state(g).reduced)) continue;
    start_reduce_scatter(g);
    started = g;
  }
  for (GroupState& s : groups_) s.reducing.test();  // let the ones in flight move (ring progresses when asked)
  if (stage_ == 3)
    for (GroupState& s : groups_) s.gathering.test();
}

// The group's gradients, flat and padded, go into the reduce-scatter; from stage 2 on the
// tensors' gradients are given back at once — only the shard stays.
void ZeroOptimizer::start_reduce_scatter(int g) {
  GroupState& s = state(g);
  if (s.reduce_in_flight) finish_reduce_scatter(g);  // the previous micro-step's (maybe done, not yet added in)
  const auto& layout = shards_.groups()[static_cast<std::size_t>(g)];
  s.send = WireBuffer(wire_, static_cast<std::size_t>(shards_.padded(g)));  // in the wire's type (--grad-comm)
  s.send.zero_from(static_cast<std::size_t>(layout.size));
  for (const auto& piece : layout.pieces) {
    const nn::Tensor& t = model_.parameters()[static_cast<std::size_t>(piece.parameter)].tensor;
    s.send.pack(t.grad_values().first(static_cast<std::size_t>(piece.numel)), static_cast<std::size_t>(piece.begin));
    if (stage_ >= 2) t.free_grad();
  }
  s.received = WireBuffer(wire_, static_cast<std::size_t>(layout.shard));
  s.reducing = s.send.reduce_scatter_async(group_, s.received, comm::ReduceOp::avg);
  s.reduced = true;
  s.reduce_in_flight = true;
}

void ZeroOptimizer::finish_reduce_scatter(int g) {
  GroupState& s = state(g);
  s.reducing.wait();
  if (stage_ >= 2) {
    s.received.add_into(0, s.grad_shard.values());  // micro-steps add up
  } else {  // stage 1: the average written over this rank's stretch of the full gradients (as Megatron's buffer)
    const int64_t begin = shards_.shard_begin(g);
    shards_.for_each_overlap(g, begin, begin + shards_.groups()[static_cast<std::size_t>(g)].shard,
                             [&](const auto& piece, int64_t in_tensor, int64_t at, int64_t n) {
                               const nn::Tensor& t = model_.parameters()[static_cast<std::size_t>(piece.parameter)].tensor;
                               s.received.unpack(static_cast<std::size_t>(at - begin),
                                                 t.grad_values().subspan(static_cast<std::size_t>(in_tensor),
                                                                         static_cast<std::size_t>(n)));
                             });
  }
  s.send = {};
  s.received = {};
  s.reduce_in_flight = false;
}

void ZeroOptimizer::finish_gradients() {
  for (std::size_t g = 0; g < groups_.size(); ++g) {
    // The late group, and any group backward never reported (stage 1: none should be left).
    if (!groups_[g].reduced) start_reduce_scatter(static_cast<int>(g));
    if (groups_[g].reduce_in_flight) finish_reduce_scatter(static_cast<int>(g));
  }
  if (part_.summed > 1) scale_gradient_shards(1.0f / static_cast<float>(part_.summed));
  communicating_ = false;
}

void ZeroOptimizer::for_each_gradient_run(int g, const GradientRun& visit) {
  GroupState& s = groups_[static_cast<std::size_t>(g)];
  const int64_t begin = shards_.shard_begin(g);
  shards_.for_each_overlap(g, begin, begin + shards_.groups()[static_cast<std::size_t>(g)].shard,
                           [&](const auto& piece, int64_t in_tensor, int64_t at, int64_t n) {  // padding: in no piece
                             float* gradient =
                                 stage_ >= 2 ? s.grad_shard.data() + (at - begin)
                                             : model_.parameters()[static_cast<std::size_t>(piece.parameter)].tensor.grad() +
                                                   in_tensor;
                             visit(piece.parameter, at - begin, gradient, n);
                           });
}

std::vector<double> ZeroOptimizer::shard_squares(const std::function<int(int parameter)>& bucket, int buckets) {
  std::vector<double> squares(static_cast<std::size_t>(buckets), 0.0);
  for (int g = 0; g < static_cast<int>(groups_.size()); ++g)
    for_each_gradient_run(g, [&](int parameter, int64_t, float* gradient, int64_t n) {
      const int b = bucket(parameter);
      if (b < 0) return;
      double sum = 0;
      for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(gradient[i]) * gradient[i];
      squares[static_cast<std::size_t>(b)] += sum;
    });
  return squares;
}

void ZeroOptimizer::scale_gradient_shards(float coef) {
  for (int g = 0; g < static_cast<int>(groups_.size()); ++g)
    for_each_gradient_run(g, [&](int, int64_t, float* gradient, int64_t n) {
      for (int64_t i = 0; i < n; ++i) gradient[i] *= coef;
    });
}

float ZeroOptimizer::clip_grad_norm(float max_norm) {
  std::vector<double> squares = shard_squares([](int) { return 0; }, 1);
  group_.allreduce(std::span<double>(squares), comm::ReduceOp::sum);
  const float norm = static_cast<float>(std::sqrt(squares[0]));
  const float coef = nn::clip_coefficient(max_norm, norm);
  if (coef < 1.0f) scale_gradient_shards(coef);
  return norm;
}

// ---- the update: AdamW on the shard, then (stages 1-2) the parameters all-gathered ---------

void ZeroOptimizer::update_shard(int g, float* weights, const nn::AdamWScalars& scalars) {
  GroupState& s = state(g);
  for_each_gradient_run(g, [&](int parameter, int64_t i, float* gradient, int64_t n) {
    const bool matrix = model_.parameters()[static_cast<std::size_t>(parameter)].tensor.ndim() >= 2;
    nn::adamw_update(weights + i, gradient, s.exp_avg.data() + i, s.exp_avg_sq.data() + i, n, scalars.decay(matrix),
                     scalars);
  });
}

void ZeroOptimizer::step(float lr) {
  ++steps_;
  const nn::AdamWScalars scalars = nn::AdamWScalars::at(config_, steps_, lr);
  const int G = static_cast<int>(groups_.size());
  if (stage_ == 3) {  // the shard is the only copy: step it; the next forward gathers it
    for (int g = 0; g < G; ++g) update_shard(g, state(g).param_shard.data(), scalars);
    return;
  }
  // Stages 1-2: this rank's block of a flat buffer is stepped, the all-gather fills the rest,
  // and the tensors take the new values. Two groups in flight at a time bound the buffers.
  for (int g = 0; g <= G; ++g) {
    if (g < G) {
      GroupState& s = state(g);
      const int64_t begin = shards_.shard_begin(g);
      s.gathered = nn::Tensor::zeros({shards_.padded(g)});
      shards_.for_each_overlap(g, begin, begin + shards_.groups()[static_cast<std::size_t>(g)].shard,
                               [&](const auto& piece, int64_t in_tensor, int64_t at, int64_t n) {
                                 const nn::Tensor& t =
                                     model_.parameters()[static_cast<std::size_t>(piece.parameter)].tensor;
                                 std::copy_n(t.data() + in_tensor, n, s.gathered.data() + at);
                               });
      update_shard(g, shard_of(s.gathered).data(), scalars);
      s.gathering = group_.allgather_async(std::span<const float>(shard_of(s.gathered)), s.gathered.values());
    }
    if (g > 0) finish_gather(g - 1);
  }
}

void ZeroOptimizer::zero_grad() {
  for (GroupState& s : groups_) {
    if (s.grad_shard.defined()) std::fill_n(s.grad_shard.data(), s.grad_shard.numel(), 0.0f);
    s.reduced = false;
  }
  // Stage 1's full gradients live from backward to the update only (2-3 freed them already):
  // every step starts as the first does, and backward makes them as it frees activations.
  if (stage_ == 1)
    for (const auto& group : shards_.groups())
      for (const auto& piece : group.pieces) {
        const nn::Tensor& t = model_.parameters()[static_cast<std::size_t>(piece.parameter)].tensor;
        if (t.has_grad()) t.free_grad();
      }
}

// ---- parameters: gathered around their use (stage 3) -------------------------------------

void ZeroOptimizer::start_gather(int g, const float* my_shard) {
  GroupState& s = state(g);
  s.gathered = nn::Tensor::empty({shards_.padded(g)});
  std::span<float> mine = shard_of(s.gathered);
  std::copy_n(my_shard, mine.size(), mine.data());
  s.gathering = group_.allgather_async(std::span<const float>(mine), s.gathered.values());
}

void ZeroOptimizer::finish_gather(int g) {
  GroupState& s = state(g);
  s.gathering.wait();
  for (const auto& piece : shards_.groups()[static_cast<std::size_t>(g)].pieces) {
    nn::Tensor& t = model_.parameters()[static_cast<std::size_t>(piece.parameter)].tensor;
    t.allocate_values();
    std::copy_n(s.gathered.data() + piece.begin, piece.numel, t.data());
  }
  s.gathered = {};
}

void ZeroOptimizer::free_parameters(int g) {
  for (const auto& piece : shards_.groups()[static_cast<std::size_t>(g)].pieces)
    model_.parameters()[static_cast<std::size_t>(piece.parameter)].tensor.free_values();
}

void ZeroOptimizer::before_use(int g, bool backward) {
  if (full_parameters_) return;
  GroupState& s = state(g);
  if (s.users++ == 0) {
    if (!s.gathered.defined()) start_gather(g, s.param_shard.data());  // not prefetched
    finish_gather(g);
  }
  // Prefetch: start gathering the group used after this one, so it travels while this computes.
  std::size_t at = next_use_;
  while (at < uses_.size() && uses_[at] != std::pair{g, backward}) ++at;
  if (at == uses_.size())
    at = static_cast<std::size_t>(std::find(uses_.begin(), uses_.end(), std::pair{g, backward}) - uses_.begin());
  next_use_ = at + 1;
  if (next_use_ < uses_.size()) {
    const int next = uses_[next_use_].first;
    if (state(next).users == 0 && !state(next).gathered.defined()) start_gather(next, state(next).param_shard.data());
  }
}

void ZeroOptimizer::after_use(int g, bool) {
  if (full_parameters_) return;
  if (--state(g).users == 0) free_parameters(g);
}

void ZeroOptimizer::with_full_parameters(const std::function<void()>& work) {
  if (stage_ < 3) return work();
  const int G = static_cast<int>(groups_.size());
  for (int g = 0; g < G; ++g) {
    if (state(g).gathered.defined()) state(g).gathering.wait();  // a prefetch left over: redo it plainly
    start_gather(g, state(g).param_shard.data());
    finish_gather(g);
  }
  full_parameters_ = true;
  struct Restore {  // free them again even when `work` throws
    ZeroOptimizer& z;
    ~Restore() {
      z.full_parameters_ = false;
      for (int g = 0; g < static_cast<int>(z.groups_.size()); ++g) z.free_parameters(g);
    }
  } restore{*this};
  work();
}

// ---- checkpoints and accounting ------------------------------------------------------------

std::unique_ptr<nn::AdamW> ZeroOptimizer::gather_optimizer() {
  std::unique_ptr<nn::AdamW> full =
      group_.rank() == 0 ? std::make_unique<nn::AdamW>(model_.parameters(), config_) : nullptr;
  gather_optimizer(full.get());
  return full;
}

void ZeroOptimizer::gather_optimizer(nn::AdamW* into) {
  const bool root = group_.rank() == 0;
  if (root && into == nullptr) nn::fail("ZeRO: the group's rank 0 gathers the moments but was given no optimizer to fill");
  for (std::size_t g = 0; g < groups_.size(); ++g) {
    for (bool second : {false, true}) {
      nn::Tensor& mine = second ? groups_[g].exp_avg_sq : groups_[g].exp_avg;
      nn::Tensor flat = root ? nn::Tensor::empty({shards_.padded(static_cast<int>(g))}) : nn::Tensor{};
      group_.gather(std::span<const float>(mine.values()), root ? flat.values() : std::span<float>(), 0);
      if (!root) continue;
      auto& moments = second ? into->exp_avg_sq() : into->exp_avg();
      for (const auto& piece : shards_.groups()[g].pieces)
        std::copy_n(flat.data() + piece.begin, piece.numel, moments[static_cast<std::size_t>(piece.parameter)].data());
    }
  }
  if (root) into->set_steps(steps_);
}

HeldBytes held_by_tensors(const std::vector<nn::NamedTensor>& parameters) {
  HeldBytes h;
  for (const auto& p : parameters) {
    const double bytes = static_cast<double>(p.tensor.numel()) * 4;
    if (p.tensor.has_values()) h.parameters += bytes;
    if (p.tensor.has_grad()) h.gradients += bytes;
  }
  return h;
}

HeldBytes ZeroOptimizer::held() const {
  HeldBytes h = held_by_tensors(model_.parameters());
  h += shard_bytes();
  return h;
}

HeldBytes ZeroOptimizer::shard_bytes() const {
  HeldBytes h;
  for (const GroupState& s : groups_) {
    const double shard = static_cast<double>(s.exp_avg.numel()) * 4;
    if (s.param_shard.defined()) h.parameters += shard;
    if (s.grad_shard.defined()) h.gradients += shard;
    h.optimizer += 2 * shard;
  }
  return h;
}

std::string ZeroOptimizer::describe() const {
  const char* what[] = {"", "optimizer state sharded: gradients reduce-scattered after backward",
                        "optimizer state and gradients sharded: each group's gradients reduce-scattered as backward "
                        "finishes it",
                        "optimizer state, gradients and parameters sharded: each block gathered before its forward "
                        "and backward (next one prefetched), gradients reduce-scattered as backward finishes it"};
  return fmt::format("ZeRO stage {} over {} ranks, {} groups of 1/{} each: {}; AdamW on the shard{}", stage_,
                     shards_.ranks(), groups_.size(), shards_.ranks(), what[stage_],
                     stage_ < 3 ? ", parameters all-gathered" : "") +
         parallel::wire_note(wire_);
}

HeldBytes zero_formula_held(int stage, double parameters, int ranks) {
  const double P = parameters, N = ranks;
  return {.parameters = 4 * P / (stage >= 3 ? N : 1),
          .gradients = 4 * P / (stage >= 2 ? N : 1),
          .optimizer = 8 * P / (stage >= 1 ? N : 1)};
}

double zero_formula_bytes(int stage, double parameters, int ranks) {
  const HeldBytes held = zero_formula_held(stage, parameters, ranks);
  return held.parameters + held.gradients + held.optimizer;
}

ZeroTraffic zero_traffic(int stage, double parameters, int micro_steps) {
  const double P = parameters, K = micro_steps;
  switch (stage) {
    case 0:
      return {2 * P, 0};
    case 1:
      return {P, P};
    case 2:
      return {K * P, P};
    default:
      return {K * P, 2 * K * P};
  }
}

}  // namespace parallel
