#include "compiler/planner/testing/specs.h"

#include <map>
#include <random>

#include "absl/strings/str_cat.h"

namespace trainc::testing {

SpecBuilder::SpecBuilder(std::string model_name) { model_.name = std::move(model_name); }

void SpecBuilder::Input(const std::string& name, std::vector<int64_t> shape) {
  ValueSpec v;
  v.name = name;
  v.shape = std::move(shape);
  model_.inputs.push_back(v);
}

void SpecBuilder::Label(const std::string& name, ElementType type,
                        std::vector<int64_t> shape) {
  ValueSpec v;
  v.name = name;
  v.type = type;
  v.shape = std::move(shape);
  // These models' labels are v1 class labels (i32[C], one index each).
  v.class_index = type == ElementType::kI32;
  model_.labels.push_back(v);
}

const std::vector<int64_t>& SpecBuilder::ShapeOf(const std::string& value) const {
  for (const ValueSpec& v : model_.inputs) {
    if (v.name == value) return v.shape;
  }
  for (const ValueSpec& v : model_.labels) {
    if (v.name == value) return v.shape;
  }
  for (const OpSpec& op : model_.ops) {
    if (op.name == value) return op.output.shape;
  }
  static const std::vector<int64_t>* empty = new std::vector<int64_t>();
  return *empty;
}

OpSpec& SpecBuilder::AddOp(const std::string& name, const std::string& op,
                           std::vector<std::string> inputs, std::vector<int64_t> shape) {
  OpSpec s;
  s.name = name;
  s.op = ops::FindModelOp(op)->op;  // a test's own spelling: a known op
  s.inputs = std::move(inputs);
  s.output.name = name;
  s.output.shape = std::move(shape);
  s.location = {"test.train", static_cast<int>(model_.ops.size()) + 1, 1};
  model_.ops.push_back(s);
  if (name == "loss") model_.loss = name;
  return model_.ops.back();
}

std::string SpecBuilder::Linear(const std::string& name, const std::string& x, int64_t out) {
  const int64_t in = ShapeOf(x).at(0);
  OpSpec& op = AddOp(name, "linear", {x}, {out});
  op.args["out_features"] = ops::ArgValue::Int(out);
  // The statement's name: "h1.0" -> "h1" (parameters take the statement's
  // name, not the flattened value's).
  const std::string stmt = name.substr(0, name.find('.'));
  op.parameters = {stmt + ".weight", stmt + ".bias"};
  ParameterSpec w{stmt + ".weight", {out, in}, ops::Init::kUniformFanIn, double(in)};
  ParameterSpec b{stmt + ".bias", {out}, ops::Init::kUniformFanIn, double(in)};
  model_.parameters.push_back(w);
  model_.parameters.push_back(b);
  model_.parameter_count += out * in + out;
  return name;
}

std::string SpecBuilder::Unary(const std::string& name, const std::string& op,
                               const std::string& x) {
  AddOp(name, op, {x}, ShapeOf(x));
  return name;
}

std::string SpecBuilder::LayerNorm(const std::string& name, const std::string& x) {
  const int64_t d = ShapeOf(x).at(0);
  OpSpec& op = AddOp(name, "layernorm", {x}, ShapeOf(x));
  const std::string stmt = name.substr(0, name.find('.'));
  op.parameters = {stmt + ".weight", stmt + ".bias"};
  model_.parameters.push_back({stmt + ".weight", {d}, ops::Init::kOnes, 0});
  model_.parameters.push_back({stmt + ".bias", {d}, ops::Init::kZeros, 0});
  model_.parameter_count += 2 * d;
  return name;
}

std::string SpecBuilder::Add(const std::string& name, const std::string& a,
                             const std::string& b) {
  AddOp(name, "add", {a, b}, ShapeOf(a));
  return name;
}

std::string SpecBuilder::CrossEntropy(const std::string& name, const std::string& logits,
                                      const std::string& label) {
  AddOp(name, "cross_entropy", {logits, label}, {});
  return name;
}

std::string SpecBuilder::Mse(const std::string& name, const std::string& pred,
                             const std::string& target) {
  AddOp(name, "mse", {pred, target}, {});
  return name;
}

std::string SpecBuilder::LinearAct(const std::string& name, const std::string& act,
                                   const std::string& x, int64_t out) {
  Linear(name + ".0", x, out);
  return Unary(name, act, name + ".0");
}

TrainSpec SpecBuilder::Build(int64_t gpus, int64_t micro_batch, int64_t accumulate) const {
  TrainSpec spec;
  spec.source_path = absl::StrCat(model_.name, ".train");
  spec.model = model_;
  spec.train.gpus = gpus;
  spec.train.micro_batch = micro_batch;
  spec.train.accumulate = accumulate;
  spec.train.global_batch = gpus * micro_batch * accumulate;
  spec.train.epochs = 1;
  spec.train.optimizer.kind = OptimizerKind::kAdamW;
  spec.train.optimizer.lr = 1e-3;
  spec.train.optimizer.weight_decay = 0.01;
  spec.data.train.format = DataFormat::kIdx;
  return spec;
}

TrainSpec FashionMlpSpec() {
  SpecBuilder b("fashion_mlp");
  b.Input("image", {784});
  b.Label("class", ElementType::kI32, {10});
  b.LinearAct("h1", "relu", "image", 256);
  b.LinearAct("h2", "relu", "h1", 128);
  b.Linear("logits", "h2", 10);
  b.CrossEntropy("loss", "logits", "class");
  TrainSpec spec = b.Build(/*gpus=*/2, /*micro_batch=*/64, /*accumulate=*/2);
  spec.source_path = "examples/fashion_mlp.train";
  spec.train.epochs = 10;
  spec.train.bucket_mb = 25;
  spec.train.seed = 0;
  const std::string dir = "/usr/share/datasets/fashion-mnist/";
  spec.data.train = {DataFormat::kIdx,
                     {dir + "train-images-idx3-ubyte.gz", dir + "train-labels-idx1-ubyte.gz"}};
  spec.data.eval = {DataFormat::kIdx,
                    {dir + "t10k-images-idx3-ubyte.gz", dir + "t10k-labels-idx1-ubyte.gz"}};
  spec.data.scale = 1.0 / 255;
  spec.data.shuffle = true;
  return spec;
}

TrainSpec MlpSpec(int64_t in, const std::vector<int64_t>& hidden, int64_t classes,
                  int64_t gpus, int64_t micro_batch, int64_t accumulate) {
  SpecBuilder b("mlp");
  b.Input("x", {in});
  b.Label("y", ElementType::kI32, {classes});
  std::string h = "x";
  for (size_t i = 0; i < hidden.size(); ++i) {
    h = b.LinearAct(absl::StrCat("h", i + 1), "relu", h, hidden[i]);
  }
  b.Linear("logits", h, classes);
  b.CrossEntropy("loss", "logits", "y");
  return b.Build(gpus, micro_batch, accumulate);
}

TrainSpec ResidualSpec(int64_t in, int64_t d, int64_t classes, int64_t gpus,
                       int64_t micro_batch, int64_t accumulate) {
  SpecBuilder b("residual");
  b.Input("x", {in});
  b.Label("y", ElementType::kI32, {classes});
  b.Linear("h", "x", d);
  b.LayerNorm("r", "h");
  b.LinearAct("g", "gelu", "r", d);
  b.Add("s", "h", "g");
  b.Unary("t", "tanh", "s");
  b.Linear("logits", "t", classes);
  b.CrossEntropy("loss", "logits", "y");
  return b.Build(gpus, micro_batch, accumulate);
}

TrainSpec AutoencoderSpec(int64_t in, int64_t code, int64_t gpus, int64_t micro_batch,
                          int64_t accumulate) {
  SpecBuilder b("autoencoder");
  b.Input("x", {in});
  b.LinearAct("enc", "tanh", "x", code);
  b.LinearAct("dec", "tanh", "enc", in);
  b.Mse("loss", "dec", "x");
  return b.Build(gpus, micro_batch, accumulate);
}

TrainSpec RandomSpec(uint64_t seed, int layers, int64_t micro_batch, int64_t accumulate) {
  std::mt19937_64 rng(seed);
  auto pick = [&](int n) { return static_cast<int>(rng() % n); };
  SpecBuilder b(absl::StrCat("random", seed));
  const int64_t in = 2 + pick(5);
  b.Input("x", {in});
  const bool classify = pick(2) == 0;
  if (classify) b.Label("y", ElementType::kI32, {3});
  // Values by width, so add() and mse() find partners of the same shape.
  std::vector<std::string> values = {"x"};
  for (int i = 0; i < layers; ++i) {
    const std::string name = absl::StrCat("v", i);
    const std::string x = values[values.size() - 1 - pick(std::min<int>(3, values.size()))];
    switch (pick(6)) {
      case 0:
      case 1:
        b.Linear(name, x, 2 + pick(5));
        break;
      case 2:
        b.Unary(name, std::vector<std::string>{"relu", "gelu", "tanh"}[pick(3)], x);
        break;
      case 3:
        b.LayerNorm(name, x);
        break;
      default: {
        std::string partner;
        for (const std::string& v : values) {
          if (v != x && b.ShapeOf(v) == b.ShapeOf(x)) partner = v;
        }
        if (partner.empty()) {
          b.LinearAct(name, "relu", x, b.ShapeOf(x)[0]);
        } else {
          b.Add(name, x, partner);
        }
      }
    }
    values.push_back(name);
  }
  if (classify) {
    b.Linear("logits", values.back(), 3);
    b.CrossEntropy("loss", "logits", "y");
  } else {
    b.Linear("recon", values.back(), in);
    b.Mse("loss", "recon", "x");
  }
  return b.Build(/*gpus=*/1, micro_batch, accumulate);
}

}  // namespace trainc::testing
