// primitives_format.cpp — (format fmt arg ...): a string made from a template with
// directives (SRFI-28, and SRFI-48's fixed-point ~F):
//
//   ~a  the next argument as display shows it     ~s  as write shows it
//   ~%  a newline                                  ~~  a tilde
//   ~w,dF  the next argument, a number, in fixed point with d decimals, right-aligned
//          in w characters (~,dF: no width; ~wF: its shortest text; ~F: as display)
//
// Directive letters may be upper or lower case. A directive that is none of these, an
// argument missing or left over, and ~F of something that is not a number are errors
// naming format and the directive. (format #f fmt arg ...) is the same as without #f;
// (format #t fmt arg ...) writes the text to the output and returns void.
#include <charconv>
#include <cmath>
#include <string>

#include "dlam/lexical.h"
#include "primitives.h"

namespace dlam::prim {

namespace {

// The widest field and the most decimals a ~F directive may ask for.
constexpr size_t kMaxField = 1000;

// A number as ~F writes it: fixed point with `decimals` decimals (or, when it is -1, as
// display writes it), padded with spaces on the left to `width` characters.
std::string fixedPoint(VM& vm, double x, long width, long decimals) {
  std::string text;
  if (decimals < 0 || !std::isfinite(x)) {
    text = vm.show(Value::numberChecked(x), false);
  } else {
    // The digits of a double in fixed point: at most 309 before the point.
    char buf[320 + kMaxField];
    auto r = std::to_chars(buf, buf + sizeof buf, x, std::chars_format::fixed,
                           static_cast<int>(decimals));
    text.assign(buf, r.ptr);
  }
  if (width > 0 && text.size() < static_cast<size_t>(width))
    text.insert(0, static_cast<size_t>(width) - text.size(), ' ');
  return text;
}

Value format(VM& vm, Value* a, int n) {
  int first = 0;
  bool toOutput = false;
  if (Value d = unwrapAttached(a[0]); d.isBool()) {  // SRFI-48's destination
    toOutput = d.isTruthy();
    first = 1;
    if (n < 2) vm.runtimeError("format: expected a format string after the destination");
  }
  std::string_view fmt = stringArg(vm, "format", a, first);
  int next = first + 1;  // the next argument to take
  std::string out;
  for (size_t i = 0; i < fmt.size(); ++i) {
    if (fmt[i] != '~') {
      out += fmt[i];
      continue;
    }
    size_t start = i++;
    // Optional width and decimals: ~w,dF, ~,dF, ~wF.
    long field[2] = {-1, -1};
    for (int k = 0; k < 2 && i < fmt.size(); ++k) {
      if (k == 1) {
        if (fmt[i] != ',') break;
        ++i;
      }
      size_t digits = 0;
      long v = 0;
      for (; i < fmt.size() && fmt[i] >= '0' && fmt[i] <= '9' && digits < 6; ++i, ++digits)
        v = v * 10 + (fmt[i] - '0');
      if (digits) field[k] = v;
    }
    // The directive as written, for the messages: up to its letter (a whole character).
    auto directive = [&] {
      size_t len = 1;
      if (i < fmt.size()) decodeChar(fmt.data() + i, fmt.data() + fmt.size(), len);
      return std::string(fmt.substr(start, std::min(fmt.size(), i + len) - start));
    };
    if (i == fmt.size())
      vm.runtimeError("format: the format ends in an incomplete directive '" + directive() + "'");
    char c = fmt[i] >= 'A' && fmt[i] <= 'Z' ? static_cast<char>(fmt[i] + 32) : fmt[i];
    bool numbered = i - start > 1;
    if (numbered && c != 'f')
      vm.runtimeError("format: bad directive '" + directive() +
                      "' (only ~F takes a width and decimals)");
    if (c == '%') {
      out += '\n';
      continue;
    }
    if (c == '~') {
      out += '~';
      continue;
    }
    if (c != 'a' && c != 's' && c != 'f')
      vm.runtimeError("format: unknown directive '" + directive() + "' (expected ~a ~s ~% ~~ ~F)");
    if (next >= n)
      vm.runtimeError("format: no argument left for the directive '" + directive() + "'");
    Value arg = a[next++];
    if (c == 'f') {
      if (field[0] > static_cast<long>(kMaxField) || field[1] > static_cast<long>(kMaxField))
        vm.runtimeError("format: bad directive '" + directive() + "' (a width or decimals above " +
                        std::to_string(kMaxField) + ")");
      Value x = untagged(fwdPrimal(unwrapAttached(arg)));
      if (x.isZero()) x = Value::number(0);  // the symbolic zero sensitivity
      if (!x.isNumber())
        vm.runtimeError("format: the directive '" + directive() + "' expects a number, got " +
                        vm.show(arg, true));
      out += fixedPoint(vm, x.asNumber(), field[0], field[1]);
    } else {
      // A bundle (forward mode) shows its primal, as a reverse-tagged number does.
      out += vm.show(isFwd(arg) ? fwdPrimal(arg) : arg, c == 's');
    }
  }
  if (next < n)
    vm.runtimeError("format: " + std::to_string(n - next) + " argument" +
                    (n - next > 1 ? "s" : "") + " left over (the format takes " +
                    std::to_string(next - first - 1) + ")");
  if (toOutput) {
    if (!out.empty()) vm.output(out);
    return Value::voidValue();
  }
  return vm.makeString(out);
}

}  // namespace

void openFormatPrimitives(Registrar& r) {
  VM& vm = r.vm;
  vm.defineNative("format", format, 1, -1);
}

}  // namespace dlam::prim
