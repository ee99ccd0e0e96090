/*
 * The C side of tools/bench/freebsd-pmclog: reads a log with pmclog(3)
 * (FreeBSD's pmclog.c, compiled from $FREEBSD_SRC at benchmark time),
 * from its descriptor (`read`) or mmapped and given whole to pmclog_feed
 * (`feed`), and prints what pmclog-bench's modes of the same names print:
 * records, bytes, seconds, peak RSS (KiB), a checksum.
 */
#include <sys/types.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <pmc.h>
#include <pmclog.h>

static long
peak_rss_kib(void)
{
	char line[256];
	long kib = 0;
	FILE *f = fopen("/proc/self/status", "r");

	if (f == NULL)
		return (0);
	while (fgets(line, sizeof(line), f) != NULL)
		if (strncmp(line, "VmHWM:", 6) == 0)
			kib = strtol(line + 6, NULL, 10);
	fclose(f);
	return (kib);
}

int
main(int argc, char **argv)
{
	struct pmclog_ev ev;
	struct timespec t0, t1;
	uint64_t records = 0, bytes = 0, check = 0;
	void *cookie;
	int fd;

	struct stat st;
	char *map = NULL;
	int feed;

	if (argc != 3 || (strcmp(argv[1], "read") != 0 &&
	    strcmp(argv[1], "feed") != 0)) {
		fprintf(stderr, "usage: freebsd-pmclog read|feed FILE\n");
		return (64);
	}
	feed = strcmp(argv[1], "feed") == 0;
	if ((fd = open(argv[2], O_RDONLY)) < 0 || fstat(fd, &st) < 0) {
		perror(argv[2]);
		return (66);
	}
	if (feed) {
		if (st.st_size > 0x7fffffff) {
			fprintf(stderr, "pmclog_feed takes an int length\n");
			return (64);
		}
		map = mmap(NULL, st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
		if (map == MAP_FAILED) {
			perror("mmap");
			return (71);
		}
	}
	clock_gettime(CLOCK_MONOTONIC, &t0);
	if ((cookie = pmclog_open(feed ? PMCLOG_FD_NONE : fd)) == NULL) {
		perror("pmclog_open");
		return (70);
	}
	if (feed && pmclog_feed(cookie, map, (int)st.st_size) != 0) {
		fprintf(stderr, "pmclog_feed failed\n");
		return (70);
	}
	while (pmclog_read(cookie, &ev) == 0) {
		records++;
		bytes += (uint64_t)ev.pl_len;
		check += (uint64_t)ev.pl_ts.tv_sec;
	}
	clock_gettime(CLOCK_MONOTONIC, &t1);
	if (ev.pl_state != PMCLOG_EOF) {
		fprintf(stderr, "the log did not read to its end (state %d)\n",
		    (int)ev.pl_state);
		return (65);
	}
	pmclog_close(cookie);
	printf("%ju %ju %.3f %ld %ju\n", (uintmax_t)records, (uintmax_t)bytes,
	    (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9,
	    peak_rss_kib(), (uintmax_t)check);
	return (0);
}
