#include <stdlib.h>
#include "TestParallelism.h"

// How many tests Swift Testing runs at once in this bundle: 4, unless whoever runs the tests
// sets SWT_EXPERIMENTAL_MAXIMUM_PARALLELIZATION_WIDTH. Unbounded, every suite starts at once:
// some hundred tests that start fanout-server processes, PostgreSQL and Chromium, each with
// wall-clock leases, heartbeats and deadlines, on two cores. They starved one another: a quiet
// full run failed 1 to 7 tests, one with two busy loops beside it 4 to 36, each test passing
// alone. Four at a time, the same suite passed quietly (149 s against 122 s) and with the two
// busy loops (176 s). Set before main, so before Swift Testing reads its configuration.
#define FANOUT_TEST_PARALLELISM_WIDTH "4"

__attribute__((constructor)) static void fanout_bound_test_parallelism(void) {
    setenv("SWT_EXPERIMENTAL_MAXIMUM_PARALLELIZATION_WIDTH", FANOUT_TEST_PARALLELISM_WIDTH, 0);
}

int fanout_test_parallelism_width(void) {
    const char *set = getenv("SWT_EXPERIMENTAL_MAXIMUM_PARALLELIZATION_WIDTH");
    return atoi(set ? set : FANOUT_TEST_PARALLELISM_WIDTH);
}
