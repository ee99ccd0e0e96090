/*
 * One canonical line per pmclog(3) event, every field of the event: the
 * same source is built twice by tools/pmclog-compat/check, once with
 * FreeBSD's pmclog.c (and FreeBSD's <pmclog.h>) and once with this
 * project's libpmc (and its <pmclog.h>), and the two outputs must be the
 * same.
 *
 *	print read LOG		pmclog_open(fd) and pmclog_read
 *	print feed CHUNK LOG	pmclog_open(PMCLOG_FD_NONE), the log fed in
 *				pieces of CHUNK bytes with pmclog_feed
 */
#include <sys/types.h>
#include <sys/stat.h>

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <pmc.h>
#include <pmclog.h>

static const char *
type_name(int type)
{
	static const char *const names[] = {
		[PMCLOG_TYPE_CLOSELOG] = "CLOSELOG",
		[PMCLOG_TYPE_DROPNOTIFY] = "DROPNOTIFY",
		[PMCLOG_TYPE_INITIALIZE] = "INITIALIZE",
		[PMCLOG_TYPE_PMCALLOCATE] = "PMCALLOCATE",
		[PMCLOG_TYPE_PMCATTACH] = "PMCATTACH",
		[PMCLOG_TYPE_PMCDETACH] = "PMCDETACH",
		[PMCLOG_TYPE_PROCCSW] = "PROCCSW",
		[PMCLOG_TYPE_PROCEXEC] = "PROCEXEC",
		[PMCLOG_TYPE_PROCEXIT] = "PROCEXIT",
		[PMCLOG_TYPE_PROCFORK] = "PROCFORK",
		[PMCLOG_TYPE_SYSEXIT] = "SYSEXIT",
		[PMCLOG_TYPE_USERDATA] = "USERDATA",
		[PMCLOG_TYPE_MAP_IN] = "MAP_IN",
		[PMCLOG_TYPE_MAP_OUT] = "MAP_OUT",
		[PMCLOG_TYPE_CALLCHAIN] = "CALLCHAIN",
		[PMCLOG_TYPE_PMCALLOCATEDYN] = "PMCALLOCATEDYN",
		[PMCLOG_TYPE_THR_CREATE] = "THR_CREATE",
		[PMCLOG_TYPE_THR_EXIT] = "THR_EXIT",
		[PMCLOG_TYPE_PROC_CREATE] = "PROC_CREATE",
	};

	if (type >= 0 && type < (int)(sizeof(names) / sizeof(names[0])) &&
	    names[type] != NULL)
		return (names[type]);
	return ("?");
}

static const char *
state_name(int state)
{
	switch (state) {
	case PMCLOG_OK:
		return ("ok");
	case PMCLOG_EOF:
		return ("eof");
	case PMCLOG_REQUIRE_DATA:
		return ("require-data");
	case PMCLOG_ERROR:
		return ("error");
	}
	return ("?");
}

/* FNV-1a of the record's bytes, which pl_data and pl_len give. */
static uint32_t
checksum(const void *data, int len)
{
	const unsigned char *p = data;
	uint32_t h = 2166136261u;

	for (int i = 0; i < len; i++)
		h = (h ^ p[i]) * 16777619u;
	return (h);
}

