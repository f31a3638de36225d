#include "parallel/checkpoint.hpp"

#include <algorithm>
#include <array>
#include <functional>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

namespace parallel {
namespace {

// ---- over a group, tensors by name: the stages and ep ranks of the first copy -----------------

// Which of a rank's parameters go by name: those the checkpoint takes from it (saving), or all
// it holds (loading).
using Takes = std::function<bool(const nn::NamedTensor&)>;

// The names of a rank's shared parameters, one per line, sent as a length and int32 characters.
void send_names(const nn::GPT& model, comm::Communicator& group, int dest, const Takes& takes) {
  std::string text;
  for (const auto& p : model.parameters())
    if (takes(p)) text += p.name + "\n";
  std::array<int64_t, 1> size{static_cast<int64_t>(text.size())};
  group.send(std::span<const int64_t>(size), dest);
  std::vector<int32_t> chars(text.begin(), text.end());
  group.send(std::span<const int32_t>(chars), dest);
}

std::vector<std::string> recv_names(comm::Communicator& group, int source) {
  std::array<int64_t, 1> size{0};
  group.recv(std::span<int64_t>(size), source);
  std::vector<int32_t> chars(static_cast<std::size_t>(size[0]));
  group.recv(std::span<int32_t>(chars), source);
  std::istringstream in(std::string(chars.begin(), chars.end()));
  std::vector<std::string> names;
  for (std::string name; std::getline(in, name);) names.push_back(name);
  return names;
}

// Parameter i's tensors in the order they travel: values, then (with an optimizer) its two moments.
std::vector<std::span<float>> tensors_of(nn::GPT& model, nn::AdamW* optimizer, std::size_t i) {
  std::vector<std::span<float>> t = {model.parameters()[i].tensor.values()};
  if (optimizer) {
    t.push_back(optimizer->exp_avg()[i].values());
    t.push_back(optimizer->exp_avg_sq()[i].values());
  }
  return t;
}

std::vector<std::span<float>> tensors_of(nn::GPT& model, nn::AdamW* optimizer, const std::string& name) {
  const auto& params = model.parameters();
  for (std::size_t i = 0; i < params.size(); ++i)
    if (params[i].name == name) return tensors_of(model, optimizer, i);
  nn::fail("checkpoint: the model has no parameter named '{}'", name);
}

void copy_all(const std::vector<std::span<float>>& from, const std::vector<std::span<float>>& to) {
  for (std::size_t k = 0; k < from.size(); ++k) std::ranges::copy(from[k], to[k].begin());
}

// Rank 0 of `group` collects into `whole` the tensors `takes` names of its own and of every
// other rank (every stage's; the last stage's wte the same values again; each ep rank's experts).
void collect_by_name(nn::GPT& mine, nn::AdamW& optimizer, comm::Communicator& group, const Takes& takes,
                     nn::GPT* whole, nn::AdamW* whole_optimizer) {
  if (group.rank() != 0) {
    send_names(mine, group, 0, takes);
    for (std::size_t i = 0; i < mine.parameters().size(); ++i)
      if (takes(mine.parameters()[i]))
        for (auto t : tensors_of(mine, &optimizer, i)) group.send(std::span<const float>(t), 0);
    return;
  }
  for (std::size_t i = 0; i < mine.parameters().size(); ++i)
    if (takes(mine.parameters()[i]))
      copy_all(tensors_of(mine, &optimizer, i), tensors_of(*whole, whole_optimizer, mine.parameters()[i].name));
  for (int r = 1; r < group.size(); ++r)
    for (const std::string& name : recv_names(group, r))
      for (auto t : tensors_of(*whole, whole_optimizer, name)) group.recv(t, r);
}

// The way back: rank 0 of `group` takes its tensors from `whole` and hands each other rank the
// tensors `takes` names of those it holds; the optimizer's step count from rank 0 to all.
void hand_out_by_name(nn::GPT& mine, nn::AdamW* optimizer, comm::Communicator& group, const Takes& takes,
                      nn::GPT* whole, nn::AdamW* whole_optimizer) {
  std::array<int64_t, 1> steps{0};
  if (group.rank() == 0) {
    nn::AdamW* source_optimizer = optimizer ? whole_optimizer : nullptr;
    for (std::size_t i = 0; i < mine.parameters().size(); ++i)
      copy_all(tensors_of(*whole, source_optimizer, mine.parameters()[i].name), tensors_of(mine, optimizer, i));
    for (int r = 1; r < group.size(); ++r)
      for (const std::string& name : recv_names(group, r))
        for (auto t : tensors_of(*whole, source_optimizer, name)) group.send(std::span<const float>(t), r);
    if (source_optimizer) steps[0] = source_optimizer->steps();
  } else {
    send_names(mine, group, 0, takes);
    for (std::size_t i = 0; i < mine.parameters().size(); ++i)
      if (takes(mine.parameters()[i]))
        for (auto t : tensors_of(mine, optimizer, i)) group.recv(t, 0);
  }
  group.broadcast(std::span<int64_t>(steps), 0);
  if (optimizer) optimizer->set_steps(steps[0]);
}

// ---- over the tensor-parallel group: a stage made whole --------------------------------------

// The stage whole, on tp rank 0: its parameters and moments gathered over the tp group into a
// copy; or, with one tp rank, the stage itself (nothing is cut: no copy is made). The copy holds
// the experts the stage holds (the same dispatcher): the same parameters, in the same order.
// (With tp folded into the experts' group each tp rank holds other experts: they are not cut,
// so no collective of the tp group touches them, and each goes by name with the ep ranks'.)
class WholeStage {
 public:
  WholeStage(nn::GPT& stage, nn::AdamW* optimizer, const nn::AdamWConfig& config, const Grid& grid) {
    if (grid.tp == 1) {
      model_ = &stage;
      optimizer_ = optimizer;
    } else if (grid.tp_rank == 0) {
      copy_.emplace(stage.config(), 0, stage.part(), nn::ComputeModes{},
                    nn::GPTLayers{.dispatcher = stage.layers().dispatcher});
      copy_optimizer_.emplace(copy_->parameters(), config);
      model_ = &*copy_;
      optimizer_ = optimizer ? &*copy_optimizer_ : nullptr;
    }
  }
  nn::GPT& model() { return *model_; }
  nn::AdamW* optimizer() { return optimizer_; }

