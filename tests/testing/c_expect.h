/* EXPECT for the C99 tests of the ABI: counts passes and failures, prints a
 * failure with the library's last error. Include once per test program. */
#ifndef ZERO_TESTS_TESTING_C_EXPECT_H_
#define ZERO_TESTS_TESTING_C_EXPECT_H_

#include <stdio.h>
#include <string.h>

#include "zero_c.h"

static int passed = 0, failed = 0;

#define EXPECT(cond)                                                   \
  do {                                                                 \
    if (cond) {                                                        \
      ++passed;                                                        \
    } else {                                                           \
      ++failed;                                                        \
      printf("FAILED %s:%d: %s (last error: %s)\n", __FILE__, __LINE__, \
             #cond, zero_last_error());                                \
    }                                                                  \
  } while (0)

/* The status is `want` and the message mentions `word`. */
static inline int is_error(zero_status got, zero_status want, const char* word) {
  return got == want && strstr(zero_last_error(), word) != NULL;
}

#endif /* ZERO_TESTS_TESTING_C_EXPECT_H_ */
