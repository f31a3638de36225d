// The GPT against PyTorch (fixtures from scripts/make_gpt_fixture.py: nanoGPT's model on
// Debian's python3-torch), plus its own behaviour: parameter names and count,
// initialisation, generate(), AdamW and clipping, the LR schedule, learning a pattern.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <numeric>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "nn/adamw.hpp"
#include "nn/autocast.hpp"
#include "nn/autograd.hpp"
#include "nn/buffer_pool.hpp"
#include "nn/error.hpp"
#include "gemm_engine_from_environment.hpp"  // the engine this run tests
#include "nn/gpt.hpp"
#include "nn/grad_clip.hpp"
#include "nn/lr_schedule.hpp"
#include "nn/memory_estimate.hpp"
#include "nn/ops.hpp"
#include "nn/profile.hpp"
#include "nn/recompute.hpp"
#include "nn/safetensors.hpp"
#include "nn/threads.hpp"

namespace {

struct Fixture {
  nn::SafetensorsReader file;
  nn::GPTConfig config;
  std::vector<std::string> keys;  // nanoGPT's state_dict keys, in order
  explicit Fixture(const std::string& name) : file(std::string(NANODIST_FIXTURES) + "/" + name) {
    const auto& m = file.metadata();
    auto get = [&](const char* key) { return nlohmann::json::parse(m.at(key)); };
    nlohmann::json j;
    for (const char* key : {"n_layer", "n_head", "n_embd", "block_size", "vocab_size", "dropout", "bias", "n_experts",
                            "experts_per_token", "capacity_factor", "moe_every", "aux_loss_weight"})
      if (m.contains(key)) j[key] = get(key);  // the mixture's fields: in its fixtures only
    config = nn::GPTConfig::from_json(j);
    keys = get("state_dict_keys").get<std::vector<std::string>>();
  }
  std::vector<int32_t> ints(const std::string& name) const {
    auto v = file.ints(name);
    return {v.begin(), v.end()};
  }
  void load_weights(nn::GPT& model) const {
    for (auto& [name, t, role] : model.parameters()) {
      std::vector<float> w = file.floats("param." + name);
      std::copy(w.begin(), w.end(), t.data());
    }
  }
};

// |ours − reference| ≤ 1e-5 · max(|reference|, floor), floor = 0.1 · the largest |reference|
// in the tensor: relative for the tensor's large values, absolute (1e-6 of its largest) for
// small ones. Float32 sums of terms of the tensor's scale carry errors of a few 1e-7 of that
// scale (measured: at most 5.6e-7 here), which would be large relative to a value near zero.
struct Closeness {
  double worst = 0;  // the largest relative error
  int over = 0;      // elements over rtol
};
Closeness closeness(const float* ours, const std::vector<double>& reference, double rtol) {
  double largest = 0;
  for (double r : reference) largest = std::max(largest, std::abs(r));
  const double floor = 0.1 * largest;
  Closeness c;
  for (std::size_t i = 0; i < reference.size(); ++i) {
    double err = std::abs(ours[i] - reference[i]) / std::max(std::abs(reference[i]), floor);
    c.worst = std::max(c.worst, err);
    if (err > rtol) ++c.over;
  }
  return c;
}

void check_close(const std::string& what, const float* ours, const std::vector<double>& reference, double rtol = 1e-5) {
  const Closeness c = closeness(ours, reference, rtol);
  INFO(what << ": worst relative error " << c.worst << ", " << c.over << " of " << reference.size() << " elements over "
            << rtol);
  CHECK(c.over == 0);
}

// 3 blocks, 2 heads, 16 wide, block 8, vocabulary 11, with biases: every parameter kind, fast.
nn::GPTConfig three_small_blocks() {
  nn::GPTConfig config;
  config.n_layer = 3;
  config.n_head = 2;
  config.n_embd = 16;
  config.block_size = 8;
  config.vocab_size = 11;
  config.bias = true;
  return config;
}

}  // namespace

TEST_CASE("GPT matches PyTorch's nanoGPT: names, count, loss, every gradient") {
  for (const char* name : {"gpt_parity_bias.safetensors", "gpt_parity_nobias.safetensors"}) {
    INFO(name);
    Fixture fx(name);
    nn::GPT model(fx.config, 1);
    std::vector<std::string> ours;
    for (const auto& p : model.state_dict()) ours.push_back(p.name);
    CHECK(ours == fx.keys);
    CHECK(model.num_params() == std::stoll(fx.file.metadata().at("num_params")));
    CHECK(model.num_params(false) == std::stoll(fx.file.metadata().at("num_params_all")));

    fx.load_weights(model);
    std::vector<int32_t> ids = fx.ints("ids"), targets = fx.ints("targets");
    const auto& shape = fx.file.shape("ids");
    nn::Tensor loss = model.loss(ids, targets, shape[0], shape[1]);
    const double reference_loss = fx.file.doubles("loss")[0];
    CHECK(std::abs(loss.item() - reference_loss) <= 1e-5 * std::abs(reference_loss));
    nn::autograd::backward(loss);
    for (const auto& [pname, t, role] : model.state_dict())
      check_close("grad " + pname, t.grad(), fx.file.doubles("grad." + pname));
  }
}

