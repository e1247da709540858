#include "compiler/planner/plan_builder.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "compiler/graph/graph.h"
#include "compiler/ops/kernel_families.h"
#include "compiler/ops/op_table.h"
#include "compiler/plan/plan_io.h"
#include "compiler/planner/bucketing.h"
#include "compiler/planner/memory_plan.h"
#include "compiler/util/status_macros.h"

namespace trainc {
namespace {

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Buffers live the whole run, at offsets fixed before the arena is
// planned. ZeRO-2's buckets (and their gradient views) and ZeRO-3's
// gathered parameter spans (and their views and bf16 copies) are planned by
// liveness like activations.
bool IsPersistent(BufferKind kind, int64_t zero) {
  switch (kind) {
    case BufferKind::kInput:
    case BufferKind::kLabel:
    case BufferKind::kActivation:
    case BufferKind::kActivationGrad:
    case BufferKind::kWorkspace:
      return false;
    case BufferKind::kBucket:
    case BufferKind::kGradient:
      return zero < 2;
    case BufferKind::kParameterSpan:
    case BufferKind::kParameter:
    case BufferKind::kParameterCopy:
      return zero < 3;
    default:
      return true;
  }
}

// ZeRO-3: a bucket's parameters gathered for one pass of a micro-step.
struct GatherUnit {
  bool backward = false;
  int bucket = -1;
  int first_node = -1;  // the graph node first reading them in that pass
  // Every read in that pass is of a bf16 copy: the bf16 copies gathered
  // (each rank's shard cast first), half the bytes.
  bool bf16 = true;
};

// ZeRO-3's gathers: the units of every micro-step, and the buffers of the
// micro-step being emitted.
struct ZeroThreeState {
  std::vector<GatherUnit> units;    // in the order a micro-step first reads them
  std::vector<int> bucket_of;       // parameter value -> its bucket, else -1
  std::vector<int> cast_of;         // bf16 copy value -> its cast (node index), else -1
  std::vector<int> copy_of;         // parameter value -> its bf16 copy value, else -1
  std::map<std::pair<bool, int>, int> unit_of;  // (backward, bucket) -> unit
  std::map<int, std::vector<int>> triggered;    // node -> units gathered before it
  std::vector<int> at_start;                    // units gathered before load_batch
  // This micro-step's: per unit, its parameter views (parameter value ->
  // its buffer, or its bf16 copy's in a bf16 unit), all_gather and whether
  // a reader waited for it; per pass, the bf16 copies cast from f32
  // gathers (value -> buffer).
  std::vector<int> gathered;
  std::vector<std::map<int, int>> views;
  std::vector<bool> waited;
  std::map<int, int> copies[2];
};

}  // namespace

// All state of one PlanBuilder.
class PlanBuilder::Impl {
 public:
  Impl(const TrainSpec& spec, const Graph& graph, const PlanOptions& options,
       const BucketSizes& sizes, const ZeroChoices& zero)
      : spec_(spec),
        graph_(graph),
        options_(options),
        sizes_(sizes),
        zero_accumulate_(zero.accumulate),
        zero_prefetch_(zero.prefetch),
        accumulate_(static_cast<int>(spec.train.accumulate)),
        deterministic_(spec.train.deterministic),
        shared_(graph.values().size(), -1),
        slots_(graph.values().size()) {}

  // The first half of Build: the config and which parameters share a
  // bucket (each bucket's parameter value ids, in bucket order).
  std::vector<std::vector<int>> AssignBuckets() {
    FillConfig();
    AssignGradientBuckets();
    std::vector<std::vector<int>> members;
    for (const BucketInfo& b : buckets_) members.push_back(b.params);
    return members;
  }

  // The rest, after AssignBuckets. `for_costing`: only what the cost model
  // reads (instructions, buffers and their shapes; no workspace sizes, no
  // arena, no validation), for bucket_mb = auto's candidates.
  absl::StatusOr<Plan> Build(bool for_costing = false) {
    CreatePersistentBuffers();
    if (ShardedParams()) PlanGatherUnits();
    if (GatherInNextForward()) EmitParameterGathers();
    for (int k = 0; k < accumulate_; ++k) EmitMicroStep(k);
    EmitOptimizer();
    if (for_costing) return std::move(plan_);
    RETURN_IF_ERROR(SizeWorkspaces());
    PlanArena();
    RETURN_IF_ERROR(ValidatePlan(plan_));
    if (options_.bf16_staging && plan_.memory.bf16_staging_bytes > 0) {
      ASSIGN_OR_RETURN(plan_.memory.bf16_staging_bytes, options_.bf16_staging(plan_));
    }
    return std::move(plan_);
  }

 private:
  struct BucketInfo {
    std::vector<int> params;  // parameter value ids, ready order
    int ready_node = -1;      // graph node writing the last gradient
    int done_event = -1;      // recorded by its all_reduce (reduce_scatter)
    int gathered_event = -1;  // zero_gather = next_forward: its all_gather's
    bool weight_decay = true;
  };

