// Every op: its gradient against finite differences (odd sizes: not multiples of the
// vector width), its forward value against a plain formula, and autograd's rules.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "nn/autocast.hpp"
#include "nn/buffer_pool.hpp"
#include "nn/compute_modes.hpp"
#include "nn/error.hpp"
#include "gemm_engine_from_environment.hpp"  // the engine this run tests
#include "nn/moe_mlp.hpp"
#include "nn/onednn_gemm.hpp"
#include "nn/philox.hpp"
#include "nn/rng.hpp"
#include "nn/threads.hpp"
#include "nn_test_util.hpp"
#include "numeric/bf16.hpp"

using nn::Tensor;
using nn_test::check_gradients;
using nn_test::random_tensor;

TEST_CASE("matmul and linear: gradients") {
  check_gradients([](auto& in) { return nn::matmul(in[0], in[1]); },
                  {random_tensor({5, 7}, 1), random_tensor({7, 3}, 2)});
  check_gradients([](auto& in) { return nn::linear(in[0], in[1], in[2]); },
                  {random_tensor({2, 3, 13}, 3), random_tensor({9, 13}, 4), random_tensor({9}, 5)});
  check_gradients([](auto& in) { return nn::linear(in[0], in[1]); },
                  {random_tensor({17, 19}, 6), random_tensor({5, 19}, 7)});
}

TEST_CASE("linear: forward equals x·Wᵀ + b") {
  Tensor x = random_tensor({3, 5}, 1), w = random_tensor({4, 5}, 2), b = random_tensor({4}, 3);
  Tensor y = nn::linear(x, w, b);
  REQUIRE(y.shape() == nn::Shape{3, 4});
  for (int r = 0; r < 3; ++r)
    for (int o = 0; o < 4; ++o) {
      double expected = b.data()[o];
      for (int i = 0; i < 5; ++i) expected += x.data()[r * 5 + i] * w.data()[o * 5 + i];
      CHECK(y.data()[r * 4 + o] == Approx(expected).epsilon(1e-5));
    }
  nn::autograd::clear_tape();
}

TEST_CASE("add (broadcast), mul, scale: gradients") {
  check_gradients([](auto& in) { return nn::add(in[0], in[1]); },
                  {random_tensor({3, 5, 7}, 1), random_tensor({5, 7}, 2)});
  check_gradients([](auto& in) { return nn::add(in[0], in[1]); }, {random_tensor({4, 7}, 3), random_tensor({7}, 4)});
  check_gradients([](auto& in) { return nn::add(in[0], in[1]); }, {random_tensor({6}, 5), random_tensor({6}, 6)});
  check_gradients([](auto& in) { return nn::mul(in[0], in[1]); },
                  {random_tensor({3, 11}, 7), random_tensor({3, 11}, 8)});
  check_gradients([](auto& in) { return nn::scale(in[0], -2.5f); }, {random_tensor({13}, 9)});
  CHECK_THROWS_AS(nn::add(random_tensor({3, 5}, 1), random_tensor({3}, 2)), nn::Error);
  nn::autograd::clear_tape();
}

TEST_CASE("gelu: exact erf form, gradient") {
  Tensor x = Tensor::from(std::vector<float>{-3.0f, -1.0f, 0.0f, 0.5f, 1.0f, 2.0f}, {6});
  Tensor y = nn::gelu(x);
  const float expected[] = {-0.00404969f, -0.15865526f, 0.0f, 0.34573123f, 0.84134474f, 1.95449974f};
  for (int i = 0; i < 6; ++i) CHECK(y.data()[i] == Approx(expected[i]).margin(1e-6));
  check_gradients([](auto& in) { return nn::gelu(in[0]); }, {random_tensor({3, 17}, 1, 2.0f)});
}

// c_fc's bias inside GELU's pass: against the bias added by linear (the GEMM adds it to the
// product's sum, one rounding) or by add, then gelu — the same bits forward and in x's
// gradient, with x's gradient fresh or adding up (x used twice), and with the bias or x
// frozen; the bias's gradient the same bits as linear's (the same row sums), and within
// float rounding of add's (which sums its rows in another order). Large enough to thread;
// 67 columns: rows that are not whole vectors.
TEST_CASE("bias_gelu (the bias fused into GELU's pass) equals the bias added, then gelu, bit for bit") {
  auto same = [](const float* p, const float* q, int64_t n) { return std::memcmp(p, q, n * sizeof(float)) == 0; };
  const nn::Shape shape{4, 130, 67};
  Tensor r = random_tensor(shape, 5, 1.0f, false);
  for (bool x_twice : {false, true}) {
    INFO((x_twice ? "x also used elsewhere: its gradient adds up" : "x used once"));
    Tensor x1 = random_tensor(shape, 1, 2.0f), b1 = random_tensor({67}, 2);
    Tensor x2 = x1.clone(), b2 = b1.clone();
    x2.set_requires_grad(true);
    b2.set_requires_grad(true);
    auto loss_of = [&](const Tensor& y, const Tensor& x) {
      Tensor loss = nn::sum(nn::mul(y, r));
      return x_twice ? nn::add(loss, nn::sum(nn::mul(x, r))) : loss;
    };
    Tensor fused_y = nn::bias_gelu(x1, b1);
    Tensor fused_loss = loss_of(fused_y, x1);
    nn::autograd::backward(fused_loss);
    Tensor separate_y = nn::gelu(nn::add(x2, b2));
    Tensor separate_loss = loss_of(separate_y, x2);
    nn::autograd::backward(separate_loss);
    CHECK(same(fused_y.data(), separate_y.data(), fused_y.numel()));
    CHECK(same(x1.grad(), x2.grad(), x1.numel()));
    for (int64_t c = 0; c < 67; ++c)  // sums of 520 terms of size ≤ ~2
      CHECK(b1.grad()[c] == Approx(b2.grad()[c]).margin(1e-4));
  }
  SECTION("against linear with its bias, as the MLP had it") {
    Tensor h1 = random_tensor({3, 50, 40}, 6), w1 = random_tensor({67, 40}, 7), b1 = random_tensor({67}, 8);
    Tensor h2 = h1.clone(), w2 = w1.clone(), b2 = b1.clone();
    for (Tensor* t : {&h2, &w2, &b2}) t->set_requires_grad(true);
    Tensor r2 = random_tensor({3, 50, 67}, 9, 1.0f, false);
    Tensor fused_y = nn::bias_gelu(nn::linear(h1, w1), b1);
    Tensor fused_loss = nn::sum(nn::mul(fused_y, r2));
    nn::autograd::backward(fused_loss);
    Tensor separate_y = nn::gelu(nn::linear(h2, w2, b2));
    Tensor separate_loss = nn::sum(nn::mul(separate_y, r2));
    nn::autograd::backward(separate_loss);
    CHECK(same(fused_y.data(), separate_y.data(), fused_y.numel()));
    for (auto [got, want] : {std::pair{&h1, &h2}, std::pair{&w1, &w2}, std::pair{&b1, &b2}})
      CHECK(same(got->grad(), want->grad(), got->numel()));
  }
  SECTION("a frozen bias or a frozen x: the other's gradient alone") {
    Tensor x = random_tensor({5, 67}, 10), frozen_b = random_tensor({67}, 11, 1.0f, false);
    Tensor x2 = x.clone();
    x2.set_requires_grad(true);
    Tensor r3 = random_tensor({5, 67}, 12, 1.0f, false);
    Tensor l1 = nn::sum(nn::mul(nn::bias_gelu(x, frozen_b), r3));
    nn::autograd::backward(l1);
    Tensor l2 = nn::sum(nn::mul(nn::gelu(nn::add(x2, frozen_b)), r3));
    nn::autograd::backward(l2);
    CHECK(same(x.grad(), x2.grad(), x.numel()));
    Tensor frozen_x = random_tensor({5, 67}, 13, 1.0f, false), b = random_tensor({67}, 14), b2 = b.clone();
    b2.set_requires_grad(true);
    Tensor l3 = nn::sum(nn::mul(nn::bias_gelu(frozen_x, b), r3));
    nn::autograd::backward(l3);
    Tensor l4 = nn::sum(nn::mul(nn::gelu(nn::add(frozen_x, b2)), r3));
    nn::autograd::backward(l4);
    for (int64_t c = 0; c < 67; ++c) CHECK(b.grad()[c] == Approx(b2.grad()[c]).margin(1e-5));
    CHECK_FALSE(nn::bias_gelu(frozen_x, frozen_b).requires_grad());
    nn::autograd::clear_tape();
  }
  check_gradients([](auto& in) { return nn::bias_gelu(in[0], in[1]); },
                  {random_tensor({2, 3, 19}, 15, 2.0f), random_tensor({19}, 16)});
  CHECK_THROWS_AS(nn::bias_gelu(random_tensor({2, 4}, 1), random_tensor({3}, 2)), nn::Error);
  nn::autograd::clear_tape();
}

