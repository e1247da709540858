#include "compiler/planner/bucketing.h"

#include <cmath>

namespace trainc {

BucketAssignment AssignBuckets(const std::vector<int64_t>& grad_bytes, double bucket_mb,
                               double first_bucket_mb) {
  // Integer capacities so the decision cannot differ between ranks or
  // compilers through floating-point rounding.
  // A size past any model (bucket_mb = 1e30) is one bucket, not an
  // overflow.
  auto capacity = [](double mb) {
    if (mb <= 0) return int64_t{0};
    const double bytes = mb * kBytesPerMb;
    return bytes >= 0x1p62 ? (int64_t{1} << 62) : static_cast<int64_t>(std::llround(bytes));
  };
  const int64_t cap = capacity(bucket_mb);
  const int64_t first_cap = first_bucket_mb > 0 ? capacity(first_bucket_mb) : cap;
  BucketAssignment out;
  std::vector<int> current;
  int64_t filled = 0;
  for (int i = 0; i < static_cast<int>(grad_bytes.size()); ++i) {
    current.push_back(i);
    filled += grad_bytes[i];
    const int64_t limit = out.buckets.empty() ? first_cap : cap;
    if (filled >= limit) {
      out.buckets.push_back(std::move(current));
      current.clear();
      filled = 0;
    }
  }
  if (!current.empty()) out.buckets.push_back(std::move(current));
  return out;
}

}  // namespace trainc
