// What a model computes, as text a checkpoint can carry: the plan records
// it (Plan::model_signature), checkpoints save it, and tools/hf_export
// compares it with the .train file it is given, so that weights trained
// as one model (4 heads over 2 key/value heads) are not exported as
// another of the same shapes (2 heads over 1).
//
// One line per distinct op call, with how many the model has, then its
// inputs and labels:
//   "2 x causal_attention(heads=4, kv_heads=2, rope=true, rope_theta=10000)"
//   "input tokens: i32[16]"
// The arguments are the op's constants with defaults filled in, and the
// parameters it shares ("weight=wte.weight"); initialisations are left
// out (a checkpoint's weights are past them), and so are statement names
// and dropout (the identity outside training: a fine-tune may change it).
// The lines are sorted, so the signature depends on the model only.
#ifndef TRAINC_COMPILER_SPEC_MODEL_SIGNATURE_H_
#define TRAINC_COMPILER_SPEC_MODEL_SIGNATURE_H_

#include <string>
#include <vector>

#include "compiler/spec/train_spec.h"

namespace trainc {

std::vector<std::string> ModelSignatureLines(const ModelSpec& model);

// The lines joined by '\n'.
std::string ModelSignature(const ModelSpec& model);

// What differs between two signatures, for a message: "the checkpoint's
// has 2 x causal_attention(heads=2, ...); FILE.train's has 2 x
// causal_attention(heads=4, ...)", naming each side with `a_name` and
// `b_name`; "" when they are the same.
std::string ModelSignatureDifference(const std::string& a, const std::string& a_name,
                                     const std::string& b, const std::string& b_name);

}  // namespace trainc

#endif  // TRAINC_COMPILER_SPEC_MODEL_SIGNATURE_H_
