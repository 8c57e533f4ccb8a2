// SPDX-License-Identifier: Apache-2.0
#pragma once
// Optimizers over each rank's flat fp32 shards (ZeRO: optimizer state exists only for the shard).
//
// The engine calls step() with the same list of shards, in the same order, every step; state is
// kept per position in that list (and checked against the shard's size). The math is that of
// torch::optim (SGD, Adam, AdamW) applied element-wise, so a sharded run matches an unsharded
// torch::optim run on the same inputs within 1e-6 relative (tests hold this). State lives on the
// shards' device. Adam/AdamW over CUDA shards with LibTorch 2.x run LibTorch's fused multi-tensor
// kernel (one launch per step for all shards, no host sync), equal up to fp32 rounding.
// Not thread-safe.

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>


namespace zeroshard {

// A parameter group's share of a shard: elements [begin, end) of the shard are updated with
// `weight_decay` (replacing the optimizer's own) and lr() * `lr_scale`, as torch::optim updates
// the parameters of a param group with that group's options.
struct ShardGroupRange {
  int64_t begin = 0;
  int64_t end = 0;
  double weight_decay = 0;
  double lr_scale = 1;
};

// One flat fp32 shard and its gradient. `grad` undefined: no gradient this step (skipped, as
// torch::optim skips parameters without .grad).
struct ParamShard {
  at::Tensor param;  // fp32, contiguous, updated in place
  at::Tensor grad;   // fp32, same size, or undefined
  std::string name;  // unit name, for error messages
  // Sorted, disjoint ranges with their own options (ShardingEngine::set_param_groups makes them);
  // elements outside every range (or all, when empty) take the optimizer's weight decay and lr().
  std::vector<ShardGroupRange> groups;
  // The values were replaced since the last step from outside training (load_pretrained): an
  // optimizer that keeps an fp32 master of its own (offloaded) takes them over before updating.
  bool values_replaced = false;
};

// The shard cut into runs of equal options that cover [0, numel) in order: `shard.groups` with the
// gaps filled by {default_weight_decay, lr_scale 1} and equal neighbours merged (one run when no
// groups). UsageError naming the shard if its groups are unsorted, overlap, leave the shard, or
// hold a negative or non-finite value. The optimizers update run by run, every op element-wise,
// so each element sees exactly its group's options.
// `numel` < 0: shard.param's (a paged shard, whose param is not loaded, passes its size).
std::vector<ShardGroupRange> shard_runs(const ParamShard& shard, double default_weight_decay, int64_t numel = -1);

// Optimizer state of one shard position, for checkpoints: the updates it received (Adam's bias
// correction counts them) and its per-element fp32 state tensors, named as state_names() says,
// each of the shard's size (none before the first update).
//
// The tensors may come lazily: `read` set and `tensors` empty. Checkpoints stream through this
// (state offloaded to NVMe or held on a GPU is exported lazily, a load's state is imported
// lazily), so a save or load holds one position's state at a time, never all of it. `read` may
// be called more than once; it is valid until the next step() or import_state() of the optimizer
// that exported it (an imported reader: as long as its files).
struct ShardOptimizerState {
  int64_t updates = 0;
  std::vector<at::Tensor> tensors;  // one per state_names() entry, or empty
  std::function<std::vector<at::Tensor>()> read;
  int64_t read_numel = 0;  // with `read`: the elements of each tensor it returns

  bool has_tensors() const { return read ? true : !tensors.empty(); }
  // Elements of each state tensor without reading them (0 when there are none).
  int64_t numel() const { return read ? read_numel : tensors.empty() ? 0 : tensors[0].numel(); }
  // The tensors, read now when they come lazily (then checked to hold read_numel elements each:
  // CheckpointError otherwise).
  std::vector<at::Tensor> materialize() const;
};

// Shards whose values live elsewhere between uses (offload.params = CPU or NVME, shard_store.h):
// the step is handed shards whose `param` is undefined, and brings each in only while it updates
// it, so no more than a shard or two is resident at once.
class ShardPager {
 public:
  virtual ~ShardPager() = default;
  virtual int64_t numel(size_t i) const = 0;  // elements of shard i
  // Makes shards[i].param valid: with `read`, holding the shard's values (loads them; waits for a
  // prefetch); without, a tensor of the shard's size whose contents the caller overwrites whole
  // (nothing is read: an update whose new values come from the master copy elsewhere). With
  // `grad`, shards[i].grad holds the gradient's values too (offload.grads: until then it is a
  // placeholder on the meta device); a caller that only writes the parameters passes false.
  // Throws (IoError naming file and offset) with nothing of shard i acquired.
  virtual void acquire(size_t i, bool read = true, bool grad = true) = 0;
  // shards[i].param was updated (or not, `modified` false): writes it back where it lives and
  // drops it (shards[i].param becomes undefined; an offloaded gradient is dropped unchanged). A
  // failed write throws IoError naming the file and offset, and keeps the values in memory, so
  // nothing is lost.
  virtual void release(size_t i, bool modified) = 0;
  // Starts loading shard i ahead of acquire(i, read) (no-op for i past the end).
  virtual void prefetch(size_t i, bool read = true) = 0;

