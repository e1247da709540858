#include "compiler/autodiff/reference_eval.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace trainc {
namespace {

// Rows and row width of a [B, ...] tensor.
int64_t Rows(const TensorRef& t) { return t.shape.empty() ? 1 : t.shape[0]; }
int64_t Cols(const TensorRef& t) { return t.size() / std::max<int64_t>(Rows(t), 1); }

class Writer {
 public:
  Writer(const TensorRef& t, bool accumulate) : t_(t), acc_(accumulate) {}
  void Set(int64_t i, double v) { t_.data[i] = acc_ ? t_.data[i] + v : v; }

 private:
  TensorRef t_;
  bool acc_;
};

double Gelu(double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); }
double GeluGrad(double x) {
  return 0.5 * (1 + std::erf(x / std::sqrt(2.0))) +
         x * std::exp(-0.5 * x * x) / std::sqrt(2 * M_PI);
}

}  // namespace

int64_t TensorRef::size() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

absl::Status EvalOp(const std::string& op, const std::map<std::string, double>& attrs,
                    const std::vector<TensorRef>& in, const std::vector<TensorRef>& out) {
  auto attr = [&](const char* name) {
    auto it = attrs.find(name);
    return it == attrs.end() ? 0.0 : it->second;
  };
  const bool acc = attr("accumulate") != 0;
  if (op == "linear") {
    const int64_t B = Rows(in[0]), I = Cols(in[0]), O = in[1].shape[0];
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t o = 0; o < O; ++o) {
        double s = in[2].data[o];
        for (int64_t i = 0; i < I; ++i) s += in[0].data[b * I + i] * in[1].data[o * I + i];
        out[0].data[b * O + o] = s;
      }
    }
  } else if (op == "linear_grad_input") {
    const int64_t B = Rows(in[0]), O = Cols(in[0]), I = in[1].shape[1];
    Writer dx(out[0], acc);
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t i = 0; i < I; ++i) {
        double s = 0;
        for (int64_t o = 0; o < O; ++o) s += in[0].data[b * O + o] * in[1].data[o * I + i];
        dx.Set(b * I + i, s);
      }
    }
  } else if (op == "linear_grad_params") {
    const int64_t B = Rows(in[0]), O = Cols(in[0]), I = Cols(in[1]);
    Writer dw(out[0], acc), db(out[1], acc);
    for (int64_t o = 0; o < O; ++o) {
      double sb = 0;
      for (int64_t b = 0; b < B; ++b) sb += in[0].data[b * O + o];
      db.Set(o, sb);
      for (int64_t i = 0; i < I; ++i) {
        double s = 0;
        for (int64_t b = 0; b < B; ++b) s += in[0].data[b * O + o] * in[1].data[b * I + i];
        dw.Set(o * I + i, s);
      }
    }
  } else if (op == "relu" || op == "gelu" || op == "tanh") {
    for (int64_t i = 0; i < in[0].size(); ++i) {
      const double x = in[0].data[i];
      out[0].data[i] = op == "relu" ? std::max(x, 0.0) : op == "gelu" ? Gelu(x) : std::tanh(x);
    }
  } else if (op == "relu_grad" || op == "gelu_grad" || op == "tanh_grad") {
    Writer dx(out[0], acc);
    for (int64_t i = 0; i < in[0].size(); ++i) {
      const double dy = in[0].data[i], v = in[1].data[i];  // v: y, or x for gelu
      const double d = op == "relu_grad" ? (v > 0 ? 1.0 : 0.0)
                       : op == "gelu_grad" ? GeluGrad(v)
                                           : 1 - v * v;
      dx.Set(i, dy * d);
    }
  } else if (op == "layernorm") {
    const int64_t B = Rows(in[0]), D = Cols(in[0]);
    const double eps = attr("eps");
    for (int64_t b = 0; b < B; ++b) {
      const double* x = in[0].data + b * D;
      double mean = 0, var = 0;
      for (int64_t j = 0; j < D; ++j) mean += x[j];
      mean /= D;
      for (int64_t j = 0; j < D; ++j) var += (x[j] - mean) * (x[j] - mean);
      const double rstd = 1 / std::sqrt(var / D + eps);
      for (int64_t j = 0; j < D; ++j) {
        out[0].data[b * D + j] = (x[j] - mean) * rstd * in[1].data[j] + in[2].data[j];
      }
      out[1].data[b] = mean;
      out[2].data[b] = rstd;
    }
  } else if (op == "layernorm_grad_input") {
    const int64_t B = Rows(in[0]), D = Cols(in[0]);
    Writer dx(out[0], acc);
    for (int64_t b = 0; b < B; ++b) {
      const double *dy = in[0].data + b * D, *x = in[1].data + b * D, *g = in[2].data;
      const double mean = in[3].data[b], rstd = in[4].data[b];
      double m1 = 0, m2 = 0;  // mean(g dy), mean(g dy xhat)
      for (int64_t j = 0; j < D; ++j) {
        m1 += g[j] * dy[j];
        m2 += g[j] * dy[j] * (x[j] - mean) * rstd;
      }
      m1 /= D;
      m2 /= D;
      for (int64_t j = 0; j < D; ++j) {
        const double xhat = (x[j] - mean) * rstd;
        dx.Set(b * D + j, rstd * (g[j] * dy[j] - m1 - xhat * m2));
      }
    }
  } else if (op == "layernorm_grad_params") {
    const int64_t B = Rows(in[0]), D = Cols(in[0]);
    Writer dg(out[0], acc), dbeta(out[1], acc);
    for (int64_t j = 0; j < D; ++j) {
      double sg = 0, sb = 0;
      for (int64_t b = 0; b < B; ++b) {
        const double xhat = (in[1].data[b * D + j] - in[2].data[b]) * in[3].data[b];
        sg += in[0].data[b * D + j] * xhat;
        sb += in[0].data[b * D + j];
      }
      dg.Set(j, sg);
      dbeta.Set(j, sb);
    }
  } else if (op == "add") {
    for (int64_t i = 0; i < in[0].size(); ++i) out[0].data[i] = in[0].data[i] + in[1].data[i];
  } else if (op == "copy_grad") {
    Writer dx(out[0], acc);
    for (int64_t i = 0; i < in[0].size(); ++i) dx.Set(i, in[0].data[i]);
  } else if (op == "cross_entropy") {
    const int64_t B = Rows(in[0]), C = Cols(in[0]);
    double loss = 0;
    for (int64_t b = 0; b < B; ++b) {
      const double* z = in[0].data + b * C;
      const double m = *std::max_element(z, z + C);
      double sum = 0;
      for (int64_t c = 0; c < C; ++c) sum += std::exp(z[c] - m);
      for (int64_t c = 0; c < C; ++c) out[1].data[b * C + c] = std::exp(z[c] - m) / sum;
      const int64_t label = static_cast<int64_t>(in[1].data[b]);
      loss -= z[label] - m - std::log(sum);
    }
    out[0].data[0] = loss;
  } else if (op == "cross_entropy_grad") {
    const int64_t B = Rows(in[0]), C = Cols(in[0]);
    Writer d(out[0], acc);
    for (int64_t b = 0; b < B; ++b) {
      const int64_t label = static_cast<int64_t>(in[1].data[b]);
      for (int64_t c = 0; c < C; ++c) {
        d.Set(b * C + c, attr("scale") * (in[0].data[b * C + c] - (c == label ? 1 : 0)));
      }
    }
  } else if (op == "mse") {
    const int64_t B = Rows(in[0]), N = Cols(in[0]);
    double loss = 0;
    for (int64_t i = 0; i < B * N; ++i) {
      const double e = in[0].data[i] - in[1].data[i];
      loss += e * e / N;
    }
    out[0].data[0] = loss;
  } else if (op == "mse_grad") {
    const int64_t N = Cols(in[0]);
    Writer d(out[0], acc);
    for (int64_t i = 0; i < in[0].size(); ++i) {
      d.Set(i, attr("scale") * 2 * (in[0].data[i] - in[1].data[i]) / N);
    }
  } else {
    return absl::UnimplementedError(absl::StrCat("reference_eval: op ", op));
  }
  return absl::OkStatus();
}

