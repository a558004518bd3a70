// The element types live with the kernels, the lowest layer.
#ifndef ZERO_CORE_COMMON_DTYPE_H_
#define ZERO_CORE_COMMON_DTYPE_H_
#include "kernels/dtype.h"
#endif  // ZERO_CORE_COMMON_DTYPE_H_
