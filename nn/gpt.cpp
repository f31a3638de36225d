#include "nn/gpt.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <tuple>
#include <string_view>
#include <utility>

#include "nn/autograd.hpp"
#include "nn/recompute.hpp"
#include "nn/error.hpp"
#include "nn/grad_clip.hpp"
#include "nn/mlp.hpp"
#include "nn/ops.hpp"

namespace nn {

void GPTConfig::validate() const {
  auto positive = [](const char* name, int value) {
    if (value <= 0) fail("GPT config: {} must be positive, got {}", name, value);
  };
  positive("n_layer", n_layer);
  positive("n_head", n_head);
  positive("n_embd", n_embd);
  positive("block_size", block_size);
  positive("vocab_size", vocab_size);
  if (n_embd % n_head != 0) fail("GPT config: n_embd {} is not divisible by n_head {}", n_embd, n_head);
  if (!(dropout >= 0.0f && dropout <= static_cast<float>(kMaxDropout)))
    fail("GPT config: dropout must be a number ≥ 0 and ≤ {}, got {}", kMaxDropout, dropout);
  if (n_experts < 0) fail("GPT config: n_experts must be 0 (dense) or more, got {}", n_experts);
  if (n_experts == 0) return;
  if (experts_per_token < 1 || experts_per_token > n_experts)
    fail("GPT config: experts_per_token must be from 1 to n_experts {}, got {}", n_experts, experts_per_token);
  if (!(capacity_factor > 0.0 && std::isfinite(capacity_factor)))
    fail("GPT config: capacity_factor must be a number > 0, got {}", capacity_factor);
  if (moe_every < 1 || moe_every > n_layer)
    fail("GPT config: moe_every must be from 1 to n_layer {} (a mixture every that many blocks), got {}", n_layer,
         moe_every);
  if (!(aux_loss_weight >= 0.0f && std::isfinite(aux_loss_weight)))
    fail("GPT config: aux_loss_weight must be a number ≥ 0, got {}", aux_loss_weight);
}

nlohmann::json GPTConfig::to_json() const {
  nlohmann::json j = {{"n_layer", n_layer},       {"n_head", n_head},   {"n_embd", n_embd}, {"block_size", block_size},
                      {"vocab_size", vocab_size}, {"dropout", dropout}, {"bias", bias}};
  if (n_experts > 0) {  // a dense model's config stays nanoGPT's
    j["n_experts"] = n_experts;
    j["experts_per_token"] = experts_per_token;
    j["capacity_factor"] = capacity_factor;
    j["moe_every"] = moe_every;
    j["aux_loss_weight"] = aux_loss_weight;
  }
  return j;
}

GPTConfig GPTConfig::from_json(const nlohmann::json& j) {
  GPTConfig c;
  auto field = [&j](const char* name) -> const nlohmann::json& {
    if (!j.contains(name)) fail("GPT config: field '{}' is missing", name);
    return j.at(name);
  };
  // A whole number that fits an int: a float like 1e300 would wrap in the conversion.
  auto read_whole = [&](const char* name, int& target) {
    const nlohmann::json& v = field(name);
    if (!v.is_number_integer() || v.get<int64_t>() < 1 || v.get<int64_t>() > std::numeric_limits<int>::max())
      fail("GPT config: field '{}' must be a whole number from 1 to {}, got {}", name, std::numeric_limits<int>::max(),
           v.dump());
    target = v.get<int>();
  };
  read_whole("n_layer", c.n_layer);
  read_whole("n_head", c.n_head);
  read_whole("n_embd", c.n_embd);
  read_whole("block_size", c.block_size);
  read_whole("vocab_size", c.vocab_size);
  const nlohmann::json& dropout = field("dropout");
  if (!dropout.is_number()) fail("GPT config: field 'dropout' must be a number, got {}", dropout.dump());
  c.dropout = dropout.get<float>();
  const nlohmann::json& bias = field("bias");
  if (!bias.is_boolean()) fail("GPT config: field 'bias' must be true or false, got {}", bias.dump());
  c.bias = bias.get<bool>();
  // A mixture of experts: n_experts > 0 and the four others; without n_experts (or 0), dense.
  if (!j.contains("n_experts"))
    for (const char* name : {"experts_per_token", "capacity_factor", "moe_every", "aux_loss_weight"})
      if (j.contains(name)) fail("GPT config: field '{}' without 'n_experts' (the number of experts)", name);
  if (j.contains("n_experts") && j.at("n_experts") != 0) {
    read_whole("n_experts", c.n_experts);
    read_whole("experts_per_token", c.experts_per_token);
    read_whole("moe_every", c.moe_every);
    for (const char* name : {"capacity_factor", "aux_loss_weight"})
      if (!field(name).is_number()) fail("GPT config: field '{}' must be a number, got {}", name, field(name).dump());
    c.capacity_factor = field("capacity_factor").get<double>();
    c.aux_loss_weight = field("aux_loss_weight").get<float>();
  }
  c.validate();
  return c;
}

// The layers keep this process's part of the whole initial value (all of it, but under
// tensor parallelism).
Tensor GPT::add_parameter(const std::string& name, const Tensor& whole, ParameterRole role) {
  Tensor mine = layers_.weights->keep(whole, role);
  parameters_.push_back({name, mine, role});
  return mine;
}

GPTPart GPTPart::whole(const GPTConfig& config) { return {true, {{0, config.n_layer}}, true}; }

bool GPTPart::is_whole(const GPTConfig& config) const {
  int next = 0;  // the chunks cover 0 … n_layer − 1 in order
  for (const BlockRange& c : chunks) {
    if (c.first != next) return false;
    next = c.end;
  }
  return embedding && head && next == config.n_layer;
}

bool GPTPart::owns_block(int l) const {
  for (const BlockRange& c : chunks)
    if (l >= c.first && l < c.end) return true;
  return false;
}

GPT::GPT(const GPTConfig& config, uint64_t seed, const ComputeModes& modes)
    : GPT(config, seed, GPTPart::whole(config), modes) {}

// nanoGPT's init: weights of Linear and Embedding ~ N(0, 0.02), biases 0, LayerNorm
// weights 1; the projections that write into the residual stream ~ N(0, 0.02/√(2·n_layer)).
Tensor GPT::init_parameter(Rng& rng, const std::string& name, Shape shape, bool owned, ParameterRole role) {
  const bool is_bias = name.ends_with(".bias"), is_layernorm = name.find(".ln_") != std::string::npos;
  const bool random = !is_bias && !is_layernorm;
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  if (!owned) {
    if (random)
      for (int64_t i = 0; i < n; ++i) rng.normal(0.0f, 0.02f);  // keep the stream in step
    return Tensor{};
  }
  Tensor t = Tensor::zeros(std::move(shape), /*requires_grad=*/true);
  if (is_layernorm && !is_bias) {
    std::fill_n(t.data(), t.numel(), 1.0f);
  } else if (random) {
    const float residual_std = 0.02f / std::sqrt(2.0f * static_cast<float>(config_.n_layer));
    const float stddev = name.ends_with("c_proj.weight") ? residual_std : 0.02f;
    for (float& v : t.values()) v = rng.normal(0.0f, stddev);
  }
  return add_parameter(name, t, role);
}

Tensor GPT::init_bias(Rng& rng, const std::string& name, int64_t n, bool owned, ParameterRole role) {
  return config_.bias ? init_parameter(rng, name, {n}, owned, role) : Tensor{};
}

std::vector<int> GPT::indices_from(std::size_t first) const {
  std::vector<int> group;
  for (std::size_t i = first; i < parameters_.size(); ++i) group.push_back(static_cast<int>(i));
  return group;
}

void GPT::init_blocks(Rng& rng) {
  const int64_t C = config_.n_embd;
  for (int64_t l = 0; l < config_.n_layer; ++l) {
    const bool owned = part_.owns_block(static_cast<int>(l));
    const std::string p = "transformer.h." + std::to_string(l) + ".";
    const std::size_t first = parameters_.size();
    BlockWeights b;
    const bool moe = config_.is_moe_block(static_cast<int>(l));
    for (const BlockTensor& t : block_tensors()) {
      if (moe && std::string_view(t.name).starts_with("mlp.")) continue;  // the mixture's, below
      const Shape shape = t.columns ? Shape{t.rows * C, t.columns * C} : Shape{t.rows * C};
      b.*t.field = t.bias ? init_bias(rng, p + t.name, t.rows * C, owned, t.role)
                          : init_parameter(rng, p + t.name, shape, owned, t.role);
    }
    if (moe) {  // PyTorch's order: the router, then each expert's c_fc and c_proj
      using enum ParameterRole;
      b.moe.router_weight = init_parameter(rng, p + "mlp.router.weight", {config_.n_experts, C}, owned, replicated);
      for (int e = 0; e < config_.n_experts; ++e) {  // (expert parallelism: this rank's E/ep of them)
        const std::string x = p + "mlp.experts." + std::to_string(e) + ".";
        const bool held = owned && layers_.dispatcher->holds_expert(e, config_.n_experts);
        ExpertWeights w;
        w.c_fc_weight = init_parameter(rng, x + "c_fc.weight", {4 * C, C}, held, expert);
        w.c_fc_bias = init_bias(rng, x + "c_fc.bias", 4 * C, held, expert);
        w.c_proj_weight = init_parameter(rng, x + "c_proj.weight", {C, 4 * C}, held, expert);
        w.c_proj_bias = init_bias(rng, x + "c_proj.bias", C, held, expert);
        b.moe.experts.push_back(w);
      }
    }
    if (!owned) continue;
    blocks_.push_back(b);
    block_ids_.push_back(static_cast<int>(l));
    block_groups_.push_back(indices_from(first));
  }
}

// The draws run over the *whole* model in state_dict order; a part keeps the values of the
// parameters it owns and skips the others' — so every part starts from exactly the whole
// model's numbers, and the copies of wte on the first and last stage are identical.
GPT::GPT(const GPTConfig& config, uint64_t seed, const GPTPart& part, const ComputeModes& modes,
         const GPTLayers& layers)
    : config_(config),
      part_(part),
      modes_(modes),
      layers_(layers.filled()),
      dropout_batch_{.seed = seed} {
  config_.validate();
  const int64_t C = config_.n_embd, V = config_.vocab_size, L = config_.n_layer;
  int next = 0;  // chunks in model order, each a non-empty range inside the model
  for (const BlockRange& c : part_.chunks) {
    if (c.first < next || c.end > L || c.first >= c.end)
      fail("GPT part: blocks [{}, {}) are not a range of the {} blocks after block {}", c.first, c.end, L, next);
    next = c.end;
  }
  Rng rng(seed);
  // state_dict order: wte, wpe, then each block, then ln_f (lm_head is wte). The head needs
  // wte too (lm_head is tied to it): a last stage without the embedding keeps its own copy.
  using enum ParameterRole;
  wte_ = init_parameter(rng, "transformer.wte.weight", {V, C}, part_.embedding || part_.head, vocabulary);
  wpe_ = init_parameter(rng, "transformer.wpe.weight", {config_.block_size, C}, part_.embedding, replicated);
  if (part_.embedding) embedding_group_ = indices_from(0);
  init_blocks(rng);
  const std::size_t ln_f_first = parameters_.size();
  ln_f_weight_ = init_parameter(rng, "transformer.ln_f.weight", {C}, part_.head, replicated);
  ln_f_bias_ = init_bias(rng, "transformer.ln_f.bias", C, part_.head, replicated);
  if (part_.head) {
    ln_f_group_ = indices_from(ln_f_first);
    if (!part_.embedding) ln_f_group_.push_back(0);  // this stage's wte serves only lm_head, in the same group
  }
}

std::vector<NamedTensor> GPT::state_dict() const {
  std::vector<NamedTensor> all = parameters_;
  if (part_.head) all.push_back({"lm_head.weight", wte_, ParameterRole::vocabulary});
  return all;
}

Tensor& GPT::parameter(const std::string& name) {
  for (auto& p : parameters_)
    if (p.name == name) return p.tensor;
  if (name == "lm_head.weight" && part_.head) return wte_;
  fail("GPT has no parameter named '{}'", name);
}

int64_t GPT::num_params(bool non_embedding) const {
  int64_t n = 0;
  for (const auto& p : parameters_) n += p.tensor.numel();
  return non_embedding && wpe_.defined() ? n - wpe_.numel() : n;
}

double GPT::active_params() const {
  double n = static_cast<double>(num_params(true));
  if (config_.n_experts == 0) return n;
  // Each mixture block: the experts held here out, a token's k in (expert parallelism holds E/ep).
  const double C = config_.n_embd, expert = 8.0 * C * C + (config_.bias ? 5.0 * C : 0.0);
  for (const BlockWeights& b : blocks_) {
    if (!b.moe.router_weight.defined()) continue;
    const auto held = std::ranges::count_if(b.moe.experts, [](const ExpertWeights& w) { return w.c_fc_weight.defined(); });
    n -= static_cast<double>(held - config_.experts_per_token) * expert;
  }
  return n;
}

double GPT::flops_per_token(int64_t T) const {
  // 6 FLOPs per parameter a token uses (2 forward, 4 backward) plus attention's q·k and p·v.
  const double N = active_params();
  return 6.0 * N + 12.0 * config_.n_layer * config_.n_embd * static_cast<double>(T);
}

void GPT::zero_grad() {
  for (auto& p : parameters_) p.tensor.zero_grad();
}

void GPT::sum_replicated_grads() {
  std::vector<Tensor> replicated;
  for (const NamedTensor& p : parameters_)
    if (p.role == ParameterRole::replicated) replicated.push_back(p.tensor);
  layers_.weights->sum_replicated_grads(replicated);
}

// In parameters' order, each tensor's Σ g² in double; by role: the experts summed over the ranks
// sharing them, the cut ones over the group cutting them, the whole ones as they are.
double GPT::squared_grad_norm() const {
  double experts = 0.0, cut = 0.0, whole = 0.0;
  for (const NamedTensor& p : parameters_) {
    if (!part_.embedding && wte_.defined() && p.tensor.same_storage(wte_)) continue;  // the head's copy: counted on stage 0
    std::vector<NamedTensor> one{p};
    (p.role == ParameterRole::expert ? experts : layers_.weights->is_cut(p.role) ? cut : whole) +=
        nn::squared_grad_norm(one);
  }
  return layers_.dispatcher->sum_over_holders(experts) + layers_.weights->sum_over_group(cut) + whole;
}

int64_t dropout_site(DropoutSite which, int layer) {
  if (which == DropoutSite::embedding) return 0;
  return 1 + 3 * static_cast<int64_t>(layer) + (static_cast<int64_t>(which) - 1);
}

DropoutMask dropout_mask(float p, bool training, const DropoutBatch& batch, DropoutSite which, int layer,
                         int64_t first_element) {
  return {.p = training ? p : 0.0f,
          .seed = batch.seed,
          .step = batch.step,
          .site = dropout_site(which, layer),
          .first_sample = batch.first_sample,
          .first_element = first_element};
}

Tensor GPT::maybe_dropout(const Tensor& x, const DropoutBatch& batch, DropoutSite which, int layer) {
  const int64_t S = x.size(1), C = x.size(2);  // x [B,S,C]
  const SequenceLayout::StreamPlace place = layers_.sequence->stream_place(S, training_);
  DropoutMask mask = dropout_mask(config_.dropout, training_, batch, which, layer, place.first * C);
  if (place.second >= 0) {  // two runs of positions: the second half's elements lie further on
    mask.jump_at = S / 2 * C;
    mask.jump = (place.second - place.first - S / 2) * C;
  }
  return dropout(x, mask);
}

Shape GPT::activation_shape(int64_t B, int64_t T) const {
  return {B, layers_.sequence->stream_length(T, training_), config_.n_embd};
}

void GPT::mark_grad_ready(const std::vector<int>& group) {
  if (grad_ready_hook_ && autograd::grad_enabled())
    autograd::record([this, &group] { grad_ready_hook_(group); });  // group: a member, alive as long as *this
}

// The tape runs backward in reverse: what begin_use records runs after the span's backward
// steps, what end_use records runs before them.
void GPT::begin_use(int group) {
  if (!group_use_hooks_.before) return;
  group_use_hooks_.before(group, false);
  if (autograd::grad_enabled()) autograd::record([this, group] { group_use_hooks_.after(group, true); });
}

void GPT::end_use(int group) {
  if (!group_use_hooks_.before) return;
  if (autograd::grad_enabled()) autograd::record([this, group] { group_use_hooks_.before(group, true); });
  group_use_hooks_.after(group, false);
}

std::vector<std::vector<int>> GPT::parameter_groups() const {
  require_whole("parameter_groups");
  std::vector<std::vector<int>> groups{embedding_group_};
  groups.insert(groups.end(), block_groups_.begin(), block_groups_.end());
  groups.push_back(ln_f_group_);
  return groups;
}

std::vector<std::vector<int>> GPT::grad_ready_groups() const {
  std::vector<std::vector<int>> groups;
  if (!embedding_group_.empty()) groups.push_back(embedding_group_);
  for (const auto& block : block_groups_)
    if (!block.empty()) groups.push_back(block);
  if (!ln_f_group_.empty()) groups.push_back(ln_f_group_);
  return groups;
}

void GPT::require_whole(const char* what) const {
  if (!part_.is_whole(config_)) fail("GPT::{} needs the whole model; this object holds a part", what);
}

Tensor GPT::embed(std::span<const int32_t> ids, int64_t B, int64_t T) {
  if (!part_.embedding) fail("GPT::embed: this part has no embedding");
  if (T <= 0 || B <= 0 || static_cast<int64_t>(ids.size()) != B * T)
    fail("GPT: {} ids do not make a batch of {}×{}", ids.size(), B, T);
  if (T > config_.block_size) fail("GPT: sequence length {} exceeds block_size {}", T, config_.block_size);
  mark_grad_ready(embedding_group_);  // recorded first, so it runs last: wte also serves lm_head
  // The stream's positions: all T, or this rank's S of them under sequence parallelism.
  const int64_t S = layers_.sequence->stream_length(T, training_);
  const SequenceLayout::StreamPlace place = layers_.sequence->stream_place(S, training_);
  std::vector<int32_t> positions(static_cast<std::size_t>(S));  // the stream's, in the sequence
  for (int64_t s = 0; s < S; ++s)
    positions[static_cast<std::size_t>(s)] =
        static_cast<int32_t>(place.second < 0 || s < S / 2 ? place.first + s : place.second + s - S / 2);
  begin_use(0);
  // The ids of the positions this rank's layers see whole (context parallelism: its T/c).
  const std::vector<int32_t> here = layers_.sequence->picked(ids, B, T, training_);
  Tensor tok = layers_.weights->token_embedding(wte_, here, B, layers_.sequence->picked_length(T, training_),
                                                training_);  // [B,S,C]
  Tensor pos = embedding(wpe_, positions, {S});                         // [S,C]
  end_use(0);
  return maybe_dropout(add(tok, pos), dropout_batch_, DropoutSite::embedding, 0);
}

Tensor GPT::run_blocks(Tensor x) {
  auto [stream, mlp_out] = run_blocks_open(std::move(x));
  return add_pending(stream, mlp_out);
}

std::pair<Tensor, Tensor> GPT::run_blocks_open(Tensor x) {
  Tensor mlp_out;
  for (int c = 0; c < static_cast<int>(part_.chunks.size()); ++c) std::tie(x, mlp_out) = run_chunk_open(x, mlp_out, c);
  return {x, mlp_out};
}

Tensor GPT::run_chunk(Tensor x, int chunk) {
  auto [stream, mlp_out] = run_chunk_open(std::move(x), {}, chunk);  // a stage hands on the whole stream
  return add_pending(stream, mlp_out);
}

// With --fusion fused the MLP's residual add of one block runs inside the next block's ln_1
// pass (add_layernorm), so the chunk returns {x, the last MLP's output} with that add still
// to do: its caller adds it alone or in ln_f's pass. Under --recompute full a block's replay
// starts from the stream it stored, so there every block adds its own output.
std::pair<Tensor, Tensor> GPT::run_chunk_open(Tensor x, Tensor mlp_out, int chunk) {
  const BlockRange range = part_.chunks.at(static_cast<std::size_t>(chunk));
  const bool full = modes_.recompute == Recompute::full;
  const bool carry = modes_.fusion == Fusion::fused && !full;
  for (std::size_t l = 0; l < blocks_.size(); ++l) {
    if (block_ids_[l] < range.first || block_ids_[l] >= range.end) continue;
    mark_grad_ready(block_groups_[l]);
    const int group = block_ids_[l] + 1;
    begin_use(group);  // outside the recomputed span: ZeRO-3 gathers once for the replay and its backward
    if (full) {
      x = add_pending(x, std::exchange(mlp_out, {}));
      // the batch by value: by backward the model may be on another micro-batch
      auto block = [this, l, batch = dropout_batch_](const Tensor& input) {
        auto [stream, out] = block_forward(blocks_[l], block_ids_[l], batch, input, {});
        return add(stream, out);
      };
      x = recomputed(x, block);
    } else {
      // handed over, not copied: without a tape nothing else keeps them alive through the block
      std::tie(x, mlp_out) =
          block_forward(blocks_[l], block_ids_[l], dropout_batch_, std::move(x), std::exchange(mlp_out, {}));
      if (!carry) x = add(x, std::exchange(mlp_out, {}));
    }
    end_use(group);
  }
  return {x, mlp_out};
}

// One block: the stream x [B,S,C] (plus the previous MLP's output, when its add was left to
// this block's ln_1) → x + attention sublayer, and the MLP sublayer's output [B,S,C] for the
// caller to add. S = T, but under sequence parallelism. The linears are the layers' (whole, or
// this rank's columns and rows: nn/gpt_layers.hpp). Under --recompute selective the attention
// core is recomputed in backward (nn/recompute.hpp); under full the replay runs the layers'
// collectives again, on every rank of the group alike.
std::pair<Tensor, Tensor> GPT::block_forward(const BlockWeights& b, int layer, const DropoutBatch& batch, Tensor x,
                                             Tensor previous_mlp_out) {
  const Precision precision = modes_.precision;
  WeightCut& weights = *layers_.weights;
  SequenceLayout& sequence = *layers_.sequence;
  const bool training = training_;
  Tensor h;
  std::tie(x, h) = add_pending_layernorm(x, std::exchange(previous_mlp_out, {}), b.ln_1_weight, b.ln_1_bias);
  h = weights.column_linear(h, b.c_attn_weight, b.c_attn_bias, "GEMM attn.c_attn", precision, training);  // [B,T,3C/W]
  // The heads held here, and their part of the sample's attention weights [n_head,T,T] for the mask.
  const int heads = weights.local_heads(config_.n_head);
  const int64_t T = sequence.sequence_length(h.size(1), training);  // the whole sequence, wherever its rows are
  const int64_t first_element = int64_t{weights.first_head(config_.n_head)} * T * T;
  const DropoutMask weights_mask =
      dropout_mask(config_.dropout, training, batch, DropoutSite::attention_weights, layer, first_element);
  auto attention_core = [this, heads, weights_mask, training](const Tensor& qkv) {
    return layers_.sequence->attention(qkv, heads, weights_mask, modes_.attention, modes_.precision,
                              training);  // [B,T,3C/W] → [B,T,C/W]
  };
  h = modes_.recompute == Recompute::selective ? recomputed(h, attention_core) : attention_core(h);     // [B,T,C/W]
  h = maybe_dropout(weights.row_linear(h, b.attn_proj_weight, b.attn_proj_bias, "GEMM attn.c_proj", precision, training),
                    batch, DropoutSite::attention_output, layer);  // the stream [B,S,C]
  if (modes_.fusion == Fusion::fused) {
    std::tie(x, h) = add_layernorm(x, h, b.ln_2_weight, b.ln_2_bias);  // x + h, and its layernorm
  } else {
    x = add(x, h);
    h = layernorm(x, b.ln_2_weight, b.ln_2_bias);
  }
  if (b.moe.router_weight.defined()) {  // a mixture of experts (nn/moe_mlp.hpp), capacity over whole sequences
    // Its routing counted once per training forward: not again in --recompute full's replay.
    const bool replay = modes_.recompute == Recompute::full && autograd::grad_enabled();
    h = moe_mlp(h, b.moe, config_.moe(), precision, modes_.fusion == Fusion::fused, loss_scale_,
                training && !replay ? &routing_stats_ : nullptr, layer, *layers_.dispatcher, sequence, training);
    return {x, maybe_dropout(h, batch, DropoutSite::mlp_output, layer)};
  }
  // The MLP (nn/mlp.hpp): [B,S,C] → [B,T,4C/W] → the stream [B,S,C]
  h = mlp(h, {b.c_fc_weight, b.c_fc_bias, b.mlp_proj_weight, b.mlp_proj_bias}, weights, precision,
          modes_.fusion == Fusion::fused, training, {"GEMM mlp.c_fc", "GEMM mlp.c_proj"});
  h = maybe_dropout(h, batch, DropoutSite::mlp_output, layer);
  return {x, h};
}

// ln_f of x (plus the last MLP's output, when its add was left to this pass).
Tensor GPT::final_norm(const Tensor& x, const Tensor& mlp_out) {
  if (!part_.head) fail("GPT: this part has no head");
  mark_grad_ready(ln_f_group_);
  begin_use(config_.n_layer + 1);
  Tensor h = add_pending_layernorm(x, mlp_out, ln_f_weight_, ln_f_bias_).second;
  end_use(config_.n_layer + 1);
  return h;
}

Tensor GPT::head_logits(const Tensor& x) { return lm_head(final_norm(x)); }

Tensor GPT::lm_head(const Tensor& h) {
  begin_use(0);
  // lm_head, tied to wte: a column layer over the vocabulary → [B,T,V] (or [B,T,V/W])
  Tensor logits = layers_.weights->column_linear(h, wte_, {}, "GEMM lm_head", modes_.precision, training_);
  end_use(0);
  return logits;
}

// logits [B,rows,V/W] against the targets of its rows: the batch's [B,T] targets, or (context
// parallelism while training) the picked ones of this rank's positions.
Tensor GPT::cross_entropy_of(const Tensor& logits, std::span<const int32_t> targets) {
  const int64_t B = logits.size(0), rows = logits.size(1);
  if (static_cast<int64_t>(targets.size()) == B * rows) return layers_.weights->cross_entropy(logits, targets);
  const int64_t T = static_cast<int64_t>(targets.size()) / B;
  return layers_.weights->cross_entropy(logits, layers_.sequence->picked(targets, B, T, training_));
}

Tensor GPT::head_loss(const Tensor& x, std::span<const int32_t> targets) {
  return cross_entropy_of(head_logits(x), targets);
}

Tensor GPT::forward(std::span<const int32_t> ids, int64_t B, int64_t T) {
  require_whole("forward");
  auto [x, mlp_out] = run_blocks_open(embed(ids, B, T));
  return lm_head(final_norm(x, mlp_out));  // the last MLP's residual add in ln_f's pass
}

Tensor GPT::loss(std::span<const int32_t> ids, std::span<const int32_t> targets, int64_t B, int64_t T) {
  return cross_entropy_of(forward(ids, B, T), targets);
}

void GPT::next_token_logits(const Tensor& x, int64_t T, float temperature, std::span<float> logits) {
  const int64_t C = config_.n_embd;
  Tensor h = final_norm(x);  // [1,T,C]
  // Logits of the last position only, through the one lm_head: h[T-1] · wteᵀ / temperature.
  Tensor last = Tensor::from(std::span<const float>(h.data() + (T - 1) * C, static_cast<std::size_t>(C)), {1, 1, C});
  Tensor mine = lm_head(last);  // [1,1,V], or this rank's vocabulary columns [1,1,V/W]
  for (float& z : mine.values()) z /= temperature;
  layers_.weights->gather_vocabulary(mine.values(), logits);
}

int32_t sample_token(std::span<float> logits, int top_k, Rng& rng) {
  const auto V = static_cast<int64_t>(logits.size());
  if (top_k > 0 && top_k < V) {
    std::vector<float> sorted(logits.begin(), logits.end());
    std::nth_element(sorted.begin(), sorted.begin() + (top_k - 1), sorted.end(), std::greater<>());
    const float kth = sorted[static_cast<std::size_t>(top_k - 1)];
    for (float& z : logits)
      if (z < kth) z = -INFINITY;
  }
  const float max = *std::max_element(logits.begin(), logits.end());
  double total = 0.0;
  for (float& z : logits) total += z = std::exp(z - max);
  // Inverse-CDF sampling from the softmax.
  double u = rng.uniform() * total, running = 0.0;
  int32_t next = -1;
  for (int64_t j = 0; j < V && (next < 0 || running <= u); ++j) {
    if (logits[static_cast<std::size_t>(j)] == 0.0f) continue;  // excluded by top-k
    running += logits[static_cast<std::size_t>(j)];
    next = static_cast<int32_t>(j);  // the last candidate so far; kept once running > u
  }
  return next;
}

// Each step runs the whole context again (no key/value cache: the model is small) and samples
// the next token from the last position's logits. Under tensor parallelism every rank of the
// group runs it alike and draws the same token from the same `rng`.
std::vector<int32_t> GPT::generate(std::vector<int32_t> tokens, int max_new_tokens, float temperature, int top_k,
                                   Rng& rng) {
  require_whole("generate");
  if (tokens.empty()) fail("generate: the prompt is empty");
  if (!(temperature > 0.0f)) fail("generate: temperature must be positive, got {}", temperature);
  autograd::NoGrad no_grad;
  const bool was_training = training_;
  training_ = false;
  std::vector<float> logits(static_cast<std::size_t>(config_.vocab_size));
  for (int step = 0; step < max_new_tokens; ++step) {
    const int64_t T = std::min<int64_t>(static_cast<int64_t>(tokens.size()), config_.block_size);
    std::span<const int32_t> context(tokens.data() + tokens.size() - T, static_cast<std::size_t>(T));
    next_token_logits(run_blocks(embed(context, 1, T)), T, temperature, logits);
    tokens.push_back(sample_token(logits, top_k, rng));
  }
  training_ = was_training;
  return tokens;
}

const std::array<BlockTensor, 12>& block_tensors() {
  using B = BlockWeights;
  using enum ParameterRole;
  static const std::array<BlockTensor, 12> tensors{{
      // name                 field                 rows cols bias   role
      {"ln_1.weight", &B::ln_1_weight, 1, 0, false, replicated},
      {"ln_1.bias", &B::ln_1_bias, 1, 0, true, replicated},
      {"attn.c_attn.weight", &B::c_attn_weight, 3, 1, false, fused_qkv_column},
      {"attn.c_attn.bias", &B::c_attn_bias, 3, 0, true, fused_qkv_column},
      {"attn.c_proj.weight", &B::attn_proj_weight, 1, 1, false, row},
      {"attn.c_proj.bias", &B::attn_proj_bias, 1, 0, true, replicated},  // added once, after g
      {"ln_2.weight", &B::ln_2_weight, 1, 0, false, replicated},
      {"ln_2.bias", &B::ln_2_bias, 1, 0, true, replicated},
      {"mlp.c_fc.weight", &B::c_fc_weight, 4, 1, false, column},
      {"mlp.c_fc.bias", &B::c_fc_bias, 4, 0, true, column},
      {"mlp.c_proj.weight", &B::mlp_proj_weight, 1, 4, false, row},
      {"mlp.c_proj.bias", &B::mlp_proj_bias, 1, 0, true, replicated},  // added once, after g
  }};
  return tensors;
}

}  // namespace nn
