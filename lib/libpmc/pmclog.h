/*-
 * SPDX-License-Identifier: BSD-2-Clause
 *
 * pmclog(3): the reader of hwpmc(4) log files.  The structures below are
 * laid out exactly as in FreeBSD's <pmclog.h> so existing consumers link
 * against the Rust implementation unchanged.
 */

#ifndef _PMCLOG_H_
#define	_PMCLOG_H_

#include <sys/cdefs.h>
#include <sys/types.h>
#include <sys/param.h>
#include <sys/pmclog.h>
#include <time.h>

/*
 * The array sizes are FreeBSD's PATH_MAX and MAXCOMLEN.  The copy of
 * <sys/pmc.h> for other hosts (lib/libpmc/host-include) gives them as
 * __PMC_PATH_MAX and __PMC_MAXCOMLEN, since a host's own PATH_MAX may
 * differ and it may have no MAXCOMLEN.
 */
#ifndef __PMC_PATH_MAX
#define	__PMC_PATH_MAX	PATH_MAX
#endif
#ifndef __PMC_MAXCOMLEN
#define	__PMC_MAXCOMLEN	MAXCOMLEN
#endif

/* Why pmclog_read() returned, in pl_state. */
enum pmclog_state {
	PMCLOG_OK,		/* an event was read */
	PMCLOG_EOF,		/* end of the file or a CLOSELOG record */
	PMCLOG_REQUIRE_DATA,	/* feed more bytes (or retry a nonblocking fd) */
	PMCLOG_ERROR		/* the log is malformed; the parser is done */
};

struct pmclog_ev_callchain {
	uint32_t	pl_pid;
	uint32_t	pl_tid;
	uint32_t	pl_pmcid;
	uint32_t	pl_cpuflags;
	uint32_t	pl_cpuflags2;
	uint32_t	pl_npc;
	uintfptr_t	pl_pc[PMC_CALLCHAIN_DEPTH_MAX];
};

struct pmclog_ev_dropnotify {
};

struct pmclog_ev_closelog {
};

struct pmclog_ev_initialize {
	uint32_t	pl_version;
	uint32_t	pl_arch;
	uint64_t	pl_tsc_freq;
	struct timespec	pl_ts;
	char		pl_cpuid[__PMC_PATH_MAX];
};

struct pmclog_ev_map_in {
	pid_t		pl_pid;
	uintfptr_t	pl_start;
	char		pl_pathname[__PMC_PATH_MAX];
};

struct pmclog_ev_map_out {
	pid_t		pl_pid;
	uintfptr_t	pl_start;
	uintfptr_t	pl_end;
};

/* The record of the V1 ABI that CALLCHAIN replaced; never read now. */
struct pmclog_ev_pcsample {
	uintfptr_t	pl_pc;
	pid_t		pl_pid;
	pid_t		pl_tid;
	pmc_id_t	pl_pmcid;
	uint32_t	pl_flags;
	uint32_t	pl_usermode;
};

struct pmclog_ev_pmcallocate {
	const char	*pl_evname;	/* static storage: do not free */
	uint64_t	pl_rate;
	uint32_t	pl_event;
	uint32_t	pl_flags;
	pmc_id_t	pl_pmcid;
};

struct pmclog_ev_pmcallocatedyn {
	char		pl_evname[PMC_NAME_MAX];
	uint32_t	pl_event;
	uint32_t	pl_flags;
	pmc_id_t	pl_pmcid;
};

struct pmclog_ev_pmcattach {
	pmc_id_t	pl_pmcid;
	pid_t		pl_pid;
	char		pl_pathname[__PMC_PATH_MAX];
};

struct pmclog_ev_pmcdetach {
	pmc_id_t	pl_pmcid;
	pid_t		pl_pid;
};

struct pmclog_ev_proccsw {
	pid_t		pl_pid;
	pid_t		pl_tid;
	pmc_id_t	pl_pmcid;
	pmc_value_t	pl_value;
};

struct pmclog_ev_proccreate {
	pid_t		pl_pid;
	uint32_t	pl_flags;
	char		pl_pcomm[__PMC_MAXCOMLEN + 1];
};