TEST_CASE("ops over a last dimension of 0 refuse it with an error (no division by zero)") {
  const nn::Tensor empty_rows = nn::Tensor::zeros({3, 0}), no_weights = nn::Tensor::zeros({0});
  const std::vector<int32_t> targets{0, 0, 0};
  auto refused = [](const char* op) { return Catch::Contains(std::string(op) + ": input [3, 0] has an empty last dimension"); };
  CHECK_THROWS_WITH(nn::bias_gelu(empty_rows, no_weights), refused("bias_gelu"));
  CHECK_THROWS_WITH(nn::linear(empty_rows, nn::Tensor::zeros({4, 0})), refused("linear"));
  CHECK_THROWS_WITH(nn::layernorm(empty_rows, no_weights), refused("layernorm"));
  CHECK_THROWS_WITH(nn::add_layernorm(empty_rows, empty_rows, no_weights), refused("add_layernorm"));
  CHECK_THROWS_WITH(nn::softmax(empty_rows), refused("softmax"));
  CHECK_THROWS_WITH(nn::cross_entropy(empty_rows, targets), refused("cross_entropy"));
  CHECK_THROWS_WITH(nn::causal_mask(nn::Tensor::zeros({3, 0, 0})), Catch::Contains("causal_mask: input [3, 0, 0] has an empty last dimension"));
  CHECK_THROWS_WITH(nn::batched_matmul(nn::Tensor::zeros({2, 3, 0}), nn::Tensor::zeros({2, 0, 4}), false),
                    Catch::Contains("batched_matmul: [2, 3, 0] holds empty matrices"));
}

