// SPDX-License-Identifier: Apache-2.0
#pragma once
// Helpers shared by the engine behaviour tests (test_engine.cpp, test_engine_errors.cpp).

#include <ATen/CPUGeneratorImpl.h>
#include <torch/nn/functional/loss.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/optim/sgd.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/test_util.h"
#include "engine/models.h"
#include "zeroshard/base/error.h"
#include "zeroshard/engine/engine.h"

namespace zs = zeroshard;
using Strategy = zs::ShardingStrategy;
using zs::MemCategory;


namespace {

constexpr const char* kRoot = "<root>";

int64_t pad(int64_t numel, int n) { return (numel + n - 1) / n * n; }

// Sizes of one unit as the engine should lay them out: one flat for the trainable parameters and
// one for the frozen ones, each padded to a multiple of the shard group size.
struct UnitSize {
  int64_t trainable = 0, frozen = 0;                // unpadded elements
  int64_t padded_trainable = 0, padded_frozen = 0;  // padded elements
  int64_t bytes() const { return 4 * (padded_trainable + padded_frozen); }
  int64_t padded() const { return padded_trainable + padded_frozen; }
};

// Computed independently of the engine: a parameter belongs to the innermost unit whose path
// prefixes its name; a tensor reachable from two different units (tied) belongs to the root.
std::map<std::string, UnitSize> expected_unit_sizes(torch::nn::Module& model, const std::vector<std::string>& units,
                                                    int n) {
  std::unordered_map<const void*, std::pair<std::string, at::Tensor>> owner;
  std::vector<const void*> order;
  for (const auto& item : model.named_parameters(/*recurse=*/true)) {
    std::string best = kRoot;
    for (const auto& u : units) {
      if (u != kRoot && item.key().rfind(u + ".", 0) == 0 && (best == kRoot || u.size() > best.size())) best = u;
    }
    const void* key = item.value().unsafeGetTensorImpl();
    auto it = owner.find(key);
    if (it == owner.end()) {
      owner.emplace(key, std::make_pair(best, item.value()));
      order.push_back(key);
    } else if (it->second.first != best) {
      it->second.first = kRoot;
    }
  }
  std::map<std::string, UnitSize> out;
  for (const auto& u : units) out[u];
  for (const void* key : order) {
    const auto& [unit, t] = owner.at(key);
    UnitSize& s = out[unit];
    (t.requires_grad() ? s.trainable : s.frozen) += t.numel();
  }
  for (auto& [name, s] : out) {
    s.padded_trainable = pad(s.trainable, n);
    s.padded_frozen = pad(s.frozen, n);
  }
  return out;
}

int64_t total(const std::map<std::string, UnitSize>& sizes, int64_t UnitSize::*field) {
  int64_t t = 0;
  for (const auto& [name, s] : sizes) t += s.*field;
  return t;
}

// Bytes of the root plus the `k` largest other units, by `bytes_of`.
int64_t root_plus_largest(const std::map<std::string, UnitSize>& sizes, size_t k,
                          const std::function<int64_t(const UnitSize&)>& bytes_of) {
  std::vector<int64_t> others;
  for (const auto& [name, s] : sizes) {
    if (name != kRoot) others.push_back(bytes_of(s));
  }
  std::sort(others.rbegin(), others.rend());
  int64_t b = bytes_of(sizes.at(kRoot));
  for (size_t i = 0; i < k && i < others.size(); ++i) b += others[i];
  return b;
}

zs::ShardingOptions options_for(Strategy strategy) {
  zs::ShardingOptions o;
  o.strategy = strategy;
  return o;
}

// One forward + backward of the MLP on this rank's part of the batch (different on every rank).
void mlp_forward_backward(zs::ShardingEngine& engine, zs_test::Mlp& model, int64_t step) {
  auto g = torch::make_generator<at::CPUGeneratorImpl>(500 + 17 * step + zs::test::rank());
  torch::Tensor x = torch::randn({4, 7}, g), y = torch::randn({4, 5}, g);
  torch::Tensor loss = engine.forward([&] { return torch::mse_loss(model->forward(x), y); });
  loss.backward();
}

// Runs `fn`; returns the message of the zeroshard::UsageError it throws, or a description of
// what happened instead (never throws, so every rank goes on to the same next collective).
std::string usage_error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const zs::UsageError& e) {
    return e.what();
  } catch (const c10::Error& e) {
    return std::string("<not a UsageError: ") + e.what_without_backtrace() + ">";
  } catch (const std::exception& e) {
    return std::string("<not a UsageError: ") + e.what() + ">";
  }
  return "<no exception>";
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// Keeps a model holding zeroshard::Units alive until the process ends. The engine's registry of
// declared units is keyed by raw module address and never forgets a destroyed module (see
// Units.DeclarationEndsWithTheModule), so a plain module that the allocator later places at a dead
// Unit's address would be taken for a unit. Keeping the models alive stops that from confounding
// the other tests; the bug itself is exposed by its own test.
template <typename Holder>
Holder keep_alive(Holder h) {
  static std::vector<std::shared_ptr<torch::nn::Module>> graveyard;
  graveyard.push_back(h.ptr());
  return h;
}

// Largest |a - b| over all entries of a state dict between this rank and rank 0 (collective).
double max_difference_from_rank0(const std::map<std::string, at::Tensor>& sd) {
  double worst = 0;
  for (const auto& [name, t] : sd) {
    at::Tensor copy = t.detach().clone().contiguous();
    zs::test::world()->broadcast(copy, 0, "test.state_dict")->wait();
    worst = std::max(worst, zs::test::max_abs_diff(copy, t));
  }
  at::Tensor w = at::full({1}, worst, at::kDouble);
  zs::test::world()->all_reduce(w, zs::ReduceOp::kMax, "test.state_dict_max")->wait();
  return w.item<double>();
}

}  // namespace