struct pmclog_ev_procexec {
	pid_t		pl_pid;
	pmc_id_t	pl_pmcid;
	uintptr_t	pl_baseaddr;
	uintptr_t	pl_dynaddr;
	char		pl_pathname[__PMC_PATH_MAX];
};

struct pmclog_ev_procexit {
	uint32_t	pl_pid;
	pmc_id_t	pl_pmcid;
	pmc_value_t	pl_value;
};

struct pmclog_ev_procfork {
	pid_t		pl_oldpid;
	pid_t		pl_newpid;
};

struct pmclog_ev_sysexit {
	pid_t		pl_pid;
};

struct pmclog_ev_threadcreate {
	pid_t		pl_tid;
	pid_t		pl_pid;
	uint32_t	pl_flags;
	char		pl_tdname[__PMC_MAXCOMLEN + 1];
};

struct pmclog_ev_threadexit {
	pid_t		pl_tid;
};

struct pmclog_ev_userdata {
	uint32_t	pl_userdata;
};

struct pmclog_ev {
	enum pmclog_state pl_state;	/* outcome of the read */
	off_t		pl_offset;	/* stream offset just past the record */
	size_t		pl_count;	/* records read so far */
	struct timespec	pl_ts;		/* raw timestamp in tv_sec */
	enum pmclog_type pl_type;	/* record type */
	void		*pl_data;	/* record bytes, valid until next read */
	int		pl_len;		/* record length */
	union {
		struct pmclog_ev_callchain	pl_cc;
		struct pmclog_ev_closelog	pl_cl;
		struct pmclog_ev_dropnotify	pl_dn;
		struct pmclog_ev_initialize	pl_i;
		struct pmclog_ev_map_in		pl_mi;
		struct pmclog_ev_map_out	pl_mo;
		struct pmclog_ev_pmcallocate	pl_a;
		struct pmclog_ev_pmcallocatedyn	pl_ad;
		struct pmclog_ev_pmcattach	pl_t;
		struct pmclog_ev_pmcdetach	pl_d;
		struct pmclog_ev_proccsw	pl_c;
		struct pmclog_ev_proccreate	pl_pc;
		struct pmclog_ev_procexec	pl_x;
		struct pmclog_ev_procexit	pl_e;
		struct pmclog_ev_procfork	pl_f;
		struct pmclog_ev_sysexit	pl_se;
		struct pmclog_ev_threadcreate	pl_tc;
		struct pmclog_ev_threadexit	pl_te;
		struct pmclog_ev_userdata	pl_u;
	} pl_u;
};

/* Where FreeBSD's parser is between records. */
enum pmclog_parser_state {
	PL_STATE_NEW_RECORD,		/* at the start of a record */
	PL_STATE_EXPECTING_HEADER,	/* part of a header read */
	PL_STATE_PARTIAL_RECORD,	/* a header read, not all its record */
	PL_STATE_ERROR			/* the log is malformed */
};

/*
 * FreeBSD's parser state, the object its pmclog_open() returns.  This
 * library's pmclog_open() returns a cookie of its own instead, which is
 * not one of these: programs pass the cookie back without looking
 * inside, as pmclog(3) asks.  The declaration is for programs that
 * name the type.
 */
struct pmclog_parse_state {
	enum pmclog_parser_state ps_state;
	enum pmc_cputype	ps_arch;	/* the log's CPU type */
	uint32_t		ps_version;	/* the driver's version */
	int			ps_initialized;	/* INITIALIZE seen */
	int			ps_count;	/* records read */
	off_t			ps_offset;	/* offset in the stream */
	union pmclog_entry	ps_saved;	/* a record read in part */
	int			ps_svcount;	/* its bytes */
	int			ps_fd;		/* descriptor, or -1 */
	char			*ps_buffer;	/* read buffer for ps_fd */
	char			*ps_data;	/* next byte to parse */
	char			*ps_cpuid;	/* the log's CPU key */
	size_t			ps_len;		/* bytes left at ps_data */
};

#define	PMCLOG_FD_NONE	(-1)

__BEGIN_DECLS
void	*pmclog_open(int _fd);
int	pmclog_feed(void *_cookie, char *_data, int _len);
int	pmclog_read(void *_cookie, struct pmclog_ev *_ev);
void	pmclog_close(void *_cookie);
__END_DECLS

#endif /* !_PMCLOG_H_ */
