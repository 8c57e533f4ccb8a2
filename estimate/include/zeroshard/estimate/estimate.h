// SPDX-License-Identifier: Apache-2.0
#pragma once
// Memory estimates before a run: per-rank bytes of model states for a strategy, precision,
// optimizer and offload setting (the ZeRO formulas, laid out the way the engine lays out flat
// parameters), and the activations of a GPT-style model per micro-batch. zeroshard-estimate prints
// them; tests/tools/test_estimate.cpp holds the device-resident predictions against the engine's
// own accounting (ShardingEngine::memory()).
//
// Model states per rank, for a shard group of N ranks (FULL_SHARD and SHARD_GRAD_OP: the world;
// HYBRID_SHARD: hybrid_group_size, 0 = ranks per node; NO_SHARD: 1). Each unit's parameters are
// one flat buffer padded to a multiple of N; a rank keeps 1/N of each:
//   sharded params (fp32 master)  4 bytes x padded / N
//   gradient shards (fp32)        4 bytes x padded / N      (from backward until zero_grad)
//   optimizer state               Adam/AdamW 8, SGD with momentum 4, plain SGD 0 bytes x padded / N
// Transient, at the peak of a step after the first (the first records the order, no prefetch):
//   gathered params   param_dtype bytes x (root + the 2 largest units) with prefetch, (root + the
//                     largest) without; SHARD_GRAD_OP keeps every unit gathered from forward to
//                     backward; none when the shard group is 1 rank and param_dtype is fp32 (the
//                     parameters are views of the shard); NO_SHARD with bf16/fp16 keeps one
//                     gathered copy of everything.
//   unsharded grads   param_dtype bytes x (root + the 2 largest units): the unit computing its
//                     gradients and the one whose reduce-scatter is in flight.
//   comm buffers      reduce_dtype bytes x the 2 largest units' shards (reduce-scatter outputs).
// The peak of their sum (device_peak) comes from replaying a step unit by unit: the transients
// peak in backward, while only some gradient shards exist yet.
// Offload (offload.optimizer / offload.params = CPU or NVME) moves the fp32 master and moments
// (12 bytes / param / N for Adam; on NVMe times offload.nvme_generations: by default the store
// keeps the previous step's generation) to host memory or NVMe, and the rank's fp32 parameter shard to host or NVMe (the
// ShardStore; on a CPU run with both in host memory the shard is the optimizer's master); the
// device peak then counts the two largest shards, which a prefetched gather and the read-ahead
// behind it hold in the middle of backward (an upper bound: test_estimate checks disk bytes and
// the peak of NVMe runs against the engine). CPU offload is formulas only.
// Thread-safety: pure functions.

#include <cstdint>
#include <string>
#include <vector>

#include "zeroshard/engine/options.h"

