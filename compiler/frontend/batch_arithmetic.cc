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

std::variant<BatchSizes, BatchError> ResolveBatch(const BatchRequest& request) {
  BatchRequest r = request;
  BatchSizes sizes;
  const auto count_set = [&r] {
    return r.gpus.set() + r.micro_batch.set() + r.accumulate.set() +
           r.global_batch.set();
  };

  // Rule 1 / 2: all four given.
  if (count_set() == 4) {
    const std::optional<Product> p = MultiplySetFactors(r, std::nullopt);
    if (!p) return Overflow(r);
    if (p->value != r.global_batch.value) {
      std::optional<BatchField> drop;
      const bool any_flag =
          r.gpus.source == BatchValue::Source::kFlag ||
          r.micro_batch.source == BatchValue::Source::kFlag ||
          r.accumulate.source == BatchValue::Source::kFlag ||
          r.global_batch.source == BatchValue::Source::kFlag;
      if (any_flag) {
        for (BatchField f : {BatchField::kAccumulate, BatchField::kMicroBatch,
                             BatchField::kGpus, BatchField::kGlobalBatch}) {
          if (r.at(f).source == BatchValue::Source::kFile) {
            drop = f;
            break;
          }
        }
      }
      if (!drop) {
        return BatchError{
            BatchField::kGlobalBatch,
            absl::StrCat("global_batch = ", r.global_batch.value,
                         " does not equal ", p->names, " = ", p->values, " = ",
                         p->value),
            "give three of the four and the fourth is inferred"};
      }
      sizes.dropped = true;
      sizes.dropped_field = *drop;
      sizes.dropped_value = r.at(*drop).value;
      r.at(*drop) = BatchValue{};
    }
  }

  // Rule 4: defaults.
  if (count_set() < 3 && !r.accumulate.set()) {
    r.accumulate.value = 1;
    r.accumulate.source = BatchValue::Source::kFile;
  }
  if (count_set() < 3 && !r.gpus.set()) {
    r.gpus.value = 1;
    r.gpus.source = BatchValue::Source::kFile;
  }
  if (count_set() < 3) {
    return BatchError{BatchField::kMicroBatch,
                      "the batch size is not given",
                      "set micro_batch (per GPU, per step) or global_batch"};
  }

  // Rule 3: infer the missing one.
  if (!r.global_batch.set()) {
    const std::optional<Product> p = MultiplySetFactors(r, std::nullopt);
    if (!p) return Overflow(r);
    r.global_batch.value = p->value;
    r.global_batch.source = BatchValue::Source::kFile;
  } else {
    for (BatchField missing : kFactors) {
      if (r.at(missing).set()) continue;
      const std::optional<Product> p = MultiplySetFactors(r, missing);
      if (!p) return Overflow(r);
      const int64_t g = r.global_batch.value;
      const std::string arithmetic =
          p->count == 1 ? absl::StrCat(p->names, " = ", p->values)
                        : absl::StrCat(p->names, " = ", p->values, " = ",
                                       p->value);
      if (g < p->value) {
        return BatchError{
            BatchField::kGlobalBatch,
            absl::StrCat("global_batch = ", g, " is smaller than ", arithmetic),
            absl::StrCat("global_batch must be a multiple of ", p->value,
                         " to infer ", BatchFieldName(missing))};
      }
      if (g % p->value != 0) {
        const int64_t lower = g / p->value * p->value;
        return BatchError{
            BatchField::kGlobalBatch,
            absl::StrCat("global_batch = ", g, " is not divisible by ",
                         arithmetic),
            absl::StrCat("to infer ", BatchFieldName(missing),
                         ", global_batch must be a multiple of ", p->value,
                         ", e.g. ", lower, " or ", lower + p->value)};
      }
      r.at(missing).value = g / p->value;
      r.at(missing).source = BatchValue::Source::kFile;
    }
  }
  sizes.gpus = r.gpus.value;
  sizes.micro_batch = r.micro_batch.value;
  sizes.accumulate = r.accumulate.value;
  sizes.global_batch = r.global_batch.value;
  return sizes;
}

}  // namespace trainc::frontend