 private:
  std::optional<nn::GPT> copy_;
  std::optional<nn::AdamW> copy_optimizer_;
  nn::GPT* model_ = nullptr;  // null off tp rank 0
  nn::AdamW* optimizer_ = nullptr;
};

}  // namespace

void save_checkpoint(const std::filesystem::path& dir, nn::GPT& model, nn::AdamW& optimizer,
                     const nlohmann::json& train_state, Grid& grid, nn::CheckpointWriter& writer) {
  WholeStage stage(model, &optimizer, optimizer.config(), grid);
  if (grid.tp > 1)  // every tp rank gathers each cut tensor; tp rank 0 keeps the whole
    for (std::size_t i = 0; i < model.parameters().size(); ++i) {
      const nn::NamedTensor& p = model.parameters()[i];
      const auto mine = tensors_of(model, &optimizer, i);
      for (std::size_t k = 0; k < mine.size(); ++k) {
        const std::vector<float> whole = model.layers().weights->gather(p.role, p.tensor.shape(), mine[k]);
        if (grid.tp_rank == 0) std::ranges::copy(whole, tensors_of(stage.model(), stage.optimizer(), i)[k].begin());
      }
    }
  // tp rank 0 sends from the stage made whole; the other tp ranks their own experts (the ones
  // the checkpoint takes from them: Grid::checkpoint_takes).
  nn::GPT& source = grid.tp_rank == 0 ? stage.model() : model;
  nn::AdamW& source_optimizer = grid.tp_rank == 0 ? *stage.optimizer() : optimizer;
  source_optimizer.set_steps(optimizer.steps());
  std::optional<nn::GPT> whole;
  std::optional<nn::AdamW> whole_optimizer;
  const bool writes = grid.checkpoint_group.rank() == 0;
  if (writes) {
    whole.emplace(model.config(), 0);
    whole_optimizer.emplace(whole->parameters(), optimizer.config());
    whole_optimizer->set_steps(optimizer.steps());
  }
  // Each parameter from the rank whose copy the checkpoint takes, by its role.
  const Takes takes = [&grid](const nn::NamedTensor& p) { return grid.checkpoint_takes(p.role); };
  collect_by_name(source, source_optimizer, grid.checkpoint_group, takes, whole ? &*whole : nullptr,
                  whole_optimizer ? &*whole_optimizer : nullptr);
  if (writes) writer.save(dir, *whole, *whole_optimizer, train_state);
}

void distribute_checkpoint(nn::GPT& model, nn::AdamW* optimizer, Grid& grid, nn::GPT* whole,
                           nn::AdamW* whole_optimizer) {
  WholeStage stage(model, optimizer, optimizer ? optimizer->config() : nn::AdamWConfig{}, grid);
  // tp rank 0 takes the stage's tensors; the other tp ranks their own experts.
  const Takes takes = [&grid](const nn::NamedTensor& p) {
    return grid.tp_rank == 0 || p.role == nn::ParameterRole::expert;
  };
  if (grid.tp_rank == 0)
    hand_out_by_name(stage.model(), stage.optimizer(), grid.checkpoint_group, takes, whole, whole_optimizer);
  else
    hand_out_by_name(model, optimizer, grid.checkpoint_group, takes, whole, whole_optimizer);
  if (grid.tp == 1) return;  // one tp rank: the stage took its tensors itself
  // tp rank 0 broadcasts each whole tensor over the group; every rank keeps its cut. (Experts
  // are whole, and each tp rank's own: tp rank 0 keeps the copy's, the others have theirs.)
  for (std::size_t i = 0; i < model.parameters().size(); ++i) {
    const nn::NamedTensor& p = model.parameters()[i];
    if (p.role == nn::ParameterRole::expert) {
      if (grid.tp_rank == 0) copy_all(tensors_of(stage.model(), stage.optimizer(), i), tensors_of(model, optimizer, i));
      continue;
    }
    const nn::Shape whole_shape = model.layers().weights->whole_shape(p.role, p.tensor.shape());
    const auto mine = tensors_of(model, optimizer, i);
    for (std::size_t k = 0; k < mine.size(); ++k) {
      std::vector<float> full(static_cast<std::size_t>(nn::numel_of(whole_shape)));
      if (grid.tp_rank == 0) std::ranges::copy(tensors_of(stage.model(), stage.optimizer(), i)[k], full.begin());
      grid.tp_group.broadcast(std::span(full), 0);
      std::ranges::copy(model.layers().weights->shard(p.role, whole_shape, full), mine[k].begin());
    }
  }
  if (!optimizer) return;
  std::array<int64_t, 1> steps{grid.tp_rank == 0 ? stage.optimizer()->steps() : 0};
  grid.tp_group.broadcast(std::span<int64_t>(steps), 0);
  optimizer->set_steps(steps[0]);
}

}  // namespace parallel