  // Generations of the shards' fp32 values that the pager keeps where they live (files on NVMe,
  // written by a step into the one it did not read); 0 when it keeps none the optimizer could use
  // as its master (resident shards, host memory, a GPU run). An offloaded optimizer whose records
  // would keep as many generations keeps its moments only and reads the master through acquire().
  virtual int master_generations() const { return 0; }
  // Bracket a step that relies on them: between begin_step() and commit(), released shards are
  // written into the generation not read; commit() makes them current (IoError when a write
  // failed, the step still open); abandon() returns every shard to its values before begin_step(),
  // dropping what is resident (never throws).
  virtual void begin_step() {}
  virtual void commit() {}
  virtual void abandon() noexcept {}
};

// Gradient shards that may live off memory between uses (offload.grads): read one at a time, and
// scaled where they are (in place when resident, at the next load when offloaded), so unscaling
// or clipping never writes an offloaded gradient back. ShardingEngine::gradients() is one.
class GradientShards {
 public:
  virtual ~GradientShards() = default;
  virtual size_t size() const = 0;  // shards holding a gradient
  // Gradient i with its values (an offloaded one loaded, recorded factors applied). Read only.
  virtual const at::Tensor& read(size_t i) = 0;
  virtual void prefetch(size_t i) = 0;         // starts loading gradient i ahead of read(i)
  virtual bool offloaded(size_t i) const = 0;  // lives off memory between reads
  virtual void release(size_t i) = 0;          // drops an offloaded gradient read() loaded
  virtual void scale(size_t i, double factor) = 0;
};

class ShardedOptimizer {
 public:
  virtual ~ShardedOptimizer() = default;

  // One update of every shard at the current lr(). Throws UsageError if a shard's size or dtype
  // differs from the first step's (naming the shard) or the list length changed.
  virtual void step(const std::vector<ParamShard>& shards) = 0;
  // The same update with offloaded parameter shards brought in through `pager` one at a time.
  // Only optimizers whose state lives off the device do this (OffloadedOptimizer); the default
  // throws UsageError: offloaded shards need an offloaded optimizer.
  virtual void step(std::vector<ParamShard>& shards, ShardPager& pager);
  // True for an optimizer built for offloaded parameter shards (OffloadedOptimizer with
  // OffloadOptions::params CPU or NVME): the engine refuses to step it over parameters it keeps
  // resident, and the reverse.
  virtual bool expects_offloaded_params() const { return false; }

  // --- a step overlapped with backward (ShardingEngine::step_during_backward) ---
  // The shards come one at a time as their gradients become final, each updated on a thread of the
  // engine's while the caller's thread runs the rest of backward. The new values and state are
  // kept beside the old ones until the step ends, so that it can be abandoned (a clip that changes
  // the gradients, a non-finite norm that skips the step) and the optimizer and shards are then
  // exactly as before it. Only an optimizer with its state in host memory and resident shards does this
  // (OffloadedOptimizer, target CPU); the defaults throw UsageError.
  virtual bool steps_shards_during_backward() const { return false; }
  // Starts such a step over `shards` (step()'s list; gradients not final yet). Checks the list as
  // step() does, and applies imported state.
  virtual void begin_shard_step(const std::vector<ParamShard>& shards);
  // Updates shard i (its position in the list) at lr(). Called from one thread, which is not the
  // one that calls the other functions, between begin_shard_step() and the end of the step; the
  // caller keeps the shard's values and gradient untouched meanwhile.
  virtual void step_shard(size_t i, const ParamShard& shard);
  // Ends the step: the shards not stepped yet are stepped (as step() does), and the step counts.
  virtual void finish_shard_step(const std::vector<ParamShard>& shards);
  // Ends the step uncounted: every shard step_shard() updated gets its values and state back.
  // Returns how many shards were restored.
  virtual size_t abandon_shard_step(const std::vector<ParamShard>& shards);

