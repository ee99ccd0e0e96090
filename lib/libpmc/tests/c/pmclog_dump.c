/*
 * A pmclog(3) consumer written as for FreeBSD: reads the log named by its
 * argument with pmclog_open(), pmclog_read() and pmclog_close(), and
 * prints a line per event.  It also names the rest of <pmclog.h>'s and
 * <sys/pmc.h>'s public API (the parser state, the PC sample event, the
 * record union and header macros, the system call's operations), so that
 * it compiles only where those are declared.
 */
#include <sys/types.h>
#include <sys/pmc.h>
#include <sys/pmclog.h>

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pmc.h>
#include <pmclog.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

_Static_assert(sizeof(union pmclog_entry) >= sizeof(struct pmclog_callchain),
    "union pmclog_entry holds the longest record");
_Static_assert(PMC_CALLCHAIN_DEPTH_MAX == 512, "PMC_CALLCHAIN_DEPTH_MAX");
_Static_assert(PMC_CPUID_LEN == 64, "PMC_CPUID_LEN");
_Static_assert(PMC_OP_GETDYNEVENTINFO == 18, "enum pmc_ops");
_Static_assert(PL_STATE_ERROR == 3, "enum pmclog_parser_state");

/* Names from the rest of the API, so that they must be declared. */
static struct pmclog_parse_state parse_state;
static struct pmclog_ev_pcsample pcsample;
static struct pmc_op_getcpuinfo getcpuinfo;
static struct pmc_op_pmcallocate pmcallocate;
static lwpid_t lwpid;
void *api_names[] = { &parse_state, &pcsample, &getcpuinfo, &pmcallocate,
    &lwpid };

int
main(int argc, char **argv)
{
	struct pmclog_ev ev;
	void *log;
	uint32_t header, i;
	int fd;

	if (argc != 2) {
		fprintf(stderr, "usage: pmclog_dump file\n");
		return (64);
	}
	if ((fd = open(argv[1], O_RDONLY)) < 0) {
		fprintf(stderr, "%s: %s\n", argv[1], strerror(errno));
		return (66);
	}
	parse_state.ps_state = PL_STATE_NEW_RECORD;
	if ((log = pmclog_open(fd)) == NULL) {
		fprintf(stderr, "pmclog_open: %s\n", strerror(errno));
		return (70);
	}
	while (pmclog_read(log, &ev) == 0) {
		memcpy(&header, ev.pl_data, sizeof(header));
		if (!PMCLOG_HEADER_CHECK_MAGIC(header) ||
		    PMCLOG_HEADER_TO_TYPE(header) != (uint32_t)ev.pl_type ||
		    PMCLOG_HEADER_TO_LENGTH(header) != (uint32_t)ev.pl_len) {
			printf("bad header %#x\n", header);
			continue;
		}
		printf("%d", ev.pl_type);
		switch (ev.pl_type) {
		case PMCLOG_TYPE_INITIALIZE:
			printf(" version %#x cpuid %s", ev.pl_u.pl_i.pl_version,
			    ev.pl_u.pl_i.pl_cpuid);
			break;
		case PMCLOG_TYPE_PMCATTACH:
			printf(" pid %d %s", ev.pl_u.pl_t.pl_pid,
			    ev.pl_u.pl_t.pl_pathname);
			break;
		case PMCLOG_TYPE_PROCEXEC:
			printf(" pid %d %s", ev.pl_u.pl_x.pl_pid,
			    ev.pl_u.pl_x.pl_pathname);
			break;
		case PMCLOG_TYPE_PROCCSW:
			printf(" pid %d tid %d value %" PRIu64,
			    ev.pl_u.pl_c.pl_pid, ev.pl_u.pl_c.pl_tid,
			    ev.pl_u.pl_c.pl_value);
			break;
		case PMCLOG_TYPE_MAP_IN:
			printf(" pid %d start %#jx %s", ev.pl_u.pl_mi.pl_pid,
			    (uintmax_t)ev.pl_u.pl_mi.pl_start,
			    ev.pl_u.pl_mi.pl_pathname);
			break;
		case PMCLOG_TYPE_CALLCHAIN:
			printf(" pid %u tid %u cpu %u user %u",
			    ev.pl_u.pl_cc.pl_pid, ev.pl_u.pl_cc.pl_tid,
			    PMC_CALLCHAIN_CPUFLAGS_TO_CPU(ev.pl_u.pl_cc.pl_cpuflags),
			    PMC_CALLCHAIN_CPUFLAGS_TO_USERMODE(
			    ev.pl_u.pl_cc.pl_cpuflags));
			for (i = 0; i < ev.pl_u.pl_cc.pl_npc; i++)
				printf(" %#jx", (uintmax_t)ev.pl_u.pl_cc.pl_pc[i]);
			break;
		case PMCLOG_TYPE_THR_CREATE:
			printf(" tid %d %s", ev.pl_u.pl_tc.pl_tid,
			    ev.pl_u.pl_tc.pl_tdname);
			break;
		case PMCLOG_TYPE_PROC_CREATE:
			printf(" pid %d %s", ev.pl_u.pl_pc.pl_pid,
			    ev.pl_u.pl_pc.pl_pcomm);
			break;
		case PMCLOG_TYPE_USERDATA:
			printf(" %#x", ev.pl_u.pl_u.pl_userdata);
			break;
		default:
			break;
		}
		printf("\n");
	}
	printf("end %s\n", ev.pl_state == PMCLOG_EOF ? "eof" :
	    ev.pl_state == PMCLOG_ERROR ? "error" : "other");
	pmclog_close(log);
	close(fd);
	return (0);
}
