// primitives_errors.cpp — the primitives of errors a program catches: raise,
// raise-continuable, error and error objects. The handler frames themselves and the
// landing of an error at them are the VM's (vm/src/handlers.cpp); guard and
// with-exception-handler are written over them in the prelude.
#include "primitives.h"

namespace dlam::prim {
namespace {

// (error "message" irritant ...): raises an error object. Uncaught, it reports the
// message, then the irritants written, space-separated.
Value error(VM& vm, Value* a, int n) {
  Value irritants = vm.list(a + 1, static_cast<size_t>(n - 1));
  Value message = unwrapAttached(a[0]);
  if (!isString(message)) message = vm.makeString(vm.show(a[0], true));
  return vm.raiseToHandlers(vm.makeErrorObject(message, irritants));
}

Value raise(VM& vm, Value* a, int) { return vm.raiseToHandlers(a[0]); }
Value raiseContinuable(VM& vm, Value* a, int) { return vm.raiseContinuable(a[0]); }

// (%handler-returned obj): a handler of with-exception-handler returned from a raise.
Value handlerReturned(VM& vm, Value* a, int) {
  std::string shown = vm.show(a[0], true);
  if (shown.size() > 60) shown = shown.substr(0, 57) + "...";
  vm.runtimeError("with-exception-handler: the handler returned from a non-continuable raise of " +
                  shown);
}

ErrorObject* errorObject(VM& vm, const char* who, Value* a) {
  Value v = unwrapAttached(a[0]);
  if (!isObj(v, ObjType::ErrorObject)) vm.typeError(who, 0, "error object", a[0]);
  return static_cast<ErrorObject*>(v.asObject());
}

Value isErrorObject(VM&, Value* a, int) {
  return Value::boolean(isObj(unwrapAttached(a[0]), ObjType::ErrorObject));
}
Value errorObjectMessage(VM& vm, Value* a, int) {
  return errorObject(vm, "error-object-message", a)->message;
}
Value errorObjectIrritants(VM& vm, Value* a, int) {
  return errorObject(vm, "error-object-irritants", a)->irritants;
}

}  // namespace

void openErrorPrimitives(Registrar& r) {
  VM& vm = r.vm;
  r.define(NativeId::Error, error);
  vm.defineNative("raise", raise, 1, 1);
  vm.defineNative("raise-continuable", raiseContinuable, 1, 1)->flags |= kNoDerivative;
  vm.defineNative("%handler-returned", handlerReturned, 1, 1);
  vm.defineNative("error-object?", isErrorObject, 1, 1);
  vm.defineNative("error-object-message", errorObjectMessage, 1, 1);
  vm.defineNative("error-object-irritants", errorObjectIrritants, 1, 1);
  vm.defineHandlerFrames();
}

}  // namespace dlam::prim
