/* Host shim forced into FreeBSD's pmclog.c (gcc -include) on Linux: the
 * few BSD names glibc lacks. Written for the benchmark (see
 * tools/bench/freebsd-pmclog); tools/pmclog-compat/check uses it too. */
#ifndef BENCH_SHIM_H
#define BENCH_SHIM_H
#include <stddef.h>
#include <string.h>
#include <sys/param.h>
#ifndef MAXCOMLEN
#define MAXCOMLEN 19 /* FreeBSD's command name length */
#endif
#ifndef PMC_EVENT_LAST
#define PMC_EVENT_LAST PMC_EV_SOFT_LAST
#endif
/* strlcpy(3) for glibc before 2.38. */
static inline size_t
bench_strlcpy(char *dst, const char *src, size_t size)
{
	size_t n = strlen(src);
	if (size > 0) {
		size_t c = n < size - 1 ? n : size - 1;
		memcpy(dst, src, c);
		dst[c] = '\0';
	}
	return (n);
}
#define strlcpy bench_strlcpy
#endif