  double lr() const { return lr_; }
  void set_lr(double lr) { lr_ = lr; }

  // Bytes of optimizer state currently held (momentum buffers, Adam moments).
  virtual int64_t state_bytes() const = 0;
  // Where the optimizer's bytes live: on the shards' device, in host memory (offload to CPU, incl.
  // a host fp32 master copy), in files (offload to NVMe). Default: everything on the device.
  struct Placement {
    int64_t device = 0;
    int64_t host = 0;
    int64_t nvme = 0;
  };
  virtual Placement placement() const { return {state_bytes(), 0, 0}; }
  // e.g. "AdamW(lr=0.001, betas=(0.9, 0.999), eps=1e-08, weight_decay=0.01)"
  virtual std::string describe() const = 0;
  // Number of completed step() calls.
  virtual int64_t steps() const = 0;

  // --- state for checkpoints ---
  // Names of the per-element state tensors, e.g. {"exp_avg", "exp_avg_sq"}; {} for plain SGD.
  virtual std::vector<std::string> state_names() const = 0;
  // Every shard position's state (CPU, fp32, contiguous), in shard-list order; empty before the
  // first step. Tensors may alias the live state (valid until the next step or import): clone
  // them to keep them. State that does not live in host memory (offloaded to NVMe, on a GPU)
  // comes lazily (ShardOptimizerState::read), read back from where it lives when asked.
  virtual std::vector<ShardOptimizerState> export_state() const = 0;
  // Replaces the state (e.g. from a checkpoint, possibly resharded): one entry per shard position,
  // eager or lazy. Applied at the next step(), one position at a time (a lazy entry is read then
  // and dropped once applied), where sizes are checked against the shards (UsageError naming the
  // position); steps() becomes `steps`.
  virtual void import_state(std::vector<ShardOptimizerState> state, int64_t steps) = 0;

 protected:
  explicit ShardedOptimizer(double lr) : lr_(lr) {}
  double lr_;
};

struct SgdOptions {
  double lr = 0.01;
  double momentum = 0;
  double dampening = 0;
  double weight_decay = 0;  // L2: added to the gradient
  bool nesterov = false;
};

struct AdamOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0;  // Adam: L2 added to the gradient; AdamW: decoupled
  bool amsgrad = false;
};

std::unique_ptr<ShardedOptimizer> make_sgd(const SgdOptions& options);
std::unique_ptr<ShardedOptimizer> make_adam(const AdamOptions& options);
std::unique_ptr<ShardedOptimizer> make_adamw(const AdamOptions& options);

// The optimizer a run trains with, whatever holds its state (the device, or the offloaded
// optimizer): the algorithm and its hyperparameters. The defaults are the config's (`optimizer`).
struct OptimizerOptions {
  enum class Type {
    kAdam,   // ADAM: L2 penalty added to the gradient
    kAdamW,  // ADAMW: decoupled weight decay
    kSgd,    // SGD with optional momentum
  };
  Type type = Type::kAdamW;
  double lr = 1e-3;
  double beta1 = 0.9;         // Adam
  double beta2 = 0.999;       // Adam
  double eps = 1e-8;          // Adam
  double weight_decay = 0.01;
  double momentum = 0;        // SGD
  bool nesterov = false;      // SGD (needs momentum > 0)
};
const char* to_string(OptimizerOptions::Type t);  // "ADAM", "ADAMW", "SGD"

// The options of each algorithm (SGD: dampening 0; Adam: amsgrad off). UsageError naming
// OptimizerOptions.type when it is not that algorithm.
SgdOptions sgd_options(const OptimizerOptions& options);
AdamOptions adam_options(const OptimizerOptions& options);

// SGD, Adam or AdamW as `options.type` says. UsageError naming OptimizerOptions.<field> for an
// out-of-range value and for momentum / nesterov with an Adam type (which cannot honour them).
std::unique_ptr<ShardedOptimizer> make_optimizer(const OptimizerOptions& options);

}  // namespace zeroshard
