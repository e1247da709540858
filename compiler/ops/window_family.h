// Convolution and pooling, the window family (KernelFamily::kWindow), a
// unit family prepared per plan (compiler/ops/kernel_families.h,
// compiler/ops/unit_family.h): its sizes (WindowGeometry, its Args), their
// resolution from the operands' shapes and attributes (Resolve), and its
// loops, Run<double> the float64 reference. Its CPU kernels are oneDNN's
// and runtime/cpu/blocked_pool's (runtime/cpu/dnnl_ops.cc), its CUDA
// kernels cuDNN's (runtime/cuda/cudnn_ops.cc): programs each backend
// prepares for the plan (layouts chosen across instructions, library
// descriptors). The last output of each op is the instruction's workspace;
// max pooling's argmax is i32.
//
//   conv2d[_relu]       x[N,C,H,W], w[O,C,kh,kw], b[O] (optional) -> y[N,O,OH,OW]
//   conv2d_grad_input   dy, w -> dx (+)=
//   conv2d_grad_params  dy, x -> dw (+)=, db (+)= (optional)
//   max_pool2d          x -> y, argmax (i32: the image element h W + w)
//   max_pool2d_grad     dy, x, y, argmax -> dx (+)=
//   avg_pool2d          x -> y (padding counted in the window)
//   avg_pool2d_grad     dy -> dx (+)=
#ifndef TRAINC_COMPILER_OPS_WINDOW_FAMILY_H_
#define TRAINC_COMPILER_OPS_WINDOW_FAMILY_H_

#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "compiler/ops/kernel_families.h"
#include "compiler/ops/unit_family.h"

namespace trainc {

// An NCHW convolution or pooling window: the image side [n, c, h, w]
// (x or dx), the other side [n, o, oh, ow] (y or dy; o = c for pooling),
// the window kh x kw moved by `stride` over the image padded by `padding`
// on every side.
struct WindowGeometry {
  int64_t n = 0, c = 0, h = 0, w = 0;
  int64_t o = 0, oh = 0, ow = 0;
  int64_t kh = 0, kw = 0, stride = 1, padding = 0;
  bool has_bias = false;  // conv2d / conv2d_grad_params
};

namespace ops {

struct WindowFamily {
  using Args = WindowGeometry;

  // The image side: x for the forward ops and grad_params, dx otherwise.
  static bool ImageIsOutput(KernelOp op) {
    return op == KernelOp::kConv2dGradInput || op == KernelOp::kMaxPool2dGrad ||
           op == KernelOp::kAvgPool2dGrad;
  }
  static bool ConvForward(KernelOp op) {
    return op == KernelOp::kConv2d || op == KernelOp::kConv2dRelu;
  }
  static bool Forward(KernelOp op) {
    return ConvForward(op) || op == KernelOp::kMaxPool2d || op == KernelOp::kAvgPool2d;
  }

  // The geometry from the image side, the weight and the attributes,
  // checked against the other side and max pooling's argmax (i32: neither
  // f32 nor bf16 in `plan`). `out` includes the workspace (last).
  static std::string Resolve(KernelOp op, const std::vector<std::vector<int64_t>>& in,
                             const std::vector<std::vector<int64_t>>& out,
                             const std::map<std::string, double>& attrs,
                             const unit::PlanFacts& plan, Args* g) {
    std::string why = Geometry(op, in, out, attrs, g);
    if (!why.empty() || (op != KernelOp::kMaxPool2d && op != KernelOp::kMaxPool2dGrad)) {
      return why;
    }
    const bool forward = op == KernelOp::kMaxPool2d;
    const uint32_t bit = forward ? 2u : 8u;  // output 1, input 3
    const uint32_t floats = forward ? plan.f32_outputs | plan.bf16_outputs
                                    : plan.f32_inputs | plan.bf16_inputs;
    const std::vector<int64_t>& argmax = forward ? out[1] : in[3];
    if ((floats & bit) != 0 || unit::Elements(argmax) != g->n * g->o * g->oh * g->ow) {
      return "argmax is not i32 shaped like y";
    }
    return "";
  }