namespace zeroshard {

// Parameter counts of the sharded units of a model.
struct ModelShape {
  int64_t root_params = 0;           // owned by the root unit (embeddings, final norm, tied weights)
  std::vector<int64_t> unit_params;  // one entry per wrapped unit (e.g. transformer block)
  int64_t total() const;
  int64_t largest_unit() const;  // 0 without units
};

// A GPT-style model as in tests/sharding/models.h and the examples: token embedding tied to the
// output projection, learned positions, pre-norm blocks with bias-free qkv, proj, 4x MLP (GELU),
// two LayerNorms, a final LayerNorm. Per block 12 d^2 + 10 d parameters; root V d + S d + 2 d.
struct GptShape {
  int64_t layers = 0, d_model = 0, vocab = 0, seq = 0;
  int64_t heads = 0;  // for the attention matrix in the activation estimate; 0 = d_model / 64 (at least 1)
  int64_t effective_heads() const;
};
ModelShape gpt_model_shape(const GptShape& g);

// `params` split into units of `unit_params` (the last one smaller) with nothing in the root;
// unit_params 0 = one unit holding everything.
ModelShape uniform_model_shape(int64_t params, int64_t unit_params);

struct EstimateOptions {
  int world_size = 1;
  int ranks_per_node = 1;
  // Strategy, hybrid group size, prefetch and the dtypes gathered (param_dtype) and reduced
  // (reduce_dtype); the rest of ShardingOptions does not change the figures.
  ShardingOptions sharding;
  std::string optimizer = "ADAMW";  // for the table's header line
  int optimizer_state_bytes = 8;    // per parameter: Adam/AdamW 8 (two fp32 moments), SGD 4 or 0
  OffloadTarget offload_optimizer = OffloadTarget::kDevice;
  OffloadTarget offload_params = OffloadTarget::kDevice;
  OffloadTarget offload_grads = OffloadTarget::kDevice;  // offload.grads: gradient shards between backward and step
  // offload.keep_param_dtype_shard: offloaded shards also resident in param_dtype (on the device).
  bool keep_param_dtype_shard = false;
  // The NVMe pipelines' pinned buffers: offload.buffer_count of them, each offload.block_size bytes per
  // array a record streams (see offload_staging in estimate.cpp).
  int offload_buffer_count = 4;
  int64_t offload_block_size = int64_t{1} << 20;
  int nvme_generations = 2;                  // offload.nvme_generations: copies of the state on NVMe
  // The ranks compute on GPUs. On a CPU run with the optimizer state and the parameters both on
  // NVMe the parameter store holds the fp32 master (nvme_generations copies) and the optimizer's
  // files the moments only; a GPU run's optimizer keeps a master of its own in its files.
  bool gpu = false;
  // comm.node_stages and comm.reduce_scatter_ring: how the MPI backend's collectives cross nodes
  // (for estimate_step_comm).
  bool node_stages = true;
  bool reduce_scatter_ring = true;
};

// Bytes per rank. The categories match zeroshard::MemCategory.
struct MemoryEstimate {
  int shard_group = 1;  // N
  // Persistent.
  int64_t sharded_params = 0;   // on the device (0 when params are offloaded)
  int64_t grad_shards = 0;      // on the device (0 when gradients are offloaded)
  int64_t optimizer_state = 0;  // on the device (0 when the optimizer is offloaded)
  int64_t offload_host = 0;     // offloaded optimizer state / parameter and gradient shards in host memory
  int64_t nvme = 0;             // on NVMe (disk)
  // Transient peaks.
  int64_t gathered_params_peak = 0;
  int64_t grad_buffers_peak = 0;
  int64_t comm_buffers_peak = 0;
  int64_t pinned_host = 0;  // pinned staging buffers for offload

  // The highest sum of the device categories during a step: the step is replayed unit by unit as
  // the engine runs it (forward with prefetch; backward from the last unit, gradient shards
  // appearing as each unit's reduce-scatter completes), after zero_grad freed the gradient shards.
  int64_t device_peak = 0;