  void FillConfig() {
    const TrainConfig& t = spec_.train;
    plan_.model = spec_.model.name;
    plan_.model_signature = ModelSignature(spec_.model);
    plan_.source = spec_.source_path;
    plan_.world_size = t.gpus;
    plan_.micro_batch = t.micro_batch;
    plan_.accumulate = t.accumulate;
    plan_.global_batch = t.global_batch;
    plan_.epochs = t.epochs;
    plan_.steps = t.steps;
    plan_.seed = t.seed;
    plan_.deterministic = t.deterministic;
    plan_.tf32 = t.tf32;
    plan_.bucket_mb = sizes_.bucket_mb;
    const OptimizerSpec& o = t.optimizer;
    OptimizerConfig& c = plan_.optimizer;
    c.kind = o.kind;
    c.lr = o.lr;
    c.momentum = o.momentum;
    c.nesterov = o.nesterov;
    c.weight_decay = o.weight_decay;
    c.beta1 = o.beta1;
    c.beta2 = o.beta2;
    c.eps = o.eps;
    if (o.kind == OptimizerKind::kAdamW) {
      state_kinds_ = {"m", "v"};
    } else if (o.momentum > 0) {
      state_kinds_ = {"momentum"};
    }
    plan_.schedule.kind = t.schedule.kind;
    plan_.schedule.warmup_steps = t.schedule.warmup_steps;
    plan_.schedule.total_steps = t.steps;  // with epochs: known once the data is
    plan_.data.format = spec_.data.train.format;
    plan_.data.train_paths = spec_.data.train.paths;
    plan_.data.tokenizer = spec_.data.train.tokenizer;
    plan_.data.eval_paths = spec_.data.eval.paths;
    plan_.data.train_split = {spec_.data.train.split_begin, spec_.data.train.split_end};
    plan_.data.eval_split = {spec_.data.eval.split_begin, spec_.data.eval.split_end};
    plan_.data.scale = spec_.data.scale;
    plan_.data.shuffle = spec_.data.shuffle;
    plan_.data.random_crop = spec_.data.random_crop;
    plan_.data.random_flip = spec_.data.random_flip;
    plan_.loss_terms = spec_.model.loss_terms;
    plan_.clip_grad_norm = t.clip_grad_norm;
    plan_.skip_nonfinite = t.skip_nonfinite;
    // One rank has nothing to shard: ZeRO on one rank is plain DDP.
    plan_.zero = t.gpus > 1 ? t.zero : 0;
    // ZeRO-3 gathers before every use (zero_prefetch says how early).
    plan_.zero_gather = plan_.zero == 1 || plan_.zero == 2 ? t.zero_gather : ZeroGather::kStepEnd;
    plan_.zero_prefetch = plan_.zero == 3 ? zero_prefetch_ : 0;
    // Micro-steps add up locally unless ZeRO-2 scatters each one.
    plan_.zero_accumulate = plan_.zero >= 2 && accumulate_ > 1 && !deterministic_
                                ? zero_accumulate_
                                : ZeroAccumulate::kLocal;
    plan_.grad_comm = t.grad_comm;
    plan_.precision = t.precision;
    plan_.checkpoints.every = t.checkpoint_every;
    plan_.checkpoints.keep = t.checkpoint_keep;
    plan_.checkpoints.dir = t.checkpoint_dir.empty()
                                ? absl::StrCat("checkpoints/", spec_.model.name)
                                : t.checkpoint_dir;
    // Token ids index the embedding of the model's input: the data loader
    // rejects any id outside it, naming the file (labels are the same
    // stream shifted by one).
    for (const OpSpec& op : spec_.model.ops) {
      if (op.op != ops::ModelOp::kEmbedding || spec_.model.inputs.empty() ||
          op.inputs.empty() || op.inputs[0] != spec_.model.inputs[0].name) {
        continue;
      }
      auto vocab = op.args.find("vocab");
      if (vocab != op.args.end()) plan_.data.token_vocab = vocab->second.i;
    }
  }

  // Parameters in the order their gradients are complete (the last
  // instruction writing them: a tied weight is ready after its last use),
  // then those with no gradient (unused by the loss) in model order.
  void AssignGradientBuckets() {
    std::vector<int> writer(graph_.values().size(), -1);
    for (const Node& node : graph_.nodes()) {
      if (node.role != NodeRole::kBackward) continue;
      for (int out : node.outputs) {
        const Value& v = graph_.value(out);
        if (v.kind == ValueKind::kParameterGrad) writer[v.grad_of] = node.id;
      }
    }
    std::vector<int> ready;
    for (int p : graph_.parameters()) {
      if (writer[p] >= 0) ready.push_back(p);
    }
    std::stable_sort(ready.begin(), ready.end(),
                     [&](int a, int b) { return writer[a] < writer[b]; });
    for (int p : graph_.parameters()) {
      if (writer[p] < 0) ready.push_back(p);
    }
    // The optimizer decays a bucket or not, so parameters the optimizer
    // does not decay (vectors, by default) are bucketed on their own, each
    // class in ready order; buckets are then ordered by when they are ready.
    const OptimizerSpec& o = spec_.train.optimizer;
    const bool one_class = o.decay_all || o.weight_decay == 0;
    for (const bool decayed : {true, false}) {
      std::vector<int> members_of_class;
      for (int p : ready) {
        const bool is_matrix = graph_.value(p).shape.size() >= 2;
        if (one_class || is_matrix == decayed) members_of_class.push_back(p);
      }
      std::vector<int64_t> bytes;
      for (int p : members_of_class) bytes.push_back(graph_.value(p).bytes());
      const BucketAssignment assignment =
          trainc::AssignBuckets(bytes, sizes_.bucket_mb, sizes_.first_bucket_mb);
      for (const std::vector<int>& members : assignment.buckets) {
        BucketInfo info;
        info.weight_decay = one_class ? o.weight_decay > 0 : decayed;
        for (int i : members) {
          const int p = members_of_class[i];
          info.params.push_back(p);
          info.ready_node = std::max(info.ready_node, writer[p]);
        }
        buckets_.push_back(std::move(info));
      }
      if (one_class) break;
    }
    // Unwritten gradients (ready_node -1) are ready at the end.
    auto ready_at = [](const BucketInfo& b) {
      return b.ready_node < 0 ? INT32_MAX : b.ready_node;
    };
    std::stable_sort(buckets_.begin(), buckets_.end(),
                     [&](const BucketInfo& a, const BucketInfo& b) {
                       return ready_at(a) < ready_at(b);
                     });
  }

  int NewBuffer(std::string name, BufferKind kind, DType dtype, std::vector<int64_t> shape,
                int64_t offset = 0) {
    Buffer b;
    b.id = static_cast<int>(plan_.buffers.size());
    b.name = std::move(name);
    b.kind = kind;
    b.dtype = dtype;
    b.shape = std::move(shape);
    int64_t n = 1;
    for (int64_t d : b.shape) n *= d;
    b.bytes = n * DTypeBytes(dtype);
    b.offset = offset;
    plan_.buffers.push_back(std::move(b));
    return plan_.buffers.back().id;
  }

  int NewValueBuffer(const Value& v, BufferKind kind, std::string name, int64_t offset = 0) {
    return NewBuffer(std::move(name), kind, v.dtype, v.shape, offset);
  }

  // Persistent memory from offset 0: per bucket, its parameters (ZeRO-3:
  // its parameter shard); then every bucket's gradients (all slots; ZeRO-2:
  // the gradient shards); then optimizer state; then the loss, the step
  // scalar and the bf16 copies.
  void CreatePersistentBuffers() {
    for (int id : graph_.batch_values()) {
      const Value& v = graph_.value(id);
      shared_[id] = NewValueBuffer(
          v, v.kind == ValueKind::kInput ? BufferKind::kInput : BufferKind::kLabel, v.name);
      plan_.input_buffers.push_back(shared_[id]);
    }
    LayOutBuckets();
    int64_t cursor = CreateParameterBuffers(0);
    cursor = CreateGradientBuffers(cursor);
    cursor = CreateStateBuffers(cursor);
    persistent_bytes_ = CreateStepBuffers(cursor);
    for (int p : graph_.parameters()) plan_.parameter_buffers.push_back(shared_[p]);
  }

