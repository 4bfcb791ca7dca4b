/* Prints the layout of every struct of the official dlpack.h and the value of every
 * constant, one fact per line, in the format dlpack-rs/tests/abi_layout.rs prints for the
 * Rust side:
 *
 *   size   <Type> <bytes>
 *   align  <Type> <bytes>
 *   offset <Type>.<field> <bytes>
 *   fsize  <Type>.<field> <bytes>
 *   const  <name> <value>
 *
 * The constants come from consts.inc, which tests/abi/check.sh generates from the header
 * itself (every kDL* enumerator and every version / flag macro), so a constant the header
 * gains is reported without editing this file. */
#include <stddef.h>
#include <stdio.h>

#include "dlpack.h"

#define TYPE(T)                                                  \
  printf("size %s %zu\n", #T, sizeof(T));                        \
  printf("align %s %zu\n", #T, _Alignof(T))

#define FIELD(T, f)                                              \
  printf("offset %s.%s %zu\n", #T, #f, offsetof(T, f));          \
  printf("fsize %s.%s %zu\n", #T, #f, sizeof(((T *)0)->f))

#define CONST(name) printf("const %s %llu\n", #name, (unsigned long long)(name))

int main(void) {
  TYPE(DLPackVersion);
  FIELD(DLPackVersion, major);
  FIELD(DLPackVersion, minor);

  TYPE(DLDeviceType);

  TYPE(DLDevice);
  FIELD(DLDevice, device_type);
  FIELD(DLDevice, device_id);

  TYPE(DLDataType);
  FIELD(DLDataType, code);
  FIELD(DLDataType, bits);
  FIELD(DLDataType, lanes);

  TYPE(DLTensor);
  FIELD(DLTensor, data);
  FIELD(DLTensor, device);
  FIELD(DLTensor, ndim);
  FIELD(DLTensor, dtype);
  FIELD(DLTensor, shape);
  FIELD(DLTensor, strides);
  FIELD(DLTensor, byte_offset);

  TYPE(DLManagedTensor);
  FIELD(DLManagedTensor, dl_tensor);
  FIELD(DLManagedTensor, manager_ctx);
  FIELD(DLManagedTensor, deleter);

  TYPE(DLManagedTensorVersioned);
  FIELD(DLManagedTensorVersioned, version);
  FIELD(DLManagedTensorVersioned, manager_ctx);
  FIELD(DLManagedTensorVersioned, deleter);
  FIELD(DLManagedTensorVersioned, flags);
  FIELD(DLManagedTensorVersioned, dl_tensor);

  TYPE(DLPackManagedTensorAllocator);
  TYPE(DLPackManagedTensorFromPyObjectNoSync);
  TYPE(DLPackManagedTensorToPyObjectNoSync);
  TYPE(DLPackDLTensorFromPyObjectNoSync);
  TYPE(DLPackCurrentWorkStream);

  TYPE(DLPackExchangeAPIHeader);
  FIELD(DLPackExchangeAPIHeader, version);
  FIELD(DLPackExchangeAPIHeader, prev_api);

  TYPE(DLPackExchangeAPI);
  FIELD(DLPackExchangeAPI, header);
  FIELD(DLPackExchangeAPI, managed_tensor_allocator);
  FIELD(DLPackExchangeAPI, managed_tensor_from_py_object_no_sync);
  FIELD(DLPackExchangeAPI, managed_tensor_to_py_object_no_sync);
  FIELD(DLPackExchangeAPI, dltensor_from_py_object_no_sync);
  FIELD(DLPackExchangeAPI, current_work_stream);

#include "consts.inc"
  return 0;
}