#if defined(NANODIST_TEST_ONEDNN)
// generate() runs every sequence length up to block_size: one more set of shapes each.
TEST_CASE("oneDNN's caches of primitives stay bounded, and a primitive the shared cache forgets still runs") {
  REQUIRE(nn::onednn_available());
  constexpr int64_t kShapes = 1100, N = 2, K = 3;  // more shapes than a cache keeps (1024)
  std::vector<float> a(kShapes * K), b(K * N);
  for (std::size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>(i % 7) - 3.0f;
  for (std::size_t i = 0; i < b.size(); ++i) b[i] = static_cast<float>(i) * 0.5f;
  // C = A[0:M] · B for M in [first, last]; true when every row is right (small integers and
  // halves: exact). Each M is another shape, so another primitive.
  auto products_right = [&](int64_t first, int64_t last) {
    std::vector<float> c(kShapes * N);
    bool right = true;
    for (int64_t M = first; M <= last; ++M) {
      nn::onednn_gemm_f32(false, false, M, N, K, 1.0f, a.data(), K, b.data(), N, 0.0f, c.data(), N);
      for (int64_t m = 0; m < M; ++m)
        for (int64_t n = 0; n < N; ++n) {
          float expected = 0.0f;
          for (int64_t k = 0; k < K; ++k) expected += a[m * K + k] * b[k * N + n];
          right &= c[m * N + n] == expected;
        }
    }
    return right;
  };
  // This thread binds 1000 shapes; another thread then makes 100 more, so the shared cache
  // overflows and forgets every primitive this thread still holds bound.
  CHECK(products_right(1, 1000));
  bool other_right = false;
  std::size_t other_bound = 0;
  std::thread other([&] {
    other_right = products_right(1001, kShapes);
    other_bound = nn::onednn_bound_products_on_this_thread();
  });
  other.join();
  CHECK(other_right);
  CHECK(other_bound == kShapes - 1000);
  CHECK(nn::onednn_cached_products() <= 1024);
  CHECK(products_right(1, 10));  // bound here before the cache forgot them: still alive
  CHECK(products_right(1001, kShapes));  // this thread's own set now passes 1024 too
  CHECK(nn::onednn_bound_products_on_this_thread() <= 1024);
  CHECK(products_right(1, 5));  // after both caches forgot them: made again
}
#endif

// The residual stream as a block uses it: x also feeds something else (its gradient adds up),
// s = x + h goes on (a later use's gradient) and into the layernorm. Large enough to thread.
TEST_CASE("add_layernorm (the residual add fused into the layernorm) equals add then layernorm bit for bit") {
  for (bool with_bias : {true, false}) {
    INFO("bias " << with_bias);
    const nn::Shape shape{4, 64, 160};
    std::vector<Tensor> fused_in{random_tensor(shape, 1), random_tensor(shape, 2), random_tensor({160}, 3),
                                 with_bias ? random_tensor({160}, 4) : Tensor()};
    std::vector<Tensor> separate_in;
    for (const Tensor& t : fused_in) {
      separate_in.push_back(t.defined() ? t.clone() : Tensor());
      if (t.defined()) separate_in.back().set_requires_grad(true);
    }
    Tensor r1 = random_tensor(shape, 5, 1.0f, false), r2 = random_tensor(shape, 6, 1.0f, false),
           r3 = random_tensor(shape, 7, 1.0f, false);
    auto loss_of = [&](Tensor x, Tensor s, Tensor y) {  // Σ y⊙r1 + Σ s⊙r2 + Σ x⊙r3
      return nn::add(nn::add(nn::sum(nn::mul(y, r1)), nn::sum(nn::mul(s, r2))), nn::sum(nn::mul(x, r3)));
    };
    auto [s_fused, y_fused] = nn::add_layernorm(fused_in[0], fused_in[1], fused_in[2], fused_in[3]);
    Tensor fused_loss = loss_of(fused_in[0], s_fused, y_fused);
    nn::autograd::backward(fused_loss);
    Tensor s_separate = nn::add(separate_in[0], separate_in[1]);
    Tensor y_separate = nn::layernorm(s_separate, separate_in[2], separate_in[3]);
    Tensor separate_loss = loss_of(separate_in[0], s_separate, y_separate);
    nn::autograd::backward(separate_loss);
    auto same = [](const float* p, const float* q, int64_t n) { return std::memcmp(p, q, n * sizeof(float)) == 0; };
    CHECK(same(s_fused.data(), s_separate.data(), s_fused.numel()));
    CHECK(same(y_fused.data(), y_separate.data(), y_fused.numel()));
    for (std::size_t i = 0; i < fused_in.size(); ++i) {
      if (!fused_in[i].defined()) continue;
      INFO("gradient of input " << i);
      CHECK(same(fused_in[i].grad(), separate_in[i].grad(), fused_in[i].numel()));
    }
  }
  SECTION("s unused after it, x without a gradient, x and h one tensor: as add then layernorm") {
    Tensor w = random_tensor({40}, 12), b = random_tensor({40}, 13), x = random_tensor({3, 40}, 14, 1.0f, false);
    Tensor h = random_tensor({3, 40}, 15), w2 = w.clone(), b2 = b.clone(), h2 = h.clone();
    for (Tensor* t : {&w2, &b2, &h2}) t->set_requires_grad(true);
    Tensor r = random_tensor({3, 40}, 16, 1.0f, false);
    auto [s1, y1] = nn::add_layernorm(x, h, w, b);  // only y is used
    Tensor fused_loss = nn::sum(nn::mul(y1, r));
    nn::autograd::backward(fused_loss);
    Tensor y2 = nn::layernorm(nn::add(x, h2), w2, b2);
    Tensor separate_loss = nn::sum(nn::mul(y2, r));
    nn::autograd::backward(separate_loss);
    for (auto [got, want] : {std::pair{&h, &h2}, std::pair{&w, &w2}, std::pair{&b, &b2}})
      CHECK(std::memcmp(got->grad(), want->grad(), got->numel() * sizeof(float)) == 0);
    Tensor same = random_tensor({3, 40}, 17), same2 = same.clone();  // x = h: both gradients land in one
    same2.set_requires_grad(true);
    auto [s3, y3] = nn::add_layernorm(same, same, w, b);
    Tensor loss3 = nn::sum(nn::mul(y3, r));
    nn::autograd::backward(loss3);
    Tensor y4 = nn::layernorm(nn::add(same2, same2), w2, b2);
    Tensor loss4 = nn::sum(nn::mul(y4, r));
    nn::autograd::backward(loss4);
    CHECK(std::memcmp(same.grad(), same2.grad(), same.numel() * sizeof(float)) == 0);
    Tensor frozen = random_tensor({3, 40}, 18, 1.0f, false);  // only the weights learn: s needs no gradient
    CHECK_FALSE(nn::add_layernorm(frozen, frozen, w, b).first.requires_grad());
    nn::autograd::clear_tape();
  }
  check_gradients(
      [](auto& in) {
        auto [s, y] = nn::add_layernorm(in[0], in[1], in[2], in[3]);
        return nn::add(nn::mul(s, in[1]), y);  // s used after, as the residual stream is
      },
      {random_tensor({2, 5, 19}, 8), random_tensor({2, 5, 19}, 9), random_tensor({19}, 10), random_tensor({19}, 11)});
  CHECK_THROWS_AS(nn::add_layernorm(random_tensor({2, 4}, 1), random_tensor({4, 2}, 2), random_tensor({4}, 3)),
                  nn::Error);
}

TEST_CASE("layernorm: normalised rows, gradients with and without bias") {
  Tensor x = random_tensor({4, 19}, 1, 3.0f, false);
  Tensor y = nn::layernorm(x, Tensor::full({19}, 1.0f), Tensor::zeros({19}));
  for (int r = 0; r < 4; ++r) {
    double m = 0, v = 0;
    for (int j = 0; j < 19; ++j) m += y.data()[r * 19 + j];
    m /= 19;
    for (int j = 0; j < 19; ++j) v += std::pow(y.data()[r * 19 + j] - m, 2);
    CHECK(m == Approx(0.0).margin(1e-5));
    CHECK(v / 19 == Approx(1.0).epsilon(1e-3));  // var/(var+eps) with eps = 1e-5
  }
  check_gradients([](auto& in) { return nn::layernorm(in[0], in[1], in[2]); },
                  {random_tensor({2, 5, 19}, 2), random_tensor({19}, 3), random_tensor({19}, 4)});
  check_gradients([](auto& in) { return nn::layernorm(in[0], in[1]); },
                  {random_tensor({3, 33}, 5), random_tensor({33}, 6)});
}

TEST_CASE("softmax: rows sum to one, gradient") {
  Tensor y = nn::softmax(random_tensor({4, 13}, 1, 3.0f, false));
  for (int r = 0; r < 4; ++r) {
    double s = 0;
    for (int j = 0; j < 13; ++j) s += y.data()[r * 13 + j];
    CHECK(s == Approx(1.0).epsilon(1e-6));
  }
  check_gradients([](auto& in) { return nn::softmax(in[0]); }, {random_tensor({4, 13}, 2)});
}

// Attention computed the slow, obvious way in double: the reference for the fused op.
std::vector<double> naive_attention(const Tensor& qkv, int H) {
  const int64_t B = qkv.size(0), T = qkv.size(1), C = qkv.size(2) / 3, hs = C / H;
  std::vector<double> y(B * T * C, 0.0);
  auto at = [&](int64_t b, int64_t t, int64_t c) { return static_cast<double>(qkv.data()[(b * T + t) * 3 * C + c]); };
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t t = 0; t < T; ++t) {
        std::vector<double> w(t + 1);
        for (int64_t j = 0; j <= t; ++j) {
          double s = 0;
          for (int64_t d = 0; d < hs; ++d) s += at(b, t, h * hs + d) * at(b, j, C + h * hs + d);
          w[j] = s / std::sqrt(static_cast<double>(hs));
        }
        double max = *std::max_element(w.begin(), w.end()), total = 0;
        for (double& v : w) total += v = std::exp(v - max);
        for (int64_t j = 0; j <= t; ++j)
          for (int64_t d = 0; d < hs; ++d)
            y[(b * T + t) * C + h * hs + d] += w[j] / total * at(b, j, 2 * C + h * hs + d);
      }
  return y;
}

TEST_CASE("causal self-attention: forward equals the naive formula") {
  // T = 150: three 64-row causal blocks, the last ragged (nn/ops/attention.cpp skips the rest)
  for (auto [B, T, C, H] : {std::tuple{2, 7, 12, 3}, std::tuple{1, 5, 10, 2}, std::tuple{3, 17, 8, 1},
                            std::tuple{1, 150, 12, 3}}) {
    Tensor qkv = random_tensor({B, T, 3 * C}, B + T, 1.0f, false);
    Tensor y = nn::causal_self_attention(qkv, H);
    std::vector<double> expected = naive_attention(qkv, H);
    for (std::size_t i = 0; i < expected.size(); ++i) CHECK(y.data()[i] == Approx(expected[i]).margin(1e-5));
  }
}