  // Offsets of each parameter within its bucket (within_): the same in the
  // parameter span, every gradient slot and every state span; each
  // bucket's slot bytes and (ZeRO) shard floats.
  void LayOutBuckets() {
    within_.assign(graph_.values().size(), 0);
    slot_bytes_.clear();
    shard_elems_.clear();
    for (const BucketInfo& b : buckets_) {
      int64_t size = 0;
      // ZeRO-3 under bf16 gathers bf16 spans at half these offsets, which
      // must stay 64-byte aligned.
      const int64_t align = BytesAlignment();
      for (int p : b.params) {
        within_[p] = size;
        size += AlignUp(graph_.value(p).bytes(), align);
      }
      // ZeRO-1: world_size equal shards, each 64-byte aligned; the padding
      // at the end of the bucket is never written.
      const int64_t shard = Sharded() ? AlignUp(CeilDiv(size, plan_.world_size)) / 4 : 0;
      if (Sharded()) size = shard * 4 * plan_.world_size;
      slot_bytes_.push_back(size);
      shard_elems_.push_back(shard);
    }
  }

  // The buckets, their parameter spans and parameters from `cursor`;
  // returns the next free byte. ZeRO-3: the span and its views are the
  // layout of every gather (offsets from the span's start, never live);
  // the rank keeps its shard.
  int64_t CreateParameterBuffers(int64_t cursor) {
    for (size_t b = 0; b < buckets_.size(); ++b) {
      Bucket bucket;
      bucket.id = static_cast<int>(b);
      bucket.bytes = slot_bytes_[b];
      bucket.shard_elems = shard_elems_[b];
      bucket.weight_decay = buckets_[b].weight_decay;
      const int64_t span_at = ShardedParams() ? 0 : cursor;
      bucket.param_span = NewBuffer(absl::StrCat("bucket", b, "/params"),
                                    BufferKind::kParameterSpan, DType::kF32,
                                    {slot_bytes_[b] / 4}, span_at);
      for (int p : buckets_[b].params) {
        const Value& v = graph_.value(p);
        shared_[p] = NewValueBuffer(v, BufferKind::kParameter, v.name, span_at + within_[p]);
        plan_.buffers[shared_[p]].init = v.init;
        plan_.buffers[shared_[p]].init_bound = v.init_bound;
        bucket.parameters.push_back(v.name);
      }
      if (ShardedParams()) {
        bucket.param_shard =
            NewBuffer(absl::StrCat("bucket", b, "/param_shard"), BufferKind::kParamShard,
                      DType::kF32, {shard_elems_[b]}, cursor);
        cursor += shard_elems_[b] * 4;
      } else {
        cursor += slot_bytes_[b];
      }
      plan_.buckets.push_back(std::move(bucket));
    }
    return cursor;
  }

  // Each bucket's gradient buffer(s) and gradients from `cursor` (ZeRO-2:
  // the gradient shards there, the buckets placed by PlanArena); returns
  // the next free byte. ZeRO-2 scattering every micro-step: a bucket (and
  // gradients) per micro-step, each dead once scattered. slots_[p][k] is
  // then micro-step k's gradient, as it is slot k's in deterministic mode.
  int64_t CreateGradientBuffers(int64_t cursor) {
    const int num_slots = deterministic_ ? accumulate_ : 1;
    const bool dynamic_buckets = ShardedGrads();
    const int num_copies = ShardEachMicroStep() ? accumulate_ : 1;
    bucket_buffers_.assign(buckets_.size(), {});
    for (size_t b = 0; b < buckets_.size(); ++b) {
      const int64_t base = dynamic_buckets ? 0 : cursor;
      for (int m = 0; m < num_copies; ++m) {
        const std::string at = num_copies > 1 ? absl::StrCat("@", m) : "";
        const int bucket =
            NewBuffer(absl::StrCat("bucket", b, "/grads", at), BufferKind::kBucket,
                      DType::kF32, {num_slots * slot_bytes_[b] / 4}, base);
        bucket_buffers_[b].push_back(bucket);
        plan_.buckets[b].grad_buffer = bucket;  // the last micro-step's
        for (int p : buckets_[b].params) {
          const Value& v = graph_.value(p);
          for (int k = 0; k < num_slots; ++k) {
            const std::string name = k == 0 ? absl::StrCat("grad/", v.name, at)
                                            : absl::StrCat("grad/", v.name, "@", k);
            const int64_t within = k * slot_bytes_[b] + within_[p];
            slots_[p].push_back(NewValueBuffer(v, BufferKind::kGradient, name, base + within));
            if (dynamic_buckets) views_.push_back({slots_[p].back(), bucket, within});
          }
        }
      }
      if (dynamic_buckets) {
        plan_.buckets[b].grad_shard =
            NewBuffer(absl::StrCat("bucket", b, "/grad_shard"), BufferKind::kGradShard,
                      DType::kF32, {shard_elems_[b]}, cursor);
        cursor += shard_elems_[b] * 4;
      } else {
        cursor += num_slots * slot_bytes_[b];
      }
    }
    return cursor;
  }

  // The optimizer's state spans from `cursor` (ZeRO: only this rank's
  // shard, so no parameter's own view); returns the next free byte.
  int64_t CreateStateBuffers(int64_t cursor) {
    for (const std::string& state : state_kinds_) {
      for (size_t b = 0; b < buckets_.size(); ++b) {
        const int64_t bytes = Sharded() ? shard_elems_[b] * 4 : slot_bytes_[b];
        plan_.buckets[b].state_spans.push_back(
            NewBuffer(absl::StrCat("bucket", b, "/", state), BufferKind::kStateSpan,
                      DType::kF32, {bytes / 4}, cursor));
        for (int p : buckets_[b].params) {
          if (Sharded()) break;
          const Value& v = graph_.value(p);
          NewValueBuffer(v, BufferKind::kOptimizerState, absl::StrCat(state, "/", v.name),
                         cursor + within_[p]);
        }
        cursor += bytes;
      }
    }
    return cursor;
  }

  // The loss, the step scalar and (precision = bf16) each parameter's bf16
  // copy, cast once per step (ZeRO-3: in each pass, from the gathered
  // parameters; CastFor), from `cursor`; returns the next free byte.
  int64_t CreateStepBuffers(int64_t cursor) {
    const Value& loss = graph_.value(graph_.loss());
    shared_[graph_.loss()] = NewValueBuffer(loss, BufferKind::kLoss, loss.name, cursor);
    plan_.loss_buffer = shared_[graph_.loss()];
    cursor += AlignUp(loss.bytes());
    if (NeedsGradSq()) {
      grad_sq_ = NewBuffer("grad_sq", BufferKind::kStepScalar, DType::kF32, {1}, cursor);
      cursor += AlignUp(4);
    }
    for (const Node& node : graph_.nodes()) {
      if (!IsParameterCast(node) || ShardedParams()) continue;
      const Value& v = graph_.value(node.outputs[0]);
      shared_[v.id] = NewValueBuffer(v, BufferKind::kParameterCopy, v.name, cursor);
      cursor += AlignUp(v.bytes());
    }
    return cursor;
  }

