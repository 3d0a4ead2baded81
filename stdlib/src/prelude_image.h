// prelude_image.h — the start-up image embedded in the binary (stdlib/image/): the
// bytes dlam_mkimage wrote at build time, or none in dlam_mkimage itself.
#pragma once
#include <string_view>

namespace dlam {
std::string_view preludeImage();
}