TEST_CASE("causal self-attention: the future does not leak into the past") {
  const int B = 1, T = 6, C = 8;
  Tensor qkv = random_tensor({B, T, 3 * C}, 1, 1.0f, false);
  Tensor before = nn::causal_self_attention(qkv, 2);
  for (int c = 0; c < 3 * C; ++c) qkv.data()[(T - 1) * 3 * C + c] += 5.0f;  // change the last position
  Tensor after = nn::causal_self_attention(qkv, 2);
  for (int i = 0; i < (T - 1) * C; ++i) CHECK(after.data()[i] == before.data()[i]);
  bool last_changed = false;
  for (int i = (T - 1) * C; i < T * C; ++i) last_changed |= after.data()[i] != before.data()[i];
  CHECK(last_changed);
}

TEST_CASE("causal self-attention: gradients, with and without dropout") {
  check_gradients([](auto& in) { return nn::causal_self_attention(in[0], 3); }, {random_tensor({2, 7, 36}, 1)});
  check_gradients([](auto& in) { return nn::causal_self_attention(in[0], 2); }, {random_tensor({1, 5, 30}, 2)});
  // The same mask on every evaluation: a mask is a function of where its elements are.
  check_gradients([](auto& in) { return nn::causal_self_attention(in[0], 2, {.p = 0.3f, .seed = 7}); },
                  {random_tensor({2, 6, 24}, 3)});
}

TEST_CASE("embedding: rows looked up, repeated ids collect both gradients") {
  std::vector<int32_t> ids{3, 0, 3, 10, 7, 3};
  Tensor w = random_tensor({11, 13}, 1);
  Tensor out = nn::embedding(w, ids, {2, 3});
  REQUIRE(out.shape() == nn::Shape{2, 3, 13});
  for (int n = 0; n < 6; ++n)
    for (int c = 0; c < 13; ++c) CHECK(out.data()[n * 13 + c] == w.data()[ids[n] * 13 + c]);
  nn::autograd::clear_tape();
  check_gradients([&](auto& in) { return nn::embedding(in[0], ids, {6}); }, {random_tensor({11, 13}, 2)});
  CHECK_THROWS_AS(nn::embedding(w, std::vector<int32_t>{11}, {1}), nn::Error);
}

TEST_CASE("Philox4x32-10 gives Random123's known answers") {
  CHECK(nn::philox4x32_10({0, 0, 0, 0}, {0, 0}) == nn::PhiloxCounter{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8});
  CHECK(nn::philox4x32_10({0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff}) ==
        nn::PhiloxCounter{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd});
  CHECK(nn::philox4x32_10({0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0}) ==
        nn::PhiloxCounter{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1});
}

TEST_CASE("dropout: drops about p, keeps the mean; the mask is where an element sits, not how the tensor is cut") {
  const int64_t rows = 4, per_row = 50000, n = rows * per_row;
  Tensor x = Tensor::full({rows, per_row}, 1.0f);
  const nn::DropoutMask mask{.p = 0.3f, .seed = 42, .step = 7, .site = 5, .first_sample = 10};
  Tensor y = nn::dropout(x, mask);
  int64_t zeros = std::count(y.data(), y.data() + n, 0.0f);
  CHECK(std::abs(static_cast<double>(zeros) / n - 0.3) < 0.01);
  double total = 0;
  for (float v : y.values()) total += v;
  CHECK(total / n == Approx(1.0).epsilon(0.02));
  for (float v : y.values()) REQUIRE((v == 0.0f || v == Approx(1.0f / 0.7f)));

  const int threads = nn::compute_threads();
  nn::set_compute_threads(1);
  Tensor again = nn::dropout(x, mask);
  nn::set_compute_threads(threads);
  CHECK(std::equal(y.data(), y.data() + n, again.data()));

  // Each factor is the spec's: 16-bit half e mod 8 of the Philox draw at (e div 8, sample, site,
  // step) — the low half of word 0 first — keyed by the seed's dropout stream, below
  // round(p·2¹⁶) dropped, the others scaled by 2¹⁶/(2¹⁶ − round(p·2¹⁶)).
  const uint64_t key = nn::stream_seed(42, nn::Stream::dropout);
  const auto threshold = static_cast<uint32_t>(std::lround(std::ldexp(double{0.3f}, 16)));
  const auto kept = static_cast<float>(65536.0 / (65536.0 - threshold));
  for (int64_t e : {0, 1, 2, 3, 4, 7, 8, 777, 49999}) {
    const nn::PhiloxCounter words = nn::philox4x32_10({static_cast<uint32_t>(e / 8), 11, 5, 7},
                                                      {static_cast<uint32_t>(key), static_cast<uint32_t>(key >> 32)});
    const uint32_t half = (words[static_cast<std::size_t>(e % 8 / 2)] >> (16 * (e % 2))) & 0xffffu;
    CHECK(y.data()[per_row + e] == (half < threshold ? 0.0f : kept));  // row 1 = sample 11
  }
  // The rows as two replicas' micro-batches (samples 10-11 and 12-13), and each row as two
  // ranks' slices (elements 0-20000 and 20001-49999, an offset not a multiple of a Philox
  // draw's 8 elements either): the same elements dropped.
  Tensor half = Tensor::full({2, per_row}, 1.0f);
  Tensor second_replica = nn::dropout(half, mask.shifted(2, 0));
  CHECK(std::equal(y.data() + 2 * per_row, y.data() + n, second_replica.data()));
  const int64_t cut = 20001;
  Tensor left = nn::dropout(Tensor::full({rows, cut}, 1.0f), mask);
  Tensor right = nn::dropout(Tensor::full({rows, per_row - cut}, 1.0f), mask.shifted(0, cut));
  for (int64_t r = 0; r < rows; ++r) {
    CHECK(std::equal(left.data() + r * cut, left.data() + (r + 1) * cut, y.data() + r * per_row));
    CHECK(std::equal(right.data() + r * (per_row - cut), right.data() + (r + 1) * (per_row - cut),
                     y.data() + r * per_row + cut));
  }
  // Each coordinate matters: another seed, step, site or sample is another mask.
  nn::DropoutMask other_seed = mask, other_step = mask, other_site = mask;
  other_seed.seed += 1;
  other_step.step += 1;
  other_site.site += 1;
  for (const nn::DropoutMask& other : {other_seed, other_step, other_site, mask.shifted(1, 0)}) {
    Tensor z = nn::dropout(x, other);
    CHECK_FALSE(std::equal(y.data(), y.data() + n, z.data()));
  }
  CHECK(nn::dropout(x, {.p = 0.0f}).same_storage(x));
  CHECK_THROWS_AS(nn::dropout(x, {.p = 1.0f}), nn::Error);

  check_gradients([](auto& in) { return nn::dropout(in[0], {.p = 0.4f, .seed = 3}); }, {random_tensor({5, 9}, 4)});
}