  // A parameter's bf16 copy (compiler/graph/precision.h): made in
  // micro-step 0 only, into a persistent buffer.
  bool IsParameterCast(const Node& node) const {
    return FamilyOfInstruction(node.op) == KernelFamily::kCast &&
           graph_.value(node.inputs[0]).kind == ValueKind::kParameter;
  }

  // The buffer holding value `id` in micro-step k.
  int BufferFor(int id, int k) {
    const Value& v = graph_.value(id);
    if (shared_[id] >= 0) return shared_[id];
    switch (v.kind) {
      case ValueKind::kParameterGrad: {
        const std::vector<int>& slots = slots_[v.grad_of];
        return slots[slots.size() > 1 ? k : 0];
      }
      case ValueKind::kActivation:
      case ValueKind::kActivationGrad: {
        int& b = per_step_[id];
        if (b < 0) {
          b = NewValueBuffer(v,
                             v.kind == ValueKind::kActivation ? BufferKind::kActivation
                                                              : BufferKind::kActivationGrad,
                             accumulate_ > 1 ? absl::StrCat(v.name, "@", k) : v.name);
        }
        return b;
      }
      default:
        return shared_[id];
    }
  }

  int Emit(Instruction in) {
    in.id = static_cast<int>(plan_.instructions.size());
    if (in.stream == Stream::kCompute) last_compute_ = in.id;
    plan_.instructions.push_back(std::move(in));
    return plan_.instructions.back().id;
  }

  // An event recorded by compute instruction `id` (one per instruction,
  // shared by every waiter).
  int EventAfter(int id) {
    auto [it, fresh] = event_after_.try_emplace(id, -1);
    if (fresh) {
      it->second = plan_.num_events++;
      plan_.instructions[id].record_events.push_back(it->second);
    }
    return it->second;
  }

  // The bucket's all_reduce (reduce_scatter) in micro-step k, after
  // instruction `after` wrote its last gradient. The last micro-step's is
  // the one the optimizer waits for; an earlier one (ZeRO-2 scattering
  // every micro-step) is waited for by the next micro-step's load_batch.
  void EmitAllReduce(int bucket, int after, int k) {
    const int ready_event = plan_.num_events++;
    plan_.instructions[after].record_events.push_back(ready_event);
    const Bucket& b = plan_.buckets[bucket];
    Instruction in;
    in.op = Sharded() ? "reduce_scatter" : "all_reduce";
    const std::vector<int>& copies = bucket_buffers_[bucket];
    in.inputs = {copies[copies.size() > 1 ? k : 0]};
    in.outputs = {ShardedGrads() ? b.grad_shard : in.inputs[0]};
    in.attrs["bucket"] = bucket;
    if (ShardedGrads()) in.attrs["accumulate"] = ShardEachMicroStep() && k > 0 ? 1 : 0;
    in.stream = Stream::kComm;
    in.phase = Phase::kComm;
    in.micro_step = k;
    in.wait_events = {ready_event};
    const int done = plan_.num_events++;
    in.record_events = {done};
    in.label = absl::StrCat(in.op, " bucket ", bucket);
    if (accumulate_ > 1 && ShardEachMicroStep()) absl::StrAppend(&in.label, " micro ", k);
    if (ShardedGrads()) in_flight_.push_back(done);
    if (k < accumulate_ - 1) {
      scattered_events_.push_back(done);
      Emit(std::move(in));
      return;
    }
    buckets_[bucket].done_event = done;
    plan_.buckets[bucket].ready_after = after;
    plan_.buckets[bucket].all_reduce = Emit(std::move(in));
  }

  void EmitMicroStep(int k) {
    per_step_.assign(graph_.values().size(), -1);
    const bool reduce = k == accumulate_ - 1 || ShardEachMicroStep();
    Instruction load;
    load.op = "load_batch";
    load.outputs = plan_.input_buffers;
    load.attrs["micro"] = k;
    load.phase = Phase::kData;
    load.micro_step = k;
    load.label = absl::StrCat("load_batch micro ", k);
    // ZeRO-2 scattering every micro-step: the last micro-step's buckets
    // are free (their memory reused) only once scattered.
    load.wait_events = std::move(scattered_events_);
    scattered_events_.clear();
    if (ShardedParams()) StartGathers(k);
    int last_compute = Emit(std::move(load));
    size_t next_bucket = 0;
    in_flight_.clear();
    for (const Node& node : graph_.nodes()) {
      if (IsParameterCast(node) && (k > 0 || ShardedParams())) continue;
      const bool backward = node.role != NodeRole::kForward;
      if (ShardedParams()) EmitTriggeredGathers(node.id, k);
      Instruction in;
      // ZeRO-2: once a bucket's successor is scattering too, the next
      // compute instruction waits for the bucket's scatter, which ends its
      // life there; at most two buckets are in flight.
      while (in_flight_.size() >= 2) {
        in.wait_events.push_back(in_flight_.front());
        in_flight_.erase(in_flight_.begin());
      }
      in.op = node.op;
      for (int id : node.inputs) {
        in.inputs.push_back(ShardedParams() ? GatheredInput(id, k, backward, &in.wait_events)
                                            : BufferFor(id, k));
      }
      for (int id : node.outputs) in.outputs.push_back(BufferFor(id, k));
      in.attrs = node.attrs;
      bool writes_parameter_grad = false;
      for (int id : node.outputs) {
        writes_parameter_grad |= graph_.value(id).kind == ValueKind::kParameterGrad;
      }
      if (writes_parameter_grad) {
        // Within a micro-step the graph's own flag (a tied weight's second
        // use adds); across micro-steps the shared slot adds, unless each
        // micro-step has its own slot (deterministic) or its own bucket
        // (ZeRO-2 scattering every micro-step).
        const bool graph_adds = node.attrs.count("accumulate") && node.attrs.at("accumulate") != 0;
        const bool slot_adds = !deterministic_ && !ShardEachMicroStep() && k > 0;
        in.attrs["accumulate"] = (graph_adds || slot_adds) ? 1 : 0;
      }
      in.phase = backward ? Phase::kBackward : Phase::kForward;
      in.micro_step = k;
      // zero_gather = next_forward: the first reader of a bucket's
      // parameters waits for that bucket's all-gather.
      for (size_t i = 0; k == 0 && i < node.inputs.size() && !gather_bucket_of_.empty(); ++i) {
        const int b = gather_bucket_of_[node.inputs[i]];
        if (b < 0 || gather_waited_[b]) continue;
        gather_waited_[b] = true;
        in.wait_events.push_back(buckets_[b].gathered_event);
      }
      in.label = node.label;
      last_compute = Emit(std::move(in));
      // Buckets are in ready order, so the ones this node completes are next.
      while (reduce && next_bucket < buckets_.size() &&
             buckets_[next_bucket].ready_node == node.id) {
        EmitAllReduce(static_cast<int>(next_bucket++), last_compute, k);
      }
    }
    // Buckets holding only gradients nobody writes are ready at the end.
    while (reduce && next_bucket < buckets_.size()) {
      EmitAllReduce(static_cast<int>(next_bucket++), last_compute, k);
    }
  }