static void
print_event(const struct pmclog_ev *ev)
{
	printf("%s state=%s offset=%jd count=%ju len=%d data=%08" PRIx32
	    " ts=%jd.%09ld", type_name(ev->pl_type), state_name(ev->pl_state),
	    (intmax_t)ev->pl_offset, (uintmax_t)ev->pl_count, ev->pl_len,
	    checksum(ev->pl_data, ev->pl_len), (intmax_t)ev->pl_ts.tv_sec,
	    (long)ev->pl_ts.tv_nsec);
	switch (ev->pl_type) {
	case PMCLOG_TYPE_CALLCHAIN: {
		const struct pmclog_ev_callchain *c = &ev->pl_u.pl_cc;
		unsigned tail = 0;

		/*
		 * Not pl_cpuflags2: FreeBSD 15.0's reader never sets it, so
		 * it holds whatever the union held before.
		 */
		printf(" pid=%u tid=%u pmcid=%#x cpuflags=%#x npc=%u pc=",
		    c->pl_pid, c->pl_tid, c->pl_pmcid, c->pl_cpuflags, c->pl_npc);
		for (uint32_t i = 0; i < c->pl_npc && i < PMC_CALLCHAIN_DEPTH_MAX;
		    i++)
			printf("%s%#jx", i ? "," : "", (uintmax_t)c->pl_pc[i]);
		for (uint32_t i = c->pl_npc; i < PMC_CALLCHAIN_DEPTH_MAX; i++)
			tail += c->pl_pc[i] != 0;
		printf(" nonzero-after-npc=%u", tail);
		break;
	}
	case PMCLOG_TYPE_INITIALIZE: {
		const struct pmclog_ev_initialize *i = &ev->pl_u.pl_i;

		printf(" version=%#x arch=%#x tsc_freq=%ju start=%jd.%09ld"
		    " cpuid=\"%.*s\"", i->pl_version, i->pl_arch,
		    (uintmax_t)i->pl_tsc_freq, (intmax_t)i->pl_ts.tv_sec,
		    (long)i->pl_ts.tv_nsec, (int)sizeof(i->pl_cpuid),
		    i->pl_cpuid);
		break;
	}
	case PMCLOG_TYPE_MAP_IN:
		printf(" pid=%d start=%#jx path=\"%s\"", ev->pl_u.pl_mi.pl_pid,
		    (uintmax_t)ev->pl_u.pl_mi.pl_start,
		    ev->pl_u.pl_mi.pl_pathname);
		break;
	case PMCLOG_TYPE_MAP_OUT:
		printf(" pid=%d start=%#jx end=%#jx", ev->pl_u.pl_mo.pl_pid,
		    (uintmax_t)ev->pl_u.pl_mo.pl_start,
		    (uintmax_t)ev->pl_u.pl_mo.pl_end);
		break;
	case PMCLOG_TYPE_PMCALLOCATE:
		printf(" pmcid=%#x event=%#x flags=%#x rate=%ju evname=\"%s\"",
		    ev->pl_u.pl_a.pl_pmcid, ev->pl_u.pl_a.pl_event,
		    ev->pl_u.pl_a.pl_flags, (uintmax_t)ev->pl_u.pl_a.pl_rate,
		    ev->pl_u.pl_a.pl_evname != NULL ? ev->pl_u.pl_a.pl_evname :
		    "(null)");
		break;
	case PMCLOG_TYPE_PMCALLOCATEDYN:
		printf(" pmcid=%#x event=%#x flags=%#x evname=\"%.*s\"",
		    ev->pl_u.pl_ad.pl_pmcid, ev->pl_u.pl_ad.pl_event,
		    ev->pl_u.pl_ad.pl_flags, (int)sizeof(ev->pl_u.pl_ad.pl_evname),
		    ev->pl_u.pl_ad.pl_evname);
		break;
	case PMCLOG_TYPE_PMCATTACH:
		printf(" pmcid=%#x pid=%d path=\"%s\"", ev->pl_u.pl_t.pl_pmcid,
		    ev->pl_u.pl_t.pl_pid, ev->pl_u.pl_t.pl_pathname);
		break;
	case PMCLOG_TYPE_PMCDETACH:
		printf(" pmcid=%#x pid=%d", ev->pl_u.pl_d.pl_pmcid,
		    ev->pl_u.pl_d.pl_pid);
		break;
	case PMCLOG_TYPE_PROCCSW:
		printf(" pid=%d tid=%d pmcid=%#x value=%ju", ev->pl_u.pl_c.pl_pid,
		    ev->pl_u.pl_c.pl_tid, ev->pl_u.pl_c.pl_pmcid,
		    (uintmax_t)ev->pl_u.pl_c.pl_value);
		break;
	case PMCLOG_TYPE_PROC_CREATE:
		printf(" pid=%d flags=%#x pcomm=\"%.*s\"", ev->pl_u.pl_pc.pl_pid,
		    ev->pl_u.pl_pc.pl_flags, (int)sizeof(ev->pl_u.pl_pc.pl_pcomm),
		    ev->pl_u.pl_pc.pl_pcomm);
		break;
	case PMCLOG_TYPE_PROCEXEC:
		printf(" pid=%d pmcid=%#x base=%#jx dyn=%#jx path=\"%s\"",
		    ev->pl_u.pl_x.pl_pid, ev->pl_u.pl_x.pl_pmcid,
		    (uintmax_t)ev->pl_u.pl_x.pl_baseaddr,
		    (uintmax_t)ev->pl_u.pl_x.pl_dynaddr,
		    ev->pl_u.pl_x.pl_pathname);
		break;
	case PMCLOG_TYPE_PROCEXIT:
		printf(" pid=%u pmcid=%#x value=%ju", ev->pl_u.pl_e.pl_pid,
		    ev->pl_u.pl_e.pl_pmcid, (uintmax_t)ev->pl_u.pl_e.pl_value);
		break;
	case PMCLOG_TYPE_PROCFORK:
		printf(" oldpid=%d newpid=%d", ev->pl_u.pl_f.pl_oldpid,
		    ev->pl_u.pl_f.pl_newpid);
		break;
	case PMCLOG_TYPE_SYSEXIT:
		printf(" pid=%d", ev->pl_u.pl_se.pl_pid);
		break;
	case PMCLOG_TYPE_THR_CREATE:
		printf(" tid=%d pid=%d flags=%#x tdname=\"%.*s\"",
		    ev->pl_u.pl_tc.pl_tid, ev->pl_u.pl_tc.pl_pid,
		    ev->pl_u.pl_tc.pl_flags, (int)sizeof(ev->pl_u.pl_tc.pl_tdname),
		    ev->pl_u.pl_tc.pl_tdname);
		break;
	case PMCLOG_TYPE_THR_EXIT:
		printf(" tid=%d", ev->pl_u.pl_te.pl_tid);
		break;
	case PMCLOG_TYPE_USERDATA:
		printf(" userdata=%#x", ev->pl_u.pl_u.pl_userdata);
		break;
	case PMCLOG_TYPE_CLOSELOG:
	case PMCLOG_TYPE_DROPNOTIFY:
		/* No fields. */
		break;
	}
	printf("\n");
}