TEST_CASE("cross-entropy: value, ignore index, gradient") {
  const int N = 6, V = 11;
  Tensor logits = random_tensor({N, V}, 1, 2.0f, false);
  std::vector<int32_t> targets{3, -1, 0, 10, 5, -1};
  double expected = 0;
  int counted = 0;
  for (int r = 0; r < N; ++r) {
    if (targets[r] < 0) continue;
    double total = 0;
    for (int j = 0; j < V; ++j) total += std::exp(static_cast<double>(logits.data()[r * V + j]));
    expected += std::log(total) - logits.data()[r * V + targets[r]];
    ++counted;
  }
  CHECK(nn::cross_entropy(logits, targets).item() == Approx(expected / counted).epsilon(1e-6));
  check_gradients([&](auto& in) { return nn::cross_entropy(in[0], targets); }, {random_tensor({N, V}, 2)});
  CHECK_THROWS_AS(nn::cross_entropy(logits, std::vector<int32_t>{1, 2}), nn::Error);
  CHECK_THROWS_AS(nn::cross_entropy(logits, std::vector<int32_t>{0, 0, 0, 0, 0, 11}), nn::Error);
}

TEST_CASE("sum and mean: gradients") {
  check_gradients([](auto& in) { return nn::sum(in[0]); }, {random_tensor({7, 3}, 1)});
  check_gradients([](auto& in) { return nn::mean(in[0]); }, {random_tensor({7, 3}, 2)});
}

TEST_CASE("autograd: gradients accumulate until zeroed; no-grad records nothing") {
  Tensor x = random_tensor({4}, 1);
  for (int round = 1; round <= 2; ++round) {
    Tensor loss = nn::sum(nn::scale(x, 3.0f));
    nn::autograd::backward(loss);
    for (float g : x.grad_values()) CHECK(g == Approx(3.0f * round));
  }
  x.zero_grad();
  for (float g : x.grad_values()) CHECK(g == 0.0f);
  {
    nn::autograd::NoGrad no_grad;
    Tensor y = nn::gelu(x);
    CHECK_FALSE(y.requires_grad());
    CHECK(nn::autograd::tape_size() == 0);
  }
  Tensor y = nn::gelu(x);
  CHECK(y.requires_grad());
  CHECK(nn::autograd::tape_size() == 1);
  CHECK_THROWS_AS(nn::autograd::backward(y), nn::Error);  // not a scalar
  nn::autograd::clear_tape();
}

TEST_CASE("buffer pool: a repeated computation takes no new memory from the system") {
  Tensor w = random_tensor({64, 32}, 1);
  auto step = [&] {
    Tensor x = random_tensor({10, 32}, 2, 1.0f, false);
    Tensor loss = nn::mean(nn::gelu(nn::linear(x, w)));
    nn::autograd::backward(loss);
  };
  step();
  const std::size_t after_first = nn::BufferPool::system_allocations();
  for (int i = 0; i < 3; ++i) step();
  CHECK(nn::BufferPool::system_allocations() == after_first);
}

TEST_CASE("threads: the default shares the cores among the ranks on a node") {
  const int cores = nn::machine_cores();
  CHECK(nn::default_compute_threads(1) == cores);
  CHECK(nn::default_compute_threads(cores) == 1);
  CHECK(nn::default_compute_threads(cores * 4) == 1);
  nn::set_compute_threads(1);
  CHECK(nn::compute_threads() == 1);
  nn::set_compute_threads(cores);
  CHECK_THROWS_AS(nn::set_compute_threads(0), nn::Error);
}

TEST_CASE("autograd: backward from a non-scalar output given its gradient (a pipeline stage's entry point)") {
  // backward(y, g) must give what backward(Σ y·g) gives: checked against finite differences.
  nn::Tensor x = nn_test::random_tensor({3, 4, 8}, 1), w = nn_test::random_tensor({6, 8}, 2, 0.3f);
  nn::Tensor y = nn::gelu(nn::linear(x, w));  // [3,4,6]
  nn::Tensor g = nn_test::random_tensor(y.shape(), 3, 1.0f, false);
  nn::autograd::backward(y, g.values());
  std::vector<float> dx(x.grad(), x.grad() + x.numel()), dw(w.grad(), w.grad() + w.numel());
  nn_test::check_gradients([&](std::vector<nn::Tensor>& in) { return nn::mul(nn::gelu(nn::linear(in[0], in[1])), g); },
                           {x, w});  // check_gradients recomputes x.grad, w.grad for Σ (y·g)·r
  x.zero_grad();
  w.zero_grad();
  nn::Tensor loss = nn::sum(nn::mul(nn::gelu(nn::linear(x, w)), g));
  nn::autograd::backward(loss);
  for (int64_t i = 0; i < x.numel(); ++i) CHECK(dx[static_cast<std::size_t>(i)] == Approx(x.grad()[i]).margin(1e-5));
  for (int64_t i = 0; i < w.numel(); ++i) CHECK(dw[static_cast<std::size_t>(i)] == Approx(w.grad()[i]).margin(1e-5));
  CHECK_THROWS_WITH(nn::autograd::backward(y, std::span<const float>(g.values()).first(5)),
                    Catch::Contains("5 gradient values for an output of shape"));
}

TEST_CASE("autograd: several forward passes alive at once, each on its own tape, backward in any order") {
  nn::Tensor w = nn_test::random_tensor({5, 8}, 4, 0.3f);
  nn::Tensor a = nn_test::random_tensor({2, 8}, 5, 1.0f, false), b = nn_test::random_tensor({2, 8}, 6, 1.0f, false);
  // Reference: two passes one after the other on the thread's tape.
  for (const nn::Tensor* in : {&a, &b}) {
    nn::Tensor loss = nn::sum(nn::gelu(nn::linear(*in, w)));
    nn::autograd::backward(loss);
  }
  std::vector<float> reference(w.grad(), w.grad() + w.numel());
  w.zero_grad();
  // Both forwards first (on tapes A and B), then B's backward, then A's.
  nn::autograd::Tape tape_a, tape_b;
  nn::Tensor loss_a, loss_b;
  {
    nn::autograd::TapeScope scope(tape_a);
    loss_a = nn::sum(nn::gelu(nn::linear(a, w)));
  }
  {
    nn::autograd::TapeScope scope(tape_b);
    loss_b = nn::sum(nn::gelu(nn::linear(b, w)));
  }
  CHECK(nn::autograd::tape_size() == 0);  // nothing landed on the thread's own tape
  CHECK(tape_a.size() > 0);
  CHECK(tape_b.size() == tape_a.size());
  {
    nn::autograd::TapeScope scope(tape_b);
    nn::autograd::backward(loss_b);
  }
  {
    nn::autograd::TapeScope scope(tape_a);
    nn::autograd::backward(loss_a);
  }
  CHECK(tape_a.size() == 0);
  for (int64_t i = 0; i < w.numel(); ++i)
    CHECK(w.grad()[i] == Approx(reference[static_cast<std::size_t>(i)]).margin(1e-6));
}