  // The step's squared gradient norm: for clipping, and for telling a
  // non-finite gradient (the optimizer then changes nothing).
  bool NeedsGradSq() const {
    return spec_.train.clip_grad_norm > 0 || spec_.train.skip_nonfinite;
  }

  // ZeRO-1 in effect (FillConfig leaves plan_.zero 0 on one rank).
  bool Sharded() const { return plan_.zero > 0; }
  // ZeRO-2: gradients kept as shards, buckets freed once scattered.
  bool ShardedGrads() const { return plan_.zero >= 2; }
  // ZeRO-3: parameters kept as shards, gathered for each pass.
  bool ShardedParams() const { return plan_.zero >= 3; }
  // A parameter's alignment in its bucket: twice the arena's when ZeRO-3
  // gathers bf16 spans (half the offsets).
  int64_t BytesAlignment() const {
    const bool bf16_spans = ShardedParams() && plan_.precision == Precision::kBf16;
    return bf16_spans ? 2 * kArenaAlignment : kArenaAlignment;
  }
  // ZeRO-2 with zero_accumulate = shard: a reduce-scatter per micro-step.
  bool ShardEachMicroStep() const {
    return ShardedGrads() && plan_.zero_accumulate == ZeroAccumulate::kShard;
  }
  bool GatherInNextForward() const {
    return Sharded() && plan_.zero_gather == ZeroGather::kNextForward;
  }

  // zero_gather = next_forward: every bucket's all-gather first, on the
  // comm stream, in the order micro-step 0 first reads the buckets'
  // parameters; that first reader waits for it (EmitMicroStep).
  void EmitParameterGathers() {
    std::vector<int> bucket_of(graph_.values().size(), -1);
    for (size_t b = 0; b < buckets_.size(); ++b) {
      for (int p : buckets_[b].params) bucket_of[p] = static_cast<int>(b);
    }
    std::vector<int> order;
    std::vector<bool> listed(buckets_.size(), false);
    for (const Node& node : graph_.nodes()) {
      for (int id : node.inputs) {
        const int b = bucket_of[id];
        if (b >= 0 && !listed[b]) {
          listed[b] = true;
          order.push_back(b);
        }
      }
    }
    for (size_t b = 0; b < buckets_.size(); ++b) {  // parameters nobody reads
      if (!listed[b]) order.push_back(static_cast<int>(b));
    }
    for (int b : order) {
      buckets_[b].gathered_event = plan_.num_events++;
      EmitParameterGather(b, /*wait=*/-1, /*record=*/buckets_[b].gathered_event,
                          " (last step's update)");
    }
    gather_bucket_of_ = std::move(bucket_of);
    gather_waited_.assign(buckets_.size(), false);
  }

  // ZeRO-3: which bucket each pass of a micro-step reads, in the order it
  // first does (a bf16 copy's reader reads its parameter), and where each
  // unit's gather goes: zero_prefetch units before its first reader.
  void PlanGatherUnits() {
    ZeroThreeState& z = zero3_;
    const size_t n = graph_.values().size();
    z.bucket_of.assign(n, -1);
    z.cast_of.assign(n, -1);
    z.copy_of.assign(n, -1);
    for (size_t b = 0; b < buckets_.size(); ++b) {
      for (int p : buckets_[b].params) z.bucket_of[p] = static_cast<int>(b);
    }
    const std::vector<Node>& nodes = graph_.nodes();
    for (size_t i = 0; i < nodes.size(); ++i) {
      if (!IsParameterCast(nodes[i])) continue;
      z.cast_of[nodes[i].outputs[0]] = static_cast<int>(i);
      int& copy = z.copy_of[nodes[i].inputs[0]];
      if (copy < 0) copy = nodes[i].outputs[0];  // (recomputation may cast again)
    }
    for (const Node& node : graph_.nodes()) {
      if (IsParameterCast(node)) continue;
      const bool backward = node.role != NodeRole::kForward;
      for (int id : node.inputs) {
        const int p = ParameterRead(id);
        if (p < 0) continue;
        auto [it, fresh] = z.unit_of.try_emplace({backward, z.bucket_of[p]}, z.units.size());
        if (fresh) z.units.push_back({backward, z.bucket_of[p], node.id});
        z.units[it->second].bf16 &= p != id;
      }
    }
    const int depth = static_cast<int>(zero_prefetch_);
    for (size_t i = 0; i < z.units.size(); ++i) {
      const int trigger = static_cast<int>(i) - depth;
      if (trigger < 0) {
        z.at_start.push_back(static_cast<int>(i));
      } else {
        z.triggered[z.units[trigger].first_node].push_back(static_cast<int>(i));
      }
    }
  }

  // The parameter value `id` reads (itself, or the parameter a bf16 copy
  // is cast from), else -1.
  int ParameterRead(int id) const {
    if (graph_.value(id).kind == ValueKind::kParameter) return id;
    const int cast = zero3_.cast_of[id];
    return cast < 0 ? -1 : graph_.nodes()[cast].inputs[0];
  }

  // Micro-step k begins: a fresh set of spans; the gathers due before its
  // load_batch.
  void StartGathers(int k) {
    ZeroThreeState& z = zero3_;
    const size_t units = z.units.size();
    z.gathered.assign(units, -1);
    z.views.assign(units, {});
    z.waited.assign(units, false);
    z.copies[0].clear();
    z.copies[1].clear();
    for (int i : z.at_start) EmitUnitGather(i, k);
  }

  void EmitTriggeredGathers(int node, int k) {
    auto it = zero3_.triggered.find(node);
    if (it == zero3_.triggered.end()) return;
    for (int i : it->second) EmitUnitGather(i, k);
  }

  // The name suffix of micro-step k's buffers for one pass.
  std::string PassSuffix(bool backward, int k) const {
    return absl::StrCat("@", backward ? "bwd" : "fwd", accumulate_ > 1 ? absl::StrCat(k) : "");
  }

  // A bf16 unit's gather source: the rank's shard cast to bf16 on the
  // compute stream, in the unit's pass of micro-step k.
  int EmitShardCast(const GatherUnit& u, int k) {
    const Bucket& bucket = plan_.buckets[u.bucket];
    Instruction cast;
    cast.op = "cast";
    cast.inputs = {bucket.param_shard};
    cast.outputs = {NewBuffer(absl::StrCat("bucket", u.bucket, "/param_shard",
                                           PassSuffix(u.backward, k)),
                              BufferKind::kParameterCopy, DType::kBF16, {bucket.shard_elems})};
    cast.phase = u.backward ? Phase::kBackward : Phase::kForward;
    cast.micro_step = k;
    cast.label = absl::StrCat("bucket ", u.bucket, " shard as bf16 for the gather");
    const int out = cast.outputs[0];
    Emit(std::move(cast));
    return out;
  }