static int
usage(void)
{
	fprintf(stderr, "usage: print read LOG | print feed CHUNK LOG\n");
	return (64);
}

int
main(int argc, char **argv)
{
	static struct pmclog_ev ev;	/* zeroed, as fields a reader skips */
	char *data = NULL;
	size_t size = 0, fed = 0, chunk = 0;
	void *parser;
	int fd;

	if (argc == 3 && strcmp(argv[1], "read") == 0) {
		if ((fd = open(argv[2], O_RDONLY)) < 0) {
			perror(argv[2]);
			return (66);
		}
		parser = pmclog_open(fd);
	} else if (argc == 4 && strcmp(argv[1], "feed") == 0) {
		struct stat st;

		chunk = strtoul(argv[2], NULL, 10);
		if (chunk == 0)
			return (usage());
		if ((fd = open(argv[3], O_RDONLY)) < 0 || fstat(fd, &st) < 0) {
			perror(argv[3]);
			return (66);
		}
		size = (size_t)st.st_size;
		/* pmclog_feed keeps a pointer to what it is given. */
		if ((data = malloc(size + 1)) == NULL ||
		    read(fd, data, size) != (ssize_t)size) {
			perror(argv[3]);
			return (66);
		}
		parser = pmclog_open(PMCLOG_FD_NONE);
	} else
		return (usage());
	if (parser == NULL) {
		perror("pmclog_open");
		return (71);
	}
	for (;;) {
		if (pmclog_read(parser, &ev) == 0) {
			print_event(&ev);
			continue;
		}
		if (ev.pl_state == PMCLOG_REQUIRE_DATA && fed < size) {
			size_t n = size - fed < chunk ? size - fed : chunk;

			if (pmclog_feed(parser, data + fed, (int)n) != 0) {
				perror("pmclog_feed");
				return (71);
			}
			fed += n;
			continue;
		}
		break;
	}
	printf("end state=%s offset=%jd count=%ju\n", state_name(ev.pl_state),
	    (intmax_t)ev.pl_offset, (uintmax_t)ev.pl_count);
	pmclog_close(parser);
	free(data);
	return (0);
}
