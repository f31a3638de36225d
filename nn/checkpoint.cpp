#include "nn/checkpoint.hpp"

#include <cmath>

#include <fmt/format.h>

#include "nn/atomic_file.hpp"
#include "nn/error.hpp"
#include "nn/safetensors.hpp"

namespace nn {
namespace fs = std::filesystem;
namespace {

constexpr const char* kFormat = "nanodist-checkpoint-1";

nlohmann::json describe(const FileDigest& digest) {
  return {{"bytes", digest.bytes}, {"xxh3_64", fmt::format("{:016x}", digest.xxh3)}};
}

// Reads a file listed in state.json and checks its size and checksum.
std::vector<char> read_checked(const CheckpointInfo& info, const nlohmann::json& state, const std::string& file) {
  const fs::path path = info.dir / file;
  if (!fs::exists(path)) fail("{}: missing (the checkpoint is incomplete)", path.string());
  std::vector<char> bytes = read_whole_file(path);
  const auto& expected = state["files"][file];
  if (bytes.size() != expected.at("bytes").get<std::size_t>())
    fail("{}: truncated or overwritten: {} bytes, state.json says {}", path.string(), bytes.size(),
         expected.at("bytes").get<std::size_t>());
  // XXH3 since 0.4; FNV-1a in checkpoints written before.
  const bool xxh3 = expected.contains("xxh3_64");
  if (!xxh3 && !expected.contains("fnv1a64")) fail("{}: corrupt: state.json has no checksum for it", path.string());
  const std::string sum = xxh3 ? fmt::format("{:016x}", xxh3_64({bytes})) : fmt::format("{:016x}", fnv1a64(bytes));
  if (sum != expected.at(xxh3 ? "xxh3_64" : "fnv1a64").get<std::string>())
    fail("{}: corrupt: checksum does not match state.json", path.string());
  return bytes;
}

nlohmann::json read_state(const fs::path& dir) {
  const fs::path path = dir / "state.json";
  std::vector<char> bytes = read_whole_file(path);
  nlohmann::json state;
  try {
    state = nlohmann::json::parse(bytes.begin(), bytes.end());
  } catch (const nlohmann::json::exception&) {
    fail("{}: corrupt: not valid JSON", path.string());
  }
  if (!state.is_object() || state.value("format", "") != kFormat)
    fail("{}: not a nanodist checkpoint (format '{}' expected)", path.string(), kFormat);
  for (const char* key : {"config", "optimizer", "train_state", "files"})
    if (!state.contains(key)) fail("{}: corrupt: '{}' is missing", path.string(), key);
  for (const char* file : {"model.safetensors", "optimizer.safetensors"})
    if (!state["files"].contains(file)) fail("{}: corrupt: no entry for {}", path.string(), file);
  return state;
}

}  // namespace

namespace {

// A diverged model (nan/inf weights) is never written over a good checkpoint, nor loaded.
void check_finite(const GPT& model, const std::string& where) {
  for (const auto& [name, t, role] : model.parameters())
    for (float v : t.values())
      if (!std::isfinite(v)) fail("{}: {} holds non-finite values ({}): the run diverged", where, name, v);
}

}  // namespace

CheckpointSnapshot snapshot_checkpoint(const GPT& model, const AdamW& optimizer, const nlohmann::json& train_state) {
  check_finite(model, "refusing to write a checkpoint");
  CheckpointSnapshot snapshot;
  for (const auto& [name, t, role] : model.state_dict())
    snapshot.model.push_back({name, t.shape(), std::vector<float>(t.values().begin(), t.values().end())});
  const auto& params = optimizer.parameters();
  for (std::size_t i = 0; i < params.size(); ++i) {
    const auto& m = optimizer.exp_avg()[i].values();
    const auto& v = optimizer.exp_avg_sq()[i].values();
    snapshot.moments.push_back({"exp_avg." + params[i].name, params[i].tensor.shape(), {m.begin(), m.end()}});
    snapshot.moments.push_back({"exp_avg_sq." + params[i].name, params[i].tensor.shape(), {v.begin(), v.end()}});
  }
  const AdamWConfig& c = optimizer.config();
  snapshot.state = {{"format", kFormat},
                    {"config", model.config().to_json()},
                    {"optimizer",
                     {{"steps", optimizer.steps()},
                      {"beta1", c.beta1},
                      {"beta2", c.beta2},
                      {"eps", c.eps},
                      {"weight_decay", c.weight_decay}}},
                    {"train_state", train_state}};
  return snapshot;
}

namespace {

std::vector<TensorRef> refs(const std::vector<CheckpointSnapshot::Named>& tensors) {
  std::vector<TensorRef> out;
  for (const auto& t : tensors) out.push_back({t.name, t.shape, t.values.data()});
  return out;
}

}  // namespace

void write_checkpoint(const fs::path& dir, const CheckpointSnapshot& snapshot, const std::function<void()>& before_swap) {
  const fs::path tmp = dir.string() + ".tmp", prev = dir.string() + ".prev";
  fs::remove_all(tmp);
  fs::create_directories(tmp);
  const FileDigest model = write_safetensors(tmp / "model.safetensors", refs(snapshot.model), {{"format", "pt"}});
  const FileDigest moments = write_safetensors(tmp / "optimizer.safetensors", refs(snapshot.moments));
  nlohmann::json state = snapshot.state;
  state["files"] = {{"model.safetensors", describe(model)}, {"optimizer.safetensors", describe(moments)}};
  write_file_atomically(tmp / "state.json", state.dump(2));
  if (before_swap) before_swap();

  // Swap the complete new directory in; the old one exists until the new one is in place.
  fs::remove_all(prev);
  if (fs::exists(dir)) fs::rename(dir, prev);
  fs::rename(tmp, dir);
  fs::remove_all(prev);
}

void save_checkpoint(const fs::path& dir, const GPT& model, const AdamW& optimizer, const nlohmann::json& train_state) {
  write_checkpoint(dir, snapshot_checkpoint(model, optimizer, train_state));
}

CheckpointInfo read_checkpoint_info(const fs::path& requested) {
  CheckpointInfo info;
  info.dir = requested;
  const fs::path prev = requested.string() + ".prev";
  if (!fs::exists(requested / "state.json") && fs::exists(prev / "state.json")) info.dir = prev;  // crash window
  if (!fs::is_directory(info.dir)) fail("{}: no checkpoint directory there", requested.string());
  nlohmann::json state = read_state(info.dir);
  const std::string where = (info.dir / "state.json").string();
  try {
    info.config = GPTConfig::from_json(state["config"]);
    const auto& o = state["optimizer"];
    const nlohmann::json& steps = o.at("steps");
    if (!steps.is_number_integer() || steps.get<int64_t>() < 0)
      fail("optimizer.steps must be a whole number ≥ 0, got {}", steps.dump());
    info.optimizer_steps = steps.get<int64_t>();
    info.optimizer_config = {o.at("beta1").get<float>(), o.at("beta2").get<float>(), o.at("eps").get<float>(),
                             o.at("weight_decay").get<float>()};
  } catch (const nlohmann::json::exception& e) {
    fail("{}: corrupt optimizer entry ({})", where, e.what());
  } catch (const Error& e) {
    fail("{}: {}", where, e.what());
  }
  info.train_state = state["train_state"];
  if (!info.train_state.is_null() && !info.train_state.is_object())
    fail("{}: train_state must be an object, got {}", where, info.train_state.dump());
  return info;
}

CheckpointInfo load_checkpoint(const fs::path& dir, GPT& model, AdamW* optimizer) {
  CheckpointInfo info = read_checkpoint_info(dir);
  const nlohmann::json state = read_state(info.dir);
  // Every field of either (a dense config leaves the mixture's out: "none" on that side).
  const nlohmann::json mine = model.config().to_json(), theirs = info.config.to_json();
  nlohmann::json every = mine;
  every.update(theirs);
  std::vector<std::string> keys = {"n_experts"};  // first: a mixture against a dense model says so
  for (auto& [key, ignored] : every.items())
    if (key != "n_experts") keys.push_back(key);
  for (const std::string& key : keys) {
    const nlohmann::json a = mine.value(key, nlohmann::json("none")), b = theirs.value(key, nlohmann::json("none"));
    if (a != b)
      fail("{}: the checkpoint has {} = {}, but the model was configured with {}", (info.dir / "state.json").string(),
           key, b.dump(), a.dump());
  }

  SafetensorsReader weights(info.dir / "model.safetensors", read_checked(info, state, "model.safetensors"));
  for (auto& [name, t, role] : model.parameters()) weights.read_into(name, t);
  check_finite(model, (info.dir / "model.safetensors").string());
  if (optimizer) {
    SafetensorsReader moments(info.dir / "optimizer.safetensors", read_checked(info, state, "optimizer.safetensors"));
    const auto& params = optimizer->parameters();
    for (std::size_t i = 0; i < params.size(); ++i) {
      moments.read_into("exp_avg." + params[i].name, optimizer->exp_avg()[i]);
      moments.read_into("exp_avg_sq." + params[i].name, optimizer->exp_avg_sq()[i]);
    }
    optimizer->set_steps(info.optimizer_steps);
  }
  return info;
}

}  // namespace nn
