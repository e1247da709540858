// embedding: a unit family (compiler/ops/kernel_families.h,
// compiler/ops/unit_family.h). Its sizes, their resolution from the
// operands' shapes, and its loops: Run<float> is the CPU kernel,
// Run<double> the float64 reference. The CUDA kernels are
// runtime/cuda/embedding.cu; the op table entries in
// compiler/ops/op_table.cc.
//
//   embedding               ids[..], table[V, C] -> y[.., C] = table[id]
//   embedding_grad          dy[.., C], ids -> dtable[V, C] (+)= scatter-add
//                           of dy's rows, in increasing row order
//   position_embedding      table[T, C] -> y[B, T, C], B copies of it
//   position_embedding_grad dy[B, T, C] -> dtable (+)= sum over b
#ifndef TRAINC_COMPILER_OPS_EMBEDDING_FAMILY_H_
#define TRAINC_COMPILER_OPS_EMBEDDING_FAMILY_H_

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "compiler/ops/kernel_families.h"
#include "compiler/ops/unit_family.h"

namespace trainc::ops {

struct EmbeddingFamily {
  struct Args {
    int64_t rows = 0;              // embedding(_grad): ids, one row of y each
    int64_t vocab = 0;             // embedding(_grad): the table's rows
    int64_t batch = 0;             // position_embedding(_grad): copies of the table
    int64_t positions = 0;         // position_embedding(_grad): the table's rows
    int64_t width = 0;             // the table's columns
    const int32_t* ids = nullptr;  // embedding(_grad): [rows] token ids
  };
  static constexpr const int32_t* Args::*kIds = &Args::ids;
  static int IdsInput(KernelOp op) {
    return op == KernelOp::kEmbedding ? 0 : op == KernelOp::kEmbeddingGrad ? 1 : -1;
  }

  // "" or why `in` / `out` (full buffer shapes) do not fit `op`.
  static std::string Resolve(KernelOp op, const std::vector<std::vector<int64_t>>& in,
                             const std::vector<std::vector<int64_t>>& out,
                             const std::map<std::string, double>&, Args* a) {
    const bool forward = op == KernelOp::kEmbedding || op == KernelOp::kPositionEmbedding;
    const std::vector<int64_t>& table = op == KernelOp::kEmbedding ? in[1]
                                        : forward                  ? in[0]
                                                                   : out[0];
    if (op == KernelOp::kEmbedding || op == KernelOp::kEmbeddingGrad) {
      if (table.size() != 2) return "table is not [V, C]";
      a->rows = unit::Elements(in[IdsInput(op)]);
      a->vocab = table[0];
      a->width = table[1];
      if (unit::Elements(forward ? out[0] : in[0]) != a->rows * a->width) return "y is not [ids, C]";
      return "";
    }
    if (table.size() != 2) return "table is not [T, C]";
    a->positions = table[0];
    a->width = table[1];
    const int64_t batched = unit::Elements(forward ? out[0] : in[0]);
    if (unit::Elements(table) == 0 || batched % unit::Elements(table) != 0)
      return "y is not [B, T, C]";
    a->batch = batched / unit::Elements(table);
    return "";
  }

  // Runs kernel `op` on inputs `x` and outputs `y` (operand order above;
  // the ids are Args::ids): "" or why not (an id outside [0, vocab)).
  template <typename T>
  static std::string Run(KernelOp op, const Args& a, const T* const* x, T* const* y,
                         bool accumulate) {
    switch (op) {
      case KernelOp::kEmbedding:
      case KernelOp::kEmbeddingGrad:
        for (int64_t r = 0; r < a.rows; ++r) {
          if (a.ids[r] < 0 || a.ids[r] >= a.vocab) {
            return "a token id is outside [0, " + std::to_string(a.vocab) + ")";
          }
        }
        if (op == KernelOp::kEmbedding) {
          Forward(a, x[1], y[0]);
        } else {
          Grad(a, x[0], accumulate, y[0]);
        }
        return "";
      case KernelOp::kPositionEmbedding:
        PositionForward(a, x[0], y[0]);
        return "";
      default:
        PositionGrad(a, x[0], accumulate, y[0]);
        return "";
    }
  }

  template <typename T>
  static void Forward(const Args& a, const T* table, T* y) {
    const int64_t dim = a.width;
    for (int64_t r = 0; r < a.rows; ++r) {
      std::memcpy(y + r * dim, table + a.ids[r] * dim, dim * sizeof(T));
    }
  }

  // One pass in row order: a token repeated in the batch always has its
  // rows added in the same order, so the result is fixed bit for bit (a
  // parallel or atomic scatter would not be).
  template <typename T>
  static void Grad(const Args& a, const T* dy, bool accumulate, T* __restrict dtable) {
    const int64_t dim = a.width;
    if (!accumulate) std::fill(dtable, dtable + a.vocab * dim, T(0));
    for (int64_t r = 0; r < a.rows; ++r) {
      const T* __restrict dyr = dy + r * dim;
      T* __restrict dt = dtable + static_cast<int64_t>(a.ids[r]) * dim;
      for (int64_t j = 0; j < dim; ++j) dt[j] += dyr[j];
    }
  }

  template <typename T>
  static void PositionForward(const Args& a, const T* table, T* y) {
    const int64_t count = a.positions * a.width;
    for (int64_t b = 0; b < a.batch; ++b) {
      std::memcpy(y + b * count, table, count * sizeof(T));
    }
  }

  // The batch sum is formed first, in increasing b, and then stored, so
  // accumulate adds exactly that sum (as torch's sum-then-accumulate does).
  // A chunk at a time keeps the partial sums in registers / L1 and every
  // inner loop a contiguous vector loop.
  template <typename T>
  static void PositionGrad(const Args& a, const T* dy, bool accumulate, T* __restrict dtable) {
    constexpr int64_t kChunk = 256;
    const int64_t count = a.positions * a.width;
    T sum[kChunk];
    for (int64_t c0 = 0; c0 < count; c0 += kChunk) {
      const int64_t len = std::min(kChunk, count - c0);
      if (a.batch == 0) {
        std::fill(sum, sum + len, T(0));
      } else {
        std::memcpy(sum, dy + c0, len * sizeof(T));
      }
      for (int64_t b = 1; b < a.batch; ++b) {
        const T* __restrict s = dy + b * count + c0;
        for (int64_t i = 0; i < len; ++i) sum[i] += s[i];
      }
      T* __restrict out = dtable + c0;
      if (accumulate) {
        for (int64_t i = 0; i < len; ++i) out[i] += sum[i];
      } else {
        std::memcpy(out, sum, len * sizeof(T));
      }
    }
  }
};

}  // namespace trainc::ops

#endif  // TRAINC_COMPILER_OPS_EMBEDDING_FAMILY_H_
