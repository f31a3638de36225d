// Checkpoints: a round trip restores everything; a truncated, corrupt or mismatched
// checkpoint gives an error naming the file and the problem; saving is atomic.
#include <filesystem>
#include <fstream>
#include <limits>

#include <catch2/catch.hpp>

#include "nn/adamw.hpp"
#include "nn/autograd.hpp"
#include "nn/checkpoint.hpp"
#include "nn/error.hpp"
#include "nn/safetensors.hpp"

namespace fs = std::filesystem;
using Catch::Matchers::Contains;

namespace {

struct Trained {
  nn::GPT model;
  nn::AdamW opt;
  Trained(const nn::GPTConfig& c, uint64_t seed) : model(c, seed), opt(model.parameters(), {0.9f, 0.95f, 1e-8f, 0.1f}) {
    std::vector<int32_t> ids{1, 2, 3, 4, 5, 6, 0, 1}, targets{2, 3, 4, 5, 6, 0, 1, 2};
    for (int s = 0; s < 3; ++s) {
      nn::Tensor loss = model.loss(ids, targets, 2, 4);
      nn::autograd::backward(loss);
      opt.step(1e-2f);
      opt.zero_grad();
    }
  }
};

fs::path fresh_dir(const std::string& name) {
  fs::path dir = fs::temp_directory_path() / ("nanodist_test_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::remove_all(dir.string() + ".prev");
  return dir;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const nn::Error& e) {
    return e.what();
  }
  return "(no error)";
}

const nn::GPTConfig kConfig{2, 2, 16, 8, 7, 0.0f, true};

}  // namespace

TEST_CASE("checkpoint: a round trip restores model, optimizer and training state") {
  fs::path dir = fresh_dir("roundtrip");
  Trained a(kConfig, 1);
  nn::save_checkpoint(dir, a.model, a.opt, {{"step", 3}, {"note", "hello"}});
  CHECK(fs::exists(dir / "model.safetensors"));
  CHECK(fs::exists(dir / "optimizer.safetensors"));
  CHECK(fs::exists(dir / "state.json"));
  CHECK_FALSE(fs::exists(dir.string() + ".tmp"));

  nn::GPT b(kConfig, 99);  // different initial weights
  nn::AdamW opt_b(b.parameters());
  nn::CheckpointInfo info = nn::load_checkpoint(dir, b, &opt_b);
  CHECK(info.train_state["step"] == 3);
  CHECK(info.train_state["note"] == "hello");
  CHECK(info.optimizer_steps == 3);
  CHECK(opt_b.steps() == 3);
  for (std::size_t i = 0; i < b.parameters().size(); ++i) {
    auto x = a.model.parameters()[i].tensor.values(), y = b.parameters()[i].tensor.values();
    CHECK(std::equal(x.begin(), x.end(), y.begin()));
    auto m = a.opt.exp_avg_sq()[i].values(), n = opt_b.exp_avg_sq()[i].values();
    CHECK(std::equal(m.begin(), m.end(), n.begin()));
  }
  // PyTorch's names, lm_head included: what load_state_dict expects.
  nn::SafetensorsReader file(dir / "model.safetensors");
  CHECK(file.contains("lm_head.weight"));
  CHECK(file.contains("transformer.h.1.mlp.c_proj.bias"));
  CHECK(file.metadata().at("format") == "pt");

  // Saving again replaces the checkpoint completely and leaves nothing behind.
  nn::save_checkpoint(dir, a.model, a.opt, {{"step", 4}});
  CHECK(nn::read_checkpoint_info(dir).train_state["step"] == 4);
  CHECK_FALSE(fs::exists(dir.string() + ".prev"));
  CHECK_FALSE(fs::exists(dir.string() + ".tmp"));
  fs::remove_all(dir);
}

TEST_CASE("checkpoint: a crash between the two renames still leaves a loadable checkpoint") {
  fs::path dir = fresh_dir("crash");
  Trained a(kConfig, 1);
  nn::save_checkpoint(dir, a.model, a.opt, {{"step", 3}});
  fs::rename(dir, dir.string() + ".prev");  // the state right after "rename <dir> to <dir>.prev"
  nn::GPT b(kConfig, 2);
  CHECK(nn::load_checkpoint(dir, b, nullptr).train_state["step"] == 3);
  fs::remove_all(dir.string() + ".prev");
}

