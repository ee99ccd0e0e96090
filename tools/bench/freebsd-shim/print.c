/*
 * The C side of tools/bench/freebsd-pmcstat: FreeBSD's pmcstat -R print
 * loop (pmcstat_print_log(), cut at build time from $FREEBSD_SRC's
 * usr.sbin/pmcstat/pmcstat_log.c into pmcstat_print_log.c, never copied
 * into this tree) over FreeBSD's pmclog.c, with FreeBSD's pmcstat.h. As
 * `pmcstat -R FILE` does, it opens the log, makes a parser of it, sets
 * the descriptor non-blocking, and prints the log to standard output.
 *
 *   freebsd-pmcstat-print [-p] FILE
 *
 * -p prints %p as FreeBSD's libc does ("0x0" for a null pointer, where
 * glibc prints "(nil)"), for comparing outputs byte for byte. It is off
 * in timed runs: once a conversion is registered, glibc's printf takes
 * its slow path for every call.
 */
#include <sys/types.h>
#include <assert.h>
#include <err.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sysexits.h>
#include <unistd.h>

#include <pmc.h>
#include <pmclog.h>

#include "pmcstat.h"

struct pmcstat_args args;

#include "pmcstat_print_log.c"

#ifdef __GLIBC__
#include <printf.h>

static int
print_pointer(FILE *stream, const struct printf_info *info,
    const void *const *argv)
{
	const void *p = *(const void *const *)argv[0];
	char buf[2 + 2 * sizeof(uintptr_t) + 1];

	snprintf(buf, sizeof(buf), "0x%jx", (uintmax_t)(uintptr_t)p);
	return (fprintf(stream, info->left ? "%-*s" : "%*s", info->width, buf));
}

static int
pointer_arginfo(const struct printf_info *info, size_t n, int *argtypes,
    int *size)
{
	(void)info;
	(void)size;
	if (n > 0)
		argtypes[0] = PA_POINTER;
	return (1);
}
#endif

int
main(int argc, char **argv)
{
	int fd;

	if (argc == 3 && strcmp(argv[1], "-p") == 0) {
#ifdef __GLIBC__
		if (register_printf_specifier('p', print_pointer,
		    pointer_arginfo) != 0)
			err(EX_OSERR, "register_printf_specifier");
#endif
		argv++;
		argc--;
	}
	if (argc != 2) {
		fprintf(stderr, "usage: freebsd-pmcstat-print [-p] FILE\n");
		return (EX_USAGE);
	}
	if ((fd = open(argv[1], O_RDONLY)) < 0)
		err(EX_OSERR, "ERROR: Cannot open \"%s\" for reading", argv[1]);
	if ((args.pa_logparser = pmclog_open(fd)) == NULL)
		err(EX_OSERR, "ERROR: Cannot create parser");
	if (fcntl(fd, F_SETFL, O_NONBLOCK) < 0)
		err(EX_OSERR, "ERROR: fcntl(2) failed");
	args.pa_printfile = stdout;
	/* A regular file is read to its end in one call. */
	while (pmcstat_print_log() == PMCSTAT_RUNNING)
		;
	return (0);
}