// ---- --precision bf16 (nn/autocast.hpp) ---------------------------------------------------
//
// The bound, derived. Rounding to bf16 keeps 8 significant bits: bf(a) = a(1 + δ), |δ| ≤ u =
// 2⁻⁸. A product of two rounded inputs is exact in fp32 (8 + 8 bits fit in 24), so each term
// of a dot product of length K is off by |a·b|·(2u + u²) at most, and the sum by at most
// (2u + u²)·Σ|a·b| — plus fp32's own summation error, ≤ K·2⁻²⁴·Σ|a·b| (in any order, for
// either side). The bound grows with K only through Σ|a·b|; with random signs the error
// itself grows like √K, so relative to a typical output (also ∝ √K) it stays near u.
// Tighter, and what proves the rounding is bf16's: against a sum of the *rounded* inputs
// (computed in double), only the fp32 summation error remains.
namespace {

constexpr double kBf16Unit = 1.0 / 256;        // u = 2⁻⁸ (8 significant bits)
constexpr double kFp32Unit = 1.0 / (1 << 24);  // 2⁻²⁴
double bf(float x) { return static_cast<float>(numeric::bfloat16(x)); }

// out[m,n] = Σ_k a[m,k]·b[n,k] (both row-major, "transposed" b as linear's weight), in double,
// on the inputs as they are or rounded to bf16; `magnitude` gets Σ_k |a·b|.
void dot_products(const float* a, const float* b, int64_t M, int64_t N, int64_t K, bool rounded,
                  std::vector<double>& out, std::vector<double>& magnitude, int64_t a_step = 0, int64_t b_step = 0) {
  // a_step/b_step: strides along k (0 means contiguous rows: k advances by 1, rows by K).
  out.assign(M * N, 0.0);
  magnitude.assign(M * N, 0.0);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n)
      for (int64_t k = 0; k < K; ++k) {
        const float x = a_step ? a[k * a_step + m] : a[m * K + k], y = b_step ? b[k * b_step + n] : b[n * K + k];
        const double term = rounded ? bf(x) * bf(y) : static_cast<double>(x) * y;
        out[m * N + n] += term;
        magnitude[m * N + n] += std::abs(term);
      }
}

// Every element of `got` within `fp32_sum_error` (× Σ|a·b|·K) of the rounded-input sums, and
// within the bf16 bound of the unrounded ones; the largest gap to the latter is returned.
double check_bf16_products(const float* got, const std::vector<double>& rounded, const std::vector<double>& exact,
                           const std::vector<double>& magnitude, int64_t K, const char* what) {
  double largest_gap = 0;
  for (std::size_t i = 0; i < exact.size(); ++i) {
    const double fp32_sums = 2 * K * kFp32Unit * magnitude[i] + 1e-30;
    const double bf16_bound = (2 * kBf16Unit + kBf16Unit * kBf16Unit) * magnitude[i] + fp32_sums;
    INFO(what << " element " << i << ": " << got[i] << " vs rounded-input sum " << rounded[i] << ", exact "
              << exact[i]);
    REQUIRE(std::abs(got[i] - rounded[i]) <= fp32_sums);
    REQUIRE(std::abs(got[i] - exact[i]) <= bf16_bound);
    largest_gap = std::max(largest_gap, std::abs(got[i] - exact[i]) / (K * kFp32Unit * magnitude[i] + 1e-30));
  }
  return largest_gap;  // in units of the fp32-only error: > 1 means bf16 rounding was there
}

}  // namespace

TEST_CASE("bf16 linear: products of bf16-rounded inputs summed in fp32, forward and backward, within the bound") {
  for (auto [rows, in, out] : {std::tuple<int64_t, int64_t, int64_t>{37, 300, 45}, {5, 1536, 7}}) {
    Tensor x = random_tensor({rows, in}, 1), w = random_tensor({out, in}, 2, 0.1f), b = random_tensor({out}, 3);
    Tensor dy = random_tensor({rows, out}, 4, 1.0f, false);
    {
      Tensor y = nn::linear(x, w, b, "GEMM linear", nn::Precision::bf16);
      Tensor loss = nn::sum(nn::mul(y, dy));
      nn::autograd::backward(loss);
      std::vector<double> rounded, exact, magnitude;
      // forward: y[r,o] = Σ_i x[r,i]·w[o,i] + b[o]
      dot_products(x.data(), w.data(), rows, out, in, true, rounded, magnitude);
      dot_products(x.data(), w.data(), rows, out, in, false, exact, magnitude);
      std::vector<float> y_less_bias(y.data(), y.data() + y.numel());
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t o = 0; o < out; ++o) y_less_bias[r * out + o] -= b.data()[o];
      CHECK(check_bf16_products(y_less_bias.data(), rounded, exact, magnitude, in, "y") > 1);
      // dx[r,i] = Σ_o dy[r,o]·w[o,i]
      dot_products(dy.data(), w.data(), rows, in, out, true, rounded, magnitude, 0, in);
      dot_products(dy.data(), w.data(), rows, in, out, false, exact, magnitude, 0, in);
      CHECK(check_bf16_products(x.grad(), rounded, exact, magnitude, out, "dx") > 1);
      // dw[o,i] = Σ_r dy[r,o]·x[r,i]
      dot_products(dy.data(), x.data(), out, in, rows, true, rounded, magnitude, out, in);
      dot_products(dy.data(), x.data(), out, in, rows, false, exact, magnitude, out, in);
      CHECK(check_bf16_products(w.grad(), rounded, exact, magnitude, rows, "dw") >= 0);
      // db stays fp32: Σ_r dy[r,o]
      for (int64_t o = 0; o < out; ++o) {
        double sum = 0;
        for (int64_t r = 0; r < rows; ++r) sum += dy.data()[r * out + o];
        CHECK(b.grad()[o] == Approx(sum).margin(1e-5));
      }
    }
    nn::autograd::clear_tape();
  }
}

TEST_CASE("bf16 matmul: forward and both gradients are products of bf16-rounded inputs") {
  const int64_t M = 23, K = 301, N = 19;
  Tensor a = random_tensor({M, K}, 5), bt = random_tensor({N, K}, 6, 0.5f, false);
  Tensor b = Tensor::empty({K, N}, true);  // b = btᵀ, so the reference can read rows of bt
  for (int64_t k = 0; k < K; ++k)
    for (int64_t n = 0; n < N; ++n) b.data()[k * N + n] = bt.data()[n * K + k];
  Tensor dc = random_tensor({M, N}, 7, 1.0f, false);
  Tensor c = nn::matmul(a, b, nn::Precision::bf16);
  Tensor loss = nn::sum(nn::mul(c, dc));
  nn::autograd::backward(loss);
  std::vector<double> rounded, exact, magnitude;
  dot_products(a.data(), bt.data(), M, N, K, true, rounded, magnitude);
  dot_products(a.data(), bt.data(), M, N, K, false, exact, magnitude);
  CHECK(check_bf16_products(c.data(), rounded, exact, magnitude, K, "c") > 1);
  dot_products(dc.data(), bt.data(), M, K, N, true, rounded, magnitude, 0, K);  // da = dc·bᵀ
  dot_products(dc.data(), bt.data(), M, K, N, false, exact, magnitude, 0, K);
  CHECK(check_bf16_products(a.grad(), rounded, exact, magnitude, N, "da") > 1);
  nn::autograd::clear_tape();
}