// A mixture of experts against PyTorch's (scripts/nanogpt_reference.py, MixtureOfExperts):
// two choices a token in both blocks (biases), and one choice in every second block; capacity
// factor 1, so that assignments are dropped — the same number as PyTorch drops. The model's
// loss() is the cross-entropy; the balancing loss enters the gradients in backward (attach_loss)
// with weight aux_loss_weight, so every gradient is that of PyTorch's total loss.
TEST_CASE("a mixture-of-experts GPT matches PyTorch's: names, loss, balancing loss, dropped tokens, every gradient") {
  for (const char* name : {"gpt_parity_moe_top2.safetensors", "gpt_parity_moe_top1.safetensors"}) {
    INFO(name);
    Fixture fx(name);
    REQUIRE(fx.config.n_experts > 0);
    nn::GPT model(fx.config, 1);
    std::vector<std::string> ours;
    for (const auto& p : model.state_dict()) ours.push_back(p.name);
    CHECK(ours == fx.keys);
    CHECK(model.num_params() == std::stoll(fx.file.metadata().at("num_params")));

    fx.load_weights(model);
    std::vector<int32_t> ids = fx.ints("ids"), targets = fx.ints("targets");
    const auto& shape = fx.file.shape("ids");
    model.routing_stats().clear();
    nn::Tensor loss = model.loss(ids, targets, shape[0], shape[1]);
    const nn::RoutingStats& stats = model.routing_stats();
    const double aux = fx.file.doubles("aux_loss")[0];
    CHECK(stats.dropped == fx.file.ints("dropped")[0]);
    CHECK(stats.dropped > 0);  // capacity bit
    CHECK(std::abs(stats.aux_loss - aux) <= 1e-5 * aux);
    const double total = loss.item() + fx.config.aux_loss_weight * stats.aux_loss;
    const double reference_loss = fx.file.doubles("loss")[0];
    CHECK(std::abs(total - reference_loss) <= 1e-5 * std::abs(reference_loss));
    nn::autograd::backward(loss);
    for (const auto& [pname, t, role] : model.state_dict())
      check_close("grad " + pname, t.grad(), fx.file.doubles("grad." + pname));
  }
}

