/*
 * libipt's own decoding of a trace, the anchor of tools/bench/hwt: the
 * loop of Intel's ptxed (instruction flow) and ptdump (packets), without
 * their printing. Debian ships libipt (libipt2, libipt-dev) but not the
 * ptxed and ptdump programs, so this is compiled against Debian's
 * libipt-dev at benchmark time.
 *
 *   hwt-libipt insn TRACE FAMILY MODEL STEPPING FILE SEGMENTS
 *   hwt-libipt pkt TRACE
 *
 * insn: the instruction flow decoder over TRACE with the image of FILE
 * (SEGMENTS: a file of `offset size vaddr` lines, its executable
 * segments), synchronised at the first PSB, every instruction taken with
 * pt_insn_next and every pending event with pt_insn_event, and after an
 * error a resynchronisation at the next PSB, as ptxed does. pkt: the
 * packet decoder, every packet from the first PSB with pt_pkt_next, as
 * ptdump does.
 *
 * Prints `seconds cpu-seconds count sum`: the time of the decoder's
 * set-up and the decode (the trace is read into memory first), the
 * instructions (insn: their IPs summed) or packets (pkt: their sizes
 * summed) decoded.
 */
#include <intel-pt.h>

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double
now(clockid_t clock)
{
	struct timespec ts;

	clock_gettime(clock, &ts);
	return (ts.tv_sec + ts.tv_nsec / 1e9);
}

static uint8_t *
slurp(const char *path, size_t *len)
{
	FILE *f;
	uint8_t *buf;
	long n;

	if ((f = fopen(path, "rb")) == NULL || fseek(f, 0, SEEK_END) != 0 ||
	    (n = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0) {
		perror(path);
		exit(1);
	}
	if ((buf = malloc(n > 0 ? n : 1)) == NULL ||
	    fread(buf, 1, n, f) != (size_t)n) {
		perror(path);
		exit(1);
	}
	fclose(f);
	*len = n;
	return (buf);
}

static void
fail(const char *what, int err)
{
	fprintf(stderr, "hwt-libipt: %s: %s\n", what, pt_errstr(pt_errcode(err)));
	exit(1);
}

/* The instruction flow, as ptxed's decode loop. */
static void
insns(struct pt_config *config, const char *file, const char *segments,
    uint64_t *count, uint64_t *sum)
{
	struct pt_insn_decoder *dec;
	struct pt_image *image;
	struct pt_insn insn;
	struct pt_event event;
	unsigned long long off, size, vaddr;
	uint64_t pos, last = 0;
	FILE *f;
	int status, err;

	dec = pt_insn_alloc_decoder(config);
	if (dec == NULL)
		fail("pt_insn_alloc_decoder", -pte_nomem);
	image = pt_insn_get_image(dec);
	if ((f = fopen(segments, "r")) == NULL) {
		perror(segments);
		exit(1);
	}
	while (fscanf(f, "%llu %llu %llu", &off, &size, &vaddr) == 3) {
		err = pt_image_add_file(image, file, off, size, NULL, vaddr);
		if (err < 0)
			fail("pt_image_add_file", err);
	}
	fclose(f);

	for (;;) {
		status = pt_insn_sync_forward(dec);
		if (status < 0) {
			if (status == -pte_eos)
				break;
			/* ptxed: go on at the next PSB if it moved on. */
			if (pt_insn_get_offset(dec, &pos) < 0 || pos <= last)
				break;
			last = pos;
			continue;
		}
		for (;;) {
			while (status & pts_event_pending) {
				status = pt_insn_event(dec, &event,
				    sizeof(event));
				if (status < 0)
					break;
			}
			if (status < 0 || (status & pts_eos))
				break;
			status = pt_insn_next(dec, &insn, sizeof(insn));
			if (insn.iclass != ptic_error) {
				*count += 1;
				*sum += insn.ip;
			}
			if (status < 0)
				break;
		}
		if (status == -pte_eos || (status >= 0 && (status & pts_eos)))
			break;
	}
	pt_insn_free_decoder(dec);
}

/* Every packet, as ptdump's loop. */
static void
packets(struct pt_config *config, uint64_t *count, uint64_t *sum)
{
	struct pt_packet_decoder *dec;
	struct pt_packet packet;
	int err;

	dec = pt_pkt_alloc_decoder(config);
	if (dec == NULL)
		fail("pt_pkt_alloc_decoder", -pte_nomem);
	err = pt_pkt_sync_forward(dec);
	if (err < 0 && err != -pte_eos)
		fail("pt_pkt_sync_forward", err);
	while (err >= 0) {
		err = pt_pkt_next(dec, &packet, sizeof(packet));
		if (err < 0)
			break;
		*count += 1;
		*sum += packet.size;
	}
	if (err != -pte_eos)
		fail("pt_pkt_next", err);
	pt_pkt_free_decoder(dec);
}

int
main(int argc, char **argv)
{
	struct pt_config config;
	uint8_t *trace;
	size_t len;
	uint64_t count = 0, sum = 0;
	double wall, cpu;
	int err;

	if (argc < 3 || (strcmp(argv[1], "insn") == 0 && argc != 8) ||
	    (strcmp(argv[1], "pkt") == 0 && argc != 3)) {
		fprintf(stderr, "usage: hwt-libipt insn TRACE FAMILY MODEL "
		    "STEPPING FILE SEGMENTS\n       hwt-libipt pkt TRACE\n");
		return (64);
	}
	trace = slurp(argv[2], &len);
	wall = now(CLOCK_MONOTONIC);
	cpu = now(CLOCK_PROCESS_CPUTIME_ID);
	pt_config_init(&config);
	config.begin = trace;
	config.end = trace + len;
	if (strcmp(argv[1], "insn") == 0) {
		config.cpu.vendor = pcv_intel;
		config.cpu.family = strtoul(argv[3], NULL, 0);
		config.cpu.model = strtoul(argv[4], NULL, 0);
		config.cpu.stepping = strtoul(argv[5], NULL, 0);
		err = pt_cpu_errata(&config.errata, &config.cpu);
		if (err < 0)
			fail("pt_cpu_errata", err);
		insns(&config, argv[6], argv[7], &count, &sum);
	} else
		packets(&config, &count, &sum);
	wall = now(CLOCK_MONOTONIC) - wall;
	cpu = now(CLOCK_PROCESS_CPUTIME_ID) - cpu;
	printf("%.6f %.6f %" PRIu64 " %" PRIu64 "\n", wall, cpu, count, sum);
	free(trace);
	return (0);
}