TEST_CASE("bf16: a weight is cast once per WeightCastCache scope, and again after it changes") {
  Tensor x = random_tensor({4, 64}, 1, 1.0f, false), w = random_tensor({8, 64}, 2);
  auto bf16_linear = [](const Tensor& in, const Tensor& weight) {
    return nn::linear(in, weight, {}, "GEMM linear", nn::Precision::bf16);
  };
  nn::autograd::NoGrad no_grad;
  std::vector<float> first;
  {
    nn::WeightCastCache step;
    const std::size_t before = nn::WeightCastCache::casts_made();
    Tensor y = bf16_linear(x, w);
    first.assign(y.values().begin(), y.values().end());
    bf16_linear(x, w);
    CHECK(nn::WeightCastCache::casts_made() == before + 1);  // two uses, one cast
  }
  for (float& v : w.values()) v *= 2;  // the optimizer step, between scopes
  nn::WeightCastCache step;
  Tensor y = bf16_linear(x, w);
  for (std::size_t i = 0; i < first.size(); ++i) CHECK(y.data()[i] == 2 * first[i]);  // ×2 is exact in bf16
}

TEST_CASE("precision settings: names, auto resolved by the engine, the modes resolved for a model") {
  CHECK(nn::name_of(nn::Precision::bf16) == "bf16");
  CHECK(nn::name_of(nn::Precision::fp32) == "fp32");
  CHECK(nn::kPrecisionSettingNames[static_cast<std::size_t>(nn::PrecisionSetting::automatic)] == "auto");
  CHECK(nn::resolve(nn::PrecisionSetting::automatic) ==
        (nn::gemm_has_native_bf16() ? nn::Precision::bf16 : nn::Precision::fp32));
  const nn::ComputeModes modes = nn::resolve_modes(nn::PrecisionSetting::bf16, nn::AttentionKernel::naive,
                                                   nn::Recompute::full, nn::Fusion::separate);
  CHECK(modes.precision == nn::Precision::bf16);
  CHECK(modes.attention == nn::AttentionKernel::naive);
  CHECK(modes.recompute == nn::Recompute::full);
  CHECK(modes.fusion == nn::Fusion::separate);
  CHECK(nn::resolve_modes(nn::PrecisionSetting::automatic).precision == nn::resolve(nn::PrecisionSetting::automatic));
}

TEST_CASE("naive attention's steps: split and merge heads, batched products, causal mask — gradients") {
  check_gradients([](auto& in) { return nn::split_heads(in[0], 1, 2); }, {random_tensor({2, 3, 12}, 1)});
  check_gradients([](auto& in) { return nn::merge_heads(in[0]); }, {random_tensor({2, 3, 5, 2}, 2)});
  check_gradients([](auto& in) { return nn::batched_matmul(in[0], in[1], false); },
                  {random_tensor({2, 3, 5, 4}, 3), random_tensor({2, 3, 4, 7}, 4)});
  check_gradients([](auto& in) { return nn::batched_matmul(in[0], in[1], true); },
                  {random_tensor({3, 5, 4}, 5), random_tensor({3, 6, 4}, 6)});
  check_gradients([](auto& in) { return nn::softmax(nn::causal_mask(in[0])); }, {random_tensor({2, 5, 5}, 7)});
  Tensor masked = nn::causal_mask(random_tensor({1, 3, 3}, 8, 1.0f, false));
  CHECK(masked.data()[1] < -1e29f);  // row 0 sees only position 0
  CHECK(masked.data()[3 + 1] > -1e29f);
  nn::autograd::clear_tape();
}

TEST_CASE("naive attention (--attention naive) equals the fused kernel: output and gradient, with dropout too") {
  // T = 9: one causal block; T = 130: three, the last of 2 rows (the skipped blocks' gradients)
  for (auto [p, T] : {std::pair{0.0f, 9}, std::pair{0.3f, 9}, std::pair{0.0f, 130}, std::pair{0.3f, 130}}) {
    Tensor qkv_a = random_tensor({2, T, 36}, 11), qkv_b = qkv_a.clone();
    qkv_b.set_requires_grad(true);
    const nn::DropoutMask mask{.p = p, .seed = 5, .step = 2, .site = 1, .first_sample = 3};
    Tensor weights = random_tensor({2, T, 12}, 12, 1.0f, false);  // L = Σ y ⊙ weights; one forward-backward at a time
    // qkv used twice: the second backward adds to the first's gradient (beta 1 in every block)
    Tensor fused = nn::causal_self_attention(qkv_a, 3, mask);
    Tensor fused_loss = nn::add(nn::sum(nn::mul(fused, weights)), nn::sum(nn::causal_self_attention(qkv_a, 3)));
    nn::autograd::backward(fused_loss);
    Tensor naive = nn::causal_self_attention_naive(qkv_b, 3, mask);
    Tensor naive_loss = nn::add(nn::sum(nn::mul(naive, weights)), nn::sum(nn::causal_self_attention_naive(qkv_b, 3)));
    nn::autograd::backward(naive_loss);
    INFO("dropout " << p << ", T " << T);
    for (int64_t i = 0; i < fused.numel(); ++i) REQUIRE(naive.data()[i] == Approx(fused.data()[i]).margin(1e-5));
    for (int64_t i = 0; i < qkv_a.numel(); ++i) {
      INFO("qkv gradient element " << i);
      REQUIRE(qkv_b.grad()[i] == Approx(qkv_a.grad()[i]).margin(1e-5));
    }
  }
  // nn::attention dispatches to the kernel it is given.
  Tensor qkv = random_tensor({1, 9, 36}, 13, 1.0f, false);
  const nn::DropoutMask mask{.p = 0.3f, .seed = 5};
  Tensor by_naive = nn::attention(qkv, 3, mask, nn::AttentionKernel::naive, nn::Precision::fp32);
  Tensor direct = nn::causal_self_attention_naive(qkv, 3, mask);
  CHECK(std::equal(by_naive.data(), by_naive.data() + by_naive.numel(), direct.data()));
}

// Attention under bf16 rounds q, k and v, the weights P and, in backward, dy and dS — each
// operand of its four products once (relative error ≤ u = 2⁻⁸), the sums in fp32. A product's
// terms carry at most two roundings, and a result passes through at most three products, so
// each output is within about 6u ≈ 2.3% of the sum of its terms' magnitudes; as tensors
// (2-norms, random signs) the difference is far smaller. Bound: 3% of the fp32 tensor's norm.
TEST_CASE("bf16 attention: QKᵀ and PV on bf16 inputs, output and gradient within bf16's rounding of fp32") {
  for (int T : {17, 130}) {  // one causal block; three (the bf16 operands offset into each block)
    INFO("T " << T);
    Tensor qkv32 = random_tensor({2, T, 48}, 21), qkv16 = qkv32.clone();
    qkv16.set_requires_grad(true);
    Tensor weights = random_tensor({2, T, 16}, 22, 1.0f, false);
    Tensor y32 = nn::causal_self_attention(qkv32, 2);
    Tensor loss32 = nn::sum(nn::mul(y32, weights));
    nn::autograd::backward(loss32);
    Tensor y16;
    {
      y16 = nn::causal_self_attention(qkv16, 2, {}, nn::Precision::bf16);
      Tensor loss16 = nn::sum(nn::mul(y16, weights));
      nn::autograd::backward(loss16);
    }
    auto relative = [](const float* got, const float* want, int64_t n) {
      double difference = 0, size = 0;
      for (int64_t i = 0; i < n; ++i) {
        difference += (got[i] - want[i]) * (got[i] - want[i]);
        size += want[i] * want[i];
      }
      return std::sqrt(difference / size);
    };
    const double output = relative(y16.data(), y32.data(), y32.numel());
    const double gradient = relative(qkv16.grad(), qkv32.grad(), qkv32.numel());
    INFO("‖bf16 − fp32‖ / ‖fp32‖: output " << output << ", gradient " << gradient);
    CHECK(output < 0.03);
    CHECK(gradient < 0.03);
    CHECK(output > 1e-5);  // teeth: bf16 was used
    CHECK(gradient > 1e-5);
  }
  nn::autograd::clear_tape();
}