TEST_CASE("a mixture's config: its JSON round trip, dense without its fields, one line for a bad or partial one") {
  nn::GPTConfig moe;
  moe.n_experts = 4, moe.experts_per_token = 2, moe.capacity_factor = 1.5, moe.moe_every = 2, moe.n_layer = 4;
  CHECK(nn::GPTConfig::from_json(moe.to_json()) == moe);
  const nlohmann::json dense = nn::GPTConfig{}.to_json();
  CHECK(!dense.contains("n_experts"));  // a dense config stays nanoGPT's
  CHECK(nn::GPTConfig::from_json(dense).n_experts == 0);
  nlohmann::json zero = moe.to_json();
  zero["n_experts"] = 0;
  CHECK(nn::GPTConfig::from_json(zero) == nn::GPTConfig::from_json(dense));
  auto error_of = [](const nlohmann::json& j) {
    try {
      nn::GPTConfig::from_json(j);
    } catch (const nn::Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  nlohmann::json partial = moe.to_json();
  partial.erase("experts_per_token");
  CHECK(error_of(partial) == "GPT config: field 'experts_per_token' is missing");
  nlohmann::json orphan = dense;
  orphan["capacity_factor"] = 2.0;
  CHECK(error_of(orphan) == "GPT config: field 'capacity_factor' without 'n_experts' (the number of experts)");
  nlohmann::json text = moe.to_json();
  text["capacity_factor"] = "x";
  CHECK(error_of(text) == "GPT config: field 'capacity_factor' must be a number, got \"x\"");
  nlohmann::json negative = moe.to_json();
  negative["capacity_factor"] = -1;
  CHECK(error_of(negative) == "GPT config: capacity_factor must be a number > 0, got -1");
  nlohmann::json too_many = moe.to_json();
  too_many["experts_per_token"] = 5;
  CHECK(error_of(too_many) == "GPT config: experts_per_token must be from 1 to n_experts 4, got 5");
}

// docs/memory.md: a mixture block keeps, beyond a dense block, the router's logits and
// probabilities and, for each of a token's k choices, its row, fc, gelu and expert output,
// minus the dense MLP's fc and gelu (nn::moe_block_extra_floats_per_token). Measured as the
// tensor-parallel test measures a dense block: what forward leaves in use with 2 blocks minus
// with 1, with a capacity no sequence fills (f = E/k: nothing dropped, every choice kept).
TEST_CASE("activations a mixture-of-experts block keeps: the formula's, for every --recompute, k = 1 and 2, fp32 and bf16") {
  nn::GPTConfig config;
  config.n_head = 2, config.n_embd = 24, config.block_size = 10, config.vocab_size = 13, config.dropout = 0.1f;
  config.n_experts = 4;
  const int64_t B = 2, T = 10;
  std::vector<int32_t> ids(static_cast<std::size_t>(B * T)), targets(ids.size(), 4);
  for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>(i * 5 % 13);
  for (nn::PrecisionSetting precision : {nn::PrecisionSetting::fp32, nn::PrecisionSetting::bf16})
  for (int k : {1, 2})
    for (nn::Recompute recompute : {nn::Recompute::none, nn::Recompute::selective, nn::Recompute::full}) {
      config.experts_per_token = k;
      config.capacity_factor = static_cast<double>(config.n_experts) / k;
      const nn::ComputeModes modes = nn::resolve_modes(precision, nn::AttentionKernel::fused, recompute);
      double kept[2];
      for (int layers : {1, 2}) {
        config.n_layer = layers;
        nn::GPT model(config, 9, modes);
        nn::WeightCastCache casts_once;  // as the training loop: the step's bf16 weights stay
        const std::size_t before = nn::BufferPool::bytes_in_use();
        nn::Tensor loss = model.loss(ids, targets, B, T);
        kept[layers - 1] = static_cast<double>(nn::BufferPool::bytes_in_use() - before);
        CHECK(model.routing_stats().dropped == 0);
        for (const auto& [layer, tokens] : model.routing_stats().tokens_per_expert)  // every expert cast
          CHECK(std::count(tokens.begin(), tokens.end(), 0) == 0);
        nn::autograd::backward(loss);
      }
      const nn::Precision runs = modes.precision;
      const double per_token = nn::block_activation_floats_per_token(config, T, recompute, runs, 1, false) +
                               (recompute == nn::Recompute::full ? 0.0 : nn::moe_block_extra_floats_per_token(config, runs));
      // The block's weights cast to bf16 stay in the step's cache (its E experts, not the router).
      const double formula = 4.0 * B * T * per_token + nn::weight_cast_bytes(config, runs, 1, 1, false, 1);
      INFO(nn::name_of(runs) << ", k " << k << ", recompute " << nn::name_of(recompute) << ": a mixture block keeps "
                             << kept[1] - kept[0] << " bytes, the formula says " << formula);
      CHECK(kept[1] - kept[0] == Approx(formula).epsilon(1e-3));  // (+ the block's one-float balancing loss)
    }
}

// --precision bf16 against PyTorch's torch.autocast("cpu", bfloat16) on the same weights and
// batch. The two are not the same computation: autocast returns the products' outputs in bf16,
// so what follows them sees bf16 values, where ours stay fp32 (nn/autocast.hpp).
// Each side carries a handful of bf16 roundings (relative error ≤ 2⁻⁸ ≈ 0.4% each, random in
// sign) between the weights and a gradient, so the two agree as tensors to about 1% — and an
// element near zero can be off by more relative to itself. The bound, per gradient tensor:
// ‖ours − PyTorch's‖ ≤ 3% of ‖PyTorch's‖ (2-norms); the loss within 0.1%.
// Teeth: the same bf16 gradients are farther from the float64 reference than the fp32 test
// allows (1e-5), so bf16 really ran.
TEST_CASE("GPT in bf16 matches PyTorch's bf16 autocast: loss and every gradient within bf16's rounding") {
  for (const char* name : {"gpt_parity_bias.safetensors", "gpt_parity_nobias.safetensors"}) {
    INFO(name);
    Fixture fx(name);
    nn::GPT model(fx.config, 1, {.precision = nn::Precision::bf16});
    fx.load_weights(model);
    std::vector<int32_t> ids = fx.ints("ids"), targets = fx.ints("targets");
    const auto& shape = fx.file.shape("ids");
    nn::Tensor loss = model.loss(ids, targets, shape[0], shape[1]);
    nn::autograd::backward(loss);
    const double torch_bf16 = fx.file.doubles("bf16.loss")[0];
    INFO("loss: ours in bf16 " << loss.item() << ", PyTorch autocast " << torch_bf16);
    CHECK(std::abs(loss.item() - torch_bf16) <= 1e-3 * std::abs(torch_bf16));
    int over_fp32_bound = 0;
    for (const auto& [pname, t, role] : model.state_dict()) {
      const std::vector<double> torch16 = fx.file.doubles("bf16.grad." + pname);
      double difference = 0, size = 0;
      for (std::size_t i = 0; i < torch16.size(); ++i) {
        difference += (t.grad()[i] - torch16[i]) * (t.grad()[i] - torch16[i]);
        size += torch16[i] * torch16[i];
      }
      INFO("bf16 grad " << pname << ": ‖ours − PyTorch's‖ / ‖PyTorch's‖ = " << std::sqrt(difference / size));
      CHECK(std::sqrt(difference) <= 0.03 * std::sqrt(size));
      over_fp32_bound += closeness(t.grad(), fx.file.doubles("grad." + pname), 1e-5).over;
    }
    CHECK(over_fp32_bound > 0);
    for (auto& p : model.parameters()) p.tensor.zero_grad();
  }
}

TEST_CASE("AdamW and clipping match PyTorch's over two steps") {
  for (const char* name : {"gpt_parity_bias.safetensors", "gpt_parity_nobias.safetensors"}) {
    INFO(name);
    Fixture fx(name);
    nn::GPT model(fx.config, 1);
    fx.load_weights(model);
    const auto& m = fx.file.metadata();
    auto betas = nlohmann::json::parse(m.at("betas"));
    nn::AdamW opt(model.parameters(), {betas[0].get<float>(), betas[1].get<float>(), 1e-8f,
                                       nlohmann::json::parse(m.at("weight_decay")).get<float>()});
    auto rates = nlohmann::json::parse(m.at("learning_rates")).get<std::vector<float>>();
    std::vector<double> norms = fx.file.doubles("clip_norms");
    for (std::size_t s = 0; s < rates.size(); ++s) {
      for (auto& [pname, t, role] : model.parameters()) {
        std::vector<float> g = fx.file.floats("grad." + pname);
        std::copy(g.begin(), g.end(), t.grad());
      }
      const float norm = nn::grad_norm(model.parameters());
      const float before = nn::clip_grad_norm(model.parameters(), 0.5f * norm);
      CHECK(before == Approx(norms[s]).epsilon(1e-5));
      CHECK(nn::grad_norm(model.parameters()) == Approx(0.5f * norm).epsilon(1e-4));
      opt.step(rates[s]);
    }
    for (const auto& [pname, t, role] : model.state_dict())
      check_close("after AdamW " + pname, t.data(), fx.file.doubles("adamw." + pname));
  }
}

TEST_CASE("GPT: nanoGPT's initialisation and parameter count") {
  nn::GPTConfig c;  // the CPU recipe: 4 layers, 4 heads, 128 wide, block 64, vocab 65, no bias
  nn::GPT model(c, 123);
  const int64_t C = 128, L = 4;
  CHECK(model.num_params() == 65 * C + L * 12 * C * C + L * 2 * C + C);  // wte + blocks + ln_f
  CHECK(model.num_params(false) == model.num_params() + 64 * C);
  auto stddev = [&](const std::string& name) {
    auto v = model.parameter(name).values();
    double s = 0;
    for (float x : v) s += double(x) * x;
    return std::sqrt(s / v.size());
  };
  CHECK(stddev("transformer.h.0.attn.c_attn.weight") == Approx(0.02).epsilon(0.05));
  CHECK(stddev("transformer.h.1.mlp.c_proj.weight") == Approx(0.02 / std::sqrt(8.0)).epsilon(0.05));
  CHECK(stddev("transformer.wte.weight") == Approx(0.02).epsilon(0.05));
  for (float w : model.parameter("transformer.ln_f.weight").values()) CHECK(w == 1.0f);
  CHECK(model.parameter("lm_head.weight").same_storage(model.parameter("transformer.wte.weight")));
  nn::GPT same(c, 123);
  CHECK(std::equal(same.parameter("transformer.h.3.attn.c_proj.weight").data(),
                   same.parameter("transformer.h.3.attn.c_proj.weight").data() + C * C,
                   model.parameter("transformer.h.3.attn.c_proj.weight").data()));
  CHECK_THROWS_AS(nn::GPT(nn::GPTConfig{4, 3, 128}, 1), nn::Error);  // 128 not divisible by 3
}

TEST_CASE("generate: greedy equals argmax of the logits, context cropped to block_size") {
  nn::GPTConfig c{2, 2, 16, 8, 13};
  nn::GPT model(c, 5);
  nn::Rng rng(1);
  std::vector<int32_t> prompt{1, 2, 3};
  std::vector<int32_t> out = model.generate(prompt, 4, 1.0f, 1, rng);  // top_k = 1: greedy
  REQUIRE(out.size() == 7);
  CHECK(std::equal(prompt.begin(), prompt.end(), out.begin()));
  for (std::size_t n = 3; n < out.size(); ++n) {
    nn::autograd::NoGrad no_grad;
    model.set_training(false);
    nn::Tensor logits = model.forward(std::span(out).first(n), 1, static_cast<int64_t>(n));
    const float* last = logits.data() + (n - 1) * 13;
    CHECK(out[n] == std::max_element(last, last + 13) - last);
  }
  std::vector<int32_t> long_prompt(20, 4);  // longer than block_size 8: cropped, no error
  CHECK(model.generate(long_prompt, 3, 0.8f, 5, rng).size() == 23);
  std::vector<int32_t> sampled = model.generate(prompt, 50, 1.0f, 0, rng);
  for (int32_t t : sampled) CHECK((t >= 0 && t < 13));
  CHECK_THROWS_AS(model.generate(prompt, 1, 0.0f, 0, rng), nn::Error);
  CHECK_THROWS_AS(model.generate({}, 1, 1.0f, 0, rng), nn::Error);
  CHECK_THROWS_AS(model.forward(long_prompt, 1, 20), nn::Error);  // T > block_size
}

TEST_CASE("learning rate: warm-up, cosine decay, floor") {
  nn::LrSchedule s{1e-3f, 1e-4f, 10, 110};
  CHECK(s.at(0) == Approx(1e-3 * 1 / 11));
  CHECK(s.at(9) == Approx(1e-3 * 10 / 11));
  CHECK(s.at(10) == Approx(1e-3));
  CHECK(s.at(60) == Approx(1e-4 + 0.5 * (1e-3 - 1e-4)));  // half way: cos(π/2) = 0
  CHECK(s.at(110) == Approx(1e-4));
  CHECK(s.at(500) == Approx(1e-4));
  CHECK(nn::LrSchedule{2e-3f, 0, 0, 0, false}.at(77) == Approx(2e-3));
}

TEST_CASE("AdamW: no weight decay on 1-D tensors, decay on matrices") {
  nn::Tensor matrix = nn::Tensor::full({2, 2}, 1.0f, true), vector = nn::Tensor::full({2}, 1.0f, true);
  nn::AdamW opt({{"m", matrix}, {"v", vector}}, {0.9f, 0.999f, 1e-8f, 0.5f});
  matrix.grad();  // zero gradients: only weight decay can move anything
  vector.grad();
  opt.step(0.1f);
  for (float w : matrix.values()) CHECK(w == Approx(1.0f - 0.1f * 0.5f));
  for (float w : vector.values()) CHECK(w == 1.0f);
  CHECK(opt.steps() == 1);
}

TEST_CASE("GPT with fused elementwise kernels equals the separate ops: loss and every gradient, bit for bit") {
  nn::GPTConfig c{2, 2, 32, 16, 11, 0.1f, true};  // dropout on: the masks must match too
  std::vector<int32_t> ids(3 * 16), targets(3 * 16);
  for (std::size_t i = 0; i < ids.size(); ++i) {
    ids[i] = static_cast<int32_t>(i * 7 % 11);
    targets[i] = static_cast<int32_t>(i * 5 % 11);
  }
  const nn::Recompute recompute = GENERATE(nn::Recompute::none, nn::Recompute::selective, nn::Recompute::full);
  CAPTURE(nn::name_of(recompute));
  auto run = [&](nn::Fusion fusion) {
    nn::GPT model(c, 21, {.recompute = recompute, .fusion = fusion});
    nn::profile::reset();
    nn::profile::enable(true);  // to see which kernels ran
    nn::Tensor loss = model.loss(ids, targets, 3, 16);
    nn::autograd::backward(loss);
    nn::profile::enable(false);
    std::map<std::string, int64_t> forward_calls;  // kind → calls in forward (a replay is Pass::recompute)
    for (const auto& row : nn::profile::rows())
      if (row.pass == nn::profile::Pass::forward) forward_calls[row.kind] += row.calls;
    // 2 blocks: 5 layernorms (ln_1, ln_2 each, ln_f), 5 adds (the position's, 2 residual each).
    // Fused, each residual add runs in the layernorm after it, but block 0's ln_1 has none
    // before it; under --recompute full each block adds its MLP output itself (a replay starts
    // from the stream it stored), so only the ln_2s take theirs.
    struct Calls {
      int64_t add_layernorm, layernorm, add;
    };
    const bool fused = fusion == nn::Fusion::fused;
    const Calls expected = !fused                               ? Calls{0, 5, 5}
                           : recompute == nn::Recompute::full ? Calls{2, 3, 3}
                                                              : Calls{4, 1, 1};
    CHECK(forward_calls["add + layernorm"] == expected.add_layernorm);
    CHECK(forward_calls["layernorm"] == expected.layernorm);
    CHECK(forward_calls["add (residual, position)"] == expected.add);
    CHECK(forward_calls["bias + gelu"] == (fused ? 2 : 0));  // the model has biases
    std::vector<float> out{loss.item()};
    for (auto& p : model.parameters()) out.insert(out.end(), p.tensor.grad(), p.tensor.grad() + p.tensor.numel());
    return out;
  };
  const std::vector<float> fused = run(nn::Fusion::fused), separate = run(nn::Fusion::separate);
  REQUIRE(fused.size() == separate.size());
  CHECK(std::memcmp(fused.data(), separate.data(), fused.size() * sizeof(float)) == 0);
}

// The fused update walks all tensors laid end to end, each thread a share that starts and
// ends inside tensors; every element must still see the per-tensor loop's arithmetic.
TEST_CASE("fused AdamW (every tensor in one pass) equals the per-tensor loop bit for bit") {
  // 6 layers 34 wide, with biases: 76 tensors of odd sizes, ~87K elements: threaded, shares
  // start and end inside tensors, elements fall in vector bodies and scalar remainders
  nn::GPTConfig c{6, 2, 34, 16, 13, 0.0f, true};
  const int threads = nn::compute_threads();
  nn::set_compute_threads(3);  // shares that split tensors, on any machine (restored at the end)
  nn::GPT fused_model(c, 9), loop_model(c, 9);
  nn::AdamW fused(fused_model.parameters(), {0.9f, 0.95f, 1e-8f, 0.1f}, nn::AdamWKernel::fused);
  nn::AdamW loop(loop_model.parameters(), {0.9f, 0.95f, 1e-8f, 0.1f}, nn::AdamWKernel::per_tensor);
  nn::Rng rng(4);
  for (int step = 0; step < 3; ++step) {
    auto fp = fused_model.parameters(), lp = loop_model.parameters();
    for (std::size_t i = 0; i < fp.size(); ++i)
      for (int64_t j = 0; j < fp[i].tensor.numel(); ++j)
        fp[i].tensor.grad()[j] = lp[i].tensor.grad()[j] = rng.normal(0.0f, 1e-2f);
    fused.step(1e-2f);
    loop.step(1e-2f);
  }
  auto fp = fused_model.parameters(), lp = loop_model.parameters();
  int64_t elements = 0;
  for (std::size_t i = 0; i < fp.size(); ++i) {
    INFO(fp[i].name);
    const int64_t n = fp[i].tensor.numel();
    elements += n;
    CHECK(std::memcmp(fp[i].tensor.data(), lp[i].tensor.data(), n * sizeof(float)) == 0);
    CHECK(std::memcmp(fused.exp_avg()[i].data(), loop.exp_avg()[i].data(), n * sizeof(float)) == 0);
    CHECK(std::memcmp(fused.exp_avg_sq()[i].data(), loop.exp_avg_sq()[i].data(), n * sizeof(float)) == 0);
  }
  CHECK(elements > 65536);  // above the threading threshold
  CHECK(elements % 16 != 0);
  nn::GPT untouched(c, 9);   // teeth: the update moved the weights
  CHECK(std::memcmp(untouched.parameters()[0].tensor.data(), fp[0].tensor.data(), 4 * sizeof(float)) != 0);
  nn::set_compute_threads(threads);
}

// ZeRO steps each rank's shard with adamw_update on sub-ranges that start anywhere: an
// element's update must not depend on where its range starts (vector body or remainder).
TEST_CASE("adamw_update over pieces split at odd places equals one update over the whole") {
  const int64_t n = 1000;
  nn::Rng rng(6);
  std::vector<float> w(n), g(n), m(n), v(n);
  for (int64_t i = 0; i < n; ++i) {
    w[i] = rng.normal(0.0f, 1.0f);
    g[i] = rng.normal(0.0f, 0.1f);
    m[i] = rng.normal(0.0f, 0.01f);
    v[i] = std::abs(rng.normal(0.0f, 1e-3f));
  }
  std::vector<float> w2 = w, m2 = m, v2 = v;
  const nn::AdamWScalars s = nn::AdamWScalars::at({0.9f, 0.95f, 1e-8f, 0.1f}, 3, 1e-2f);
  nn::adamw_update(w.data(), g.data(), m.data(), v.data(), n, s.decay(true), s);
  int64_t from = 0;
  for (int64_t piece : {1, 7, 13, 35, 944}) {  // ends at 1, 8, 21, 56, 1000
    nn::adamw_update(w2.data() + from, g.data() + from, m2.data() + from, v2.data() + from, piece, s.decay(true), s);
    from += piece;
  }
  REQUIRE(from == n);
  CHECK(std::memcmp(w.data(), w2.data(), n * sizeof(float)) == 0);
  CHECK(std::memcmp(m.data(), m2.data(), n * sizeof(float)) == 0);
  CHECK(std::memcmp(v.data(), v2.data(), n * sizeof(float)) == 0);
}

TEST_CASE("training: a small GPT learns a repeating sequence; no memory taken after step one") {
  nn::GPTConfig c{2, 2, 32, 16, 7, 0.1f, true};
  nn::GPT model(c, 3);
  nn::AdamW opt(model.parameters(), {0.9f, 0.95f, 1e-8f, 0.1f});
  std::vector<int32_t> ids(4 * 16), targets(4 * 16);
  for (int b = 0; b < 4; ++b)
    for (int t = 0; t < 16; ++t) {
      ids[b * 16 + t] = (b + t) % 7;
      targets[b * 16 + t] = (b + t + 1) % 7;
    }
  float first = 0, last = 0;
  std::size_t allocations = 0;
  for (int step = 0; step < 60; ++step) {
    nn::Tensor loss = model.loss(ids, targets, 4, 16);
    if (step == 0) first = loss.item();
    last = loss.item();
    nn::autograd::backward(loss);
    nn::clip_grad_norm(model.parameters(), 1.0f);
    opt.step(3e-3f);
    opt.zero_grad();
    if (step == 1) allocations = nn::BufferPool::system_allocations();
  }
  CHECK(first > 1.5f);  // about log(7) ≈ 1.95 at the start
  CHECK(last < 0.2f);
  CHECK(nn::BufferPool::system_allocations() == allocations);
}

TEST_CASE("training in bf16: no memory taken after step one either (the casts come from the pool)") {
  nn::GPTConfig c{2, 2, 32, 16, 7, 0.1f, true};
  nn::GPT model(c, 3, {.precision = nn::Precision::bf16});
  nn::AdamW opt(model.parameters(), {0.9f, 0.95f, 1e-8f, 0.1f});
  std::vector<int32_t> ids(4 * 16), targets(4 * 16);
  for (int i = 0; i < 4 * 16; ++i) ids[i] = i % 7, targets[i] = (i + 1) % 7;
  float first = 0, last = 0;
  std::size_t allocations = 0;
  for (int step = 0; step < 20; ++step) {
    nn::WeightCastCache casts;  // as the trainers: each step's weights cast once
    nn::Tensor loss = model.loss(ids, targets, 4, 16);
    (step == 0 ? first : last) = loss.item();
    nn::autograd::backward(loss);
    nn::clip_grad_norm(model.parameters(), 1.0f);
    opt.step(3e-3f);
    opt.zero_grad();
    if (step == 1) allocations = nn::BufferPool::system_allocations();
  }
  CHECK(last < first);  // it trains
  CHECK(nn::BufferPool::system_allocations() == allocations);
}

TEST_CASE("grad-ready hook: every parameter reported once, last layer first, with its final gradient") {
  const nn::GPTConfig config = three_small_blocks();
  nn::GPT model(config, 5);
  std::vector<int32_t> ids(2 * 8), targets(2 * 8);
  for (std::size_t i = 0; i < ids.size(); ++i) {
    ids[i] = static_cast<int32_t>(i * 7 % 11);
    targets[i] = static_cast<int32_t>((i * 7 + 3) % 11);
  }
  // Snapshots of each group's gradients at the moment the hook reports it.
  std::vector<std::vector<int>> order;
  std::vector<std::vector<float>> snapshot(model.parameters().size());
  model.set_grad_ready_hook([&](std::span<const int> group) {
    order.emplace_back(group.begin(), group.end());
    for (int p : group) {
      auto g = model.parameters()[static_cast<std::size_t>(p)].tensor.grad_values();
      snapshot[static_cast<std::size_t>(p)].assign(g.begin(), g.end());
    }
  });
  nn::Tensor loss = model.loss(ids, targets, 2, 8);
  nn::autograd::backward(loss);
  model.set_grad_ready_hook({});

  // ln_f, block 2, block 1, block 0, then the embeddings (wte also serves lm_head).
  REQUIRE(order.size() == 5);
  CHECK(model.parameters()[static_cast<std::size_t>(order.front().front())].name == "transformer.ln_f.weight");
  CHECK(model.parameters()[static_cast<std::size_t>(order[1].front())].name == "transformer.h.2.ln_1.weight");
  CHECK(model.parameters()[static_cast<std::size_t>(order.back().front())].name == "transformer.wte.weight");
  std::vector<int> seen;
  for (auto& group : order) seen.insert(seen.end(), group.begin(), group.end());
  std::sort(seen.begin(), seen.end());
  std::vector<int> all(model.parameters().size());
  std::iota(all.begin(), all.end(), 0);
  CHECK(seen == all);
  // Nothing changed a gradient after it was reported final.
  for (std::size_t p = 0; p < snapshot.size(); ++p) {
    auto g = model.parameters()[p].tensor.grad_values();
    INFO(model.parameters()[p].name);
    CHECK(std::equal(g.begin(), g.end(), snapshot[p].begin(), snapshot[p].end()));
  }
  // No markers under NoGrad (evaluation).
  order.clear();
  model.set_grad_ready_hook([&](std::span<const int>) { order.emplace_back(); });
  {
    nn::autograd::NoGrad no_grad;
    model.loss(ids, targets, 2, 8);
  }
  CHECK(nn::autograd::tape_size() == 0);
  model.set_grad_ready_hook({});
}

TEST_CASE("GPT in parts: three stages start from the whole model's numbers and give its loss and gradients") {
  const nn::GPTConfig config = three_small_blocks();
  nn::GPT whole(config, 7);
  // Stage 0: embedding + block 0; stage 1: block 1; stage 2: block 2 + head (own copy of wte).
  nn::GPT first(config, 7, {true, {{0, 1}}, false}), middle(config, 7, {false, {{1, 2}}, false}),
      last(config, 7, {false, {{2, 3}}, true});
  auto value_of = [](nn::GPT& model, const std::string& name) {
    auto v = model.parameter(name).values();
    return std::vector<float>(v.begin(), v.end());
  };
  std::size_t held = 0;
  for (nn::GPT* part : {&first, &middle, &last})
    for (auto& [name, t, role] : part->parameters()) {
      INFO(name);
      CHECK(value_of(*part, name) == value_of(whole, name));  // bit-identical initialisation
      ++held;
    }
  CHECK(held == whole.parameters().size() + 1);  // wte twice: first and last stage
  CHECK(last.parameters().front().name == "transformer.wte.weight");
  CHECK(middle.num_params(false) == 12 * 16 * 16 + 13 * 16);
  CHECK_THROWS_WITH(middle.forward({}, 1, 1), Catch::Contains("needs the whole model"));
  CHECK_THROWS_WITH(nn::GPT(config, 7, {true, {{2, 5}}, true}), Catch::Contains("not a range of the 3 blocks"));

  const std::vector<int32_t> ids = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 0, 1},
                             targets = {2, 3, 4, 5, 6, 7, 8, 9, 10, 0, 1, 2};
  nn::Tensor reference = whole.loss(ids, targets, 2, 6);
  nn::autograd::backward(reference);

  // The pipeline by hand: each stage's forward on its own tape, activations handed on as
  // fresh leaves (as if received), then the backwards in reverse, each from the gradient
  // of its output that the next stage "sent back".
  nn::autograd::Tape tapes[3];
  auto received = [](const nn::Tensor& sent) {  // a copy that requires a gradient: what recv() gives
    nn::Tensor x = nn::Tensor::empty(sent.shape(), true);
    std::copy(sent.data(), sent.data() + sent.numel(), x.data());
    return x;
  };
  nn::Tensor out0, in1, out1, in2, loss;
  {
    nn::autograd::TapeScope scope(tapes[0]);
    out0 = first.run_blocks(first.embed(ids, 2, 6));
  }
  in1 = received(out0);
  {
    nn::autograd::TapeScope scope(tapes[1]);
    out1 = middle.run_blocks(in1);
  }
  in2 = received(out1);
  {
    nn::autograd::TapeScope scope(tapes[2]);
    loss = last.head_loss(last.run_blocks(in2), targets);
  }
  CHECK(loss.item() == reference.item());
  {
    nn::autograd::TapeScope scope(tapes[2]);
    nn::autograd::backward(loss);
  }
  {
    nn::autograd::TapeScope scope(tapes[1]);
    nn::autograd::backward(out1, in2.grad_values());
  }
  {
    nn::autograd::TapeScope scope(tapes[0]);
    nn::autograd::backward(out0, in1.grad_values());
  }
  auto grad_of = [](nn::GPT& model, const std::string& name) {
    auto g = model.parameter(name).grad_values();
    return std::vector<float>(g.begin(), g.end());
  };
  for (nn::GPT* part : {&first, &middle, &last})
    for (auto& [name, t, role] : part->parameters()) {
      if (name == "transformer.wte.weight") continue;
      INFO(name);
      const auto ours = grad_of(*part, name), theirs = grad_of(whole, name);
      for (std::size_t i = 0; i < ours.size(); ++i) CHECK(ours[i] == Approx(theirs[i]).margin(1e-6));
    }
  // The tied embedding: the whole model's wte gradient is the sum of the two copies'.
  const auto g_first = grad_of(first, "transformer.wte.weight"), g_last = grad_of(last, "transformer.wte.weight");
  const auto g_whole = grad_of(whole, "transformer.wte.weight");
  for (std::size_t i = 0; i < g_whole.size(); ++i) CHECK(g_first[i] + g_last[i] == Approx(g_whole[i]).margin(1e-6));
}
