// Hand-built TrainSpecs for tests and benchmarks, until the front end lands.
//
// SpecBuilder follows train_spec.h's rules: nested calls are flattened into
// "<name>.<k>" statements, the statement's single parameterised op names its
// parameters ("h1.weight" [out, in], "h1.bias", "n.gamma", "n.beta").
//
//   SpecBuilder b("tiny");
//   b.Input("x", {4});
//   b.Label("y", ElementType::kI32, {3});
//   b.Linear("logits", "x", 3);
//   b.CrossEntropy("loss", "logits", "y");
//   TrainSpec spec = b.Build(/*gpus=*/1, /*micro_batch=*/2, /*accumulate=*/1);
#ifndef TRAINC_COMPILER_PLANNER_TESTING_SPECS_H_
#define TRAINC_COMPILER_PLANNER_TESTING_SPECS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "compiler/spec/train_spec.h"

namespace trainc::testing {

class SpecBuilder {
 public:
  explicit SpecBuilder(std::string model_name);

  void Input(const std::string& name, std::vector<int64_t> shape);
  void Label(const std::string& name, ElementType type, std::vector<int64_t> shape);

  // Each returns the name of the value it defines (`name`).
  std::string Linear(const std::string& name, const std::string& x, int64_t out);
  std::string Unary(const std::string& name, const std::string& op, const std::string& x);
  std::string LayerNorm(const std::string& name, const std::string& x);
  std::string Add(const std::string& name, const std::string& a, const std::string& b);
  std::string CrossEntropy(const std::string& name, const std::string& logits,
                           const std::string& label);
  std::string Mse(const std::string& name, const std::string& pred,
                  const std::string& target);

  // `h = act(linear(x, out))` flattened: "h.0 = linear", "h = act(h.0)".
  std::string LinearAct(const std::string& name, const std::string& act,
                        const std::string& x, int64_t out);

  const std::vector<int64_t>& ShapeOf(const std::string& value) const;

  // Fills TrainConfig with global_batch = gpus * micro_batch * accumulate,
  // adamw(lr=1e-3, weight_decay=0.01), epochs 1 and bucket_mb 25.
  TrainSpec Build(int64_t gpus, int64_t micro_batch, int64_t accumulate) const;

 private:
  OpSpec& AddOp(const std::string& name, const std::string& op,
                std::vector<std::string> inputs, std::vector<int64_t> shape);

  ModelSpec model_;
};

// dsl_examples/fashion_mlp.train, with its data and train blocks.
TrainSpec FashionMlpSpec();

// An MLP `in -> hidden... -> classes` with relu and cross_entropy.
TrainSpec MlpSpec(int64_t in, const std::vector<int64_t>& hidden, int64_t classes,
                  int64_t gpus, int64_t micro_batch, int64_t accumulate);

// A residual block with layernorm and gelu:
//   h = linear(x, d); r = layernorm(h); g = gelu(linear(r, d)); s = add(h, g);
//   logits = linear(tanh(s), classes); loss = cross_entropy(logits, y)
TrainSpec ResidualSpec(int64_t in, int64_t d, int64_t classes, int64_t gpus,
                       int64_t micro_batch, int64_t accumulate);

// An autoencoder with tanh and mse against its own input.
TrainSpec AutoencoderSpec(int64_t in, int64_t code, int64_t gpus, int64_t micro_batch,
                          int64_t accumulate);

// A random, valid model of `layers` statements mixing every op (residual
// adds, layernorms, activations), ending in cross_entropy or mse.
TrainSpec RandomSpec(uint64_t seed, int layers, int64_t micro_batch, int64_t accumulate);

}  // namespace trainc::testing

#endif  // TRAINC_COMPILER_PLANNER_TESTING_SPECS_H_