  // Unit i's span in micro-step k, with a view per parameter (their bf16
  // copies for a bf16 unit, at half the offsets) into zero3_.views[i].
  int NewGatheredSpan(int i, int k) {
    ZeroThreeState& z = zero3_;
    const GatherUnit& u = z.units[i];
    const std::string at = PassSuffix(u.backward, k);
    const int span = NewBuffer(absl::StrCat("bucket", u.bucket, "/params", at),
                               BufferKind::kParameterSpan, u.bf16 ? DType::kBF16 : DType::kF32,
                               {plan_.buckets[u.bucket].bytes / 4});
    for (int p : buckets_[u.bucket].params) {
      const int value = u.bf16 ? z.copy_of[p] : p;
      if (value < 0) continue;  // a parameter never read as bf16
      const int view = NewValueBuffer(
          graph_.value(value), u.bf16 ? BufferKind::kParameterCopy : BufferKind::kParameter,
          absl::StrCat(graph_.value(p).name, at));
      views_.push_back({view, span, within_[p] / (u.bf16 ? 2 : 1)});
      z.views[i][p] = view;
    }
    return span;
  }

  // Unit i's all_gather into a span of its own, after the last compute
  // instruction, whose bytes the span may reuse.
  void EmitUnitGather(int i, int k) {
    ZeroThreeState& z = zero3_;
    const GatherUnit& u = z.units[i];
    Bucket& bucket = plan_.buckets[u.bucket];
    Instruction g;
    g.inputs = {u.bf16 ? EmitShardCast(u, k) : bucket.param_shard};
    const int span = NewGatheredSpan(i, k);
    g.op = "all_gather";
    g.outputs = {span};
    g.attrs["bucket"] = u.bucket;
    g.attrs["backward"] = u.backward ? 1 : 0;
    g.stream = Stream::kComm;
    g.phase = Phase::kComm;
    g.micro_step = k;
    if (last_compute_ >= 0) g.wait_events = {EventAfter(last_compute_)};
    g.record_events = {plan_.num_events++};
    g.label = absl::StrCat("all_gather bucket ", u.bucket, u.bf16 ? " bf16" : "",
                           " params for the ", u.backward ? "backward" : "forward",
                           accumulate_ > 1 ? absl::StrCat(" micro ", k) : "");
    z.gathered[i] = Emit(std::move(g));
    if (bucket.all_gather < 0) bucket.all_gather = z.gathered[i];
  }

  // ZeRO-3: the buffer a node of micro-step k reads for value `id`: a
  // parameter (or a bf16 unit's copy) from its pass's gathered span, the
  // first reader waiting for the all_gather; another bf16 copy cast from
  // there (CastFor); else BufferFor.
  int GatheredInput(int id, int k, bool backward, std::vector<int>* waits) {
    const int p = ParameterRead(id);
    if (p < 0) return BufferFor(id, k);
    ZeroThreeState& z = zero3_;
    const int unit = z.unit_of.at({backward, z.bucket_of[p]});
    if (p != id && !z.units[unit].bf16) return CastFor(id, k, backward);
    if (!z.waited[unit]) {
      z.waited[unit] = true;
      waits->push_back(plan_.instructions[z.gathered[unit]].record_events[0]);
    }
    return z.views[unit].at(p);
  }

  // ZeRO-3 under precision = bf16: parameter copy `id` made once per pass,
  // just before its first reader.
  int CastFor(int id, int k, bool backward) {
    auto [it, fresh] = zero3_.copies[backward].try_emplace(id, -1);
    if (!fresh) return it->second;
    const Node& node = graph_.nodes()[zero3_.cast_of[id]];
    const Value& v = graph_.value(id);
    Instruction cast;
    cast.op = node.op;
    cast.attrs = node.attrs;
    cast.inputs = {GatheredInput(node.inputs[0], k, backward, &cast.wait_events)};
    it->second = NewValueBuffer(v, BufferKind::kParameterCopy,
                                absl::StrCat(v.name, PassSuffix(backward, k)));
    cast.outputs = {it->second};
    cast.phase = backward ? Phase::kBackward : Phase::kForward;
    cast.micro_step = k;
    cast.label = node.label;
    Emit(std::move(cast));
    return it->second;
  }

  void EmitOptimizer() {
    // Clipping needs the norm of the whole reduced gradient: each bucket's
    // sum of squares as soon as its all-reduce is done, in bucket order
    // (the same sum on every rank), then the optimizers.
    const bool clip = NeedsGradSq();
    const int grad_sq_event = clip ? EmitGradNorm() : -1;
    for (size_t b = 0; b < buckets_.size(); ++b) EmitBucketUpdate(b, clip, grad_sq_event);
  }

  // grad_sq = the squared norm of the reduced gradient, bucket by bucket.
  // Returns the event its ZeRO-1 all-reduce records, else -1.
  int EmitGradNorm() {
    // ZeRO-1 sums the squares of its own shard, then over ranks; except in
    // deterministic mode, whose reduce-scatter leaves the whole reduced
    // bucket on every rank: the whole-bucket sum there gives zero = 0's bits.
    // ZeRO-2 reads its gradient shard (copied from that whole bucket in
    // deterministic mode, which then lives until its sum_squares).
    const bool shard_norm = Sharded() && !plan_.deterministic;
    for (size_t b = 0; b < buckets_.size(); ++b) {
      Instruction in;
      in.op = "sum_squares";
      in.inputs = {shard_norm && ShardedGrads() ? plan_.buckets[b].grad_shard
                                                : plan_.buckets[b].grad_buffer};
      in.outputs = {grad_sq_};
      in.attrs["bucket"] = static_cast<double>(b);
      in.attrs["accumulate"] = b > 0 ? 1 : 0;
      if (shard_norm) in.attrs["shard"] = 1;
      in.phase = Phase::kOptimizer;
      in.micro_step = -1;
      in.wait_events = {buckets_[b].done_event};
      in.label = absl::StrCat("grad_sq += |bucket ", b, shard_norm ? " shard" : "", "|^2");
      Emit(std::move(in));
    }
    if (!shard_norm) return -1;
    // ZeRO-1: each rank summed its own shards; the norm is their sum.
    const int ready = plan_.num_events++;
    plan_.instructions.back().record_events.push_back(ready);
    const int grad_sq_event = plan_.num_events++;
    Instruction in;
    in.op = "all_reduce";
    in.inputs = {grad_sq_};
    in.outputs = {grad_sq_};
    in.stream = Stream::kComm;
    in.phase = Phase::kComm;
    in.micro_step = -1;
    in.wait_events = {ready};
    in.record_events = {grad_sq_event};
    in.label = "all_reduce grad_sq";
    Emit(std::move(in));
    return grad_sq_event;
  }

