#include "compiler/frontend/batch_arithmetic.h"

#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"

namespace trainc::frontend {
namespace {

constexpr BatchField kFactors[] = {BatchField::kGpus, BatchField::kMicroBatch,
                                   BatchField::kAccumulate};

// "gpus × micro_batch = 2 × 64" for the set factors other than `skip`.
struct Product {
  std::string names;
  std::string values;
  int64_t value = 1;
  int count = 0;
};

std::optional<Product> MultiplySetFactors(const BatchRequest& r,
                                          std::optional<BatchField> skip) {
  Product p;
  for (BatchField f : kFactors) {
    if (skip && f == *skip) continue;
    if (!r.at(f).set()) continue;
    const char* sep = p.count == 0 ? "" : " × ";
    absl::StrAppend(&p.names, sep, BatchFieldName(f));
    absl::StrAppend(&p.values, sep, r.at(f).value);
    if (__builtin_mul_overflow(p.value, r.at(f).value, &p.value)) {
      return std::nullopt;
    }
    ++p.count;
  }
  return p;
}

BatchError Overflow(const BatchRequest& r) {
  const Product p = [&] {
    Product q;
    for (BatchField f : kFactors) {
      if (!r.at(f).set()) continue;
      const char* sep = q.count++ == 0 ? "" : " × ";
      absl::StrAppend(&q.names, sep, BatchFieldName(f));
      absl::StrAppend(&q.values, sep, r.at(f).value);
    }
    return q;
  }();
  return BatchError{BatchField::kMicroBatch,
                    absl::StrCat(p.names, " = ", p.values,
                                 " does not fit in a 64-bit integer"),
                    ""};
}

}  // namespace

const char* BatchFieldName(BatchField field) {
  switch (field) {
    case BatchField::kGpus:
      return "gpus";
    case BatchField::kMicroBatch:
      return "micro_batch";
    case BatchField::kAccumulate:
      return "accumulate";
    case BatchField::kGlobalBatch:
      return "global_batch";
  }
  return "?";
}

BatchValue& BatchRequest::at(BatchField field) {
  switch (field) {
    case BatchField::kGpus:
      return gpus;
    case BatchField::kMicroBatch:
      return micro_batch;
    case BatchField::kAccumulate:
      return accumulate;
    case BatchField::kGlobalBatch:
      break;
  }
  return global_batch;
}

const BatchValue& BatchRequest::at(BatchField field) const {
  return const_cast<BatchRequest*>(this)->at(field);
}

namespace {

int CountSet(const BatchRequest& r) {
  return r.gpus.set() + r.micro_batch.set() + r.accumulate.set() + r.global_batch.set();
}

// Rule 1 / 2: all four given. When they disagree and a flag set one of
// them, the first given in the file (accumulate, micro_batch, gpus,
// global_batch) is dropped, to be inferred again, and `sizes` says so;
// without a flag they contradict.
std::optional<BatchError> ReconcileAllFour(BatchRequest* r, BatchSizes* sizes) {
  const std::optional<Product> p = MultiplySetFactors(*r, std::nullopt);
  if (!p) return Overflow(*r);
  if (p->value == r->global_batch.value) return std::nullopt;
  std::optional<BatchField> drop;
  const bool any_flag = r->gpus.source == BatchValue::Source::kFlag ||
                        r->micro_batch.source == BatchValue::Source::kFlag ||
                        r->accumulate.source == BatchValue::Source::kFlag ||
                        r->global_batch.source == BatchValue::Source::kFlag;
  if (any_flag) {
    for (BatchField f : {BatchField::kAccumulate, BatchField::kMicroBatch, BatchField::kGpus,
                         BatchField::kGlobalBatch}) {
      if (r->at(f).source == BatchValue::Source::kFile) {
        drop = f;
        break;
      }
    }
  }
  if (!drop) {
    return BatchError{BatchField::kGlobalBatch,
                      absl::StrCat("global_batch = ", r->global_batch.value,
                                   " does not equal ", p->names, " = ", p->values, " = ",
                                   p->value),
                      "give three of the four and the fourth is inferred"};
  }
  sizes->dropped = true;
  sizes->dropped_field = *drop;
  sizes->dropped_value = r->at(*drop).value;
  r->at(*drop) = BatchValue{};
  return std::nullopt;
}

// Rule 4: accumulate and then gpus default to 1 while fewer than three
// are given; fewer than three after that is no batch size at all.
std::optional<BatchError> ApplyDefaults(BatchRequest* r) {
  if (CountSet(*r) < 3 && !r->accumulate.set()) {
    r->accumulate.value = 1;
    r->accumulate.source = BatchValue::Source::kFile;
  }
  if (CountSet(*r) < 3 && !r->gpus.set()) {
    r->gpus.value = 1;
    r->gpus.source = BatchValue::Source::kFile;
  }
  if (CountSet(*r) < 3) {
    return BatchError{BatchField::kMicroBatch,
                      "the batch size is not given",
                      "set micro_batch (per GPU, per step) or global_batch"};
  }
  return std::nullopt;
}

// Rule 3 for a factor: global_batch over the product of the other two,
// which must divide it.
std::optional<BatchError> InferFactor(BatchField missing, BatchRequest* r) {
  const std::optional<Product> p = MultiplySetFactors(*r, missing);
  if (!p) return Overflow(*r);
  const int64_t g = r->global_batch.value;
  const std::string arithmetic =
      p->count == 1 ? absl::StrCat(p->names, " = ", p->values)
                    : absl::StrCat(p->names, " = ", p->values, " = ", p->value);
  if (g < p->value) {
    return BatchError{
        BatchField::kGlobalBatch,
        absl::StrCat("global_batch = ", g, " is smaller than ", arithmetic),
        absl::StrCat("global_batch must be a multiple of ", p->value, " to infer ",
                     BatchFieldName(missing))};
  }
  if (g % p->value != 0) {
    const int64_t lower = g / p->value * p->value;
    return BatchError{
        BatchField::kGlobalBatch,
        absl::StrCat("global_batch = ", g, " is not divisible by ", arithmetic),
        absl::StrCat("to infer ", BatchFieldName(missing),
                     ", global_batch must be a multiple of ", p->value, ", e.g. ", lower,
                     " or ", lower + p->value)};
  }
  r->at(missing).value = g / p->value;
  r->at(missing).source = BatchValue::Source::kFile;
  return std::nullopt;
}

// Rule 3: infer the missing one (global_batch as the product).
std::optional<BatchError> InferMissing(BatchRequest* r) {
  if (!r->global_batch.set()) {
    const std::optional<Product> p = MultiplySetFactors(*r, std::nullopt);
    if (!p) return Overflow(*r);
    r->global_batch.value = p->value;
    r->global_batch.source = BatchValue::Source::kFile;
    return std::nullopt;
  }
  for (BatchField missing : kFactors) {
    if (r->at(missing).set()) continue;
    if (std::optional<BatchError> error = InferFactor(missing, r)) return *error;
  }
  return std::nullopt;
}

}  // namespace

std::variant<BatchSizes, BatchError> ResolveBatch(const BatchRequest& request) {
  BatchRequest r = request;
  BatchSizes sizes;
  if (CountSet(r) == 4) {
    if (std::optional<BatchError> error = ReconcileAllFour(&r, &sizes)) return *error;
  }
  if (std::optional<BatchError> error = ApplyDefaults(&r)) return *error;
  if (std::optional<BatchError> error = InferMissing(&r)) return *error;
  sizes.gpus = r.gpus.value;
  sizes.micro_batch = r.micro_batch.value;
  sizes.accumulate = r.accumulate.value;
  sizes.global_batch = r.global_batch.value;
  return sizes;
}

}  // namespace trainc::frontend
