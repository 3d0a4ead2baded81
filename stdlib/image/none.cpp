// none.cpp — no start-up image: what dlam_mkimage, which makes the image, links (its
// VMs load the prelude from source).
#include "prelude_image.h"

namespace dlam {
std::string_view preludeImage() { return {}; }
}  // namespace dlam
