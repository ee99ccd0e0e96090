/*
 * What the test programs share: CHECK counts a condition that does not
 * hold and says where, with errno, so that a program reports every
 * failure, not only the first; the harness reads the program's exit
 * status and its last line ("ok").
 */
#ifndef PMC_TEST_CHECK_H
#define	PMC_TEST_CHECK_H

#include <errno.h>
#include <stdio.h>

static int failures;

#define	CHECK(cond) do {						\
	if (!(cond)) {							\
		fprintf(stderr, "%s:%d: failed: %s (errno %d)\n",	\
		    __FILE__, __LINE__, #cond, errno);			\
		failures++;						\
	}								\
} while (0)

/*
 * What main() returns: 1, after saying how many checks failed, or 0 after
 * the "ok" line the harness looks for.
 */
static inline int
checks_result(void)
{
	if (failures != 0) {
		fprintf(stderr, "%d checks failed\n", failures);
		return (1);
	}
	printf("ok\n");
	return (0);
}

#endif /* !PMC_TEST_CHECK_H */
