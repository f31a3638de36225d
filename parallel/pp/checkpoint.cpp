#include "parallel/pp/checkpoint.hpp"

#include <array>
#include <sstream>
#include <string>
#include <vector>

#include "nn/checkpoint.hpp"

namespace parallel {
namespace {

// The names of a stage's parameters, one per line, sent as a length and int32 characters.
void send_names(const nn::GPT& model, comm::Communicator& pp, int dest) {
  std::string text;
  for (const auto& p : model.parameters()) text += p.name + "\n";
  std::array<int64_t, 1> size{static_cast<int64_t>(text.size())};
  pp.send(std::span<const int64_t>(size), dest);
  std::vector<int32_t> chars(text.begin(), text.end());
  pp.send(std::span<const int32_t>(chars), dest);
}

std::vector<std::string> recv_names(comm::Communicator& pp, int source) {
  std::array<int64_t, 1> size{0};
  pp.recv(std::span<int64_t>(size), source);
  std::vector<int32_t> chars(static_cast<std::size_t>(size[0]));
  pp.recv(std::span<int32_t>(chars), source);
  std::istringstream in(std::string(chars.begin(), chars.end()));
  std::vector<std::string> names;
  for (std::string name; std::getline(in, name);) names.push_back(name);
  return names;
}

std::size_t index_of(const nn::AdamW& optimizer, const std::string& name) {
  const auto& params = optimizer.parameters();
  for (std::size_t i = 0; i < params.size(); ++i)
    if (params[i].name == name) return i;
  return params.size();
}

}  // namespace

std::vector<std::span<float>> tensors_of(nn::GPT& model, nn::AdamW* optimizer, const std::string& name) {
  std::vector<std::span<float>> t = {model.parameter(name).values()};
  if (optimizer) {
    const std::size_t i = index_of(*optimizer, name);
    t.push_back(optimizer->exp_avg()[i].values());
    t.push_back(optimizer->exp_avg_sq()[i].values());
  }
  return t;
}

void save_pipeline_checkpoint(const std::filesystem::path& dir, nn::GPT& model, nn::AdamW& optimizer,
                              const nlohmann::json& train_state, comm::Communicator& pp,
                              nn::CheckpointWriter& writer) {
  if (pp.rank() != 0) {
    send_names(model, pp, 0);
    for (const auto& p : model.parameters())
      for (auto t : tensors_of(model, &optimizer, p.name)) pp.send(std::span<const float>(t), 0);
    return;
  }
  nn::GPT whole(model.config(), 0);
  nn::AdamW whole_optimizer(whole.parameters(), optimizer.config());
  whole_optimizer.set_steps(optimizer.steps());
  for (const auto& p : model.parameters()) {
    auto from = tensors_of(model, &optimizer, p.name), to = tensors_of(whole, &whole_optimizer, p.name);
    for (std::size_t k = 0; k < from.size(); ++k) std::copy(from[k].begin(), from[k].end(), to[k].begin());
  }
  for (int s = 1; s < pp.size(); ++s)
    for (const std::string& name : recv_names(pp, s))
      for (auto t : tensors_of(whole, &whole_optimizer, name))
        pp.recv(t, s);  // the last stage's wte: the same values again
  writer.save(dir, whole, whole_optimizer, train_state);
}

void distribute_pipeline_checkpoint(nn::GPT& model, nn::AdamW* optimizer, comm::Communicator& pp, nn::GPT* whole,
                                    nn::AdamW* whole_optimizer) {
  std::array<int64_t, 1> steps{0};
  if (pp.rank() == 0) {
    nn::AdamW* source_optimizer = optimizer ? whole_optimizer : nullptr;
    for (const auto& p : model.parameters()) {
      auto from = tensors_of(*whole, source_optimizer, p.name), to = tensors_of(model, optimizer, p.name);
      for (std::size_t k = 0; k < from.size(); ++k) std::copy(from[k].begin(), from[k].end(), to[k].begin());
    }
    for (int s = 1; s < pp.size(); ++s)
      for (const std::string& name : recv_names(pp, s))
        for (auto t : tensors_of(*whole, source_optimizer, name)) pp.send(std::span<const float>(t), s);
    if (source_optimizer) steps[0] = source_optimizer->steps();
  } else {
    send_names(model, pp, 0);
    for (const auto& p : model.parameters())
      for (auto t : tensors_of(model, optimizer, p.name)) pp.recv(t, 0);
  }
  pp.broadcast(std::span<int64_t>(steps), 0);
  if (optimizer) optimizer->set_steps(steps[0]);
}

}  // namespace parallel
