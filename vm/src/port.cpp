// port.cpp — what a port does on its own, without the VM: writing its buffered output
// to its file descriptor and closing it, also when the collector finalises it (the
// procedures on ports, and their errors, are in stdlib/src/primitives_ports.cpp).
#include "dlam/port.h"

#include <unistd.h>

#include <cerrno>

namespace dlam {

int Port::flushFile() {
  if (kind != PortKind::FileOut || fd < 0) return 0;
  size_t done = 0;
  int err = 0;
  while (done < buffer.size()) {
    ssize_t n = ::write(fd, buffer.data() + done, buffer.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      err = errno;
      break;
    }
    done += static_cast<size_t>(n);
  }
  buffer.erase(0, done);
  return err;
}

int Port::close() {
  if (closed) return 0;
  closed = true;
  int err = flushFile();
  if (fd >= 0 && (kind == PortKind::FileIn || kind == PortKind::FileOut)) {
    if (::close(fd) != 0 && !err) err = errno;
    fd = -1;
  }
  if (kind != PortKind::StringOut) {
    buffer.clear();
    buffer.shrink_to_fit();
    pos = 0;
  }
  return err;
}

Port::~Port() { close(); }

}  // namespace dlam
