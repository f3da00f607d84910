#ifndef FANOUT_TEST_PARALLELISM_H
#define FANOUT_TEST_PARALLELISM_H

/// How many tests the test bundle runs at once (see parallelism.c).
int fanout_test_parallelism_width(void);

#endif
