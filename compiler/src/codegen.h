// codegen.h — A-normal form to bytecode Protos.
#pragma once
#include <memory>

#include "anf.h"
#include "dlam/vm.h"

namespace dlam {

// Compiles `lam` (and every lambda inside it) into Protos. Each Proto keeps a
// reference to its Lambda (sharing ownership of `mod`) for the reverse transform.
Proto* compileLambda(VM& vm, const std::shared_ptr<anf::Module>& mod, const anf::Lambda* lam);

}  // namespace dlam