  static std::string Geometry(KernelOp op, const std::vector<std::vector<int64_t>>& in,
                              const std::vector<std::vector<int64_t>>& out,
                              const std::map<std::string, double>& attrs, Args* g) {
    auto attr = [&](const char* name) {
      return static_cast<int64_t>(unit::Attr(attrs, name, -1));
    };
    const bool conv = ConvForward(op) || op == KernelOp::kConv2dGradInput ||
                      op == KernelOp::kConv2dGradParams;
    const std::vector<int64_t>& image = ImageIsOutput(op)                   ? out[0]
                                        : op == KernelOp::kConv2dGradParams ? in[1]
                                                                            : in[0];
    const std::vector<int64_t>& other = Forward(op) ? out[0] : in[0];
    if (image.size() != 4) return "the image is not [N, C, H, W]";
    *g = Args{};
    g->n = image[0], g->c = image[1], g->h = image[2], g->w = image[3];
    g->stride = attr("stride");
    g->padding = attr("padding");
    if (conv) {
      const std::vector<int64_t>& weight = op == KernelOp::kConv2dGradParams ? out[0] : in[1];
      if (weight.size() != 4 || weight[1] != g->c) {
        return "the weight is not [O, C, kh, kw] for the image's C";
      }
      g->o = weight[0], g->kh = weight[2], g->kw = weight[3];
      if (ConvForward(op)) {
        g->has_bias = in.size() == 3;
        if (g->has_bias && unit::Elements(in[2]) != g->o) return "bias size";
      } else if (op == KernelOp::kConv2dGradParams) {
        g->has_bias = out.size() == 3;
        if (g->has_bias && unit::Elements(out[1]) != g->o) return "db size";
      }
    } else {
      g->o = g->c;
      g->kh = attr("kernel_h");
      g->kw = attr("kernel_w");
    }
    return Tile(op, in, other, g);
  }

  // The output side's sizes: the windows must tile the padded image.
  static std::string Tile(KernelOp op, const std::vector<std::vector<int64_t>>& in,
                          const std::vector<int64_t>& other, Args* g) {
    if (g->stride < 1 || g->padding < 0 || g->kh < 1 || g->kw < 1) {
      return "attrs stride, padding and the kernel size are missing or out of range";
    }
    const int64_t span_h = g->h + 2 * g->padding - g->kh, span_w = g->w + 2 * g->padding - g->kw;
    if (span_h < 0 || span_w < 0 || span_h % g->stride || span_w % g->stride) {
      return "the windows do not tile the padded image";
    }
    g->oh = span_h / g->stride + 1;
    g->ow = span_w / g->stride + 1;
    const int64_t others = g->n * g->o * g->oh * g->ow;
    if (unit::Elements(other) != others) {
      return "the output side holds " + std::to_string(unit::Elements(other)) +
             " elements, the geometry gives " + std::to_string(g->n) + "x" +
             std::to_string(g->o) + "x" + std::to_string(g->oh) + "x" + std::to_string(g->ow);
    }
    if (op == KernelOp::kMaxPool2dGrad &&
        (unit::Elements(in[1]) != g->n * g->c * g->h * g->w || unit::Elements(in[2]) != others)) {
      return "x or y does not match the geometry";
    }
    return "";
  }

  // The loops (the float64 reference; the backends run their libraries').
  // max_pool2d's argmax is written and read as T.
  template <typename T>
  static void Run(KernelOp op, const Args& g, const T* const* x, T* const* y, bool accumulate) {
    if (ConvForward(op) || op == KernelOp::kConv2dGradInput ||
        op == KernelOp::kConv2dGradParams) {
      Conv<T>(op, g, x, y, accumulate);
    } else if (Forward(op)) {
      PoolForward<T>(op, g, x, y);
    } else {
      PoolBackward<T>(op, g, x, y, accumulate);
    }
  }

 private:
  static int64_t Image(const Args& g, int64_t n, int64_t c, int64_t h, int64_t w) {
    return ((n * g.c + c) * g.h + h) * g.w + w;
  }
  static int64_t Other(const Args& g, int64_t n, int64_t o, int64_t i, int64_t j) {
    return ((n * g.o + o) * g.oh + i) * g.ow + j;
  }

  // Calls f(n, o_or_c, i, j, h, w, p, q) for every (output element, window
  // element inside the image) pair.
  template <typename F>
  static void ForEachWindowElement(const Args& g, F f) {
    for (int64_t n = 0; n < g.n; ++n) {
      for (int64_t c = 0; c < g.o; ++c) {
        for (int64_t i = 0; i < g.oh; ++i) {
          for (int64_t j = 0; j < g.ow; ++j) {
            for (int64_t p = 0; p < g.kh; ++p) {
              for (int64_t q = 0; q < g.kw; ++q) {
                const int64_t h = i * g.stride + p - g.padding, w = j * g.stride + q - g.padding;
                if (h >= 0 && h < g.h && w >= 0 && w < g.w) f(n, c, i, j, h, w, p, q);
              }
            }
          }
        }
      }
    }
  }

  template <typename T>
  static void Write(T* y, int64_t e, T v, bool accumulate) {
    y[e] = accumulate ? y[e] + v : v;
  }