  // Bucket b's optimizer step (on its shard under ZeRO), after its
  // all-reduce and the norm; under ZeRO-1 followed by the all-gather of
  // the updated parameters unless they are gathered later.
  void EmitBucketUpdate(size_t b, bool clip, int grad_sq_event) {
    const Bucket& bucket = plan_.buckets[b];
    Instruction in;
    in.op = "optimizer";
    const int params = ShardedParams() ? bucket.param_shard : bucket.param_span;
    in.inputs = {params, ShardedGrads() ? bucket.grad_shard : bucket.grad_buffer};
    in.outputs = {params};
    for (int s : bucket.state_spans) {
      in.inputs.push_back(s);
      in.outputs.push_back(s);
    }
    in.attrs["bucket"] = static_cast<double>(b);
    if (clip) {
      in.inputs.push_back(grad_sq_);
      in.attrs["clip"] = spec_.train.clip_grad_norm;  // 0: skip_nonfinite only
    }
    in.phase = Phase::kOptimizer;
    in.micro_step = -1;
    in.wait_events = {buckets_[b].done_event};
    if (grad_sq_event >= 0) in.wait_events.push_back(grad_sq_event);
    in.label = absl::StrCat("optimizer bucket ", b);
    if (!Sharded()) {
      Emit(std::move(in));
      return;
    }
    in.attrs["shard"] = 1;
    in.label += " shard";
    // Gathered at the next step's start, or (ZeRO-3) before each use.
    if (GatherInNextForward() || ShardedParams()) {
      Emit(std::move(in));
      return;
    }
    // ZeRO-1: the shard's update, then its all-gather on the comm stream
    // while the next bucket's shard is updated.
    const int updated = plan_.num_events++;
    in.record_events = {updated};
    Emit(std::move(in));
    EmitParameterGather(static_cast<int>(b), /*wait=*/updated, /*record=*/-1, "");
  }

  // ZeRO-1: bucket b's all_gather of its parameter span on the comm stream,
  // after event `wait` and recording `record` (-1: none).
  void EmitParameterGather(int b, int wait, int record, const char* note) {
    const Bucket& bucket = plan_.buckets[b];
    Instruction gather;
    gather.op = "all_gather";
    gather.inputs = {bucket.param_span};
    gather.outputs = {bucket.param_span};
    gather.attrs["bucket"] = static_cast<double>(b);
    gather.stream = Stream::kComm;
    gather.phase = Phase::kComm;
    gather.micro_step = -1;
    if (wait >= 0) gather.wait_events = {wait};
    if (record >= 0) gather.record_events = {record};
    gather.label = absl::StrCat("all_gather bucket ", b, " params", note);
    plan_.buckets[b].all_gather = Emit(std::move(gather));
  }

  // The last output of every op with a workspace (ops::OpDef::workspace),
  // sized by the backend; one per instruction, so liveness reuses it.
  absl::Status SizeWorkspaces() {
    std::vector<const Instruction*> users;
    for (const Instruction& in : plan_.instructions) {
      const ops::OpDef* def = ops::FindOp(in.op);
      if (def == nullptr || !def->workspace || in.outputs.empty()) continue;
      Buffer& b = plan_.buffers[in.outputs.back()];
      b.kind = BufferKind::kWorkspace;
      b.dtype = DType::kF32;
      users.push_back(&in);
    }
    for (const Instruction* user : users) {
      const Instruction& in = *user;
      int64_t bytes = 0;
      if (options_.workspace) {
        absl::StatusOr<int64_t> asked = options_.workspace(plan_, in);
        if (!asked.ok()) {
          return absl::Status(asked.status().code(),
                              absl::StrCat("workspace of \"", in.label, "\": ",
                                           asked.status().message()));
        }
        bytes = *asked;
      }
      Buffer& b = plan_.buffers[in.outputs.back()];
      b.shape = {(std::max<int64_t>(bytes, 0) + 3) / 4};
      b.bytes = b.shape[0] * 4;
      plan_.memory.workspace_bytes = std::max(plan_.memory.workspace_bytes, b.bytes);
    }
    return absl::OkStatus();
  }

  bool IsPersistent(BufferKind kind) const { return trainc::IsPersistent(kind, plan_.zero); }

  // A comm instruction runs beside the compute stream: its operands stay
  // live until the first compute instruction that waits for it (the end of
  // the step if none does).
  void ExtendPastCollectives() {
    const int n = static_cast<int>(plan_.instructions.size());
    for (const Instruction& in : plan_.instructions) {
      if (in.stream != Stream::kComm) continue;
      int until = n - 1;
      for (int j = in.id + 1; j < n && until == n - 1; ++j) {
        const Instruction& next = plan_.instructions[j];
        if (next.stream != Stream::kCompute) continue;
        for (int e : next.wait_events) {
          if (std::count(in.record_events.begin(), in.record_events.end(), e)) until = j;
        }
      }
      for (const std::vector<int>* ids : {&in.inputs, &in.outputs}) {
        for (int id : *ids) {
          Buffer& b = plan_.buffers[id];
          if (!IsPersistent(b.kind)) b.last_use = std::max(b.last_use, until);
        }
      }
    }
  }

  // ZeRO-2: a bucket is live whenever one of its gradient views is (ZeRO-3:
  // a gathered span whenever one of its parameter views is); the views are
  // not placed on their own (PlaceViews).
  void MergeViewsIntoBuckets() {
    for (const View& v : views_) {
      const Buffer& view = plan_.buffers[v.view];
      Buffer& bucket = plan_.buffers[v.bucket];
      if (view.first_use < 0) continue;  // a gradient nobody writes
      bucket.first_use =
          bucket.first_use < 0 ? view.first_use : std::min(bucket.first_use, view.first_use);
      bucket.last_use = std::max(bucket.last_use, view.last_use);
    }
  }

  void PlaceViews() {
    for (const View& v : views_) {
      Buffer& view = plan_.buffers[v.view];
      const Buffer& bucket = plan_.buffers[v.bucket];
      view.offset = bucket.offset + v.within;
      // Live with its bucket: the reduce-scatter reads every view's bytes.
      view.first_use = bucket.first_use;
      view.last_use = bucket.last_use;
    }
  }

  // Outputs that take their input's bytes (ops::OpDef::in_place), when
  // the instruction is the input's last reader and the output's first
  // writer: output id -> input id.
  std::map<int, int> InPlaceOutputs() const {
    std::map<int, int> taken;
    for (const Instruction& in : plan_.instructions) {
      const std::optional<std::pair<int, int>> pair = InPlaceOperands(in);
      if (!pair) continue;
      const Buffer& from = plan_.buffers[pair->first];
      const Buffer& to = plan_.buffers[pair->second];
      if (IsPersistent(from.kind) || IsPersistent(to.kind) || from.last_use != in.id ||
          to.first_use != in.id || from.bytes != to.bytes || from.dtype != to.dtype ||
          taken.count(from.id)) {
        continue;
      }
      taken[to.id] = from.id;
    }
    return taken;
  }