  int64_t device_persistent() const { return sharded_params + grad_shards + optimizer_state; }
  int64_t host_total() const { return offload_host + pinned_host; }
  bool offloaded = false;  // true: the offload figures are formulas not yet held against measurement
};

// Throws ConfigError for an impossible setup (a HYBRID_SHARD group not dividing the world), and
// UsageError for a world size or ranks per node below 1 or a model with no parameters.
MemoryEstimate estimate_memory(const ModelShape& model, const EstimateOptions& options);

// Activation bytes of one micro-batch of `micro_batch` sequences of g.seq tokens, saved for
// backward by the GPT-style model above (LibTorch autograd, no dropout), in `dtype_bytes`:
//   per block  16 b s d + h b s^2 elements (inputs of the two norms and four linears, q/k/v, MLP
//              hidden before and after GELU, the softmax output) + an s x s causal mask
//   head       2 b s d + 2 b s V (final norm in/out, logits, log-softmax for the loss)
// With activation checkpointing a checkpointed block keeps only its input (b s d), and one
// block's activations exist at a time while it is recomputed. `every_n_blocks` k checkpoints
// blocks 0, k, 2k, ... (activation_checkpointing.every_n_blocks).
struct ActivationEstimate {
  int64_t per_block = 0, head = 0;
  int64_t plain = 0;         // layers x per_block + head
  int64_t checkpointed = 0;  // c x b s d + (layers - c) x per_block + per_block + head, c blocks checkpointed
};
ActivationEstimate estimate_gpt_activations(const GptShape& g, int64_t micro_batch, int dtype_bytes,
                                            int every_n_blocks = 1);

// The links between nodes, for the communication estimate of a step.
struct LinkOptions {
  double bytes_per_s = 0;   // each node's link, each way (e.g. 100 Mb/s = 12.5e6)
  double latency_s = 0;     // one way, per message between nodes
  double compute_s = 0;     // a step's compute per rank with communication out of the way; 0: unknown
};

// What one step of a strategy puts on the links between nodes, as the MPI backend runs its
// collectives (world_size / ranks_per_node nodes of ranks_per_node ranks, placed node by node),
// bytes each node sends over its link (it receives as many):
//   all-gather of a buffer of B bytes over ranks on K nodes: in two stages (node_stages)
//     (K-1)/K x B; as one MPI_Iallgather every rank's shard goes to every rank of the other
//     nodes: L (K-1)/K x B, L ranks per node;
//   reduce-scatter: in two stages (K-1)/K x B, as zeroshard's ring (N-1)/N x B over N ranks;
//   all-reduce across R replicas (HYBRID_SHARD's shards): 2 (R-1)/R x B.
// Per step FULL_SHARD gathers every flat parameter in forward and every unit's again in backward
// (the root stays gathered), SHARD_GRAD_OP once; both reduce-scatter every flat once; HYBRID_SHARD
// gathers and reduce-scatters inside its shard groups (no link bytes when a group is inside a node)
// and all-reduces the reduced shards across the replicas. Gathers move param_dtype bytes (int8
// gathers: their encoded bytes), reductions reduce_dtype bytes. NO_SHARD's all-reduce runs as one
// MPI_Iallreduce, whose path through the nodes is Open MPI's choice: not modelled.
// Time: comm = bytes / bytes_per_s + latency x messages between nodes; with compute_s the step
// lies between max(compute, comm) (all communication hidden behind compute) and compute + comm
// (none hidden), and the estimate is their middle: the engine overlaps gathers (prefetch) and
// reduce-scatters (backward) with compute, but not all of them (docs/tools.md has it against the
// simulated cluster's measurements).
struct StepCommEstimate {
  ShardingStrategy strategy = ShardingStrategy::kFullShard;
  std::string not_modelled;  // why the strategy has no figures; empty when it has
  int nodes = 1;
  double link_bytes = 0;        // per node and step, each way
  double messages = 0;          // messages between nodes per step, on one rank's critical path
  double comm_s = 0;            // link_bytes / bytes_per_s + latency x messages
  // With compute_s (0 otherwise): the step's estimate and bounds, and the share of the estimate
  // spent in communication not hidden behind compute ((step_s - compute_s) / step_s).
  double step_s = 0, step_min_s = 0, step_max_s = 0, exposed_share = 0;
};
// UsageError for a world size not a multiple of ranks_per_node or a link of no bandwidth.
StepCommEstimate estimate_step_comm(const ModelShape& model, const EstimateOptions& options, const LinkOptions& link);

// The communication table zeroshard-estimate prints with --link-gbps: every strategy (the
// configured one marked '*'), bytes per node and step, comm time, and with compute_s the step.
std::string format_step_comm(const ModelShape& model, const EstimateOptions& options, const LinkOptions& link);

// The table zeroshard-estimate prints: every strategy x offload mode (or just `only`), per rank.
std::string format_estimates(const ModelShape& model, const EstimateOptions& options);

}  // namespace zeroshard