  // Sums in T, then written once (accumulate adds the sum).
  template <typename T>
  static void Conv(KernelOp op, const Args& g, const T* const* x, T* const* y, bool acc) {
    const bool fwd = ConvForward(op), params = op == KernelOp::kConv2dGradParams;
    const T* image = fwd ? x[0] : params ? x[1] : nullptr;
    const T* w = params ? nullptr : x[1];
    auto wi = [&](int64_t o, int64_t c, int64_t p, int64_t q) {
      return ((o * g.c + c) * g.kh + p) * g.kw + q;
    };
    const int64_t others = g.n * g.o * g.oh * g.ow;
    std::vector<T> sum(fwd ? others : params ? g.o * g.c * g.kh * g.kw : g.n * g.c * g.h * g.w,
                       T(0));
    for (int64_t c = 0; c < g.c; ++c) {
      ForEachWindowElement(g, [&](int64_t n, int64_t o, int64_t i, int64_t j, int64_t h,
                                  int64_t ww, int64_t p, int64_t q) {
        if (fwd) {
          sum[Other(g, n, o, i, j)] += image[Image(g, n, c, h, ww)] * w[wi(o, c, p, q)];
        } else if (params) {
          sum[wi(o, c, p, q)] += x[0][Other(g, n, o, i, j)] * image[Image(g, n, c, h, ww)];
        } else {
          sum[Image(g, n, c, h, ww)] += x[0][Other(g, n, o, i, j)] * w[wi(o, c, p, q)];
        }
      });
    }
    if (fwd) {
      for (int64_t e = 0; e < others; ++e) {
        const T v = sum[e] + (g.has_bias ? x[2][(e / (g.oh * g.ow)) % g.o] : T(0));
        y[0][e] = op == KernelOp::kConv2dRelu ? pointwise::Relu::F(v) : v;
      }
      return;
    }
    for (size_t e = 0; e < sum.size(); ++e) Write<T>(y[0], static_cast<int64_t>(e), sum[e], acc);
    if (params && g.has_bias) {
      for (int64_t o = 0; o < g.o; ++o) {
        T s = 0;
        for (int64_t n = 0; n < g.n; ++n) {
          for (int64_t e = 0; e < g.oh * g.ow; ++e) s += x[0][(n * g.o + o) * g.oh * g.ow + e];
        }
        Write<T>(y[1], o, s, acc);
      }
    }
  }

  template <typename T>
  static void PoolForward(KernelOp op, const Args& g, const T* const* x, T* const* y) {
    const int64_t others = g.n * g.o * g.oh * g.ow;
    const T area = static_cast<T>(g.kh * g.kw);
    if (op == KernelOp::kMaxPool2d) {
      // argmax (y[1]): the image element h W + w of the first maximum.
      std::vector<T> best(others, -INFINITY), where(others, T(-1));
      ForEachWindowElement(g, [&](int64_t n, int64_t c, int64_t i, int64_t j, int64_t h,
                                  int64_t w, int64_t, int64_t) {
        const int64_t e = Other(g, n, c, i, j);
        const T v = x[0][Image(g, n, c, h, w)];
        if (v > best[e]) {
          best[e] = v;
          where[e] = static_cast<T>(h * g.w + w);
        }
      });
      for (int64_t e = 0; e < others; ++e) y[0][e] = best[e], y[1][e] = where[e];
      return;
    }
    std::vector<T> sum(others, T(0));
    ForEachWindowElement(g, [&](int64_t n, int64_t c, int64_t i, int64_t j, int64_t h,
                                int64_t w, int64_t, int64_t) {
      sum[Other(g, n, c, i, j)] += x[0][Image(g, n, c, h, w)];
    });
    for (int64_t e = 0; e < others; ++e) y[0][e] = sum[e] / area;
  }

  // dy goes to the maximum's element (argmax, x[3]) or evenly over the
  // window (padding included in the count).
  template <typename T>
  static void PoolBackward(KernelOp op, const Args& g, const T* const* x, T* const* y,
                           bool acc) {
    const T area = static_cast<T>(g.kh * g.kw);
    std::vector<T> dx(g.n * g.c * g.h * g.w, T(0));
    if (op == KernelOp::kMaxPool2dGrad) {
      for (int64_t nc = 0; nc < g.n * g.c; ++nc) {
        for (int64_t e = 0; e < g.oh * g.ow; ++e) {
          const int64_t k = nc * g.oh * g.ow + e;
          dx[nc * g.h * g.w + static_cast<int64_t>(std::llround(x[3][k]))] += x[0][k];
        }
      }
    } else {
      ForEachWindowElement(g, [&](int64_t n, int64_t c, int64_t i, int64_t j, int64_t h,
                                  int64_t w, int64_t, int64_t) {
        dx[Image(g, n, c, h, w)] += x[0][Other(g, n, c, i, j)] / area;
      });
    }
    for (size_t e = 0; e < dx.size(); ++e) Write<T>(y[0], static_cast<int64_t>(e), dx[e], acc);
  }
};

}  // namespace ops
}  // namespace trainc

#endif  // TRAINC_COMPILER_OPS_WINDOW_FAMILY_H_