// A mixture of experts' routing (nn/moe_mlp.hpp): where tokens go, and the ops that move them.
TEST_CASE("routing: top-k with ties to the lower index, capacity per sequence, position by position (causal), shares") {
  // 2 sequences × 3 tokens × 3 experts, k = 2, f = 1: capacity ⌈1·2·3/3⌉ = 2 tokens per expert.
  const std::vector<float> probs = {
      0.5f, 0.3f, 0.2f,  // sequence 0, token 0: experts 0, 1
      0.5f, 0.3f, 0.2f,  // token 1: 0, 1
      0.6f, 0.2f, 0.2f,  // token 2: 0, then 1 (tied with 2: the lower index); both full: dropped
      0.2f, 0.4f, 0.4f,  // sequence 1, token 0: 1, 2 (tie: 1 first)
      0.1f, 0.1f, 0.8f,  // token 1: 2, then 0 (tie of 0 and 1)
      0.1f, 0.2f, 0.7f,  // token 2: 2 — full after tokens 0 and 1: dropped; then 1
  };
  nn::MoESettings s;
  s.n_experts = 3;
  s.experts_per_token = 2;
  s.capacity_factor = 1.0;
  s.sequence_length = 3;
  CHECK(nn::expert_capacity(3, 3, 2, 1.0) == 2);
  CHECK(nn::expert_capacity(13, 4, 2, 1.25) == 9);  // ⌈8.125⌉
  CHECK(nn::expert_capacity(13, 4, 2, 1e30) == 13);  // at most T
  const nn::Routing r = nn::route_tokens(probs, 2, 3, s);
  // Each sequence's slots position by position, a token's choices in rank order (rows g·3 + t).
  CHECK(r.rows[0] == std::vector<int32_t>{0, 1, 4});
  CHECK(r.rows[1] == std::vector<int32_t>{0, 1, 3, 5});
  CHECK(r.rows[2] == std::vector<int32_t>{3, 4});
  CHECK(r.dropped == 3);
  // Causal: the first two tokens of each sequence routed alone (capacity still counts T = 3)
  // keep exactly what they kept beside the third.
  std::vector<float> prefix;
  for (int g = 0; g < 2; ++g) prefix.insert(prefix.end(), probs.begin() + g * 9, probs.begin() + g * 9 + 6);
  const nn::Routing p = nn::route_tokens(prefix, 2, 2, s);
  CHECK(p.rows[0] == std::vector<int32_t>{0, 1, 3});  // rows g·2 + t now
  CHECK(p.rows[1] == std::vector<int32_t>{0, 1, 2});
  CHECK(p.rows[2] == std::vector<int32_t>{2, 3});
  CHECK(r.gate[1] == std::vector<int64_t>{0 * 3 + 1, 1 * 3 + 1, 3 * 3 + 1, 5 * 3 + 1});
  // Shares count choices before capacity: sequence 0 named 0 and 1 three times each of 6,
  // sequence 1 named 0 once, 1 twice, 2 three times.
  const std::vector<float> shares = {0.5f, 0.5f, 0.0f, 1.0f / 6, 2.0f / 6, 3.0f / 6};
  for (std::size_t i = 0; i < shares.size(); ++i) CHECK(r.shares[i] == Approx(shares[i]));
  CHECK_THROWS_WITH(nn::route_tokens(std::vector<float>(5), 2, 3, s), Catch::Contains("5 probabilities"));
  CHECK_THROWS_WITH(nn::route_tokens(std::vector<float>(24), 2, 4, s), Catch::Contains("4 tokens in a sequence of at most 3"));
}

TEST_CASE("routing ops: gather_rows, combine_rows, load_balancing_loss, attach_loss — gradients") {
  const std::vector<int32_t> rows = {3, 0, 3, 1};  // a row picked twice
  nn_test::check_gradients([&](std::vector<nn::Tensor>& in) { return nn::gather_rows(in[0], rows); },
                           {nn_test::random_tensor({5, 7}, 1)});
  // Two experts' outputs into 4 rows, gated by elements of a [4,2] probability tensor; one
  // expert without rows (undefined output).
  const std::vector<std::vector<int32_t>> to = {{2, 0, 3}, {}, {0}};
  const std::vector<std::vector<int64_t>> gate = {{2 * 3 + 0, 0 * 3 + 0, 3 * 3 + 0}, {}, {0 * 3 + 2}};
  nn_test::check_gradients(
      [&](std::vector<nn::Tensor>& in) {
        const std::vector<nn::Tensor> ys = {in[0], nn::Tensor{}, in[1]};
        return nn::combine_rows(ys, to, in[2], gate, 4);
      },
      {nn_test::random_tensor({3, 5}, 2), nn_test::random_tensor({1, 5}, 3), nn_test::random_tensor({4, 3}, 4)});
  const std::vector<float> shares = {0.5f, 0.25f, 0.25f, 0.0f, 1.0f, 0.0f};
  nn_test::check_gradients(
      [&](std::vector<nn::Tensor>& in) { return nn::load_balancing_loss(in[0], shares); },
      {nn_test::random_tensor({2, 4, 3}, 5)});
  // Balanced routing and uniform probabilities give 1; everything on one expert gives E.
  nn::Tensor uniform = nn::Tensor::full({1, 4, 2}, 0.5f);
  CHECK(nn::load_balancing_loss(uniform, std::vector<float>{0.5f, 0.5f}).item() == Approx(1.0));
  nn::Tensor peaked = nn::Tensor::from(std::vector<float>{1, 0, 1, 0}, {1, 2, 2});
  CHECK(nn::load_balancing_loss(peaked, std::vector<float>{1.0f, 0.0f}).item() == Approx(2.0));
  // attach_loss: the output is x; the aux loss's gradient is the coefficient, whatever x's.
  nn::Tensor x = nn_test::random_tensor({2, 3}, 6), aux = nn_test::random_tensor({1}, 7);
  nn::Tensor y = nn::attach_loss(x, aux, 0.25f);
  CHECK(std::equal(x.data(), x.data() + 6, y.data()));
  nn::Tensor loss = nn::sum(nn::scale(y, 2.0f));
  nn::autograd::backward(loss);
  CHECK(aux.grad()[0] == 0.25f);
  CHECK(x.grad()[4] == 2.0f);
}