TEST_CASE("checkpoint: truncated, corrupt, mismatched or missing → one clear error") {
  fs::path dir = fresh_dir("bad");
  Trained a(kConfig, 1);
  auto save = [&] { nn::save_checkpoint(dir, a.model, a.opt, {{"step", 3}}); };
  nn::GPT b(kConfig, 2);

  save();
  fs::resize_file(dir / "model.safetensors", fs::file_size(dir / "model.safetensors") / 2);
  CHECK_THAT(error_of([&] { nn::load_checkpoint(dir, b, nullptr); }),
             Contains("model.safetensors") && Contains("truncated"));

  save();
  {  // flip one byte in the middle of the optimizer's data
    std::fstream f(dir / "optimizer.safetensors", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(fs::file_size(dir / "optimizer.safetensors") - 17));
    f.put('\x7f');
  }
  nn::AdamW opt_b(b.parameters());
  CHECK_THAT(error_of([&] { nn::load_checkpoint(dir, b, &opt_b); }),
             Contains("optimizer.safetensors") && Contains("corrupt"));

  save();
  {  // a dense checkpoint into a mixture of experts, and the way back: the field is named
    nn::GPTConfig moe = kConfig;
    moe.n_experts = 2;
    nn::GPT m(moe, 3);
    CHECK_THAT(error_of([&] { nn::load_checkpoint(dir, m, nullptr); }),
               Contains("the checkpoint has n_experts = \"none\", but the model was configured with 2"));
    nn::AdamW opt_m(m.parameters());
    const fs::path moe_dir = fresh_dir("bad_moe");
    nn::save_checkpoint(moe_dir, m, opt_m, {{"step", 1}});
    CHECK_THAT(error_of([&] { nn::load_checkpoint(moe_dir, b, nullptr); }),
               Contains("the checkpoint has n_experts = 2, but the model was configured with \"none\""));
  }

  save();
  { std::ofstream(dir / "state.json") << "{ not json"; }
  CHECK_THAT(error_of([&] { nn::load_checkpoint(dir, b, nullptr); }),
             Contains("state.json") && Contains("not valid JSON"));

  save();
  nn::GPTConfig wider = kConfig;
  wider.n_embd = 32;
  nn::GPT c(wider, 2);
  CHECK_THAT(error_of([&] { nn::load_checkpoint(dir, c, nullptr); }),
             Contains("state.json") && Contains("n_embd = 16") && Contains("32"));

  CHECK_THAT(error_of([&] { nn::load_checkpoint(dir.string() + "_nowhere", b, nullptr); }),
             Contains("_nowhere") && Contains("no checkpoint"));
  fs::remove_all(dir);
}

TEST_CASE("safetensors: a file cut inside the header or with a lying header is refused") {
  fs::path dir = fresh_dir("st");
  fs::create_directories(dir);
  std::vector<float> values(10, 1.5f);
  nn::write_safetensors(dir / "a.safetensors", {{"x", {2, 5}, values.data()}});
  nn::SafetensorsReader ok(dir / "a.safetensors");
  CHECK(ok.floats("x") == values);
  CHECK_THAT(error_of([&] { ok.floats("y"); }), Contains("no tensor named 'y'"));
  nn::Tensor wrong = nn::Tensor::zeros({5, 2});
  CHECK_THAT(error_of([&] { ok.read_into("x", wrong); }), Contains("shape [2, 5], expected [5, 2]"));

  fs::resize_file(dir / "a.safetensors", 5);
  CHECK_THAT(error_of([&] { nn::SafetensorsReader r(dir / "a.safetensors"); }), Contains("truncated"));
  fs::resize_file(dir / "a.safetensors", 20);
  CHECK_THAT(error_of([&] { nn::SafetensorsReader r(dir / "a.safetensors"); }), Contains("header claims"));
  { std::ofstream(dir / "b.safetensors") << std::string("\x04\0\0\0\0\0\0\0{{{{", 12); }
  CHECK_THAT(error_of([&] { nn::SafetensorsReader r(dir / "b.safetensors"); }), Contains("not valid JSON"));
  fs::remove_all(dir);
}

TEST_CASE("checkpoint: a diverged model (nan weights) is refused and the good checkpoint stays") {
  fs::path dir = fresh_dir("diverged");
  Trained a(kConfig, 1);
  nn::save_checkpoint(dir, a.model, a.opt, {{"step", 3}});
  a.model.parameters()[2].tensor.values()[5] = std::numeric_limits<float>::quiet_NaN();
  CHECK_THAT(
      error_of([&] {
        nn::save_checkpoint(dir, a.model, a.opt, {{"step", 4}});
      }),
      Contains("refusing to write a checkpoint") && Contains(a.model.parameters()[2].name) && Contains("diverged"));
  CHECK(nn::read_checkpoint_info(dir).train_state["step"] == 3);
  nn::GPT b(kConfig, 2);
  CHECK(nn::load_checkpoint(dir, b, nullptr).train_state["step"] == 3);
  fs::remove_all(dir);
}
