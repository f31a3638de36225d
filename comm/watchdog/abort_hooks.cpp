#include "comm/watchdog/abort_hooks.hpp"

#include <array>
#include <atomic>

#include "comm/error.hpp"

namespace comm {
namespace {
std::array<std::atomic<AbortHook>, kMaxAbortHooks> g_hooks{};
}  // namespace

void add_abort_hook(AbortHook hook) {
  for (auto& slot : g_hooks) {
    AbortHook empty = nullptr;
    if (slot.load() == hook || slot.compare_exchange_strong(empty, hook)) return;
    if (empty == hook) return;  // another thread added it just now
  }
  fail("more than {} abort hooks", kMaxAbortHooks);
}

void run_abort_hooks() {
  for (auto& slot : g_hooks)
    if (AbortHook hook = slot.load()) hook();
}

}  // namespace comm