  void PlanArena() {
    for (const Instruction& in : plan_.instructions) {
      for (const std::vector<int>* ids : {&in.inputs, &in.outputs}) {
        for (int id : *ids) {
          Buffer& b = plan_.buffers[id];
          if (IsPersistent(b.kind)) continue;
          if (b.first_use < 0) b.first_use = in.id;
          b.last_use = in.id;
        }
      }
    }
    MergeViewsIntoBuckets();
    ExtendPastCollectives();
    // An in-place output shares its input's interval, extended to its own
    // last use.
    const std::map<int, int> in_place = InPlaceOutputs();
    std::map<int, int> extended_last;  // input id -> last use of the pair
    for (const auto& [out, in] : in_place) extended_last[in] = plan_.buffers[out].last_use;
    std::set<int> view_ids;  // placed inside their bucket or span (PlaceViews)
    for (const View& v : views_) view_ids.insert(v.view);
    std::vector<int> dynamic;
    std::vector<LiveInterval> intervals;
    for (const Buffer& b : plan_.buffers) {
      if (IsPersistent(b.kind) || b.first_use < 0 || b.kind == BufferKind::kGradient ||
          view_ids.count(b.id) || in_place.count(b.id)) {
        continue;
      }
      dynamic.push_back(b.id);
      auto it = extended_last.find(b.id);
      intervals.push_back({b.bytes, b.first_use, it == extended_last.end() ? b.last_use
                                                                            : it->second});
    }
    const MemoryPlan memory = PlanMemory(intervals);
    for (size_t i = 0; i < dynamic.size(); ++i) {
      plan_.buffers[dynamic[i]].offset = persistent_bytes_ + memory.offsets[i];
    }
    for (const auto& [out, in] : in_place) {
      plan_.buffers[out].offset = plan_.buffers[in].offset;
    }
    PlaceViews();
    plan_.arena_bytes = AlignUp(persistent_bytes_ + memory.size);
    MemoryReport& report = plan_.memory;
    for (const Buffer& b : plan_.buffers) {
      if (b.kind == BufferKind::kParameterSpan && IsPersistent(b.kind)) {
        report.parameter_bytes += b.bytes;
      }
      if (b.kind == BufferKind::kParamShard) report.parameter_bytes += b.bytes;
      if (b.kind == BufferKind::kBucket && IsPersistent(b.kind)) report.gradient_bytes += b.bytes;
      if (b.kind == BufferKind::kGradShard) report.gradient_bytes += b.bytes;
      if (b.kind == BufferKind::kStateSpan) report.optimizer_state_bytes += b.bytes;
      // (ZeRO-3's copies are made in each pass: activations.)
      if (b.kind == BufferKind::kParameterCopy && IsPersistent(b.kind)) {
        report.parameter_copy_bytes += b.bytes;
      }
    }
    report.peak_activation_bytes = memory.peak_live_bytes;
    for (const Instruction& in : plan_.instructions) {
      if (FamilyOfInstruction(in.op) == KernelFamily::kCast || in.stream != Stream::kCompute) {
        continue;
      }
      int64_t staged = 0;
      std::set<int64_t> offsets;  // an in-place output shares its input's staging
      for (const std::vector<int>* ids : {&in.inputs, &in.outputs}) {
        for (int id : *ids) {
          const Buffer& b = plan_.buffers[id];
          if (b.dtype == DType::kBF16 && offsets.insert(b.offset).second) {
            staged += AlignUp(b.bytes * 2);
          }
        }
      }
      report.bf16_staging_bytes = std::max(report.bf16_staging_bytes, staged);
    }
    report.arena_bytes = plan_.arena_bytes;
    report.unshared_bytes = persistent_bytes_ + memory.unshared_bytes;
  }

  const TrainSpec& spec_;
  const Graph& graph_;
  const PlanOptions& options_;
  const BucketSizes sizes_;
  const ZeroAccumulate zero_accumulate_;  // ZeRO-2's, asked for: local or shard
  const int64_t zero_prefetch_;           // ZeRO-3's gathers: buckets ahead
  const int accumulate_;
  const bool deterministic_;
  Plan plan_;
  std::vector<std::string> state_kinds_;
  std::vector<BucketInfo> buckets_;
  std::vector<int> shared_;              // value -> buffer for all micro-steps
  std::vector<std::vector<int>> slots_;  // parameter -> gradient buffer per slot
  std::vector<int> per_step_;            // value -> buffer in this micro-step
  // ZeRO-2: a gradient view's buffer, its bucket's buffer and its byte
  // offset inside it (PlanArena places the bucket, then the views).
  struct View {
    int view, bucket;
    int64_t within;
  };
  std::vector<View> views_;
  std::vector<int> scattered_events_;  // for the next micro-step's load_batch
  std::vector<int> in_flight_;  // ZeRO-2: this micro-step's scatters not yet waited for
  // Bucket -> its gradient buffer, one per micro-step when ZeRO-2 scatters
  // every micro-step (else one).
  std::vector<std::vector<int>> bucket_buffers_;
  int64_t persistent_bytes_ = 0;
  int grad_sq_ = -1;  // clipping's step scalar
  // zero_gather = next_forward: value -> its bucket for the parameters
  // (-1 otherwise; empty without it), and which bucket waits were placed.
  std::vector<int> gather_bucket_of_;
  std::vector<bool> gather_waited_;
  std::vector<int64_t> within_;  // parameter -> byte offset in its bucket's span
  std::vector<int64_t> slot_bytes_;   // bucket -> bytes of one slot (LayOutBuckets)
  std::vector<int64_t> shard_elems_;  // bucket -> floats of one rank's shard (ZeRO)
  int last_compute_ = -1;        // the last compute instruction emitted
  std::map<int, int> event_after_;  // compute instruction -> EventAfter's event
  ZeroThreeState zero3_;
};

PlanBuilder::PlanBuilder(const TrainSpec& spec, const Graph& graph, const PlanOptions& options,
                         const BucketSizes& sizes, const ZeroChoices& zero)
    : impl_(std::make_unique<Impl>(spec, graph, options, sizes, zero)) {}

PlanBuilder::~PlanBuilder() = default;

std::vector<std::vector<int>> PlanBuilder::AssignBuckets() { return impl_->AssignBuckets(); }

absl::StatusOr<Plan> PlanBuilder::Build(bool for_costing) { return impl_->Build(for_costing); }

}  // namespace trainc
