/*
 * The workloads' small library: the process start after crt0, the
 * memory and string functions the compiler may call, and output helpers.
 */
#include "ksim_workload.h"

int errno;

/*
 * sp points at argc, then argv[] and a NULL, then envp[] and a NULL, then
 * the auxiliary vector.
 */
int
__ksim_start(long *sp)
{
	int argc = (int)sp[0];
	char **argv = (char **)(sp + 1);

	return (main(argc, argv));
}

/*
 * clang turns simple loops into calls to memset and memcpy; these are
 * built with -fno-builtin so that they do not call themselves.
 */
void *
memset(void *dst, int c, size_t len)
{
	unsigned char *d = dst;

	while (len-- > 0)
		*d++ = (unsigned char)c;
	return (dst);
}

void *
memcpy(void *dst, const void *src, size_t len)
{
	unsigned char *d = dst;
	const unsigned char *s = src;

	while (len-- > 0)
		*d++ = *s++;
	return (dst);
}

size_t
strlen(const char *s)
{
	size_t n = 0;

	while (s[n] != '\0')
		n++;
	return (n);
}

void
put_str(const char *s)
{
	write(1, s, strlen(s));
}

void
put_u64(uint64_t v)
{
	char buf[21];
	int i = sizeof(buf);

	do {
		buf[--i] = (char)('0' + v % 10);
		v /= 10;
	} while (v != 0);
	write(1, buf + i, sizeof(buf) - i);
}

uint64_t
arg_u64(int argc, char **argv, int i, uint64_t def)
{
	const char *s;
	uint64_t v = 0;

	if (i >= argc || argv[i] == 0 || argv[i][0] == '\0')
		return (def);
	for (s = argv[i]; *s != '\0'; s++) {
		if (*s < '0' || *s > '9')
			return (def);
		v = v * 10 + (uint64_t)(*s - '0');
	}
	return (v);
}

uint64_t
rand_next(uint64_t *state)
{
	uint64_t x = *state;

	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	*state = x;
	return (x);
}