PlanInterpreter::PlanInterpreter(const Plan& plan)
    : plan_(plan), arena_(plan.arena_bytes / 4, 0.0) {}

TensorRef PlanInterpreter::buffer(int id) {
  const Buffer& b = plan_.buffers[id];
  return TensorRef{arena_.data() + b.offset / 4, b.shape};
}

absl::Status PlanInterpreter::Run(const Instruction& instr) {
  if (instr.op == "load_batch") {
    const int k = static_cast<int>(instr.attrs.at("micro"));
    if (k >= static_cast<int>(batches_.size())) {
      return absl::FailedPreconditionError("no batch for this micro-step");
    }
    for (size_t j = 0; j < instr.outputs.size(); ++j) {
      TensorRef t = buffer(instr.outputs[j]);
      std::copy(batches_[k][j].begin(), batches_[k][j].end(), t.data);
    }
    return absl::OkStatus();
  }
  if (instr.op == "all_reduce") {
    if (!plan_.deterministic) return absl::OkStatus();
    const Bucket& bucket = plan_.buckets[static_cast<int>(instr.attrs.at("bucket"))];
    TensorRef t = buffer(bucket.grad_buffer);
    const int64_t n = bucket.bytes / 4;
    for (int64_t i = 0; i < n; ++i) {
      double s = 0;
      for (int64_t k = 0; k < plan_.accumulate; ++k) s += t.data[k * n + i];
      t.data[i] = s;
    }
    return absl::OkStatus();
  }
  std::vector<TensorRef> in, out;
  for (int id : instr.inputs) in.push_back(buffer(id));
  for (int id : instr.outputs) out.push_back(buffer(id));
  return EvalOp(instr.op, instr.attrs, in, out);
}

}  // namespace trainc
